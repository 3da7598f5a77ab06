//! Wiring: settings to a transport, a store, consumers and a host.

use std::sync::Arc;
use std::time::Duration;

use bosun_consumers::Consumer;
use bosun_consumers::release_orchestration::ReleaseGovernance;
use bosun_contracts::routing::ConsumerRoute;
use tokio_util::sync::CancellationToken;

use crate::backends::postgres::settle::PostgresSettle;
use crate::backends::postgres::store::PostgresStore;
use crate::backends::postgres::transport::PostgresTransport;
use crate::backends::postgres::{PasswordSource, PoolSettings, PostgresDatabase};
use crate::backends::servicebus::credential::{CredentialError, TokenSource};
use crate::backends::servicebus::management::{ManagementClient, ManagementError};
use crate::backends::servicebus::plan::{InvalidTopologyOptions, TopologyOptions};
use crate::backends::servicebus::{ServiceBusOptions, ServiceBusTransport};
use crate::backends::sqlite::store::SqliteStore;
use crate::backends::sqlite::transport::EmbeddedTransport;
use crate::host::claim_check::{ClaimCheck, ClaimCheckSettings};
use crate::host::{self, Host, HostError, HostOptions};
use crate::operator::Operator;
use crate::ports::settle::{Settle, StoreThenSettle};
use crate::ports::store::{
    AccessStore, AuditStore, ControlStore, DeliveryStore, PolicyStore, ProcessRecord, Store, StoreError,
};
use crate::ports::transport::{Broker, Transport, TransportError};
use crate::runtime::config::{ServiceBusSettings, Settings, StoreKind, TransportKind};
use crate::runtime::metrics::{Gauges, Metrics};
use crate::runtime::registry;
use crate::runtime::telemetry;

