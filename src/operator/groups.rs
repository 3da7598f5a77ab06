//! Failure groups: dead letters that failed for one root cause.
//!
//! A dead letter's fingerprint is its error's kind (the reason code), its
//! error message with what differs from one occurrence of a cause to the
//! next masked ([`mask`]), its consumer and its message type. Masked:
//!
//! - a span in backticks, single or double quotes, whole, spaces and all:
//!   `` `<name>` ``, `'<name>'`, `"<name>"` (`` `orders` ``, `'my repo'`);
//! - URLs (any `scheme://…`): `<url>`; e-mail addresses: `<email>`; IP
//!   addresses, with or without a port: `<ip>`;
//! - paths, Unix, Windows or relative with a slash: `<path>`;
//! - UUIDs and id-like tokens of letters and digits: `<id>`;
//! - hex hashes of 7 or more digits (Git SHAs): `<hash>`;
//! - RFC 3339 times: `<time>`;
//! - numbers, whole or decimal, with a unit or not (`503`, `1.5s`): `<n>`.
//!
//! Kept: the words that say what went wrong, the error's type
//! (`HttpError:`, `io::Error`, `TimedOut`) and code (`TF401019`), JSON
//! keys, and a quoted sentence (a remote's message), masked word by word.
//! So two commits to two missing repositories (`` repository `orders` not
//! found ``, `` repository `ledger` not found ``) share a group; a missing
//! repository and a refused push in the same consumer do not, nor a time-out
//! and a refused connection. A name outside quotes with neither a digit nor
//! a slash is kept: it cannot be told from a word.
//!
//! Groups are computed from the records a store lists, so every store
//! groups alike, and a caller sees the groups of the dead letters it may
//! see (the front door filters by tenant first). Nothing stores a
//! fingerprint to find its group by later (a bulk replay records the one it
//! was started from, with the ids it took): a change to the masking changes
//! fingerprints, not what is grouped.

use schemars::JsonSchema;
use serde::Serialize;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::ports::store::{DeadLetterRecord, DeadLetterStatus};

#[cfg(test)]
mod corpus;
mod mask;

pub use mask::mask;

/// How many buckets a group's trend has, and how long each is: the last
/// day, by the hour.
pub const TREND_BUCKETS: usize = 24;
/// The length of one trend bucket, in seconds.
pub const TREND_BUCKET_SECONDS: i64 = 3600;

/// Dead letters that failed for one cause.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureGroup {
    /// The group's id: a hash of its fingerprint (kind, consumer, message
    /// type, masked message); stable while the cause is the same.
    pub fingerprint: String,
    /// The error's kind (the dead letter's reason code).
    pub reason: String,
    /// The consumer that gave up.
    pub consumer: Option<String>,
    /// The message type.
    pub message_type: Option<String>,
    /// The error message with what varies masked: quoted names (`<name>`,
    /// in their quotes), URLs (`<url>`), e-mail addresses (`<email>`), IP
    /// addresses with or without a port (`<ip>`), paths (`<path>`), UUIDs
    /// and id-like tokens (`<id>`), hex hashes (`<hash>`), RFC 3339 times
    /// (`<time>`) and numbers (`<n>`); the error's words, type and code
    /// kept.
    pub pattern: String,
    /// How many.
    pub count: usize,
    /// The oldest.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub first_at: OffsetDateTime,
    /// The newest.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub last_at: OffsetDateTime,
    /// The newest one's description, unmasked: a sample of the cause.
    pub description: String,
    /// The newest one's id.
    pub sample: Uuid,
    /// Their ids, newest first.
    pub ids: Vec<Uuid>,
    /// How many per hour over the last day.
    pub trend: Trend,
    /// An operator's acknowledgement of the group, with its note. The
    /// group is left out of the list while no failure newer than it
    /// arrived; with a newer one it is listed again, keeping the note.
    pub acknowledgement: Option<crate::ports::store::GroupAcknowledgement>,
}

/// Counts per time bucket, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Trend {
    /// When the first bucket starts.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub start: OffsetDateTime,
    /// Each bucket's length.
    pub bucket_seconds: i64,
    /// Dead letters per bucket ([`TREND_BUCKETS`] of them).
    pub counts: Vec<usize>,
}

