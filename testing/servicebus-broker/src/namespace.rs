//! The namespace's state and its Service Bus semantics, without any AMQP
//! I/O: entities (queues, topics, subscriptions with rules, each queue and
//! subscription with its `$DeadLetterQueue`), enqueue with duplicate
//! detection, scheduling (and cancelling) and rule routing, peek-lock with
//! lock expiry and delivery counts, settlement, renewal and peek, deferred
//! messages received by sequence number, and sessions (a lock per session
//! for one receiver, its expiry and renewal, session state). Every
//! operation takes the current time, so the rules are tested without a
//! clock.
//!
//! Over 800 lines on purpose: the broker's semantics are one state machine
//! behind one lock; split, every file would reach into the same state.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::{ApplicationProperties, Body, Header, Message, MessageAnnotations, MessageId};
use fe2o3_amqp::types::primitives::{SimpleValue, Timestamp, Value};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::filter::{FilterSubject, SqlFilter, SqlValue};

/// A message as the broker holds it (whatever body the sender gave).
pub(crate) type AmqpMessage = Message<Body<Value>>;

/// The sub-queue of an entity that holds its dead letters.
pub const DEAD_LETTER_QUEUE: &str = "$DeadLetterQueue";
/// The annotation naming when a scheduled message becomes visible.
pub(crate) const SCHEDULED_ENQUEUE_TIME: &str = "x-opt-scheduled-enqueue-time";
/// The dead-letter reason Service Bus gives after too many deliveries.
pub const MAX_DELIVERY_COUNT_EXCEEDED: &str = "MaxDeliveryCountExceeded";

/// The settings of a queue, topic or subscription (the ones Service Bus
/// keeps per entity and bosun's topology sets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntitySettings {
    /// How long a peek-lock lasts unless renewed (queues, subscriptions).
    pub lock_duration: Duration,
    /// Deliveries before the message is dead-lettered with
    /// `MaxDeliveryCountExceeded` (queues, subscriptions).
    pub max_delivery_count: u32,
    /// Duplicate detection by message id over this window (queues,
    /// topics); `None` for none.
    pub duplicate_detection_window: Option<Duration>,
    /// Sessions (queues, subscriptions): messages carry a session id
    /// (AMQP `group-id`), a receiver locks one session and gets only its
    /// messages, in order; a receiver without a session is refused. Its
    /// dead-letter sub-queue does not require sessions (as on Service Bus).
    pub requires_session: bool,
}

impl Default for EntitySettings {
    /// Service Bus's defaults for an entity bosun creates: a one-minute
    /// lock, ten deliveries, ten minutes of duplicate detection.
    fn default() -> Self {
        Self {
            lock_duration: Duration::from_secs(60),
            max_delivery_count: 10,
            duplicate_detection_window: Some(Duration::from_secs(600)),
            requires_session: false,
        }
    }
}

/// Why an entity operation was refused, with the AMQP condition Service
/// Bus uses for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No such entity (`amqp:not-found`).
    #[error("the messaging entity `{0}` could not be found")]
    NotFound(String),
    /// The entity exists already (`com.microsoft:entity-already-exists`).
    #[error("the messaging entity `{0}` already exists")]
    AlreadyExists(String),
    /// The operation is not allowed on this entity (`amqp:not-allowed`).
    #[error("{0}")]
    NotAllowed(String),
    /// The lock is gone (`com.microsoft:message-lock-lost`).
    #[error("the lock supplied is invalid: it expired, or the message was already settled")]
    LockLost,
    /// A filter did not parse (`amqp:invalid-field`).
    #[error("{0}")]
    BadFilter(String),
    /// The session's lock expired or another receiver holds it now
    /// (`com.microsoft:session-lock-lost`).
    #[error("the session lock has expired, or the session is not locked by this receiver")]
    SessionLockLost,
    /// The session is locked by another receiver
    /// (`com.microsoft:session-cannot-be-locked`).
    #[error("{0}")]
    SessionCannotBeLocked(String),
    /// No such message, or not in the state the operation needs
    /// (`com.microsoft:message-not-found`).
    #[error("{0}")]
    MessageNotFound(String),
}

impl Refusal {
    /// The AMQP error condition Service Bus sends for it.
    pub fn condition(&self) -> &'static str {
        match self {
            Self::NotFound(_) => "amqp:not-found",
            Self::AlreadyExists(_) => "com.microsoft:entity-already-exists",
            Self::NotAllowed(_) => "amqp:not-allowed",
            Self::LockLost => "com.microsoft:message-lock-lost",
            Self::BadFilter(_) => "amqp:invalid-field",
            Self::SessionLockLost => "com.microsoft:session-lock-lost",
            Self::SessionCannotBeLocked(_) => "com.microsoft:session-cannot-be-locked",
            Self::MessageNotFound(_) => "com.microsoft:message-not-found",
        }
    }

    /// The `$management` status code Service Bus answers with.
    pub fn status_code(&self) -> u16 {
        match self {
            Self::NotFound(_) | Self::MessageNotFound(_) => 404,
            Self::AlreadyExists(_) | Self::SessionCannotBeLocked(_) => 409,
            Self::NotAllowed(_) | Self::BadFilter(_) => 400,
            Self::LockLost | Self::SessionLockLost => 410,
        }
    }
}

/// How a receiver settled a locked message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Settlement {
    /// `accepted`: the message is removed.
    Complete,
    /// `modified`: the lock is given up; `counted` (delivery-failed) keeps
    /// the delivery in the count, else it is not counted.
    Abandon {
        /// Whether the delivery counts (`delivery-failed`).
        counted: bool,
    },
    /// `modified` with `undeliverable-here`: Service Bus defers the message
    /// (it is only visible to peek and receive-by-sequence-number).
    Defer,
    /// `released`: given back, not counted.
    Release,
    /// `rejected`: moved to the dead-letter sub-queue.
    DeadLetter {
        /// `DeadLetterReason`.
        reason: String,
        /// `DeadLetterErrorDescription`.
        description: String,
    },
}

