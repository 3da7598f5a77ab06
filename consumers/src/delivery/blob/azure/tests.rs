//! Tests of the Azure blob store that need no Azure: settings, secrets kept
//! out of messages, and Entra ID against a scripted HTTPS endpoint on
//! 127.0.0.1 (a self-signed certificate for 127.0.0.1 in `testdata/`, made
//! for these tests only). The behaviour suite against Azurite is in the
//! workspace's `tests/blob_behaviour.rs`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Mutex;

use super::*;
use crate::delivery::azure::credential::{AccessToken, TokenCredential, TokenRequestOptions};

const CERT: &[u8] = include_bytes!("testdata/localhost.crt");
const KEY: &[u8] = include_bytes!("testdata/localhost.key");

/// A request the scripted endpoint received.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    headers: HashMap<String, String>,
}

/// A Blob endpoint over TLS that keeps blobs in memory and records every
/// request. It answers Put Blob, Get Blob and Get Blob Properties.
struct ScriptedBlobEndpoint {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl ScriptedBlobEndpoint {
    fn start() -> Self {
        let identity = native_tls::Identity::from_pkcs8(CERT, KEY).unwrap();
        let acceptor = Arc::new(native_tls::TlsAcceptor::new(identity).unwrap());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("https://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let blobs = Arc::new(Mutex::new(HashMap::<String, Vec<u8>>::new()));
        let recorded = Arc::clone(&seen);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let acceptor = Arc::clone(&acceptor);
                let recorded = Arc::clone(&recorded);
                let blobs = Arc::clone(&blobs);
                std::thread::spawn(move || {
                    if let Ok(tls) = acceptor.accept(stream) {
                        serve(tls, &recorded, &blobs);
                    }
                });
            }
        });
        Self { url, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(
    stream: native_tls::TlsStream<std::net::TcpStream>,
    seen: &Mutex<Vec<Seen>>,
    blobs: &Mutex<HashMap<String, Vec<u8>>>,
) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_owned();
        let target = parts.next().unwrap_or_default().to_owned();
        let mut headers = HashMap::new();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
            }
        }
        let length = headers
            .get("content-length")
            .and_then(|value| value.parse::<usize>().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let path = target.split('?').next().unwrap_or_default().to_owned();
        seen.lock().unwrap().push(Seen {
            method: method.clone(),
            path: path.clone(),
            headers: headers.clone(),
        });
        let common = "x-ms-request-id: 1\r\nx-ms-version: 2026-04-06\r\nETag: \"0x1\"\r\n\
                      Last-Modified: Sun, 29 Nov 2026 10:00:00 GMT";
        let response = match method.as_str() {
            "PUT" => {
                blobs.lock().unwrap().insert(path, body);
                format!("HTTP/1.1 201 Created\r\n{common}\r\nContent-Length: 0\r\n\r\n").into_bytes()
            }
            "GET" | "HEAD" => match blobs.lock().unwrap().get(&path) {
                Some(content) => {
                    let mut response = format!(
                        "HTTP/1.1 200 OK\r\n{common}\r\nx-ms-blob-type: BlockBlob\r\n\
                         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                        content.len()
                    )
                    .into_bytes();
                    if method == "GET" {
                        response.extend_from_slice(content);
                    }
                    response
                }
                None => format!(
                    "HTTP/1.1 404 The specified blob does not exist.\r\n{common}\r\n\
                     x-ms-error-code: BlobNotFound\r\nContent-Length: 0\r\n\r\n"
                )
                .into_bytes(),
            },
            _ => b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n".to_vec(),
        };
        let stream = reader.get_mut();
        if stream.write_all(&response).is_err() || stream.flush().is_err() {
            return;
        }
    }
}

/// A credential that hands out a fixed token and remembers the scopes asked for.
#[derive(Debug, Default)]
struct FixedToken {
    scopes: Mutex<Vec<String>>,
}

#[async_trait]
impl TokenCredential for FixedToken {
    async fn get_token(
        &self,
        scopes: &[&str],
        _options: Option<TokenRequestOptions<'_>>,
    ) -> azure_core::Result<AccessToken> {
        self.scopes
            .lock()
            .unwrap()
            .extend(scopes.iter().map(|scope| (*scope).to_owned()));
        Ok(AccessToken::new(
            "entra-test-token",
            time::OffsetDateTime::now_utc() + time::Duration::hours(1),
        ))
    }
}

