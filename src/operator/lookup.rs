//! Naming a delivery as dead letters are named: by its correlation id or a
//! unique prefix of it ([`IdLookup`]), within one tenant when one is given.

use time::format_description::well_known::Rfc3339;

use super::{Delivery, Operator, OperatorError};
use crate::ports::store::{DeliveryRecord, IdLookup, StoreError};

impl Operator {
    /// A delivery by its whole correlation id or a unique prefix of at
    /// least 4 characters, of `tenant` only when given: another tenant's
    /// deliveries neither match nor make a prefix ambiguous, and "not
    /// found" reads the same whether or not another tenant has one. A
    /// prefix several deliveries begin with is refused as
    /// [`StoreError::Ambiguous`], listing them (at most
    /// [`AMBIGUOUS_SHOWN`](crate::ports::store::AMBIGUOUS_SHOWN)) with when
    /// each started and its status.
    pub async fn delivery_of(&self, id: &str, tenant: Option<&str>) -> Result<Delivery, OperatorError> {
        let lookup = IdLookup::delivery(id);
        // The whole id as given first: it names a delivery with a timeline
        // and no record of how it started too.
        match self.delivery(id.trim()).await {
            Ok(delivery) if tenant.is_none_or(|tenant| delivery.tenant_id.as_deref() == Some(tenant)) => {
                return Ok(delivery);
            }
            Ok(_) | Err(OperatorError::Store(StoreError::NotFound { .. })) => {}
            Err(err) => return Err(err),
        }
        let Some(prefix) = &lookup.prefix else {
            return Err(lookup.not_found().into());
        };
        let found = self.store.deliveries_by_prefix(prefix, tenant, IdLookup::LIMIT).await?;
        // Each candidate's status, only to tell several apart.
        let ambiguous = found.len() > 1 && !found.iter().any(|record| record.correlation_id == *prefix);
        let mut candidates = Vec::with_capacity(found.len());
        for record in found {
            let status = if ambiguous {
                self.status_of(&record).await?
            } else {
                String::new()
            };
            candidates.push((record, status));
        }
        let (record, _) = lookup.pick_shown(
            candidates,
            |(record, _)| record.correlation_id.clone(),
            |(record, status)| {
                let started = record
                    .started_at
                    .format(&Rfc3339)
                    .unwrap_or_else(|_| record.started_at.to_string());
                format!("{} (started {started}, {status})", record.correlation_id)
            },
        )?;
        self.delivery(&record.correlation_id).await
    }

    /// A recorded delivery's status; `in-progress` while nothing is on its
    /// timeline yet.
    async fn status_of(&self, record: &DeliveryRecord) -> Result<String, OperatorError> {
        match self.delivery(&record.correlation_id).await {
            Ok(delivery) => Ok(delivery.status),
            Err(OperatorError::Store(StoreError::NotFound { .. })) => Ok("in-progress".to_owned()),
            Err(err) => Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use time::OffsetDateTime;
    use time::macros::datetime;

    use super::*;
    use crate::backends::memory::MemoryTransport;
    use crate::backends::sqlite::store::SqliteStore;
    use crate::ports::store::{DeliveryStore, TimelineEntry, TimelineStatus, TimelineStore};

    const SHARED: &str = "0195f3a0-0000-7000-8000-0000000000";

    async fn start(store: &SqliteStore, id: &str, tenant: &str, at: OffsetDateTime, line: bool) {
        store
            .record_delivery(DeliveryRecord {
                correlation_id: id.to_owned(),
                tenant_id: tenant.to_owned(),
                started_by: "cli:alice".to_owned(),
                message_type: "Probe".to_owned(),
                message_id: format!("m-{id}"),
                started_at: at,
                traceparent: None,
                tracestate: None,
            })
            .await
            .unwrap();
        if line {
            store
                .append_timeline(vec![TimelineEntry {
                    correlation_id: id.to_owned(),
                    message_id: format!("m-{id}"),
                    message_type: "Probe".to_owned(),
                    consumer: None,
                    status: TimelineStatus::Sent,
                    attempt: 0,
                    at,
                    detail: None,
                }])
                .await
                .unwrap();
        }
    }

    /// Contoso's deliveries …01 and …03, fabrikam's …02, all beginning
    /// [`SHARED`]; …03 has nothing on its timeline yet.
    async fn operator() -> Operator {
        let store = Arc::new(SqliteStore::in_memory().unwrap());
        start(
            &store,
            &format!("{SHARED}01"),
            "contoso",
            datetime!(2026-12-01 10:00:00 UTC),
            true,
        )
        .await;
        start(
            &store,
            &format!("{SHARED}02"),
            "fabrikam",
            datetime!(2026-12-01 10:00:01 UTC),
            true,
        )
        .await;
        start(
            &store,
            &format!("{SHARED}03"),
            "contoso",
            datetime!(2026-12-01 10:00:02 UTC),
            false,
        )
        .await;
        Operator::new(Arc::new(MemoryTransport::new(10)), store, "alice")
    }

    fn text(result: Result<Delivery, OperatorError>) -> String {
        match result {
            Ok(delivery) => format!("found {}", delivery.correlation_id),
            Err(err) => err.to_string(),
        }
    }

    #[tokio::test]
    async fn a_unique_prefix_or_the_whole_id_in_any_case_names_a_delivery() {
        let operator = operator().await;
        let first = format!("{SHARED}01");
        assert_eq!(text(operator.delivery_of(&first, None).await), format!("found {first}"));
        let upper = first.to_uppercase();
        assert_eq!(text(operator.delivery_of(&upper, None).await), format!("found {first}"));
        assert_eq!(
            text(operator.delivery_of(&format!(" {SHARED}0 "), Some("fabrikam")).await),
            format!("found {SHARED}02")
        );
    }

    #[tokio::test]
    async fn an_ambiguous_prefix_lists_the_candidates_with_their_start_and_status() {
        let operator = operator().await;
        let Err(OperatorError::Store(StoreError::Ambiguous { what, id, candidates })) =
            operator.delivery_of(&SHARED[..8], Some("contoso")).await
        else {
            panic!("ambiguous within contoso");
        };
        assert_eq!((what, id.as_str()), ("delivery", &SHARED[..8]));
        assert_eq!(
            candidates,
            [
                format!("{SHARED}01 (started 2026-12-01T10:00:00Z, in-progress)"),
                format!("{SHARED}03 (started 2026-12-01T10:00:02Z, in-progress)"),
            ],
            "fabrikam's is not among them"
        );
        let Err(OperatorError::Store(StoreError::Ambiguous { candidates, .. })) =
            operator.delivery_of(SHARED, None).await
        else {
            panic!("ambiguous for the platform");
        };
        assert_eq!(candidates.len(), 3);
    }

    #[tokio::test]
    async fn another_tenants_delivery_reads_as_no_delivery() {
        let operator = operator().await;
        let foreign = format!("{SHARED}02");
        let absent = format!("{SHARED}ff");
        let refused = text(operator.delivery_of(&foreign, Some("contoso")).await);
        let missing = text(operator.delivery_of(&absent, Some("contoso")).await);
        assert_eq!(refused.replace(&foreign, "ID"), missing.replace(&absent, "ID"));
        assert!(refused.starts_with("no delivery"), "{refused}");
        for nothing in ["0196", "%", "0195%", "019", "not-hex"] {
            let said = text(operator.delivery_of(nothing, None).await);
            assert!(
                said.starts_with("no delivery (give the full correlation id"),
                "{nothing}: {said}"
            );
        }
    }
}