#[derive(Debug, Clone)]
struct Lock {
    token: Uuid,
    until: OffsetDateTime,
}

#[derive(Debug, Clone)]
struct Stored {
    message: AmqpMessage,
    enqueued_at: OffsetDateTime,
    visible_at: OffsetDateTime,
    /// Deliveries so far (the header's delivery count on the next one).
    delivery_count: u32,
    lock: Option<Lock>,
    deferred: bool,
    /// The session id (AMQP `group-id`) the message was sent with.
    session_id: Option<String>,
}

/// A session of a session-enabled queue or subscription.
#[derive(Debug, Default)]
struct SessionEntry {
    /// The state a receiver set (`set-session-state`).
    state: Option<Vec<u8>>,
    lock: Option<SessionLock>,
}

#[derive(Debug, Clone)]
struct SessionLock {
    /// The receiver link holding it.
    owner: Uuid,
    until: OffsetDateTime,
}

impl SessionEntry {
    fn locked(&self, now: OffsetDateTime) -> Option<&SessionLock> {
        self.lock.as_ref().filter(|lock| lock.until > now)
    }
}

/// A session locked for a receiver link.
#[derive(Debug, Clone)]
pub(crate) struct SessionGrant {
    /// The session id.
    pub(crate) session_id: String,
    /// Until when the session is locked.
    pub(crate) until: OffsetDateTime,
}

#[derive(Debug, Default)]
struct Duplicates {
    seen: HashMap<String, OffsetDateTime>,
}

impl Duplicates {
    /// Whether `message` repeats a message id seen within `window`; records it if not.
    fn is_duplicate(&mut self, window: Option<Duration>, message: &AmqpMessage, now: OffsetDateTime) -> bool {
        let (Some(window), Some(id)) = (window, message_id(message)) else {
            return false;
        };
        self.seen.retain(|_, at| *at + window > now);
        if self.seen.contains_key(&id) {
            return true;
        }
        self.seen.insert(id, now);
        false
    }
}

/// A queue, a subscription or a dead-letter sub-queue: somewhere messages wait.
#[derive(Debug)]
struct MessageStore {
    settings: EntitySettings,
    messages: BTreeMap<i64, Stored>,
    /// The dead-letter sub-queue's key (none for a dead-letter sub-queue).
    dead_letter: Option<String>,
    /// Session id → its state and lock (session-enabled entities).
    sessions: BTreeMap<String, SessionEntry>,
}

impl MessageStore {
    fn new(settings: EntitySettings, dead_letter: Option<String>) -> Self {
        Self {
            settings,
            messages: BTreeMap::new(),
            dead_letter,
            sessions: BTreeMap::new(),
        }
    }
}

/// A rule's filter: `$Default`'s true filter, or a SQL filter.
#[derive(Debug)]
enum RuleFilter {
    True,
    Sql(SqlFilter),
}

impl RuleFilter {
    fn matches(&self, subject: &dyn FilterSubject) -> bool {
        match self {
            Self::True => true,
            Self::Sql(filter) => filter.matches(subject),
        }
    }
}

#[derive(Debug)]
struct Topic {
    settings: EntitySettings,
    duplicates: Duplicates,
    /// Subscription name (lower case) → its rules by name.
    subscriptions: BTreeMap<String, BTreeMap<String, RuleFilter>>,
}

#[derive(Debug)]
struct Queue {
    duplicates: Duplicates,
}

/// A message handed to a receiver under a new lock.
#[derive(Debug, Clone)]
pub(crate) struct LockedMessage {
    /// The message with its delivery annotations and header.
    pub(crate) message: AmqpMessage,
    /// The lock token.
    pub(crate) token: Uuid,
}

/// Where a send goes.
enum SendTarget {
    Queue(String),
    Topic(String),
}

/// The namespace: every entity and message.
#[derive(Debug, Default)]
pub(crate) struct Namespace {
    stores: HashMap<String, MessageStore>,
    queues: HashMap<String, Queue>,
    topics: HashMap<String, Topic>,
    /// Lock token → the store holding the locked message and its sequence.
    locks: HashMap<Uuid, (String, i64)>,
    /// A sequence number `schedule-message` answered with → the copies
    /// it stored (one per queue, one per matching subscription of a topic).
    scheduled: HashMap<i64, Vec<(String, i64)>>,
    next_sequence: i64,
}

/// The key of an entity path: without the address's scheme and host,
/// slashes trimmed, lower case (Service Bus paths are case-insensitive).
pub(crate) fn entity_key(address: &str) -> String {
    let path = ["amqps://", "amqp://", "sb://"]
        .iter()
        .find_map(|scheme| address.strip_prefix(scheme))
        .map_or(address, |rest| rest.split_once('/').map_or("", |(_, path)| path));
    path.trim_matches('/').to_ascii_lowercase()
}

/// A dead-letter sub-queue's settings: its entity's, but never requiring
/// sessions (Service Bus reads the dead letters of a session entity with a
/// plain receiver).
fn dead_letter_settings(settings: EntitySettings) -> EntitySettings {
    EntitySettings {
        requires_session: false,
        ..settings
    }
}

fn dead_letter_key(key: &str) -> String {
    format!("{key}/{}", DEAD_LETTER_QUEUE.to_ascii_lowercase())
}

fn subscription_key(topic: &str, subscription: &str) -> String {
    format!(
        "{}/subscriptions/{}",
        entity_key(topic),
        subscription.to_ascii_lowercase()
    )
}

impl Namespace {
    fn exists(&self, key: &str) -> bool {
        self.stores.contains_key(key) || self.topics.contains_key(key)
    }

    /// Creates a queue (with its dead-letter sub-queue).
    pub(crate) fn create_queue(&mut self, path: &str, settings: EntitySettings) -> Result<(), Refusal> {
        let key = entity_key(path);
        if key.is_empty() || self.exists(&key) {
            return Err(Refusal::AlreadyExists(path.to_owned()));
        }
        let dead = dead_letter_key(&key);
        self.stores
            .insert(dead.clone(), MessageStore::new(dead_letter_settings(settings), None));
        self.stores.insert(key.clone(), MessageStore::new(settings, Some(dead)));
        self.queues.insert(
            key,
            Queue {
                duplicates: Duplicates::default(),
            },
        );
        Ok(())
    }

