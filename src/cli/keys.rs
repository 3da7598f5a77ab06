//! `bosun keys create|list|rotate|revoke`: the API keys of the HTTP API,
//! the console and MCP. A key is shown once, when it is made; afterwards
//! only its id. Every key expires (`--expires-in`, at most
//! `BOSUN_KEY_MAX_LIFETIME_DAYS`); `rotate` makes its successor and keeps
//! the old key working for a grace period, so clients move without a gap.

use std::io::Write;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Subcommand;
use time::OffsetDateTime;

use bosun::front::access;
use bosun::ports::store::ApiKeyRecord;
use bosun::runtime::config::Settings;
use bosun::wiring::Backends;

use super::output::{Align, Table, outln, print_json, short_time};

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
        /// releases:approve:<environment>, once per environment), releases:override, releases:rollback,
        /// consumers:pause (platform keys), admin.
        #[arg(long, value_name = "S1,S2")]
        scopes: String,
        /// Free text to tell keys apart; recorded with the approvals the
        /// key gives (`key:<id> (<description>)`).
        #[arg(long)]
        description: Option<String>,
        /// Who the key acts for, e.g. the person an agent's key works for
        /// (`cli:dana`, or another key `key:<id>`): neither the key nor its
        /// sponsor may approve a release the key requested.
        #[arg(long, value_name = "IDENTITY")]
        sponsor: Option<String>,
        /// How long the key lives: `90d`, `12h`, `30m` (default and most:
        /// BOSUN_KEY_MAX_LIFETIME_DAYS, 90 days unless set).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        expires_in: Option<Duration>,
        /// Print `{"key": ..., "id": ...}`.
        #[arg(long)]
        json: bool,
    },
    /// Every key (never the secrets), with when each expires and was last
    /// used.
    List {
        /// Only the active keys that expire within this long (`14d`), and
        /// those made before keys expired: the ones to rotate.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        expiring: Option<Duration>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Make a key's successor (same tenant, scopes and description; printed
    /// once) and end the old key after a grace period, so its clients can
    /// move to the new one without a gap.
    Rotate {
        /// The old key's id (the part after `bsn_`, or the whole key).
        id: String,
        /// How long the old key keeps working beside its successor: `24h`
        /// (default), `7d`, `0s` to end it at once.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "24h")]
        grace: Duration,
        /// How long the successor lives (default and most:
        /// BOSUN_KEY_MAX_LIFETIME_DAYS).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        expires_in: Option<Duration>,
        /// Print `{"key": ..., "id": ..., "rotatedFrom": ...}`.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key: it stops working at once, and so does the work it
    /// started (a replay job pauses before its next replay, a `bosun mcp`
    /// session refuses its next call).
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
    let now = OffsetDateTime::now_utc();
    match command {
        KeysCommand::Create {
            tenant,
            scopes,
            description,
            sponsor,
            expires_in,
            json,
        } => {
            let lifetime = lifetime(expires_in, settings)?;
            let scopes = access::parse_scopes(&scopes)?;
            let mut made = access::generate(&tenant, &scopes, &settings.operator, description, lifetime)?;
            if let Some(sponsor) = sponsor {
                made.record.sponsor = Some(access::parse_sponsor(&sponsor)?);
            }
            backends.access.insert_api_key(made.record.clone()).await?;
            tracing::info!(by = %settings.operator, key_id = %made.record.id, tenant_id = %made.record.tenant_id, "API key created");
            if json {
                print_json(&serde_json::json!({
                    "key": made.key,
                    "id": made.record.id,
                    "tenantId": made.record.tenant_id,
                    "scopes": made.record.scopes,
                    "sponsor": made.record.sponsor,
                    "expiresAt": made.record.expires_at.map(short_time),
                }))?;
            } else {
                outln!("{}", made.key)?;
                eprintln!(
                    "key {} for tenant {} with {}, expires {}: shown once, store it now",
                    made.record.id,
                    made.record.tenant_id,
                    made.record.scopes.join(","),
                    made.record.expires_at.map_or_else(|| "never".to_owned(), short_time)
                );
            }
        }
        KeysCommand::List { expiring, json } => {
            let mut keys = backends.access.list_api_keys().await?;
            if let Some(within) = expiring {
                keys.retain(|key| expires_within(key, within, now));
            }
            if json {
                print_json(&keys)?;
            } else {
                write_key_list(&mut std::io::stdout().lock(), &keys, now, expiring.is_some())?;
            }
        }
        KeysCommand::Rotate {
            id,
            grace,
            expires_in,
            json,
        } => {
            let lifetime = lifetime(expires_in, settings)?;
            let id = key_id(&id);
            let Some(old) = backends.access.api_key(id).await? else {
                bail!("no API key `{id}` (see `bosun keys list`)");
            };
            if let Err(refusal) = access::check(&old, now) {
                bail!("key {id} cannot be rotated: {refusal}; create a new one with `bosun keys create`");
            }
            let made = access::successor(&old, &settings.operator, lifetime)?;
            let grace_end = now.saturating_add(time::Duration::try_from(grace).unwrap_or(time::Duration::MAX));
            let old = backends
                .access
                .rotate_api_key(&old.id, made.record.clone(), grace_end)
                .await?;
            let old_end = old.expires_at.map_or_else(|| "never".to_owned(), short_time);
            tracing::info!(by = %settings.operator, key_id = %old.id, successor = %made.record.id, old_expires_at = %old_end, "API key rotated");
            if json {
                print_json(&serde_json::json!({
                    "key": made.key,
                    "id": made.record.id,
                    "rotatedFrom": old.id,
                    "tenantId": made.record.tenant_id,
                    "scopes": made.record.scopes,
                    "expiresAt": made.record.expires_at.map(short_time),
                    "oldExpiresAt": old.expires_at.map(short_time),
                }))?;
            } else {
                outln!("{}", made.key)?;
                eprintln!(
                    "key {} succeeds {} (tenant {}, {}), expires {}: shown once, store it now; {} keeps working until {old_end}",
                    made.record.id,
                    old.id,
                    made.record.tenant_id,
                    made.record.scopes.join(","),
                    made.record.expires_at.map_or_else(|| "never".to_owned(), short_time),
                    old.id,
                );
            }
        }
        KeysCommand::Revoke { id, json } => {
            let key = backends.access.revoke_api_key(key_id(&id), now).await?;
            tracing::info!(by = %settings.operator, key_id = %key.id, "API key revoked");
            if json {
                print_json(&key)?;
            } else {
                outln!("revoked key {} (tenant {})", key.id, key.tenant_id)?;
            }
        }
    }
    Ok(())
}

/// How long a new key lives: `asked`, at most the deployment's maximum.
fn lifetime(asked: Option<Duration>, settings: &Settings) -> Result<Duration> {
    let most = settings.key_max_lifetime;
    match asked {
        None => Ok(most),
        Some(asked) if asked.is_zero() => bail!("--expires-in must be more than 0"),
        Some(asked) if asked > most => bail!(
            "--expires-in is longer than the most a key may live here ({} days, BOSUN_KEY_MAX_LIFETIME_DAYS)",
            most.as_secs() / 86_400
        ),
        Some(asked) => Ok(asked),
    }
}

/// Reads `90d`, `12h`, `30m` or `45s`.
pub(super) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration: write a whole number and a unit, e.g. 90d, 12h, 30m"))?;
    let seconds = match unit {
        "d" => 86_400,
        "h" => 3_600,
        "m" => 60,
        "s" => 1,
        _ => return Err(format!("`{text}`: the unit must be d, h, m or s (e.g. 90d)")),
    };
    number
        .checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("`{text}` is too long"))
}

