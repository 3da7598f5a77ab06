//! Release governance through the real binary: an agent's key fires a
//! delivery over the HTTP API and tries to approve its own release to prod
//! (refused, the rule named), as does the person it acts for; an outsider
//! and an approval without a change ticket are refused; two of the three
//! release board members approve and the release completes, naming both.
//! The tenant's approval policy is set, shown and audited from the command
//! line and read over the API, within the tenant's wall.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use common::{api_key as key, api_request as request, bosun, eventually, run, run_json, serve_with_http};

const TENANT: &str = "acme";

fn command(url: &str, key: &str, message_type: &str, payload: &Value, correlation: Option<&str>) -> Value {
    let (status, body) = request(
        url,
        key,
        reqwest::Method::POST,
        &format!("/v1/commands/{message_type}"),
        Some(payload),
        correlation,
    );
    assert_eq!(status, 202, "{message_type}: {body}");
    body
}

/// Waits until `message_type` of the delivery is handled.
fn handled(data: &Path, correlation: &str, message_type: &str) {
    eventually(&format!("{message_type} is handled"), Duration::from_secs(120), || {
        let output = bosun(data)
            .args(["deliveries", "show", correlation, "--json"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let shown: Value = serde_json::from_slice(&output.stdout).ok()?;
        let messages = shown["messages"].as_array()?;
        messages
            .iter()
            .any(|message| message["messageType"] == message_type && message["status"] == "completed")
            .then_some(())
    });
}

/// The tenant's one release saga, as `bosun releases show --json` prints it.
fn release(data: &Path, release_id: &str) -> Value {
    run_json(data, &["releases", "show", release_id, "--tenant", TENANT])
}

/// `bosun releases approve` as operator `operator`.
fn approve_as(data: &Path, operator: &str, release_id: &str, comment: &str) {
    let output = bosun(data)
        .env("BOSUN_OPERATOR", operator)
        .args([
            "releases",
            "approve",
            release_id,
            "--environment",
            "prod",
            "--tenant",
            TENANT,
            "--comment",
            comment,
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

/// Waits until the release has `count` refused approvals; the last one.
fn refused(data: &Path, release_id: &str, count: usize) -> Value {
    eventually(
        &format!("{count} approvals are refused"),
        Duration::from_secs(60),
        || {
            let saga = release(data, release_id);
            let refused = saga["state"]["refusedApprovals"].as_array()?.clone();
            (refused.len() >= count).then(|| refused[count - 1].clone())
        },
    )
}

#[test]
fn an_agent_never_approves_its_own_release_and_two_of_the_board_do() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let env = [
        ("BOSUN_RELEASE_ENVIRONMENTS", "dev,prod"),
        ("BOSUN_AUTO_APPROVE", "dev"),
    ];

    // The agent acts for Dana, and may approve (it holds the right): the
    // policy is what stops it.
    let (agent, agent_id) = key(
        data,
        TENANT,
        "commands:send,deliveries:read,releases:approve",
        "release agent",
        Some("cli:dana"),
    );
    let (alice, alice_id) = key(data, TENANT, "releases:approve,deliveries:read", "alice", None);
    let (bob, bob_id) = key(data, TENANT, "releases:approve", "bob", None);
    let (_, carol_id) = key(data, TENANT, "releases:approve", "carol", None);
    let (outsider, _) = key(data, TENANT, "releases:approve", "outsider", None);
    let (other_tenant, _) = key(data, "globex", "deliveries:read", "globex reader", None);

    let policy = json!({
        "groups": {"release-board": [format!("key:{alice_id}"), format!("key:{bob_id}"), format!("key:{carol_id}"), "cli:dana"]},
        "environments": {"prod": {"requiredApprovals": 2, "approverGroups": ["release-board"], "commentPattern": "^CHG-[0-9]+"}}
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
            "CAB: two approvals for prod",
        ],
    );
    assert_eq!(set["version"], 1, "{set:#}");
    assert_eq!(set["changedBy"], "cli:test-operator");
    // A policy no release could satisfy is refused, naming the field.
    let mut impossible = policy.clone();
    impossible["environments"]["prod"]["requiredApprovals"] = json!(5);
    let output = bosun(data)
        .args([
            "releases",
            "policy",
            "set",
            "--tenant",
            TENANT,
            "--document",
            &impossible.to_string(),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("environments.prod.requiredApprovals"), "{stderr}");

    let (server, url) = serve_with_http(data, &env, None);

    // The agent fires the delivery over the API.
    let first = command(
        &url,
        &agent,
        "ProvisionRepository",
        &json!({"name": "payments-api", "description": "governed"}),
        None,
    );
    let correlation = first["correlationId"].as_str().unwrap().to_owned();
    handled(data, &correlation, "ProvisionRepository");
    command(
        &url,
        &agent,
        "CreateCommit",
        &json!({"repository": "payments-api", "branch": "main", "message": "Initial commit",
                "files": [{"path": "README.md", "content": "# payments-api\n"}]}),
        Some(&correlation),
    );
    handled(data, &correlation, "CreateCommit");
    command(
        &url,
        &agent,
        "CreateCommit",
        &json!({"repository": "payments-api", "branch": "feature/payments-api", "baseBranch": "main",
                "message": "Add the payments service", "files": bosun::tools::demo::sample_files(false),
                "pullRequestTarget": "main"}),
        Some(&correlation),
    );

    let release_id = eventually("the release waits for prod", Duration::from_secs(240), || {
        let sagas = run_json(data, &["sagas", "list", "--kind", "release"]);
        let saga = sagas.as_array()?.first()?.clone();
        (saga["state"]["phase"] == "awaitingApproval" && saga["state"]["currentEnvironment"] == "prod")
            .then(|| saga["state"]["releaseId"].as_str().unwrap().to_owned())
    });
    let saga = release(data, &release_id);
    let requested_by = json!([format!("key:{agent_id}"), "cli:dana"]);
    assert_eq!(saga["state"]["requestedBy"], requested_by, "{saga:#}");
    let waiting = &saga["state"]["waitingFor"];
    assert_eq!(
        (waiting["required"].as_u64(), waiting["stillNeeded"].as_u64()),
        (Some(2), Some(2)),
        "{saga:#}"
    );
    assert_eq!(waiting["policyVersion"], 1);

    let approval = |comment: &str| json!({"releaseId": release_id, "environment": "prod", "comment": comment});
    // 1. The agent approves its own release: refused, the rule named.
    command(&url, &agent, "ApproveRelease", &approval("CHG-1"), None);
    let refusal = refused(data, &release_id, 1);
    assert_eq!(refusal["rule"], "requester-cannot-approve", "{refusal:#}");
    assert!(
        refusal["approver"]
            .as_str()
            .unwrap()
            .starts_with(&format!("key:{agent_id}"))
    );
    // 2. Dana, for whom the agent acts, from the command line: refused too.
    approve_as(data, "dana", &release_id, "CHG-1");
    assert_eq!(refused(data, &release_id, 2)["rule"], "requester-cannot-approve");
    // 3. Someone outside the release board.
    command(&url, &outsider, "ApproveRelease", &approval("CHG-1"), None);
    assert_eq!(refused(data, &release_id, 3)["rule"], "approver-group");
    // 4. Alice, without a change ticket.
    command(&url, &alice, "ApproveRelease", &approval("looks good"), None);
    assert_eq!(refused(data, &release_id, 4)["rule"], "comment-pattern");
    // 5. Alice with one: counted, one more needed.
    command(&url, &alice, "ApproveRelease", &approval("CHG-1234"), None);
    let saga = eventually("Alice's approval counts", Duration::from_secs(60), || {
        let saga = release(data, &release_id);
        (saga["state"]["waitingFor"]["stillNeeded"] == 1).then_some(saga)
    });
    assert_eq!(saga["state"]["phase"], "awaitingApproval");
    let shown = run(data, &["releases", "show", &release_id, "--tenant", TENANT]);
    assert!(shown.contains("1 of 2 approvals given, 1 more needed"), "{shown}");
    assert!(shown.contains("rule requester-cannot-approve"), "{shown}");
    // 6. Bob: the second approval; the release goes on to prod and completes.
    command(&url, &bob, "ApproveRelease", &approval("CHG-1234"), None);
    let saga = eventually("the release completes", Duration::from_secs(180), || {
        let saga = release(data, &release_id);
        (saga["state"]["phase"] == "completed").then_some(saga)
    });
    let approvers: Vec<String> = saga["state"]["approvals"]["prod"]["approvers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|approver| approver.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        approvers,
        [format!("key:{alice_id} (alice)"), format!("key:{bob_id} (bob)")],
        "{saga:#}"
    );
    assert_eq!(saga["state"]["refusedApprovals"].as_array().unwrap().len(), 4);

    // The policy over the API, within the tenant's wall, and its history.
    let path = format!("/v1/tenants/{TENANT}/release-policy");
    let (status, body) = request(&url, &alice, reqwest::Method::GET, &path, None, None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["version"], 1);
    assert_eq!(body["document"]["environments"]["prod"]["requiredApprovals"], 2);
    let (status, mine) = request(&url, &other_tenant, reqwest::Method::GET, &path, None, None);
    let (missing_status, missing) = request(
        &url,
        &other_tenant,
        reqwest::Method::GET,
        "/v1/tenants/nobody/release-policy",
        None,
        None,
    );
    assert_eq!((status, missing_status), (404, 404), "{mine} {missing}");
    assert_eq!(
        mine["error"]["message"].as_str().unwrap().replace(TENANT, "T"),
        missing["error"]["message"].as_str().unwrap().replace("nobody", "T"),
        "another tenant's policy reads as one that does not exist"
    );
    // Changing it needs admin.
    let put = json!({"document": policy, "reason": "again"});
    let (status, body) = request(&url, &alice, reqwest::Method::PUT, &path, Some(&put), None);
    assert_eq!(status, 403, "{body}");
    let history = run_json(data, &["releases", "policy", "history", "--tenant", TENANT]);
    assert_eq!(history.as_array().unwrap().len(), 1, "{history:#}");
    assert_eq!(history[0]["reason"], "CAB: two approvals for prod");
    server.terminate();
}
