//! The release state machine: its phases ([`ReleasePhase`]) and every
//! phase change it can make ([`TRANSITIONS`]).

use serde::{Deserialize, Serialize};

/// Where a release is. [`ReleasePhase::ALL`] and [`TRANSITIONS`] are the
/// state machine; the saga refuses (and so never takes) a phase change that
/// is not in [`TRANSITIONS`], and the diagram is drawn from them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ReleasePhase {
    /// Waiting for the build and the artifacts its module requires.
    #[default]
    Collecting,
    /// Planned; waiting for a person to approve the current environment.
    AwaitingApproval,
    /// The current environment is approved; waiting for its infrastructure
    /// and its promotion window.
    Provisioning,
    /// Promoted to the current environment; waiting for GitOps to sync it.
    Syncing,
    /// Every environment on the path is deployed.
    Completed,
    /// Rejected by a person, or the approval timed out. Final.
    Rejected,
    /// The build failed (or there is nothing to deploy); waiting for someone
    /// to act: a successful re-run continues, a rejection ends it.
    Blocked,
}

impl ReleasePhase {
    /// Every phase, in the order of the diagram.
    pub const ALL: [ReleasePhase; 7] = [
        Self::Collecting,
        Self::AwaitingApproval,
        Self::Provisioning,
        Self::Syncing,
        Self::Completed,
        Self::Rejected,
        Self::Blocked,
    ];

    /// The name, as in the diagram (`AwaitingApproval`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Collecting => "Collecting",
            Self::AwaitingApproval => "AwaitingApproval",
            Self::Provisioning => "Provisioning",
            Self::Syncing => "Syncing",
            Self::Completed => "Completed",
            Self::Rejected => "Rejected",
            Self::Blocked => "Blocked",
        }
    }

    /// Its value in the saved state (`awaitingApproval`).
    pub fn value(self) -> &'static str {
        match self {
            Self::Collecting => "collecting",
            Self::AwaitingApproval => "awaitingApproval",
            Self::Provisioning => "provisioning",
            Self::Syncing => "syncing",
            Self::Completed => "completed",
            Self::Rejected => "rejected",
            Self::Blocked => "blocked",
        }
    }

    /// One line saying what the release waits for in this phase.
    pub fn description(self) -> &'static str {
        match self {
            Self::Collecting => "waiting for the build and its required image and package",
            Self::AwaitingApproval => "waiting for a person to approve the current environment",
            Self::Provisioning => "approved, waiting for the environment's infrastructure and promotion window",
            Self::Syncing => "promoted, waiting for GitOps to sync the environment",
            Self::Completed => "deployed to every environment",
            Self::Rejected => "rejected or approval timed out, stopped",
            Self::Blocked => {
                "a step failed (the build, a verification, missing evidence), waiting for a successful re-run or a rejection"
            }
        }
    }

    /// Whether the release is over (completed or rejected): nothing moves it
    /// any more.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Completed | Self::Rejected)
    }
}

impl std::fmt::Display for ReleasePhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One edge of the release state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhaseTransition {
    /// The phase left.
    pub from: ReleasePhase,
    /// The phase entered (the same for a step that stays).
    pub to: ReleasePhase,
    /// What triggers it and what the saga emits (`trigger / emitted`).
    pub trigger: &'static str,
    /// The message types that can take it.
    pub triggers: &'static [&'static str],
}

const fn edge(
    from: ReleasePhase,
    to: ReleasePhase,
    trigger: &'static str,
    triggers: &'static [&'static str],
) -> PhaseTransition {
    PhaseTransition {
        from,
        to,
        trigger,
        triggers,
    }
}

