//! The one retry policy of every Azure call (Azure DevOps, Azure Artifacts,
//! Azure Container Registry, Argo CD, Blob Storage): what an answer or a
//! failed request means for the runtime.
//!
//! - an HTTP status of 408, 409 or 429, or any 5xx, is worth retrying: with
//!   the answer's `Retry-After` it is [`Disposition::RetryAfter`] that
//!   delay, without it [`Disposition::Transient`] (the consumer's backoff);
//! - any other status that reaches an error (401, 403, 404 where a missing
//!   resource is an error, other 4xx, the 203 sign-in page Azure DevOps
//!   serves for a bad token) is [`Disposition::Permanent`]. A 401 to an
//!   Entra ID token still valid by its expiry reaches this only after the
//!   adapter sent once more with a new token
//!   ([`super::credential::RefreshingToken::send_with_token`]): a wrong
//!   identity is not retried, a revoked token is not dead-lettered;
//! - a request that got no answer (connection refused, timeout) is
//!   transient, unless it could not even be built (a bad URL or header),
//!   which is permanent;
//! - `Retry-After` is read by [`parse_retry_after`]: delay-seconds or an
//!   HTTP date, clamped to 1 s ..= [`MAX_RETRY_AFTER`].
//!
//! Each adapter's error enum keeps its own variants; it maps them from a
//! [`Disposition`], so every adapter makes the same decision for the same
//! answer.

use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};

use crate::{BoxError, HandlerError};

/// Longest `Retry-After` honoured; a longer one is capped.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Shortest `Retry-After` honoured (`0`, or a date in the past, waits this
/// long).
pub const MIN_RETRY_AFTER: Duration = Duration::from_secs(1);

/// What the runtime should do about a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Retry with the consumer's backoff.
    Transient,
    /// Retrying cannot help: dead-letter.
    Permanent,
    /// Retry no sooner than this.
    RetryAfter(Duration),
}

impl Disposition {
    /// The disposition of an answer with an error `status`, and its
    /// `Retry-After` delay when it had one.
    pub fn of_status(status: u16, retry_after: Option<Duration>) -> Self {
        match (is_retryable_status(status), retry_after) {
            (true, Some(after)) => Self::RetryAfter(after),
            (true, None) => Self::Transient,
            (false, _) => Self::Permanent,
        }
    }

    /// The disposition of a request that got no answer: permanent when it
    /// could not be built, transient otherwise.
    pub fn of_transport(err: &reqwest::Error) -> Self {
        if err.is_builder() {
            Self::Permanent
        } else {
            Self::Transient
        }
    }

    /// Whether retrying may help.
    pub fn is_retryable(self) -> bool {
        !matches!(self, Self::Permanent)
    }

    /// The runtime's verdict for an error of this disposition.
    pub fn handler_error(self, source: BoxError) -> HandlerError {
        match self {
            Self::Transient => HandlerError::Transient(source),
            Self::Permanent => HandlerError::Permanent(source),
            Self::RetryAfter(after) => HandlerError::RetryAfter { after, source },
        }
    }
}

/// Whether an error status is worth retrying: 408 (timeout), 409 (a
/// concurrent change), 429 (throttled) and every 5xx.
pub fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || status >= 500
}

/// The `Retry-After` delay of an answer's headers, when it has a readable
/// one.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(parse_retry_after)
}

/// A `Retry-After` value: delay-seconds or an HTTP date (RFC 2822, as
/// HTTP dates are), clamped to [`MIN_RETRY_AFTER`] ..= [`MAX_RETRY_AFTER`].
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    let delay = if let Ok(seconds) = value.parse::<u64>() {
        Duration::from_secs(seconds)
    } else {
        let at = time::OffsetDateTime::parse(value, &time::format_description::well_known::Rfc2822).ok()?;
        let seconds = (at - time::OffsetDateTime::now_utc()).whole_seconds().max(0);
        Duration::from_secs(u64::try_from(seconds).unwrap_or_default())
    };
    Some(delay.clamp(MIN_RETRY_AFTER, MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after(" 12 "), Some(Duration::from_secs(12)));
        assert_eq!(parse_retry_after("0"), Some(Duration::from_secs(1)));
        assert_eq!(parse_retry_after("86400"), Some(MAX_RETRY_AFTER));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::from_secs(1))
        );
        let soon = (time::OffsetDateTime::now_utc() + time::Duration::seconds(120))
            .format(&time::format_description::well_known::Rfc2822)
            .unwrap();
        let delay = parse_retry_after(&soon).unwrap();
        assert!(
            delay > Duration::from_secs(100) && delay <= Duration::from_secs(120),
            "{delay:?}"
        );
        assert_eq!(parse_retry_after("soon"), None);
        assert_eq!(parse_retry_after("-5"), None);
    }

    #[test]
    fn statuses_are_classified_once() {
        let after = Some(Duration::from_secs(30));
        for status in [408, 409, 429, 500, 502, 503, 504] {
            assert_eq!(Disposition::of_status(status, None), Disposition::Transient, "{status}");
            assert_eq!(
                Disposition::of_status(status, after),
                Disposition::RetryAfter(Duration::from_secs(30)),
                "{status}"
            );
        }
        for status in [203, 400, 401, 403, 404, 405, 410, 412, 422] {
            assert_eq!(
                Disposition::of_status(status, after),
                Disposition::Permanent,
                "{status}"
            );
        }
    }

    #[test]
    fn dispositions_give_the_handler_verdict() {
        let source = || -> BoxError { "x".into() };
        assert!(matches!(
            Disposition::Transient.handler_error(source()),
            HandlerError::Transient(_)
        ));
        assert!(matches!(
            Disposition::Permanent.handler_error(source()),
            HandlerError::Permanent(_)
        ));
        assert!(matches!(
            Disposition::RetryAfter(Duration::from_secs(3)).handler_error(source()),
            HandlerError::RetryAfter { after, .. } if after == Duration::from_secs(3)
        ));
    }

    #[test]
    fn headers_without_a_readable_retry_after_have_none() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(RETRY_AFTER, reqwest::header::HeaderValue::from_static("9"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(9)));
    }
}