    /// Creates a topic.
    pub(crate) fn create_topic(&mut self, path: &str, settings: EntitySettings) -> Result<(), Refusal> {
        let key = entity_key(path);
        if key.is_empty() || self.exists(&key) {
            return Err(Refusal::AlreadyExists(path.to_owned()));
        }
        self.topics.insert(
            key,
            Topic {
                settings,
                duplicates: Duplicates::default(),
                subscriptions: BTreeMap::new(),
            },
        );
        Ok(())
    }

    /// Creates a subscription of `topic` with the `$Default` true filter
    /// rule, as Service Bus does.
    pub(crate) fn create_subscription(
        &mut self,
        topic: &str,
        subscription: &str,
        settings: EntitySettings,
    ) -> Result<(), Refusal> {
        let topic_key = entity_key(topic);
        let key = subscription_key(topic, subscription);
        let entry = self
            .topics
            .get_mut(&topic_key)
            .ok_or_else(|| Refusal::NotFound(topic.to_owned()))?;
        let name = subscription.to_ascii_lowercase();
        if entry.subscriptions.contains_key(&name) {
            return Err(Refusal::AlreadyExists(key));
        }
        entry
            .subscriptions
            .insert(name, BTreeMap::from([("$default".to_owned(), RuleFilter::True)]));
        let dead = dead_letter_key(&key);
        self.stores
            .insert(dead.clone(), MessageStore::new(dead_letter_settings(settings), None));
        self.stores.insert(key, MessageStore::new(settings, Some(dead)));
        Ok(())
    }

    fn rules_mut(&mut self, topic: &str, subscription: &str) -> Result<&mut BTreeMap<String, RuleFilter>, Refusal> {
        self.topics
            .get_mut(&entity_key(topic))
            .and_then(|entry| entry.subscriptions.get_mut(&subscription.to_ascii_lowercase()))
            .ok_or_else(|| Refusal::NotFound(subscription_key(topic, subscription)))
    }

    /// Adds (or replaces) a SQL filter rule of a subscription.
    pub(crate) fn put_rule(&mut self, topic: &str, subscription: &str, rule: &str, sql: &str) -> Result<(), Refusal> {
        let filter = SqlFilter::parse(sql).map_err(|err| Refusal::BadFilter(err.to_string()))?;
        self.rules_mut(topic, subscription)?
            .insert(rule.to_ascii_lowercase(), RuleFilter::Sql(filter));
        Ok(())
    }

    /// Removes a rule; whether it was there.
    pub(crate) fn remove_rule(&mut self, topic: &str, subscription: &str, rule: &str) -> Result<bool, Refusal> {
        Ok(self
            .rules_mut(topic, subscription)?
            .remove(&rule.to_ascii_lowercase())
            .is_some())
    }

    /// Whether a receiver or sender may attach to the entity at `key`, and
    /// which way: `true` for a send target, `false` for a receive source.
    pub(crate) fn check_attach(&self, key: &str, sending: bool) -> Result<(), Refusal> {
        if sending {
            if self.queues.contains_key(key) || self.topics.contains_key(key) {
                return Ok(());
            }
            if self.stores.contains_key(key) {
                return Err(Refusal::NotAllowed(format!(
                    "`{key}` cannot be sent to: send to its queue or topic"
                )));
            }
        } else {
            if self.stores.contains_key(key) {
                return Ok(());
            }
            if self.topics.contains_key(key) {
                return Err(Refusal::NotAllowed(format!(
                    "`{key}` is a topic: receive from one of its subscriptions"
                )));
            }
        }
        Err(Refusal::NotFound(key.to_owned()))
    }

    /// Whether `key` names a queue, topic, subscription or dead-letter sub-queue.
    pub(crate) fn has_entity(&self, key: &str) -> bool {
        self.exists(key)
    }

    fn send_target(&self, key: &str) -> Result<SendTarget, Refusal> {
        self.check_attach(key, true)?;
        Ok(if self.topics.contains_key(key) {
            SendTarget::Topic(key.to_owned())
        } else {
            SendTarget::Queue(key.to_owned())
        })
    }

    /// Enqueues `messages` (one send: a message or a batch) to the queue
    /// or topic at `key`. Duplicates (same message id within the window)
    /// are accepted and dropped; a topic gives each subscription whose
    /// rules match a copy.
    pub(crate) fn enqueue(
        &mut self,
        key: &str,
        messages: Vec<AmqpMessage>,
        now: OffsetDateTime,
    ) -> Result<(), Refusal> {
        let target = self.send_target(key)?;
        for message in messages {
            self.enqueue_one(&target, message, now);
        }
        Ok(())
    }

    /// Stores one message sent to `target`; where its copies went (none
    /// for a duplicate or a topic no rule matched).
    fn enqueue_one(&mut self, target: &SendTarget, message: AmqpMessage, now: OffsetDateTime) -> Vec<(String, i64)> {
        match target {
            SendTarget::Queue(queue) => {
                let window = self
                    .stores
                    .get(queue)
                    .and_then(|s| s.settings.duplicate_detection_window);
                let duplicate = self
                    .queues
                    .get_mut(queue)
                    .is_some_and(|q| q.duplicates.is_duplicate(window, &message, now));
                if duplicate {
                    return Vec::new();
                }
                let sequence = self.store(queue, message, now);
                vec![(queue.clone(), sequence)]
            }
            SendTarget::Topic(topic) => {
                let Some(entry) = self.topics.get_mut(topic) else {
                    return Vec::new();
                };
                if entry
                    .duplicates
                    .is_duplicate(entry.settings.duplicate_detection_window, &message, now)
                {
                    return Vec::new();
                }
                let subject = Subject(&message);
                let matched: Vec<String> = entry
                    .subscriptions
                    .iter()
                    .filter(|(_, rules)| rules.values().any(|rule| rule.matches(&subject)))
                    .map(|(name, _)| format!("{topic}/subscriptions/{name}"))
                    .collect();
                matched
                    .into_iter()
                    .map(|subscription| {
                        let sequence = self.store(&subscription, message.clone(), now);
                        (subscription, sequence)
                    })
                    .collect()
            }
        }
    }