/// Whether `key` is active and expires within `within` of `now`, or was made
/// before keys expired.
fn expires_within(key: &ApiKeyRecord, within: Duration, now: OffsetDateTime) -> bool {
    if key.revoked_at.is_some() {
        return false;
    }
    match key.expires_at {
        None => true,
        Some(at) => at > now && at - now <= within,
    }
}

/// The id `bosun keys revoke` was given: a bare id, `bsn_<id>`, or the
/// whole key `bsn_<id>_<secret>`.
fn key_id(text: &str) -> &str {
    let id = text.trim().trim_start_matches("bsn_");
    id.split('_').next().unwrap_or(id)
}

/// Where a key is at `now`, for the list.
fn status(key: &ApiKeyRecord, now: OffsetDateTime) -> String {
    if let Some(at) = key.revoked_at {
        return format!("revoked {}", short_time(at));
    }
    match (key.expires_at, &key.rotated_to) {
        (Some(at), _) if at <= now => format!("expired {}", short_time(at)),
        (_, Some(successor)) => format!("rotated to {successor}"),
        (None, None) => "active, no expiry: rotate it".to_owned(),
        (Some(_), None) => "active".to_owned(),
    }
}

/// The `bosun keys list` table.
fn write_key_list(out: &mut impl Write, keys: &[ApiKeyRecord], now: OffsetDateTime, expiring: bool) -> Result<()> {
    if keys.is_empty() {
        if expiring {
            writeln!(out, "no active key expires that soon")?;
        } else {
            writeln!(out, "no keys (make one with `bosun keys create --tenant T --scopes S`)")?;
        }
        return Ok(());
    }
    let mut table = Table::new([
        ("id", Align::Left),
        ("tenant", Align::Left),
        ("scopes", Align::Left),
        ("created", Align::Left),
        ("expires", Align::Left),
        ("last used", Align::Left),
        ("status", Align::Left),
    ]);
    let time_or = |at: Option<OffsetDateTime>, none: &str| at.map_or_else(|| none.to_owned(), short_time);
    for key in keys {
        table.row([
            key.id.clone(),
            key.tenant_id.clone(),
            key.scopes.join(","),
            short_time(key.created_at),
            time_or(key.expires_at, "never"),
            time_or(key.last_used_at, "never"),
            status(key, now),
        ]);
    }
    table.write(out)?;
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
            expires_at: Some(datetime!(2027-03-01 10:00:00 UTC)),
            last_used_at: None,
            rotated_from: None,
            rotated_to: None,
            sponsor: None,
        }
    }

    const NOW: OffsetDateTime = datetime!(2026-12-03 12:00:00 UTC);

    fn list(keys: &[ApiKeyRecord]) -> String {
        let mut out = Vec::new();
        write_key_list(&mut out, keys, NOW, false).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_key_list_is_a_table_without_secrets() {
        let mut used = key("0123456789ab", "contoso", &["admin"], None);
        used.last_used_at = Some(datetime!(2026-12-03 11:59:00 UTC));
        let mut rotated = key("cafe00000000", "contoso", &["deliveries:read"], None);
        rotated.rotated_to = Some("beef00000000".into());
        let mut expired = key("dead00000000", "contoso", &["deliveries:read"], None);
        expired.expires_at = Some(datetime!(2026-12-02 00:00:00 UTC));
        let mut ancient = key("0ld000000000", "contoso", &["deliveries:read"], None);
        ancient.expires_at = None;
        let text = list(&[
            used,
            key(
                "ba9876543210",
                "*",
                &["deliveries:read", "commands:send"],
                Some(datetime!(2026-12-02 08:30:00 UTC)),
            ),
            rotated,
            expired,
            ancient,
        ]);
        // Each column as wide as its widest cell: the scopes of ba98...,
        // the times.
        let lines: Vec<&str> = text.lines().collect();
        let row = |id: &str, tenant: &str, scopes: &str, expires: &str, used: &str, status: &str| {
            format!(
                "{id:<12}  {tenant:<7}  {scopes:<29}  {:<20}  {expires:<20}  {used:<20}  {status}",
                "2026-12-01T10:00:00Z"
            )
        };
        assert_eq!(
            lines,
            [
                format!(
                    "{:<12}  {:<7}  {:<29}  {:<20}  {:<20}  {:<20}  status",
                    "id", "tenant", "scopes", "created", "expires", "last used"
                ),
                row(
                    "0123456789ab",
                    "contoso",
                    "admin",
                    "2027-03-01T10:00:00Z",
                    "2026-12-03T11:59:00Z",
                    "active"
                ),
                row(
                    "ba9876543210",
                    "*",
                    "deliveries:read,commands:send",
                    "2027-03-01T10:00:00Z",
                    "never",
                    "revoked 2026-12-02T08:30:00Z"
                ),
                row(
                    "cafe00000000",
                    "contoso",
                    "deliveries:read",
                    "2027-03-01T10:00:00Z",
                    "never",
                    "rotated to beef00000000"
                ),
                row(
                    "dead00000000",
                    "contoso",
                    "deliveries:read",
                    "2026-12-02T00:00:00Z",
                    "never",
                    "expired 2026-12-02T00:00:00Z"
                ),
                row(
                    "0ld000000000",
                    "contoso",
                    "deliveries:read",
                    "never",
                    "never",
                    "active, no expiry: rotate it"
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

    #[test]
    fn durations_read_with_their_unit() {
        assert_eq!(parse_duration("90d"), Ok(Duration::from_secs(90 * 86_400)));
        assert_eq!(parse_duration(" 12h "), Ok(Duration::from_secs(12 * 3_600)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        for bad in ["", "d", "12", "12w", "-1d", "1.5h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn expiring_lists_active_keys_near_their_end_and_keys_without_one() {
        let soon = key("a", "contoso", &["admin"], None);
        let week = Duration::from_secs(7 * 86_400);
        assert!(!expires_within(&soon, week, NOW), "three months away");
        assert!(expires_within(&soon, Duration::from_secs(100 * 86_400), NOW));
        let mut ancient = soon.clone();
        ancient.expires_at = None;
        assert!(expires_within(&ancient, week, NOW));
        let mut gone = soon.clone();
        gone.expires_at = Some(datetime!(2026-12-01 00:00:00 UTC));
        assert!(!expires_within(&gone, week, NOW), "already expired");
        let revoked = key("b", "contoso", &["admin"], Some(NOW));
        assert!(!expires_within(&revoked, Duration::from_secs(100 * 86_400), NOW));
    }

    #[test]
    fn a_lifetime_is_at_most_the_deployments_maximum() {
        let settings = Settings::with_data_dir("/nonexistent");
        assert_eq!(lifetime(None, &settings).unwrap(), settings.key_max_lifetime);
        assert_eq!(
            lifetime(Some(Duration::from_secs(3600)), &settings).unwrap(),
            Duration::from_secs(3600)
        );
        let err = lifetime(Some(settings.key_max_lifetime * 2), &settings).unwrap_err();
        assert!(err.to_string().contains("BOSUN_KEY_MAX_LIFETIME_DAYS"), "{err}");
        assert!(lifetime(Some(Duration::ZERO), &settings).is_err());
    }
}
