//! The command line's habits, through the binary: read-only commands on a
//! data directory with no bosun data say so and create nothing; output to a
//! closed pipe ends quietly; `deliveries list` filters by status and time;
//! a tenant's second demo on one directory is refused at once; the operator
//! falls back to the account's name; id prefixes (of dead letters and
//! deliveries) are taken only when they are unambiguous; `infra check`
//! names what an overlay leaves to set.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Output, Stdio};
use std::time::Duration;

use common::{Server, bosun, eventually, run, run_json};
use serde_json::Value;

fn output(data: &std::path::Path, args: &[&str]) -> Output {
    bosun(data)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("bosun runs")
}

fn probe(data: &std::path::Path, tenant: &str) -> String {
    let sent = run_json(
        data,
        &[
            "send",
            "Probe",
            "--tenant",
            tenant,
            "--payload",
            r#"{"group": "habits", "sequence": 1}"#,
        ],
    );
    sent["correlationId"].as_str().unwrap().to_owned()
}

#[test]
fn read_only_commands_on_a_directory_without_bosun_data_say_so_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("mistyped");
    for args in [
        &["deliveries", "list"][..],
        &["deliveries", "show", "01936f7e-8a3b-7c4d-9e5f-0123456789ac"],
        &["dead-letters", "list"],
        &["dead-letters", "show", "0193"],
        &["sagas", "list"],
        &["keys", "list"],
    ] {
        let out = bosun(dir.path())
            .env("BOSUN_DATA_DIR", &missing)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded: {stderr}");
        assert!(
            stderr.contains("no bosun data") && stderr.contains(&missing.display().to_string()),
            "{args:?}: {stderr}"
        );
        assert!(!missing.exists(), "{args:?} created {}", missing.display());
    }
    // An existing directory that holds no store is no bosun data either.
    let empty = tempfile::tempdir().unwrap();
    let out = output(empty.path(), &["dead-letters", "list"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("state.db"));
    assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 0, "nothing created");
}

#[test]
fn output_to_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    probe(data, "contoso");
    for args in [&["deliveries", "list"][..], &["deliveries", "list", "--json"]] {
        let mut child = bosun(data)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes away before bosun writes (as `| head` does once
        // it has its lines).
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {} {stderr}", out.status);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{stderr}"
        );
    }
}

#[test]
fn deliveries_list_filters_by_status_and_time() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let mut server = Server::start(data, &[], &["--consumers", "probe,commit"]);
    server.wait_for_line("receiving", Duration::from_secs(30));
    let probed = probe(data, "contoso");
    // A commit to a repository that does not exist: retried, then
    // dead-lettered.
    let commit = r##"{"repository": "nowhere", "branch": "main", "message": "m", "files": [{"path": "README.md", "content": "# x\n"}]}"##;
    let sent = run_json(
        data,
        &["send", "CreateCommit", "--tenant", "fabrikam", "--payload", commit],
    );
    let committed = sent["correlationId"].as_str().unwrap().to_owned();
    let status_of = |listed: &Value, id: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["correlationId"] == id)
            .map(|d| d["status"].as_str().unwrap().to_owned())
    };
    eventually("both deliveries settle", Duration::from_secs(60), || {
        let listed = run_json(data, &["deliveries", "list"]);
        (status_of(&listed, &probed).as_deref() == Some("completed")
            && status_of(&listed, &committed).as_deref() == Some("failed"))
        .then_some(())
    });
    let listed = run_json(data, &["deliveries", "list"]);
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed:#}");
    assert_eq!(listed[0]["correlationId"], committed, "newest first: {listed:#}");
    assert_eq!(listed[0]["tenantId"], "fabrikam");
    assert_eq!(listed[0]["messageType"], "CreateCommit");
    assert_eq!(listed[0]["startedBy"], "cli:test-operator");

    let failed = run_json(data, &["deliveries", "list", "--status", "failed"]);
    assert_eq!(failed.as_array().unwrap().len(), 1, "{failed:#}");
    assert_eq!(failed[0]["correlationId"], committed);
    let completed = run_json(data, &["deliveries", "list", "--status", "completed"]);
    assert_eq!(completed.as_array().unwrap().len(), 1, "{completed:#}");
    assert_eq!(completed[0]["correlationId"], probed);
    let recent = run_json(data, &["deliveries", "list", "--since", "1h"]);
    assert_eq!(recent.as_array().unwrap().len(), 2);
    let future = run_json(data, &["deliveries", "list", "--since", "2999-01-01T00:00:00Z"]);
    assert_eq!(future, serde_json::json!([]));
    let one = run_json(data, &["deliveries", "list", "--limit", "1"]);
    assert_eq!(one.as_array().unwrap().len(), 1);

    let text = run(data, &["deliveries", "list"]);
    assert!(text.starts_with("CORRELATION ID"), "{text}");
    assert!(text.contains(&committed) && text.contains("failed"), "{text}");

    for bad in [&["--status", "done"][..], &["--since", "yesterday"]] {
        let mut args = vec!["deliveries", "list"];
        args.extend_from_slice(bad);
        let out = output(data, &args);
        assert!(!out.status.success(), "{bad:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(bad[0]), "{bad:?}: {stderr}");
    }
    server.terminate();
}