    /// `schedule-message`: enqueues `messages` (each with its
    /// `x-opt-scheduled-enqueue-time`) to the queue or topic at `key`; the
    /// sequence numbers to cancel them by, in order.
    pub(crate) fn schedule(
        &mut self,
        key: &str,
        messages: Vec<AmqpMessage>,
        now: OffsetDateTime,
    ) -> Result<Vec<i64>, Refusal> {
        let target = self.send_target(key)?;
        let mut numbers = Vec::with_capacity(messages.len());
        for message in messages {
            let copies = self.enqueue_one(&target, message, now);
            let number = match (&target, copies.as_slice()) {
                (SendTarget::Queue(_), [(_, sequence)]) => *sequence,
                _ => {
                    // A topic's own number, for the copies it routed.
                    self.next_sequence += 1;
                    self.next_sequence
                }
            };
            self.scheduled.insert(number, copies);
            numbers.push(number);
        }
        Ok(numbers)
    }

    /// `cancel-scheduled-message`: removes the scheduled messages of `key`
    /// with these sequence numbers, all or none; one that is not (or no
    /// longer) scheduled is [`Refusal::MessageNotFound`].
    pub(crate) fn cancel_scheduled(&mut self, key: &str, numbers: &[i64], now: OffsetDateTime) -> Result<(), Refusal> {
        self.send_target(key)?;
        let mut found = Vec::new();
        for number in numbers {
            let copies = self
                .scheduled
                .get(number)
                .cloned()
                .unwrap_or_else(|| vec![(key.to_owned(), *number)]);
            let prefix = format!("{key}/");
            let all_scheduled = copies.iter().all(|(store, sequence)| {
                (store == key || store.starts_with(&prefix))
                    && self
                        .stores
                        .get(store)
                        .and_then(|s| s.messages.get(sequence))
                        .is_some_and(|stored| stored.visible_at > now && stored.lock.is_none())
            });
            // (A topic's number whose copies all were filtered out has none to check.)
            if !all_scheduled {
                return Err(Refusal::MessageNotFound(format!(
                    "no scheduled message with sequence number {number}"
                )));
            }
            found.push((*number, copies));
        }
        for (number, copies) in found {
            self.scheduled.remove(&number);
            for (store, sequence) in copies {
                if let Some(store) = self.stores.get_mut(&store) {
                    store.messages.remove(&sequence);
                }
            }
        }
        Ok(())
    }

    fn store(&mut self, key: &str, message: AmqpMessage, now: OffsetDateTime) -> i64 {
        self.next_sequence += 1;
        let sequence = self.next_sequence;
        let visible_at = match annotation(&message, SCHEDULED_ENQUEUE_TIME) {
            Some(Value::Timestamp(at)) => from_unix_ms(at.milliseconds()).max(now),
            _ => now,
        };
        let session_id = message.properties.as_ref().and_then(|p| p.group_id.clone());
        if let Some(store) = self.stores.get_mut(key) {
            store.messages.insert(
                sequence,
                Stored {
                    message,
                    enqueued_at: visible_at,
                    visible_at,
                    delivery_count: 0,
                    lock: None,
                    deferred: false,
                    session_id,
                },
            );
        }
        sequence
    }

    /// Locks the first available message of `key` (by sequence number) for
    /// the entity's lock duration and returns it as it is delivered. A
    /// session-enabled entity gives nothing here: see [`Self::lock_next_in_session`].
    pub(crate) fn lock_next(&mut self, key: &str, now: OffsetDateTime) -> Option<LockedMessage> {
        let store = self.stores.get(key)?;
        if store.settings.requires_session {
            return None;
        }
        let until = now + store.settings.lock_duration;
        self.lock_first(key, None, until, now)
    }

    /// Locks the first available message of `key`, of `session` if given,
    /// until `until`.
    fn lock_first(
        &mut self,
        key: &str,
        session: Option<&str>,
        until: OffsetDateTime,
        now: OffsetDateTime,
    ) -> Option<LockedMessage> {
        let store = self.stores.get_mut(key)?;
        let (sequence, stored) = store.messages.iter_mut().find(|(_, stored)| {
            available(stored, now) && session.is_none_or(|id| stored.session_id.as_deref() == Some(id))
        })?;
        let token = Uuid::new_v4();
        stored.lock = Some(Lock { token, until });
        let mut message = delivered(stored, *sequence);
        annotate(&mut message, "x-opt-locked-until", Value::Timestamp(timestamp(until)));
        annotate(&mut message, "x-opt-lock-token", Value::Uuid(token.into_bytes().into()));
        stored.delivery_count += 1;
        let sequence = *sequence;
        self.locks.insert(token, (key.to_owned(), sequence));
        Some(LockedMessage { message, token })
    }

    /// Whether receivers of `key` must lock a session.
    pub(crate) fn requires_session(&self, key: &str) -> bool {
        self.stores
            .get(key)
            .is_some_and(|store| store.settings.requires_session)
    }

    fn session_store(&mut self, key: &str) -> Result<&mut MessageStore, Refusal> {
        let store = self
            .stores
            .get_mut(key)
            .ok_or_else(|| Refusal::NotFound(key.to_owned()))?;
        if !store.settings.requires_session {
            return Err(Refusal::NotAllowed(format!(
                "a sessionful message receiver cannot be created on an entity that does not require sessions: `{key}`"
            )));
        }
        Ok(store)
    }

