//! The catalogue: every command and event of the eleven consumers.
//!
//! Each message type is a payload struct in one of the submodules, listed
//! once in the `catalogue!` invocation below with its kind and schema
//! version, the oldest version still read when older ones are
//! (`version 2 reads 1`; [`crate::versions`] holds the steps between
//! versions) (and `(internal)` for the messages bosun schedules for itself,
//! which no front door accepts). The macro derives the [`Message`] enum, the [`CATALOGUE`] of
//! specs, typed decoding and the JSON Schema list from that one list.
//!
//! One submodule per area: [`repository`], [`source_control`],
//! [`pull_request`], [`pipeline`], [`build`], [`artifacts`], [`release`],
//! [`infrastructure`], [`gitops`]; types several areas share live in
//! [`module`] ([`ModuleMetadata`]) and [`blob`] ([`BlobRef`],
//! [`ArtifactRef`]).
//!
//! The catalogue knows nothing of envelopes: [`crate::envelope`] is above
//! it, and [`crate::schema`] and [`crate::routing`] are above both.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ContractError, path_or_root};
use crate::validate::{FieldError, Validate};

pub mod artifacts;
pub mod blob;
pub mod build;
pub mod gitops;
pub mod infrastructure;
pub mod module;
pub mod pipeline;
pub mod probe;
pub mod pull_request;
pub mod release;
pub mod repository;
pub mod source_control;
pub mod verification;

pub use artifacts::*;
pub use blob::*;
pub use build::*;
pub use gitops::*;
pub use infrastructure::*;
pub use module::*;
pub use pipeline::*;
pub use probe::*;
pub use pull_request::*;
pub use release::*;
pub use repository::*;
pub use source_control::*;
pub use verification::*;

/// Whether a message asks for something to be done or records that it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MessageKind {
    /// Asks one consumer to do something; goes to that consumer's queue.
    Command,
    /// Records a fact; published on the events topic to every subscriber.
    Event,
}

impl MessageKind {
    /// `command` or `event`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Command => "command",
            Self::Event => "event",
        }
    }
}

impl std::fmt::Display for MessageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the catalogue knows about one message type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageSpec {
    /// The `type` name on the envelope.
    pub message_type: &'static str,
    /// Command or event.
    pub kind: MessageKind,
    /// The schema version this build writes, and the newest it reads.
    pub schema_version: u32,
    /// The oldest schema version this build still reads (upcast to
    /// [`MessageSpec::schema_version`] by [`crate::versions`]); older ones
    /// are refused.
    pub oldest_read: u32,
    /// One line saying what the message means.
    pub description: &'static str,
    /// A message bosun schedules or records for itself (a timeout, a poll,
    /// the release audit's record): no front door (HTTP API, MCP, `bosun
    /// send`) accepts it, it is left out of the OpenAPI document, and a
    /// dead letter of it is only ever replayed as it is, never edited.
    pub internal: bool,
}

impl MessageSpec {
    /// The spec of a type name, if the catalogue has it.
    pub fn find(message_type: &str) -> Option<&'static MessageSpec> {
        CATALOGUE.iter().find(|spec| spec.message_type == message_type)
    }

    /// The versions this build reads, e.g. `1` or `1..=2`.
    pub fn versions_read(&self) -> String {
        if self.oldest_read == self.schema_version {
            self.schema_version.to_string()
        } else {
            format!("{}..={}", self.oldest_read, self.schema_version)
        }
    }

    /// Whether callers outside bosun may send it: a command that is not
    /// [`internal`](MessageSpec::internal).
    pub fn is_sendable(&self) -> bool {
        self.kind == MessageKind::Command && !self.internal
    }
}

