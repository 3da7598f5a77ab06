//! Following deliveries and looking at sagas, within the caller's tenant.

use super::*;

impl Gateway {
    // -- deliveries ---------------------------------------------------------

    /// Recent deliveries the caller may see, newest first.
    pub async fn deliveries(&self, caller: &Caller, limit: usize) -> Result<Vec<DeliverySummary>, GatewayError> {
        Self::require(caller, Scope::DeliveriesRead)?;
        let records = self
            .backends
            .store
            .list_deliveries(caller.tenant_filter().as_deref(), limit.clamp(1, 500))
            .await?;
        let operator = self.operator(caller);
        let mut summaries = Vec::with_capacity(records.len());
        for record in records {
            let status = match operator.delivery(&record.correlation_id).await {
                Ok(delivery) => delivery.status,
                Err(OperatorError::Store(StoreError::NotFound { .. })) => "in-progress".to_owned(),
                Err(err) => return Err(err.into()),
            };
            summaries.push(DeliverySummary {
                correlation_id: record.correlation_id,
                tenant_id: record.tenant_id,
                started_by: record.started_by,
                message_type: record.message_type,
                message_id: record.message_id,
                started_at: record.started_at,
                status,
            });
        }
        Ok(summaries)
    }

    /// One delivery's timeline.
    pub async fn delivery(&self, caller: &Caller, correlation_id: &str) -> Result<Delivery, GatewayError> {
        Ok(self.visible_delivery(caller, correlation_id).await?.0)
    }

    /// A delivery and its timeline lines, if the caller may read it.
    pub(super) async fn visible_delivery(
        &self,
        caller: &Caller,
        correlation_id: &str,
    ) -> Result<(Delivery, Vec<TimelineEntry>), GatewayError> {
        Self::require(caller, Scope::DeliveriesRead)?;
        let (delivery, lines) = self.operator(caller).delivery_with_lines(correlation_id).await?;
        if !caller.sees(delivery.tenant_id.as_deref()) {
            return Err(GatewayError::not_found("delivery", correlation_id));
        }
        Ok((delivery, lines))
    }

    /// A delivery's timeline lines in the order they were written, and its
    /// status (for the server-sent-event stream).
    pub async fn delivery_timeline(
        &self,
        caller: &Caller,
        correlation_id: &str,
    ) -> Result<(Vec<TimelineEntry>, String), GatewayError> {
        // The event stream reads through here at every wake: a stream whose
        // key was revoked or expired since it opened ends at its next read.
        self.recheck(caller).await?;
        let (delivery, lines) = self.visible_delivery(caller, correlation_id).await?;
        Ok((lines, delivery.status))
    }

    /// Waits until the delivery completes or fails, or `timeout` passes;
    /// returns it as it then is.
    pub async fn wait_for_delivery(
        &self,
        caller: &Caller,
        correlation_id: &str,
        timeout: Duration,
    ) -> Result<Delivery, GatewayError> {
        let deadline = tokio::time::Instant::now() + timeout;
        // Made before the first read, so a line written after it wakes us.
        let mut changed = self.watch_delivery(correlation_id);
        let mut first = true;
        loop {
            // A long wait acts with the key as it is now: revoked or expired
            // meanwhile, the wait ends refused.
            if !std::mem::take(&mut first) {
                self.recheck(caller).await?;
            }
            let delivery = self.delivery(caller, correlation_id).await?;
            if delivery.status != "in-progress" || tokio::time::Instant::now() >= deadline {
                return Ok(delivery);
            }
            // Woken by the store, its fallback or the deadline: look again.
            let _ = tokio::time::timeout_at(deadline, changed.changed()).await;
        }
    }

    /// Starts waiting for new timeline lines of a delivery: woken by the
    /// store's writes (in this process, or through PostgreSQL's
    /// notifications from any), and by the store's fallback timeout. Make
    /// it before reading the timeline. It tells nothing by itself: read the
    /// delivery through the gateway (which checks the caller) when it ends.
    pub fn watch_delivery(&self, correlation_id: &str) -> TimelineWait {
        self.backends.store.watch_timeline(correlation_id)
    }

