//! The thin AMQP 1.0 layer under the Service Bus transport: one connection
//! (TLS, or plain for the emulator), one session, claims-based security
//! (`$cbs` put-token per entity audience, refreshed before expiry), link
//! attach for senders, peek-lock receivers and `$management` clients, and
//! the Service Bus `$management` requests bosun uses (`renew-lock`,
//! `peek-message`, `renew-session-lock`), and session receivers
//! (`com.microsoft:session-filter`: the next available session).
//!
//! It is written on `fe2o3-amqp`, the AMQP engine Microsoft's
//! `azure_core_amqp` wraps, and not on `azure_core_amqp` 1.x itself, because
//! that crate cannot do what peek-lock needs: its receiver always attaches
//! with receiver settle mode *first*, it settles only with accepted, released
//! or a bare rejected (1.1; 1.2.0-beta adds modified and rejected-with-error
//! but needs a second `azure_core`), its `$management` client sends only
//! `READ` requests without a body, so `com.microsoft:renew-lock` and
//! `com.microsoft:peek-message` cannot be expressed, and its receivers ignore
//! the link target a request/response pair needs. It also pins `fe2o3-amqp`
//! 0.14/0.16, before the 0.18.2 fix for a send that hung when the broker
//! settled it at once. Everything Service Bus-specific stays in this module
//! and [`super::mapping`], so the official Service Bus crate can replace
//! both when it ships.
//!
//! Over 800 lines on purpose: the AMQP links, frames and their failures
//! that the transport drives, in the order a message crosses them.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::link::{DetachError, LinkStateError, ReceiverAttachError, RecvError, SendError, SenderAttachError};
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::definitions::{self, ErrorCondition, Fields, ReceiverSettleMode, SenderSettleMode};
use fe2o3_amqp::types::messaging::{Modified, Rejected, Source};
use fe2o3_amqp::types::primitives::{Symbol, Timestamp, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use fe2o3_amqp_cbs::client::CbsClient;
use fe2o3_amqp_cbs::token::CbsToken;
use fe2o3_amqp_management::client::MgmtClient;
use fe2o3_amqp_management::error::Error as ManagementError;
use time::OffsetDateTime;
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use uuid::Uuid;

use super::connection::ServiceBusEndpoint;
use super::credential::TokenSource;
pub(crate) use super::requests::*;
use crate::ports::transport::unix_ms;

/// A put token is refreshed when it has less than this left.
const TOKEN_REFRESH_MARGIN: Duration = Duration::from_secs(5 * 60);
/// How often the connection looks for tokens to refresh.
const TOKEN_REFRESH_EVERY: Duration = Duration::from_secs(60);
/// Service Bus caps a dead-letter reason and description.
const DEAD_LETTER_TEXT_MAX: usize = 4096;
/// The source filter of a session receiver: a session id, or null for the
/// next available session.
pub(crate) const SESSION_FILTER: &str = "com.microsoft:session-filter";
/// The attach property with how long the broker may wait for a session.
const SESSION_WAIT: &str = "com.microsoft:timeout";
/// The condition Service Bus closes a next-available-session link with when
/// no session became available in time.
const NO_SESSION: &str = "com.microsoft:timeout";

/// The error an [`AmqpFailure`] came from (the engine's, the socket's, the
/// credential's), shared: one failure may be handed to every waiter.
pub(crate) type Cause = Arc<dyn std::error::Error + Send + Sync>;

/// A failure of the AMQP layer, sorted by what the transport does next.
/// Each says what was being done (`text`, which names the cause too) and
/// keeps the error it came from, when there is one, as its source.
///
/// `Display` and `Error` are written out rather than derived: the source
/// is the error itself, not the [`Cause`] (`Arc`) that shares it, so a
/// caller can downcast it.
#[derive(Debug, Clone)]
pub(crate) enum AmqpFailure {
    /// The entity (or management node) does not exist.
    NotFound {
        /// What was being done, and what the broker said.
        text: String,
        /// The error it came from.
        source: Option<Cause>,
    },
    /// The credential was refused for an audience.
    Unauthorized {
        /// What was being done, and why it was refused.
        text: String,
        /// The error it came from.
        source: Option<Cause>,
    },
    /// The endpoint does not implement an operation.
    Unsupported {
        /// The operation.
        text: String,
        /// The error it came from.
        source: Option<Cause>,
    },
    /// The broker refused a message or a settlement.
    Rejected {
        /// What was being done, and what the broker said.
        text: String,
        /// The error it came from.
        source: Option<Cause>,
    },
    /// The broker says the lock is gone.
    LockLost {
        /// What was being done, and what the broker said.
        text: String,
        /// The error it came from.
        source: Option<Cause>,
    },
    /// A link failed; drop it and attach a new one.
    Link {
        /// What was being done, and how it failed.
        text: String,
        /// The error it came from.
        source: Option<Cause>,
    },
    /// The connection or session failed; reconnect.
    Connection {
        /// What was being done, and how it failed.
        text: String,
        /// The error it came from.
        source: Option<Cause>,
    },
    /// No answer in time; the link is dropped. Nothing failed but the
    /// clock, so there is no source.
    Timeout {
        /// What was being waited for, and for how long.
        text: String,
    },
}

impl std::fmt::Display for AmqpFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotFound { text, .. } => write!(f, "entity `{text}` does not exist"),
            Self::Unauthorized { text, .. } => write!(f, "not authorized: {text}"),
            Self::Unsupported { text, .. } => write!(f, "{text} is not supported by this endpoint"),
            Self::LockLost { text, .. } => write!(f, "lock lost: {text}"),
            Self::Rejected { text, .. }
            | Self::Link { text, .. }
            | Self::Connection { text, .. }
            | Self::Timeout { text } => f.write_str(text),
        }
    }
}

