//! Per-key request budgets, checked right after the key is authenticated
//! (so only real keys get a budget), by `governor`'s keyed GCRA limiter.
//!
//! GCRA is a token bucket kept as one timestamp per key: a key may make
//! `burst` requests at once and then `per_second` a second; every request
//! takes one. A refused request gets the time until the next one would be
//! allowed, rounded up to whole seconds (at least 1), which the API sends
//! as `Retry-After` with a 429. Keys do not share budgets, so one busy key
//! never slows another.
//!
//! Memory stays bounded: a key whose budget is full again is the same as
//! an unknown key, so such keys are dropped (`retain_recent`) by a sweep
//! that runs at most once per refill period (`burst / per_second`, at least
//! a second). What remains is one small entry per key that made a request
//! within roughly the last two refill periods, and only authenticated keys
//! get one.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::HashMapStateStore;
use governor::{NotUntil, Quota};

/// A refusal: the key has spent its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("over the request budget: retry in {} s", retry_after.as_secs())]
pub struct OverBudget {
    /// When to retry: whole seconds, at least one.
    pub retry_after: Duration,
}

/// governor's limiter with one state per key id.
type KeyedLimiter<C> =
    governor::RateLimiter<String, HashMapStateStore<String>, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// Request budgets by key id, on `C`'s time (the monotonic clock; tests
/// pass a fake one).
pub struct RateLimiter<C: Clock = DefaultClock> {
    /// `None` when rate limiting is off.
    limit: Option<Limit<C>>,
}

struct Limit<C: Clock> {
    keys: KeyedLimiter<C>,
    /// How often keys whose budget is full again are dropped.
    sweep_every: Duration,
    last_sweep: Mutex<C::Instant>,
}

impl<C: Clock> fmt::Debug for RateLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("on", &self.limit.is_some())
            .field("tracked_keys", &self.tracked_keys())
            .finish()
    }
}

impl RateLimiter {
    /// A limiter giving each key `per_second` requests per second and
    /// `burst` at once; `per_second == 0` turns it off. A `burst` of 0 is
    /// taken as 1.
    pub fn new(per_second: u32, burst: u32) -> Self {
        Self::with_clock(per_second, burst, DefaultClock::default())
    }
}

impl<C: Clock> RateLimiter<C> {
    /// [`RateLimiter::new`] on the time of `clock`.
    pub fn with_clock(per_second: u32, burst: u32, clock: C) -> Self {
        let Some(per_second) = NonZeroU32::new(per_second) else {
            return Self { limit: None };
        };
        let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::per_second(per_second).allow_burst(burst);
        let sweep_every =
            Duration::from_secs_f64(f64::from(burst.get()) / f64::from(per_second.get())).max(Duration::from_secs(1));
        let last_sweep = Mutex::new(clock.now());
        Self {
            limit: Some(Limit {
                keys: governor::RateLimiter::hashmap_with_clock(quota, clock),
                sweep_every,
                last_sweep,
            }),
        }
    }

    /// Takes one request from `key`'s budget now.
    pub fn check(&self, key: &str) -> Result<(), OverBudget> {
        let Some(limit) = &self.limit else {
            return Ok(());
        };
        limit.sweep();
        limit
            .keys
            .check_key(&key.to_owned())
            .map_err(|refusal| limit.over_budget(&refusal))
    }

    /// How many keys hold a budget now.
    pub fn tracked_keys(&self) -> usize {
        self.limit.as_ref().map_or(0, |limit| limit.keys.len())
    }
}

impl<C: Clock> Limit<C> {
    /// Drops the keys whose budget is full again, at most once per refill
    /// period.
    fn sweep(&self) {
        let now = self.keys.clock().now();
        let mut last_sweep = self.last_sweep.lock().unwrap_or_else(PoisonError::into_inner);
        if Duration::from(now.duration_since(*last_sweep)) >= self.sweep_every {
            self.keys.retain_recent();
            self.keys.shrink_to_fit();
            *last_sweep = now;
        }
    }

