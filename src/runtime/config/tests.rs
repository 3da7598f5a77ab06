//! Settings tests: defaults, every source, every invalid value named.

use super::*;

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

#[test]
fn defaults() {
    let settings = Settings::from_sources(&map(&[]), &map(&[])).unwrap();
    assert_eq!(settings.data_dir, PathBuf::from(".bosun"));
    assert_eq!(settings.retry_base_delay, Duration::from_secs(1));
    assert_eq!(settings.adapters, AdapterKind::Local);
    assert_eq!(settings.consumers, None);
}

#[test]
fn service_bus_settings() {
    let emulator = "Endpoint=sb://127.0.0.1:5673;SharedAccessKeyName=RootManageSharedAccessKey;\
                    SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true";
    let settings = Settings::from_sources(
        &map(&[
            ("BOSUN_TRANSPORT", "servicebus"),
            ("BOSUN_SERVICEBUS_CONNECTION_STRING", emulator),
            ("BOSUN_SERVICEBUS_PREFETCH", "4"),
        ]),
        &map(&[]),
    )
    .unwrap();
    assert_eq!(settings.transport, TransportKind::ServiceBus);
    let servicebus = settings.servicebus.unwrap();
    assert_eq!(servicebus.endpoint.amqp_url(), "amqp://127.0.0.1:5673");
    assert_eq!(servicebus.prefetch, 4);
    assert!(servicebus.verify_topology);
    assert_eq!(servicebus.management_url, None);
    let elsewhere = Settings::from_sources(
        &map(&[
            ("BOSUN_TRANSPORT", "servicebus"),
            ("BOSUN_SERVICEBUS_CONNECTION_STRING", emulator),
            ("BOSUN_SERVICEBUS_MANAGEMENT_URL", "http://127.0.0.1:5300/"),
        ]),
        &map(&[]),
    )
    .unwrap();
    assert_eq!(
        elsewhere.servicebus.unwrap().management_url.as_deref(),
        Some("http://127.0.0.1:5300")
    );
    let entra = Settings::from_sources(
        &map(&[
            ("BOSUN_TRANSPORT", "servicebus"),
            ("BOSUN_SERVICEBUS_NAMESPACE", "contoso"),
            ("BOSUN_SERVICEBUS_AUTH", "workload-identity"),
        ]),
        &map(&[]),
    )
    .unwrap();
    assert_eq!(
        entra.servicebus.unwrap().endpoint.host,
        "contoso.servicebus.windows.net"
    );
    for (env, named) in [
        (vec![("BOSUN_TRANSPORT", "servicebus")], "BOSUN_TRANSPORT"),
        (
            vec![
                ("BOSUN_TRANSPORT", "servicebus"),
                (
                    "BOSUN_SERVICEBUS_CONNECTION_STRING",
                    "Endpoint=sb://x/;SharedAccessKey=secret",
                ),
            ],
            "SharedAccessKeyName",
        ),
        (
            vec![
                ("BOSUN_TRANSPORT", "servicebus"),
                ("BOSUN_SERVICEBUS_NAMESPACE", "contoso"),
                ("BOSUN_SERVICEBUS_AUTH", "password"),
            ],
            "BOSUN_SERVICEBUS_AUTH",
        ),
        (
            vec![
                ("BOSUN_TRANSPORT", "servicebus"),
                ("BOSUN_SERVICEBUS_NAMESPACE", "contoso"),
                ("BOSUN_SERVICEBUS_MANAGEMENT_URL", "127.0.0.1:5300"),
            ],
            "BOSUN_SERVICEBUS_MANAGEMENT_URL",
        ),
    ] {
        let err = Settings::from_sources(&map(&env), &map(&[])).unwrap_err().to_string();
        assert!(err.contains(named), "{err}");
        assert!(!err.contains("secret"), "{err}");
    }
}

#[test]
fn environment_overrides_file() {
    let env = map(&[("BOSUN_DATA_DIR", "/env"), ("BOSUN_RETRY_BASE_DELAY_MS", "10")]);
    let file = map(&[("BOSUN_DATA_DIR", "/file"), ("BOSUN_CONCURRENCY", "3")]);
    let settings = Settings::from_sources(&env, &file).unwrap();
    assert_eq!(settings.data_dir, PathBuf::from("/env"));
    assert_eq!(settings.retry_base_delay, Duration::from_millis(10));
    assert_eq!(settings.concurrency, 3);
}