/// Every phase change the release saga can make.
pub const TRANSITIONS: &[PhaseTransition] = {
    use ReleasePhase::*;
    &[
        edge(
            Collecting,
            Collecting,
            "BuildCompleted, ContainerImageBuilt, PackagePublished (collected)",
            &["BuildCompleted", "ContainerImageBuilt", "PackagePublished"],
        ),
        edge(
            Collecting,
            AwaitingApproval,
            "build and artifacts in / ReleasePlanned, schedule ReleaseApprovalTimeout",
            &["BuildCompleted", "ContainerImageBuilt", "PackagePublished"],
        ),
        edge(
            Collecting,
            Provisioning,
            "build and artifacts in, first environment auto- or pre-approved / ReleasePlanned, ReleaseApproved",
            &["BuildCompleted", "ContainerImageBuilt", "PackagePublished"],
        ),
        edge(
            Collecting,
            Blocked,
            "BuildCompleted failed, canceled, tests failed or nothing to deploy / ReleaseBlocked",
            &["BuildCompleted"],
        ),
        edge(
            Blocked,
            Collecting,
            "BuildCompleted of a successful re-run",
            &["BuildCompleted"],
        ),
        edge(
            AwaitingApproval,
            Provisioning,
            "ApproveRelease / ReleaseApproved",
            &["ApproveRelease"],
        ),
        edge(
            Provisioning,
            Provisioning,
            "provisioned, promotion window closed or environment on hold / schedule ReleaseWindowCheck",
            &["InfrastructureProvisioned", "ApproveRelease", "ReleaseWindowCheck"],
        ),
        edge(
            Provisioning,
            Syncing,
            "InfrastructureProvisioned, window open (ReleaseWindowCheck) or overridden (OverrideReleaseWindow) / DeploymentPromoted",
            &[
                "InfrastructureProvisioned",
                "ReleaseWindowCheck",
                "OverrideReleaseWindow",
            ],
        ),
        edge(
            Syncing,
            Syncing,
            "GitOpsSynced unhealthy / ReleaseBlocked (sync), or healthy and verifying (soak, checks sampled) / schedule ReleaseVerificationCheck",
            &["GitOpsSynced", "ReleaseVerificationCheck"],
        ),
        edge(
            Syncing,
            Blocked,
            "verification failed / ReleaseBlocked, RollbackEnvironment (policy rolls back, gate open), or the next environment lacks evidence / ReleaseBlocked",
            &["GitOpsSynced", "ReleaseVerificationCheck"],
        ),
        edge(
            AwaitingApproval,
            Blocked,
            "verification failed again in an environment rolled back to it / ReleaseBlocked, RollbackEnvironment",
            &["ReleaseVerificationCheck"],
        ),
        edge(
            Provisioning,
            Blocked,
            "verification failed again in an environment rolled back to it / ReleaseBlocked, RollbackEnvironment",
            &["ReleaseVerificationCheck"],
        ),
        edge(
            Blocked,
            Blocked,
            "rollback waited for a window, now open (ReleaseWindowCheck) or overridden (OverrideReleaseWindow) / RollbackEnvironment",
            &["ReleaseWindowCheck", "OverrideReleaseWindow"],
        ),
        edge(
            Syncing,
            Provisioning,
            "verified (healthy sync, or soak and checks passed), next environment auto- or pre-approved / ReleaseVerified, ReleaseApproved",
            &["GitOpsSynced", "ReleaseVerificationCheck"],
        ),
        edge(
            Syncing,
            AwaitingApproval,
            "verified, next environment needs a person / ReleaseVerified, schedule ReleaseApprovalTimeout",
            &["GitOpsSynced", "ReleaseVerificationCheck"],
        ),
        edge(
            Syncing,
            Completed,
            "verified in the last environment / ReleaseVerified",
            &["GitOpsSynced", "ReleaseVerificationCheck"],
        ),
        edge(
            AwaitingApproval,
            Rejected,
            "RejectRelease or ReleaseApprovalTimeout / ReleaseRejected",
            &["RejectRelease", "ReleaseApprovalTimeout"],
        ),
        edge(
            Collecting,
            Rejected,
            "RejectRelease / ReleaseRejected",
            &["RejectRelease"],
        ),
        edge(
            Provisioning,
            Rejected,
            "RejectRelease / ReleaseRejected",
            &["RejectRelease"],
        ),
        edge(Syncing, Rejected, "RejectRelease / ReleaseRejected", &["RejectRelease"]),
        edge(Blocked, Rejected, "RejectRelease / ReleaseRejected", &["RejectRelease"]),
    ]
};

/// Whether [`TRANSITIONS`] has an edge `from -> to`.
pub(super) fn is_transition(from: ReleasePhase, to: ReleasePhase) -> bool {
    TRANSITIONS.iter().any(|edge| edge.from == from && edge.to == to)
}

/// The release state machine as data ([`crate::machine`]).
pub fn machine() -> crate::machine::Machine {
    use crate::machine::{Machine, MachineState, MachineTransition};
    Machine {
        state_field: "phase",
        initial: ReleasePhase::default().value(),
        states: ReleasePhase::ALL
            .into_iter()
            .map(|phase| MachineState {
                value: phase.value(),
                name: phase.name(),
                description: phase.description(),
                is_final: phase.is_final(),
            })
            .collect(),
        transitions: TRANSITIONS
            .iter()
            .map(|edge| MachineTransition {
                from: edge.from.value(),
                to: edge.to.value(),
                label: edge.trigger,
                triggers: edge.triggers,
            })
            .collect(),
    }
}