    /// Locks a session of `key` for the receiver link `owner`: `requested`,
    /// or with `None` the first session (by its first message) that has
    /// an available message and is not locked. `Ok(None)` when there is
    /// no such session now. A requested session another receiver holds is
    /// [`Refusal::SessionCannotBeLocked`]; it need not have messages.
    pub(crate) fn accept_session(
        &mut self,
        key: &str,
        requested: Option<&str>,
        owner: Uuid,
        now: OffsetDateTime,
    ) -> Result<Option<SessionGrant>, Refusal> {
        let store = self.session_store(key)?;
        let until = now + store.settings.lock_duration;
        let session_id = match requested {
            Some(id) => {
                if store.sessions.get(id).is_some_and(|entry| entry.locked(now).is_some()) {
                    return Err(Refusal::SessionCannotBeLocked(format!(
                        "the requested session `{id}` cannot be locked: another receiver holds it"
                    )));
                }
                id.to_owned()
            }
            None => {
                let sessions = &store.sessions;
                let next = store.messages.values().find_map(|stored| {
                    let id = stored.session_id.as_ref()?;
                    let free = sessions.get(id).is_none_or(|entry| entry.locked(now).is_none());
                    (free && available(stored, now)).then(|| id.clone())
                });
                let Some(id) = next else { return Ok(None) };
                id
            }
        };
        store.sessions.entry(session_id.clone()).or_default().lock = Some(SessionLock { owner, until });
        Ok(Some(SessionGrant { session_id, until }))
    }

    /// Gives up `owner`'s lock of a session (its receiver link closed).
    pub(crate) fn release_session(&mut self, key: &str, session_id: &str, owner: Uuid) {
        let Some(entry) = self
            .stores
            .get_mut(key)
            .and_then(|store| store.sessions.get_mut(session_id))
        else {
            return;
        };
        if entry.lock.as_ref().is_some_and(|lock| lock.owner == owner) {
            entry.lock = None;
        }
    }

    /// The lock of `session_id` if it is held (by `owner`, if given).
    fn live_session(
        &mut self,
        key: &str,
        session_id: &str,
        owner: Option<Uuid>,
        now: OffsetDateTime,
    ) -> Result<(&mut MessageStore, OffsetDateTime), Refusal> {
        let store = self.session_store(key)?;
        let until = store
            .sessions
            .get(session_id)
            .and_then(|entry| entry.locked(now))
            .filter(|lock| owner.is_none_or(|owner| lock.owner == owner))
            .map(|lock| lock.until)
            .ok_or(Refusal::SessionLockLost)?;
        Ok((store, until))
    }

    /// Locks the next available message of the session `owner` holds, in
    /// sequence order; its lock lasts as long as the session's. A session
    /// lock that expired or was taken is [`Refusal::SessionLockLost`].
    pub(crate) fn lock_next_in_session(
        &mut self,
        key: &str,
        session_id: &str,
        owner: Uuid,
        now: OffsetDateTime,
    ) -> Result<Option<LockedMessage>, Refusal> {
        let (_, until) = self.live_session(key, session_id, Some(owner), now)?;
        Ok(self.lock_first(key, Some(session_id), until, now))
    }

    /// `renew-session-lock`: extends a held session lock (and the locks of
    /// its messages) by the entity's lock duration; the new expiry.
    pub(crate) fn renew_session_lock(
        &mut self,
        key: &str,
        session_id: &str,
        now: OffsetDateTime,
    ) -> Result<OffsetDateTime, Refusal> {
        let (store, _) = self.live_session(key, session_id, None, now)?;
        let until = now + store.settings.lock_duration;
        if let Some(lock) = store.sessions.get_mut(session_id).and_then(|entry| entry.lock.as_mut()) {
            lock.until = until;
        }
        for stored in store.messages.values_mut() {
            if stored.session_id.as_deref() == Some(session_id)
                && let Some(lock) = stored.lock.as_mut()
                && lock.until > now
            {
                lock.until = until;
            }
        }
        Ok(until)
    }

    /// `get-session-state` of a locked session: its state, if set.
    pub(crate) fn session_state(
        &mut self,
        key: &str,
        session_id: &str,
        now: OffsetDateTime,
    ) -> Result<Option<Vec<u8>>, Refusal> {
        let (store, _) = self.live_session(key, session_id, None, now)?;
        Ok(store.sessions.get(session_id).and_then(|entry| entry.state.clone()))
    }

    /// `set-session-state` of a locked session (`None` clears it).
    pub(crate) fn set_session_state(
        &mut self,
        key: &str,
        session_id: &str,
        state: Option<Vec<u8>>,
        now: OffsetDateTime,
    ) -> Result<(), Refusal> {
        let (store, _) = self.live_session(key, session_id, None, now)?;
        store.sessions.entry(session_id.to_owned()).or_default().state = state;
        Ok(())
    }

    /// `receive-by-sequence-number`: the deferred messages of `key` with
    /// these sequence numbers (of `session_id`, if given), all or none.
    /// `peek_lock` locks each (the lock token is returned; it stays
    /// deferred unless completed or dead-lettered); otherwise each is
    /// removed. A message that is not deferred, or locked, is
    /// [`Refusal::MessageNotFound`].
    pub(crate) fn receive_deferred(
        &mut self,
        key: &str,
        sequences: &[i64],
        session_id: Option<&str>,
        peek_lock: bool,
        now: OffsetDateTime,
    ) -> Result<Vec<(AmqpMessage, Option<Uuid>)>, Refusal> {
        if let Some(id) = session_id {
            self.live_session(key, id, None, now)?;
        }
        let store = self
            .stores
            .get_mut(key)
            .ok_or_else(|| Refusal::NotFound(key.to_owned()))?;
        for sequence in sequences {
            let found = store.messages.get(sequence).is_some_and(|stored| {
                stored.deferred
                    && stored.lock.is_none()
                    && session_id.is_none_or(|id| stored.session_id.as_deref() == Some(id))
            });
            if !found {
                return Err(Refusal::MessageNotFound(format!(
                    "no deferred message with sequence number {sequence}"
                )));
            }
        }
        let until = now + store.settings.lock_duration;
        let mut received = Vec::with_capacity(sequences.len());
        for sequence in sequences {
            if peek_lock {
                let Some(stored) = store.messages.get_mut(sequence) else {
                    continue;
                };
                let token = Uuid::new_v4();
                stored.lock = Some(Lock { token, until });
                let mut message = delivered(stored, *sequence);
                annotate(&mut message, "x-opt-locked-until", Value::Timestamp(timestamp(until)));
                annotate(&mut message, "x-opt-lock-token", Value::Uuid(token.into_bytes().into()));
                stored.delivery_count += 1;
                self.locks.insert(token, (key.to_owned(), *sequence));
                received.push((message, Some(token)));
            } else if let Some(stored) = store.messages.remove(sequence) {
                received.push((delivered(&stored, *sequence), None));
            }
        }
        Ok(received)
    }

