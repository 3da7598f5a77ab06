//! The claim check: payloads too large for the broker travel through the
//! blob store, and the envelope carries a reference to them instead.
//!
//! Outgoing: an envelope whose serialized size exceeds the threshold
//! ([`ClaimCheckSettings::threshold_bytes`], 192 KiB by default, under
//! Service Bus standard's 256 KB) has its `payload` written to the blob store
//! — container [`CONTAINER`], key `<tenantId>/<messageId>.json` — and
//! replaced by `null`, with an extension field pointing at it:
//!
//! ```json
//! { "messageId": "0193…", "type": "CreateCommit", …, "payload": null,
//!   "payloadRef": { "container": "payloads", "key": "contoso/0193….json",
//!                   "sizeBytes": 307212, "sha256": "9f86…", "contentType": "application/json" } }
//! ```
//!
//! `payloadRef` has the shape of every other blob reference
//! ([`BlobRef`]). Builds that do not know the claim check keep it as an
//! unknown field, like any other, and fail to decode the `null` payload
//! rather than misread it.
//!
//! Incoming: an envelope with a `payloadRef` gets its payload read back
//! (size and sha256 checked) and put in place, and the `payloadRef` removed,
//! before it is decoded, so consumers never see the difference. Everything
//! else in the envelope, fields this build does not know included, is kept
//! as it was.
//!
//! The functions work on raw bytes as well as on [`Envelope`]s, so stored
//! messages (dead letters, the outbox) keep the small referencing bytes and
//! stay readable by resolving them. Offloading the same message twice
//! writes the same blob under the same key: it is idempotent, as a
//! redispatched outbox entry needs.

use bosun_consumers::delivery::blob::{BlobError, BlobStore};
use bosun_contracts::Envelope;
use bosun_contracts::messages::BlobRef;
use bosun_contracts::validate::Validate;
use serde_json::{Map, Value};

/// Default size above which a payload is claim-checked: 192 KiB, leaving
/// room under Service Bus standard's 256 KB for the envelope and the
/// broker's own properties.
pub const DEFAULT_THRESHOLD_BYTES: usize = 192 * 1024;

/// The blob container claim-checked payloads go to.
pub const CONTAINER: &str = "payloads";

/// The envelope field that carries the reference.
pub const REFERENCE_FIELD: &str = "payloadRef";

/// Content type of a claim-checked payload.
pub const CONTENT_TYPE: &str = "application/json";

/// When payloads are claim-checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimCheckSettings {
    /// An envelope larger than this many bytes, serialized, has its payload
    /// moved to the blob store.
    pub threshold_bytes: usize,
}

impl Default for ClaimCheckSettings {
    fn default() -> Self {
        Self {
            threshold_bytes: DEFAULT_THRESHOLD_BYTES,
        }
    }
}

/// Why a payload could not be claim-checked or resolved.
#[derive(Debug, thiserror::Error)]
pub enum ClaimCheckError {
    /// The bytes are not an envelope the claim check can work on, or its
    /// `payloadRef` is not a valid reference. Permanent.
    #[error("cannot claim-check this message: {0}")]
    Malformed(String),
    /// The envelope is not JSON, or a part of it could not be written back
    /// as JSON. Permanent.
    #[error("cannot claim-check this message: {what}: {source}")]
    Json {
        /// Which part: `the envelope is not JSON`, `` `payloadRef` ``, ...
        what: String,
        /// The parser's or writer's error.
        #[source]
        source: serde_json::Error,
    },
    /// The blob store failed to write or read the payload; the reference is
    /// named. Transient when the store's error is.
    #[error("claim-checked payload {reference}: {source}")]
    Blob {
        /// `container/key (size bytes, sha256 …)` of the payload.
        reference: String,
        /// What the store said.
        #[source]
        source: BlobError,
    },
    /// The referenced blob was read and checked but is not JSON. Permanent.
    #[error("claim-checked payload {reference} is not JSON: {source}")]
    NotJson {
        /// `container/key (size bytes, sha256 …)` of the payload.
        reference: String,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
}

impl ClaimCheckError {
    /// Whether retrying may help (the blob store was unavailable).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Blob { source, .. } if source.is_transient())
    }
}