impl std::error::Error for AmqpFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::NotFound { source, .. }
            | Self::Unauthorized { source, .. }
            | Self::Unsupported { source, .. }
            | Self::Rejected { source, .. }
            | Self::LockLost { source, .. }
            | Self::Link { source, .. }
            | Self::Connection { source, .. } => source.as_deref().map(|err| err as &(dyn std::error::Error + 'static)),
            Self::Timeout { .. } => None,
        }
    }
}

/// `err` as the cause of an [`AmqpFailure`].
pub(crate) fn cause(err: impl std::error::Error + Send + Sync + 'static) -> Option<Cause> {
    Some(Arc::new(err))
}

impl AmqpFailure {
    /// A link failure with no error under it.
    pub(crate) fn link(text: impl Into<String>) -> Self {
        Self::Link {
            text: text.into(),
            source: None,
        }
    }

    /// An operation the endpoint does not implement, with no error under it.
    pub(crate) fn unsupported(text: impl Into<String>) -> Self {
        Self::Unsupported {
            text: text.into(),
            source: None,
        }
    }

    /// The same failure, caused by `err` (a timeout keeps no cause).
    fn caused_by(mut self, err: impl std::error::Error + Send + Sync + 'static) -> Self {
        match &mut self {
            Self::NotFound { source, .. }
            | Self::Unauthorized { source, .. }
            | Self::Unsupported { source, .. }
            | Self::Rejected { source, .. }
            | Self::LockLost { source, .. }
            | Self::Link { source, .. }
            | Self::Connection { source, .. } => *source = cause(err),
            Self::Timeout { .. } => {}
        }
        self
    }

    /// Whether the connection has to be replaced.
    pub(crate) fn breaks_connection(&self) -> bool {
        matches!(self, Self::Connection { .. })
    }
}

