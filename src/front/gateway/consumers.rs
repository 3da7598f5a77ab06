//! Consumers through the front door: which are paused, and pausing or
//! resuming one (`consumers:pause`, a platform key's right: a paused
//! consumer holds every tenant's messages).

use crate::front::access::{ALL_TENANTS, Caller, Scope};
use crate::operator::controls::{self, Actor, ConsumerControlOutcome, ConsumerView};
use crate::ports::store::{ConsumerControl, ControlAction};

use super::{Gateway, GatewayError};

impl Gateway {
    /// Every consumer and whether it is paused (`deliveries:read`; it names
    /// no tenant's data).
    pub async fn consumers(&self, caller: &Caller) -> Result<Vec<ConsumerView>, GatewayError> {
        Self::require(caller, Scope::DeliveriesRead)?;
        Ok(controls::consumers(self.backends.controls.as_ref()).await?)
    }

    /// The log of pauses and resumes, newest first (platform keys with
    /// `consumers:pause`).
    pub async fn consumer_controls(&self, caller: &Caller, limit: usize) -> Result<Vec<ConsumerControl>, GatewayError> {
        Self::may_pause(caller)?;
        Ok(controls::log(self.backends.controls.as_ref(), limit).await?)
    }

    /// Pauses or resumes `consumer` as the caller, through `door` (`api`,
    /// `mcp`), for `reason` (required to pause).
    pub async fn control_consumer(
        &self,
        caller: &Caller,
        consumer: &str,
        action: ControlAction,
        reason: Option<&str>,
        door: &str,
    ) -> Result<ConsumerControlOutcome, GatewayError> {
        Self::may_pause(caller)?;
        let by = caller.principal();
        let door = format!("{door}:{}", caller.key_id);
        Ok(controls::control(
            self.backends.controls.as_ref(),
            consumer,
            action,
            Actor { by: &by, door: &door },
            reason,
        )
        .await?)
    }

    fn may_pause(caller: &Caller) -> Result<(), GatewayError> {
        Self::require(caller, Scope::ConsumersPause)?;
        if caller.tenant_id != ALL_TENANTS {
            return Err(GatewayError::PlatformOnly("pausing or resuming a consumer"));
        }
        Ok(())
    }
}
