//! The blob store behaviour suite: what every `BlobStore` must do, run
//! against the filesystem store (`filesystem::*`, always) and against Azure
//! Blob Storage on a real Azurite with shared-key auth (`azurite::*`).
//!
//! The Azurite tests are ignored by a plain `cargo test` (reported as
//! ignored, never as passed): they need `BOSUN_TEST_AZURITE_URL` (and
//! `BOSUN_TEST_AZURITE_KEY`, `BOSUN_TEST_AZURITE_ACCOUNT`), which
//! `scripts/azurite run -- cargo test --test blob_behaviour -- --ignored`
//! sets; scripts/test runs them so. Run explicitly without Azurite, they
//! fail saying how to provide it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use bosun_consumers::delivery::blob::{
    AzureBlobAuth, AzureBlobSettings, AzureBlobStore, BlobError, BlobStore, FilesystemBlobStore, sha256_hex,
};

/// One store under test, with whatever keeps it alive.
struct Subject {
    name: &'static str,
    store: Arc<dyn BlobStore>,
    _dir: Option<tempfile::TempDir>,
}

/// The filesystem store on a fresh directory.
fn filesystem() -> Subject {
    let dir = tempfile::tempdir().unwrap();
    Subject {
        name: "filesystem",
        store: Arc::new(FilesystemBlobStore::new(dir.path())),
        _dir: Some(dir),
    }
}

/// The Blob service URL of the Azurite the test command started; panics
/// saying how to start one when there is none.
fn azurite_url() -> String {
    std::env::var("BOSUN_TEST_AZURITE_URL")
        .ok()
        .filter(|url| !url.is_empty())
        .unwrap_or_else(|| {
            panic!(
                "BOSUN_TEST_AZURITE_URL is not set: the Azurite tests need a running Azurite; run them with \
                 `scripts/azurite run -- cargo test --test blob_behaviour -- --ignored` (needs node and npm; \
                 scripts/test does this)"
            )
        })
}

/// The Azure store against Azurite, shared-key auth.
fn azurite() -> Subject {
    let url = azurite_url();
    let key = std::env::var("BOSUN_TEST_AZURITE_KEY").unwrap_or_else(|_| {
        // Azurite's published development key.
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==".to_owned()
    });
    let account = std::env::var("BOSUN_TEST_AZURITE_ACCOUNT").ok();
    let settings = AzureBlobSettings::new(url, AzureBlobAuth::SharedKey { account, key });
    Subject {
        name: "azurite",
        store: Arc::new(AzureBlobStore::new(settings).unwrap()),
        _dir: None,
    }
}

