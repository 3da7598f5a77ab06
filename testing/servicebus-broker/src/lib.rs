//! A test-only Azure Service Bus broker: AMQP 1.0 over plain TCP, as the
//! Service Bus emulator speaks it, with the Service Bus semantics bosun's
//! client relies on. Start it with [`Broker::start`], create entities from
//! code, and point a client at [`RunningBroker::connection_string`]
//! (`Endpoint=sb://127.0.0.1:PORT;...;UseDevelopmentEmulator=true`).
//!
//! What it does, as Service Bus does:
//! - SASL ANONYMOUS / MSSBCBS / PLAIN, then `$cbs` `put-token`: with a key
//!   configured, a shared access signature's key name, audience, expiry and
//!   HMAC-SHA256 signature are checked (a JWT is taken as it is), and a
//!   link needs a token for its entity.
//! - Queues; topics whose subscriptions each have SQL filter rules
//!   ([`filter`]); a send to a topic gives a copy to every subscription with
//!   a matching rule. Each queue and subscription has a `$DeadLetterQueue`.
//! - Peek-lock: lock duration, expiry (the message comes back, its delivery
//!   counted), maximum delivery count (then `MaxDeliveryCountExceeded` in the
//!   dead-letter sub-queue), outcomes accepted / modified / released /
//!   rejected (`DeadLetterReason`, `DeadLetterErrorDescription`).
//! - The lock token as the delivery tag (16 bytes, .NET `Guid` byte
//!   order), the header written out in full (delivery count 0 included),
//!   and a peek-locked delivery settled back with its outcome when the
//!   client settles in receiver settle mode second, as Microsoft's SDKs do
//!   (`frames` adapts `fe2o3-amqp`'s frames for these three).
//! - Message annotations `x-opt-sequence-number`, `x-opt-enqueued-time`,
//!   `x-opt-locked-until`; scheduled messages
//!   (`x-opt-scheduled-enqueue-time`); duplicate detection by message id;
//!   batches (message format `0x80013700`).
//! - Sessions, on an entity with [`EntitySettings::requires_session`]:
//!   messages carry a session id (AMQP `group-id`); a receiver attaches
//!   with the source filter `com.microsoft:session-filter` (a session id,
//!   or null for the next session with an available message that no one
//!   holds, waited for up to the link's `com.microsoft:timeout`, then
//!   `com.microsoft:timeout`); the attach is answered with the session id
//!   in the filter (described as Service Bus's `0x137:0xC`) and
//!   `com.microsoft:locked-until-utc` (.NET ticks) in its properties. The
//!   session is locked for that link for the lock duration (another
//!   receiver gets `com.microsoft:session-cannot-be-locked`), the link gets
//!   only its messages, in sequence order, under the session's lock; when
//!   the lock expires the link is closed with
//!   `com.microsoft:session-lock-lost` and its messages come back; closing
//!   the link gives the session up. A receiver without a session filter on
//!   such an entity, or with one on an entity without sessions, is closed
//!   with `amqp:not-allowed`.
//! - Deferral: the outcome modified with `undeliverable-here` keeps the
//!   message out of delivery (peek still shows it) until it is received by
//!   sequence number.
//! - `$management`: `com.microsoft:renew-lock`, `peek-message` (of a
//!   session with `session-id`), `update-disposition` (`completed`,
//!   `abandoned`, `defered`, `suspended`), `renew-session-lock`
//!   (`expiration`), `get-session-state` / `set-session-state`
//!   (`session-state`, binary), `receive-by-sequence-number` (deferred
//!   messages, `receiver-settle-mode` 0 deletes and 1 locks: `messages` of
//!   `message` and `lock-token`), `schedule-message` (`messages` of encoded
//!   `message`, answered with `sequence-numbers`) and
//!   `cancel-scheduled-message`; errors with status codes and Service Bus
//!   conditions (`com.microsoft:message-lock-lost`,
//!   `com.microsoft:session-lock-lost`, `com.microsoft:message-not-found`,
//!   `amqp:not-found`).
//! - The management REST API (ATOM over HTTP, api-version 2021-05) on the
//!   same port: a connection that does not start with `AMQP` is HTTP/1.1.
//!   `PUT` (create: 201, 409 when it exists; `If-Match: *` replaces: 200,
//!   404 when absent), `GET` and `DELETE` of queues, topics,
//!   `{topic}/Subscriptions/{s}` and `.../Rules/{r}`, and `GET .../Rules`
//!   (a feed; `$skip`, `$top`). A missing queue or topic reads as 200 with
//!   an empty feed, a missing subscription or rule as 404 with an
//!   `<Error>`, as on Service Bus. Descriptions set the
//!   [`EntitySettings`] (`LockDuration`, `MaxDeliveryCount`,
//!   `RequiresDuplicateDetection`, `DuplicateDetectionHistoryTimeWindow`)
//!   and rules (`SqlFilter`, `TrueFilter`, `FalseFilter`); other simple
//!   properties are given back as sent. With a key, `Authorization` needs
//!   a shared access signature covering the URL's entity (401 otherwise).
//!   bosun reaches it with `BOSUN_SERVICEBUS_MANAGEMENT_URL=http://127.0.0.1:PORT`.
//!
//! Fault hooks for tests: [`RunningBroker::expire_lock`],
//! [`RunningBroker::hold_replies`] / [`RunningBroker::release_replies`]
//! and [`RunningBroker::drop_connections`].
//!
//! Layout: [`filter`] the SQL filters, `namespace` the entities and their
//! semantics (no I/O), `server` the AMQP connections and links, `requests`
//! `$cbs` and `$management`, `sas` token checks, `frames` the frame-level
//! adapter under each connection, `rest` the management REST API and
//! `atom` its XML.
//!
//! Not done: transactions, message TTL, `propertiesToModify` on abandon,
//! `get-message-sessions`, rule operations on `$management`. A session
//! lock is checked for the receiver link only: `$management` session
//! operations and settlements need the session locked, by anyone. A
//! next-available session attach that waits holds up the attaches after it
//! on its AMQP session. Scheduled messages to a topic are routed when
//! scheduled, not when they become visible.
//! Of the management REST API: no listing of queues, topics
//! or subscriptions (`$Resources/...`), no namespace information, no
//! authorization rules, no `DefaultRuleDescription` on a new subscription
//! (it always gets the `$Default` true filter); properties it cannot honour
//! are refused with 400 (a change of `RequiresSession`, `ForwardTo`,
//! `ForwardDeadLetteredMessagesTo`, correlation filters, rule actions) and
//! the others it does not model (`DefaultMessageTimeToLive`,
//! `MaxSizeInMegabytes`, `EnablePartitioning`, ...) are only kept and
//! given back; `Status` is kept but an entity is never disabled; SAS
//! rights (Manage, Send, Listen) are not told apart.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as SyncMutex};
use std::time::Duration;

