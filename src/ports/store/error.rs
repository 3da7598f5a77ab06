//! [`StoreError`]: what went wrong in a store, with its cause, and what it
//! means for the work that met it ([`StoreError::next_step`]).

use crate::ports::error::{BoxError, NextStep};

/// Store failures. Each says what it means for the work that met it:
/// [`StoreError::next_step`].
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The saga changed since it was loaded; reload and re-apply.
    #[error("saga {kind}/{key} is at version {found}, expected {expected}")]
    SagaConflict {
        /// Saga kind.
        kind: String,
        /// Saga key.
        key: String,
        /// Version the writer loaded.
        expected: i64,
        /// Version in the store.
        found: i64,
    },
    /// A tenant's release policy changed since the writer read it (another
    /// writer stored a version in between): nothing was stored; read the
    /// policy again, re-apply the change and retry.
    #[error(
        "release policy of tenant {tenant} is at version {}, expected {}: another writer changed it; read it again and retry",
        policy_version(*.found),
        policy_version(*.expected)
    )]
    PolicyChanged {
        /// The tenant.
        tenant: String,
        /// The version the writer read (`None`: it read none).
        expected: Option<u64>,
        /// The version in the store (`None`: there is none).
        found: Option<u64>,
    },
    /// No record with that id.
    #[error("no {what} `{id}`")]
    NotFound {
        /// What was looked up.
        what: &'static str,
        /// The id.
        id: String,
    },
    /// An id prefix that matches several records the caller may see.
    #[error("{what} `{id}` is ambiguous: it begins {}; give more of the id", candidates.join(", "))]
    Ambiguous {
        /// What was looked up.
        what: &'static str,
        /// The prefix given.
        id: String,
        /// The ids it matches (at most [`AMBIGUOUS_SHOWN`](super::AMBIGUOUS_SHOWN)).
        candidates: Vec<String>,
    },
    /// The database's schema is not the version this bosun needs.
    #[error("{}", schema_mismatch_message(*.found, *.expected))]
    SchemaMismatch {
        /// The version recorded in the database (0: never migrated).
        found: i64,
        /// The version this bosun needs.
        expected: i64,
    },
    /// The database was migrated by a newer bosun past what this one runs
    /// with (outside its compatibility window).
    #[error("{}", schema_too_new_message(*.found, *.runs_with, *.built_for))]
    SchemaTooNew {
        /// The version recorded in the database.
        found: i64,
        /// The oldest bosun (by the schema it was built for) the database runs with.
        runs_with: i64,
        /// The schema this bosun was built for.
        built_for: i64,
    },
    /// Stored data that does not decode (a saga's state, a dead letter's
    /// error chain, a timeline row ...): what needs it can never succeed.
    #[error("corrupt {what} in the store: {source}; a message that needs it is dead-lettered, not retried")]
    Corrupt {
        /// What could not be read (`state of saga release/contoso/r-1`).
        what: String,
        /// The decoding error.
        #[source]
        source: BoxError,
    },
    /// A value that cannot be encoded for storage.
    #[error("cannot store {what}: {source}")]
    Unencodable {
        /// What was to be written.
        what: String,
        /// The encoding error.
        #[source]
        source: BoxError,
    },
    /// The store cannot be used as configured (a URL that does not parse,
    /// TLS that cannot be set up, a migrated schema that differs from this
    /// build's): stop and fix the configuration.
    #[error("store misconfigured ({doing}): {source}; fix the configuration and restart")]
    Misconfigured {
        /// What was being done.
        doing: String,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// The database failed or could not be reached; try again.
    #[error("store unavailable while {doing}: {source}")]
    Unavailable {
        /// What was being done (`loading saga release/contoso/r-1`).
        doing: String,
        /// The database's error.
        #[source]
        source: BoxError,
    },
}

/// What a [`StoreError`] made by a plain conversion (`?` on a database
/// error) says it was doing until [`StoreError::doing`] names the operation.
pub(crate) const SOME_STORE_OPERATION: &str = "using the store";

impl StoreError {
    /// What the work that met this error should do next.
    pub fn next_step(&self) -> NextStep {
        match self {
            Self::SagaConflict { .. } | Self::PolicyChanged { .. } | Self::Unavailable { .. } => NextStep::Retry,
            Self::NotFound { .. } | Self::Ambiguous { .. } | Self::Corrupt { .. } | Self::Unencodable { .. } => {
                NextStep::DeadLetter
            }
            Self::SchemaMismatch { .. } | Self::SchemaTooNew { .. } | Self::Misconfigured { .. } => NextStep::Stop,
        }
    }

    /// The database is unavailable while `doing`.
    pub fn unavailable(doing: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Unavailable {
            doing: doing.into(),
            source: source.into(),
        }
    }

    /// `what`, as stored, does not decode.
    pub fn corrupt(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Corrupt {
            what: what.into(),
            source: source.into(),
        }
    }

    /// `what` cannot be encoded for storage.
    pub fn unencodable(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Unencodable {
            what: what.into(),
            source: source.into(),
        }
    }

    /// Names the operation an error made by a plain conversion happened in
    /// (`loading saga release/contoso/r-1`); errors that already say more
    /// are left as they are.
    pub fn doing(self, operation: impl Into<String>) -> Self {
        match self {
            Self::Unavailable { doing, source } if doing == SOME_STORE_OPERATION => Self::Unavailable {
                doing: operation.into(),
                source,
            },
            Self::Misconfigured { doing, source } if doing == SOME_STORE_OPERATION => Self::Misconfigured {
                doing: operation.into(),
                source,
            },
            Self::Corrupt { what, source } if what == SOME_STORE_OPERATION => Self::Corrupt {
                what: format!("data read while {}", operation.into()),
                source,
            },
            other => other,
        }
    }
}

/// A release policy's version as [`StoreError::PolicyChanged`] names it.
fn policy_version(version: Option<u64>) -> String {
    version.map_or_else(|| "none".to_owned(), |version| version.to_string())
}

/// What to tell an operator whose database a newer bosun migrated past
/// what this one (built for `built_for`) runs with.
pub(crate) fn schema_too_new_message(found: i64, runs_with: i64, built_for: i64) -> String {
    format!(
        "database schema is at version {found}, which runs with bosun built for schema {runs_with} or later; \
         this bosun is built for {built_for}: run a newer bosun"
    )
}

/// What to tell an operator whose database is at `found` when `expected` is needed.
pub(crate) fn schema_mismatch_message(found: i64, expected: i64) -> String {
    if found < expected {
        format!("database schema is at version {found}, this bosun needs {expected}; run `bosun migrate`")
    } else {
        format!(
            "database schema is at version {found}, newer than this bosun (which needs {expected}); \
             run a bosun at least as new as the one that migrated it"
        )
    }
}