#[test]
fn bad_values_name_the_setting() {
    let err = Settings::from_sources(&map(&[("BOSUN_RETRY_BASE_DELAY_MS", "soon")]), &map(&[])).unwrap_err();
    assert!(err.to_string().contains("BOSUN_RETRY_BASE_DELAY_MS"), "{err}");
    let err = Settings::from_sources(&map(&[("BOSUN_CONSUMERS", "commit,billing")]), &map(&[])).unwrap_err();
    assert!(err.to_string().contains("billing"), "{err}");
    let err = Settings::from_sources(&map(&[("BOSUN_ADAPTERS", "azure")]), &map(&[])).unwrap_err();
    assert!(err.to_string().contains("BOSUN_AZURE_DEVOPS_ORG_URL"), "{err}");
}

#[test]
fn azure_devops_project_may_name_a_project_per_tenant() {
    let env = |project: &str| {
        map(&[
            ("BOSUN_ADAPTERS", "azure"),
            ("BOSUN_AZURE_DEVOPS_ORG_URL", "https://dev.azure.com/contoso"),
            ("BOSUN_AZURE_DEVOPS_PROJECT", project),
            ("BOSUN_AZURE_DEVOPS_PAT", "pat"),
        ])
    };
    for project in ["delivery", "delivery-{tenant}", "{tenant}"] {
        let settings = Settings::from_sources(&env(project), &map(&[])).unwrap();
        let AdapterKind::Azure(azure) = settings.adapters else {
            panic!("azure adapters expected");
        };
        assert_eq!(azure.project, project);
    }
    for project in ["delivery-{team}", "delivery-{tenant", "delivery}"] {
        let err = Settings::from_sources(&env(project), &map(&[])).unwrap_err();
        assert!(err.to_string().contains("BOSUN_AZURE_DEVOPS_PROJECT"), "{err}");
    }
    let err = Settings::from_sources(&env("delivery-{team}"), &map(&[])).unwrap_err();
    assert!(
        err.to_string().contains("`{team}` is not a known template variable"),
        "{err}"
    );
}

