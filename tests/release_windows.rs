//! Promotion windows and holds through the real binary: a deny window
//! that is open when dev is provisioned delays dev's promotion until it
//! ends (the release says until when); a hold placed from the command line
//! keeps prod waiting after its approval; an override needs its own right
//! and is refused to whoever requested the release; a release manager's
//! override lets it through and is recorded; every hold and lift is a
//! version in the policy's history.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use common::{api_accepted, api_command, api_key, api_request, bosun, eventually, run, run_json, serve_with_http};

const TENANT: &str = "acme";

/// How long dev's freeze lasts from the test's start: long enough for the
/// release to reach dev's promotion inside it on a loaded machine.
const FREEZE: Duration = Duration::from_secs(30);

fn release(data: &Path, release_id: &str) -> Value {
    run_json(data, &["releases", "show", release_id, "--tenant", TENANT])
}

fn the_release(data: &Path) -> Option<Value> {
    let sagas = run_json(data, &["sagas", "list", "--kind", "release"]);
    sagas.as_array()?.first().cloned()
}

fn cli(data: &Path, operator: &str, args: &[&str]) -> std::process::Output {
    bosun(data)
        .env("BOSUN_OPERATOR", operator)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_freeze_delays_dev_a_hold_keeps_prod_and_an_override_lets_it_through() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let env = [
        ("BOSUN_RELEASE_ENVIRONMENTS", "dev,prod"),
        ("BOSUN_AUTO_APPROVE", "dev"),
    ];
    let (agent, agent_id) = api_key(
        data,
        TENANT,
        "commands:send,deliveries:read",
        "release agent",
        Some("cli:dana"),
    );
    let (alice, alice_id) = api_key(data, TENANT, "releases:approve", "alice", None);
    let (carol, carol_id) = api_key(data, TENANT, "releases:override", "carol", None);

    // dev is frozen from now for FREEZE (a yearly cron at this second, in UTC).
    let start = OffsetDateTime::now_utc().replace_nanosecond(0).unwrap();
    let freeze_ends = start + FREEZE;
    let schedule = format!(
        "{} {} {} {} {} *",
        start.second(),
        start.minute(),
        start.hour(),
        start.day(),
        u8::from(start.month())
    );
    let policy = json!({
        "windows": [{"name": "dev-freeze", "kind": "deny", "environments": ["dev"], "schedule": schedule,
                     "durationSeconds": FREEZE.as_secs(), "timeZone": "UTC"}]
    });
    let set = run_json(
        data,
        &[
            "releases",
            "policy",
            "set",
            "--tenant",
            TENANT,
            "--document",
            &policy.to_string(),
            "--reason",
            "freeze dev",
        ],
    );
    assert_eq!(set["version"], 1, "{set:#}");
    let held = cli(
        data,
        "ops",
        &[
            "releases",
            "hold",
            "prod",
            "--reason",
            "INC-42 under way",
            "--tenant",
            TENANT,
        ],
    );
    assert!(held.status.success(), "{}", String::from_utf8_lossy(&held.stderr));

    let (server, url) = serve_with_http(data, &env, None);
    let first = api_accepted(
        &url,
        &agent,
        "ProvisionRepository",
        &json!({"name": "payments-api", "description": "windows"}),
        None,
    );
    let correlation = first["correlationId"].as_str().unwrap().to_owned();
    api_accepted(
        &url,
        &agent,
        "CreateCommit",
        &json!({"repository": "payments-api", "branch": "main", "message": "Initial commit",
                "files": [{"path": "README.md", "content": "# payments-api\n"}]}),
        Some(&correlation),
    );
    // Sent after the first commit is in (a branch needs its base).
    eventually("the first commit is in", Duration::from_secs(120), || {
        let shown = run_json(data, &["deliveries", "show", &correlation]);
        shown["messages"]
            .as_array()?
            .iter()
            .any(|m| m["messageType"] == "CommitCreated")
            .then_some(())
    });
    api_accepted(
        &url,
        &agent,
        "CreateCommit",
        &json!({"repository": "payments-api", "branch": "feature/payments-api", "baseBranch": "main",
                "message": "Add the payments service", "files": bosun::tools::demo::sample_files(false),
                "pullRequestTarget": "main"}),
        Some(&correlation),
    );

    // dev waits for its freeze, and says until when.
    let saga = eventually("dev waits for its freeze", Duration::from_secs(120), || {
        let saga = the_release(data)?;
        (saga["state"]["windowWait"]["environment"] == "dev").then_some(saga)
    });
    assert!(
        OffsetDateTime::now_utc() < freeze_ends,
        "the release reached dev after its freeze ended: the test machine is too slow for FREEZE"
    );
    let release_id = saga["state"]["releaseId"].as_str().unwrap().to_owned();
    let wait = &saga["state"]["windowWait"];
    assert_eq!(wait["rule"], "deny-window", "{saga:#}");
    assert_eq!(wait["window"], "dev-freeze");
    assert_eq!(wait["until"], freeze_ends.format(&Rfc3339).unwrap(), "{saga:#}");
    assert_eq!(saga["state"]["phase"], "provisioning");
    let shown = run(data, &["releases", "show", &release_id, "--tenant", TENANT]);
    assert!(shown.contains("promotion to dev waits (deny-window)"), "{shown}");

    // When the freeze ends dev is promoted; prod, approved, waits on its hold.
    let saga = eventually("prod waits for its approval", Duration::from_secs(120), || {
        let saga = release(data, &release_id);
        (saga["state"]["phase"] == "awaitingApproval").then_some(saga)
    });
    let promoted = saga["state"]["history"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| {
            entry["emitted"]
                .as_array()
                .is_some_and(|emitted| emitted.contains(&json!("DeploymentPromoted")))
        })
        .cloned()
        .unwrap();
    assert_eq!(promoted["messageType"], "ReleaseWindowCheck", "{saga:#}");
    let promoted_at = OffsetDateTime::parse(promoted["at"].as_str().unwrap(), &Rfc3339).unwrap();
    assert!(
        promoted_at >= freeze_ends,
        "promoted at {promoted_at}, inside the freeze"
    );
    api_accepted(
        &url,
        &alice,
        "ApproveRelease",
        &json!({"releaseId": release_id, "environment": "prod"}),
        None,
    );
    let saga = eventually("prod waits on its hold", Duration::from_secs(120), || {
        let saga = release(data, &release_id);
        (saga["state"]["windowWait"]["environment"] == "prod").then_some(saga)
    });
    assert_eq!(saga["state"]["windowWait"]["rule"], "hold", "{saga:#}");
    assert!(
        saga["state"]["windowWait"]["reason"]
            .as_str()
            .unwrap()
            .contains("INC-42 under way")
    );
    assert!(saga["state"]["windowWait"]["until"].is_null());

    let overriding = json!({"releaseId": release_id, "environment": "prod", "reason": "CHG-7: hotfix"});
    // Overriding is its own right: the agent's commands:send is not it.
    let (status, body) = api_command(&url, &agent, "OverrideReleaseWindow", &overriding, None);
    assert_eq!(status, 403, "{body}");
    assert!(body.to_string().contains("releases:override"), "{body}");
    // Dana, for whom the agent acts, overrides from the command line: the
    // release refuses it (dead-lettered, the rule named).
    let output = cli(
        data,
        "dana",
        &[
            "releases",
            "override",
            &release_id,
            "--environment",
            "prod",
            "--reason",
            "mine",
            "--tenant",
            TENANT,
        ],
    );
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let refused = eventually("Dana's override is refused", Duration::from_secs(60), || {
        let listed = run_json(data, &["dead-letters", "list"]);
        listed
            .as_array()?
            .iter()
            .find(|letter| letter["messageType"] == "OverrideReleaseWindow")
            .cloned()
    });
    assert!(refused.to_string().contains("requester-cannot-approve"), "{refused:#}");
    assert_eq!(release(data, &release_id)["state"]["phase"], "provisioning");

    // The release manager's override: promoted and completed, recorded.
    api_accepted(&url, &carol, "OverrideReleaseWindow", &overriding, None);
    let saga = eventually("the release completes", Duration::from_secs(120), || {
        let saga = release(data, &release_id);
        (saga["state"]["phase"] == "completed").then_some(saga)
    });
    let record = &saga["state"]["overrides"]["prod"];
    assert_eq!(record["by"], format!("key:{carol_id} (carol)"), "{saga:#}");
    assert_eq!(record["reason"], "CHG-7: hotfix");
    assert!(saga["state"]["windowWait"].is_null());

    // Lifting the hold is a policy version too.
    let lifted = cli(data, "ops", &["releases", "unhold", "prod", "--tenant", TENANT]);
    assert!(lifted.status.success(), "{}", String::from_utf8_lossy(&lifted.stderr));
    let history = run_json(data, &["releases", "policy", "history", "--tenant", TENANT]);
    let reasons: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|version| version["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasons,
        ["freeze dev", "hold prod: INC-42 under way", "hold on prod lifted"],
        "{history:#}"
    );
    assert_eq!(history[1]["changedBy"], "cli:ops");
    assert!(history[2]["document"].get("holds").is_none(), "{history:#}");

    // The audit log lists every decision in order: who, what, through
    // which door, why.
    let exported = run(data, &["audit", "export", "--tenant", TENANT]);
    let entries: Vec<Value> = exported
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let decisions: Vec<(String, String)> = entries
        .iter()
        .map(|entry| {
            (
                entry["action"].as_str().unwrap().to_owned(),
                entry["environment"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect();
    let expected = [
        ("policy-changed", "-"),
        ("hold-placed", "prod"),
        ("requested", "-"),
        ("approved", "dev"),
        ("waiting-for-window", "dev"),
        ("promoted", "dev"),
        ("deployed", "dev"),
        ("verified", "dev"),
        ("approval-given", "prod"),
        ("approved", "prod"),
        ("waiting-for-window", "prod"),
        ("overridden", "prod"),
        ("promoted", "prod"),
        ("deployed", "prod"),
        ("verified", "prod"),
        ("completed", "-"),
        ("hold-lifted", "prod"),
    ]
    .map(|(action, environment)| (action.to_owned(), environment.to_owned()));
    assert_eq!(decisions, expected, "{exported}");
    let entry = |action: &str, environment: &str| {
        entries
            .iter()
            .find(|entry| entry["action"] == action && entry["environment"].as_str().unwrap_or("-") == environment)
            .unwrap()
    };
    assert_eq!(entry("policy-changed", "-")["door"], "cli:test-operator");
    assert_eq!(entry("hold-placed", "prod")["reason"], "hold prod: INC-42 under way");
    assert_eq!(entry("requested", "-")["door"], "bosun");
    assert_eq!(
        entry("requested", "-")["detail"]["identities"],
        json!([format!("key:{agent_id}"), "cli:dana"])
    );
    assert_eq!(entry("waiting-for-window", "dev")["detail"]["rule"], "deny-window");
    assert_eq!(entry("approval-given", "prod")["door"], format!("api:{alice_id}"));
    assert_eq!(entry("waiting-for-window", "prod")["detail"]["rule"], "hold");
    let overridden = entry("overridden", "prod");
    assert_eq!(overridden["by"], format!("key:{carol_id} (carol)"));
    assert_eq!(overridden["door"], format!("api:{carol_id}"));
    assert_eq!(overridden["reason"], "CHG-7: hotfix");
    let sequences: Vec<u64> = entries
        .iter()
        .map(|entry| entry["sequence"].as_u64().unwrap())
        .collect();
    assert!(sequences.windows(2).all(|pair| pair[0] < pair[1]), "{sequences:?}");
    // Since a time: only what came after it; another tenant's log is empty.
    let since = entry("overridden", "prod")["at"].as_str().unwrap().to_owned();
    let later = run(data, &["audit", "export", "--tenant", TENANT, "--since", &since]);
    assert!(
        later.lines().count() >= 4 && later.lines().count() < entries.len(),
        "{later}"
    );
    assert!(run(data, &["audit", "export", "--tenant", "globex"]).trim().is_empty());
    // Over HTTP, within the tenant's wall.
    let (status, body) = api_request(
        &url,
        &alice,
        reqwest::Method::GET,
        &format!("/v1/tenants/{TENANT}/audit?limit=3"),
        None,
        None,
    );
    assert_eq!(status, 403, "alice's key cannot read: {body}");
    let (reader, _) = api_key(data, TENANT, "deliveries:read", "auditor", None);
    let (status, page) = api_request(
        &url,
        &reader,
        reqwest::Method::GET,
        &format!("/v1/tenants/{TENANT}/audit?limit=3"),
        None,
        None,
    );
    assert_eq!(status, 200, "{page}");
    assert_eq!(page.as_array().unwrap().len(), 3);
    let after = page[2]["sequence"].as_u64().unwrap();
    let (_, next) = api_request(
        &url,
        &reader,
        reqwest::Method::GET,
        &format!("/v1/tenants/{TENANT}/audit?after={after}&limit=3"),
        None,
        None,
    );
    assert_eq!(next[0]["action"], "approved", "{next}");
    let (status, _) = api_request(
        &url,
        &reader,
        reqwest::Method::GET,
        "/v1/tenants/globex/audit",
        None,
        None,
    );
    assert_eq!(status, 404);
    server.terminate();
}
