//! The command line as a user types it: clap's own consistency check, and
//! a table of argument lists and the commands they parse into (or the
//! error clap reports). The printers are tested in their groups' files.

use clap::CommandFactory;
use clap::Parser;
use clap::error::ErrorKind;
use uuid::Uuid;

use super::dead_letters::DeadLetterFilterArgs;
use super::releases::PolicyCommand;
use super::*;

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("bosun").chain(args.iter().copied()))
}

/// A command with no global options.
fn plain(command: Command) -> Cli {
    Cli {
        config: None,
        data_dir: None,
        command,
    }
}

fn some(text: &str) -> Option<String> {
    Some(text.to_owned())
}

#[test]
fn clap_finds_the_definition_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn every_command_parses_into_its_variant_and_fields() {
    let correlation = Uuid::from_u128(0x0191_0000_0000_7000_8000_0000_0000_0042);
    let correlation_text = correlation.to_string();
    let cases: Vec<(Vec<&str>, Cli)> = vec![
        // Servers.
        (
            vec!["serve"],
            plain(Command::Serve(ServeArgs {
                consumers: None,
                http: None,
                ops_addr: None,
            })),
        ),
        (
            vec![
                "serve",
                "--consumers",
                "commit,probe",
                "--http",
                "0.0.0.0:0",
                "--ops-addr",
                "0.0.0.0:9090",
            ],
            plain(Command::Serve(ServeArgs {
                consumers: some("commit,probe"),
                http: some("0.0.0.0:0"),
                ops_addr: Some("0.0.0.0:9090".parse().unwrap()),
            })),
        ),
        (
            vec!["api"],
            plain(Command::Api(ApiArgs {
                http: "127.0.0.1:8080".to_owned(),
                ops_addr: None,
            })),
        ),
        (
            vec!["api", "--http", "0.0.0.0:9000", "--ops-addr", "127.0.0.1:9090"],
            plain(Command::Api(ApiArgs {
                http: "0.0.0.0:9000".to_owned(),
                ops_addr: Some("127.0.0.1:9090".parse().unwrap()),
            })),
        ),
        (vec!["mcp"], plain(Command::Mcp)),
        // Global options go before or after the command.
        (
            vec!["--config", "bosun.toml", "--data-dir", "/var/bosun", "mcp"],
            Cli {
                config: Some("bosun.toml".into()),
                data_dir: Some("/var/bosun".into()),
                command: Command::Mcp,
            },
        ),
        (
            vec!["keys", "list", "--data-dir", "d", "--config", "c.toml"],
            Cli {
                config: Some("c.toml".into()),
                data_dir: Some("d".into()),
                command: Command::Keys {
                    command: KeysCommand::List {
                        expiring: None,
                        json: false,
                    },
                },
            },
        ),
        // Setting up.
        (
            vec!["migrate"],
            plain(Command::Migrate(MigrateArgs {
                database_url: None,
                check: false,
                compatible_only: false,
                force: false,
                json: false,
            })),
        ),
        (
            vec!["migrate", "--compatible-only"],
            plain(Command::Migrate(MigrateArgs {
                database_url: None,
                check: false,
                compatible_only: true,
                force: false,
                json: false,
            })),
        ),
        (
            vec!["migrate", "--check"],
            plain(Command::Migrate(MigrateArgs {
                database_url: None,
                check: true,
                compatible_only: false,
                force: false,
                json: false,
            })),
        ),
        (
            vec!["migrate", "--database-url", "postgres://db/bosun", "--json"],
            plain(Command::Migrate(MigrateArgs {
                database_url: some("postgres://db/bosun"),
                check: false,
                compatible_only: false,
                force: false,
                json: true,
            })),
        ),
        (
            vec!["migrate", "--force"],
            plain(Command::Migrate(MigrateArgs {
                database_url: None,
                check: false,
                compatible_only: false,
                force: true,
                json: false,
            })),
        ),
        (vec!["prune"], plain(Command::Prune(PruneArgs { json: false }))),
        (vec!["prune", "--json"], plain(Command::Prune(PruneArgs { json: true }))),
        (
            vec!["topology", "plan"],
            plain(Command::Topology {
                command: TopologyCommand::Plan { json: false },
            }),
        ),
        (
            vec!["topology", "apply", "--json"],
            plain(Command::Topology {
                command: TopologyCommand::Apply { json: true },
            }),
        ),
        (
            vec!["infra", "render"],
            plain(Command::Infra {
                command: InfraCommand::Render { dir: "infra".into() },
            }),
        ),
        (
            vec!["infra", "render", "/tmp/out"],
            plain(Command::Infra {
                command: InfraCommand::Render { dir: "/tmp/out".into() },
            }),
        ),
        (
            vec![
                "infra",
                "identities",
                "--from-deployment",
                "deployment.json",
                "overlays/prod",
            ],
            plain(Command::Infra {
                command: InfraCommand::Identities {
                    from_deployment: "deployment.json".into(),
                    dir: "overlays/prod".into(),
                },
            }),
        ),
        (
            vec!["keys", "create", "--tenant", "contoso", "--scopes", "admin"],
            plain(Command::Keys {
                command: KeysCommand::Create {
                    tenant: "contoso".to_owned(),
                    scopes: "admin".to_owned(),
                    description: None,
                    sponsor: None,
                    expires_in: None,
                    json: false,
                },
            }),
        ),
        (
            vec![
                "keys",
                "create",
                "--tenant",
                "*",
                "--scopes",
                "deliveries:read,releases:approve:prod",
                "--description",
                "the CI pipeline",
                "--sponsor",
                "cli:dana",
                "--expires-in",
                "30d",
                "--json",
            ],
            plain(Command::Keys {
                command: KeysCommand::Create {
                    tenant: "*".to_owned(),
                    scopes: "deliveries:read,releases:approve:prod".to_owned(),
                    description: some("the CI pipeline"),
                    sponsor: some("cli:dana"),
                    expires_in: Some(std::time::Duration::from_secs(30 * 86_400)),
                    json: true,
                },
            }),
        ),
        (
            vec![
                "releases",
                "approve",
                "payments-api-71cc96bd583b",
                "--environment",
                "prod",
                "--comment",
                "CHG-1234",
                "--tenant",
                "demo",
            ],
            plain(Command::Releases {
                command: ReleasesCommand::Approve {
                    release_id: "payments-api-71cc96bd583b".to_owned(),
                    environment: "prod".to_owned(),
                    comment: some("CHG-1234"),
                    tenant: "demo".to_owned(),
                },
            }),
        ),
        (
            vec![
                "releases",
                "policy",
                "set",
                "--document",
                "@policy.json",
                "--expect-version",
                "3",
            ],
            plain(Command::Releases {
                command: ReleasesCommand::Policy {
                    command: PolicyCommand::Set {
                        document: "@policy.json".to_owned(),
                        reason: None,
                        expect_version: Some(3),
                        tenant: "default".to_owned(),
                        json: false,
                    },
                },
            }),
        ),
        (
            vec!["keys", "rotate", "0123456789ab", "--grace", "2h"],
            plain(Command::Keys {
                command: KeysCommand::Rotate {
                    id: "0123456789ab".to_owned(),
                    grace: std::time::Duration::from_secs(2 * 3600),
                    expires_in: None,
                    json: false,
                },
            }),
        ),
        (
            vec!["keys", "list", "--expiring", "14d"],
            plain(Command::Keys {
                command: KeysCommand::List {
                    expiring: Some(std::time::Duration::from_secs(14 * 86_400)),
                    json: false,
                },
            }),
        ),
        (
            vec!["keys", "revoke", "bsn_0123456789ab", "--json"],
            plain(Command::Keys {
                command: KeysCommand::Revoke {
                    id: "bsn_0123456789ab".to_owned(),
                    json: true,
                },
            }),
        ),
        // The demo and the benchmark, with their defaults.
        (
            vec!["demo"],
            plain(Command::Demo(DemoArgs {
                failing_test: false,
                keep: false,
                timeout: 300,
                tenant: bosun::tools::demo::TENANT.to_owned(),
                json: false,
            })),
        ),
        (
            vec![
                "demo",
                "--failing-test",
                "--keep",
                "--timeout",
                "20",
                "--tenant",
                "fabrikam",
                "--json",
            ],
            plain(Command::Demo(DemoArgs {
                failing_test: true,
                keep: true,
                timeout: 20,
                tenant: "fabrikam".to_owned(),
                json: true,
            })),
        ),
        (
            vec!["bench"],
            plain(Command::Bench(BenchArgs {
                messages: 2000,
                concurrency: vec![1, 8, 32],
                scenarios: vec!["noop".to_owned(), "saga".to_owned(), "latency".to_owned()],
                latency_runs: 200,
                backlog: 0,
                saga_keys: 16,
                timeout: 600,
                database_url: None,
                json: false,
            })),
        ),
        (
            vec![
                "bench",
                "--messages",
                "10",
                "--concurrency",
                "4,16",
                "--scenarios",
                "saga",
                "--backlog",
                "50000",
                "--saga-keys",
                "1",
                "--latency-runs",
                "30",
                "--timeout",
                "5",
                "--database-url",
                "postgres://db/bench",
                "--json",
            ],
            plain(Command::Bench(BenchArgs {
                messages: 10,
                concurrency: vec![4, 16],
                scenarios: vec!["saga".to_owned()],
                latency_runs: 30,
                backlog: 50000,
                saga_keys: 1,
                timeout: 5,
                database_url: some("postgres://db/bench"),
                json: true,
            })),
        ),
        // Sending and following.
        (
            vec!["send", "ProvisionRepository", "--payload", r#"{"name":"a"}"#],
            plain(Command::Send(SendArgs {
                message_type: "ProvisionRepository".to_owned(),
                payload: r#"{"name":"a"}"#.to_owned(),
                correlation_id: None,
                tenant: "default".to_owned(),
                traceparent: None,
                tracestate: None,
                json: false,
            })),
        ),
        (
            vec![
                "send",
                "ProvisionRepository",
                "--payload",
                "{}",
                "--traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "--tracestate",
                "vendor=1",
            ],
            plain(Command::Send(SendArgs {
                message_type: "ProvisionRepository".to_owned(),
                payload: "{}".to_owned(),
                correlation_id: None,
                tenant: "default".to_owned(),
                traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned()),
                tracestate: Some("vendor=1".to_owned()),
                json: false,
            })),
        ),
        (
            vec![
                "send",
                "ApproveRelease",
                "--payload",
                "@-",
                "--correlation-id",
                &correlation_text,
                "--tenant",
                "contoso",
                "--json",
            ],
            plain(Command::Send(SendArgs {
                message_type: "ApproveRelease".to_owned(),
                payload: "@-".to_owned(),
                correlation_id: Some(correlation),
                tenant: "contoso".to_owned(),
                traceparent: None,
                tracestate: None,
                json: true,
            })),
        ),
        (
            vec!["deliveries", "show", "corr-1", "--json"],
            plain(Command::Deliveries {
                command: DeliveriesCommand::Show {
                    correlation_id: "corr-1".to_owned(),
                    json: true,
                },
            }),
        ),
        // Dead letters.
        (
            vec!["dead-letters", "list"],
            plain(Command::DeadLetters {
                command: DeadLettersCommand::List {
                    filter: DeadLetterFilterArgs::default(),
                    include_replayed: false,
                    json: false,
                },
            }),
        ),
        (
            vec![
                "dead-letters",
                "list",
                "--consumer",
                "commit",
                "--type",
                "CreateCommit",
                "--since",
                "2h",
                "--include-replayed",
                "--json",
            ],
            plain(Command::DeadLetters {
                command: DeadLettersCommand::List {
                    filter: DeadLetterFilterArgs {
                        consumer: some("commit"),
                        message_type: some("CreateCommit"),
                        since: some("2h"),
                    },
                    include_replayed: true,
                    json: true,
                },
            }),
        ),
        (
            vec!["dead-letters", "show", "0191"],
            plain(Command::DeadLetters {
                command: DeadLettersCommand::Show {
                    id: "0191".to_owned(),
                    json: false,
                },
            }),
        ),
        (
            vec!["dead-letters", "replay", "0191", "0192", "--rate", "2.5"],
            plain(Command::DeadLetters {
                command: DeadLettersCommand::Replay {
                    edit: false,
                    payload: None,
                    ids: vec!["0191".to_owned(), "0192".to_owned()],
                    all: false,
                    group: None,
                    filter: DeadLetterFilterArgs::default(),
                    rate: Some(2.5),
                    json: false,
                },
            }),
        ),
        (
            vec!["dead-letters", "replay", "--all", "--consumer", "commit", "--json"],
            plain(Command::DeadLetters {
                command: DeadLettersCommand::Replay {
                    edit: false,
                    payload: None,
                    ids: vec![],
                    all: true,
                    group: None,
                    filter: DeadLetterFilterArgs {
                        consumer: some("commit"),
                        ..Default::default()
                    },
                    rate: None,
                    json: true,
                },
            }),
        ),
        (
            vec!["dead-letters", "replay", "--group", "0123456789abcdef", "--rate", "5"],
            plain(Command::DeadLetters {
                command: DeadLettersCommand::Replay {
                    edit: false,
                    payload: None,
                    ids: vec![],
                    all: false,
                    group: some("0123456789abcdef"),
                    filter: DeadLetterFilterArgs::default(),
                    rate: Some(5.0),
                    json: false,
                },
            }),
        ),
        (
            vec!["dead-letters", "groups", "--consumer", "commit", "--json"],
            plain(Command::DeadLetters {
                command: DeadLettersCommand::Groups {
                    filter: DeadLetterFilterArgs {
                        consumer: some("commit"),
                        ..Default::default()
                    },
                    all: false,
                    json: true,
                },
            }),
        ),
        (
            vec!["dead-letters", "ack", "0123456789abcdef", "--note", "INC-5"],
            plain(Command::DeadLetters {
                command: DeadLettersCommand::Ack {
                    fingerprint: "0123456789abcdef".to_owned(),
                    note: some("INC-5"),
                },
            }),
        ),
        (
            vec!["dead-letters", "purge", "0191"],
            plain(Command::DeadLetters {
                command: DeadLettersCommand::Purge {
                    ids: vec!["0191".to_owned()],
                    all: false,
                    group: None,
                    filter: DeadLetterFilterArgs::default(),
                    yes: false,
                    json: false,
                },
            }),
        ),
        (
            vec!["dead-letters", "purge", "--all", "--since", "7d", "--yes", "--json"],
            plain(Command::DeadLetters {
                command: DeadLettersCommand::Purge {
                    ids: vec![],
                    all: true,
                    group: None,
                    filter: DeadLetterFilterArgs {
                        since: some("7d"),
                        ..Default::default()
                    },
                    yes: true,
                    json: true,
                },
            }),
        ),
        // Sagas and schemas.
        (
            vec!["sagas", "list", "--kind", "release"],
            plain(Command::Sagas {
                command: SagasCommand::List {
                    kind: some("release"),
                    json: false,
                },
            }),
        ),
        (
            vec!["sagas", "diagram", "gitops"],
            plain(Command::Sagas {
                command: SagasCommand::Diagram {
                    kind: "gitops".to_owned(),
                },
            }),
        ),
        (
            vec!["sagas", "show", "release", "payments-api-1", "--json"],
            plain(Command::Sagas {
                command: SagasCommand::Show {
                    kind: "release".to_owned(),
                    key: "payments-api-1".to_owned(),
                    json: true,
                },
            }),
        ),
        (
            vec!["schema", "export", "schemas/"],
            plain(Command::Schema {
                command: SchemaCommand::Export { dir: "schemas/".into() },
            }),
        ),
    ];
    for (args, expected) in cases {
        match parse(&args) {
            Ok(parsed) => assert_eq!(parsed, expected, "bosun {args:?}"),
            Err(err) => panic!("bosun {args:?} does not parse: {err}"),
        }
    }
}