    /// Settles the message locked under `token`. A lock that expired or was
    /// settled already is [`Refusal::LockLost`].
    pub(crate) fn settle(&mut self, token: Uuid, settlement: Settlement, now: OffsetDateTime) -> Result<(), Refusal> {
        let (key, sequence) = self.live_lock(token, now)?;
        self.locks.remove(&token);
        let Some(store) = self.stores.get_mut(&key) else {
            return Err(Refusal::LockLost);
        };
        let max_delivery_count = store.settings.max_delivery_count;
        let dead_letter = store.dead_letter.clone();
        let Some(stored) = store.messages.get_mut(&sequence) else {
            return Err(Refusal::LockLost);
        };
        stored.lock = None;
        match settlement {
            Settlement::Complete => {
                store.messages.remove(&sequence);
            }
            Settlement::Abandon { counted: true } => {
                if stored.delivery_count >= max_delivery_count {
                    self.dead_letter(
                        &key,
                        sequence,
                        MAX_DELIVERY_COUNT_EXCEEDED,
                        &too_many(max_delivery_count),
                    );
                }
            }
            Settlement::Abandon { counted: false } | Settlement::Release => {
                stored.delivery_count = stored.delivery_count.saturating_sub(1);
            }
            Settlement::Defer => stored.deferred = true,
            Settlement::DeadLetter { reason, description } => {
                if dead_letter.is_some() {
                    self.dead_letter(&key, sequence, &reason, &description);
                } else {
                    // A dead letter of a dead-letter sub-queue stays there.
                    return Err(Refusal::NotAllowed(
                        "a message of a dead-letter sub-queue cannot be dead-lettered".to_owned(),
                    ));
                }
            }
        }
        Ok(())
    }

    fn live_lock(&self, token: Uuid, now: OffsetDateTime) -> Result<(String, i64), Refusal> {
        let (key, sequence) = self.locks.get(&token).cloned().ok_or(Refusal::LockLost)?;
        let locked = self
            .stores
            .get(&key)
            .and_then(|store| store.messages.get(&sequence))
            .and_then(|stored| stored.lock.as_ref())
            .is_some_and(|lock| lock.token == token && lock.until > now);
        let in_session = self
            .stores
            .get(&key)
            .is_some_and(|store| store.settings.requires_session);
        match (locked, in_session) {
            (true, _) => Ok((key, sequence)),
            // The message's lock was the session's.
            (false, true) => Err(Refusal::SessionLockLost),
            (false, false) => Err(Refusal::LockLost),
        }
    }

    /// Moves a message to its entity's dead-letter sub-queue with the
    /// reason and description as application properties.
    fn dead_letter(&mut self, key: &str, sequence: i64, reason: &str, description: &str) {
        let Some(store) = self.stores.get_mut(key) else { return };
        let Some(dead) = store.dead_letter.clone() else { return };
        let Some(mut stored) = store.messages.remove(&sequence) else {
            return;
        };
        let properties = stored
            .message
            .application_properties
            .get_or_insert_with(ApplicationProperties::default);
        properties
            .0
            .insert("DeadLetterReason".to_owned(), SimpleValue::String(reason.to_owned()));
        properties.0.insert(
            "DeadLetterErrorDescription".to_owned(),
            SimpleValue::String(description.to_owned()),
        );
        stored.lock = None;
        stored.deferred = false;
        if let Some(dead_store) = self.stores.get_mut(&dead) {
            dead_store.messages.insert(sequence, stored);
        }
    }

    /// Extends the locks of `tokens` by their entity's lock duration; the
    /// new expiries in order. Any lock that is gone fails the whole request.
    pub(crate) fn renew(&mut self, tokens: &[Uuid], now: OffsetDateTime) -> Result<Vec<OffsetDateTime>, Refusal> {
        let mut found = Vec::with_capacity(tokens.len());
        for token in tokens {
            found.push(self.live_lock(*token, now)?);
        }
        let mut expirations = Vec::with_capacity(tokens.len());
        for (key, sequence) in found {
            let Some(store) = self.stores.get_mut(&key) else {
                return Err(Refusal::LockLost);
            };
            let until = now + store.settings.lock_duration;
            if let Some(lock) = store.messages.get_mut(&sequence).and_then(|s| s.lock.as_mut()) {
                lock.until = until;
            }
            expirations.push(until);
        }
        Ok(expirations)
    }

    /// Ends the lock of `token` now, as if it had expired (fault injection).
    pub(crate) fn expire_lock(&mut self, token: Uuid, now: OffsetDateTime) -> bool {
        let Ok((key, sequence)) = self.live_lock(token, now) else {
            return false;
        };
        if let Some(lock) = self
            .stores
            .get_mut(&key)
            .and_then(|store| store.messages.get_mut(&sequence))
            .and_then(|stored| stored.lock.as_mut())
        {
            lock.until = now;
        }
        self.expire_locks(now);
        true
    }

