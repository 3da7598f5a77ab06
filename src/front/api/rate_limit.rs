//! Per-key request budgets: one token bucket per API key, checked right
//! after the key is authenticated (so only real keys get a bucket).
//!
//! A bucket holds up to `burst` tokens and refills at `per_second`; every
//! request takes one. An empty bucket refuses with the time until the next
//! token, rounded up to whole seconds (at least 1), which the API sends as
//! `Retry-After` with a 429. Keys do not share buckets, so one busy key
//! never slows another.
//!
//! Memory stays bounded: a bucket that has refilled completely is the same
//! as no bucket, so such buckets are dropped by a sweep that runs at most
//! once per refill period (`burst / per_second`, at least a second). What
//! remains is one small entry per key that made a request within roughly
//! the last two refill periods, and only authenticated keys get one.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A refusal: the key has spent its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("over the request budget: retry in {} s", retry_after.as_secs())]
pub struct OverBudget {
    /// When to retry: whole seconds, at least one.
    pub retry_after: Duration,
}

/// The budget: `per_second` sustained, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Budget {
    per_second: f64,
    burst: f64,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

#[derive(Debug)]
struct Buckets {
    by_key: HashMap<String, Bucket>,
    last_sweep: Instant,
}

/// Token buckets by key id.
#[derive(Debug)]
pub struct RateLimiter {
    budget: Option<Budget>,
    buckets: Mutex<Buckets>,
}

impl RateLimiter {
    /// A limiter giving each key `per_second` requests per second and
    /// `burst` at once; `per_second == 0` turns it off. A `burst` of 0 is
    /// taken as 1.
    pub fn new(per_second: u32, burst: u32) -> Self {
        Self {
            budget: (per_second > 0).then(|| Budget {
                per_second: f64::from(per_second),
                burst: f64::from(burst.max(1)),
            }),
            buckets: Mutex::new(Buckets {
                by_key: HashMap::new(),
                last_sweep: Instant::now(),
            }),
        }
    }

    /// Takes one request from `key`'s budget now.
    pub fn check(&self, key: &str) -> Result<(), OverBudget> {
        self.check_at(key, Instant::now())
    }

    /// Takes one request from `key`'s budget at `now` (tests pass the time).
    pub fn check_at(&self, key: &str, now: Instant) -> Result<(), OverBudget> {
        let Some(budget) = self.budget else {
            return Ok(());
        };
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let refill_period = Duration::from_secs_f64(budget.burst / budget.per_second).max(Duration::from_secs(1));
        if now.saturating_duration_since(buckets.last_sweep) >= refill_period {
            buckets
                .by_key
                .retain(|_, bucket| refilled(bucket, budget, now) < budget.burst);
            buckets.last_sweep = now;
        }
        let bucket = match buckets.by_key.get_mut(key) {
            Some(bucket) => bucket,
            None => buckets.by_key.entry(key.to_owned()).or_insert(Bucket {
                tokens: budget.burst,
                updated: now,
            }),
        };
        bucket.tokens = refilled(bucket, budget, now);
        bucket.updated = bucket.updated.max(now);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let wait = (1.0 - bucket.tokens) / budget.per_second;
        Err(OverBudget {
            retry_after: Duration::from_secs((wait.ceil() as u64).max(1)),
        })
    }

    /// How many keys hold a bucket now.
    pub fn tracked_keys(&self) -> usize {
        self.buckets.lock().unwrap_or_else(PoisonError::into_inner).by_key.len()
    }
}

/// The bucket's tokens at `now`.
fn refilled(bucket: &Bucket, budget: Budget, now: Instant) -> f64 {
    let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
    (bucket.tokens + elapsed * budget.per_second).min(budget.burst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_allowed_then_refused_with_retry_after() {
        let limiter = RateLimiter::new(2, 5);
        let start = Instant::now();
        for n in 0..5 {
            assert_eq!(limiter.check_at("a", start), Ok(()), "request {n}");
        }
        let refused = limiter.check_at("a", start).unwrap_err();
        assert_eq!(refused.retry_after, Duration::from_secs(1));
        // Half a second later one token (at 2 per second) is back.
        assert_eq!(limiter.check_at("a", start + Duration::from_millis(500)), Ok(()));
        assert!(limiter.check_at("a", start + Duration::from_millis(500)).is_err());
    }

    #[test]
    fn retry_after_is_whole_seconds_and_at_least_one() {
        let start = Instant::now();
        // One request per second, burst 1: 0.9 s short of a token rounds up to 1 s.
        let slow = RateLimiter::new(1, 1);
        assert_eq!(slow.check_at("k", start), Ok(()));
        assert_eq!(
            slow.check_at("k", start + Duration::from_millis(100))
                .unwrap_err()
                .retry_after,
            Duration::from_secs(1)
        );
        // A millisecond short of a token still says 1 s, never 0.
        let fast = RateLimiter::new(1000, 1);
        assert_eq!(fast.check_at("k", start), Ok(()));
        assert_eq!(
            fast.check_at("k", start).unwrap_err().retry_after,
            Duration::from_secs(1)
        );
    }

    #[test]
    fn keys_do_not_share_a_budget() {
        let limiter = RateLimiter::new(1, 2);
        let now = Instant::now();
        assert!(limiter.check_at("busy", now).is_ok());
        assert!(limiter.check_at("busy", now).is_ok());
        assert!(limiter.check_at("busy", now).is_err());
        assert!(limiter.check_at("quiet", now).is_ok());
        assert!(limiter.check_at("quiet", now).is_ok());
    }

    #[test]
    fn zero_per_second_is_off() {
        let limiter = RateLimiter::new(0, 1);
        let now = Instant::now();
        for _ in 0..10_000 {
            assert!(limiter.check_at("k", now).is_ok());
        }
        assert_eq!(limiter.tracked_keys(), 0);
    }

    #[test]
    fn buckets_of_quiet_keys_are_dropped() {
        let limiter = RateLimiter::new(10, 20);
        let start = Instant::now();
        for key in 0..1000 {
            assert!(limiter.check_at(&format!("key-{key}"), start).is_ok());
        }
        assert_eq!(limiter.tracked_keys(), 1000);
        // After a refill period (2 s) every one of them is full again: the
        // next check sweeps them and only the active key remains.
        let later = start + Duration::from_secs(3);
        assert!(limiter.check_at("active", later).is_ok());
        assert_eq!(limiter.tracked_keys(), 1);
        for _ in 0..19 {
            assert!(limiter.check_at("active", later).is_ok());
        }
        assert!(limiter.check_at("active", later).is_err());
        let sweep = later + Duration::from_millis(2100);
        assert!(limiter.check_at("other", sweep).is_ok());
        assert_eq!(limiter.tracked_keys(), 1, "`active` was full again and swept");
    }

    #[test]
    fn a_key_still_recovering_keeps_its_bucket() {
        // Swept while not yet full, a key would get a fresh burst.
        let limiter = RateLimiter::new(1, 10);
        let t0 = Instant::now();
        for _ in 0..10 {
            assert!(limiter.check_at("drained", t0 + Duration::from_secs(9)).is_ok());
        }
        // The sweep at 10.5 s finds `drained` at 1.5 of 10 tokens: kept.
        assert!(limiter.check_at("other", t0 + Duration::from_millis(10_500)).is_ok());
        assert_eq!(limiter.tracked_keys(), 2);
        assert!(limiter.check_at("drained", t0 + Duration::from_millis(10_500)).is_ok());
        assert!(limiter.check_at("drained", t0 + Duration::from_millis(10_500)).is_err());
    }
}