/// The blob key of a message's claim-checked payload:
/// `<tenantId>/<messageId>.json`.
pub fn payload_key(tenant_id: &str, message_id: &str) -> String {
    format!("{tenant_id}/{message_id}.json")
}

/// Moves the payload of `envelope` to `store` when the serialized envelope
/// is larger than the threshold, and returns the reference it now carries
/// (`None` when the envelope was small enough and is untouched, or already
/// carries a reference).
pub async fn offload(
    envelope: &mut Envelope,
    store: &dyn BlobStore,
    settings: ClaimCheckSettings,
) -> Result<Option<BlobRef>, ClaimCheckError> {
    if envelope.payload.is_null() || envelope.to_vec().len() <= settings.threshold_bytes {
        return Ok(None);
    }
    let payload = serde_json::to_vec(&envelope.payload).map_err(json_error("encoding the payload"))?;
    let key = payload_key(&envelope.tenant_id, &envelope.message_id.to_string());
    let reference = put(store, &key, payload).await?;
    envelope.payload = Value::Null;
    envelope
        .extensions
        .insert(REFERENCE_FIELD.to_owned(), reference_value(&reference)?);
    Ok(Some(reference))
}

/// [`offload`] on raw envelope bytes: returns the bytes to send, which are
/// `bytes` themselves when the envelope is small enough. Every field is
/// kept, in order; only `payload` changes and `payloadRef` is added.
pub async fn offload_bytes(
    bytes: Vec<u8>,
    store: &dyn BlobStore,
    settings: ClaimCheckSettings,
) -> Result<Vec<u8>, ClaimCheckError> {
    if bytes.len() <= settings.threshold_bytes {
        return Ok(bytes);
    }
    let mut document = parse_object(&bytes)?;
    let payload = match document.get("payload") {
        None | Some(Value::Null) => return Ok(bytes),
        Some(payload) => serde_json::to_vec(payload).map_err(json_error("encoding the payload"))?,
    };
    let tenant_id = string_field(&document, "tenantId")?;
    let message_id = string_field(&document, "messageId")?;
    let reference = put(store, &payload_key(&tenant_id, &message_id), payload).await?;
    document.insert("payload".to_owned(), Value::Null);
    document.insert(REFERENCE_FIELD.to_owned(), reference_value(&reference)?);
    serde_json::to_vec(&document).map_err(json_error("encoding the envelope"))
}

/// The reference raw envelope bytes carry, if any (for showing a stored
/// message without reading the payload).
pub fn reference(bytes: &[u8]) -> Result<Option<BlobRef>, ClaimCheckError> {
    if !mentions_reference(bytes) {
        return Ok(None);
    }
    let document = parse_object(bytes)?;
    document.get(REFERENCE_FIELD).map(parse_reference).transpose()
}

/// Puts the claim-checked payload of raw envelope bytes back in place and
/// drops the `payloadRef`: the result is what the sender would have sent
/// without the claim check. Bytes without a reference come back unchanged.
pub async fn resolve(bytes: &[u8], store: &dyn BlobStore) -> Result<Vec<u8>, ClaimCheckError> {
    if !mentions_reference(bytes) {
        return Ok(bytes.to_vec());
    }
    let mut document = parse_object(bytes)?;
    let Some(reference) = document.get(REFERENCE_FIELD).map(parse_reference).transpose()? else {
        return Ok(bytes.to_vec());
    };
    if !document.get("payload").is_none_or(Value::is_null) {
        return Err(ClaimCheckError::Malformed(format!(
            "the envelope has both a payload and a `{REFERENCE_FIELD}`"
        )));
    }
    let payload = fetch(store, &reference).await?;
    document.insert("payload".to_owned(), payload);
    document.shift_remove(REFERENCE_FIELD);
    serde_json::to_vec(&document).map_err(json_error("encoding the envelope"))
}

