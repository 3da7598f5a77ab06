//! The corpus of the past: what each release writes that a later release
//! must still read, checked in under `corpus/`.
//!
//! - `corpus/messages/<Type>.v<N>.json`: an envelope of every message type
//!   at the version this build writes (the catalogue samples, with fixed
//!   ids and times);
//! - `corpus/sagas/<kind>.v<N>.<phase>.json`: saga states (release, GitOps,
//!   probe) as this build saves them, one per phase a release passes
//!   through on its way to production.
//!
//! Files are generated ([`corpus_files`]) and never removed: a release that
//! bumps a message or saga state version adds the new file beside the old
//! one, and the tests below decode every file ever written with the
//! current code (older versions through their upcasts). The freshness test
//! says when the files of the current versions differ from what the code
//! writes; regenerate them with `BOSUN_UPDATE_CORPUS=1 cargo test --lib
//! tools::corpus`, which writes the current versions and leaves the rest.

use std::collections::BTreeMap;

use bosun_consumers::probe::ProbeTally;
use bosun_contracts::messages::{ApproveRelease, GitOpsSynced, InfrastructureProvisioned, MessageSpec};
use bosun_contracts::{CATALOGUE, Envelope, Message, samples};
use bosun_sagas::gitops::{DesiredStateWritten, GitOpsInput, GitOpsSaga, GitOpsState};
use bosun_sagas::release::{ReleasePolicy, ReleaseSaga, ReleaseState};
use bosun_sagas::versioned::{VersionedState, save_state};
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;
use time::macros::datetime;
use uuid::Uuid;

/// When every corpus message was written.
const AT: OffsetDateTime = datetime!(2026-11-29 12:00:00 UTC);

/// The release the saga samples follow.
const RELEASE_ID: &str = "payments-api-1.4.0-7f3c2a1";

/// Every corpus file this build writes: `(path under corpus/, text)`, in
/// a stable order.
pub fn corpus_files() -> Vec<(String, String)> {
    let mut files = message_files();
    files.extend(saga_files());
    files
}

/// The envelope of every catalogued message at the version this build
/// writes.
fn message_files() -> Vec<(String, String)> {
    CATALOGUE
        .iter()
        .zip(0u128..)
        .filter_map(|(spec, n)| {
            let message = samples::sample(spec.message_type)?;
            Some((message_path(spec), pretty(&envelope_of(&message, n))))
        })
        .collect()
}

fn message_path(spec: &MessageSpec) -> String {
    format!("messages/{}.v{}.json", spec.message_type, spec.schema_version)
}

/// A sample envelope with fixed ids and times, so the text is stable.
fn envelope_of(message: &Message, n: u128) -> Value {
    let mut envelope = Envelope::new(
        message,
        Uuid::from_u128(0x0193_0000_0000_7000_8000_0000_0000_ffff),
        "contoso",
        "corpus",
    );
    envelope.message_id = Uuid::from_u128(0x0193_0000_0000_7000_8000_0000_0000_0000 + n);
    envelope.occurred_at = AT;
    envelope.traceparent = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned());
    serde_json::to_value(&envelope).unwrap_or(Value::Null)
}

/// Saga states as this build saves them.
fn saga_files() -> Vec<(String, String)> {
    let mut files = Vec::new();
    for (phase, state) in release_states() {
        files.push(saga_file(&state, &phase));
    }
    for (phase, state) in gitops_states() {
        files.push(saga_file(&state, phase));
    }
    let tally = ProbeTally {
        count: 412,
        highest_sequence: 411,
        first_at: Some(AT),
        last_at: Some(AT + time::Duration::seconds(31)),
    };
    files.push(saga_file(&tally, "counting"));
    files
}

fn saga_file<S: VersionedState>(state: &S, phase: &str) -> (String, String) {
    let saved = save_state(state).unwrap_or(Value::Null);
    (saga_path::<S>(state.stored_version(), phase), pretty(&saved))
}