    /// Gives every expired lock's message back (its delivery stays
    /// counted), dead-lettering those at the maximum delivery count.
    /// Whether any message became available.
    pub(crate) fn expire_locks(&mut self, now: OffsetDateTime) -> bool {
        let expired: Vec<(Uuid, String, i64)> = self
            .locks
            .iter()
            .filter(|(token, (key, sequence))| {
                self.stores
                    .get(key)
                    .and_then(|store| store.messages.get(sequence))
                    .and_then(|stored| stored.lock.as_ref())
                    .is_none_or(|lock| lock.token != **token || lock.until <= now)
            })
            .map(|(token, (key, sequence))| (*token, key.clone(), *sequence))
            .collect();
        for (token, key, sequence) in &expired {
            self.locks.remove(token);
            let Some(store) = self.stores.get_mut(key) else {
                continue;
            };
            let max = store.settings.max_delivery_count;
            let Some(stored) = store.messages.get_mut(sequence) else {
                continue;
            };
            if stored.lock.as_ref().is_some_and(|lock| lock.token == *token) {
                stored.lock = None;
                if stored.delivery_count >= max {
                    self.dead_letter(key, *sequence, MAX_DELIVERY_COUNT_EXCEEDED, &too_many(max));
                }
            }
        }
        let mut sessions_expired = false;
        for store in self.stores.values_mut() {
            for entry in store.sessions.values_mut() {
                if entry.lock.as_ref().is_some_and(|lock| lock.until <= now) {
                    entry.lock = None;
                    sessions_expired = true;
                }
            }
        }
        !expired.is_empty() || sessions_expired
    }

    /// Up to `count` messages of `key` from `from_sequence` on, locked or
    /// not, scheduled or deferred included, as Service Bus's peek returns them.
    /// With `session_id`, only that session's messages.
    pub(crate) fn peek(
        &self,
        key: &str,
        from_sequence: i64,
        count: usize,
        session_id: Option<&str>,
    ) -> Result<Vec<AmqpMessage>, Refusal> {
        let store = self.stores.get(key).ok_or_else(|| Refusal::NotFound(key.to_owned()))?;
        Ok(store
            .messages
            .range(from_sequence..)
            .filter(|(_, stored)| session_id.is_none_or(|id| stored.session_id.as_deref() == Some(id)))
            .take(count)
            .map(|(sequence, stored)| delivered(stored, *sequence))
            .collect())
    }

    /// How many messages `key` holds (any state).
    pub(crate) fn message_count(&self, key: &str) -> Option<usize> {
        self.stores.get(key).map(|store| store.messages.len())
    }
}

/// Whether a message can be delivered now: visible, not locked, not deferred.
fn available(stored: &Stored, now: OffsetDateTime) -> bool {
    stored.lock.is_none() && !stored.deferred && stored.visible_at <= now
}

/// What the management REST API (`crate::rest`) reads and changes: an
/// entity's settings, deleting entities, a subscription's rules.
impl Namespace {
    /// A queue's settings, when it exists.
    pub(crate) fn queue_settings(&self, path: &str) -> Option<EntitySettings> {
        let key = entity_key(path);
        self.queues
            .contains_key(&key)
            .then(|| self.stores.get(&key))
            .flatten()
            .map(|store| store.settings)
    }

    /// A topic's settings, when it exists.
    pub(crate) fn topic_settings(&self, path: &str) -> Option<EntitySettings> {
        self.topics.get(&entity_key(path)).map(|topic| topic.settings)
    }

    /// A subscription's settings, when it exists.
    pub(crate) fn subscription_settings(&self, topic: &str, subscription: &str) -> Option<EntitySettings> {
        self.stores
            .get(&subscription_key(topic, subscription))
            .map(|store| store.settings)
    }

    /// How many subscriptions a topic has.
    pub(crate) fn subscription_count(&self, topic: &str) -> usize {
        self.topics
            .get(&entity_key(topic))
            .map_or(0, |topic| topic.subscriptions.len())
    }

    /// Replaces a queue's or subscription's settings (`key` is its entity
    /// key), its dead-letter sub-queue's with them.
    fn set_store_settings(&mut self, key: &str, settings: EntitySettings) {
        if let Some(store) = self.stores.get_mut(key) {
            store.settings = settings;
        }
        if let Some(store) = self.stores.get_mut(&dead_letter_key(key)) {
            store.settings = dead_letter_settings(settings);
        }
    }

    /// Replaces a queue's settings.
    pub(crate) fn set_queue_settings(&mut self, path: &str, settings: EntitySettings) -> Result<(), Refusal> {
        let key = entity_key(path);
        if !self.queues.contains_key(&key) {
            return Err(Refusal::NotFound(path.to_owned()));
        }
        self.set_store_settings(&key, settings);
        Ok(())
    }

    /// Replaces a topic's settings.
    pub(crate) fn set_topic_settings(&mut self, path: &str, settings: EntitySettings) -> Result<(), Refusal> {
        let topic = self
            .topics
            .get_mut(&entity_key(path))
            .ok_or_else(|| Refusal::NotFound(path.to_owned()))?;
        topic.settings = settings;
        Ok(())
    }

    /// Replaces a subscription's settings.
    pub(crate) fn set_subscription_settings(
        &mut self,
        topic: &str,
        subscription: &str,
        settings: EntitySettings,
    ) -> Result<(), Refusal> {
        let key = subscription_key(topic, subscription);
        if !self.stores.contains_key(&key) {
            return Err(Refusal::NotFound(key));
        }
        self.set_store_settings(&key, settings);
        Ok(())
    }

    /// Drops a store and its dead-letter sub-queue, their messages and locks.
    fn drop_store(&mut self, key: &str) {
        let dead = dead_letter_key(key);
        self.stores.remove(key);
        self.stores.remove(&dead);
        self.locks.retain(|_, (store, _)| store != key && *store != dead);
    }

    /// Deletes a queue with its messages; whether it was there.
    pub(crate) fn delete_queue(&mut self, path: &str) -> bool {
        let key = entity_key(path);
        if self.queues.remove(&key).is_none() {
            return false;
        }
        self.drop_store(&key);
        true
    }

    /// Deletes a topic with its subscriptions; whether it was there.
    pub(crate) fn delete_topic(&mut self, path: &str) -> bool {
        let key = entity_key(path);
        let Some(topic) = self.topics.remove(&key) else {
            return false;
        };
        for name in topic.subscriptions.keys() {
            self.drop_store(&format!("{key}/subscriptions/{name}"));
        }
        true
    }

    /// Deletes a subscription with its messages; whether it was there.
    pub(crate) fn delete_subscription(&mut self, topic: &str, subscription: &str) -> bool {
        let removed = self
            .topics
            .get_mut(&entity_key(topic))
            .and_then(|entry| entry.subscriptions.remove(&subscription.to_ascii_lowercase()))
            .is_some();
        if removed {
            self.drop_store(&subscription_key(topic, subscription));
        }
        removed
    }

