//! API keys: how they look, how they are made and checked, and what they
//! allow.
//!
//! A key reads `bsn_<id>_<secret>`: `id` (12 hex digits) finds the stored
//! record, `secret` (64 hex digits, 244 random bits from the operating
//! system) is checked against the SHA-256 kept in the store. The secret is
//! never stored nor logged; the whole key is shown once, when it is made.
//! A fast hash is enough here: the secret is random, not a password, so
//! there is nothing to guess from a dictionary.

use std::fmt;
use std::time::Duration;

use bosun_consumers::delivery::blob::sha256_hex;
use serde::Serialize;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::ports::store::ApiKeyRecord;

/// The tenant of a platform key, which acts for every tenant.
pub const ALL_TENANTS: &str = "*";

/// The most characters of a key's description an approval record keeps.
const MAX_DESCRIPTION_IN_RECORDS: usize = 200;

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Scope {
    /// Send commands (`POST /v1/commands/{type}`).
    #[serde(rename = "commands:send")]
    CommandsSend,
    /// Read deliveries, sagas and dead letters.
    #[serde(rename = "deliveries:read")]
    DeliveriesRead,
    /// Replay dead letters (one, many, edited).
    #[serde(rename = "dead-letters:replay")]
    DeadLettersReplay,
    /// Approve or reject releases (`ApproveRelease`, `RejectRelease`); not
    /// implied by `commands:send`. Written `releases:approve:<environment>`
    /// it holds for that environment only.
    #[serde(rename = "releases:approve")]
    ReleasesApprove,
    /// Let a release through a closed promotion window or a hold
    /// (`OverrideReleaseWindow`), and place or lift holds; not implied by
    /// `commands:send` nor by `releases:approve`.
    #[serde(rename = "releases:override")]
    ReleasesOverride,
    /// Roll an environment back to a release verified there
    /// (`RollbackEnvironment`, `bosun releases rollback`); not implied by
    /// `commands:send`, `releases:approve` nor `releases:override`.
    #[serde(rename = "releases:rollback")]
    ReleasesRollback,
    /// Pause and resume consumers (every tenant's messages wait while one
    /// is paused), so a platform key's right only; not implied by any other
    /// but `admin`.
    #[serde(rename = "consumers:pause")]
    ConsumersPause,
    /// Everything, purging dead letters included.
    #[serde(rename = "admin")]
    Admin,
}

impl Scope {
    /// Every scope.
    pub const ALL: [Scope; 8] = [
        Scope::CommandsSend,
        Scope::DeliveriesRead,
        Scope::DeadLettersReplay,
        Scope::ReleasesApprove,
        Scope::ReleasesOverride,
        Scope::ReleasesRollback,
        Scope::ConsumersPause,
        Scope::Admin,
    ];

    /// The scope as written in keys and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CommandsSend => "commands:send",
            Self::DeliveriesRead => "deliveries:read",
            Self::DeadLettersReplay => "dead-letters:replay",
            Self::ReleasesApprove => "releases:approve",
            Self::ReleasesOverride => "releases:override",
            Self::ReleasesRollback => "releases:rollback",
            Self::ConsumersPause => "consumers:pause",
            Self::Admin => "admin",
        }
    }

    /// Reads a scope name.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        Self::ALL
            .into_iter()
            .find(|scope| scope.as_str() == text.trim())
            .ok_or_else(|| KeyError::UnknownScope(text.trim().to_owned()))
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a key could not be made or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A scope name that does not exist.
    #[error(
        "unknown scope `{0}` in field `scopes` (known: commands:send, deliveries:read, dead-letters:replay, \
         releases:approve, releases:approve:<environment>, releases:override, releases:rollback, admin)"
    )]
    UnknownScope(String),
    /// No scope given.
    #[error("field `scopes` is empty: a key needs at least one scope")]
    NoScopes,
    /// `releases:approve:<environment>` with an invalid environment name.
    #[error("invalid environment in scope `{scope}` of field `scopes`: {reason}")]
    InvalidEnvironment {
        /// The scope as written.
        scope: String,
        /// Why the environment is not valid.
        reason: String,
    },
    /// The tenant is not a valid tenant id nor `*`.
    #[error("invalid field `tenant`: {0}")]
    InvalidTenant(String),
    /// Text that is not a bosun key.
    #[error("not a bosun API key (expected `bsn_<id>_<secret>`)")]
    Malformed,
    /// A sponsor that names no identity approval policies match.
    #[error("invalid field `--sponsor`: `{0}` is neither `cli:<operator>` nor `key:<12 hex digits>`")]
    InvalidSponsor(String),
}

