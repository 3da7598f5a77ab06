//! The ACR Tasks double's rules: ARM's api-version and resource checks,
//! the SAS-signed upload, a run moving Queued → Running → Succeeded with
//! its image in the registry (same context, same digest), a failing run,
//! the log link, and the login server's token flow and OCI reads.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::time::Duration;

use bosun_azure_doubles::acr::{API_VERSION, AcrConfig, AcrDouble, RunStatus};
use bosun_azure_doubles::{Auth, Faults, Journal, TokenBook};
use serde_json::{Value, json};

const SUBSCRIPTION: &str = "4385cf00-2d3a-425a-832f-f4285b1c9dce";

struct Fixture {
    acr: AcrDouble,
    book: TokenBook,
    token: String,
    http: reqwest::Client,
}

async fn fixture() -> Fixture {
    let book = TokenBook::default();
    let mut config = AcrConfig::new(SUBSCRIPTION, "delivery-rg", "contoso");
    config.entra = Some(book.clone());
    let acr = AcrDouble::start(
        Faults::default(),
        Journal::default(),
        Auth::default().entra(book.clone()),
        config,
    )
    .await
    .unwrap();
    let token = book.issue("app", "https://management.azure.com/.default", Duration::from_secs(600));
    Fixture {
        acr,
        book,
        token,
        http: reqwest::Client::new(),
    }
}

fn context(dockerfile: &str, files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut all = vec![("Dockerfile", dockerfile.as_bytes())];
    all.extend_from_slice(files);
    for (path, bytes) in all {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        builder.append_data(&mut header, path, bytes).unwrap();
    }
    let tar = builder.into_inner().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar).unwrap();
    gz.finish().unwrap()
}

impl Fixture {
    fn arm(&self, suffix: &str) -> String {
        format!(
            "{}{}/{suffix}?api-version={API_VERSION}",
            self.acr.base_url(),
            self.acr.resource_path()
        )
    }

    async fn post(&self, url: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self.http.post(url).bearer_auth(&self.token);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let answer = request.send().await.unwrap();
        (answer.status().as_u16(), answer.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, url: &str) -> (u16, Value) {
        let answer = self.http.get(url).bearer_auth(&self.token).send().await.unwrap();
        (answer.status().as_u16(), answer.json().await.unwrap_or(Value::Null))
    }

    /// Uploads `bytes` and returns the relative path.
    async fn upload(&self, bytes: Vec<u8>) -> String {
        let (status, upload) = self.post(&self.arm("listBuildSourceUploadUrl"), None).await;
        assert_eq!(status, 200, "{upload}");
        let url = upload["uploadUrl"].as_str().unwrap();
        let put = self
            .http
            .put(url)
            .header("x-ms-blob-type", "BlockBlob")
            .body(bytes)
            .send()
            .await
            .unwrap();
        assert_eq!(put.status().as_u16(), 201);
        upload["relativePath"].as_str().unwrap().to_owned()
    }

    async fn schedule(&self, source: &str, tag: &str) -> (u16, Value) {
        self.post(
            &self.arm("scheduleRun"),
            Some(json!({
                "type": "DockerBuildRequest",
                "sourceLocation": source,
                "dockerFilePath": "Dockerfile",
                "imageNames": [format!("contoso/api:{tag}")],
                "isPushEnabled": true,
                "arguments": [{"name": "GREETING", "value": "hello", "isSecret": false}],
                "platform": {"os": "Linux", "architecture": "amd64"},
                "timeout": 3600
            })),
        )
        .await
    }
}

const DOCKERFILE: &str = "FROM mcr.microsoft.com/dotnet/aspnet:9.0\nARG GREETING\nENV GREETING=$GREETING\nWORKDIR /app\nCOPY app/ .\nRUN dotnet --info\nCMD [\"dotnet\", \"server.dll\"]\n";

#[tokio::test]
async fn arm_checks_the_api_version_the_resource_and_the_token() {
    let fixture = fixture().await;
    let url = format!(
        "{}{}/listBuildSourceUploadUrl",
        fixture.acr.base_url(),
        fixture.acr.resource_path()
    );
    let (status, body) = fixture.post(&url, None).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("MissingApiVersionParameter"))
    );
    let (status, body) = fixture.post(&format!("{url}?api-version=2025-04-01"), None).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("InvalidApiVersionParameter"))
    );
    let other = fixture
        .arm("listBuildSourceUploadUrl")
        .replace("/registries/contoso/", "/registries/fabrikam/");
    let (status, body) = fixture.post(&other, None).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("ResourceNotFound"))
    );
    let other = fixture
        .arm("listBuildSourceUploadUrl")
        .replace("/delivery-rg/", "/other-rg/");
    let (status, body) = fixture.post(&other, None).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("ResourceGroupNotFound"))
    );
    let (status, _) = fixture.get(&fixture.arm("runs/cz9")).await;
    assert_eq!(status, 404);
    fixture.book.expire(&fixture.token);
    let (status, body) = fixture.post(&fixture.arm("listBuildSourceUploadUrl"), None).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("InvalidAuthenticationToken"))
    );
}

