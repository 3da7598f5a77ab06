//! Dead letters: list, group, inspect, replay (one, edited, or in bulk,
//! throttled: [`super::jobs`]) and purge, each with its right.

use super::*;

impl Gateway {
    // -- dead letters -------------------------------------------------------

    pub(super) fn require_dead_letter_read(caller: &Caller) -> Result<(), GatewayError> {
        if caller.has(Scope::DeliveriesRead) || caller.has(Scope::DeadLettersReplay) {
            Ok(())
        } else {
            Err(GatewayError::Forbidden {
                scope: Scope::DeliveriesRead,
            })
        }
    }

    /// Dead letters of the caller's tenant matching `filter`.
    pub async fn dead_letters(
        &self,
        caller: &Caller,
        mut filter: DeadLetterFilter,
    ) -> Result<Vec<DeadLetterRecord>, GatewayError> {
        Self::require_dead_letter_read(caller)?;
        filter.tenant_id = caller.tenant_filter();
        Ok(self.operator(caller).dead_letters(&filter).await?)
    }

    /// The caller's dead letters matching `filter`, grouped by cause
    /// (fingerprint: error kind, masked message, consumer, message type),
    /// largest group first.
    /// A group the caller acknowledged is left out while no newer failure
    /// arrived, unless `include_acknowledged`.
    pub async fn dead_letter_groups(
        &self,
        caller: &Caller,
        mut filter: DeadLetterFilter,
        include_acknowledged: bool,
    ) -> Result<Vec<FailureGroup>, GatewayError> {
        Self::require_dead_letter_read(caller)?;
        filter.tenant_id = caller.tenant_filter();
        let groups = self.operator(caller).failure_groups(&filter).await?;
        let acknowledgements = self.backends.controls.group_acknowledgements(&caller.tenant_id).await?;
        Ok(crate::operator::groups::with_acknowledgements(
            groups,
            &acknowledgements,
            include_acknowledged,
        ))
    }

    /// Acknowledges one of the caller's failure groups, with `note`: it is
    /// left out of the caller's list until a failure of its cause newer
    /// than now arrives (`dead-letters:replay`). Returns the group.
    pub async fn acknowledge_group(
        &self,
        caller: &Caller,
        fingerprint: &str,
        note: Option<&str>,
    ) -> Result<FailureGroup, GatewayError> {
        Self::require(caller, Scope::DeadLettersReplay)?;
        let group = self.dead_letter_group(caller, fingerprint).await?;
        let by = caller.principal();
        let door = format!("api:{}", caller.key_id);
        Ok(crate::operator::controls::acknowledge_group(
            self.backends.controls.as_ref(),
            &caller.tenant_id,
            group,
            crate::operator::controls::Actor { by: &by, door: &door },
            note,
        )
        .await?)
    }

    /// Takes the acknowledgement of one of the caller's failure groups
    /// back: it is listed again. Not found when it was not acknowledged.
    pub async fn unacknowledge_group(&self, caller: &Caller, fingerprint: &str) -> Result<FailureGroup, GatewayError> {
        Self::require(caller, Scope::DeadLettersReplay)?;
        let group = self.dead_letter_group(caller, fingerprint).await?;
        if !self
            .backends
            .controls
            .unacknowledge_group(&caller.tenant_id, &group.fingerprint)
            .await?
        {
            return Err(GatewayError::not_found("acknowledged failure group", fingerprint));
        }
        Ok(group)
    }

    /// One of the caller's failure groups; "not found" when the caller's
    /// tenant has no dead letter with that fingerprint (whatever another
    /// tenant has).
    pub async fn dead_letter_group(&self, caller: &Caller, fingerprint: &str) -> Result<FailureGroup, GatewayError> {
        Self::require_dead_letter_read(caller)?;
        let filter = DeadLetterFilter {
            tenant_id: caller.tenant_filter(),
            ..DeadLetterFilter::default()
        };
        Ok(self.operator(caller).failure_group(&filter, fingerprint).await?)
    }

    /// Replays every dead letter of one of the caller's failure groups, as
    /// a bulk replay at `rate` per second (each replay recorded with the
    /// caller as who replayed it).
    pub async fn replay_group(
        &self,
        caller: &Caller,
        fingerprint: &str,
        rate: Option<f64>,
    ) -> Result<ReplayJob, GatewayError> {
        Self::require(caller, Scope::DeadLettersReplay)?;
        let group = self.dead_letter_group(caller, fingerprint).await?;
        tracing::info!(
            key_id = %caller.key_id,
            by = %caller.identity(),
            fingerprint = %group.fingerprint,
            count = group.count,
            "failure group replay requested"
        );
        self.start_bulk_replay_as(
            caller,
            BulkReplayRequest {
                ids: group.ids,
                filter: None,
                all: false,
                rate,
            },
            Some(&group.fingerprint),
        )
        .await
    }