/// The right a command of `message_type` needs instead of
/// `commands:send`, when it decides on a release: `releases:approve` to
/// approve or reject, `releases:override` to override a promotion window,
/// `releases:rollback` to roll an environment back.
pub fn decision_scope(message_type: &str) -> Option<Scope> {
    match message_type {
        "ApproveRelease" | "RejectRelease" => Some(Scope::ReleasesApprove),
        "OverrideReleaseWindow" => Some(Scope::ReleasesOverride),
        "RollbackEnvironment" => Some(Scope::ReleasesRollback),
        _ => None,
    }
}

/// The second right a decision of `message_type` needs for `payload`, if
/// any: a rollback that goes through closed promotion windows
/// (`overrideReason`) needs `releases:override` besides `releases:rollback`.
pub fn override_scope(message_type: &str, payload: Option<&serde_json::Value>) -> Option<Scope> {
    let overrides = payload
        .and_then(|payload| payload.get("overrideReason"))
        .is_some_and(|reason| !reason.is_null());
    (message_type == "RollbackEnvironment" && overrides).then_some(Scope::ReleasesOverride)
}

/// One right a key holds: a scope, and for `releases:approve` optionally
/// the one environment it is limited to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Grant {
    /// The scope.
    pub scope: Scope,
    /// `releases:approve:<environment>`: the environment it holds for.
    pub environment: Option<String>,
}

impl From<Scope> for Grant {
    fn from(scope: Scope) -> Self {
        Self {
            scope,
            environment: None,
        }
    }
}

impl Grant {
    /// Reads `scope` or `releases:approve:<environment>`.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let text = text.trim();
        let approve = Scope::ReleasesApprove.as_str();
        if let Some(environment) = text.strip_prefix(approve).and_then(|rest| rest.strip_prefix(':')) {
            bosun_contracts::validate::environment_name("environment", environment).map_err(|err| {
                KeyError::InvalidEnvironment {
                    scope: text.to_owned(),
                    reason: err.reason,
                }
            })?;
            return Ok(Self {
                scope: Scope::ReleasesApprove,
                environment: Some(environment.to_owned()),
            });
        }
        Scope::parse(text).map(Self::from)
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.environment {
            Some(environment) => write!(f, "{}:{environment}", self.scope),
            None => write!(f, "{}", self.scope),
        }
    }
}

/// Someone the front door let in: a key, its tenant and its scopes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The key's id (recorded on everything it does).
    pub key_id: String,
    /// The tenant it acts for, or [`ALL_TENANTS`].
    pub tenant_id: String,
    /// What it may do.
    pub scopes: Vec<Scope>,
    /// The environments `releases:approve` is limited to; `None` when it
    /// holds for every environment (or the key has no approval right).
    pub approve_environments: Option<Vec<String>>,
    /// The key's description, recorded with the approvals it gives.
    pub description: Option<String>,
    /// Who the key acts for (`bosun keys create --sponsor`): an approval
    /// policy never lets the key nor its sponsor approve a release the key
    /// requested.
    pub sponsor: Option<String>,
}

impl Caller {
    /// A caller with `scopes`, no environment limit and no description.
    pub fn new(key_id: impl Into<String>, tenant_id: impl Into<String>, scopes: Vec<Scope>) -> Self {
        Self {
            key_id: key_id.into(),
            tenant_id: tenant_id.into(),
            scopes,
            approve_environments: None,
            description: None,
            sponsor: None,
        }
    }

    /// The identities the key answers to in approval policies: itself
    /// (`key:<id>`) and its sponsor.
    pub fn identities(&self) -> Vec<String> {
        let mut identities = vec![self.identity()];
        if let Some(sponsor) = self.sponsor.as_ref().filter(|sponsor| **sponsor != identities[0]) {
            identities.push(sponsor.clone());
        }
        identities
    }