#[test]
fn http_limits_have_documented_defaults_and_parse() {
    use crate::runtime::config::{AllowedOrigin, Origin};
    let defaults = Settings::from_sources(&map(&[]), &map(&[])).unwrap().http_limits;
    assert_eq!(defaults, HttpLimits::default());
    assert_eq!(defaults.header_timeout, Duration::from_secs(10));
    assert_eq!(defaults.idle_timeout, Duration::from_secs(75));
    assert_eq!(defaults.max_connections, 4096);
    assert_eq!((defaults.rate_limit_per_second, defaults.rate_limit_burst), (20, 100));
    assert_eq!(defaults.allowed_origins, vec![AllowedOrigin::Loopback]);

    let env = map(&[
        ("BOSUN_HTTP_HEADER_TIMEOUT_MS", "2500"),
        ("BOSUN_HTTP_IDLE_TIMEOUT_MS", " 30000 "),
        ("BOSUN_HTTP_RATE_LIMIT_PER_SECOND", "0"),
        ("BOSUN_HTTP_ALLOWED_ORIGINS", "https://Console.Example.com, loopback"),
    ]);
    let file = map(&[
        ("BOSUN_HTTP_MAX_CONNECTIONS", "300"),
        ("BOSUN_HTTP_RATE_LIMIT_BURST", "7"),
    ]);
    let limits = Settings::from_sources(&env, &file).unwrap().http_limits;
    assert_eq!(limits.header_timeout, Duration::from_millis(2500));
    assert_eq!(limits.idle_timeout, Duration::from_secs(30));
    assert_eq!(limits.max_connections, 300);
    assert_eq!((limits.rate_limit_per_second, limits.rate_limit_burst), (0, 7));
    assert_eq!(
        limits.allowed_origins,
        vec![
            AllowedOrigin::Exact(Origin::parse("https://console.example.com:443").unwrap()),
            AllowedOrigin::Loopback
        ]
    );
    let none = Settings::from_sources(&map(&[("BOSUN_HTTP_ALLOWED_ORIGINS", "none")]), &map(&[])).unwrap();
    assert!(none.http_limits.allowed_origins.is_empty());

    for (name, value, says) in [
        ("BOSUN_HTTP_HEADER_TIMEOUT_MS", "50", "at least 100"),
        ("BOSUN_HTTP_IDLE_TIMEOUT_MS", "soon", "milliseconds"),
        ("BOSUN_HTTP_MAX_CONNECTIONS", "1", "at least 2"),
        ("BOSUN_HTTP_RATE_LIMIT_PER_SECOND", "-1", "whole number"),
        ("BOSUN_HTTP_RATE_LIMIT_PER_SECOND", "99999999999", "too large"),
        ("BOSUN_HTTP_RATE_LIMIT_BURST", "0", "at least 1"),
        ("BOSUN_HTTP_ALLOWED_ORIGINS", "console.example.com", "scheme://host"),
        ("BOSUN_HTTP_ALLOWED_ORIGINS", "https://example.com/path", "no path"),
        ("BOSUN_HTTP_ALLOWED_ORIGINS", " , ", "names no origin"),
    ] {
        let err = Settings::from_sources(&map(&[(name, value)]), &map(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(name) && err.contains(says), "{name}={value}: {err}");
    }
    // A TOML list is a comma list.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bosun.toml");
    std::fs::write(
        &path,
        "http_allowed_origins = [\"http://10.0.0.5:8080\"]\nhttp_max_connections = 64\n",
    )
    .unwrap();
    let limits = Settings::from_sources(
        &map(&[]),
        &read_file(&path, &known_settings(crate::runtime::registry::setting_names())).unwrap(),
    )
    .unwrap()
    .http_limits;
    assert_eq!(limits.max_connections, 64);
    assert_eq!(
        limits.allowed_origins,
        vec![AllowedOrigin::Exact(Origin::parse("http://10.0.0.5:8080").unwrap())]
    );
}

#[test]
fn secrets_are_not_printed() {
    let env = map(&[
        ("BOSUN_ADAPTERS", "azure"),
        ("BOSUN_AZURE_DEVOPS_ORG_URL", "https://dev.azure.com/contoso/"),
        ("BOSUN_AZURE_DEVOPS_PROJECT", "delivery"),
        ("BOSUN_AZURE_DEVOPS_PAT", "super-secret-pat"),
    ]);
    let settings = Settings::from_sources(&env, &map(&[])).unwrap();
    let printed = format!("{settings:?}");
    assert!(!printed.contains("super-secret-pat"), "{printed}");
    assert!(printed.contains("[redacted]"));
}

#[test]
fn toml_file_is_read_and_unknown_keys_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bosun.toml");
    std::fs::write(
        &path,
        "data_dir = \"/srv/bosun\"\nconsumers = [\"commit\", \"repository-provisioning\"]\nconcurrency = 4\n",
    )
    .unwrap();
    let file = read_file(&path, &known_settings(crate::runtime::registry::setting_names())).unwrap();
    let settings = Settings::from_sources(&map(&[]), &file).unwrap();
    assert_eq!(settings.data_dir, PathBuf::from("/srv/bosun"));
    assert_eq!(
        settings.consumers,
        Some(vec!["commit".to_owned(), "repository-provisioning".to_owned()])
    );
    std::fs::write(&path, "dta_dir = \"/x\"\n").unwrap();
    let err = read_file(&path, &known_settings(crate::runtime::registry::setting_names())).unwrap_err();
    assert!(err.to_string().contains("dta_dir"), "{err}");
}

