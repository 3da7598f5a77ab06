//! The replica bounds of the rendered consumers, as README "How scaling
//! behaves" states them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;

use super::kubernetes::MAX_REPLICAS;
use super::tests::{base_objects, default_files, kind_of};
use super::{ALWAYS_ON, consumers};

/// `probe` stays at one replica (its host runs the outbox dispatcher and
/// retention): KEDA may neither scale it to zero nor past one, and its
/// Deployment asks for no spread. Every other consumer scales from zero to
/// [`MAX_REPLICAS`].
#[test]
fn the_probe_stays_at_one_replica_and_the_others_scale_to_the_bound() {
    let files = default_files();
    let objects = base_objects(&files);
    let named = |kind: &str, name: &str| -> Value {
        objects
            .iter()
            .map(|(_, object)| object)
            .find(|object| kind_of(object) == kind && object["metadata"]["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    for consumer in consumers() {
        let name = consumer.object_name();
        let scaled = named("ScaledObject", &name);
        let deployment = named("Deployment", &name);
        let (min, max) = (&scaled["spec"]["minReplicaCount"], &scaled["spec"]["maxReplicaCount"]);
        if consumer.name == ALWAYS_ON {
            assert_eq!((min.as_u64(), max.as_u64()), (Some(1), Some(1)), "{name}");
            assert!(
                deployment["spec"]["template"]["spec"]["topologySpreadConstraints"].is_null(),
                "{name}"
            );
        } else {
            assert_eq!(
                (min.as_u64(), max.as_u64()),
                (Some(0), Some(u64::from(MAX_REPLICAS))),
                "{name}"
            );
        }
    }
}