#[tokio::test]
async fn the_upload_needs_its_signature_and_a_block_blob() {
    let fixture = fixture().await;
    let (_, upload) = fixture.post(&fixture.arm("listBuildSourceUploadUrl"), None).await;
    let url = upload["uploadUrl"].as_str().unwrap();
    assert!(upload["relativePath"].as_str().unwrap().starts_with("source/"));
    let forged = format!("{}x", url);
    let answer = fixture
        .http
        .put(&forged)
        .header("x-ms-blob-type", "BlockBlob")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 403);
    assert_eq!(answer.headers()["x-ms-error-code"], "AuthenticationFailed");
    let answer = fixture.http.put(url).body("x").send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 400);
    assert_eq!(answer.headers()["x-ms-error-code"], "MissingRequiredHeader");
    assert_eq!(fixture.acr.uploads(), 0);
    let answer = fixture
        .http
        .put(url)
        .header("x-ms-blob-type", "BlockBlob")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 201);
    assert_eq!(fixture.acr.uploads(), 1);
}

#[tokio::test]
async fn a_run_goes_queued_running_succeeded_and_its_image_is_in_the_registry() {
    let fixture = fixture().await;
    let source = fixture
        .upload(context(DOCKERFILE, &[("app/server.dll", b"server")]))
        .await;
    let (status, run) = fixture.schedule(&source, "1.0.0").await;
    assert_eq!(status, 200, "{run}");
    let run_id = run["properties"]["runId"].as_str().unwrap().to_owned();
    assert_eq!(run_id, "cc1");
    assert_eq!(run["name"], run_id);
    assert_eq!(run["properties"]["status"], "Queued");
    let url = fixture.arm(&format!("runs/{run_id}"));
    let (_, running) = fixture.get(&url).await;
    assert_eq!(running["properties"]["status"], "Running");
    let (_, done) = fixture.get(&url).await;
    assert_eq!(done["properties"]["status"], "Succeeded", "{done}");
    let output = &done["properties"]["outputImages"][0];
    assert_eq!(output["registry"], "contoso.azurecr.io");
    assert_eq!(
        (output["repository"].as_str(), output["tag"].as_str()),
        (Some("contoso/api"), Some("1.0.0"))
    );
    let digest = output["digest"].as_str().unwrap();
    let image = fixture.acr.image("contoso/api", "1.0.0").unwrap();
    assert_eq!(image.digest, digest);
    let manifest: Value = serde_json::from_slice(&image.manifest).unwrap();
    assert_eq!(manifest["layers"].as_array().unwrap().len(), 1, "one COPY, one layer");

    // The log, through its read SAS.
    let (_, link) = fixture
        .post(&fixture.arm(&format!("runs/{run_id}/listLogSasUrl")), None)
        .await;
    let log = fixture
        .http
        .get(link["logLink"].as_str().unwrap())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(log.contains("Step 5/7 : COPY app/ ."), "{log}");
    assert!(
        log.contains("Successfully pushed image: contoso.azurecr.io/contoso/api:1.0.0"),
        "{log}"
    );

    // The same context again gives the same digest under a second tag.
    let source = fixture
        .upload(context(DOCKERFILE, &[("app/server.dll", b"server")]))
        .await;
    let (_, second) = fixture.schedule(&source, "1.0.1").await;
    let second_url = fixture.arm(&format!("runs/{}", second["properties"]["runId"].as_str().unwrap()));
    fixture.get(&second_url).await;
    let (_, done) = fixture.get(&second_url).await;
    assert_eq!(done["properties"]["outputImages"][0]["digest"], digest);
    assert_eq!(fixture.acr.tags("contoso/api"), ["1.0.0", "1.0.1"]);
    assert_eq!(fixture.acr.manifests(), 1);
    let runs = fixture.acr.runs();
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|run| run.status == RunStatus::Succeeded));
}