#[test]
fn retention_has_documented_defaults_and_parses() {
    const DAY: Duration = Duration::from_secs(24 * 3600);
    let defaults = Settings::from_sources(&map(&[]), &map(&[])).unwrap().retention;
    assert_eq!(defaults, RetentionSettings::default());
    assert_eq!(defaults.handled, Some(DAY * 14));
    assert_eq!(defaults.outbox_sent, Some(DAY * 7));
    assert_eq!(defaults.timeline, Some(DAY * 30));
    assert_eq!(defaults.completed_sagas, Some(DAY * 30));
    assert_eq!(defaults.interval, Some(Duration::from_secs(300)));
    assert_eq!(defaults.batch, 500);

    let env = map(&[
        ("BOSUN_RETENTION_HANDLED_DAYS", "21"),
        ("BOSUN_RETENTION_OUTBOX_DAYS", "0"),
        ("BOSUN_RETENTION_TIMELINE_DAYS", "90"),
        ("BOSUN_RETENTION_INTERVAL_MS", "0"),
    ]);
    let file = map(&[
        ("BOSUN_RETENTION_COMPLETED_SAGAS_DAYS", "365"),
        ("BOSUN_RETENTION_BATCH", "100"),
    ]);
    let retention = Settings::from_sources(&env, &file).unwrap().retention;
    assert_eq!(retention.handled, Some(DAY * 21));
    assert_eq!(retention.outbox_sent, None, "0 keeps forever");
    assert_eq!(retention.timeline, Some(DAY * 90));
    assert_eq!(retention.completed_sagas, Some(DAY * 365));
    assert_eq!(retention.interval, None, "0 turns background pruning off");
    assert_eq!(retention.batch, 100);

    for (name, value) in [
        ("BOSUN_RETENTION_HANDLED_DAYS", "3"),
        ("BOSUN_RETENTION_TIMELINE_DAYS", "soon"),
        ("BOSUN_RETENTION_BATCH", "0"),
        ("BOSUN_RETENTION_COMPLETED_SAGAS_DAYS", "99999999"),
    ] {
        let err = Settings::from_sources(&map(&[(name, value)]), &map(&[])).unwrap_err();
        assert!(err.to_string().contains(name), "{err}");
    }
}

#[test]
fn ops_address_is_an_ip_and_port() {
    let unset = Settings::from_sources(&map(&[]), &map(&[])).unwrap();
    assert_eq!(unset.ops_addr, None);
    let set = Settings::from_sources(&map(&[("BOSUN_OPS_ADDR", "0.0.0.0:9090")]), &map(&[])).unwrap();
    assert_eq!(set.ops_addr, Some("0.0.0.0:9090".parse().unwrap()));
    let from_file = Settings::from_sources(&map(&[]), &map(&[("BOSUN_OPS_ADDR", "127.0.0.1:0")])).unwrap();
    assert_eq!(from_file.ops_addr, Some("127.0.0.1:0".parse().unwrap()));
    let err = Settings::from_sources(&map(&[("BOSUN_OPS_ADDR", "localhost")]), &map(&[])).unwrap_err();
    assert!(err.to_string().contains("BOSUN_OPS_ADDR"), "{err}");
}

#[test]
fn azure_devops_and_acr_may_take_tokens_from_an_entra_identity() {
    let settings = Settings::from_sources(
        &map(&[
            ("BOSUN_ADAPTERS", "azure"),
            ("BOSUN_AZURE_DEVOPS_ORG_URL", "https://dev.azure.com/contoso"),
            ("BOSUN_AZURE_DEVOPS_PROJECT", "delivery"),
            ("BOSUN_AZURE_DEVOPS_AUTH", "workload-identity"),
            ("BOSUN_ACR_REGISTRY", "contoso.azurecr.io"),
            ("BOSUN_ACR_AUTH", "azure-cli"),
        ]),
        &map(&[]),
    )
    .unwrap();
    let AdapterKind::Azure(azure) = settings.adapters else {
        panic!("azure adapters")
    };
    assert_eq!(azure.entra, Some(EntraIdentity::WorkloadIdentity));
    assert_eq!(
        (azure.pat.clone(), azure.bearer_token.clone()),
        (None, None),
        "no PAT needed"
    );
    assert_eq!(
        azure.acr.unwrap().credential,
        AcrCredential::Entra {
            identity: EntraIdentity::AzureCli,
            tenant: None
        }
    );
    let err = Settings::from_sources(
        &map(&[
            ("BOSUN_ADAPTERS", "azure"),
            ("BOSUN_AZURE_DEVOPS_ORG_URL", "https://dev.azure.com/contoso"),
            ("BOSUN_AZURE_DEVOPS_PROJECT", "delivery"),
            ("BOSUN_AZURE_DEVOPS_AUTH", "password"),
        ]),
        &map(&[]),
    )
    .unwrap_err();
    assert!(err.to_string().contains("BOSUN_AZURE_DEVOPS_AUTH"), "{err}");
}