/// A dead letter's fingerprint: (kind, consumer, message type, masked message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// The error's kind.
    pub kind: String,
    /// The consumer.
    pub consumer: Option<String>,
    /// The message type.
    pub message_type: Option<String>,
    /// The masked error message.
    pub pattern: String,
}

impl Fingerprint {
    /// The fingerprint of `record`.
    pub fn of(record: &DeadLetterRecord) -> Self {
        Self {
            kind: record.reason.clone(),
            consumer: record.consumer.clone(),
            message_type: record.message_type.clone(),
            pattern: mask(&record.description),
        }
    }

    /// Its id: the first 16 hex digits of a SHA-256 of its parts.
    pub fn id(&self) -> String {
        let mut hash = Sha256::new();
        for part in [
            self.kind.as_str(),
            self.consumer.as_deref().unwrap_or(""),
            self.message_type.as_deref().unwrap_or(""),
            self.pattern.as_str(),
        ] {
            hash.update(part.as_bytes());
            hash.update([0]);
        }
        hash.finalize()[..8].iter().map(|byte| format!("{byte:02x}")).collect()
    }
}

/// `groups` with their acknowledgements among `acknowledgements` (of the
/// caller's scope); an acknowledged group with no failure after its
/// acknowledgement is left out unless `include_acknowledged`.
pub fn with_acknowledgements(
    groups: Vec<FailureGroup>,
    acknowledgements: &[crate::ports::store::GroupAcknowledgement],
    include_acknowledged: bool,
) -> Vec<FailureGroup> {
    groups
        .into_iter()
        .filter_map(|mut group| {
            group.acknowledgement = acknowledgements
                .iter()
                .find(|ack| ack.fingerprint == group.fingerprint)
                .cloned();
            let quiet = group
                .acknowledgement
                .as_ref()
                .is_some_and(|ack| group.last_at <= ack.at);
            (include_acknowledged || !quiet).then_some(group)
        })
        .collect()
}