#[test]
fn a_second_demo_of_a_tenant_on_one_directory_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let first = probe(data, "demo");
    let out = bosun(data)
        .args(["demo", "--timeout", "600", "--data-dir"])
        .arg(data)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("tenant `demo`") && stderr.contains(&first) && stderr.contains("--tenant"),
        "{stderr}"
    );
}

#[test]
fn the_operator_is_the_account_name_when_user_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let account = std::process::Command::new("id").arg("-un").output().unwrap();
    let account = String::from_utf8(account.stdout).unwrap().trim().to_owned();
    assert!(!account.is_empty());
    let sent = bosun(data)
        .env_remove("BOSUN_OPERATOR")
        .env("USER", "")
        .env_remove("LOGNAME")
        .args([
            "send",
            "Probe",
            "--tenant",
            "contoso",
            "--payload",
            r#"{"group": "who", "sequence": 1}"#,
            "--json",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(sent.status.success(), "{}", String::from_utf8_lossy(&sent.stderr));
    let listed = run_json(data, &["deliveries", "list"]);
    assert_eq!(listed[0]["startedBy"], format!("cli:{account}"), "{listed:#}");
}

#[test]
fn an_ambiguous_id_prefix_is_refused_naming_the_candidates_and_a_full_id_works() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let mut server = Server::start(data, &[], &["--consumers", "commit"]);
    server.wait_for_line("receiving", Duration::from_secs(30));
    let commit = r##"{"repository": "nowhere", "branch": "main", "message": "m", "files": [{"path": "README.md", "content": "# x\n"}]}"##;
    for _ in 0..2 {
        run_json(
            data,
            &["send", "CreateCommit", "--tenant", "contoso", "--payload", commit],
        );
    }
    let dead = eventually("both commits are dead-lettered", Duration::from_secs(60), || {
        let listed = run_json(data, &["dead-letters", "list"]);
        (listed.as_array()?.len() == 2).then_some(listed)
    });
    server.terminate();
    let ids: Vec<String> = dead
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect();
    // UUIDv7 ids begin with their time: ids of one minute mostly share
    // their first 8 digits (the README's examples use whole ids for this).
    let shared = ids[0].chars().zip(ids[1].chars()).take_while(|(a, b)| a == b).count();
    assert!(shared >= 4, "{ids:?}");
    let prefix = &ids[0][..shared.min(8)];
    let out = output(data, &["dead-letters", "show", prefix]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ambiguous") && stderr.contains(&ids[0]) && stderr.contains(&ids[1]),
        "{stderr}"
    );
    for id in &ids {
        let shown = run_json(data, &["dead-letters", "show", id]);
        assert_eq!(shown["id"], id.as_str());
    }
}

