//! Saga state carries its version, so a release can change a saga's state
//! while sagas saved by the release before it wait in the database.
//!
//! Every stored state is a JSON object with a `stateVersion` field (absent
//! on states saved before states were versioned: those are version 1).
//! Loading a state ([`load_state`]):
//!
//! - at this build's [`VersionedState::VERSION`]: read as it is;
//! - older: brought up to date by the type's [`VersionedState::UPCASTS`],
//!   one pure step per version, before it is read;
//! - newer (a later release saved it): refused with
//!   [`StateError::Newer`], so the message that needed it waits for a
//!   process of that release and the state is never overwritten by code
//!   that does not understand it.
//!
//! [`save_state`] writes the state with this build's version.
//!
//! The previous release reads the states this one saves (a rollback, or
//! both running during a rolling update): it ignores fields it does not
//! know, `stateVersion` among them, and a state it saves has no
//! `stateVersion` and reads here as version 1. So a change to a state's
//! shape follows the same expand/contract rule as a database migration
//! (`docs/UPGRADING.md`): add fields the previous release can ignore; bump
//! [`VersionedState::VERSION`] (with its upcast) only for a change the
//! previous release must not read, and only once no release that cannot
//! read it may run.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::SagaKind;

/// The field of a stored saga state that holds its version.
pub const STATE_VERSION_FIELD: &str = "stateVersion";

/// One upcast step: a stored state (as a JSON object, without its
/// `stateVersion`) of one version, rewritten to the next. Pure; an `Err`
/// says why the state cannot be brought up to date.
pub type Upcast = fn(Map<String, Value>) -> Result<Map<String, Value>, String>;

/// A saga's persisted state, with its version and how older versions are
/// brought up to date.
pub trait VersionedState: Serialize + DeserializeOwned + Default {
    /// Which saga it is the state of.
    const KIND: SagaKind;
    /// The version this build writes (1 for the first).
    const VERSION: u32;
    /// The upcast steps, oldest first: `UPCASTS[n]` takes version `n + 1`
    /// to `n + 2`, so there are `VERSION - 1` of them.
    const UPCASTS: &'static [Upcast];

    /// The version this state is saved as: [`VersionedState::VERSION`],
    /// unless the state holds nothing an older version lacks. A state whose
    /// newest part only some states use (a queue that is empty most of the
    /// time) saves as the older version while it does not use it, so the
    /// previous release keeps reading it, and as the newer one while it
    /// does, so the previous release leaves it alone rather than dropping
    /// what it does not know.
    fn stored_version(&self) -> u32 {
        Self::VERSION
    }
}

/// Why a stored saga state cannot be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// A later release saved it. Nothing is written: the message that
    /// needed it waits for a process of that release.
    #[error(
        "the {kind} saga's stored state is version {found}, saved by a later bosun; this one reads versions up to \
         {known}: left as it is for a bosun that reads it"
    )]
    Newer {
        /// The saga kind.
        kind: SagaKind,
        /// The version stored.
        found: u32,
        /// The newest this build reads.
        known: u32,
    },
    /// It is not a state this build can read at any version: an operator
    /// has to repair it.
    #[error("the {kind} saga's stored state (version {version}) cannot be read: {reason}")]
    Unreadable {
        /// The saga kind.
        kind: SagaKind,
        /// The version it claims (1 when it claims none).
        version: u32,
        /// What is wrong, naming the field where one is to blame.
        reason: String,
    },
    /// This build cannot write the state (a bug: states are plain data).
    #[error("the {kind} saga's state cannot be written: {reason}")]
    Unwritable {
        /// The saga kind.
        kind: SagaKind,
        /// What serialization said.
        reason: String,
    },
}

/// The version a stored state claims: its `stateVersion`, or 1 when it has
/// none (saved before states were versioned, or by the previous release).
pub fn stored_version(kind: SagaKind, stored: &Value) -> Result<u32, StateError> {
    let unreadable = |reason: String| StateError::Unreadable {
        kind,
        version: 1,
        reason,
    };
    let object = stored
        .as_object()
        .ok_or_else(|| unreadable("a saga state is a JSON object".to_owned()))?;
    match object.get(STATE_VERSION_FIELD) {
        None => Ok(1),
        Some(version) => version
            .as_u64()
            .and_then(|version| u32::try_from(version).ok())
            .filter(|version| *version >= 1)
            .ok_or_else(|| {
                unreadable(format!(
                    "field `{STATE_VERSION_FIELD}` is {version}, not a positive integer"
                ))
            }),
    }
}

/// Loads a stored state: `null` (no saga yet) is the default state; an
/// older version is upcast; a newer one is [`StateError::Newer`].
pub fn load_state<S: VersionedState>(stored: &Value) -> Result<S, StateError> {
    if stored.is_null() {
        return Ok(S::default());
    }
    let version = stored_version(S::KIND, stored)?;
    if version > S::VERSION {
        return Err(StateError::Newer {
            kind: S::KIND,
            found: version,
            known: S::VERSION,
        });
    }
    let unreadable = |reason: String| StateError::Unreadable {
        kind: S::KIND,
        version,
        reason,
    };
    let mut object = stored.as_object().cloned().unwrap_or_default();
    object.remove(STATE_VERSION_FIELD);
    for from in version..S::VERSION {
        let step = usize::try_from(from - 1)
            .ok()
            .and_then(|at| S::UPCASTS.get(at))
            .ok_or_else(|| unreadable(format!("no upcast from version {from} to {}", from + 1)))?;
        object = step(object).map_err(|reason| unreadable(format!("upcast to version {}: {reason}", from + 1)))?;
    }
    serde_path_to_error::deserialize(Value::Object(object)).map_err(|err| {
        let path = err.path().to_string();
        unreadable(format!("at `{path}`: {}", err.into_inner()))
    })
}