/// [`resolve`] on a parsed envelope (parse the small referencing bytes
/// with `Envelope::from_slice`, resolve, then `decode`). Returns the
/// reference that was resolved, `None` when there was none.
pub async fn resolve_envelope(
    envelope: &mut Envelope,
    store: &dyn BlobStore,
) -> Result<Option<BlobRef>, ClaimCheckError> {
    let Some(value) = envelope.extensions.get(REFERENCE_FIELD) else {
        return Ok(None);
    };
    let reference = parse_reference(value)?;
    if !envelope.payload.is_null() {
        return Err(ClaimCheckError::Malformed(format!(
            "the envelope has both a payload and a `{REFERENCE_FIELD}`"
        )));
    }
    envelope.payload = fetch(store, &reference).await?;
    envelope.extensions.shift_remove(REFERENCE_FIELD);
    Ok(Some(reference))
}

/// How a reference is named in errors.
fn describe(reference: &BlobRef) -> String {
    format!(
        "{}/{} ({} bytes, sha256 {})",
        reference.container, reference.key, reference.size_bytes, reference.sha256
    )
}

async fn put(store: &dyn BlobStore, key: &str, payload: Vec<u8>) -> Result<BlobRef, ClaimCheckError> {
    store
        .put(CONTAINER, key, payload, CONTENT_TYPE)
        .await
        .map_err(|source| ClaimCheckError::Blob {
            reference: format!("{CONTAINER}/{key}"),
            source,
        })
}