/// Groups the dead letters not replayed yet by fingerprint, largest group
/// first (then the most recent); `now` ends the trend.
pub fn group_failures(records: &[DeadLetterRecord], now: OffsetDateTime) -> Vec<FailureGroup> {
    let start = now - time::Duration::seconds(TREND_BUCKET_SECONDS * TREND_BUCKETS as i64);
    let mut groups: Vec<FailureGroup> = Vec::new();
    let mut newest: Vec<(usize, OffsetDateTime, Uuid)> = Vec::new();
    for record in records.iter().filter(|r| r.status == DeadLetterStatus::Dead) {
        let fingerprint = Fingerprint::of(record);
        let id = fingerprint.id();
        let index = match groups.iter().position(|group| group.fingerprint == id) {
            Some(index) => index,
            None => {
                groups.push(FailureGroup {
                    fingerprint: id,
                    reason: fingerprint.kind,
                    consumer: fingerprint.consumer,
                    message_type: fingerprint.message_type,
                    pattern: fingerprint.pattern,
                    count: 0,
                    first_at: record.dead_lettered_at,
                    last_at: record.dead_lettered_at,
                    description: record.description.clone(),
                    acknowledgement: None,
                    sample: record.id,
                    ids: Vec::new(),
                    trend: Trend {
                        start,
                        bucket_seconds: TREND_BUCKET_SECONDS,
                        counts: vec![0; TREND_BUCKETS],
                    },
                });
                groups.len() - 1
            }
        };
        let group = &mut groups[index];
        group.count += 1;
        newest.push((index, record.dead_lettered_at, record.id));
        group.first_at = group.first_at.min(record.dead_lettered_at);
        // The newest (by time, then by id: UUIDv7 ids grow with time) is the sample.
        if (record.dead_lettered_at, record.id) > (group.last_at, group.sample) {
            group.last_at = record.dead_lettered_at;
            group.description = record.description.clone();
            group.sample = record.id;
        }
        // Older than the trend's day: counted, not drawn; at or a clock's
        // skew past `now`: the last bucket.
        let offset = (record.dead_lettered_at - start).whole_seconds();
        if offset >= 0
            && let Some(count) = usize::try_from(offset / TREND_BUCKET_SECONDS)
                .ok()
                .map(|bucket| bucket.min(TREND_BUCKETS - 1))
                .and_then(|bucket| group.trend.counts.get_mut(bucket))
        {
            *count += 1;
        }
    }
    newest.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)));
    for (index, _, id) in newest {
        groups[index].ids.push(id);
    }
    groups.sort_by(|a, b| b.count.cmp(&a.count).then(b.last_at.cmp(&a.last_at)));
    groups
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    fn dead(consumer: &str, reason: &str, description: &str, at: OffsetDateTime) -> DeadLetterRecord {
        DeadLetterRecord {
            id: Uuid::now_v7(),
            consumer: Some(consumer.to_owned()),
            entity: consumer.to_owned(),
            transport_sequence: None,
            broker_message_id: "b".into(),
            message_id: Some(Uuid::now_v7().to_string()),
            message_type: Some("CreateCommit".into()),
            correlation_id: Some(Uuid::now_v7().to_string()),
            tenant_id: Some("contoso".into()),
            body: b"{}".to_vec(),
            reason: reason.to_owned(),
            description: description.to_owned(),
            error_chain: vec![description.to_owned()],
            attempts: Vec::new(),
            dead_lettered_at: at,
            origin: "host".into(),
            status: DeadLetterStatus::Dead,
            replays: Vec::new(),
        }
    }

    const NOW: OffsetDateTime = datetime!(2026-12-01 12:00:00 UTC);

    #[test]
    fn failures_with_different_ids_but_one_cause_share_a_group() {
        let records = [
            dead(
                "commit",
                "retries-exhausted",
                "repository contoso/payments-api not found (request 01a233f8-165b-7248-a2cc-fc98369fd094, attempt 6)",
                NOW - time::Duration::minutes(90),
            ),
            dead(
                "commit",
                "retries-exhausted",
                "repository contoso/orders not found (request 01a233f9-0000-7000-8000-000000000001, attempt 4)",
                NOW - time::Duration::minutes(5),
            ),
        ];
        let groups = group_failures(&records, NOW);
        assert_eq!(groups.len(), 1, "{groups:#?}");
        let group = &groups[0];
        assert_eq!(group.count, 2);
        assert_eq!(group.pattern, "repository <path> not found (request <id>, attempt <n>)");
        assert_eq!(group.first_at, records[0].dead_lettered_at);
        assert_eq!(group.last_at, records[1].dead_lettered_at);
        assert_eq!(group.sample, records[1].id, "the newest is the sample");
        assert_eq!(group.description, records[1].description);
        assert_eq!(group.ids, [records[1].id, records[0].id], "newest first");
        assert_eq!(group.fingerprint, Fingerprint::of(&records[0]).id());
        assert_eq!(group.fingerprint.len(), 16);
        // One an hour and a half ago, one five minutes ago.
        assert_eq!(group.trend.counts.len(), TREND_BUCKETS);
        assert_eq!(group.trend.counts[TREND_BUCKETS - 2], 1, "{:?}", group.trend.counts);
        assert_eq!(group.trend.counts[TREND_BUCKETS - 1], 1, "{:?}", group.trend.counts);
        assert_eq!(group.trend.counts.iter().sum::<usize>(), 2);
    }

    /// README's example: two commits that failed on two different missing
    /// repositories are one group; a refused push in the same consumer is
    /// another.
    #[test]
    fn two_missing_repositories_are_one_group_and_a_refused_push_another() {
        let records = [
            dead(
                "commit",
                "retries-exhausted",
                "failed 6 times; last error: transient: repository `orders` not found for this tenant",
                NOW - time::Duration::minutes(20),
            ),
            dead(
                "commit",
                "retries-exhausted",
                "failed 4 times; last error: transient: repository `ledger` not found for this tenant",
                NOW,
            ),
            dead(
                "commit",
                "retries-exhausted",
                "failed 6 times; last error: transient: Git host refused the request: create push: HTTP 403: \
                 TF401027: You need the Git 'GenericContribute' permission to perform this action.",
                NOW,
            ),
        ];
        let groups = group_failures(&records, NOW);
        assert_eq!(groups.len(), 2, "{groups:#?}");
        assert_eq!(groups[0].ids, [records[1].id, records[0].id]);
        assert_eq!(
            groups[0].pattern,
            "failed <n> times; last error: transient: repository `<name>` not found for this tenant"
        );
        assert_eq!(groups[0].description, records[1].description, "the sample is unmasked");
        assert_eq!(
            groups[1].pattern,
            "failed <n> times; last error: transient: Git host refused the request: create push: HTTP <n>: \
             TF401027: You need the Git '<name>' permission to perform this action."
        );
    }

    #[test]
    fn two_causes_in_one_consumer_are_two_groups() {
        let records = [
            dead(
                "commit",
                "retries-exhausted",
                "repository contoso/payments-api not found",
                NOW,
            ),
            dead(
                "commit",
                "retries-exhausted",
                "the Git host refused the push: quota exceeded",
                NOW,
            ),
            dead(
                "commit",
                "retries-exhausted",
                "the Git host refused the push: quota exceeded",
                NOW,
            ),
            // The same message, another kind of error: another cause.
            dead(
                "commit",
                "permanent-failure",
                "repository contoso/payments-api not found",
                NOW,
            ),
            // The same message in another consumer.
            dead(
                "pull-request",
                "retries-exhausted",
                "repository contoso/payments-api not found",
                NOW,
            ),
        ];
        let groups = group_failures(&records, NOW);
        assert_eq!(groups.len(), 4, "{groups:#?}");
        assert_eq!(groups[0].count, 2, "the largest first");
        assert_eq!(groups[0].pattern, "the Git host refused the push: quota exceeded");
        let mut fingerprints: Vec<&str> = groups.iter().map(|g| g.fingerprint.as_str()).collect();
        fingerprints.dedup();
        assert_eq!(fingerprints.len(), 4);
    }

    #[test]
    fn an_acknowledged_group_is_hidden_until_a_newer_failure_and_keeps_its_note() {
        let first = dead(
            "commit",
            "permanent",
            "repository `orders` not found",
            NOW - time::Duration::hours(2),
        );
        let other = dead("commit", "permanent", "push refused", NOW - time::Duration::hours(1));
        let groups = group_failures(&[first.clone(), other.clone()], NOW);
        let acknowledged = groups
            .iter()
            .find(|group| group.description.contains("orders"))
            .unwrap()
            .fingerprint
            .clone();
        let ack = crate::ports::store::GroupAcknowledgement {
            scope: "contoso".into(),
            fingerprint: acknowledged.clone(),
            by: "key:k1".into(),
            door: "api:k1".into(),
            note: Some("INC-3: repositories come with the next provisioning run".into()),
            at: NOW - time::Duration::minutes(90),
        };
        let listed = with_acknowledgements(groups.clone(), std::slice::from_ref(&ack), false);
        assert_eq!(listed.len(), 1, "the acknowledged group is left out");
        assert!(listed[0].acknowledgement.is_none());
        let all = with_acknowledgements(groups, std::slice::from_ref(&ack), true);
        assert_eq!(all.len(), 2);
        // A newer failure of its cause: listed again, with the note.
        let again = dead("commit", "permanent", "repository `ledger` not found", NOW);
        let groups = group_failures(&[first, other, again], NOW);
        let listed = with_acknowledgements(groups, &[ack], false);
        assert_eq!(listed.len(), 2);
        let back = listed.iter().find(|group| group.fingerprint == acknowledged).unwrap();
        assert_eq!(back.count, 2);
        assert!(
            back.acknowledgement
                .as_ref()
                .unwrap()
                .note
                .as_deref()
                .unwrap()
                .starts_with("INC-3")
        );
    }

    #[test]
    fn replayed_dead_letters_are_not_grouped_and_the_trend_covers_the_last_day() {
        let mut replayed = dead("commit", "retries-exhausted", "gone", NOW);
        replayed.status = DeadLetterStatus::Replayed;
        let old = dead("commit", "retries-exhausted", "gone", NOW - time::Duration::days(3));
        let groups = group_failures(&[replayed, old], NOW);
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].count, 1, "the replayed one is not counted");
        assert_eq!(
            groups[0].trend.counts.iter().sum::<usize>(),
            0,
            "older than the trend's day"
        );
        // One stamped at `now` (or a little past it, by another clock) is in the last bucket.
        let now = dead("commit", "retries-exhausted", "gone", NOW + time::Duration::seconds(2));
        let groups = group_failures(&[now], NOW);
        assert_eq!(groups[0].trend.counts[TREND_BUCKETS - 1], 1);
    }
}