#[test]
fn deliveries_show_takes_a_unique_prefix_and_lists_the_deliveries_an_ambiguous_one_begins() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let ids = [probe(data, "contoso"), probe(data, "fabrikam")];
    // UUIDv7 correlation ids begin with their time: two sent a moment
    // apart share their first 8 digits or so.
    let shared = ids[0].chars().zip(ids[1].chars()).take_while(|(a, b)| a == b).count();
    assert!(shared >= 4, "{ids:?}");
    let prefix = &ids[0][..shared.min(8)];
    let out = output(data, &["deliveries", "show", prefix]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("delivery `{prefix}` is ambiguous")),
        "{stderr}"
    );
    for id in &ids {
        // A line each, with when it started and its status.
        assert!(
            stderr
                .lines()
                .any(|line| line.starts_with(&format!("  {id} (started ")) && line.ends_with(", in-progress)")),
            "{id}: {stderr}"
        );
    }
    // One more digit tells them apart, in JSON and as text.
    for (id, other) in [(&ids[0], &ids[1]), (&ids[1], &ids[0])] {
        let unique = &id[..=shared];
        let shown = run_json(data, &["deliveries", "show", unique]);
        assert_eq!(shown["correlationId"], id.as_str(), "{unique}");
        assert_eq!(shown["messages"][0]["messageType"], "Probe");
        let text = run(data, &["deliveries", "show", &unique.to_uppercase()]);
        // The outcome's sentence first, then the delivery it is about.
        assert!(text.starts_with("In progress: "), "{text}");
        assert!(text.contains(&format!("\ndelivery {id}  (in-progress)")), "{text}");
        assert!(!text.contains(other.as_str()), "{text}");
    }
    let out = output(data, &["deliveries", "show", "ffffffff"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no delivery") && stderr.contains("`ffffffff`"),
        "{stderr}"
    );
}

/// `bosun infra check DIR`: the example overlay as rendered exits 1 naming
/// what is left to set (text and JSON); a copy with every value set exits 0.
#[test]
fn infra_check_names_what_an_overlay_leaves_and_passes_a_filled_one() {
    let data = tempfile::tempdir().unwrap();
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("infra/kubernetes/overlays/example");
    let example_arg = example.to_str().unwrap();
    let refused = output(data.path(), &["infra", "check", example_arg]);
    assert_eq!(refused.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&refused.stdout);
    assert!(stdout.contains("kustomization.yaml: images[0].digest: "), "{stdout}");
    assert!(stdout.contains("secrets.env: BOSUN_DATABASE_URL: "), "{stdout}");
    let json = output(data.path(), &["infra", "check", example_arg, "--json"]);
    assert_eq!(json.status.code(), Some(1));
    let problems: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(problems["problems"].as_array().unwrap().len() > 15, "{problems}");

    let copy = data.path().join("prod");
    std::fs::create_dir_all(&copy).unwrap();
    for entry in std::fs::read_dir(&example).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let text = text
            .replace(
                "sha256:0000000000000000000000000000000000000000000000000000000000000000",
                "sha256:4bf5e0a1c9d3b6e2f7a8c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1",
            )
            .replace(
                "00000000-0000-0000-0000-000000000000",
                "3f1c9a0e-5b7d-4c2a-9e8f-1a2b3c4d5e6f",
            )
            .replace("POSTGRES_HOST", "contoso-bosun.postgres.database.azure.com")
            .replace(
                "<databaseClientId of the Bicep deployment>",
                "0b5c8e1a-3f2d-4c7b-9e6a-5d4c3b2a1f00",
            )
            .replace("<a PAT with Packaging read and write>", "pat-value")
            .replace("<an Argo CD API token>", "argocd-token");
        let text: String = text
            .lines()
            .map(|line| match line.split_once("azure.workload.identity/client-id: <") {
                Some((indent, _)) => {
                    format!("{indent}azure.workload.identity/client-id: 6c8d1e2f-0a1b-4c3d-8e9f-0a1b2c3d4e5f\n")
                }
                None => format!("{line}\n"),
            })
            .collect();
        std::fs::write(copy.join(path.file_name().unwrap()), text).unwrap();
    }
    let ready = output(data.path(), &["infra", "check", copy.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&ready.stdout);
    assert!(
        ready.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&ready.stderr)
    );
    assert!(stdout.contains("is ready to apply"), "{stdout}");
}