#[test]
fn container_builder_settings() {
    let defaults = Settings::from_sources(&map(&[]), &map(&[])).unwrap().container;
    assert_eq!(defaults.builder, ContainerBuilderChoice::Auto);
    assert_eq!(defaults.buildah_binary, PathBuf::from("buildah"));
    assert_eq!((defaults.registry, defaults.credential), (None, None));
    assert!(defaults.insecure_registries.is_empty());

    let settings = Settings::from_sources(
        &map(&[
            ("BOSUN_CONTAINER_BUILDER", "buildah"),
            ("BOSUN_BUILDAH_BINARY", "/opt/buildah/bin/buildah"),
            ("BOSUN_CONTAINER_REGISTRY", "registry.contoso.internal:5000"),
            (
                "BOSUN_CONTAINER_INSECURE_REGISTRIES",
                "127.0.0.1:5000, registry.contoso.internal:5000",
            ),
            ("BOSUN_CONTAINER_REGISTRY_USERNAME", "ci"),
            ("BOSUN_CONTAINER_REGISTRY_PASSWORD", "s3cret"),
        ]),
        &map(&[]),
    )
    .unwrap()
    .container;
    assert_eq!(settings.builder, ContainerBuilderChoice::Buildah);
    assert_eq!(settings.buildah_binary, PathBuf::from("/opt/buildah/bin/buildah"));
    assert_eq!(settings.registry.as_deref(), Some("registry.contoso.internal:5000"));
    assert_eq!(
        settings.insecure_registries,
        ["127.0.0.1:5000", "registry.contoso.internal:5000"]
    );
    assert!(!format!("{settings:?}").contains("s3cret"), "the password is redacted");

    for (pairs, named) in [
        (&[("BOSUN_CONTAINER_BUILDER", "docker")][..], "BOSUN_CONTAINER_BUILDER"),
        (
            &[("BOSUN_CONTAINER_BUILDER", "buildah")][..],
            "BOSUN_CONTAINER_REGISTRY",
        ),
        (
            &[("BOSUN_CONTAINER_REGISTRY", "https://x")][..],
            "BOSUN_CONTAINER_REGISTRY",
        ),
        (
            &[("BOSUN_CONTAINER_INSECURE_REGISTRIES", "ok:5000,not a host")][..],
            "BOSUN_CONTAINER_INSECURE_REGISTRIES",
        ),
        (
            &[("BOSUN_CONTAINER_REGISTRY_USERNAME", "ci")][..],
            "BOSUN_CONTAINER_REGISTRY_PASSWORD",
        ),
    ] {
        let err = Settings::from_sources(&map(pairs), &map(&[])).unwrap_err();
        assert!(err.to_string().contains(named), "{pairs:?}: {err}");
    }
}