/// Errors while starting.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The data directory could not be created.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: std::path::PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A command that only reads found no bosun data where it looked (a
    /// mistyped `--data-dir` or `BOSUN_DATA_DIR`); nothing was created.
    #[error(
        "there is no bosun data in {data_dir} (looked for {looked_for}); nothing was created. Point --data-dir or BOSUN_DATA_DIR at the directory `bosun serve` uses"
    )]
    NoData {
        /// The data directory.
        data_dir: std::path::PathBuf,
        /// The file that would hold the data.
        looked_for: std::path::PathBuf,
    },
    /// `serve` or `api` on Service Bus would keep bosun's state in its own
    /// SQLite file: set `BOSUN_DATABASE_URL` (a misnamed Secret key leaves
    /// it unset), or `BOSUN_ALLOW_LOCAL_STORE=true` for a single-pod trial.
    #[error(
        "BOSUN_DATABASE_URL is not set: with Service Bus as transport, `bosun {role}` runs beside other processes \
         that share state only through PostgreSQL, and would keep its own in {path} (lost with the pod). Set \
         BOSUN_DATABASE_URL, or BOSUN_ALLOW_LOCAL_STORE=true for a single-process trial"
    )]
    LocalStoreOnServiceBus {
        /// `serve` or `api`.
        role: &'static str,
        /// The SQLite file it would use.
        path: std::path::PathBuf,
    },
    /// Transport failure.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// Store failure.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Consumer selection or construction failure.
    #[error(transparent)]
    Registry(#[from] registry::RegistryError),
    /// The host failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The Service Bus credential could not be set up.
    #[error(transparent)]
    Credential(#[from] CredentialError),
    /// The Service Bus management client failed (the topology check).
    #[error(transparent)]
    Management(#[from] ManagementError),
    /// Service Bus entity settings it would refuse.
    #[error(transparent)]
    TopologyOptions(#[from] InvalidTopologyOptions),
    /// Settings that do not fit together.
    #[error("{0}")]
    Config(String),
    /// The Entra ID credential of `BOSUN_DATABASE_AUTH` could not be set
    /// up (its environment is missing: for workload identity the
    /// `AZURE_*` variables the webhook injects); nothing was connected.
    #[error("BOSUN_DATABASE_AUTH: {0}; fix the identity's environment and start again")]
    DatabaseCredential(#[source] bosun_consumers::delivery::azure::credential::CredentialError),
}

/// The store's concerns as [`Backends::open`] opens them, one store
/// behind each: everything the host uses, the front door's, the release
/// policies, the release audit, and the PostgreSQL store itself when that
/// is the one (its transport may share its pool).
type StoreParts = (
    Arc<dyn Store>,
    Arc<dyn AccessStore>,
    Arc<dyn PolicyStore>,
    Arc<dyn AuditStore>,
    Arc<dyn ControlStore>,
    Option<PostgresStore>,
);

/// The transport and store chosen by the settings.
#[derive(Clone)]
pub struct Backends {
    /// The transport, with its operator calls.
    pub transport: Arc<dyn Broker>,
    /// The store.
    pub store: Arc<dyn Store>,
    /// How what becomes of a received message is recorded and the message
    /// settled: in one transaction where the store and the transport share
    /// a PostgreSQL database, store then transport (at least once)
    /// otherwise.
    pub settle: Arc<dyn Settle>,
    /// API keys and HTTP idempotency (same database as the store).
    pub access: Arc<dyn AccessStore>,
    /// Each tenant's release policy, versioned and append-only (same
    /// database as the store).
    pub policies: Arc<dyn PolicyStore>,
    /// Each tenant's release audit log, append-only (same database as
    /// the store).
    pub audit: Arc<dyn AuditStore>,
    /// The log of operators' consumer pauses and resumes (same database as
    /// the store: every replica reads the same).
    pub controls: Arc<dyn ControlStore>,
    /// The blob store and when payloads go there.
    pub claim_check: ClaimCheck,
    /// The transport's `messaging.system`, for the spans of what is sent.
    pub messaging_system: &'static str,
    /// The wire version what is sent is written at
    /// (`BOSUN_COMPAT_VERSION`).
    pub wire: u32,
}

impl Backends {
    /// [`Backends::open`] for a command that only reads (or acts on what
    /// is there): where the settings keep data in the data directory (the
    /// SQLite store, else the embedded transport), it must be there
    /// already, or [`StartError::NoData`] says where it looked; nothing is
    /// created.
    pub async fn open_existing(settings: &Settings) -> Result<Self, StartError> {
        let local = if let StoreKind::Sqlite(path) = settings.store_kind() {
            Some(path)
        } else if settings.transport == TransportKind::Embedded {
            Some(settings.transport_path())
        } else {
            None
        };
        if let Some(looked_for) = local
            && !looked_for.is_file()
        {
            return Err(StartError::NoData {
                data_dir: settings.data_dir.clone(),
                looked_for,
            });
        }
        Self::open(settings).await
    }

    /// Opens the configured store, then the transport (sharing the
    /// store's connection pool where both are PostgreSQL), and makes sure
    /// the transport has every queue and subscription of the routing
    /// table. Which store and which transport is decided here only: by
    /// [`Settings::store_kind`] and [`Settings::transport`].
    pub async fn open(settings: &Settings) -> Result<Self, StartError> {
        std::fs::create_dir_all(&settings.data_dir).map_err(|source| StartError::DataDir {
            path: settings.data_dir.clone(),
            source,
        })?;
        let (store, access, policies, audit, controls, postgres): StoreParts = match settings.store_kind() {
            StoreKind::Sqlite(path) => {
                let store = Arc::new(SqliteStore::open(&path)?.with_timeline_fallback(settings.poll_interval));
                (store.clone(), store.clone(), store.clone(), store.clone(), store, None)
            }
            StoreKind::Postgres(url) => {
                let store = PostgresStore::new(open_database(url.expose(), settings, pool(settings)).await?);
                store.check_schema().await?;
                let shared = Arc::new(store.clone());
                (
                    shared.clone(),
                    shared.clone(),
                    shared.clone(),
                    shared.clone(),
                    shared,
                    Some(store),
                )
            }
        };
        let (transport, atomic_settle): (Arc<dyn Broker>, Option<Arc<dyn Settle>>) = match settings.transport {
            TransportKind::Embedded => (
                Arc::new(EmbeddedTransport::open(
                    &settings.transport_path(),
                    settings.max_delivery_count,
                )?),
                None,
            ),
            TransportKind::Postgres => {
                let Some(store) = postgres else {
                    return Err(StartError::Config(
                        "BOSUN_TRANSPORT=postgres needs BOSUN_DATABASE_URL".into(),
                    ));
                };
                // One database, one pool: the claim can look up the
                // idempotency record too, and a handled message's state,
                // its outgoing messages and its completion commit in one
                // transaction.
                let transport = PostgresTransport::new(store.database().clone(), settings.max_delivery_count)
                    .checking_handled_in_claim();
                let settle: Arc<dyn Settle> =
                    Arc::new(PostgresSettle::new(&transport).halting(host::halts(settings.failpoint)));
                transport.start_listening().await?;
                (Arc::new(transport), Some(settle))
            }
            TransportKind::ServiceBus => {
                let servicebus = settings.servicebus.as_ref().ok_or_else(|| {
                    StartError::Config("BOSUN_TRANSPORT=servicebus needs BOSUN_SERVICEBUS_CONNECTION_STRING or BOSUN_SERVICEBUS_NAMESPACE".into())
                })?;
                let tokens = TokenSource::for_endpoint(&servicebus.endpoint)?;
                let options = ServiceBusOptions {
                    prefetch: servicebus.prefetch,
                    send_timeout: servicebus.send_timeout,
                    // The session-keyed consumers, from their registrations.
                    topology: registry::topology(),
                    max_sessions: settings.concurrency,
                    ..ServiceBusOptions::default()
                };
                let transport = ServiceBusTransport::connect(servicebus.endpoint.clone(), tokens, options).await?;
                (Arc::new(transport), None)
            }
        };
        // Every other pair writes in the store, then settles on the
        // transport (at least once; see `StoreThenSettle`).
        let settle = atomic_settle.unwrap_or_else(|| {
            Arc::new(
                StoreThenSettle::new(Arc::clone(&store), Arc::clone(&transport) as Arc<dyn Transport>)
                    .halting(host::halts(settings.failpoint)),
            )
        });
        transport.ensure_topology(&registry::topology()).await?;
        let claim_check = ClaimCheck {
            store: registry::blob_store(settings)?,
            settings: ClaimCheckSettings {
                threshold_bytes: settings.claim_check_bytes,
            },
        };
        Ok(Self {
            transport,
            store,
            settle,
            access,
            policies,
            audit,
            controls,
            claim_check,
            messaging_system: telemetry::messaging_system(settings.transport),
            wire: settings.message_versions.wire(),
        })
    }

    /// A host running `consumers` over these backends, settling through
    /// [`Backends::settle`] and using their claim check.
    pub fn host(&self, consumers: Vec<Arc<dyn Consumer>>, options: HostOptions) -> Host {
        Host::new(
            Arc::clone(&self.transport) as Arc<dyn Transport>,
            Arc::clone(&self.store),
            consumers,
            options,
        )
        .with_settle(Arc::clone(&self.settle))
        .with_claim_check(self.claim_check.clone())
        .with_controls(Arc::clone(&self.controls))
    }

    /// The release saga's view of tenants' approval policies and of who
    /// requested each delivery, and its audit log, over these stores.
    pub fn governance(&self) -> Arc<dyn ReleaseGovernance> {
        Arc::new(governance::StoreGovernance::new(
            Arc::clone(&self.policies),
            Arc::clone(&self.store) as Arc<dyn DeliveryStore>,
            Arc::clone(&self.access),
            Arc::clone(&self.audit),
        ))
    }

    /// Operator actions over these backends.
    pub fn operator(&self, identity: &str) -> Operator {
        Operator::new(Arc::clone(&self.transport), Arc::clone(&self.store), identity)
            .with_claim_check(self.claim_check.clone())
            .with_messaging_system(self.messaging_system)
            .writing_for_wire(self.wire)
    }
}

/// How often a waiting process looks again for the migration it needs.
const SCHEMA_WAIT: Duration = Duration::from_secs(5);
/// How often a serving process asks whether the database has moved past
/// what it runs with.
pub const SCHEMA_RECHECK: Duration = Duration::from_secs(30);

/// [`Backends::open`], waiting while the database schema is behind this
/// bosun (a migration still to run: on AKS another pod's init container
/// may be running it now) instead of failing, so a pod waits unready
/// rather than crash-looping. `waiting` is told why each time it looks
/// again; anything else that stops the open, a schema past this bosun's
/// window included, fails at once. `None` when `shutdown` comes first.
pub async fn open_when_migrated(
    settings: &Settings,
    waiting: impl Fn(&StoreError),
    shutdown: &CancellationToken,
) -> Result<Option<Backends>, StartError> {
    let mut looks = 0_u32;
    loop {
        match Backends::open(settings).await {
            Ok(backends) => return Ok(Some(backends)),
            Err(StartError::Store(err @ StoreError::SchemaMismatch { found, expected })) if found < expected => {
                // Said at the first look, then once a minute.
                if looks.is_multiple_of(12) {
                    tracing::warn!(error = %err, "waiting for the database schema; not serving until it is migrated");
                }
                looks += 1;
                waiting(&err);
                tokio::select! {
                    () = tokio::time::sleep(SCHEMA_WAIT) => {}
                    () = shutdown.cancelled() => return Ok(None),
                }
            }
            Err(err) => return Err(err),
        }
    }
}

/// Refuses to run `serve` or `api` (`role`) on Service Bus with the
/// store in this process's SQLite file, unless `BOSUN_ALLOW_LOCAL_STORE`
/// says so: several processes on one transport must share their state.
pub fn check_shared_state(settings: &Settings, role: &'static str) -> Result<(), StartError> {
    match (&settings.servicebus, settings.store_kind()) {
        (Some(servicebus), StoreKind::Sqlite(path)) if !servicebus.allow_local_store => {
            Err(StartError::LocalStoreOnServiceBus { role, path })
        }
        _ => Ok(()),
    }
}

/// This process as the fleet lists it (`role`: `serve` or `api`; it
/// writes messages of wire version `writes_wire`).
pub fn this_process(role: &str, writes_wire: u32) -> ProcessRecord {
    let now = time::OffsetDateTime::now_utc();
    ProcessRecord {
        id: uuid::Uuid::now_v7(),
        role: role.to_owned(),
        release: env!("CARGO_PKG_VERSION").to_owned(),
        built_for_schema: crate::backends::postgres::SCHEMA_VERSION,
        writes_wire,
        reads_wire_from: bosun_contracts::versions::oldest_wire_read(),
        reads_wire_to: bosun_contracts::WIRE_VERSION,
        host: crate::runtime::host_name(),
        started_at: now,
        seen_at: now,
    }
}

/// Says `process` runs on the store now and every `every`, and asks the
/// store each time whether this bosun still runs on its schema. Once it
/// does not (a newer release's breaking migration, or a database put back
/// behind it), logs why, cancels `stop` and returns the error, so the
/// process stops taking work instead of writing to a schema it does not
/// understand. Returns `None` once `stop` is cancelled otherwise. Either
/// way the process leaves the fleet. A failure to ask (the database down)
/// is not a verdict: readiness reports it and the next look asks again.
pub async fn watch_schema(
    store: Arc<dyn Store>,
    process: ProcessRecord,
    every: Duration,
    stop: CancellationToken,
) -> Option<StoreError> {
    let moved = loop {
        if let Err(err) = store.heartbeat(&process).await {
            tracing::warn!(error = %err, "could not record this process in the fleet; trying again at the next look");
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.cancelled() => break None,
        }
        if let Err(err @ (StoreError::SchemaTooNew { .. } | StoreError::SchemaMismatch { .. })) =
            store.check_schema().await
        {
            tracing::error!(error = %err, "the database schema moved out of what this bosun runs with; stopping");
            stop.cancel();
            break Some(err);
        }
    };
    if let Err(err) = store.leave_fleet(process.id).await {
        tracing::warn!(error = %err, "could not remove this process from the fleet; it drops off the list once unseen");
    }
    moved
}

/// Runs the selected consumers until `shutdown` is cancelled.
pub async fn serve(settings: &Settings, backends: &Backends, shutdown: CancellationToken) -> Result<(), StartError> {
    serve_with_metrics(settings, backends, shutdown, Arc::new(Metrics::new())).await
}

/// [`serve`], counting into `metrics` (shared with the HTTP API's `/metrics`).
pub async fn serve_with_metrics(
    settings: &Settings,
    backends: &Backends,
    shutdown: CancellationToken,
    metrics: Arc<Metrics>,
) -> Result<(), StartError> {
    verify_topology(settings).await?;
    let consumers = registry::build(settings, backends.governance())?;
    let names: Vec<&str> = consumers.iter().map(|c| c.name()).collect();
    tracing::info!(
        consumers = ?names,
        data_dir = %settings.data_dir.display(),
        transport = ?settings.transport,
        store = ?settings.store_kind(),
        "bosun serving"
    );
    // Counting a Service Bus entity is a management call: there each
    // process counts only its own consumers' entities (with a deployment
    // per consumer, one or two), on bosun's own queues every consumer's.
    let sampled: Vec<&'static ConsumerRoute> = bosun_contracts::routing::CONSUMERS
        .iter()
        .filter(|route| settings.transport != TransportKind::ServiceBus || names.contains(&route.name))
        .collect();
    let sampler = tokio::spawn(sample_gauges(
        backends.clone(),
        Arc::clone(&metrics),
        sampled,
        gauge_interval(settings),
        shutdown.clone(),
    ));
    let host = backends
        .host(consumers, HostOptions::from_settings(settings))
        .with_metrics(metrics);
    let stop = shutdown.child_token();
    let schema = tokio::spawn(watch_schema(
        Arc::clone(&backends.store),
        this_process("serve", settings.message_versions.wire()),
        SCHEMA_RECHECK,
        stop.clone(),
    ));
    let served = host.run(stop.clone()).await;
    stop.cancel();
    sampler.abort();
    let moved = schema.await.ok().flatten();
    served?;
    match moved {
        Some(err) => Err(err.into()),
        None => Ok(()),
    }
}

/// How often the gauges are sampled: every 15 s, or at the OTLP export
/// interval when that is shorter.
fn gauge_interval(settings: &Settings) -> Duration {
    const EVERY: Duration = Duration::from_secs(15);
    settings
        .telemetry
        .metrics
        .as_ref()
        .map_or(EVERY, |metrics| metrics.interval.min(EVERY))
}

/// Samples the outbox backlog and the depth of the queue and subscription
/// of each of `routes` into `metrics` every `interval` until `shutdown`.
/// An entity the transport cannot count (a Service Bus identity without
/// Manage rights) is left out, logged once.
async fn sample_gauges(
    backends: Backends,
    metrics: Arc<Metrics>,
    routes: Vec<&'static ConsumerRoute>,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut warned = false;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = shutdown.cancelled() => return,
        }
        let mut gauges = Gauges {
            outbox_backlog: backends.store.outbox_backlog().await.ok(),
            ..Gauges::default()
        };
        for route in &routes {
            let entities = [
                (!route.commands.is_empty()).then(|| route.queue()),
                (!route.events.is_empty()).then(|| route.subscription()),
            ];
            for entity in entities.into_iter().flatten() {
                match backends.transport.depth(&entity).await {
                    Ok(depth) => {
                        gauges.queue_depth.insert((route.name.to_owned(), entity.path()), depth);
                    }
                    Err(err) if !warned => {
                        warned = true;
                        tracing::warn!(entity = %entity.path(), error = %err, "queue depth is not sampled");
                    }
                    Err(_) => {}
                }
            }
        }
        metrics.set_gauges(gauges);
    }
}

/// The Service Bus entity settings that follow from bosun's settings.
pub fn topology_options(settings: &Settings) -> Result<TopologyOptions, StartError> {
    let options = TopologyOptions {
        lock_duration: settings.lock_duration,
        max_delivery_count: settings.max_delivery_count,
        ..TopologyOptions::default()
    };
    options.validate()?;
    Ok(options)
}

/// Where the PostgreSQL password comes from, as `BOSUN_DATABASE_AUTH`
/// says: the URL's, or Entra ID tokens of the identity it names (through
/// the credential every Azure client of bosun shares).
pub fn database_password(settings: &Settings) -> Result<PasswordSource, StartError> {
    match settings.database_auth.credential() {
        None => Ok(PasswordSource::Url),
        Some(credential) => bosun_consumers::delivery::azure::credential::entra_id_credential(credential)
            .map(PasswordSource::EntraId)
            .map_err(StartError::DatabaseCredential),
    }
}

/// Opens the PostgreSQL database at `url` with `pool`, signing in as the
/// settings say ([`database_password`]): the store of `serve` and `api`,
/// and `bosun migrate`.
pub async fn open_database(url: &str, settings: &Settings, pool: PoolSettings) -> Result<PostgresDatabase, StartError> {
    let password = database_password(settings)?;
    Ok(PostgresDatabase::connect_as(url, pool, &password)
        .await
        .map_err(StoreError::from)?)
}

/// The PostgreSQL pool as configured (`BOSUN_DATABASE_POOL_SIZE`).
fn pool(settings: &Settings) -> PoolSettings {
    PoolSettings {
        max_connections: settings.database_pool_size,
        min_connections: settings.database_pool_min,
        ..PoolSettings::default()
    }
}

/// A management client for the configured namespace (at
/// `BOSUN_SERVICEBUS_MANAGEMENT_URL` when that is set).
pub fn management_client(settings: &ServiceBusSettings) -> Result<ManagementClient, StartError> {
    let tokens = TokenSource::for_endpoint(&settings.endpoint)?;
    let client = ManagementClient::new(&settings.endpoint, tokens)?;
    Ok(match &settings.management_url {
        Some(url) => client.with_base_url(url.as_str()),
        None => client,
    })
}

/// Checks that the namespace has every entity bosun needs; refuses to
/// start when one is missing. An endpoint without the management API (the
/// emulator) or an identity without Manage rights cannot be checked: that
/// is logged, and serving goes on (a missing entity then fails its link).
pub async fn verify_topology(settings: &Settings) -> Result<(), StartError> {
    let Some(servicebus) = settings.servicebus.as_ref().filter(|s| s.verify_topology) else {
        return Ok(());
    };
    let client = management_client(servicebus)?;
    match client.verify(&registry::topology(), &topology_options(settings)?).await {
        Ok(()) => {
            tracing::info!(namespace = %servicebus.endpoint.host, "Service Bus topology verified");
            Ok(())
        }
        Err(err @ (ManagementError::Unsupported { .. } | ManagementError::Unauthorized { .. })) => {
            tracing::warn!(
                error = %err,
                "cannot verify the Service Bus topology; serving without the check (BOSUN_SERVICEBUS_VERIFY=false silences this)"
            );
            Ok(())
        }
        Err(err) => Err(err.into()),
    }
}

/// Cancels `token` on SIGTERM or Ctrl-C.
pub fn cancel_on_signals(token: CancellationToken) {
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            match signal(SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        _ = term.recv() => tracing::info!("SIGTERM received"),
                        _ = tokio::signal::ctrl_c() => tracing::info!("Ctrl-C received"),
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, "cannot listen for SIGTERM; Ctrl-C only");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        token.cancel();
    });
}

pub mod governance;
#[cfg(test)]
mod tests;