    /// Whether the key has `scope` (admin has every scope).
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope) || self.scopes.contains(&Scope::Admin)
    }

    /// Whether the key may approve or reject releases in `environment`
    /// (`None`: a decision on the whole release, which an
    /// environment-limited right does not cover).
    pub fn may_approve(&self, environment: Option<&str>) -> bool {
        if self.scopes.contains(&Scope::Admin) {
            return true;
        }
        if !self.scopes.contains(&Scope::ReleasesApprove) {
            return false;
        }
        match (&self.approve_environments, environment) {
            (None, _) => true,
            (Some(allowed), Some(environment)) => allowed.iter().any(|allowed| allowed == environment),
            (Some(_), None) => false,
        }
    }

    /// Whether the key may send a decision on a release that needs
    /// `scope` ([`decision_scope`]) for `environment`.
    pub fn may_decide(&self, scope: Scope, environment: Option<&str>) -> bool {
        match scope {
            Scope::ReleasesApprove => self.may_approve(environment),
            other => self.has(other),
        }
    }

    /// Who this key is in an approval record: `key:<id> (<description>)`.
    pub fn principal(&self) -> String {
        match self.description.as_deref().map(str::trim).filter(|d| !d.is_empty()) {
            Some(description) => {
                let description: String = description.chars().take(MAX_DESCRIPTION_IN_RECORDS).collect();
                format!("key:{} ({description})", self.key_id)
            }
            None => self.identity(),
        }
    }

    /// Whether the key may see data of `tenant` (`None`: data whose tenant
    /// is unknown, which only platform keys see).
    pub fn sees(&self, tenant: Option<&str>) -> bool {
        self.tenant_id == ALL_TENANTS || tenant == Some(self.tenant_id.as_str())
    }

    /// The tenant to filter by: `None` for a platform key.
    pub fn tenant_filter(&self) -> Option<String> {
        (self.tenant_id != ALL_TENANTS).then(|| self.tenant_id.clone())
    }

    /// Who this is in records: `key:<id>`.
    pub fn identity(&self) -> String {
        format!("key:{}", self.key_id)
    }
}

/// Why the front door refused a presented key. The answer a client gets
/// does not tell an unknown key from a wrong secret; the reason is the
/// label of `bosun_api_refusals_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Refusal {
    /// No key was presented.
    Missing,
    /// Text that is not a bosun key.
    Malformed,
    /// No key with that id, or not its secret.
    Invalid,
    /// The key was revoked.
    Revoked,
    /// The key's expiry has passed (a rotated key's grace period included).
    Expired,
}

impl Refusal {
    /// The metric label: `missing`, `malformed`, `invalid`, `revoked`,
    /// `expired`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Malformed => "malformed",
            Self::Invalid => "invalid",
            Self::Revoked => "revoked",
            Self::Expired => "expired",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Missing => "missing API key: send `Authorization: Bearer <key>` or `X-Api-Key`",
            Self::Malformed => "not a bosun API key (expected `bsn_<id>_<secret>`)",
            Self::Invalid => "invalid API key",
            Self::Revoked => "this API key was revoked",
            Self::Expired => "this API key has expired: ask for a new one (`bosun keys rotate`)",
        })
    }
}

/// A new key: its record (to store) and its full text (to show once).
pub struct NewKey {
    /// What the store keeps.
    pub record: ApiKeyRecord,
    /// `bsn_<id>_<secret>`: shown to the person who made it, then forgotten.
    pub key: String,
}

impl fmt::Debug for NewKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewKey")
            .field("record", &self.record)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// Reads a comma-separated scope list (`releases:approve:<environment>`
/// limits the approval right to one environment; repeat it for several).
pub fn parse_scopes(text: &str) -> Result<Vec<Grant>, KeyError> {
    let mut grants = text
        .split(',')
        .filter(|part| !part.trim().is_empty())
        .map(Grant::parse)
        .collect::<Result<Vec<_>, _>>()?;
    if grants.is_empty() {
        return Err(KeyError::NoScopes);
    }
    grants.sort();
    grants.dedup();
    Ok(grants)
}

/// The longest a key lives when a deployment sets no maximum
/// (`BOSUN_KEY_MAX_LIFETIME`): 90 days.
pub const DEFAULT_MAX_KEY_LIFETIME: Duration = Duration::from_secs(90 * 24 * 3600);