/// Groups over real stores: the same on SQLite and PostgreSQL, within the
/// tenant asked for.
#[cfg(test)]
mod store_tests {
    use std::sync::Arc;

    use time::OffsetDateTime;

    use super::*;
    use crate::backends::memory::MemoryTransport;
    use crate::backends::postgres::store::PostgresStore;
    use crate::backends::postgres::testing;
    use crate::backends::sqlite::store::SqliteStore;
    use crate::operator::Operator;
    use crate::ports::store::{DeadLetterFilter, Store};
    use crate::ports::transport::{Topology, Transport};

    async fn record(store: &dyn Store, tenant: &str, description: String) -> Uuid {
        let id = Uuid::now_v7();
        store
            .record_dead_letter(
                DeadLetterRecord {
                    id,
                    consumer: Some("commit".into()),
                    entity: "commit".into(),
                    transport_sequence: None,
                    broker_message_id: id.to_string(),
                    message_id: Some(Uuid::now_v7().to_string()),
                    message_type: Some("CreateCommit".into()),
                    correlation_id: Some(Uuid::now_v7().to_string()),
                    tenant_id: Some(tenant.into()),
                    body: b"{}".to_vec(),
                    reason: "retries-exhausted".into(),
                    error_chain: vec![description.clone()],
                    description,
                    attempts: Vec::new(),
                    dead_lettered_at: OffsetDateTime::now_utc(),
                    origin: "host".into(),
                    status: DeadLetterStatus::Dead,
                    replays: Vec::new(),
                },
                None,
            )
            .await
            .expect("recorded");
        id
    }

