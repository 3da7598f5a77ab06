//! bosun signs in to PostgreSQL with Microsoft Entra ID tokens
//! (`BOSUN_DATABASE_AUTH`), shown against a PostgreSQL server that asks
//! for a password and writes down what it gets: a local PostgreSQL trusts
//! every client and would never see one.
//!
//! The server ([`FakePostgres`]) speaks the start of the protocol as
//! PostgreSQL does: it answers an SSLRequest with `N`, reads the
//! StartupMessage, asks for a cleartext password
//! (AuthenticationCleartextPassword), reads the PasswordMessage, records
//! the user and the password, and then either refuses the sign-in (an
//! ErrorResponse `28P01`, as Azure Database for PostgreSQL answers a bad
//! token) or lets the connection in (AuthenticationOk, BackendKeyData,
//! ReadyForQuery).
//!
//! The tokens come from the Entra double, which issues them into a
//! [`TokenBook`]: a recorded password is shown to be the token Entra issued
//! to the database identity for the `ossrdbms-aad` scope, never a token
//! made up on the way.
//!
//! - `bosun migrate` (the binary, with the settings the rendered AKS
//!   overlay gives a pod and the variables the workload identity webhook
//!   injects, the authority being the Entra double over HTTPS) signs in as
//!   the user of `BOSUN_DATABASE_URL` with a token issued to
//!   `BOSUN_DATABASE_CLIENT_ID`, not to the pod's own identity, and prints
//!   no token, even at debug level.
//! - The pool (in process, with `azure_identity`'s own
//!   `WorkloadIdentityCredential`) gives each new connection the cached
//!   token while it has minutes to live, and a new one once it nears its
//!   expiry.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use azure_identity::{ClientAssertionCredentialOptions, WorkloadIdentityCredential, WorkloadIdentityCredentialOptions};
use bosun::backends::postgres::{OSSRDBMS_SCOPE, PasswordSource, PoolSettings, PostgresDatabase};
use bosun_azure_doubles::entra::{
    EntraDouble, FederatedCredential, FederatedToken, GrantKind, TOKEN_EXCHANGE_AUDIENCE,
};
use bosun_azure_doubles::{Faults, Journal, TlsIdentity, TokenBook};
use bosun_consumers::delivery::azure::credential::{REFRESH_BEFORE_EXPIRY, TokenCredential};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const TENANT_ID: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const ISSUER: &str = "https://oidc.prod-aks.azure.com/postgres-entra/";
/// The identity every component's pods sign in to the database as
/// (main.bicep's `bosun-database`, the server's Entra administrator).
const DATABASE_CLIENT_ID: &str = "0b5c8e1a-3f2d-4c7b-9e6a-5d4c3b2a1f00";
/// The PostgreSQL role of that identity: its name.
const DATABASE_USER: &str = "bosun-database";
/// A pod's own identity (the one its ServiceAccount names).
const POD_CLIENT_ID: &str = "7d1e2f3a-4b5c-4d6e-8f90-a1b2c3d4e5f6";
const SERVICE_ACCOUNT: &str = "system:serviceaccount:bosun:bosun-commit";

/// What one connection sent before the server answered its password.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SignIn {
    user: String,
    database: Option<String>,
    password: String,
    /// Whether it asked for TLS first (and was told `N`).
    asked_for_tls: bool,
}

/// A PostgreSQL server that asks for a cleartext password and records it.
struct FakePostgres {
    port: u16,
    sign_ins: Arc<Mutex<Vec<SignIn>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakePostgres {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the server answers a password with.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// ErrorResponse 28P01 (invalid_password), then close.
    Refuse,
    /// AuthenticationOk, BackendKeyData, ReadyForQuery; then it waits for
    /// the client to go.
    Accept,
}

impl FakePostgres {
    async fn start(answer: Answer) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let sign_ins = Arc::new(Mutex::new(Vec::new()));
        let recorded = sign_ins.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    if let Err(err) = serve_connection(stream, answer, &recorded).await {
                        eprintln!("fake PostgreSQL: {err}");
                    }
                });
            }
        });
        Self { port, sign_ins, task }
    }

    fn sign_ins(&self) -> Vec<SignIn> {
        self.sign_ins.lock().unwrap().clone()
    }
}

const SSL_REQUEST: i32 = 80_877_103;
const PROTOCOL_3: i32 = 196_608;