/// Makes a key for `tenant` with `grants` (a [`Scope`] converts into one)
/// that expires `lifetime` from now.
pub fn generate<G: Clone + Into<Grant>>(
    tenant: &str,
    grants: &[G],
    created_by: &str,
    description: Option<String>,
    lifetime: Duration,
) -> Result<NewKey, KeyError> {
    if tenant != ALL_TENANTS {
        bosun_contracts::validate::tenant_id("tenant", tenant).map_err(|err| KeyError::InvalidTenant(err.reason))?;
    }
    if grants.is_empty() {
        return Err(KeyError::NoScopes);
    }
    // Version 4 UUIDs come from the operating system's random source.
    let id = Uuid::new_v4().simple().to_string()[..12].to_owned();
    let secret = format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple());
    let key = format!("bsn_{id}_{secret}");
    let mut grants: Vec<Grant> = grants.iter().cloned().map(Into::into).collect();
    grants.sort();
    grants.dedup();
    let now = OffsetDateTime::now_utc();
    Ok(NewKey {
        record: ApiKeyRecord {
            id,
            tenant_id: tenant.to_owned(),
            scopes: grants.iter().map(Grant::to_string).collect(),
            secret_hash: hash_secret(&secret),
            description,
            created_by: created_by.to_owned(),
            created_at: now,
            revoked_at: None,
            expires_at: Some(now.saturating_add(time::Duration::try_from(lifetime).unwrap_or(time::Duration::MAX))),
            last_used_at: None,
            rotated_from: None,
            rotated_to: None,
            sponsor: None,
        },
        key,
    })
}

/// A successor of `old` (`bosun keys rotate`): the same tenant, scopes and
/// description, a new secret and a new lifetime; recorded as rotated from
/// `old`.
pub fn successor(old: &ApiKeyRecord, created_by: &str, lifetime: Duration) -> Result<NewKey, KeyError> {
    let grants = old
        .scopes
        .iter()
        .map(|scope| Grant::parse(scope))
        .collect::<Result<Vec<_>, _>>()?;
    let mut made = generate(&old.tenant_id, &grants, created_by, old.description.clone(), lifetime)?;
    made.record.rotated_from = Some(old.id.clone());
    made.record.sponsor = old.sponsor.clone();
    Ok(made)
}

/// Reads `bosun keys create --sponsor`: an identity approval policies
/// match, `cli:<operator>` or `key:<12 hex digits>`, so that a sponsor
/// written another way (`dana`) cannot silently match nobody.
pub fn parse_sponsor(text: &str) -> Result<String, KeyError> {
    let text = text.trim();
    let valid = match (text.strip_prefix("cli:"), text.strip_prefix("key:")) {
        (Some(operator), _) => {
            bosun_contracts::validate::text("--sponsor", operator, bosun_contracts::messages::MAX_APPROVER_CHARS)
                .is_ok()
                && !operator.chars().any(char::is_whitespace)
        }
        (_, Some(id)) => id.len() == 12 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        _ => false,
    };
    if valid {
        Ok(text.to_owned())
    } else {
        Err(KeyError::InvalidSponsor(text.to_owned()))
    }
}

/// Splits a presented key into its id and secret.
pub fn parse_key(presented: &str) -> Result<(&str, &str), KeyError> {
    let rest = presented.trim().strip_prefix("bsn_").ok_or(KeyError::Malformed)?;
    let (id, secret) = rest.split_once('_').ok_or(KeyError::Malformed)?;
    let hex = |text: &str, len: usize| text.len() == len && text.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex(id, 12) || !hex(secret, 64) {
        return Err(KeyError::Malformed);
    }
    Ok((id, secret))
}

/// SHA-256 of a secret, lowercase hex.
pub fn hash_secret(secret: &str) -> String {
    sha256_hex(secret.as_bytes())
}