macro_rules! catalogue {
    (@internal internal) => { true };
    (@internal) => { false };
    (@oldest $version:literal $oldest:literal) => { $oldest };
    (@oldest $version:literal) => { $version };
    ($( $kind:ident $name:ident version $version:literal $(reads $oldest:literal)? $( ($internal:ident) )? : $doc:literal ;)*) => {
        /// Every message bosun knows, with its typed payload.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Message {
            $(
                #[doc = $doc]
                $name($name),
            )*
        }

        /// Every message type, in catalogue order.
        pub const CATALOGUE: &[MessageSpec] = &[
            $(
                MessageSpec {
                    message_type: stringify!($name),
                    kind: MessageKind::$kind,
                    schema_version: $version,
                    oldest_read: catalogue!(@oldest $version $($oldest)?),
                    description: $doc,
                    internal: catalogue!(@internal $($internal)?),
                },
            )*
        ];

        impl Message {
            /// The `type` name of this message.
            pub fn message_type(&self) -> &'static str {
                match self {
                    $( Self::$name(_) => stringify!($name), )*
                }
            }

            fn payload_value(&self) -> Result<Value, serde_json::Error> {
                match self {
                    $( Self::$name(payload) => serde_json::to_value(payload), )*
                }
            }

            fn decode_payload(message_type: &str, payload: &Value) -> Option<Result<Self, ContractError>> {
                match message_type {
                    $( stringify!($name) => Some(decode::<$name>(payload).map(Self::$name)), )*
                    _ => None,
                }
            }

            fn validate_payload(&self) -> Result<(), FieldError> {
                match self {
                    $( Self::$name(payload) => payload.validate(), )*
                }
            }
        }

        $(
            impl From<$name> for Message {
                fn from(payload: $name) -> Self {
                    Self::$name(payload)
                }
            }
        )*

        /// The JSON Schema of every payload, keyed by type name.
        pub fn payload_schemas() -> Vec<(&'static str, schemars::Schema)> {
            vec![ $( (stringify!($name), crate::schema_rules::generator().into_root_schema_for::<$name>()), )* ]
        }
    };
}

catalogue! {
    Command ProvisionRepository version 1: "Create and configure a Git repository for a tenant (idempotent on tenant + name).";
    Event RepositoryProvisioned version 1: "A repository exists and is configured (created now or found existing).";
    Command CreateCommit version 1: "Write an artifact bundle's files into a branch and commit them.";
    Event CommitCreated version 1: "A branch holds the requested tree (a new commit, or the existing one when nothing changed).";
    Command OpenPullRequest version 1: "Open a pull request with policy and build checks (idempotent on repository + source + target branch).";
    Event PullRequestOpened version 1: "A pull request is open (opened now, or found already open).";
    Command GeneratePipeline version 1: "Generate a module's YAML pipeline from its metadata and commit it (idempotent on repository + moduleId + templateVersion).";
    Event PipelineGenerated version 1: "A module's pipeline file is committed and its pipeline definition exists.";
    Event PipelineRunStarted version 1: "A pipeline run started for a release candidate.";
    Command PollPipelineRun version 1 (internal): "The pipeline monitor's self-scheduled check of a run; carries the whole run so no state is held between polls.";
    Event PipelineRunCompleted version 1: "A pipeline run finished (succeeded, failed or canceled); its log and JUnit files are in the blob store.";
    Event BuildCompleted version 1: "A pipeline run's results are ingested: tests counted, logs and artifacts stored (idempotent on buildId).";
    Command PollContainerBuild version 1 (internal): "The container-build consumer's self-scheduled check of an image build running elsewhere (ACR Tasks); carries the whole build so no state is held between polls.";
    Event ContainerImageBuilt version 1: "An OCI image was built from a build and pushed (idempotent on the image digest).";
    Event PackagePublished version 1: "A NuGet package version is on its feed (idempotent on packageId + version; versions are immutable).";
    Event ReleasePlanned version 1: "A release's artifacts are ready and its promotion path through the environments is set.";
    Command ApproveRelease version 2 reads 1: "A person approves a release for one environment.";
    Command RejectRelease version 2 reads 1: "A person rejects a release; the release stops.";
    Command ReleaseApprovalTimeout version 1 (internal): "The release saga's scheduled reminder that an environment's approval is overdue.";
    Event ReleaseApproved version 1: "A release is approved for one environment (the record promotion requires).";
    Event ReleaseRejected version 1: "A release was rejected, or its approval timed out; the release stops.";
    Event ReleaseBlocked version 1: "A release step failed; the release waits for someone to act.";
    Command ProvisionInfrastructure version 1: "Preview then apply an environment's infrastructure stack (idempotent on planId).";
    Event InfrastructureProvisioned version 1: "An infrastructure stack is applied (or, with previewOnly, previewed).";
    Event InfrastructureDriftDetected version 1: "Resources of an infrastructure stack differ from its recorded state.";
    Event DeploymentPromoted version 1: "A release is the desired state of an environment: a commit in the environment repository, after an approval.";
    Command ReconcileEnvironment version 1: "Reconcile an environment with its desired state in Git.";
    Event GitOpsSynced version 1: "An environment matches its desired state at a commit of the environment repository.";
    Command Probe version 1: "Check the runtime end to end with a synthetic message (a canary); no outside service is touched.";
    Event ProbeEchoed version 1: "A probe went through its first hop; the probe consumer tallies it in a saga keyed by group.";
    // Added after the first catalogue: at the end, so the corpus keeps
    // the ids it gave the others.
    Command ReleaseWindowCheck version 1 (internal): "The release saga's scheduled look at a promotion window or hold its promotion waits on.";
    Command OverrideReleaseWindow version 1: "Someone holding releases:override lets one release through a closed promotion window or hold of one environment, with a reason.";
    Event ReleaseDecisionRecorded version 1 (internal): "One decision of a release (requested, approved, refused, rejected, overridden, waiting for a window, promoted, deployed ...), for the tenant's audit log.";
    Command ReleaseVerificationCheck version 1 (internal): "The release saga's scheduled sample of the verification checks of the environment a release was synced in.";
    Event ReleaseVerified version 1: "A release passed verification in an environment (soak time and checks, or a healthy sync); a rollback may go back to it.";
    Command RollbackEnvironment version 1: "Roll one module of an environment back to a release verified there (after a failed verification, or by someone holding releases:rollback).";
}