/// A source that writes down every name it is asked for.
#[derive(Default)]
struct Recording {
    values: BTreeMap<String, String>,
    asked: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl Source for Recording {
    fn get(&self, name: &str) -> Option<String> {
        if let Ok(mut asked) = self.asked.lock() {
            asked.insert(name.to_owned());
        }
        self.values.get(name).cloned()
    }
}

#[test]
fn every_setting_read_is_known_and_every_known_setting_is_read() {
    // Between them, these reach every branch that reads a setting.
    let azure = [
        ("BOSUN_ADAPTERS", "azure"),
        ("BOSUN_AZURE_DEVOPS_ORG_URL", "https://dev.azure.com/contoso"),
        ("BOSUN_AZURE_DEVOPS_PROJECT", "delivery"),
        ("BOSUN_AZURE_DEVOPS_PAT", "pat"),
        ("BOSUN_ACR_REGISTRY", "contoso.azurecr.io"),
        ("BOSUN_ARTIFACTS_URL", "https://pkgs.dev.azure.com/contoso"),
        ("BOSUN_ARGOCD_URL", "https://argocd.contoso.example"),
        ("BOSUN_ARGOCD_TOKEN", "token"),
        ("BOSUN_PULUMI_PROGRAM_DIR", "/srv/pulumi"),
        ("BOSUN_TRANSPORT", "servicebus"),
        ("BOSUN_SERVICEBUS_NAMESPACE", "contoso.servicebus.windows.net"),
    ];
    let configurations: [&[(&str, &str)]; 2] = [
        &[
            ("BOSUN_ACR_USERNAME", "ci"),
            ("BOSUN_ACR_PASSWORD", "secret"),
            ("BOSUN_BLOB_URL", "https://contoso.blob.core.windows.net"),
            ("BOSUN_BLOB_AUTH", "managed-identity"),
        ],
        &[
            ("BOSUN_ACR_AUTH", "workload-identity"),
            ("BOSUN_CONTAINER_BUILDER", "acr-tasks"),
            ("BOSUN_ACR_SUBSCRIPTION", "4385cf00-2d3a-425a-832f-f4285b1c9dce"),
            ("BOSUN_ACR_RESOURCE_GROUP", "delivery"),
            ("BOSUN_BLOB_URL", "https://contoso.blob.core.windows.net"),
            ("BOSUN_BLOB_ACCOUNT_KEY", "a2V5"),
        ],
    ];
    let mut read = std::collections::BTreeSet::new();
    for pairs in configurations {
        let source = Recording {
            values: map(&azure).into_iter().chain(map(pairs)).collect(),
            ..Recording::default()
        };
        if let Err(err) = Settings::from_sources(&source, &BTreeMap::new()) {
            panic!("{pairs:?}: {err}");
        }
        read.extend(source.asked.into_inner().unwrap_or_default());
    }
    let read: Vec<&str> = read
        .iter()
        .map(String::as_str)
        .filter(|name| name.starts_with("BOSUN_"))
        .collect();
    let mut known: Vec<&str> = known_settings(crate::runtime::registry::setting_names());
    known.sort_unstable();
    let unknown: Vec<_> = read.iter().filter(|name| !known.contains(name)).collect();
    assert!(
        unknown.is_empty(),
        "read but neither generic nor a consumer's: {unknown:?}"
    );
    let unread: Vec<_> = known.iter().filter(|name| !read.contains(name)).collect();
    assert!(unread.is_empty(), "known but never read: {unread:?}");
    let declared = known.len();
    known.dedup();
    assert_eq!(known.len(), declared, "a setting is both generic and a consumer's");
}

/// iac-provisioning's program: from each module's repository (`infra`)
/// by default; a configured repository and ref instead; and a folder set
/// yesterday is still the folder.
#[test]
fn the_pulumi_program_defaults_to_the_modules_repository_and_a_program_dir_still_wins() {
    let azure = [
        ("BOSUN_ADAPTERS", "azure"),
        ("BOSUN_AZURE_DEVOPS_ORG_URL", "https://dev.azure.com/contoso"),
        ("BOSUN_AZURE_DEVOPS_PROJECT", "delivery"),
        ("BOSUN_AZURE_DEVOPS_PAT", "pat"),
    ];
    let pulumi = |extra: &[(&str, &str)]| {
        let pairs: Vec<(&str, &str)> = azure.iter().chain(extra).copied().collect();
        match Settings::from_sources(&map(&pairs), &BTreeMap::new()).unwrap().adapters {
            AdapterKind::Azure(azure) => azure.pulumi,
            AdapterKind::Local => panic!("azure adapters"),
        }
    };
    let default = pulumi(&[]);
    assert_eq!(
        (
            default.program_dir,
            default.repository,
            default.reference.as_str(),
            default.path.as_str()
        ),
        (None, None, "main", "infra")
    );
    let configured = pulumi(&[
        ("BOSUN_PULUMI_PROGRAM_REPOSITORY", "platform-infra"),
        ("BOSUN_PULUMI_PROGRAM_REF", "release/2026"),
        ("BOSUN_PULUMI_PROGRAM_PATH", "stacks/payments"),
    ]);
    assert_eq!(configured.repository.as_deref(), Some("platform-infra"));
    assert_eq!(
        (configured.reference.as_str(), configured.path.as_str()),
        ("release/2026", "stacks/payments")
    );
    let yesterday = pulumi(&[("BOSUN_PULUMI_PROGRAM_DIR", "/srv/pulumi")]);
    assert_eq!(yesterday.program_dir, Some(std::path::PathBuf::from("/srv/pulumi")));
}

/// `BOSUN_DATABASE_AUTH`: the URL's password by default; Entra ID tokens
/// of an identity with a URL that names the principal and holds no
/// password; a URL with a password beside it is refused, naming both
/// settings and never the password.
#[test]
fn the_database_signs_in_with_the_urls_password_or_entra_tokens_never_both() {
    use bosun_consumers::delivery::azure::credential::EntraIdCredential;
    let read = |pairs: &[(&str, &str)]| Settings::from_sources(&map(pairs), &map(&[]));
    let with_password = "postgres://bosun:s3cret@db.example.com/bosun?sslmode=require";
    let without = "postgres://bosun-database@db.example.com/bosun?sslmode=require";

    // The password URL still works when the setting is absent.
    let settings = read(&[("BOSUN_DATABASE_URL", with_password)]).unwrap();
    assert_eq!(settings.database_auth, DatabaseAuth::Password);
    assert!(settings.database_auth.credential().is_none());
    let settings = read(&[
        ("BOSUN_DATABASE_URL", with_password),
        ("BOSUN_DATABASE_AUTH", "password"),
    ])
    .unwrap();
    assert_eq!(settings.database_auth, DatabaseAuth::Password);

    let settings = read(&[
        ("BOSUN_DATABASE_URL", without),
        ("BOSUN_DATABASE_AUTH", "workload-identity"),
        ("BOSUN_DATABASE_CLIENT_ID", "0b5c8e1a-3f2d-4c7b-9e6a-5d4c3b2a1f00"),
    ])
    .unwrap();
    assert_eq!(
        settings.database_auth,
        DatabaseAuth::EntraId {
            identity: EntraIdentity::WorkloadIdentity,
            client_id: Some("0b5c8e1a-3f2d-4c7b-9e6a-5d4c3b2a1f00".to_owned()),
        }
    );
    assert!(matches!(
        settings.database_auth.credential(),
        Some(EntraIdCredential::WorkloadIdentityFor { client_id }) if client_id == "0b5c8e1a-3f2d-4c7b-9e6a-5d4c3b2a1f00"
    ));
    let pods_own = read(&[
        ("BOSUN_DATABASE_URL", without),
        ("BOSUN_DATABASE_AUTH", "workload-identity"),
    ])
    .unwrap();
    assert!(matches!(
        pods_own.database_auth.credential(),
        Some(EntraIdCredential::WorkloadIdentity)
    ));
    let managed = read(&[
        ("BOSUN_DATABASE_URL", without),
        ("BOSUN_DATABASE_AUTH", "managed-identity"),
    ])
    .unwrap();
    assert!(matches!(
        managed.database_auth.credential(),
        Some(EntraIdCredential::ManagedIdentity { client_id: None })
    ));

    // A URL with a password and Entra ID: refused, naming both.
    for url in [
        with_password,
        "postgres://bosun-database@db.example.com/bosun?password=s3cret",
    ] {
        let err = read(&[
            ("BOSUN_DATABASE_URL", url),
            ("BOSUN_DATABASE_AUTH", "workload-identity"),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("BOSUN_DATABASE_URL") && err.contains("BOSUN_DATABASE_AUTH") && err.contains("password"),
            "{err}"
        );
        assert!(!err.contains("s3cret"), "the password is never repeated: {err}");
    }
    let cases: [(&[(&str, &str)], &str); 4] = [
        // No user to sign in as.
        (
            &[
                ("BOSUN_DATABASE_URL", "postgres://db.example.com/bosun"),
                ("BOSUN_DATABASE_AUTH", "azure-cli"),
            ],
            "BOSUN_DATABASE_URL",
        ),
        // Entra ID without a database.
        (&[("BOSUN_DATABASE_AUTH", "workload-identity")], "BOSUN_DATABASE_AUTH"),
        // A client id that nothing would use.
        (
            &[
                ("BOSUN_DATABASE_URL", with_password),
                ("BOSUN_DATABASE_CLIENT_ID", "0b5c8e1a"),
            ],
            "BOSUN_DATABASE_CLIENT_ID",
        ),
        (
            &[("BOSUN_DATABASE_URL", without), ("BOSUN_DATABASE_AUTH", "kerberos")],
            "BOSUN_DATABASE_AUTH",
        ),
    ];
    for (pairs, named) in cases {
        let err = read(pairs).unwrap_err().to_string();
        assert!(err.contains(named), "{pairs:?}: {err}");
    }
}