    /// Purges every dead letter of one of the caller's failure groups
    /// (admin only); returns the ids purged.
    pub async fn purge_group(&self, caller: &Caller, fingerprint: &str) -> Result<Vec<Uuid>, GatewayError> {
        Self::require(caller, Scope::Admin)?;
        let group = self.dead_letter_group(caller, fingerprint).await?;
        let operator = self.operator(caller);
        let mut purged = Vec::with_capacity(group.ids.len());
        for id in &group.ids {
            purged.push(operator.purge(&id.to_string()).await?);
        }
        tracing::info!(
            key_id = %caller.key_id,
            by = %caller.identity(),
            fingerprint = %group.fingerprint,
            purged = purged.len(),
            "failure group purged"
        );
        Ok(purged)
    }

    /// One dead letter with its original message.
    pub async fn dead_letter(&self, caller: &Caller, id: &str) -> Result<DeadLetterDetail, GatewayError> {
        Self::require_dead_letter_read(caller)?;
        let record = self.visible_dead_letter(caller, id).await?;
        let (envelope, body_text) = match serde_json::from_slice::<Value>(&record.body) {
            Ok(value) => (Some(value), None),
            Err(_) => (None, Some(String::from_utf8_lossy(&record.body).into_owned())),
        };
        Ok(DeadLetterDetail {
            trace_id: record.trace_id(),
            record,
            envelope,
            body_text,
        })
    }

    pub(super) async fn visible_dead_letter(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<DeadLetterRecord, GatewayError> {
        let tenant = caller.tenant_filter();
        Ok(self.operator(caller).dead_letter_of(id, tenant.as_deref()).await?)
    }

    /// Replaying an approval, a rejection or an override decides on a
    /// release again: it needs the right sending one does
    /// (`releases:approve` for the environment the replayed payload names,
    /// `releases:override`).
    pub(super) fn require_decision_right(
        caller: &Caller,
        record: &DeadLetterRecord,
        edited_payload: Option<&Value>,
    ) -> Result<(), GatewayError> {
        let Some(scope) = record.message_type.as_deref().and_then(decision_scope) else {
            return Ok(());
        };
        let original = bosun_contracts::Envelope::from_slice(&record.body).ok();
        let payload = edited_payload.or(original.as_ref().map(|envelope| &envelope.payload));
        let environment = payload
            .and_then(|payload| payload.get("environment"))
            .and_then(Value::as_str);
        if !caller.may_decide(scope, environment) {
            return Err(GatewayError::Forbidden { scope });
        }
        match record
            .message_type
            .as_deref()
            .and_then(|message_type| access::override_scope(message_type, payload))
        {
            Some(scope) if !caller.may_decide(scope, environment) => Err(GatewayError::Forbidden { scope }),
            _ => Ok(()),
        }
    }

    /// Replays one dead letter, its payload replaced by `edited_payload`
    /// when given.
    pub async fn replay(
        &self,
        caller: &Caller,
        id: &str,
        edited_payload: Option<&Value>,
    ) -> Result<ReplayDone, GatewayError> {
        Self::require(caller, Scope::DeadLettersReplay)?;
        let record = self.visible_dead_letter(caller, id).await?;
        Self::require_decision_right(caller, &record, edited_payload)?;
        let replay = self
            .operator(caller)
            .replay_with(&record.id.to_string(), edited_payload)
            .await?;
        tracing::info!(
            key_id = %caller.key_id,
            dead_letter = %record.id,
            correlation_id = record.correlation_id.as_deref().unwrap_or(""),
            edited = edited_payload.is_some(),
            "dead letter replayed"
        );
        Ok(ReplayDone {
            replay,
            dead_letter_id: record.id,
            edited: edited_payload.is_some(),
        })
    }

    /// Deletes a dead letter (admin only).
    pub async fn purge(&self, caller: &Caller, id: &str) -> Result<Uuid, GatewayError> {
        Self::require(caller, Scope::Admin)?;
        let record = self.visible_dead_letter(caller, id).await?;
        let purged = self.operator(caller).purge(&record.id.to_string()).await?;
        tracing::info!(key_id = %caller.key_id, dead_letter = %purged, "dead letter purged");
        Ok(purged)
    }
}