impl Message {
    /// The catalogue entry of this message's type.
    pub fn spec(&self) -> &'static MessageSpec {
        let message_type = self.message_type();
        // Every variant is generated from the same list as CATALOGUE.
        CATALOGUE
            .iter()
            .find(|spec| spec.message_type == message_type)
            .unwrap_or(&CATALOGUE[0])
    }

    /// Command or event.
    pub fn kind(&self) -> MessageKind {
        self.spec().kind
    }

    /// The payload as JSON.
    pub fn to_payload(&self) -> Value {
        self.payload_value().unwrap_or(Value::Null)
    }

    /// Decodes and validates a payload declared (as an envelope declares
    /// it) to be a `message_type` of `kind` at `schema_version`: the three
    /// are checked against the catalogue, then the payload's shape and
    /// field rules. Only the current version is decoded here: an older one
    /// still read is upcast first ([`crate::versions::upcast`], which
    /// [`crate::Envelope::decode`] does); a newer one is
    /// [`ContractError::NewerSchemaVersion`], any other
    /// [`ContractError::UnsupportedSchemaVersion`].
    pub fn from_declared(
        message_type: &str,
        kind: MessageKind,
        schema_version: u32,
        payload: &Value,
    ) -> Result<Self, ContractError> {
        let spec = MessageSpec::find(message_type).ok_or_else(|| ContractError::UnknownType {
            message_type: message_type.to_owned(),
        })?;
        if spec.kind != kind {
            return Err(ContractError::WrongKind {
                message_type: spec.message_type.to_owned(),
                expected: spec.kind.to_string(),
                found: kind.to_string(),
            });
        }
        if schema_version > spec.schema_version {
            return Err(ContractError::NewerSchemaVersion {
                message_type: spec.message_type.to_owned(),
                found: schema_version,
                newest: spec.schema_version,
            });
        }
        if schema_version != spec.schema_version {
            return Err(ContractError::UnsupportedSchemaVersion {
                message_type: spec.message_type.to_owned(),
                found: schema_version,
                supported: spec.versions_read(),
            });
        }
        let message =
            Self::decode_payload(spec.message_type, payload).ok_or_else(|| ContractError::UnknownType {
                message_type: message_type.to_owned(),
            })??;
        message.validate_payload().map_err(|err| ContractError::InvalidField {
            field: format!("payload.{}", err.field),
            reason: err.reason,
        })?;
        Ok(message)
    }

    /// Checks the payload's field rules.
    pub fn validate(&self) -> Result<(), ContractError> {
        self.validate_payload().map_err(|err| ContractError::InvalidField {
            field: format!("payload.{}", err.field),
            reason: err.reason,
        })
    }

    /// Builds a typed message from a type name and a JSON payload, as an
    /// agent's `bosun send TYPE --payload JSON` does.
    pub fn from_type_and_payload(message_type: &str, payload: &Value) -> Result<Self, ContractError> {
        let spec = MessageSpec::find(message_type).ok_or_else(|| ContractError::UnknownType {
            message_type: message_type.to_owned(),
        })?;
        let message =
            Self::decode_payload(spec.message_type, payload).ok_or_else(|| ContractError::UnknownType {
                message_type: message_type.to_owned(),
            })??;
        message.validate()?;
        Ok(message)
    }
}

