//! Wiring: settings to a transport, a store, consumers and a host.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::{Settings, TransportKind};
use crate::host::{Host, HostError, HostOptions};
use crate::operator::Operator;
use crate::registry;
use crate::store::sqlite::SqliteStore;
use crate::store::{Store, StoreError};
use crate::transport::embedded::EmbeddedTransport;
use crate::transport::{Topology, Transport, TransportError};

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
}

/// The transport and store chosen by the settings.
#[derive(Clone)]
pub struct Backends {
    /// The transport.
    pub transport: Arc<dyn Transport>,
    /// The store.
    pub store: Arc<dyn Store>,
}

impl Backends {
    /// Opens the configured transport and store and makes sure the
    /// transport has every queue and subscription of the routing table.
    pub async fn open(settings: &Settings) -> Result<Self, StartError> {
        std::fs::create_dir_all(&settings.data_dir).map_err(|source| StartError::DataDir {
            path: settings.data_dir.clone(),
            source,
        })?;
        let transport: Arc<dyn Transport> = match settings.transport {
            TransportKind::Embedded => Arc::new(EmbeddedTransport::open(
                &settings.transport_path(),
                settings.max_delivery_count,
            )?),
        };
        transport.ensure_topology(&Topology::from_routing()).await?;
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&settings.store_path())?);
        Ok(Self { transport, store })
    }

    /// Operator actions over these backends.
    pub fn operator(&self, identity: &str) -> Operator {
        Operator::new(Arc::clone(&self.transport), Arc::clone(&self.store), identity)
    }
}

/// Runs the selected consumers until `shutdown` is cancelled.
pub async fn serve(settings: &Settings, backends: &Backends, shutdown: CancellationToken) -> Result<(), StartError> {
    let consumers = registry::build(settings)?;
    let names: Vec<&str> = consumers.iter().map(|c| c.name()).collect();
    tracing::info!(
        consumers = ?names,
        data_dir = %settings.data_dir.display(),
        "bosun serving on the embedded transport"
    );
    let host = Host::new(
        Arc::clone(&backends.transport),
        Arc::clone(&backends.store),
        consumers,
        HostOptions::from_settings(settings),
    );
    host.run(shutdown).await?;
    Ok(())
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