/// The symbol of an error condition (`amqp:not-found`,
/// `com.microsoft:message-lock-lost`, ...).
pub(crate) fn condition_symbol(condition: &ErrorCondition) -> String {
    match condition {
        ErrorCondition::AmqpError(error) => Symbol::from(error).0,
        ErrorCondition::ConnectionError(error) => Symbol::from(error).0,
        ErrorCondition::SessionError(error) => Symbol::from(error).0,
        ErrorCondition::LinkError(error) => Symbol::from(error).0,
        ErrorCondition::Custom(symbol) => symbol.0.clone(),
    }
}

/// Sorts an error the broker sent (on detach, close, rejected outcome);
/// the broker's error is the source.
pub(crate) fn classify_remote(what: &str, error: &definitions::Error) -> AmqpFailure {
    sort_remote(what, error).caused_by(error.clone())
}

/// How [`classify_remote`] sorts, without the source (the callers that
/// hold a larger error make that the source).
fn sort_remote(what: &str, error: &definitions::Error) -> AmqpFailure {
    let condition = condition_symbol(&error.condition);
    let text = match &error.description {
        Some(description) => format!("{what}: {condition}: {description}"),
        None => format!("{what}: {condition}"),
    };
    let source = None;
    match condition.as_str() {
        "amqp:not-found" | "com.microsoft:entity-not-found" => AmqpFailure::NotFound { text, source },
        "amqp:unauthorized-access" => AmqpFailure::Unauthorized { text, source },
        "amqp:not-implemented" => AmqpFailure::Unsupported { text, source },
        "com.microsoft:message-lock-lost" | "com.microsoft:session-lock-lost" => AmqpFailure::LockLost { text, source },
        _ => AmqpFailure::Rejected { text, source },
    }
}

fn sort_link_state(what: &str, error: &LinkStateError) -> AmqpFailure {
    match error {
        LinkStateError::RemoteDetachedWithError(remote) | LinkStateError::RemoteClosedWithError(remote) => {
            match sort_remote(what, remote) {
                AmqpFailure::Rejected { text, source } => AmqpFailure::Link { text, source },
                other => other,
            }
        }
        LinkStateError::SessionStopped(reason) => AmqpFailure::Connection {
            text: format!("{what}: session stopped: {reason:?}"),
            source: None,
        },
        other => AmqpFailure::link(format!("{what}: {other}")),
    }
}

fn sort_detach(what: &str, error: &DetachError) -> AmqpFailure {
    sort_link_state(what, &LinkStateError::from(clone_detach(error)))
}

#[allow(deprecated)]
fn clone_detach(error: &DetachError) -> DetachError {
    match error {
        DetachError::IllegalState => DetachError::IllegalState,
        DetachError::SessionStopped(reason) => DetachError::SessionStopped(reason.clone()),
        DetachError::RemoteDetachedWithError(remote) => DetachError::RemoteDetachedWithError(remote.clone()),
        DetachError::ClosedByRemote => DetachError::ClosedByRemote,
        DetachError::DetachedByRemote => DetachError::DetachedByRemote,
        DetachError::RemoteClosedWithError(remote) => DetachError::RemoteClosedWithError(remote.clone()),
    }
}

/// Sorts a failed send; the send's error is the source.
pub(crate) fn from_send(what: &str, error: SendError) -> AmqpFailure {
    sort_send(what, &error).caused_by(error)
}

fn sort_send(what: &str, error: &SendError) -> AmqpFailure {
    match error {
        SendError::LinkStateError(state) => sort_link_state(what, state),
        SendError::Detached(detach) => sort_detach(what, detach),
        SendError::MessageSizeExceeded(exceeded) => AmqpFailure::Rejected {
            text: format!("{what}: {exceeded}"),
            source: None,
        },
        other => AmqpFailure::link(format!("{what}: {other}")),
    }
}

/// Sorts a failed receive; the receive's error is the source.
pub(crate) fn from_recv(what: &str, error: RecvError) -> AmqpFailure {
    sort_recv(what, &error).caused_by(error)
}