/// Named by the version the state is saved as (a GitOps state without a
/// queue is still version 1).
fn saga_path<S: VersionedState>(version: u32, phase: &str) -> String {
    format!("sagas/{}.v{version}.{phase}.json", S::KIND)
}

/// A release from its build to production, through dev (approved on its
/// own), staging and prod (approved by a person, each with an approval
/// timeout pending while it waits): the state after each step whose phase
/// is new, keyed by phase.
fn release_states() -> BTreeMap<String, ReleaseState> {
    let saga = ReleaseSaga::new(ReleasePolicy {
        environments: vec!["dev".to_owned(), "staging".to_owned(), "prod".to_owned()],
        auto_approve: vec!["dev".to_owned()],
        ..ReleasePolicy::default()
    });
    let mut steps: Vec<Message> = vec![
        samples::build_completed().into(),
        samples::container_image_built().into(),
        samples::package_published().into(),
    ];
    for environment in ["dev", "staging", "prod"] {
        steps.push(
            InfrastructureProvisioned {
                plan_id: format!("{RELEASE_ID}-{environment}"),
                stack: format!("payments/{environment}"),
                environment: environment.to_owned(),
                ..samples::infrastructure_provisioned()
            }
            .into(),
        );
        steps.push(
            ApproveRelease {
                environment: environment.to_owned(),
                ..samples::approve_release()
            }
            .into(),
        );
        steps.push(
            GitOpsSynced {
                environment: environment.to_owned(),
                ..samples::gitops_synced()
            }
            .into(),
        );
    }
    let mut states = BTreeMap::new();
    let mut state = ReleaseState::default();
    for message in steps {
        // A step the release does not take in its phase (e.g. an approval
        // dev needs no person for) is skipped, as the saga would.
        let Ok(transition) = saga.apply_at(&state, &message, AT) else {
            continue;
        };
        state = transition.state;
        let phase = serde_json::to_value(state.phase)
            .ok()
            .and_then(|phase| phase.as_str().map(str::to_owned))
            .unwrap_or_else(|| "unknown".to_owned());
        let waits_on = state
            .pending_timeout
            .as_ref()
            .map(|pending| pending.message.environment.clone());
        let name = match waits_on {
            Some(environment) => format!("{phase}-{environment}"),
            None => phase,
        };
        states.entry(name).or_insert_with(|| state.clone());
    }
    states
}

/// An environment's GitOps saga: a promotion being written, then written
/// and waiting for the environment to report.
fn gitops_states() -> Vec<(&'static str, GitOpsState)> {
    let saga = GitOpsSaga::new();
    let promoted = samples::deployment_promoted();
    let mut states = Vec::new();
    let message: Message = promoted.clone().into();
    let Ok(writing) = saga.step(&GitOpsState::default(), &GitOpsInput::Message(&message)) else {
        return states;
    };
    states.push(("writing", writing.state.clone()));
    let written = DesiredStateWritten {
        module_id: promoted.module_id.clone(),
        release_id: promoted.release_id.clone(),
        promoted_at: promoted.promoted_at,
        repository: promoted.environment_repository.clone(),
        commit_sha: "9fceb02d0ae598e95dc970b74767f19372d61af8".to_owned(),
    };
    if let Ok(reconciling) = saga.step(&writing.state, &GitOpsInput::DesiredStateWritten(written)) {
        // Another release promoted while that one is in flight: queued.
        let mut next = promoted.clone();
        next.release_id = format!("{}-next", promoted.release_id);
        next.promoted_at = promoted.promoted_at + time::Duration::minutes(5);
        let message: Message = next.into();
        if let Ok(queued) = saga.step(&reconciling.state, &GitOpsInput::Message(&message)) {
            states.push(("queued", queued.state));
        }
        states.push(("reconciling", reconciling.state));
    }
    states
}

fn pretty(value: &impl Serialize) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests;