/// One test per store for each behaviour: `filesystem::NAME` runs always,
/// `azurite::NAME` is ignored unless asked for (`--ignored`) where Azurite
/// is provided.
macro_rules! on_every_store {
    ($($(#[$test:meta])+ $name:ident;)*) => {
        mod filesystem {
            $(
                $(#[$test])+
                async fn $name() {
                    super::$name(&super::filesystem()).await;
                }
            )*
        }

        mod azurite {
            $(
                $(#[$test])+
                #[ignore = "needs Azurite: run with scripts/azurite run -- cargo test --test blob_behaviour -- \
                            --ignored (scripts/test does)"]
                async fn $name() {
                    super::$name(&super::azurite()).await;
                }
            )*

            #[tokio::test]
            #[ignore = "needs Azurite: run with scripts/azurite run -- cargo test --test blob_behaviour -- \
                        --ignored (scripts/test does)"]
            async fn azurite_refuses_a_wrong_shared_key() {
                super::azurite_refuses_a_wrong_shared_key().await;
            }
        }
    };
}

on_every_store! {
    #[tokio::test] put_get_exists_round_trip;
    #[tokio::test] corrupt_content_is_detected;
    #[tokio::test] missing_blobs_and_containers_are_not_found;
    #[tokio::test] invalid_names_are_refused_before_any_io;
    #[tokio::test] put_replaces_and_is_idempotent;
    #[tokio::test] large_blobs_round_trip;
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)] concurrent_puts_all_land;
}

/// A container name no other test (or earlier run on the same Azurite) uses.
fn fresh_container(purpose: &str) -> String {
    let id = uuid::Uuid::now_v7().simple().to_string();
    format!("{purpose}-{}", &id[id.len() - 12..])
}

/// Deterministic bytes that do not compress to nothing.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

async fn put_get_exists_round_trip(subject: &Subject) {
    let store = &subject.store;
    let container = fresh_container("logs");
    let key = "contoso/payments-api/4711/log.txt";
    assert!(
        !store.exists(&container, key).await.unwrap(),
        "{}: nothing there yet (not even the container)",
        subject.name
    );
    assert_eq!(
        store.read(&container, key).await.unwrap(),
        None,
        "{}: nothing to read by name yet",
        subject.name
    );
    let blob = store
        .put(&container, key, b"hello".to_vec(), "text/plain; charset=utf-8")
        .await
        .unwrap();
    assert_eq!(blob.container, container);
    assert_eq!(blob.key, key);
    assert_eq!(blob.size_bytes, 5);
    assert_eq!(blob.sha256, sha256_hex(b"hello"));
    assert_eq!(blob.content_type, "text/plain; charset=utf-8");
    assert_eq!(store.get(&blob).await.unwrap(), b"hello", "{}", subject.name);
    assert!(store.exists(&container, key).await.unwrap(), "{}", subject.name);
    assert_eq!(
        store.read(&container, key).await.unwrap().as_deref(),
        Some(&b"hello"[..]),
        "{}: read by name",
        subject.name
    );
    assert_eq!(
        store.read(&container, "contoso/payments-api").await.unwrap(),
        None,
        "{}: a prefix of a key is no blob to read",
        subject.name
    );
    assert!(
        !store
            .exists(&container, "contoso/payments-api/4711/other.txt")
            .await
            .unwrap(),
        "{}",
        subject.name
    );
    // A key that is a prefix of a stored one is not a blob.
    assert!(
        !store.exists(&container, "contoso/payments-api").await.unwrap(),
        "{}",
        subject.name
    );

    let empty = store
        .put(&container, "empty.txt", Vec::new(), "text/plain")
        .await
        .unwrap();
    assert_eq!(empty.size_bytes, 0);
    assert_eq!(store.get(&empty).await.unwrap(), b"", "{}", subject.name);
}

async fn corrupt_content_is_detected(subject: &Subject) {
    let store = &subject.store;
    let container = fresh_container("corrupt");
    let original = store
        .put(&container, "a/report.xml", b"<ok/>".to_vec(), "application/xml")
        .await
        .unwrap();
    // Same size, other bytes: the sha256 tells.
    store
        .put(&container, "a/report.xml", b"<no/>".to_vec(), "application/xml")
        .await
        .unwrap();
    match store.get(&original).await {
        Err(BlobError::Corrupt {
            container: c,
            key,
            reason,
        }) => {
            assert_eq!((c.as_str(), key.as_str()), (container.as_str(), "a/report.xml"));
            assert!(reason.contains("sha256"), "{}: {reason}", subject.name);
        }
        other => panic!("{}: expected Corrupt, got {other:?}", subject.name),
    }
    // Another size: the size tells.
    store
        .put(&container, "a/report.xml", b"<longer/>".to_vec(), "application/xml")
        .await
        .unwrap();
    match store.get(&original).await {
        Err(err @ BlobError::Corrupt { .. }) => {
            assert!(
                err.to_string().contains("9 bytes, expected 5"),
                "{}: {err}",
                subject.name
            );
            assert!(!err.is_transient());
        }
        other => panic!("{}: expected Corrupt, got {other:?}", subject.name),
    }
}

async fn missing_blobs_and_containers_are_not_found(subject: &Subject) {
    let store = &subject.store;
    let container = fresh_container("missing");
    let blob = store
        .put(&container, "present.json", b"{}".to_vec(), "application/json")
        .await
        .unwrap();
    let mut missing = blob.clone();
    missing.key = "absent.json".into();
    match store.get(&missing).await {
        Err(BlobError::NotFound { container: c, key }) => {
            assert_eq!((c.as_str(), key.as_str()), (container.as_str(), "absent.json"));
        }
        other => panic!("{}: expected NotFound, got {other:?}", subject.name),
    }
    let mut no_container = blob.clone();
    no_container.container = fresh_container("nowhere");
    assert!(
        matches!(store.get(&no_container).await, Err(BlobError::NotFound { .. })),
        "{}",
        subject.name
    );
}

async fn invalid_names_are_refused_before_any_io(subject: &Subject) {
    let store = &subject.store;
    for (container, key) in [
        ("Build_Logs", "a.txt"),
        ("ab", "a.txt"),
        ("build--logs", "a.txt"),
        ("build-logs", "../escape"),
        ("build-logs", "/etc/passwd"),
        ("build-logs", "a//b"),
        ("build-logs", "a/./b"),
        ("build-logs", ""),
        ("build-logs", "back\\slash"),
    ] {
        let put = store.put(container, key, b"x".to_vec(), "text/plain").await;
        assert!(
            matches!(put, Err(BlobError::InvalidName(_))),
            "{}: put {container}/{key}: {put:?}",
            subject.name
        );
        let exists = store.exists(container, key).await;
        assert!(
            matches!(exists, Err(BlobError::InvalidName(_))),
            "{}: exists {container}/{key}: {exists:?}",
            subject.name
        );
        let reference = bosun_contracts::messages::BlobRef {
            container: container.to_owned(),
            key: key.to_owned(),
            size_bytes: 1,
            sha256: sha256_hex(b"x"),
            content_type: "text/plain".to_owned(),
        };
        let get = store.get(&reference).await;
        assert!(
            matches!(get, Err(BlobError::InvalidName(_))),
            "{}: get {container}/{key}: {get:?}",
            subject.name
        );
    }
}

async fn put_replaces_and_is_idempotent(subject: &Subject) {
    let store = &subject.store;
    let container = fresh_container("overwrite");
    let first = store
        .put(&container, "k.json", b"[1]".to_vec(), "application/json")
        .await
        .unwrap();
    let again = store
        .put(&container, "k.json", b"[1]".to_vec(), "application/json")
        .await
        .unwrap();
    assert_eq!(
        first, again,
        "{}: the same put twice gives the same reference",
        subject.name
    );
    assert_eq!(store.get(&first).await.unwrap(), b"[1]");

    let second = store
        .put(&container, "k.json", b"[1, 2]".to_vec(), "application/json")
        .await
        .unwrap();
    assert_ne!(first.sha256, second.sha256);
    assert_eq!(store.get(&second).await.unwrap(), b"[1, 2]", "{}", subject.name);
    assert!(matches!(store.get(&first).await, Err(BlobError::Corrupt { .. })));
}

async fn large_blobs_round_trip(subject: &Subject) {
    let store = &subject.store;
    let container = fresh_container("large");
    let content = noise(5 * 1024 * 1024 + 17, 7);
    let started = std::time::Instant::now();
    let blob = store
        .put(
            &container,
            "bundles/big.bin",
            content.clone(),
            "application/octet-stream",
        )
        .await
        .unwrap();
    let read = store.get(&blob).await.unwrap();
    assert_eq!(blob.size_bytes, content.len() as u64);
    assert!(read == content, "{}: 5 MB read back differs", subject.name);
    eprintln!("{}: 5 MB put + get in {:?}", subject.name, started.elapsed());
}

async fn concurrent_puts_all_land(subject: &Subject) {
    let container = fresh_container("concurrent");
    let mut tasks = Vec::new();
    // Sixteen writers of their own keys, plus eight writers of one shared key
    // (same content, as a redelivered message would write it).
    for index in 0..24_u64 {
        let store = Arc::clone(&subject.store);
        let container = container.clone();
        tasks.push(tokio::spawn(async move {
            let (key, content) = if index < 16 {
                (format!("tenant/{index}.bin"), noise(64 * 1024, index))
            } else {
                ("tenant/shared.bin".to_owned(), noise(64 * 1024, 99))
            };
            let blob = store
                .put(&container, &key, content.clone(), "application/octet-stream")
                .await
                .unwrap();
            (blob, content)
        }));
    }
    for task in tasks {
        let (blob, content) = task.await.unwrap();
        assert!(
            subject.store.get(&blob).await.unwrap() == content,
            "{}: {} differs",
            subject.name,
            blob.key
        );
    }
}

async fn azurite_refuses_a_wrong_shared_key() {
    let url = azurite_url();
    // A well-formed key that is not the account's.
    let wrong = "d3JvbmcgZGV2ZWxvcG1lbnQga2V5IGZvciBib3N1biB0ZXN0cw==";
    let settings = AzureBlobSettings::new(
        url,
        AzureBlobAuth::SharedKey {
            account: None,
            key: wrong.to_owned(),
        },
    );
    let store = AzureBlobStore::new(settings).unwrap();
    match store
        .put(&fresh_container("denied"), "a.txt", b"x".to_vec(), "text/plain")
        .await
    {
        Err(err @ BlobError::Denied(_)) => {
            assert!(!err.is_transient());
            assert!(err.to_string().contains("403"), "{err}");
            assert!(!err.to_string().contains(wrong), "{err}");
        }
        other => panic!("expected Denied, got {other:?}"),
    }
}
