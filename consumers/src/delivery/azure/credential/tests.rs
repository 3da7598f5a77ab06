//! Tests of `consumers/src/delivery/azure/credential.rs`: what a
//! [`RefreshingToken`] does when a service refuses its token.

use std::sync::Mutex;

use super::*;

const SCOPE: &str = "https://management.azure.com/.default";

/// A credential that caches its one token for an hour, as
/// `azure_identity`'s credentials do: asked again, it gives the same token.
#[derive(Debug)]
struct CachingCredential {
    token: String,
}

#[async_trait]
impl TokenCredential for CachingCredential {
    async fn get_token(
        &self,
        scopes: &[&str],
        _options: Option<TokenRequestOptions<'_>>,
    ) -> azure_core::Result<AccessToken> {
        assert_eq!(scopes, [SCOPE]);
        Ok(AccessToken::new(
            self.token.clone(),
            time::OffsetDateTime::now_utc() + time::Duration::hours(1),
        ))
    }
}

/// A source whose credential is made again after a refusal: the n-th
/// credential made gives `token-n`. Also returns how many were made.
fn rebuilding() -> (RefreshingToken, Arc<AtomicUsize>) {
    let made = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&made);
    let tokens = RefreshingToken::rebuilding(
        move || {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(Arc::new(CachingCredential {
                token: format!("token-{n}"),
            }) as Arc<dyn TokenCredential>)
        },
        SCOPE,
    )
    .unwrap();
    (tokens, made)
}

/// A service that refuses the tokens in `refused` (401) and answers 200
/// to the others; it records every token it was sent.
struct Service {
    refused: Vec<&'static str>,
    seen: Mutex<Vec<String>>,
    /// When set, a refusal is answered only once this many requests wait
    /// for theirs: they were all sent before any heard the answer.
    refusals_together: Option<tokio::sync::Barrier>,
}

