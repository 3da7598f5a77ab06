//! An HTTP check's sample: `GET` the URL within the check's
//! `timeoutSeconds`, redirects not followed; a 2xx passes, anything else
//! fails. The answer's body is never read, so it never reaches a detail.

use std::time::Duration;

use bosun_sagas::release::HttpCheck;

use super::adapter::{Sample, failure, shown, tenant_url};
use crate::delivery::azure::http;

/// The timeouts a check may ask for, in seconds (as the policy allows).
const TIMEOUT_SECONDS: std::ops::RangeInclusive<u64> = 1..=60;

/// One sample of `check` with `client`.
pub(super) async fn sample(client: &reqwest::Client, check: &HttpCheck) -> Sample {
    let url = match tenant_url(&check.url) {
        Ok(url) => url,
        Err(refused) => return Sample::fail(refused),
    };
    let target = shown(&url);
    let timeout = Duration::from_secs(
        check
            .timeout_seconds
            .clamp(*TIMEOUT_SECONDS.start(), *TIMEOUT_SECONDS.end()),
    );
    match http::send(client.get(url).timeout(timeout)).await {
        Ok(response) => {
            let status = response.status();
            // The body is not read: the connection closes with the answer.
            drop(response);
            if status.is_success() {
                Sample::pass(format!("GET {target} answered {status}"))
            } else if status.is_redirection() {
                Sample::fail(format!(
                    "GET {target} answered {status}; redirects are not followed (name the final URL in the check)"
                ))
            } else {
                Sample::fail(format!("GET {target} answered {status}"))
            }
        }
        Err(err) => Sample::fail(format!("GET {target} failed: {}", failure(&err, timeout))),
    }
}