#[test]
fn wrong_command_lines_get_the_error_clap_reports() {
    let cases: &[(&[&str], ErrorKind)] = &[
        (&[], ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand),
        (&["--data-dir", "d"], ErrorKind::MissingSubcommand),
        (&["topology"], ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand),
        (&["frobnicate"], ErrorKind::InvalidSubcommand),
        (&["deadletters", "list"], ErrorKind::InvalidSubcommand),
        (
            &["dead-letters", "replay", "0191", "--all"],
            ErrorKind::ArgumentConflict,
        ),
        (&["dead-letters", "purge", "0191", "--all"], ErrorKind::ArgumentConflict),
        (
            &["dead-letters", "replay", "--rate", "fast"],
            ErrorKind::ValueValidation,
        ),
        (&["dead-letters", "list", "--since"], ErrorKind::InvalidValue),
        (&["send", "CreateCommit"], ErrorKind::MissingRequiredArgument),
        (
            &["send", "CreateCommit", "--payload", "{}", "--correlation-id", "nope"],
            ErrorKind::ValueValidation,
        ),
        (
            &["keys", "create", "--tenant", "contoso"],
            ErrorKind::MissingRequiredArgument,
        ),
        (&["keys", "revoke"], ErrorKind::MissingRequiredArgument),
        (&["bench", "--concurrency", "1,x"], ErrorKind::ValueValidation),
        (&["demo", "--timeout", "soon"], ErrorKind::ValueValidation),
        (&["demo", "--timeout", "-1"], ErrorKind::UnknownArgument),
        (&["sagas", "show", "release"], ErrorKind::MissingRequiredArgument),
        (&["schema", "export"], ErrorKind::MissingRequiredArgument),
        (&["serve", "--json"], ErrorKind::UnknownArgument),
        (&["--version"], ErrorKind::DisplayVersion),
        (&["dead-letters", "--help"], ErrorKind::DisplayHelp),
    ];
    for (args, kind) in cases {
        match parse(args) {
            Ok(parsed) => panic!("bosun {args:?} parsed: {parsed:?}"),
            Err(err) => assert_eq!(err.kind(), *kind, "bosun {args:?}: {err}"),
        }
    }
}

#[test]
fn only_demo_and_bench_set_up_their_own_logging() {
    let own: Vec<bool> = [
        vec!["demo"],
        vec!["bench"],
        vec!["serve"],
        vec!["mcp"],
        vec!["dead-letters", "list"],
        vec!["schema", "export", "d"],
    ]
    .iter()
    .map(|args| parse(args).map(|cli| cli.command.sets_up_its_own_logging()).unwrap())
    .collect();
    assert_eq!(own, [true, true, false, false, false, false]);
}

#[test]
fn the_top_level_help_lists_every_command_in_order() {
    let names: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|command| command.get_name().to_owned())
        .collect();
    assert_eq!(
        names,
        [
            "serve",
            "api",
            "mcp",
            "topology",
            "infra",
            "keys",
            "demo",
            "bench",
            "migrate",
            "fleet",
            "consumers",
            "prune",
            "send",
            "deliveries",
            "dead-letters",
            "audit",
            "releases",
            "sagas",
            "schema",
            "version"
        ]
    );
}
