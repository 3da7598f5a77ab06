//! Probes: synthetic messages operators and load tests send through the
//! runtime to check it end to end (a canary), without touching any outside
//! service. `Probe` goes to the `probe` consumer's queue; with `echo` it
//! emits `ProbeEchoed`, which the same consumer tallies in a saga keyed by
//! the probe's `group` — a two-hop flow with a saga. With `relays`, the
//! consumer first passes the probe on to its own queue that many times, one
//! hop each (`bosun bench`'s latency row sends `relays: 1`: three hops).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema_rules as rule;
use crate::validate::{self, FieldError, Validate};

/// Longest simulated work a probe may ask for, in milliseconds.
pub const MAX_PROBE_WORK_MS: u32 = 60_000;

/// The most times a probe may be passed on before it echoes.
pub const MAX_PROBE_RELAYS: u32 = 16;

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
    /// How many times the probe consumer passes the probe on (one more hop
    /// through its queue each, `relays` one less) before it echoes (0 to 16).
    #[serde(default)]
    #[schemars(transform = rule::at_most(u64::from(MAX_PROBE_RELAYS)))]
    pub relays: u32,
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
        if self.relays > MAX_PROBE_RELAYS {
            return Err(FieldError::new("relays", format!("must be at most {MAX_PROBE_RELAYS}")));
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