impl Service {
    fn refusing(refused: &[&'static str]) -> Self {
        Self {
            refused: refused.to_vec(),
            seen: Mutex::default(),
            refusals_together: None,
        }
    }

    async fn call(&self, token: String) -> Result<u16, CredentialError> {
        let refused = self.refused.contains(&token.as_str());
        self.seen.lock().unwrap().push(token);
        if let (true, Some(barrier)) = (refused, &self.refusals_together) {
            barrier.wait().await;
        }
        Ok(if refused { 401 } else { 200 })
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn a_token_is_cached_and_the_credential_made_once_while_nothing_is_refused() {
    let (tokens, made) = rebuilding();
    assert_eq!(tokens.token().await.unwrap(), "token-1");
    assert_eq!(tokens.token().await.unwrap(), "token-1");
    assert_eq!(made.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn invalidating_the_cached_token_makes_the_credential_again_and_fetches_a_new_one() {
    let (tokens, made) = rebuilding();
    let first = tokens.token().await.unwrap();
    assert!(tokens.invalidate(&first).await, "the refused token was the cached one");
    assert_eq!(
        tokens.token().await.unwrap(),
        "token-2",
        "not the old credential's cached token"
    );
    assert_eq!(made.load(Ordering::SeqCst), 2);
    // The same refusal reported late (another request's) changes nothing.
    assert!(!tokens.invalidate(&first).await);
    assert_eq!(tokens.token().await.unwrap(), "token-2");
    assert_eq!(made.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_refused_token_is_replaced_and_the_request_sent_once_more() {
    let (tokens, made) = rebuilding();
    let service = Service::refusing(&["token-1"]);
    let answered = tokens
        .send_with_token(|token| service.call(token), |status| *status == 401)
        .await
        .unwrap();
    assert_eq!(answered.answer, 200);
    assert!(!answered.fresh_token_refused);
    assert_eq!(service.seen(), ["token-1", "token-2"]);
    assert_eq!(made.load(Ordering::SeqCst), 2);
    // The new token serves the next request.
    let answered = tokens
        .send_with_token(|token| service.call(token), |status| *status == 401)
        .await
        .unwrap();
    assert_eq!(answered.answer, 200);
    assert_eq!(service.seen(), ["token-1", "token-2", "token-2"]);
}

#[tokio::test]
async fn a_new_token_refused_too_is_reported_and_not_tried_a_third_time() {
    let (tokens, made) = rebuilding();
    let service = Service::refusing(&["token-1", "token-2", "token-3"]);
    let answered = tokens
        .send_with_token(|token| service.call(token), |status| *status == 401)
        .await
        .unwrap();
    assert_eq!(answered.answer, 401);
    assert!(answered.fresh_token_refused);
    assert_eq!(service.seen(), ["token-1", "token-2"], "sent twice, never three times");
    assert_eq!(made.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_answer_that_is_not_a_refusal_is_sent_once() {
    let (tokens, made) = rebuilding();
    let service = Service::refusing(&[]);
    let answered = tokens
        .send_with_token(|token| service.call(token), |status| *status == 401)
        .await
        .unwrap();
    assert_eq!(answered.answer, 200);
    assert_eq!(service.seen(), ["token-1"]);
    assert_eq!(made.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn concurrent_refusals_of_one_token_fetch_one_new_token() {
    let (tokens, made) = rebuilding();
    // Both requests leave with token-1 before either hears the refusal.
    let service = Service {
        refusals_together: Some(tokio::sync::Barrier::new(2)),
        ..Service::refusing(&["token-1"])
    };
    let send = || tokens.send_with_token(|token| service.call(token), |status| *status == 401);
    let (first, second) = tokio::join!(send(), send());
    assert_eq!(first.unwrap().answer, 200);
    assert_eq!(second.unwrap().answer, 200);
    assert_eq!(
        made.load(Ordering::SeqCst),
        2,
        "one new credential, not one per request"
    );
    let mut seen = service.seen();
    seen.sort();
    assert_eq!(seen, ["token-1", "token-1", "token-2", "token-2"]);
}

#[tokio::test]
async fn a_credential_that_cannot_be_made_again_is_a_credential_error() {
    let made = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&made);
    let tokens = RefreshingToken::rebuilding(
        move || match counter.fetch_add(1, Ordering::SeqCst) {
            0 => Ok(Arc::new(CachingCredential {
                token: "token-1".to_owned(),
            }) as Arc<dyn TokenCredential>),
            _ => Err(CredentialError("workload identity: no token file".to_owned())),
        },
        SCOPE,
    )
    .unwrap();
    let service = Service::refusing(&["token-1"]);
    let err = tokens
        .send_with_token(|token| service.call(token), |status| *status == 401)
        .await
        .unwrap_err();
    assert!(err.0.contains("after a refused token"), "{err}");
    assert!(err.0.contains("no token file"), "{err}");
    assert_eq!(service.seen(), ["token-1"], "the refused token is not sent again");
}

#[tokio::test]
async fn a_fixed_credential_is_asked_again_after_a_refusal() {
    let credential: Arc<dyn TokenCredential> = Arc::new(CachingCredential {
        token: "fixed".to_owned(),
    });
    let tokens = RefreshingToken::new(Arc::clone(&credential), SCOPE);
    assert_eq!(tokens, RefreshingToken::new(credential, SCOPE));
    let service = Service::refusing(&["fixed"]);
    let answered = tokens
        .send_with_token(|token| service.call(token), |status| *status == 401)
        .await
        .unwrap();
    assert!(answered.fresh_token_refused, "its cache gave the refused token back");
    assert_eq!(service.seen(), ["fixed", "fixed"]);
}

#[test]
fn debug_output_never_shows_a_token() {
    let (tokens, _) = rebuilding();
    let shown = format!("{tokens:?}");
    assert!(shown.contains(SCOPE), "{shown}");
    assert!(!shown.contains("token-"), "{shown}");
}