async fn serve_connection(mut stream: TcpStream, answer: Answer, recorded: &Mutex<Vec<SignIn>>) -> std::io::Result<()> {
    let invalid = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let mut asked_for_tls = false;
    // The StartupMessage, after an SSLRequest if the client sends one.
    let body = loop {
        let length = stream.read_i32().await?;
        let code = stream.read_i32().await?;
        let rest = usize::try_from(length - 8).map_err(|_| invalid("a negative length"))?;
        let mut body = vec![0; rest];
        stream.read_exact(&mut body).await?;
        match code {
            SSL_REQUEST => {
                asked_for_tls = true;
                stream.write_all(b"N").await?;
            }
            PROTOCOL_3 => break body,
            other => return Err(invalid(&format!("startup code {other}"))),
        }
    };
    let mut parameters = body
        .split(|byte| *byte == 0)
        .map(|part| String::from_utf8_lossy(part).into_owned());
    let mut user = None;
    let mut database = None;
    while let Some(name) = parameters.next().filter(|name| !name.is_empty()) {
        let value = parameters.next().unwrap_or_default();
        match name.as_str() {
            "user" => user = Some(value),
            "database" => database = Some(value),
            _ => {}
        }
    }
    // AuthenticationCleartextPassword.
    stream.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 3]).await?;
    // The PasswordMessage.
    let kind = stream.read_u8().await?;
    if kind != b'p' {
        return Err(invalid(&format!(
            "message {:?} instead of a password",
            char::from(kind)
        )));
    }
    let length = stream.read_i32().await?;
    let mut password = vec![0; usize::try_from(length - 4).map_err(|_| invalid("a negative length"))?];
    stream.read_exact(&mut password).await?;
    let password = String::from_utf8_lossy(password.strip_suffix(&[0]).unwrap_or(&password)).into_owned();
    let user = user.ok_or_else(|| invalid("a startup message without a user"))?;
    recorded.lock().unwrap().push(SignIn {
        user: user.clone(),
        database,
        password,
        asked_for_tls,
    });
    match answer {
        Answer::Refuse => {
            let mut fields = Vec::new();
            for (code, text) in [
                (b'S', "FATAL".to_owned()),
                (b'V', "FATAL".to_owned()),
                (b'C', "28P01".to_owned()),
                (b'M', format!("password authentication failed for user \"{user}\"")),
            ] {
                fields.push(code);
                fields.extend_from_slice(text.as_bytes());
                fields.push(0);
            }
            fields.push(0);
            let mut message = vec![b'E'];
            message.extend_from_slice(&i32::try_from(fields.len() + 4).unwrap().to_be_bytes());
            message.extend_from_slice(&fields);
            stream.write_all(&message).await?;
        }
        Answer::Accept => {
            // AuthenticationOk, BackendKeyData, ReadyForQuery (idle).
            stream.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 0]).await?;
            stream.write_all(&[b'K', 0, 0, 0, 12, 0, 0, 0, 42, 0, 0, 0, 7]).await?;
            stream.write_all(&[b'Z', 0, 0, 0, 5, b'I']).await?;
            // Until the client terminates or goes.
            let mut sink = [0; 256];
            while stream.read(&mut sink).await? > 0 {}
        }
    }
    Ok(())
}

/// The Entra double with the database identity trusting the pod's
/// ServiceAccount (main.bicep's federated credential per component), and
/// the pod's own identity trusting it too.
async fn entra(tls: bool) -> (EntraDouble, TokenBook) {
    let book = TokenBook::default();
    let (faults, journal) = (Faults::default(), Journal::default());
    let entra = if tls {
        EntraDouble::start_tls(faults, journal, book.clone(), TlsIdentity::loopback()).await
    } else {
        EntraDouble::start(faults, journal, book.clone()).await
    }
    .unwrap();
    for client_id in [DATABASE_CLIENT_ID, POD_CLIENT_ID] {
        entra.add_federated_credential(
            TENANT_ID,
            client_id,
            FederatedCredential {
                issuer: ISSUER.into(),
                subject: SERVICE_ACCOUNT.into(),
                audience: TOKEN_EXCHANGE_AUDIENCE.into(),
            },
        );
    }
    (entra, book)
}

/// Asserts `token` is one the double issued to the database identity for
/// PostgreSQL's scope.
fn assert_issued_for_the_database(book: &TokenBook, token: &str) {
    let issued = book
        .check(token)
        .expect("the password is a token the Entra double issued");
    assert_eq!(issued.client_id, DATABASE_CLIENT_ID, "issued to the database identity");
    assert_eq!(issued.scope, OSSRDBMS_SCOPE);
}

