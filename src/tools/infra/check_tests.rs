//! `bosun infra check` on the example overlay and on copies of it edited
//! as a platform engineer would (or would get wrong).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::check::{Overlay, Problem, check};
use super::consumers;
use super::tests::default_files;

fn example() -> Overlay {
    Overlay::from_rendered(&default_files())
}

/// The example overlay with every value an environment must set, set.
fn filled() -> Overlay {
    let mut overlay = example();
    let config = overlay
        .text("config.yaml")
        .replace(
            "00000000-0000-0000-0000-000000000000",
            "3f1c9a0e-5b7d-4c2a-9e8f-1a2b3c4d5e6f",
        )
        .replace(
            "<databaseClientId of the Bicep deployment>",
            "0b5c8e1a-3f2d-4c7b-9e6a-5d4c3b2a1f00",
        );
    overlay.set("config.yaml", config);
    let kustomization = overlay.text("kustomization.yaml").replace(
        super::kubernetes::EXAMPLE_DIGEST,
        "sha256:4bf5e0a1c9d3b6e2f7a8c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1",
    );
    overlay.set("kustomization.yaml", kustomization);
    let secrets = overlay
        .text("secrets.env")
        .replace("POSTGRES_HOST", "contoso-bosun.postgres.database.azure.com")
        .replace("<a PAT with Packaging read and write>", "pat-value")
        .replace("<an Argo CD API token>", "argocd-token");
    overlay.set("secrets.env", secrets);
    let mut identities = String::new();
    for line in overlay.text(super::kubernetes::IDENTITIES_FILE).lines() {
        match line.split_once("azure.workload.identity/client-id: <") {
            Some((indent, _)) => {
                identities.push_str(indent);
                identities.push_str("azure.workload.identity/client-id: 6c8d1e2f-0a1b-4c3d-8e9f-0a1b2c3d4e5f\n");
            }
            None => {
                identities.push_str(line);
                identities.push('\n');
            }
        }
    }
    overlay.set(super::kubernetes::IDENTITIES_FILE, identities);
    overlay
}

fn fields(problems: &[Problem]) -> Vec<String> {
    problems
        .iter()
        .map(|problem| format!("{}: {}", problem.file, problem.field))
        .collect()
}

#[test]
fn the_example_overlay_names_every_value_left_to_set() {
    let problems = check(&example(), &consumers()).unwrap();
    let fields = fields(&problems);
    assert!(
        fields.contains(&"kustomization.yaml: images[0].digest".to_owned()),
        "{fields:?}"
    );
    assert!(
        fields.contains(&"secrets.env: BOSUN_DATABASE_URL".to_owned()),
        "{fields:?}"
    );
    assert!(
        fields.contains(&"config.yaml: BOSUN_ACR_SUBSCRIPTION".to_owned()),
        "{fields:?}"
    );
    assert!(
        fields.contains(&"secrets.env: BOSUN_ARTIFACTS_PAT".to_owned()),
        "{fields:?}"
    );
    assert!(
        fields.contains(&"secrets.env: BOSUN_ARGOCD_TOKEN".to_owned()),
        "{fields:?}"
    );
    let accounts = fields
        .iter()
        .filter(|field| field.starts_with("identities.yaml: bosun-"))
        .count();
    assert_eq!(
        accounts,
        consumers().len() + 1,
        "every consumer's ServiceAccount and the API's: {fields:?}"
    );
    assert!(
        !fields
            .iter()
            .any(|field| consumers().iter().any(|c| field.ends_with(&format!(": {}", c.name)))),
        "the example's settings build every consumer: {problems:#?}"
    );
}

#[test]
fn a_filled_overlay_is_ready() {
    let problems = check(&filled(), &consumers()).unwrap();
    assert!(problems.is_empty(), "{problems:#?}");
}

/// bosun takes `sb://NAME.servicebus.windows.net/`, KEDA would take `sb://NAME`.
#[test]
fn a_namespace_keda_would_misread_is_named() {
    for namespace in [
        "sb://contoso-bosun.servicebus.windows.net/",
        "https://contoso-bosun.servicebus.windows.net",
    ] {
        let mut overlay = filled();
        let config = overlay.text("config.yaml").replace(
            "BOSUN_SERVICEBUS_NAMESPACE: contoso-bosun",
            &format!("BOSUN_SERVICEBUS_NAMESPACE: {namespace}"),
        );
        overlay.set("config.yaml", config);
        let problems = check(&overlay, &consumers()).unwrap();
        assert_eq!(
            fields(&problems),
            ["config.yaml: BOSUN_SERVICEBUS_NAMESPACE"],
            "{namespace}: {problems:#?}"
        );
        assert!(problems[0].message.contains("KEDA"), "{}", problems[0].message);
    }
    for namespace in ["contoso-bosun", "contoso-bosun.servicebus.windows.net"] {
        let mut overlay = filled();
        let config = overlay.text("config.yaml").replace(
            "BOSUN_SERVICEBUS_NAMESPACE: contoso-bosun",
            &format!("BOSUN_SERVICEBUS_NAMESPACE: {namespace}"),
        );
        overlay.set("config.yaml", config);
        assert!(check(&overlay, &consumers()).unwrap().is_empty(), "{namespace}");
    }
}

/// A setting the Azure consumers need, missing from the overlay, is named
/// with each consumer that needs it.
#[test]
fn a_missing_setting_is_named_with_the_consumers_that_need_it() {
    let mut overlay = filled();
    let config: String = overlay
        .text("config.yaml")
        .lines()
        .filter(|line| !line.contains("BOSUN_AZURE_DEVOPS_ORG_URL"))
        .map(|line| format!("{line}\n"))
        .collect();
    overlay.set("config.yaml", config);
    let problems = check(&overlay, &consumers()).unwrap();
    assert!(!problems.is_empty());
    for problem in &problems {
        assert!(problem.message.contains("BOSUN_AZURE_DEVOPS_ORG_URL"), "{problem:#?}");
    }
}

#[test]
fn an_overlay_that_does_not_parse_is_an_error_naming_the_file() {
    let mut overlay = filled();
    overlay.set("config.yaml", "data: [unclosed\n".to_owned());
    let err = check(&overlay, &consumers()).unwrap_err();
    assert!(err.to_string().contains("config.yaml"), "{err}");
}

/// A copy of an older overlay keeps its password URL in `secrets.env`;
/// with the base's Entra ID sign-in the pods would refuse it, and the
/// check says so first, naming both settings and not the password.
#[test]
fn a_password_url_beside_entra_id_sign_in_is_named() {
    let mut overlay = filled();
    let secrets = overlay
        .text("secrets.env")
        .replace("postgres://bosun-database@", "postgres://bosun:s3cret@");
    overlay.set("secrets.env", secrets);
    let problems = check(&overlay, &consumers()).unwrap();
    assert_eq!(fields(&problems), ["config.yaml: settings"], "{problems:#?}");
    let message = &problems[0].message;
    assert!(
        message.contains("BOSUN_DATABASE_URL") && message.contains("BOSUN_DATABASE_AUTH"),
        "{message}"
    );
    assert!(!message.contains("s3cret"), "{message}");
}
