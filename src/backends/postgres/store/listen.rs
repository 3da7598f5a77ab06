//! Timeline wake-ups across processes: every transaction that inserts
//! timeline lines sends `NOTIFY bosun_timeline, '<correlation id>'` (in the
//! insert statement itself, `timeline::insert_timeline`), delivered when it
//! commits; one LISTEN task per store feeds them into its
//! [`TimelineWatch`], so a wait in any process is woken by a write in any
//! other. The task starts with the first wait; after every (re)connection
//! it wakes every wait, since notifications sent meanwhile are lost.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sqlx_postgres::PgPool;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::backends::postgres::listen::{Listener, listen};
use crate::ports::store::{StoreError, TimelineWatch};

/// The channel timeline writes notify, the correlation id as payload.
pub const TIMELINE_CHANNEL: &str = crate::backends::postgres::notify::TIMELINE_CHANNEL;

/// How long a timeline wait lasts when no notification woke it, by default:
/// notifications reach every process, so this only bounds what a lost one
/// (a LISTEN connection that dropped) costs.
pub const LISTENING_FALLBACK: Duration = Duration::from_secs(2);

/// Where the LISTEN task is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Connecting,
    Listening,
    Failed(String),
}

/// A store's timeline watch and the LISTEN task feeding it.
#[derive(Debug)]
pub(super) struct TimelineListener {
    pub(super) watch: Arc<TimelineWatch>,
    state: watch::Sender<State>,
    stop: Mutex<Option<CancellationToken>>,
}

impl TimelineListener {
    pub(super) fn new(fallback: Duration) -> Arc<Self> {
        Arc::new(Self {
            watch: TimelineWatch::new(fallback),
            state: watch::Sender::new(State::Connecting),
            stop: Mutex::new(None),
        })
    }

    /// Starts the LISTEN task unless it runs (it needs a Tokio runtime).
    pub(super) fn start(self: &Arc<Self>, pool: &PgPool) {
        let mut stop = self.stop.lock().unwrap_or_else(PoisonError::into_inner);
        if stop.is_none() && tokio::runtime::Handle::try_current().is_ok() {
            let token = CancellationToken::new();
            tokio::spawn(listen(
                pool.clone(),
                TIMELINE_CHANNEL,
                Arc::downgrade(self),
                token.clone(),
            ));
            *stop = Some(token);
        }
    }

    /// Starts the task and waits until it listens.
    pub(super) async fn listening(self: &Arc<Self>, pool: &PgPool) -> Result<(), StoreError> {
        self.start(pool);
        let mut state = self.state.subscribe();
        loop {
            if let State::Failed(reason) = &*state.borrow_and_update() {
                return Err(StoreError::unavailable(
                    format!("listening on `{TIMELINE_CHANNEL}`"),
                    reason.clone(),
                ));
            }
            if *state.borrow() == State::Listening {
                return Ok(());
            }
            if state.changed().await.is_err() {
                return Err(StoreError::unavailable(
                    format!("listening on `{TIMELINE_CHANNEL}`"),
                    "the LISTEN task stopped",
                ));
            }
        }
    }
}

impl Drop for TimelineListener {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.get_mut().unwrap_or_else(PoisonError::into_inner).take() {
            stop.cancel();
        }
    }
}

/// The LISTEN task's side: wakes the waits of each notified delivery, and
/// every wait after a (re)connection.
impl Listener for TimelineListener {
    const CANNOT_LISTEN: &'static str = "cannot LISTEN for timeline changes; waits poll meanwhile";
    const CONNECTION_FAILED: &'static str = "timeline LISTEN connection failed; reconnecting";

    fn listening(&self) {
        self.state.send_replace(State::Listening);
    }

    fn failed(&self, why: String) {
        self.state.send_replace(State::Failed(why));
    }

    fn connecting(&self) {
        self.state.send_replace(State::Connecting);
    }

    fn notified(&self, payload: &str) {
        self.watch.notify(payload);
    }

    fn missed(&self) {
        self.watch.notify_all();
    }
}