fn trusting_client() -> reqwest::Client {
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(CERT).unwrap())
        .no_proxy()
        .build()
        .unwrap()
}

#[tokio::test]
async fn entra_id_requests_carry_a_bearer_token_for_the_storage_scope() {
    let endpoint = ScriptedBlobEndpoint::start();
    let credential = Arc::new(FixedToken::default());
    let settings = AzureBlobSettings::new(
        format!("{}/", endpoint.url),
        AzureBlobAuth::EntraId(EntraIdCredential::Credential(credential.clone())),
    );
    let store = AzureBlobStore::with_http_client(settings, trusting_client()).unwrap();

    let blob = store
        .put(
            "payloads",
            "contoso/0193.json",
            br#"{"big":true}"#.to_vec(),
            "application/json",
        )
        .await
        .unwrap();
    assert!(store.exists("payloads", "contoso/0193.json").await.unwrap());
    assert!(!store.exists("payloads", "contoso/none.json").await.unwrap());
    assert_eq!(store.get(&blob).await.unwrap(), br#"{"big":true}"#);

    let seen = endpoint.seen();
    assert!(seen.len() >= 4, "{seen:?}");
    for request in &seen {
        assert_eq!(
            request.headers.get("authorization").map(String::as_str),
            Some("Bearer entra-test-token"),
            "{request:?}"
        );
        assert!(request.headers.contains_key("x-ms-version"), "{request:?}");
    }
    // Keys keep their `/` in the path.
    assert_eq!(seen[0].method, "PUT");
    assert_eq!(seen[0].path, "/payloads/contoso/0193.json");
    assert_eq!(
        seen[0].headers.get("x-ms-blob-content-type").map(String::as_str),
        Some("application/json")
    );
    let scopes = credential.scopes.lock().unwrap().clone();
    assert!(!scopes.is_empty());
    assert!(scopes.iter().all(|scope| scope == STORAGE_SCOPE), "{scopes:?}");
}

#[test]
fn entra_id_is_refused_over_plain_http() {
    let settings = AzureBlobSettings::new(
        "http://127.0.0.1:1",
        AzureBlobAuth::EntraId(EntraIdCredential::Credential(Arc::new(FixedToken::default()))),
    );
    let err = AzureBlobStore::new(settings).unwrap_err();
    assert!(err.to_string().contains("https"), "{err}");
}

#[tokio::test]
async fn secrets_stay_out_of_debug_output_and_errors() {
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    let sas = "sv=2025-01-05&ss=b&srt=sco&sp=rwdlac&se=2099-01-01T00:00:00Z&sig=c2VjcmV0LXNpZ25hdHVyZQ%3D%3D";
    let mut settings = AzureBlobSettings::new("http://127.0.0.1:1/devstoreaccount1", AzureBlobAuth::Sas(sas.into()));
    settings.max_retries = 0;
    assert!(!format!("{settings:?}").contains("c2VjcmV0"));
    let store = AzureBlobStore::new(settings).unwrap();
    assert!(!format!("{store:?}").contains("c2VjcmV0"), "{store:?}");
    let err = store.exists("payloads", "a/b.json").await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(!err.to_string().contains("c2VjcmV0"), "{err}");

    let shared = AzureBlobAuth::SharedKey {
        account: None,
        key: AZURITE_KEY.to_owned(),
    };
    assert!(!format!("{shared:?}").contains("Eby8"));
    assert!(matches!(
        AzureBlobStore::new(AzureBlobSettings::new(
            "http://127.0.0.1:1/devstoreaccount1",
            AzureBlobAuth::SharedKey {
                account: None,
                key: "not base64!".into()
            }
        )),
        Err(AzureBlobConfigError(message)) if !message.contains("not base64!")
    ));
}

#[test]
fn account_names_come_from_the_endpoint() {
    let name = |url: &str| account_name(&Url::parse(url).unwrap());
    assert_eq!(
        name("https://contoso.blob.core.windows.net"),
        Some("contoso".to_owned())
    );
    assert_eq!(
        name("http://127.0.0.1:10000/devstoreaccount1"),
        Some("devstoreaccount1".to_owned())
    );
    assert_eq!(name("https://example.com"), None);
}

#[test]
fn connection_strings_are_read() {
    let settings = AzureBlobSettings::from_connection_string(
        "DefaultEndpointsProtocol=https;AccountName=contoso;AccountKey=a2V5;EndpointSuffix=core.windows.net",
    )
    .unwrap();
    assert_eq!(settings.account_url, "https://contoso.blob.core.windows.net");
    assert!(matches!(
        settings.auth,
        AzureBlobAuth::SharedKey { account: Some(ref account), ref key } if account == "contoso" && key == "a2V5"
    ));

    let settings = AzureBlobSettings::from_connection_string("UseDevelopmentStorage=true").unwrap();
    assert_eq!(settings.account_url, "http://127.0.0.1:10000/devstoreaccount1");

    let settings = AzureBlobSettings::from_connection_string(
        "BlobEndpoint=https://x.blob.core.windows.net;SharedAccessSignature=sv=1&sig=abc",
    )
    .unwrap();
    assert!(matches!(settings.auth, AzureBlobAuth::Sas(ref sas) if sas == "sv=1&sig=abc"));

    assert!(AzureBlobSettings::from_connection_string("AccountKey=a2V5").is_err());
}

#[test]
fn signatures_in_messages_are_redacted() {
    let store = AzureBlobStore::new(AzureBlobSettings::new(
        "http://127.0.0.1:1/devstoreaccount1",
        AzureBlobAuth::Sas("sv=1&sig=abc".into()),
    ))
    .unwrap();
    assert_eq!(
        store.redact("error sending request for url (http://h/c?sv=1&sig=xyz%3D)".to_owned()),
        "error sending request for url (http://h/c?sv=1&sig=<redacted>)"
    );
    assert_eq!(
        store.redact("a sig=abc b sig=def".to_owned()),
        "a sig=<redacted> b sig=<redacted>"
    );
}

/// An account SAS (version 2019-12-12) for Azurite's development account,
/// signed as the Storage docs describe.
fn azurite_account_sas(account: &str, key: &str) -> String {
    use base64::Engine as _;
    use hmac::{Hmac, KeyInit, Mac};
    let (permissions, services, resource_types, expiry, protocol, version) =
        ("rwdlac", "b", "sco", "2099-01-01T00:00:00Z", "https,http", "2019-12-12");
    let string_to_sign =
        format!("{account}\n{permissions}\n{services}\n{resource_types}\n\n{expiry}\n\n{protocol}\n{version}\n");
    let key = base64::engine::general_purpose::STANDARD.decode(key).unwrap();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(string_to_sign.as_bytes());
    let signature = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    let signature = signature.replace('+', "%2B").replace('/', "%2F").replace('=', "%3D");
    format!(
        "sv={version}&ss={services}&srt={resource_types}&sp={permissions}&se={expiry}&spr={protocol}&sig={signature}"
    )
}

/// SAS auth against the Azurite that `scripts/azurite` started; the whole
/// behaviour suite (shared key) is in `tests/blob_behaviour.rs`, which also
/// reports a missing Azurite.
#[tokio::test]
#[ignore = "needs Azurite: scripts/test runs it, or scripts/azurite run -- cargo test -p bosun-consumers -- --ignored azurite"]
async fn sas_tokens_work_against_azurite() {
    let Ok(url) = std::env::var("BOSUN_TEST_AZURITE_URL") else {
        panic!("BOSUN_TEST_AZURITE_URL is not set: run this test under scripts/azurite run -- cargo test ...");
    };
    let sas = azurite_account_sas(AZURITE_ACCOUNT, AZURITE_KEY);
    let store = AzureBlobStore::new(AzureBlobSettings::new(
        url.clone(),
        AzureBlobAuth::Sas(format!("?{sas}")),
    ))
    .unwrap();
    let container = format!("sas-{}", &uuid::Uuid::now_v7().simple().to_string()[20..]);
    let blob = store
        .put(&container, "tenant/log.txt", b"signed".to_vec(), "text/plain")
        .await
        .unwrap();
    assert!(store.exists(&container, "tenant/log.txt").await.unwrap());
    assert_eq!(store.get(&blob).await.unwrap(), b"signed");

    // A tampered signature is refused, and the token stays out of the message.
    let forged = sas.replace("sig=", "sig=AAAA");
    let store = AzureBlobStore::new(AzureBlobSettings::new(url, AzureBlobAuth::Sas(forged))).unwrap();
    let err = store.get(&blob).await.unwrap_err();
    assert!(matches!(err, BlobError::Denied(_)), "{err}");
    assert!(!err.to_string().contains("sig=AAAA"), "{err}");
}