#[tokio::test]
async fn migrate_signs_in_as_the_database_identity_with_its_entra_token() {
    let (entra, book) = entra(true).await;
    let server = FakePostgres::start(Answer::Refuse).await;
    let scratch = tempfile::tempdir().unwrap();
    let token_file = scratch.path().join("azure-identity-token");
    std::fs::write(&token_file, FederatedToken::new(ISSUER, SERVICE_ACCOUNT).jwt()).unwrap();
    let certificate = scratch.path().join("entra-double.crt");
    std::fs::write(&certificate, TlsIdentity::loopback().certificate()).unwrap();
    let url = format!(
        "postgres://{DATABASE_USER}@127.0.0.1:{}/bosun?sslmode=prefer",
        server.port
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_bosun"));
    command.env_clear();
    for name in ["PATH", "HOME"] {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command
        .args(["migrate", "--compatible-only"])
        .env("BOSUN_DATA_DIR", scratch.path().join("data"))
        .env("BOSUN_DATABASE_URL", &url)
        .env("BOSUN_DATABASE_AUTH", "workload-identity")
        .env("BOSUN_DATABASE_CLIENT_ID", DATABASE_CLIENT_ID)
        // What the workload identity webhook injects: the pod's own
        // identity, which is not the database's.
        .env("AZURE_CLIENT_ID", POD_CLIENT_ID)
        .env("AZURE_TENANT_ID", TENANT_ID)
        .env("AZURE_FEDERATED_TOKEN_FILE", &token_file)
        .env("AZURE_AUTHORITY_HOST", format!("{}/", entra.base_url()))
        .env("SSL_CERT_FILE", &certificate)
        .env("RUST_LOG", "debug")
        .current_dir(scratch.path())
        .stdin(Stdio::null());
    // Off the runtime's thread: the Entra double and the server run on it.
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "the server refused the sign-in:\n{stderr}");
    assert!(
        stderr.contains("password authentication failed"),
        "the server's refusal is reported:\n{stderr}"
    );

    let sign_ins = server.sign_ins();
    assert_eq!(sign_ins.len(), 1, "one sign-in, not retried: {sign_ins:?}");
    let sign_in = &sign_ins[0];
    assert_eq!(sign_in.user, DATABASE_USER, "the user of BOSUN_DATABASE_URL");
    assert_eq!(sign_in.database.as_deref(), Some("bosun"));
    assert!(sign_in.asked_for_tls, "sslmode=prefer asks for TLS first");
    assert_issued_for_the_database(&book, &sign_in.password);
    let grants = entra.grants();
    assert!(
        grants.iter().all(|grant| grant.client_id == DATABASE_CLIENT_ID
            && grant.scope == OSSRDBMS_SCOPE
            && grant.kind == GrantKind::FederatedAssertion),
        "only the database identity's token for PostgreSQL, exchanged for the pod's federated token: {grants:?}"
    );
    assert!(
        !stderr.contains(&sign_in.password) && !stdout.contains(&sign_in.password),
        "the token is never printed:\n{stderr}"
    );
}

#[tokio::test]
async fn a_new_connection_gets_a_new_token_once_the_old_one_nears_expiry() {
    let (entra, book) = entra(false).await;
    // Tokens that come within the refresh margin two seconds after they
    // are issued.
    entra.set_token_lifetime(REFRESH_BEFORE_EXPIRY + Duration::from_secs(2));
    let server = FakePostgres::start(Answer::Accept).await;
    let scratch = tempfile::tempdir().unwrap();
    let token_file = scratch.path().join("azure-identity-token");
    std::fs::write(&token_file, FederatedToken::new(ISSUER, SERVICE_ACCOUNT).jwt()).unwrap();
    let client_options = bosun_azure_doubles::entra::identity::client_options(&entra);
    let credential: Arc<dyn TokenCredential> =
        WorkloadIdentityCredential::new(Some(WorkloadIdentityCredentialOptions {
            credential_options: ClientAssertionCredentialOptions { client_options },
            client_id: Some(DATABASE_CLIENT_ID.into()),
            tenant_id: Some(TENANT_ID.into()),
            token_file_path: Some(token_file),
        }))
        .unwrap();
    let url = format!(
        "postgres://{DATABASE_USER}@127.0.0.1:{}/bosun?sslmode=disable",
        server.port
    );
    let settings = PoolSettings {
        max_connections: 4,
        min_connections: 0,
        acquire_timeout: Duration::from_secs(10),
    };
    let database = PostgresDatabase::connect_as(&url, settings, &PasswordSource::EntraId(credential))
        .await
        .unwrap();
    let pool = database.pool();
    // A new connection: close each one, so the next acquire opens another.
    let new_connection = || async {
        let connection = pool.acquire().await.unwrap();
        connection.close().await.unwrap();
    };
    new_connection().await;
    new_connection().await;
    let first = server.sign_ins();
    assert!(first.len() >= 2, "a connection per acquire: {first:?}");
    let token = first[0].password.clone();
    assert_issued_for_the_database(&book, &token);
    assert!(
        first
            .iter()
            .all(|sign_in| sign_in.password == token && sign_in.user == DATABASE_USER),
        "while it has minutes to live, every new connection gets the cached token: {first:?}"
    );
    assert_eq!(entra.grants().len(), 1, "one token so far");

    let deadline = Instant::now() + Duration::from_secs(30);
    let renewed = loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        new_connection().await;
        let last = server.sign_ins().pop().unwrap();
        if last.password != token {
            break last;
        }
        assert!(
            Instant::now() < deadline,
            "30 s after the token came within {REFRESH_BEFORE_EXPIRY:?} of its expiry, new connections still get it"
        );
    };
    assert_eq!(renewed.user, DATABASE_USER);
    assert_issued_for_the_database(&book, &renewed.password);
    let grants = entra.grants();
    assert!(grants.len() >= 2, "{grants:?}");
    assert!(
        grants
            .iter()
            .all(|grant| grant.client_id == DATABASE_CLIENT_ID && grant.scope == OSSRDBMS_SCOPE),
        "{grants:?}"
    );
    // The connections opened before keep working: the pool is still open.
    assert!(!pool.is_closed());
    pool.close().await;
}
