//! Microsoft Entra authentication to Azure Database for PostgreSQL: the
//! password of each new connection is an Entra ID access token for
//! [`OSSRDBMS_SCOPE`], issued to the identity the URL's user names.
//!
//! sqlx reads the pool's connect options afresh for every connection it
//! opens, and lets them be replaced (`Pool::set_connect_options`); it has
//! no hook that could change the password of one connection. So the token
//! goes into the connect options before the pool opens its first
//! connection, and a task ([`TokenRefresh`]) puts a new one there ahead of
//! the old one's expiry: [`REFRESH_BEFORE_EXPIRY`] before it, when
//! [`RefreshingToken`] (the cache every Azure client of bosun uses) stops
//! handing out the cached token. Every new connection therefore signs in
//! with a token valid for minutes at least. Connections already open keep
//! working when their token expires: the server checks it only at sign-in.
//!
//! If a renewal fails (Entra unreachable), the task tries again after a
//! back-off while the current token still serves; once it has expired,
//! new connections are refused by the server, which the store and the
//! transport see as an unavailable database and retry.
//!
//! Tokens are never logged: the connect options that hold one are never
//! printed, and [`crate::backends::postgres::PostgresDatabase`]'s `Debug`
//! shows only the pool's size.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use bosun_consumers::delivery::azure::credential::{
    CredentialError, REFRESH_BEFORE_EXPIRY, RefreshingToken, TokenCredential,
};
use sqlx_postgres::{PgConnectOptions, PgPool};
use time::OffsetDateTime;

use super::DatabaseError;

/// The Entra ID scope of Azure Database for PostgreSQL (and MySQL): tokens
/// for it are what the server takes as passwords.
pub const OSSRDBMS_SCOPE: &str = "https://ossrdbms-aad.database.windows.net/.default";

/// The first wait after a failed renewal; it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(5);
/// The longest wait between two renewal attempts.
const RETRY_MAX: Duration = Duration::from_secs(60);
/// The least time between two renewals.
const MIN_WAIT: Duration = Duration::from_secs(1);

/// Where the password of bosun's PostgreSQL connections comes from.
#[derive(Clone, Default)]
pub enum PasswordSource {
    /// The URL's own (`postgres://user:password@host/db`), or none (the
    /// server trusts the client, or `PGPASSWORD`/`.pgpass` give it).
    #[default]
    Url,
    /// Entra ID access tokens from this credential, for the user the URL
    /// names (the server's name for the Entra principal); the URL then
    /// holds no password.
    EntraId(Arc<dyn TokenCredential>),
}

impl std::fmt::Debug for PasswordSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Url => f.write_str("Url"),
            Self::EntraId(_) => f.write_str("EntraId(..)"),
        }
    }
}

/// Why a URL cannot be used with Entra ID tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EntraUrlProblem {
    /// It is not a URL.
    #[error("it is not a URL")]
    Unparsable,
    /// It holds a password (`user:password@` or `?password=`), which a
    /// token would silently replace.
    #[error("it holds a password, and with Entra ID the password is an access token: remove it from the URL")]
    Password,
    /// It names no user: the server needs the Entra principal's name.
    #[error("it names no user: give the name of the Entra principal (postgres://NAME@HOST/DATABASE)")]
    NoUser,
}

/// Checks that `url` suits Entra ID sign-in: it names a user and holds no
/// password. The URL itself never appears in the answer.
pub fn check_entra_url(url: &str) -> Result<(), EntraUrlProblem> {
    let parsed = sqlx_core::Url::parse(url).map_err(|_| EntraUrlProblem::Unparsable)?;
    let query = |key: &str| parsed.query_pairs().any(|(name, _)| name == key);
    if parsed.password().is_some() || query("password") {
        return Err(EntraUrlProblem::Password);
    }
    if parsed.username().is_empty() && !query("user") {
        return Err(EntraUrlProblem::NoUser);
    }
    Ok(())
}

/// The connect options of `url` for `source`: as parsed for
/// [`PasswordSource::Url`]; checked by [`check_entra_url`] and with a
/// first token as password for [`PasswordSource::EntraId`], with the
/// token source and the token's expiry.
pub(super) async fn connect_options(
    url: &str,
    source: &PasswordSource,
) -> Result<(PgConnectOptions, Option<(Arc<RefreshingToken>, OffsetDateTime)>), DatabaseError> {
    let options = PgConnectOptions::from_str(url).map_err(DatabaseError::InvalidUrl)?;
    let PasswordSource::EntraId(credential) = source else {
        return Ok((options, None));
    };
    check_entra_url(url).map_err(DatabaseError::EntraUrl)?;
    let tokens = Arc::new(RefreshingToken::new(credential.clone(), OSSRDBMS_SCOPE));
    let (token, expires_on) = tokens.token_until().await.map_err(DatabaseError::Token)?;
    Ok((options.password(&token), Some((tokens, expires_on))))
}