use time::OffsetDateTime;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use uuid::Uuid;

mod atom;
pub mod filter;
mod frames;
mod namespace;
mod requests;
mod rest;
mod sas;
mod server;

pub use namespace::{DEAD_LETTER_QUEUE, EntitySettings, MAX_DELIVERY_COUNT_EXCEEDED, Refusal};
pub use sas::{SharedAccessKey, TokenRefusal, check_token};

use namespace::Namespace;
use server::lock;

/// How often expired locks are looked for.
const LOCK_SWEEP: Duration = Duration::from_millis(20);

/// How the broker is set up.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// The shared access key tokens must be signed with; `None` takes any
    /// token and needs none.
    pub key: Option<SharedAccessKey>,
}

impl Default for BrokerConfig {
    /// The emulator's well-known key: `RootManageSharedAccessKey` /
    /// `SAS_KEY_VALUE`.
    fn default() -> Self {
        Self {
            key: Some(SharedAccessKey {
                key_name: "RootManageSharedAccessKey".to_owned(),
                key: "SAS_KEY_VALUE".to_owned(),
            }),
        }
    }
}

/// What the connection, link and lock-sweep tasks share.
pub(crate) struct Shared {
    pub(crate) namespace: SyncMutex<Namespace>,
    /// Woken when messages may have become available.
    pub(crate) changed: Notify,
    pub(crate) key: Option<SharedAccessKey>,
    /// Bumped to drop every open connection.
    pub(crate) cut: watch::Sender<u64>,
    /// While set, nothing the broker writes reaches any client.
    pub(crate) held: Arc<AtomicBool>,
    /// Locked deliveries waiting for their outcome.
    pub(crate) pending: SyncMutex<Vec<server::PendingDelivery>>,
    /// What the management REST API keeps beyond the namespace (names as
    /// created, properties as sent); locked after `namespace`.
    pub(crate) catalog: SyncMutex<rest::Catalog>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("key", &self.key).finish_non_exhaustive()
    }
}

/// The broker.
#[derive(Debug)]
pub struct Broker;

impl Broker {
    /// Binds `127.0.0.1:0` and serves until the [`RunningBroker`] is dropped.
    pub async fn start(config: BrokerConfig) -> std::io::Result<RunningBroker> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            namespace: SyncMutex::new(Namespace::default()),
            changed: Notify::new(),
            key: config.key.clone(),
            cut: watch::channel(0).0,
            held: Arc::new(AtomicBool::new(false)),
            pending: SyncMutex::new(Vec::new()),
            catalog: SyncMutex::new(rest::Catalog::default()),
        });
        let (stop, stopped) = watch::channel(false);
        let accept = tokio::spawn(server::accept_loop(listener, Arc::clone(&shared), stopped));
        let sweeper = Arc::downgrade(&shared);
        let sweep = tokio::spawn(async move {
            loop {
                tokio::time::sleep(LOCK_SWEEP).await;
                let Some(shared) = sweeper.upgrade() else { return };
                server::apply_outcomes(&shared);
                let now = OffsetDateTime::now_utc();
                if lock(&shared.namespace).expire_locks(now) {
                    shared.changed.notify_waiters();
                }
            }
        });
        Ok(RunningBroker {
            shared,
            port,
            config,
            stop,
            tasks: vec![accept, sweep],
        })
    }
}

