//! The Azure building blocks every `azure` adapter uses:
//!
//! - [`http`] — the one way an HTTP client is built (user agent, timeouts,
//!   redirects);
//! - [`retry`] — the one retry policy: the `Retry-After` parser and the
//!   classification of an answer into transient, permanent or retry-after
//!   ([`retry::Disposition`]);
//! - [`credential`] — Microsoft Entra ID credentials (the blob store and
//!   the Service Bus transport take tokens from them);
//! - [`devops`] — the Azure DevOps REST client (repositories, pushes, pull
//!   requests, pipelines, builds) and its tenant-to-project mapping.

pub mod credential;
pub mod devops;
pub mod http;
pub mod retry;

#[cfg(test)]
pub(crate) mod test_server;

/// An error and its sources on one line.
pub(crate) fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(next) = source {
        let text = next.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = next.source();
    }
    message
}