    // -- sagas --------------------------------------------------------------

    /// Sagas the caller may see.
    pub async fn sagas(&self, caller: &Caller, kind: Option<&str>) -> Result<Vec<SagaRecord>, GatewayError> {
        Self::require(caller, Scope::DeliveriesRead)?;
        let mut sagas = self.operator(caller).sagas(kind).await?;
        sagas.retain(|saga| caller.sees(saga.tenant_id.as_deref()));
        Ok(sagas)
    }

    /// One saga.
    pub async fn saga(&self, caller: &Caller, kind: &str, key: &str) -> Result<SagaRecord, GatewayError> {
        Self::require(caller, Scope::DeliveriesRead)?;
        let not_found = || GatewayError::not_found("saga", &format!("{kind}/{key}"));
        let operator = self.operator(caller);
        // A tenant's key names its own sagas, with or without the tenant (a
        // saga whose tenant nothing recorded keeps its old key).
        let saga = match caller.tenant_filter() {
            Some(tenant) if !key.contains('/') => {
                match self.backends.store.load_saga(kind, &format!("{tenant}/{key}")).await? {
                    Some(saga) => saga,
                    None => self.backends.store.load_saga(kind, key).await?.ok_or_else(not_found)?,
                }
            }
            _ => match operator.saga(kind, key).await {
                Err(OperatorError::Store(StoreError::NotFound { .. })) => return Err(not_found()),
                other => other?,
            },
        };
        if !caller.sees(saga.tenant_id.as_deref()) {
            return Err(not_found());
        }
        Ok(saga)
    }

    /// A saga's state machine, with where the saga is and the way its
    /// history went through it (reconstructed from the message type of each
    /// save: [`bosun_sagas::machine::Machine::path`]).
    pub async fn saga_diagram(&self, caller: &Caller, kind: &str, key: &str) -> Result<SagaDiagram, GatewayError> {
        let saga_kind = bosun_sagas::SagaKind::parse(kind).map_err(|err| GatewayError::Invalid {
            field: Some("kind".into()),
            message: err.to_string(),
        })?;
        let saga = self.saga(caller, kind, key).await?;
        let machine = saga_kind.machine();
        let current = saga
            .state
            .get(machine.state_field)
            .and_then(Value::as_str)
            .unwrap_or(machine.initial)
            .to_owned();
        let types: Vec<&str> = saga.history.iter().map(|entry| entry.message_type.as_str()).collect();
        let path = machine.path(&types, &current);
        let mut visited: Vec<String> = Vec::new();
        let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
        let mut recent = Vec::new();
        if let Some(path) = &path {
            let first = saga.history.len().saturating_sub(SagaDiagram::RECENT);
            for (index, (step, entry)) in path.iter().zip(&saga.history).enumerate() {
                for state in [step.from, step.to] {
                    if !visited.iter().any(|known| known == state) {
                        visited.push(state.to_owned());
                    }
                }
                if let Some(transition) = step.transition {
                    *counts.entry(transition).or_default() += 1;
                }
                if index >= first {
                    recent.push(SagaStep {
                        version: entry.version,
                        message_type: entry.message_type.clone(),
                        at: entry.at,
                        from: step.from.to_owned(),
                        to: step.to.to_owned(),
                        transition: step.transition,
                    });
                }
            }
        }
        if !visited.contains(&current) {
            visited.push(current.clone());
        }
        Ok(SagaDiagram {
            kind: saga.kind,
            key: saga.key,
            machine,
            current,
            visited,
            taken: counts
                .into_iter()
                .map(|(transition, count)| TakenTransition { transition, count })
                .collect(),
            recent,
            path_found: path.is_some(),
        })
    }
}