/// Whether `secret` matches the stored record (in time independent of
/// where the hashes differ) and the key is neither revoked nor expired at
/// `now`. Returns the caller, or why it is refused.
pub fn verify(record: &ApiKeyRecord, secret: &str, now: OffsetDateTime) -> Result<Caller, Refusal> {
    let presented = hash_secret(secret);
    let same = presented.len() == record.secret_hash.len()
        && presented
            .bytes()
            .zip(record.secret_hash.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if !same {
        return Err(Refusal::Invalid);
    }
    check(record, now)
}

/// Whether the key of `record` still holds at `now` (not revoked, not
/// expired), and the caller it is: what long-running work started by a key
/// asks again before each of its effects.
pub fn check(record: &ApiKeyRecord, now: OffsetDateTime) -> Result<Caller, Refusal> {
    if record.revoked_at.is_some_and(|at| at <= now) {
        return Err(Refusal::Revoked);
    }
    if record.expires_at.is_some_and(|at| at <= now) {
        return Err(Refusal::Expired);
    }
    // Scopes unknown to this build (written by a newer one) give nothing.
    let grants: Vec<Grant> = record.scopes.iter().filter_map(|s| Grant::parse(s).ok()).collect();
    let mut scopes: Vec<Scope> = grants.iter().map(|grant| grant.scope).collect();
    scopes.sort();
    scopes.dedup();
    let approvals = || grants.iter().filter(|grant| grant.scope == Scope::ReleasesApprove);
    let approve_environments = if approvals().any(|grant| grant.environment.is_none()) {
        None
    } else {
        Some(approvals().filter_map(|grant| grant.environment.clone()).collect())
    };
    Ok(Caller {
        key_id: record.id.clone(),
        tenant_id: record.tenant_id.clone(),
        scopes,
        approve_environments,
        description: record.description.clone(),
        sponsor: record.sponsor.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn a_sponsor_is_an_identity_policies_match() {
        assert_eq!(parse_sponsor(" cli:dana ").unwrap(), "cli:dana");
        assert_eq!(parse_sponsor("key:0a1b2c3d4e5f").unwrap(), "key:0a1b2c3d4e5f");
        for bad in ["dana", "cli:", "cli:da na", "key:xyz", "key:0a1b2c3d4e5", "user:dana"] {
            assert!(matches!(parse_sponsor(bad), Err(KeyError::InvalidSponsor(_))), "{bad}");
        }
    }

    fn now() -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }

    #[test]
    fn a_key_expires_and_a_successor_keeps_its_rights() {
        let made = generate(
            "contoso",
            &parse_scopes("releases:approve:prod,deliveries:read").unwrap(),
            "alice",
            Some("ci".into()),
            DAY,
        )
        .unwrap();
        let expires = made.record.expires_at.unwrap();
        assert!(expires > now() + time::Duration::hours(23) && expires <= now() + time::Duration::days(1));
        let secret = parse_key(&made.key).unwrap().1;
        assert!(verify(&made.record, secret, expires - time::Duration::seconds(1)).is_ok());
        assert_eq!(verify(&made.record, secret, expires), Err(Refusal::Expired));
        assert_eq!(
            verify(&made.record, &"f".repeat(64), expires),
            Err(Refusal::Invalid),
            "a wrong secret never learns that the key expired"
        );
        assert_eq!(
            check(&made.record, expires + time::Duration::days(1)),
            Err(Refusal::Expired)
        );

        let next = successor(&made.record, "bob", DAY * 30).unwrap();
        assert_ne!(next.record.id, made.record.id);
        assert_ne!(next.record.secret_hash, made.record.secret_hash);
        assert_eq!(next.record.rotated_from.as_deref(), Some(made.record.id.as_str()));
        assert_eq!(next.record.scopes, made.record.scopes);
        assert_eq!(next.record.tenant_id, "contoso");
        assert_eq!(next.record.description.as_deref(), Some("ci"));
        assert_eq!(next.record.created_by, "bob");
        let caller = verify(&next.record, parse_key(&next.key).unwrap().1, now()).unwrap();
        assert!(caller.may_approve(Some("prod")) && !caller.may_approve(Some("dev")));

        // A key made before keys expired has none, and still works.
        let mut old = made.record.clone();
        old.expires_at = None;
        assert!(verify(&old, secret, now() + time::Duration::days(3650)).is_ok());
        // Refusals say why, and name no secret.
        for refusal in [
            Refusal::Missing,
            Refusal::Malformed,
            Refusal::Invalid,
            Refusal::Revoked,
            Refusal::Expired,
        ] {
            assert!(!refusal.to_string().is_empty() && !refusal.as_str().is_empty());
        }
    }

    #[test]
    fn a_new_key_verifies_and_its_secret_is_not_stored() {
        let made = generate(
            "contoso",
            &[Scope::DeliveriesRead, Scope::CommandsSend],
            "alice",
            None,
            DAY,
        )
        .unwrap();
        let (id, secret) = parse_key(&made.key).unwrap();
        assert_eq!(id, made.record.id);
        assert!(!made.record.secret_hash.contains(secret));
        assert!(!format!("{made:?}").contains(secret), "Debug redacts the key");
        let caller = verify(&made.record, secret, now()).unwrap();
        assert_eq!(caller.tenant_id, "contoso");
        assert_eq!(caller.scopes, [Scope::CommandsSend, Scope::DeliveriesRead]);
        assert!(caller.has(Scope::DeliveriesRead));
        assert!(!caller.has(Scope::DeadLettersReplay));
        assert_eq!(verify(&made.record, &"0".repeat(64), now()), Err(Refusal::Invalid));
    }

    #[test]
    fn revoked_keys_and_malformed_text_are_refused() {
        let mut made = generate("contoso", &[Scope::Admin], "alice", None, DAY).unwrap();
        let secret = parse_key(&made.key).unwrap().1.to_owned();
        made.record.revoked_at = Some(OffsetDateTime::now_utc());
        assert_eq!(verify(&made.record, &secret, now()), Err(Refusal::Revoked));
        for text in [
            "",
            "bsn_",
            "bsn_abc_def",
            "xyz_0123456789ab_00",
            &made.key.replace("bsn_", "bsx_"),
        ] {
            assert_eq!(parse_key(text), Err(KeyError::Malformed), "{text}");
        }
    }

    #[test]
    fn scopes_and_tenants_are_checked() {
        assert_eq!(
            parse_scopes("admin, commands:send,admin").unwrap(),
            [Scope::CommandsSend.into(), Scope::Admin.into()]
        );
        assert_eq!(parse_scopes(" , "), Err(KeyError::NoScopes));
        let err = parse_scopes("commands:send,root").unwrap_err();
        assert!(err.to_string().contains("`root`"), "{err}");
        let err = generate("Not A Tenant", &[Scope::Admin], "alice", None, DAY).unwrap_err();
        assert!(err.to_string().contains("tenant"), "{err}");
        let platform = generate(ALL_TENANTS, &[Scope::DeliveriesRead], "alice", None, DAY).unwrap();
        let caller = verify(&platform.record, parse_key(&platform.key).unwrap().1, now()).unwrap();
        assert!(caller.sees(Some("contoso")) && caller.sees(None));
        assert_eq!(caller.tenant_filter(), None);
        let admin = Caller::new("k", "contoso", vec![Scope::Admin]);
        assert!(admin.has(Scope::DeadLettersReplay));
        assert!(admin.sees(Some("contoso")) && !admin.sees(Some("fabrikam")) && !admin.sees(None));
    }

    #[test]
    fn approval_is_its_own_right_optionally_limited_to_environments() {
        let key = |scopes: &str| {
            let made = generate(
                "contoso",
                &parse_scopes(scopes).unwrap(),
                "alice",
                Some("release board".into()),
                DAY,
            )
            .unwrap();
            let caller = verify(&made.record, parse_key(&made.key).unwrap().1, now()).unwrap();
            (made.record, caller)
        };
        let (_, sender) = key("commands:send");
        assert!(
            !sender.may_approve(Some("prod")),
            "commands:send does not imply approval"
        );

        let (record, limited) = key("releases:approve:staging,releases:approve:prod,deliveries:read");
        assert_eq!(
            record.scopes,
            ["deliveries:read", "releases:approve:prod", "releases:approve:staging"]
        );
        assert!(limited.may_approve(Some("prod")) && limited.may_approve(Some("staging")));
        assert!(!limited.may_approve(Some("dev")));
        assert!(
            !limited.may_approve(None),
            "a whole-release decision needs the unlimited right"
        );
        assert_eq!(limited.principal(), format!("key:{} (release board)", limited.key_id));

        let (_, any) = key("releases:approve:prod,releases:approve");
        assert_eq!(any.approve_environments, None);
        assert!(any.may_approve(Some("dev")) && any.may_approve(None));
        assert!(Caller::new("k", "contoso", vec![Scope::Admin]).may_approve(None));

        let err = parse_scopes("releases:approve:Prod!").unwrap_err();
        assert!(err.to_string().contains("releases:approve:Prod!"), "{err}");
    }
}
