//! Probes: synthetic messages operators and load tests send through the
//! runtime to check it end to end (a canary), without touching any outside
//! service. `Probe` goes to the `probe` consumer's queue; with `echo` it
//! emits `ProbeEchoed`, which the same consumer tallies in a saga keyed by
//! the probe's `group` — a two-hop flow with a saga.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema_rules as rule;
use crate::validate::{self, FieldError, Validate};

/// Longest simulated work a probe may ask for, in milliseconds.
pub const MAX_PROBE_WORK_MS: u32 = 60_000;

fn yes() -> bool {
    true
}

/// Check the runtime end to end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Probe {
    /// The tally the echo counts in (the probe saga's key), e.g. `canary`.
    #[schemars(transform = rule::identifier)]
    pub group: String,
    /// The sender's sequence number, reported back on the echo.
    #[serde(default)]
    pub sequence: u64,
    /// Emit `ProbeEchoed` (the second hop); `true` when absent.
    #[serde(default = "yes")]
    pub echo: bool,
    /// Milliseconds of simulated handler work (0 to 60 000).
    #[serde(default)]
    #[schemars(transform = rule::at_most(u64::from(MAX_PROBE_WORK_MS)))]
    pub work_ms: u32,
}

impl Validate for Probe {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("group", &self.group)?;
        if self.work_ms > MAX_PROBE_WORK_MS {
            return Err(FieldError::new(
                "workMs",
                format!("must be at most {MAX_PROBE_WORK_MS}"),
            ));
        }
        Ok(())
    }
}

/// A probe went through its first hop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProbeEchoed {
    /// The probe's group.
    #[schemars(transform = rule::identifier)]
    pub group: String,
    /// The probe's sequence number.
    pub sequence: u64,
}

impl Validate for ProbeEchoed {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("group", &self.group)
    }
}
