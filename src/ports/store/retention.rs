//! Retention: what is kept how long, which sagas are finished, and what a pruning pass removed.

use serde::Serialize;
use time::OffsetDateTime;

/// How a saga of one kind says it is over: its state's top-level `field`
/// holds one of `values` (the release saga: `phase` is `completed` or
/// `rejected`). Sagas of kinds with no such rule (GitOps environments,
/// probe tallies) never finish and are never pruned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedSaga {
    /// The saga kind (`release`).
    pub kind: String,
    /// The state's field naming where the saga is (`phase`).
    pub field: String,
    /// The values of that field that mean it is over.
    pub values: Vec<String>,
}

/// What [`AdminStore::prune`](super::AdminStore::prune) may delete: of each kind, rows older than its
/// retention (`None`: kept forever), at most `batch` rows per kind per call.
/// Dead letters are never pruned (operators purge them), nor outbox entries
/// not yet sent, nor sagas not finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Idempotency records (and the attempts of failed handlings), by when
    /// they were written; the front door's `Idempotency-Key` records too,
    /// by when they were claimed.
    pub handled: Option<std::time::Duration>,
    /// Outbox entries, by when they were sent (unsent ones are kept).
    pub outbox_sent: Option<std::time::Duration>,
    /// Timeline lines, by their time (the lines of a delivery that has a
    /// dead letter are kept while it exists); a delivery's record goes when
    /// it is older than this and its lines are gone; a bulk replay job when
    /// it ended longer ago than this; a saga's history entries, by their
    /// time, whether the saga finishes or not (its state is never pruned
    /// for age: only a finished saga goes, after `finished_sagas`).
    pub timeline: Option<std::time::Duration>,
    /// Finished sagas (with their history), by their last save.
    pub finished_sagas: Option<std::time::Duration>,
    /// The most history entries a saga keeps: those of its last this many
    /// versions (its state is never pruned), so a saga that never finishes
    /// and changes often keeps a bounded history within the timeline's
    /// retention too.
    pub saga_history_entries: Option<u64>,
    /// How each saga kind that can finish says so.
    pub finished: Vec<FinishedSaga>,
    /// Most rows deleted per kind per call (each a short statement).
    pub batch: usize,
}

/// How many rows one [`AdminStore::prune`](super::AdminStore::prune) (and the transport's
/// [`Transport::prune_duplicates`](crate::ports::transport::Transport::prune_duplicates))
/// deleted, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pruned {
    /// Idempotency records.
    pub handled: u64,
    /// Attempts of failed handlings.
    pub attempts: u64,
    /// Sent outbox entries.
    pub outbox: u64,
    /// Timeline lines.
    pub timeline: u64,
    /// Delivery records.
    pub deliveries: u64,
    /// Finished sagas (their history goes with them).
    pub sagas: u64,
    /// The transport's duplicate-detection records.
    pub duplicates: u64,
    /// Bulk replay jobs that ended (finished or cancelled) before the
    /// timeline's retention, with their items.
    pub replay_jobs: u64,
    /// The front door's `Idempotency-Key` records.
    pub http_idempotency: u64,
    /// Saga history entries past the timeline's retention.
    pub saga_history: u64,
}

impl Pruned {
    /// Rows deleted in all.
    pub fn total(&self) -> u64 {
        self.kinds().iter().map(|(_, count)| count).sum()
    }

    /// Whether some kind filled its batch of `batch` rows: there may be more.
    pub fn any_full(&self, batch: usize) -> bool {
        let batch = u64::try_from(batch).unwrap_or(u64::MAX);
        self.kinds().iter().any(|(_, count)| *count >= batch)
    }

    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &Pruned) {
        self.handled += other.handled;
        self.attempts += other.attempts;
        self.outbox += other.outbox;
        self.timeline += other.timeline;
        self.deliveries += other.deliveries;
        self.sagas += other.sagas;
        self.duplicates += other.duplicates;
        self.replay_jobs += other.replay_jobs;
        self.http_idempotency += other.http_idempotency;
        self.saga_history += other.saga_history;
    }

    /// Each kind's name and count.
    pub fn kinds(&self) -> [(&'static str, u64); 10] {
        [
            ("handled", self.handled),
            ("attempts", self.attempts),
            ("outbox", self.outbox),
            ("timeline", self.timeline),
            ("deliveries", self.deliveries),
            ("sagas", self.sagas),
            ("duplicates", self.duplicates),
            ("replay-jobs", self.replay_jobs),
            ("idempotency-keys", self.http_idempotency),
            ("saga-history", self.saga_history),
        ]
    }
}

impl std::fmt::Display for Pruned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .kinds()
            .iter()
            .map(|(kind, count)| format!("{kind} {count}"))
            .collect();
        f.write_str(&parts.join(", "))
    }
}

/// `now - keep`: rows older than this are past their retention (`None`
/// when the kind is kept forever; the Unix epoch, older than any row, when
/// `keep` reaches back further than a time can).
pub(crate) fn cutoff(now: OffsetDateTime, keep: Option<std::time::Duration>) -> Option<OffsetDateTime> {
    keep.map(|keep| {
        time::Duration::try_from(keep)
            .ok()
            .and_then(|keep| now.checked_sub(keep))
            .unwrap_or(OffsetDateTime::UNIX_EPOCH)
            .max(OffsetDateTime::UNIX_EPOCH)
    })
}