/// A started broker. Dropping it stops it and closes its connections.
#[derive(Debug)]
pub struct RunningBroker {
    shared: Arc<Shared>,
    port: u16,
    config: BrokerConfig,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for RunningBroker {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl RunningBroker {
    /// The port it listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A namespace-level connection string for it, as the emulator's:
    /// `Endpoint=sb://127.0.0.1:PORT;SharedAccessKeyName=...;SharedAccessKey=...;UseDevelopmentEmulator=true`.
    pub fn connection_string(&self) -> String {
        let (name, key) = self
            .config
            .key
            .as_ref()
            .map_or(("RootManageSharedAccessKey", "any"), |key| {
                (key.key_name.as_str(), key.key.as_str())
            });
        format!(
            "Endpoint=sb://127.0.0.1:{};SharedAccessKeyName={name};SharedAccessKey={key};UseDevelopmentEmulator=true",
            self.port
        )
    }

    fn with_namespace<T>(&self, work: impl FnOnce(&mut Namespace) -> T) -> T {
        server::apply_outcomes(&self.shared);
        let result = work(&mut lock(&self.shared.namespace));
        self.shared.changed.notify_waiters();
        result
    }

    /// Notes, for the management API, the name an entity was made with.
    fn named<E>(&self, path: &str, result: Result<(), E>) -> Result<(), E> {
        if result.is_ok() {
            lock(&self.shared.catalog).named(path);
        }
        result
    }

    /// Creates a queue (and its `$DeadLetterQueue`).
    pub fn create_queue(&self, name: &str, settings: EntitySettings) -> Result<(), Refusal> {
        let result = self.with_namespace(|namespace| namespace.create_queue(name, settings));
        self.named(name, result)
    }

    /// Creates a topic (its duplicate detection window applies to sends to it).
    pub fn create_topic(&self, name: &str, settings: EntitySettings) -> Result<(), Refusal> {
        let result = self.with_namespace(|namespace| namespace.create_topic(name, settings));
        self.named(name, result)
    }

    /// Creates a subscription of `topic`, with the `$Default` rule (a true
    /// filter) as Service Bus gives every new subscription.
    pub fn create_subscription(&self, topic: &str, name: &str, settings: EntitySettings) -> Result<(), Refusal> {
        let result = self.with_namespace(|namespace| namespace.create_subscription(topic, name, settings));
        self.named(&format!("{topic}/Subscriptions/{name}"), result)
    }

    /// Adds or replaces a subscription's SQL filter rule.
    pub fn put_rule(&self, topic: &str, subscription: &str, rule: &str, sql_filter: &str) -> Result<(), Refusal> {
        let result = self.with_namespace(|namespace| namespace.put_rule(topic, subscription, rule, sql_filter));
        self.named(&format!("{topic}/Subscriptions/{subscription}/Rules/{rule}"), result)
    }

    /// Removes a subscription's rule (such as `$Default`); whether it was there.
    pub fn remove_rule(&self, topic: &str, subscription: &str, rule: &str) -> Result<bool, Refusal> {
        let result = self.with_namespace(|namespace| namespace.remove_rule(topic, subscription, rule));
        if let Ok(true) = result {
            lock(&self.shared.catalog).forget(&format!("{topic}/Subscriptions/{subscription}/Rules/{rule}"));
        }
        result
    }

    /// How many messages an entity path holds (`commit`,
    /// `bosun-events/Subscriptions/x/$DeadLetterQueue`), in any state.
    pub fn message_count(&self, path: &str) -> Option<usize> {
        server::apply_outcomes(&self.shared);
        lock(&self.shared.namespace).message_count(&namespace::entity_key(path))
    }

    /// Fault injection: ends the lock of `lock_token` now, as if it had
    /// expired (the message comes back, its delivery counted). Whether
    /// the lock was held.
    pub fn expire_lock(&self, lock_token: Uuid) -> bool {
        self.with_namespace(|namespace| namespace.expire_lock(lock_token, OffsetDateTime::now_utc()))
    }

    /// Fault injection: holds back everything the broker writes (outcomes,
    /// deliveries, responses) on every connection, as a broker that has
    /// stopped answering, until [`RunningBroker::release_replies`]; the
    /// connections stay open and what the clients send is still read.
    pub fn hold_replies(&self) {
        self.shared.held.store(true, Ordering::SeqCst);
    }

    /// Ends [`RunningBroker::hold_replies`]: what was held goes out.
    pub fn release_replies(&self) {
        self.shared.held.store(false, Ordering::SeqCst);
    }

    /// Fault injection: drops every open connection without a close frame.
    pub fn drop_connections(&self) {
        self.shared.cut.send_modify(|generation| *generation += 1);
    }
}