fn sort_recv(what: &str, error: &RecvError) -> AmqpFailure {
    match error {
        RecvError::LinkStateError(state) => sort_link_state(what, state),
        other => AmqpFailure::link(format!("{what}: {other}")),
    }
}

fn from_sender_attach(what: &str, error: SenderAttachError) -> AmqpFailure {
    sort_sender_attach(what, &error).caused_by(error)
}

fn sort_sender_attach(what: &str, error: &SenderAttachError) -> AmqpFailure {
    match error {
        SenderAttachError::RemoteClosedWithError(remote) => sort_remote(what, remote),
        SenderAttachError::SessionStopped(reason) => AmqpFailure::Connection {
            text: format!("{what}: session stopped: {reason:?}"),
            source: None,
        },
        SenderAttachError::SessionNotMapped | SenderAttachError::IllegalState => AmqpFailure::Connection {
            text: format!("{what}: {error}"),
            source: None,
        },
        other => AmqpFailure::link(format!("{what}: {other}")),
    }
}

fn from_receiver_attach(what: &str, error: ReceiverAttachError) -> AmqpFailure {
    sort_receiver_attach(what, &error).caused_by(error)
}

fn sort_receiver_attach(what: &str, error: &ReceiverAttachError) -> AmqpFailure {
    match error {
        ReceiverAttachError::RemoteClosedWithError(remote) => sort_remote(what, remote),
        ReceiverAttachError::SessionStopped(reason) => AmqpFailure::Connection {
            text: format!("{what}: session stopped: {reason:?}"),
            source: None,
        },
        ReceiverAttachError::SessionNotMapped | ReceiverAttachError::IllegalState => AmqpFailure::Connection {
            text: format!("{what}: {error}"),
            source: None,
        },
        other => AmqpFailure::link(format!("{what}: {other}")),
    }
}

fn from_management_attach(what: &str, error: fe2o3_amqp_management::error::AttachError) -> AmqpFailure {
    let sorted = match &error {
        fe2o3_amqp_management::error::AttachError::Sender(sender) => sort_sender_attach(what, sender),
        fe2o3_amqp_management::error::AttachError::Receiver(receiver) => sort_receiver_attach(what, receiver),
    };
    sorted.caused_by(error)
}

/// Sorts a failed `$management` (or `$cbs`) call; the call's error is the
/// source.
pub(crate) fn from_management(what: &str, error: ManagementError) -> AmqpFailure {
    sort_management(what, &error).caused_by(error)
}

fn sort_management(what: &str, error: &ManagementError) -> AmqpFailure {
    let source = None;
    match error {
        ManagementError::Status(status) => {
            let code = status.code.0.get();
            let description = status.description.clone().unwrap_or_default();
            let text = format!("{what}: status {code} {description}");
            match code {
                401 | 403 => AmqpFailure::Unauthorized { text, source },
                404 => AmqpFailure::NotFound { text, source },
                410 => AmqpFailure::LockLost { text, source },
                400 | 405 | 501 => AmqpFailure::unsupported(format!("{what} (status {code} {description})")),
                _ => AmqpFailure::Rejected { text, source },
            }
        }
        ManagementError::Send(send) => sort_send(what, send),
        ManagementError::Recv(recv) => sort_recv(what, recv),
        ManagementError::NotAccepted(outcome) => match outcome {
            fe2o3_amqp::types::messaging::Outcome::Rejected(Rejected { error: Some(remote) }) => {
                match sort_remote(what, remote) {
                    AmqpFailure::Rejected { text, .. } if text.contains("amqp:not-allowed") => {
                        AmqpFailure::unsupported(what)
                    }
                    other => other,
                }
            }
            other => AmqpFailure::Rejected {
                text: format!("{what}: request not accepted: {other:?}"),
                source,
            },
        },
        other => AmqpFailure::link(format!("{what}: {other}")),
    }
}