    /// The refusal with the wait until the next allowed request, in whole
    /// seconds rounded up, at least one.
    fn over_budget(&self, refusal: &NotUntil<C::Instant>) -> OverBudget {
        let wait = refusal.wait_time_from(self.keys.clock().now());
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        OverBudget {
            retry_after: Duration::from_secs(seconds.max(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use governor::clock::FakeRelativeClock;

    use super::*;

    /// A limiter on a fake clock the test moves.
    fn limiter(per_second: u32, burst: u32) -> (RateLimiter<FakeRelativeClock>, FakeRelativeClock) {
        let clock = FakeRelativeClock::default();
        (RateLimiter::with_clock(per_second, burst, clock.clone()), clock)
    }

    #[test]
    fn a_burst_is_allowed_then_refused_with_retry_after() {
        let (limiter, clock) = limiter(2, 5);
        for n in 0..5 {
            assert_eq!(limiter.check("a"), Ok(()), "request {n}");
        }
        let refused = limiter.check("a").unwrap_err();
        assert_eq!(refused.retry_after, Duration::from_secs(1));
        // Half a second later one request (at 2 per second) is back.
        clock.advance(Duration::from_millis(500));
        assert_eq!(limiter.check("a"), Ok(()));
        assert!(limiter.check("a").is_err());
    }

    #[test]
    fn retry_after_is_whole_seconds_and_at_least_one() {
        // One request per second, burst 1: 0.9 s short of the next rounds up to 1 s.
        let (slow, clock) = limiter(1, 1);
        assert_eq!(slow.check("k"), Ok(()));
        clock.advance(Duration::from_millis(100));
        assert_eq!(slow.check("k").unwrap_err().retry_after, Duration::from_secs(1));
        // A millisecond short of the next still says 1 s, never 0.
        let (fast, _clock) = limiter(1000, 1);
        assert_eq!(fast.check("k"), Ok(()));
        assert_eq!(fast.check("k").unwrap_err().retry_after, Duration::from_secs(1));
    }

    #[test]
    fn keys_do_not_share_a_budget() {
        let (limiter, _clock) = limiter(1, 2);
        assert!(limiter.check("busy").is_ok());
        assert!(limiter.check("busy").is_ok());
        assert!(limiter.check("busy").is_err());
        assert!(limiter.check("quiet").is_ok());
        assert!(limiter.check("quiet").is_ok());
    }

    #[test]
    fn zero_per_second_is_off() {
        let (limiter, _clock) = limiter(0, 1);
        for _ in 0..10_000 {
            assert!(limiter.check("k").is_ok());
        }
        assert_eq!(limiter.tracked_keys(), 0);
    }

    #[test]
    fn a_zero_burst_is_one() {
        let (limiter, clock) = limiter(1, 0);
        assert!(limiter.check("k").is_ok());
        assert!(limiter.check("k").is_err());
        clock.advance(Duration::from_secs(1));
        assert!(limiter.check("k").is_ok());
    }

    #[test]
    fn budgets_of_quiet_keys_are_dropped() {
        let (limiter, clock) = limiter(10, 20);
        for key in 0..1000 {
            assert!(limiter.check(&format!("key-{key}")).is_ok());
        }
        assert_eq!(limiter.tracked_keys(), 1000);
        // After a refill period (2 s) every one of them is full again: the
        // next check sweeps them and only the active key remains.
        clock.advance(Duration::from_secs(3));
        assert!(limiter.check("active").is_ok());
        assert_eq!(limiter.tracked_keys(), 1);
        for _ in 0..19 {
            assert!(limiter.check("active").is_ok());
        }
        assert!(limiter.check("active").is_err());
        clock.advance(Duration::from_millis(2100));
        assert!(limiter.check("other").is_ok());
        assert_eq!(limiter.tracked_keys(), 1, "`active` was full again and swept");
    }

    #[test]
    fn a_key_still_recovering_keeps_its_budget() {
        // Swept while not yet full, a key would get a fresh burst.
        let (limiter, clock) = limiter(1, 10);
        clock.advance(Duration::from_secs(9));
        for _ in 0..10 {
            assert!(limiter.check("drained").is_ok());
        }
        // The sweep at 10.5 s finds `drained` at 1.5 of 10 requests: kept.
        clock.advance(Duration::from_millis(1500));
        assert!(limiter.check("other").is_ok());
        assert_eq!(limiter.tracked_keys(), 2);
        assert!(limiter.check("drained").is_ok());
        assert!(limiter.check("drained").is_err());
    }
}
