//! `bosun keys create|list|revoke`: the API keys of the HTTP API, the
//! console and MCP. A key is shown once, when it is made; afterwards only
//! its id.

use std::io::Write;

use anyhow::Result;
use clap::Subcommand;
use time::OffsetDateTime;

use bosun::front::access;
use bosun::ports::store::ApiKeyRecord;
use bosun::runtime::config::Settings;
use bosun::wiring::Backends;

use super::output::{outln, print_json, short_time};

/// `bosun keys ...`
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum KeysCommand {
    /// Create a key bound to a tenant and scopes; prints it once.
    Create {
        /// The tenant it acts for (`*`: a platform key for every tenant).
        #[arg(long, value_name = "TENANT")]
        tenant: String,
        /// Comma-separated: commands:send, deliveries:read,
        /// dead-letters:replay, releases:approve (or
        /// releases:approve:<environment>, once per environment), admin.
        #[arg(long, value_name = "S1,S2")]
        scopes: String,
        /// Free text to tell keys apart; recorded with the approvals the
        /// key gives (`key:<id> (<description>)`).
        #[arg(long)]
        description: Option<String>,
        /// Print `{"key": ..., "id": ...}`.
        #[arg(long)]
        json: bool,
    },
    /// Every key (never the secrets).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key: it stops working at once.
    Revoke {
        /// The key's id (the part after `bsn_`).
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a keys command; new keys are recorded as made by the settings'
/// operator.
pub async fn run(command: KeysCommand, settings: &Settings) -> Result<()> {
    // Creating a key is the one that may start a data directory.
    let backends = if matches!(command, KeysCommand::Create { .. }) {
        Backends::open(settings).await?
    } else {
        Backends::open_existing(settings).await?
    };
    match command {
        KeysCommand::Create {
            tenant,
            scopes,
            description,
            json,
        } => {
            let scopes = access::parse_scopes(&scopes)?;
            let made = access::generate(&tenant, &scopes, &settings.operator, description)?;
            backends.access.insert_api_key(made.record.clone()).await?;
            if json {
                print_json(&serde_json::json!({
                    "key": made.key,
                    "id": made.record.id,
                    "tenantId": made.record.tenant_id,
                    "scopes": made.record.scopes,
                }))?;
            } else {
                outln!("{}", made.key)?;
                eprintln!(
                    "key {} for tenant {} with {}: shown once, store it now",
                    made.record.id,
                    made.record.tenant_id,
                    made.record.scopes.join(",")
                );
            }
        }
        KeysCommand::List { json } => {
            let keys = backends.access.list_api_keys().await?;
            if json {
                print_json(&keys)?;
            } else {
                write_key_list(&mut std::io::stdout().lock(), &keys)?;
            }
        }
        KeysCommand::Revoke { id, json } => {
            let key = backends
                .access
                .revoke_api_key(key_id(&id), OffsetDateTime::now_utc())
                .await?;
            if json {
                print_json(&key)?;
            } else {
                outln!("revoked key {} (tenant {})", key.id, key.tenant_id)?;
            }
        }
    }
    Ok(())
}

/// The id `bosun keys revoke` was given: a bare id, `bsn_<id>`, or the
/// whole key `bsn_<id>_<secret>`.
fn key_id(text: &str) -> &str {
    let id = text.trim().trim_start_matches("bsn_");
    id.split('_').next().unwrap_or(id)
}

/// The `bosun keys list` table.
fn write_key_list(out: &mut impl Write, keys: &[ApiKeyRecord]) -> Result<()> {
    if keys.is_empty() {
        writeln!(out, "no keys (make one with `bosun keys create --tenant T --scopes S`)")?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<14} {:<16} {:<52} {:<22} status",
        "id", "tenant", "scopes", "created"
    )?;
    for key in keys {
        let status = match key.revoked_at {
            Some(at) => format!("revoked {}", short_time(at)),
            None => "active".to_owned(),
        };
        writeln!(
            out,
            "{:<14} {:<16} {:<52} {:<22} {status}",
            key.id,
            key.tenant_id,
            key.scopes.join(","),
            short_time(key.created_at)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    #[test]
    fn revoke_takes_an_id_or_the_whole_key() {
        for (given, id) in [
            ("0123456789ab", "0123456789ab"),
            ("  0123456789ab\n", "0123456789ab"),
            ("bsn_0123456789ab", "0123456789ab"),
            ("bsn_0123456789ab_s3cr3t", "0123456789ab"),
        ] {
            assert_eq!(key_id(given), id, "{given:?}");
        }
    }

    fn key(id: &str, tenant: &str, scopes: &[&str], revoked_at: Option<OffsetDateTime>) -> ApiKeyRecord {
        ApiKeyRecord {
            id: id.to_owned(),
            tenant_id: tenant.to_owned(),
            scopes: scopes.iter().map(|scope| (*scope).to_owned()).collect(),
            secret_hash: "never printed".to_owned(),
            description: None,
            created_by: "test-operator".to_owned(),
            created_at: datetime!(2026-12-01 10:00:00 UTC),
            revoked_at,
        }
    }

    fn list(keys: &[ApiKeyRecord]) -> String {
        let mut out = Vec::new();
        write_key_list(&mut out, keys).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_key_list_is_a_table_without_secrets() {
        let text = list(&[
            key("0123456789ab", "contoso", &["admin"], None),
            key(
                "ba9876543210",
                "*",
                &["deliveries:read", "commands:send"],
                Some(datetime!(2026-12-02 08:30:00 UTC)),
            ),
        ]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                format!(
                    "{:<14} {:<16} {:<52} {:<22} status",
                    "id", "tenant", "scopes", "created"
                ),
                format!(
                    "0123456789ab   contoso          admin{}2026-12-01T10:00:00Z   active",
                    " ".repeat(48)
                ),
                format!(
                    "ba9876543210   *                deliveries:read,commands:send{}2026-12-01T10:00:00Z   \
                     revoked 2026-12-02T08:30:00Z",
                    " ".repeat(24)
                ),
            ]
        );
        assert!(!text.contains("never printed"));
    }

    #[test]
    fn no_keys_says_how_to_make_one() {
        assert_eq!(
            list(&[]),
            "no keys (make one with `bosun keys create --tenant T --scopes S`)\n"
        );
    }
}
