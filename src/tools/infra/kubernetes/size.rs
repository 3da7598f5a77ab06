//! The CPU, memory and scratch space each component's pod asks for.

use bosun_consumers::{container_build, iac_provisioning, pipeline_monitor};

/// The CPU, memory and scratch space of one component's bosun container
/// and its `emptyDir` volumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodSize {
    /// CPU request.
    pub cpu_request: &'static str,
    /// Memory request.
    pub memory_request: &'static str,
    /// CPU limit.
    pub cpu_limit: &'static str,
    /// Memory limit.
    pub memory_limit: &'static str,
    /// `sizeLimit` of the data directory's `emptyDir`.
    pub data_limit: &'static str,
    /// `sizeLimit` of `/tmp`'s `emptyDir`.
    pub tmp_limit: &'static str,
}

/// What most components need: they hold a few messages at a time and
/// write little to disk (the store is PostgreSQL, payloads are blobs).
const DEFAULT_SIZE: PodSize = PodSize {
    cpu_request: "100m",
    memory_request: "128Mi",
    cpu_limit: "1",
    memory_limit: "512Mi",
    data_limit: "1Gi",
    tmp_limit: "1Gi",
};

/// The size of a component's pod.
///
/// Measured so far: `tests/aks.rs` runs every rendered Deployment (a debug
/// build) through a whole delivery on the Azure path and reads each
/// process's peak resident memory and CPU time: 52-60 MiB and 0.03-0.23 s
/// per pod (2026-12-05), under every request below, and the test fails
/// when a pod passes its rendered memory limit. What that run does not
/// measure, and the figures below still estimate from what each consumer
/// does: load (many deliveries at once: `kubectl top pod`, the pods' OOM
/// kills and evictions will tell; an overlay may patch the figures), and
/// the work done beside bosun in the pod:
/// - `container-build` packs a build context into an archive under `/tmp`
///   and uploads it (ACR Tasks), or builds the image locally with the
///   other builders: the most scratch space and more memory;
/// - `iac-provisioning` runs the Pulumi CLI and its language host beside
///   bosun, and keeps its journal under the data directory: the most
///   memory;
/// - `pipeline-monitor` reads whole pipeline logs and JUnit reports:
///   more memory and `/tmp` than the rest.
pub fn pod_size(component: &str) -> PodSize {
    match component {
        container_build::NAME => PodSize {
            cpu_request: "250m",
            memory_request: "256Mi",
            cpu_limit: "2",
            memory_limit: "1Gi",
            data_limit: "2Gi",
            tmp_limit: "8Gi",
        },
        iac_provisioning::NAME => PodSize {
            cpu_request: "250m",
            memory_request: "512Mi",
            cpu_limit: "2",
            memory_limit: "2Gi",
            data_limit: "2Gi",
            tmp_limit: "2Gi",
        },
        pipeline_monitor::NAME => PodSize {
            memory_request: "256Mi",
            memory_limit: "1Gi",
            tmp_limit: "2Gi",
            ..DEFAULT_SIZE
        },
        _ => DEFAULT_SIZE,
    }
}