/// How the connection is made.
#[derive(Debug, Clone)]
pub(crate) struct AmqpSettings {
    /// The longest an attach, put-token or `$management` call may take.
    pub(crate) operation_timeout: Duration,
    /// The AMQP idle timeout bosun announces.
    pub(crate) idle_timeout: Duration,
}

/// One AMQP connection to the namespace with its session and `$cbs` client.
pub(crate) struct AmqpConnection {
    /// Increases with each reconnection; links remember theirs.
    pub(crate) generation: u64,
    endpoint: ServiceBusEndpoint,
    tokens: TokenSource,
    settings: AmqpSettings,
    connection: Mutex<ConnectionHandle<()>>,
    session: Mutex<SessionHandle<()>>,
    cbs: Mutex<CbsClient>,
    /// Audience → when its put token expires.
    authorized: Mutex<HashMap<String, OffsetDateTime>>,
    broken: AtomicBool,
}

impl std::fmt::Debug for AmqpConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpConnection")
            .field("generation", &self.generation)
            .field("host", &self.endpoint.host)
            .finish_non_exhaustive()
    }
}

async fn within<T>(limit: Duration, what: &str, work: impl Future<Output = T>) -> Result<T, AmqpFailure> {
    tokio::time::timeout(limit, work)
        .await
        .map_err(|_| AmqpFailure::Timeout {
            text: format!("{what}: no answer within {} ms", limit.as_millis()),
        })
}