    async fn groups_by_cause_within_a_tenant(store: Arc<dyn Store>) {
        let transport = Arc::new(MemoryTransport::new(5));
        transport.ensure_topology(&Topology::from_routing()).await.unwrap();
        let operator = Operator::new(transport, Arc::clone(&store), "alice");
        let missing = |request: Uuid| format!("repository contoso/payments-api not found (request {request})");
        let a = record(store.as_ref(), "contoso", missing(Uuid::now_v7())).await;
        let b = record(store.as_ref(), "contoso", missing(Uuid::now_v7())).await;
        let refused = record(
            store.as_ref(),
            "contoso",
            "the Git host refused the push: quota exceeded".into(),
        )
        .await;
        let theirs = record(store.as_ref(), "fabrikam", missing(Uuid::now_v7())).await;

        let contoso = DeadLetterFilter {
            tenant_id: Some("contoso".into()),
            ..DeadLetterFilter::default()
        };
        let groups = operator.failure_groups(&contoso).await.unwrap();
        assert_eq!(groups.len(), 2, "{groups:#?}");
        assert_eq!(groups[0].count, 2);
        assert_eq!(groups[0].ids, [b, a]);
        assert_eq!(groups[1].ids, [refused]);
        // The same cause in another tenant has the same fingerprint, and
        // its dead letters stay in that tenant's group.
        let fabrikam = DeadLetterFilter {
            tenant_id: Some("fabrikam".into()),
            ..DeadLetterFilter::default()
        };
        let group = operator.failure_group(&fabrikam, &groups[0].fingerprint).await.unwrap();
        assert_eq!(group.ids, [theirs]);
        let err = operator
            .failure_group(&fabrikam, &groups[1].fingerprint)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("no failure group"), "{err}");
    }

    #[tokio::test]
    async fn sqlite_groups_by_cause_within_a_tenant() {
        groups_by_cause_within_a_tenant(Arc::new(SqliteStore::in_memory().unwrap())).await;
    }

    #[tokio::test]
    async fn postgres_groups_by_cause_within_a_tenant() {
        let test = testing::migrated().await;
        groups_by_cause_within_a_tenant(Arc::new(PostgresStore::new(test.database.clone()))).await;
        test.finish().await;
    }
}