    /// A subscription's rules by name (lower case): the SQL expression of
    /// each, `None` for a true filter.
    pub(crate) fn rules(&self, topic: &str, subscription: &str) -> Result<Vec<(String, Option<String>)>, Refusal> {
        let rules = self
            .topics
            .get(&entity_key(topic))
            .and_then(|entry| entry.subscriptions.get(&subscription.to_ascii_lowercase()))
            .ok_or_else(|| Refusal::NotFound(subscription_key(topic, subscription)))?;
        Ok(rules
            .iter()
            .map(|(name, filter)| {
                let sql = match filter {
                    RuleFilter::True => None,
                    RuleFilter::Sql(filter) => Some(filter.expression().to_owned()),
                };
                (name.clone(), sql)
            })
            .collect())
    }

    /// Adds (or replaces) a true filter rule of a subscription.
    pub(crate) fn put_true_rule(&mut self, topic: &str, subscription: &str, rule: &str) -> Result<(), Refusal> {
        self.rules_mut(topic, subscription)?
            .insert(rule.to_ascii_lowercase(), RuleFilter::True);
        Ok(())
    }
}

fn too_many(max: u32) -> String {
    format!("Message could not be consumed after {max} delivery attempts.")
}

/// A stored message as it goes out: header delivery count = deliveries so
/// far, and the sequence number and enqueued time annotations.
fn delivered(stored: &Stored, sequence: i64) -> AmqpMessage {
    let mut message = stored.message.clone();
    let header = message.header.get_or_insert_with(Header::default);
    header.delivery_count = stored.delivery_count;
    annotate(&mut message, "x-opt-sequence-number", Value::Long(sequence));
    annotate(
        &mut message,
        "x-opt-enqueued-time",
        Value::Timestamp(timestamp(stored.enqueued_at)),
    );
    message
}

fn annotate(message: &mut AmqpMessage, name: &str, value: Value) {
    message
        .message_annotations
        .get_or_insert_with(MessageAnnotations::default)
        .0
        .insert(OwnedKey::from(name), value);
}

fn annotation<'a>(message: &'a AmqpMessage, name: &str) -> Option<&'a Value> {
    message
        .message_annotations
        .as_ref()?
        .0
        .iter()
        .find(|(key, _)| matches!(key, OwnedKey::Symbol(symbol) if symbol.0 == name))
        .map(|(_, value)| value)
}

/// An AMQP timestamp for a time.
pub(crate) fn timestamp(at: OffsetDateTime) -> Timestamp {
    let millis = at.unix_timestamp_nanos() / 1_000_000;
    Timestamp::from(i64::try_from(millis).unwrap_or(i64::MAX))
}

/// The time of an AMQP timestamp's milliseconds.
pub(crate) fn from_unix_ms(millis: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(millis) * 1_000_000).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

fn message_id_text(id: &MessageId) -> String {
    match id {
        MessageId::String(id) => id.clone(),
        MessageId::Ulong(id) => id.to_string(),
        MessageId::Uuid(id) => Uuid::from_bytes(*id.as_inner()).to_string(),
        MessageId::Binary(id) => id.iter().map(|byte| format!("{byte:02x}")).collect(),
    }
}

fn message_id(message: &AmqpMessage) -> Option<String> {
    message
        .properties
        .as_ref()
        .and_then(|p| p.message_id.as_ref())
        .map(message_id_text)
}

/// A message's properties as a filter sees them.
struct Subject<'a>(&'a AmqpMessage);

fn simple_to_sql(value: &SimpleValue) -> SqlValue {
    match value {
        SimpleValue::Null => SqlValue::Null,
        SimpleValue::Bool(value) => SqlValue::Bool(*value),
        SimpleValue::Ubyte(value) => SqlValue::Int(i64::from(*value)),
        SimpleValue::Ushort(value) => SqlValue::Int(i64::from(*value)),
        SimpleValue::Uint(value) => SqlValue::Int(i64::from(*value)),
        SimpleValue::Ulong(value) => i64::try_from(*value).map_or(SqlValue::Float(*value as f64), SqlValue::Int),
        SimpleValue::Byte(value) => SqlValue::Int(i64::from(*value)),
        SimpleValue::Short(value) => SqlValue::Int(i64::from(*value)),
        SimpleValue::Int(value) => SqlValue::Int(i64::from(*value)),
        SimpleValue::Long(value) => SqlValue::Int(*value),
        SimpleValue::Float(value) => SqlValue::Float(f64::from(value.into_inner())),
        SimpleValue::Double(value) => SqlValue::Float(value.into_inner()),
        SimpleValue::String(value) => SqlValue::String(value.clone()),
        SimpleValue::Symbol(value) => SqlValue::String(value.0.clone()),
        other => SqlValue::String(format!("{other:?}")),
    }
}

impl FilterSubject for Subject<'_> {
    fn system(&self, name: &str) -> Option<SqlValue> {
        let properties = self.0.properties.as_ref()?;
        let text = |value: &Option<String>| value.clone().map(SqlValue::String);
        let id = |value: &Option<MessageId>| value.as_ref().map(|id| SqlValue::String(message_id_text(id)));
        match name.to_ascii_lowercase().as_str() {
            "label" => text(&properties.subject),
            "messageid" => id(&properties.message_id),
            "correlationid" => id(&properties.correlation_id),
            "to" => text(&properties.to),
            "replyto" => text(&properties.reply_to),
            "contenttype" => properties
                .content_type
                .as_ref()
                .map(|symbol| SqlValue::String(symbol.0.clone())),
            "sessionid" => text(&properties.group_id),
            "replytosessionid" => text(&properties.reply_to_group_id),
            _ => None,
        }
    }

    fn user(&self, name: &str) -> Option<SqlValue> {
        self.0.application_properties.as_ref()?.0.get(name).map(simple_to_sql)
    }
}

#[cfg(test)]
mod tests;