impl AmqpConnection {
    /// Connects, begins the session and attaches the `$cbs` client.
    pub(crate) async fn open(
        endpoint: &ServiceBusEndpoint,
        tokens: &TokenSource,
        settings: &AmqpSettings,
        generation: u64,
    ) -> Result<Arc<Self>, AmqpFailure> {
        let limit = settings.operation_timeout;
        let address = format!("{}:{}", endpoint.host, endpoint.amqp_port);
        let stream = within(limit, "connect", TcpStream::connect(&address))
            .await?
            .map_err(|err| AmqpFailure::Connection {
                text: format!("connect to {address}: {err}"),
                source: cause(err),
            })?;
        // Small request/response frames (settlements, $management) must not
        // wait for Nagle's algorithm.
        let _ = stream.set_nodelay(true);
        let container = format!("bosun-{}", Uuid::new_v4().simple());
        let idle = u32::try_from(settings.idle_timeout.as_millis()).unwrap_or(u32::MAX);
        let scheme = if endpoint.emulator { "amqp" } else { "amqps" };
        let builder = Connection::builder()
            .container_id(container)
            .scheme(scheme)
            .hostname(endpoint.host.as_str())
            .domain(endpoint.host.as_str())
            .sasl_profile(SaslProfile::Anonymous)
            .alt_tls_establishment(true)
            .max_frame_size(65_536)
            .idle_time_out(idle);
        let mut connection = within(limit, "open the AMQP connection", builder.open_with_stream(stream))
            .await?
            .map_err(|err| AmqpFailure::Connection {
                text: format!("open the AMQP connection to {address}: {err}"),
                source: cause(err),
            })?;
        let mut session = within(limit, "begin the AMQP session", Session::begin(&mut connection))
            .await?
            .map_err(|err| AmqpFailure::Connection {
                text: format!("begin the AMQP session: {err}"),
                source: cause(err),
            })?;
        let cbs = within(limit, "attach $cbs", CbsClient::attach(&mut session))
            .await?
            .map_err(|err| from_management_attach("attach $cbs", err))?;
        let opened = Arc::new(Self {
            generation,
            endpoint: endpoint.clone(),
            tokens: tokens.clone(),
            settings: settings.clone(),
            connection: Mutex::new(connection),
            session: Mutex::new(session),
            cbs: Mutex::new(cbs),
            authorized: Mutex::new(HashMap::new()),
            broken: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&opened);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(TOKEN_REFRESH_EVERY).await;
                let Some(connection) = weak.upgrade() else { return };
                if !connection.is_open() {
                    return;
                }
                connection.refresh_tokens().await;
            }
        });
        tracing::info!(host = %endpoint.host, generation, "AMQP connection open");
        Ok(opened)
    }

    /// Whether the connection and its session still run.
    pub(crate) fn is_open(&self) -> bool {
        if self.broken.load(Ordering::SeqCst) {
            return false;
        }
        let connection_closed = self.connection.try_lock().map(|c| c.is_closed()).unwrap_or(false);
        let session_ended = self.session.try_lock().map(|s| s.is_ended()).unwrap_or(false);
        !connection_closed && !session_ended
    }

    /// Marks the connection for replacement.
    pub(crate) fn mark_broken(&self) {
        self.broken.store(true, Ordering::SeqCst);
    }

    /// The AMQP address of an entity path.
    pub(crate) fn address(&self, path: &str) -> String {
        self.endpoint.entity_address(path)
    }

    /// Puts a token for `path`'s audience on `$cbs` unless one is in force.
    pub(crate) async fn authorize(&self, path: &str) -> Result<(), AmqpFailure> {
        let audience = self.endpoint.audience(path);
        let fresh = {
            let authorized = self.authorized.lock().await;
            authorized
                .get(&audience)
                .is_some_and(|expires| *expires - OffsetDateTime::now_utc() > TOKEN_REFRESH_MARGIN)
        };
        if fresh {
            return Ok(());
        }
        self.put_token(&audience).await
    }

    async fn put_token(&self, audience: &str) -> Result<(), AmqpFailure> {
        let token = self
            .tokens
            .token(audience)
            .await
            .map_err(|err| AmqpFailure::Unauthorized {
                text: err.to_string(),
                source: cause(err),
            })?;
        let expires = Timestamp::from(unix_ms(token.expires_at));
        let what = format!("put-token for {audience}");
        let result = {
            let mut cbs = self.cbs.lock().await;
            within(
                self.settings.operation_timeout,
                &what,
                cbs.put_token(
                    audience,
                    CbsToken::new(token.value.as_str(), token.token_type, Some(expires)),
                ),
            )
            .await
        };
        match result {
            Ok(Ok(())) => {
                self.authorized
                    .lock()
                    .await
                    .insert(audience.to_owned(), token.expires_at);
                tracing::debug!(audience, expires_at = %token.expires_at, "token put on $cbs");
                Ok(())
            }
            Ok(Err(err)) => {
                let failure = from_management(&what, err);
                if !matches!(failure, AmqpFailure::Unauthorized { .. } | AmqpFailure::NotFound { .. }) {
                    // A $cbs link that failed or answered out of turn is not reused.
                    self.mark_broken();
                }
                Err(failure)
            }
            Err(timeout) => {
                self.mark_broken();
                Err(timeout)
            }
        }
    }

    /// Puts new tokens for audiences whose token ends soon.
    async fn refresh_tokens(&self) {
        let due: Vec<String> = {
            let authorized = self.authorized.lock().await;
            let now = OffsetDateTime::now_utc();
            authorized
                .iter()
                .filter(|(_, expires)| **expires - now <= TOKEN_REFRESH_MARGIN)
                .map(|(audience, _)| audience.clone())
                .collect()
        };
        for audience in due {
            if let Err(err) = self.put_token(&audience).await {
                tracing::warn!(audience, error = %err, "could not refresh the Service Bus token");
            }
        }
    }

    /// Attaches a sender link to `path` (sender settle mode unsettled: every
    /// send waits for the broker's outcome).
    pub(crate) async fn sender(&self, path: &str) -> Result<Sender, AmqpFailure> {
        self.authorize(path).await?;
        let name = format!("bosun-send-{}-{}", path.replace('/', "_"), Uuid::new_v4().simple());
        let what = format!("attach a sender to `{path}`");
        let mut session = self.session.lock().await;
        let attach = Sender::builder()
            .name(name.clone())
            .source(name)
            .target(self.address(path))
            .sender_settle_mode(SenderSettleMode::Unsettled)
            .receiver_settle_mode(ReceiverSettleMode::First)
            .attach(&mut session);
        within(self.settings.operation_timeout, &what, attach)
            .await?
            .map_err(|err| self.note(from_sender_attach(&what, err)))
    }

    /// Attaches a peek-lock receiver to `path`: sender settle mode
    /// unsettled, receiver settle mode second, credit given by the caller.
    pub(crate) async fn receiver(&self, path: &str) -> Result<Receiver, AmqpFailure> {
        self.authorize(path).await?;
        let name = format!("bosun-receive-{}-{}", path.replace('/', "_"), Uuid::new_v4().simple());
        let what = format!("attach a receiver to `{path}`");
        let mut session = self.session.lock().await;
        let attach = Receiver::builder()
            .name(name.clone())
            .source(self.address(path))
            .target(name)
            .sender_settle_mode(SenderSettleMode::Unsettled)
            .receiver_settle_mode(ReceiverSettleMode::Second)
            .credit_mode(CreditMode::Manual)
            .auto_accept(false)
            .attach(&mut session);
        within(self.settings.operation_timeout, &what, attach)
            .await?
            .map_err(|err| self.note(from_receiver_attach(&what, err)))
    }

    /// Begins another AMQP session on the connection: session receivers
    /// attach on one of their own, since an attach that waits for a session
    /// holds up the attaches after it on its AMQP session.
    pub(crate) async fn begin_session(&self) -> Result<SessionHandle<()>, AmqpFailure> {
        let mut connection = self.connection.lock().await;
        within(
            self.settings.operation_timeout,
            "begin an AMQP session",
            Session::begin(&mut connection),
        )
        .await?
        .map_err(|err| {
            self.note(AmqpFailure::Connection {
                text: format!("begin an AMQP session: {err}"),
                source: cause(err),
            })
        })
    }

    /// Attaches a peek-lock receiver to the next available session of
    /// `path` on `session` (the broker waits up to `wait` for one):
    /// `Ok(None)` when none became available, else the receiver and the
    /// session id the broker locked for it.
    pub(crate) async fn session_receiver(
        &self,
        session: &mut SessionHandle<()>,
        path: &str,
        wait: Duration,
    ) -> Result<Option<(Receiver, String)>, AmqpFailure> {
        self.authorize(path).await?;
        let name = format!("bosun-session-{}-{}", path.replace('/', "_"), Uuid::new_v4().simple());
        let what = format!("accept a session of `{path}`");
        let source = Source::builder()
            .address(self.address(path))
            .add_to_filter(Symbol::from(SESSION_FILTER), None)
            .build();
        let mut properties = Fields::new();
        properties.insert(
            Symbol::from(SESSION_WAIT),
            Value::Uint(u32::try_from(wait.as_millis()).unwrap_or(u32::MAX)),
        );
        let attach = Receiver::builder()
            .name(name.clone())
            .source(source)
            .target(name)
            .properties(properties)
            .sender_settle_mode(SenderSettleMode::Unsettled)
            .receiver_settle_mode(ReceiverSettleMode::Second)
            .credit_mode(CreditMode::Manual)
            .auto_accept(false)
            // The answer's filter names the session granted, or lacks one
            // when none was (read below), which is not a refusal.
            .verify_incoming_source(false)
            .attach(session);
        let mut receiver = match within(wait + self.settings.operation_timeout, &what, attach).await? {
            Ok(receiver) => receiver,
            Err(ReceiverAttachError::RemoteClosedWithError(error))
                if condition_symbol(&error.condition) == NO_SESSION =>
            {
                return Ok(None);
            }
            Err(err) => return Err(self.note(from_receiver_attach(&what, err))),
        };
        if let Some(session_id) = granted_session(&receiver) {
            return Ok(Some((receiver, session_id)));
        }
        // Answered without a session: the broker closes the link, with
        // `com.microsoft:timeout` when none became available.
        let closed = within(
            self.settings.operation_timeout,
            &what,
            receiver.recv::<fe2o3_amqp::types::messaging::Body<Value>>(),
        )
        .await;
        let _ = tokio::time::timeout(Duration::from_secs(5), receiver.close()).await;
        match closed {
            Err(timeout) => Err(timeout),
            Ok(Ok(_)) => Err(AmqpFailure::link(format!("{what}: a message came without a session"))),
            Ok(Err(RecvError::LinkStateError(
                LinkStateError::RemoteDetachedWithError(error) | LinkStateError::RemoteClosedWithError(error),
            ))) if condition_symbol(&error.condition) == NO_SESSION => Ok(None),
            Ok(Err(err)) => Err(self.note(from_recv(&what, err))),
        }
    }

    /// Attaches a request/response pair to `path/$management`.
    pub(crate) async fn management(&self, path: &str) -> Result<MgmtClient, AmqpFailure> {
        self.authorize(path).await?;
        let node = format!("{path}/$management");
        let what = format!("attach to `{node}`");
        let mut session = self.session.lock().await;
        let attach = MgmtClient::builder()
            .management_node_address(self.address(&node))
            .client_node_addr(format!("bosun-management-{}", Uuid::new_v4().simple()))
            .attach(&mut session);
        within(self.settings.operation_timeout, &what, attach)
            .await?
            .map_err(|err| self.note(from_management_attach(&what, err)))
    }

    /// Records a failure that ends the connection.
    pub(crate) fn note(&self, failure: AmqpFailure) -> AmqpFailure {
        if failure.breaks_connection() {
            self.mark_broken();
        }
        failure
    }

    /// Closes the connection (best effort, bounded).
    pub(crate) async fn close(&self) {
        self.mark_broken();
        let limit = Duration::from_secs(5);
        let _ = tokio::time::timeout(limit, async { self.session.lock().await.end().await }).await;
        let _ = tokio::time::timeout(limit, async { self.connection.lock().await.close().await }).await;
    }
}