#[tokio::test]
async fn a_failing_step_fails_the_run_and_pushes_nothing() {
    let fixture = fixture().await;
    let source = fixture.upload(context("FROM scratch\nRUN exit 3\n", &[])).await;
    let (_, run) = fixture.schedule(&source, "1.0.0").await;
    let url = fixture.arm(&format!("runs/{}", run["properties"]["runId"].as_str().unwrap()));
    fixture.get(&url).await;
    let (_, done) = fixture.get(&url).await;
    assert_eq!(done["properties"]["status"], "Failed");
    assert_eq!(
        done["properties"]["runErrorMessage"],
        "failed during run, err: exit status 3"
    );
    assert!(done["properties"].get("outputImages").is_none());
    assert_eq!(fixture.acr.manifests(), 0);

    // A run request the schema refuses is not scheduled.
    let (status, body) = fixture
        .post(
            &fixture.arm("scheduleRun"),
            Some(json!({"type": "DockerBuildRequest", "platform": {"os": "Linux"}})),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("InvalidRequestContent"))
    );
    assert_eq!(fixture.acr.runs().len(), 1);
}

#[tokio::test]
async fn the_login_server_exchanges_an_entra_token_and_serves_the_image() {
    let fixture = fixture().await;
    let source = fixture
        .upload(context(DOCKERFILE, &[("app/server.dll", b"server")]))
        .await;
    let (_, run) = fixture.schedule(&source, "1.0.0").await;
    let url = fixture.arm(&format!("runs/{}", run["properties"]["runId"].as_str().unwrap()));
    fixture.get(&url).await;
    fixture.get(&url).await;
    let registry = fixture.acr.registry_url();
    let manifest_url = format!("{registry}/v2/contoso/api/manifests/1.0.0");

    let anonymous = fixture.http.get(&manifest_url).send().await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let challenge = anonymous.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(challenge.contains("service=\"contoso.azurecr.io\""), "{challenge}");
    assert!(
        challenge.contains("scope=\"repository:contoso/api:pull\""),
        "{challenge}"
    );

    let form = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(name, value)| format!("{name}={}", value.replace(':', "%3A").replace('/', "%2F")))
            .collect::<Vec<_>>()
            .join("&")
    };
    let exchange = |token: String| {
        let body = form(&[
            ("grant_type", "access_token"),
            ("service", "contoso.azurecr.io"),
            ("access_token", &token),
        ]);
        fixture
            .http
            .post(format!("{registry}/oauth2/exchange"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
    };
    assert_eq!(exchange("made-up".into()).await.unwrap().status().as_u16(), 401);
    let refresh: Value = exchange(fixture.token.clone()).await.unwrap().json().await.unwrap();
    let refresh = refresh["refresh_token"].as_str().unwrap();
    let body = form(&[
        ("grant_type", "refresh_token"),
        ("service", "contoso.azurecr.io"),
        ("scope", "repository:contoso/api:pull"),
        ("refresh_token", refresh),
    ]);
    let access: Value = fixture
        .http
        .post(format!("{registry}/oauth2/token"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let access = access["access_token"].as_str().unwrap();
    let answer = fixture
        .http
        .get(&manifest_url)
        .bearer_auth(access)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let digest = answer.headers()["docker-content-digest"].to_str().unwrap().to_owned();
    let bytes = answer.bytes().await.unwrap();
    assert_eq!(digest, fixture.acr.image("contoso/api", "1.0.0").unwrap().digest);
    let manifest: Value = serde_json::from_slice(&bytes).unwrap();
    let layer = manifest["layers"][0]["digest"].as_str().unwrap();
    let blob = fixture
        .http
        .get(format!("{registry}/v2/contoso/api/blobs/{layer}"))
        .bearer_auth(access)
        .send()
        .await
        .unwrap();
    assert_eq!(blob.status().as_u16(), 200);
    let missing = fixture
        .http
        .get(format!("{registry}/v2/contoso/api/manifests/9.9.9"))
        .bearer_auth(access)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["errors"][0]["code"], "MANIFEST_UNKNOWN");
    let other = fixture
        .http
        .get(format!("{registry}/v2/fabrikam/api/manifests/1.0.0"))
        .bearer_auth(access)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status().as_u16(), 401, "the token is for contoso/api only");
}