fn decode<T: DeserializeOwned + JsonSchema>(payload: &Value) -> Result<T, ContractError> {
    serde_path_to_error::deserialize(payload).map_err(|err| {
        let path = path_or_root(&err.path().to_string());
        let mut field = if path == "." {
            "payload".to_owned()
        } else {
            format!("payload.{path}")
        };
        // serde reports a missing field at its parent; name the field itself.
        let reason = err.inner().to_string();
        if let Some(missing) = reason
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split('`').next())
        {
            field = format!("{field}.{missing}");
        }
        ContractError::InvalidField {
            field,
            reason: err.inner().to_string(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::Envelope;

    #[test]
    fn catalogue_names_are_unique() {
        let mut names: Vec<_> = CATALOGUE.iter().map(|spec| spec.message_type).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len());
    }

    #[test]
    fn missing_payload_field_is_named() {
        let err = Message::from_type_and_payload("CreateCommit", &serde_json::json!({"repository": "r"})).unwrap_err();
        assert_eq!(err.field(), Some("payload.branch"), "{err}");
        assert!(err.to_string().contains("branch"), "{err}");
    }

    #[test]
    fn nested_bad_field_is_named_with_its_path() {
        let err = Message::from_type_and_payload(
            "CreateCommit",
            &serde_json::json!({
                "repository": "r", "branch": "main", "message": "m",
                "files": [{"path": "a.txt", "content": 5}]
            }),
        )
        .unwrap_err();
        assert_eq!(err.field(), Some("payload.files[0].content"), "{err}");
    }

    fn envelope_of(message: &Message) -> Envelope {
        Envelope::new(message, uuid::Uuid::now_v7(), crate::samples::TENANT_ID, "agent:test")
    }

    #[test]
    fn a_newer_schema_version_is_named_newer_for_every_type() {
        for message in crate::samples::samples() {
            let mut envelope = envelope_of(&message);
            let newest = message.spec().schema_version;
            envelope.schema_version = newest + 1;
            let err = Envelope::parse(&envelope.to_vec()).unwrap_err();
            assert_eq!(err.field(), Some("schemaVersion"), "{err}");
            assert_eq!(
                err,
                ContractError::NewerSchemaVersion {
                    message_type: message.message_type().to_owned(),
                    found: newest + 1,
                    newest,
                }
            );
        }
    }

    #[test]
    fn a_version_older_than_the_oldest_read_is_refused_for_every_type() {
        for message in crate::samples::samples() {
            let mut envelope = envelope_of(&message);
            let spec = message.spec();
            envelope.schema_version = spec.oldest_read - 1;
            let err = Envelope::parse(&envelope.to_vec()).unwrap_err();
            assert_eq!(err.field(), Some("schemaVersion"), "{err}");
            assert_eq!(err.cause(), "unsupported-schema-version");
            assert!(
                matches!(&err, ContractError::UnsupportedSchemaVersion { message_type, found, .. }
                    if message_type == message.message_type() && *found == spec.oldest_read - 1),
                "{err}"
            );
        }
    }

    #[test]
    fn wrong_kind_is_rejected_for_every_type() {
        for message in crate::samples::samples() {
            let mut envelope = envelope_of(&message);
            envelope.kind = match message.kind() {
                MessageKind::Command => MessageKind::Event,
                MessageKind::Event => MessageKind::Command,
            };
            let err = Envelope::parse(&envelope.to_vec()).unwrap_err();
            assert_eq!(err.field(), Some("kind"), "{err}");
            assert_eq!(
                err,
                ContractError::WrongKind {
                    message_type: message.message_type().to_owned(),
                    expected: message.kind().to_string(),
                    found: envelope.kind.to_string(),
                }
            );
        }
    }

    #[test]
    fn unknown_payload_fields_are_accepted() {
        for message in crate::samples::samples() {
            let mut payload = message.to_payload();
            if let Some(object) = payload.as_object_mut() {
                object.insert("addedInAFutureVersion".to_owned(), serde_json::json!({"x": [1, 2]}));
            }
            let decoded = Message::from_type_and_payload(message.message_type(), &payload).unwrap();
            assert_eq!(decoded, message);
        }
    }

    #[test]
    fn invalid_payload_field_is_named_with_the_payload_prefix() {
        let mut envelope = envelope_of(&crate::samples::approve_release().into());
        envelope.payload["environment"] = serde_json::json!("Prod Env");
        let err = Envelope::parse(&envelope.to_vec()).unwrap_err();
        assert_eq!(err.field(), Some("payload.environment"), "{err}");
        assert_eq!(err.cause(), "invalid-field");
    }

    #[test]
    fn every_payload_schema_is_generated() {
        let schemas = payload_schemas();
        assert_eq!(schemas.len(), CATALOGUE.len());
        for ((name, _), spec) in schemas.iter().zip(CATALOGUE) {
            assert_eq!(*name, spec.message_type);
        }
    }

    #[test]
    fn unknown_type_is_rejected() {
        let err = Message::from_type_and_payload("LaunchRocket", &serde_json::json!({})).unwrap_err();
        assert_eq!(
            err,
            ContractError::UnknownType {
                message_type: "LaunchRocket".into()
            }
        );
    }
}