/// The session id a session receiver's attach was answered with (in its
/// source filter, described or plain).
fn granted_session(receiver: &Receiver) -> Option<String> {
    let value = receiver
        .source()
        .as_ref()?
        .filter
        .as_ref()?
        .get(&Symbol::from(SESSION_FILTER))?;
    let value = match value {
        Value::Described(described) => &described.value,
        other => other,
    };
    match value {
        Value::String(id) => Some(id.clone()),
        Value::Symbol(id) => Some(id.0.clone()),
        _ => None,
    }
}

/// The dead-letter outcome: rejected with `com.microsoft:dead-letter` and
/// the reason and description in the error's info.
pub(crate) fn dead_letter_outcome(reason: &str, description: &str) -> Rejected {
    let mut info = Fields::new();
    info.insert(
        Symbol::from("DeadLetterReason"),
        Value::String(truncate(reason, DEAD_LETTER_TEXT_MAX)),
    );
    info.insert(
        Symbol::from("DeadLetterErrorDescription"),
        Value::String(truncate(description, DEAD_LETTER_TEXT_MAX)),
    );
    Rejected {
        error: Some(definitions::Error::new(
            ErrorCondition::Custom(Symbol::from("com.microsoft:dead-letter")),
            Some(truncate(description, DEAD_LETTER_TEXT_MAX)),
            info,
        )),
    }
}

/// The abandon outcome: modified with delivery-failed, so Service Bus counts
/// the delivery.
pub(crate) fn abandon_outcome() -> Modified {
    Modified {
        delivery_failed: Some(true),
        undeliverable_here: None,
        message_annotations: None,
    }
}

fn truncate(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

#[cfg(test)]
mod tests;