async fn fetch(store: &dyn BlobStore, reference: &BlobRef) -> Result<Value, ClaimCheckError> {
    let bytes = store.get(reference).await.map_err(|source| ClaimCheckError::Blob {
        reference: describe(reference),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|source| ClaimCheckError::NotJson {
        reference: describe(reference),
        source,
    })
}

fn reference_value(reference: &BlobRef) -> Result<Value, ClaimCheckError> {
    serde_json::to_value(reference).map_err(json_error(format!("encoding `{REFERENCE_FIELD}`")))
}

fn parse_reference(value: &Value) -> Result<BlobRef, ClaimCheckError> {
    let reference: BlobRef =
        serde_json::from_value(value.clone()).map_err(json_error(format!("`{REFERENCE_FIELD}`")))?;
    reference
        .validate()
        .map_err(|err| ClaimCheckError::Malformed(format!("`{REFERENCE_FIELD}.{}`: {}", err.field, err.reason)))?;
    Ok(reference)
}

/// A JSON failure on `what`, as a permanent [`ClaimCheckError`].
fn json_error(what: impl Into<String>) -> impl FnOnce(serde_json::Error) -> ClaimCheckError {
    let what = what.into();
    move |source| ClaimCheckError::Json { what, source }
}

/// A cheap test that spares parsing the bytes of most messages.
fn mentions_reference(bytes: &[u8]) -> bool {
    let needle = format!("\"{REFERENCE_FIELD}\"");
    bytes.windows(needle.len()).any(|window| window == needle.as_bytes())
}

fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, ClaimCheckError> {
    match serde_json::from_slice(bytes) {
        Ok(Value::Object(document)) => Ok(document),
        Ok(_) => Err(ClaimCheckError::Malformed(
            "the envelope is not a JSON object".to_owned(),
        )),
        Err(err) => Err(json_error("the envelope is not JSON")(err)),
    }
}

fn string_field(document: &Map<String, Value>, field: &str) -> Result<String, ClaimCheckError> {
    match document.get(field) {
        Some(Value::String(value)) if !value.is_empty() => Ok(value.clone()),
        _ => Err(ClaimCheckError::Malformed(format!("the envelope has no `{field}`"))),
    }
}

#[cfg(test)]
mod tests {
    use bosun_consumers::delivery::blob::FilesystemBlobStore;
    use bosun_contracts::messages::{BundleFile, ContentEncoding, Message};
    use bosun_contracts::samples;
    use uuid::Uuid;

    use super::*;

    /// A `CreateCommit` whose one file holds `size` bytes of text, with an
    /// envelope field this build does not know.
    fn commit_envelope(size: usize) -> Envelope {
        let mut commit = samples::create_commit();
        commit.files = vec![BundleFile {
            path: "docs/big.md".to_owned(),
            content: "bosun claim check\n".repeat(size / 18 + 1)[..size].to_owned(),
            encoding: ContentEncoding::Utf8,
            executable: false,
        }];
        let mut envelope = Envelope::new(&Message::from(commit), Uuid::now_v7(), "contoso", "agent:test");
        envelope
            .extensions
            .insert("futureEnvelopeField".to_owned(), serde_json::json!({"kept": [1, 2]}));
        envelope
    }

    fn store() -> (tempfile::TempDir, FilesystemBlobStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = FilesystemBlobStore::new(dir.path());
        (dir, store)
    }

    #[tokio::test]
    async fn a_300_kb_payload_round_trips_through_the_blob_store() {
        let (_dir, store) = store();
        let original = commit_envelope(300 * 1024);
        let original_bytes = original.to_vec();
        assert!(original_bytes.len() > bosun_contracts::envelope::MAX_MESSAGE_BYTES);

        let mut envelope = original.clone();
        let reference = offload(&mut envelope, &store, ClaimCheckSettings::default())
            .await
            .unwrap()
            .expect("claim-checked");
        assert_eq!(reference.container, "payloads");
        assert_eq!(reference.key, format!("contoso/{}.json", original.message_id));
        assert_eq!(reference.content_type, "application/json");
        assert!(envelope.payload.is_null());
        let sent = envelope.to_vec();
        assert!(sent.len() < 2048, "{} bytes", sent.len());
        assert!(store.exists("payloads", &reference.key).await.unwrap());

        // The referencing bytes parse as an envelope (they are small), and resolve
        // to exactly what would have been sent without the claim check.
        let parsed = Envelope::from_slice(&sent).unwrap();
        assert_eq!(super::reference(&sent).unwrap(), Some(reference.clone()));
        assert!(parsed.decode().is_err(), "an unresolved payload does not decode");
        assert_eq!(resolve(&sent, &store).await.unwrap(), original_bytes);

        let mut received = parsed;
        assert_eq!(resolve_envelope(&mut received, &store).await.unwrap(), Some(reference));
        assert_eq!(received, original);
        assert_eq!(received.decode().unwrap(), original.decode().unwrap());
    }

    #[tokio::test]
    async fn raw_bytes_are_claim_checked_the_same_way() {
        let (_dir, store) = store();
        let original = commit_envelope(300 * 1024).to_vec();
        let sent = offload_bytes(original.clone(), &store, ClaimCheckSettings::default())
            .await
            .unwrap();
        assert!(sent.len() < 2048);
        let document: Value = serde_json::from_slice(&sent).unwrap();
        assert!(document["payload"].is_null());
        assert_eq!(document[REFERENCE_FIELD]["container"], "payloads");
        assert_eq!(resolve(&sent, &store).await.unwrap(), original);
        // Offloading again (a redispatched outbox entry) writes the same blob.
        let again = offload_bytes(original.clone(), &store, ClaimCheckSettings::default())
            .await
            .unwrap();
        assert_eq!(again, sent);
        // Referencing bytes are not offloaded twice.
        let settings = ClaimCheckSettings { threshold_bytes: 16 };
        assert_eq!(offload_bytes(sent.clone(), &store, settings).await.unwrap(), sent);
    }

    #[tokio::test]
    async fn small_payloads_are_untouched() {
        let (dir, store) = store();
        let original = commit_envelope(10 * 1024);
        let mut envelope = original.clone();
        assert_eq!(
            offload(&mut envelope, &store, ClaimCheckSettings::default())
                .await
                .unwrap(),
            None
        );
        assert_eq!(envelope, original);
        let bytes = original.to_vec();
        assert_eq!(
            offload_bytes(bytes.clone(), &store, ClaimCheckSettings::default())
                .await
                .unwrap(),
            bytes
        );
        assert_eq!(resolve(&bytes, &store).await.unwrap(), bytes);
        assert_eq!(super::reference(&bytes).unwrap(), None);
        assert!(!dir.path().join("payloads").exists(), "nothing written");
    }

    #[tokio::test]
    async fn the_threshold_is_configurable() {
        let (_dir, store) = store();
        let mut envelope = commit_envelope(4 * 1024);
        let settings = ClaimCheckSettings { threshold_bytes: 1024 };
        assert!(offload(&mut envelope, &store, settings).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_missing_or_corrupt_payload_is_an_error_naming_the_reference() {
        let (dir, store) = store();
        let mut envelope = commit_envelope(300 * 1024);
        let reference = offload(&mut envelope, &store, ClaimCheckSettings::default())
            .await
            .unwrap()
            .unwrap();
        let sent = envelope.to_vec();
        let path = dir.path().join("payloads").join(&reference.key);

        std::fs::write(&path, b"{\"files\": []}").unwrap();
        let err = resolve(&sent, &store).await.unwrap_err();
        let message = err.to_string();
        assert!(message.contains(&format!("payloads/{}", reference.key)), "{message}");
        assert!(message.contains("corrupt"), "{message}");
        assert!(!err.is_transient());

        std::fs::remove_file(&path).unwrap();
        let mut received = Envelope::from_slice(&sent).unwrap();
        let err = resolve_envelope(&mut received, &store).await.unwrap_err();
        let message = err.to_string();
        assert!(message.contains(&format!("payloads/{}", reference.key)), "{message}");
        assert!(message.contains("not found"), "{message}");
        assert!(matches!(
            err,
            ClaimCheckError::Blob {
                source: BlobError::NotFound { .. },
                ..
            }
        ));
    }

    #[tokio::test]
    async fn bytes_that_are_not_json_are_refused_with_the_parser_error() {
        let (_dir, store) = store();
        let err = resolve(br#"{"payloadRef": "#, &store).await.unwrap_err();
        assert!(!err.is_transient(), "{err}");
        assert!(
            matches!(&err, ClaimCheckError::Json { what, .. } if what == "the envelope is not JSON"),
            "{err}"
        );
        let parser = std::error::Error::source(&err).expect("the parser's error is the source");
        assert!(parser.is::<serde_json::Error>(), "{parser:?}");
    }

    #[tokio::test]
    async fn a_bad_reference_is_refused() {
        let (_dir, store) = store();
        let mut document: Value = serde_json::from_slice(&commit_envelope(100).to_vec()).unwrap();
        document["payload"] = Value::Null;
        document[REFERENCE_FIELD] = serde_json::json!({
            "container": "payloads", "key": "../../etc/passwd", "sizeBytes": 1,
            "sha256": "0".repeat(64), "contentType": "application/json"
        });
        let err = resolve(&serde_json::to_vec(&document).unwrap(), &store)
            .await
            .unwrap_err();
        assert!(matches!(err, ClaimCheckError::Malformed(_)), "{err}");
        assert!(err.to_string().contains("payloadRef.key"), "{err}");
    }

    #[tokio::test]
    async fn unknown_fields_survive_offload_and_resolve() {
        let (_dir, store) = store();
        let mut document: Value = serde_json::from_slice(&commit_envelope(300 * 1024).to_vec()).unwrap();
        document["payload"]["futurePayloadField"] = serde_json::json!("kept");
        document["zzFutureField"] = serde_json::json!(42);
        let original = serde_json::to_vec(&document).unwrap();

        let sent = offload_bytes(original.clone(), &store, ClaimCheckSettings::default())
            .await
            .unwrap();
        let on_the_wire: Value = serde_json::from_slice(&sent).unwrap();
        assert_eq!(on_the_wire["futureEnvelopeField"], serde_json::json!({"kept": [1, 2]}));
        assert_eq!(on_the_wire["zzFutureField"], 42);

        let resolved = resolve(&sent, &store).await.unwrap();
        assert_eq!(resolved, original);
        let back: Value = serde_json::from_slice(&resolved).unwrap();
        assert_eq!(back["payload"]["futurePayloadField"], "kept");
        assert!(back.get(REFERENCE_FIELD).is_none());
    }
}

/// A blob store and threshold, as the runtime carries them.
#[derive(Clone)]
pub struct ClaimCheck {
    /// Where payloads go.
    pub store: std::sync::Arc<dyn BlobStore>,
    /// When.
    pub settings: ClaimCheckSettings,
}

impl std::fmt::Debug for ClaimCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimCheck")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl ClaimCheck {
    /// Offloads the payload of `body` when it is over the threshold.
    pub async fn offload(&self, body: Vec<u8>) -> Result<Vec<u8>, ClaimCheckError> {
        offload_bytes(body, self.store.as_ref(), self.settings).await
    }
}