/// The state as stored: its fields and `stateVersion` at
/// [`VersionedState::stored_version`] (this build's
/// [`VersionedState::VERSION`], or older when the state needs no more).
pub fn save_state<S: VersionedState>(state: &S) -> Result<Value, StateError> {
    let unwritable = |reason: String| StateError::Unwritable { kind: S::KIND, reason };
    let mut value = serde_json::to_value(state).map_err(|err| unwritable(err.to_string()))?;
    let object = value
        .as_object_mut()
        .ok_or_else(|| unwritable("a saga state serializes to a JSON object".to_owned()))?;
    object.insert(
        STATE_VERSION_FIELD.to_owned(),
        Value::from(state.stored_version().min(S::VERSION)),
    );
    Ok(value)
}

/// Whether a state type's upcasts cover every version before its own
/// (`VERSION - 1` steps): each saga state's tests call it.
pub fn upcasts_are_complete<S: VersionedState>() -> bool {
    usize::try_from(S::VERSION).is_ok_and(|version| version >= 1 && S::UPCASTS.len() == version - 1)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    /// A state at version 3: `name` was `title` in version 1, and `count`
    /// became `counts` (a list) in version 3.
    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    struct Sample {
        name: String,
        counts: Vec<u32>,
    }

    fn rename_title(mut state: Map<String, Value>) -> Result<Map<String, Value>, String> {
        if let Some(title) = state.remove("title") {
            state.insert("name".to_owned(), title);
        }
        Ok(state)
    }

    fn count_to_counts(mut state: Map<String, Value>) -> Result<Map<String, Value>, String> {
        let count = state.remove("count").unwrap_or(Value::from(0));
        if !count.is_u64() {
            return Err(format!("field `count` is {count}, not a count"));
        }
        state.insert("counts".to_owned(), json!([count]));
        Ok(state)
    }

    impl VersionedState for Sample {
        const KIND: SagaKind = SagaKind::Probe;
        const VERSION: u32 = 3;
        const UPCASTS: &'static [Upcast] = &[rename_title, count_to_counts];
    }

    #[test]
    fn an_older_state_is_upcast_step_by_step() {
        let v1 = json!({"title": "canary", "count": 4});
        let loaded: Sample = load_state(&v1).unwrap();
        assert_eq!(
            loaded,
            Sample {
                name: "canary".to_owned(),
                counts: vec![4]
            }
        );
        let v2 = json!({"stateVersion": 2, "name": "canary", "count": 5});
        assert_eq!(load_state::<Sample>(&v2).unwrap().counts, vec![5]);
        let v3 = json!({"stateVersion": 3, "name": "canary", "counts": [1, 2]});
        assert_eq!(load_state::<Sample>(&v3).unwrap().counts, vec![1, 2]);
        assert!(upcasts_are_complete::<Sample>());
    }

    #[test]
    fn a_newer_state_is_refused_as_newer_not_as_corrupt() {
        let v4 = json!({"stateVersion": 4, "name": "canary", "shape": "unknown"});
        assert_eq!(
            load_state::<Sample>(&v4),
            Err(StateError::Newer {
                kind: SagaKind::Probe,
                found: 4,
                known: 3
            })
        );
    }

    #[test]
    fn a_state_saved_carries_this_builds_version_and_loads_back() {
        let state = Sample {
            name: "canary".to_owned(),
            counts: vec![7],
        };
        let saved = save_state(&state).unwrap();
        assert_eq!(saved["stateVersion"], 3);
        assert_eq!(load_state::<Sample>(&saved).unwrap(), state);
        assert_eq!(load_state::<Sample>(&Value::Null).unwrap(), Sample::default());
    }

    #[test]
    fn unreadable_states_name_what_is_wrong() {
        for (stored, needle) in [
            (json!({"stateVersion": "two"}), "`stateVersion` is \"two\""),
            (json!({"stateVersion": 0}), "`stateVersion` is 0"),
            (json!([1, 2]), "JSON object"),
            (
                json!({"title": "x", "count": "many"}),
                "upcast to version 3: field `count`",
            ),
            (json!({"stateVersion": 3, "name": 5, "counts": []}), "at `name`"),
        ] {
            let err = load_state::<Sample>(&stored).unwrap_err();
            assert!(matches!(err, StateError::Unreadable { .. }), "{err:?}");
            assert!(err.to_string().contains(needle), "{err} lacks {needle}");
        }
    }

    #[test]
    fn every_saga_state_has_its_upcasts() {
        assert!(upcasts_are_complete::<crate::release::ReleaseState>());
        assert!(upcasts_are_complete::<crate::gitops::GitOpsState>());
    }

    #[test]
    fn a_missing_upcast_step_is_an_error_not_a_skip() {
        #[derive(Debug, Default, Serialize, Deserialize)]
        struct Gappy {}
        impl VersionedState for Gappy {
            const KIND: SagaKind = SagaKind::Probe;
            const VERSION: u32 = 2;
            const UPCASTS: &'static [Upcast] = &[];
        }
        assert!(!upcasts_are_complete::<Gappy>());
        let err = load_state::<Gappy>(&json!({})).unwrap_err();
        assert!(err.to_string().contains("no upcast from version 1 to 2"), "{err}");
    }
}