/// The task that keeps a token valid for minutes in the pool's connect
/// options; it stops when this is dropped (with the last
/// `PostgresDatabase` of its pool) or when the pool closes.
pub(super) struct TokenRefresh {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TokenRefresh {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TokenRefresh {
    /// Starts renewing the token of `pool`'s connect options (`options`
    /// with the token as password), whose current token expires at
    /// `expires_on`.
    pub(super) fn start(
        pool: PgPool,
        options: PgConnectOptions,
        tokens: Arc<RefreshingToken>,
        expires_on: OffsetDateTime,
    ) -> Self {
        let task = tokio::spawn(async move {
            let mut wait = wait_before_renewal(expires_on, OffsetDateTime::now_utc());
            let mut retry = RETRY_FIRST;
            loop {
                tokio::select! {
                    () = pool.close_event() => return,
                    () = tokio::time::sleep(wait) => {}
                }
                match tokens.token_until().await {
                    Ok((token, expires_on)) => {
                        pool.set_connect_options(options.clone().password(&token));
                        tracing::debug!(%expires_on, "new PostgreSQL connections sign in with a new Entra ID token");
                        wait = wait_before_renewal(expires_on, OffsetDateTime::now_utc());
                        retry = RETRY_FIRST;
                    }
                    Err(err) => {
                        warn_renewal_failed(&err, retry);
                        wait = retry;
                        retry = (retry * 2).min(RETRY_MAX);
                    }
                }
            }
        });
        Self { task }
    }
}

fn warn_renewal_failed(err: &CredentialError, retry: Duration) {
    tracing::warn!(
        error = %err,
        retry_in_secs = retry.as_secs(),
        "could not renew the Entra ID token of new PostgreSQL connections; open connections keep working, \
         new ones sign in with the current token until it expires; trying again"
    );
}

/// How long to wait before renewing a token that expires at `expires_on`:
/// until just after it comes within [`REFRESH_BEFORE_EXPIRY`] of its expiry
/// (when [`RefreshingToken`] fetches a new one), at least [`MIN_WAIT`].
/// A token that lives less than that margin is renewed halfway through
/// what is left of it.
fn wait_before_renewal(expires_on: OffsetDateTime, now: OffsetDateTime) -> Duration {
    let left = expires_on - now;
    let until_margin = left - REFRESH_BEFORE_EXPIRY + time::Duration::SECOND;
    let wait = if until_margin.is_positive() {
        until_margin
    } else {
        left / 2
    };
    Duration::try_from(wait).unwrap_or_default().max(MIN_WAIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_for_entra_name_a_user_and_hold_no_password() {
        assert_eq!(
            check_entra_url("postgres://bosun-database@db.example.com/bosun?sslmode=require"),
            Ok(())
        );
        assert_eq!(
            check_entra_url("postgres://db.example.com/bosun?user=bosun-database"),
            Ok(())
        );
        assert_eq!(
            check_entra_url("postgres://bosun:s3cret@db.example.com/bosun"),
            Err(EntraUrlProblem::Password)
        );
        assert_eq!(
            check_entra_url("postgres://bosun@db.example.com/bosun?password=s3cret"),
            Err(EntraUrlProblem::Password)
        );
        assert_eq!(
            check_entra_url("postgres://db.example.com/bosun"),
            Err(EntraUrlProblem::NoUser)
        );
        assert_eq!(check_entra_url("not a url"), Err(EntraUrlProblem::Unparsable));
        let problem = check_entra_url("postgres://bosun:s3cret@db/bosun")
            .unwrap_err()
            .to_string();
        assert!(!problem.contains("s3cret"), "{problem}");
    }

    #[test]
    fn renews_just_inside_the_refresh_margin_and_never_in_a_busy_loop() {
        let now = OffsetDateTime::now_utc();
        let hour = wait_before_renewal(now + time::Duration::HOUR, now);
        assert_eq!(
            hour,
            Duration::from_secs(3600) - REFRESH_BEFORE_EXPIRY + Duration::from_secs(1)
        );
        let short = wait_before_renewal(now + time::Duration::seconds(60), now);
        assert_eq!(short, Duration::from_secs(30));
        assert_eq!(wait_before_renewal(now - time::Duration::MINUTE, now), MIN_WAIT);
    }
}
