//! Conformance of the Azure Artifacts double to the NuGet Server API
//! documents (learn.microsoft.com/nuget/api), checked over HTTP with a
//! plain client: no NuGet client runs here (neither `dotnet` nor `nuget`
//! is installed), so each assertion names the document rule it checks.
//!
//! Documents: "Service index" (`service-index`), "Push and Delete"
//! (`package-publish-resource`), "Package Content"
//! (`package-base-address-resource`), "Package versioning"
//! (learn.microsoft.com/nuget/concepts/package-versioning, *Normalized
//! version numbers*) and the ".nuspec reference" (*Required metadata
//! elements*).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;

use bosun_azure_doubles::artifacts::{ArtifactsDouble, SERVICE};
use bosun_azure_doubles::{Auth, Fault, FaultRule, Faults, Journal};
use serde_json::Value;

const PAT: &str = "feed-pat";

async fn double() -> ArtifactsDouble {
    let double = ArtifactsDouble::start(
        Faults::default(),
        Journal::default(),
        Auth::default().basic_password(PAT),
        "contoso",
    )
    .await
    .unwrap();
    double.create_feed(Some("Delivery"), "packages");
    double
}

fn nuspec(id: &str, version: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<package xmlns=\"http://schemas.microsoft.com/packaging/2013/05/nuspec.xsd\">\
         <metadata><id>{id}</id><version>{version}</version><authors>contoso</authors><description>a package</description></metadata></package>"
    )
}

/// A `.nupkg` as `dotnet pack` writes one: deflated entries, the manifest
/// at the root.
fn nupkg(files: &[(&str, &str)]) -> Vec<u8> {
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, content) in files {
        writer.start_file(*name, options).unwrap();
        writer.write_all(content.as_bytes()).unwrap();
    }
    writer.finish().unwrap().into_inner()
}

fn package(id: &str, version: &str, content: &str) -> Vec<u8> {
    nupkg(&[
        ("_rels/.rels", "<Relationships/>"),
        (&format!("{id}.nuspec"), &nuspec(id, version)),
        ("content/readme.txt", content),
        ("[Content_Types].xml", "<Types/>"),
    ])
}

fn form(package: &[u8]) -> (String, Vec<u8>) {
    let boundary = "nuget-boundary";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"package\"; filename=\"package.nupkg\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(package);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

struct Client {
    http: reqwest::Client,
    feed: String,
}

impl Client {
    fn new(double: &ArtifactsDouble) -> Self {
        Self {
            http: reqwest::Client::new(),
            feed: format!("{}/Delivery/_packaging/packages/nuget", double.base_url()),
        }
    }

    async fn push(&self, package: &[u8]) -> (u16, Value) {
        let (content_type, body) = form(package);
        let answer = self
            .http
            .put(format!("{}/v2/", self.feed))
            .basic_auth("", Some(PAT))
            .header("X-NuGet-ApiKey", "AzureDevOps")
            .header("Content-Type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        (status, answer.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, url: &str) -> (u16, Vec<u8>) {
        let answer = self.http.get(url).basic_auth("", Some(PAT)).send().await.unwrap();
        (answer.status().as_u16(), answer.bytes().await.unwrap().to_vec())
    }
}

/// "Service index": a JSON object with `version` `3.0.0` and `resources`,
/// each with `@id` and `@type`; clients find the push endpoint by
/// `PackagePublish/2.0.0` and the flat container by
/// `PackageBaseAddress/3.0.0`, and both `@id`s are usable.
#[tokio::test]
async fn the_service_index_names_the_publish_and_content_resources() {
    let double = double().await;
    let client = Client::new(&double);
    let (status, body) = client.get(&double.index_url(Some("Delivery"), "packages")).await;
    assert_eq!(status, 200);
    let index: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(index["version"], "3.0.0");
    let resource = |kind: &str| {
        index["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["@type"] == kind)
            .and_then(|r| r["@id"].as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("no {kind} in {index}"))
    };
    let publish = resource("PackagePublish/2.0.0");
    let base = resource("PackageBaseAddress/3.0.0");
    assert_eq!(publish, format!("{}/v2/", client.feed));
    assert_eq!(base, format!("{}/v3/flat2/", client.feed));
    let (status, _) = client.get(&format!("{base}nothing.here/index.json")).await;
    assert_eq!(status, 404, "Package Content: no versions of an id is 404");
}

/// "Push and Delete": a push is `PUT` of a multipart form with the package
/// as its file and an `X-NuGet-ApiKey`; success is 201 or 202; a package
/// with the same id and version answers 409 ("If the package with the
/// provided ID and version already exists, nuget.org will reject the
/// push"; Azure Artifacts versions are immutable). "Package versioning":
/// `1.0`, `1.0.0.0` and `1.0.0+build` are the version `1.0.0`, ids compare
/// case-insensitively, so each is the same package.
#[tokio::test]
async fn a_version_is_pushed_once_and_every_spelling_of_it_is_refused_after() {
    let double = double().await;
    let client = Client::new(&double);
    let first = package("Contoso.Payments", "1.0.0", "one");
    let (status, _) = client.push(&first).await;
    assert!(matches!(status, 201 | 202), "{status}");
    for (id, version) in [
        ("Contoso.Payments", "1.0.0"),
        ("contoso.payments", "1.0"),
        ("CONTOSO.PAYMENTS", "1.0.0.0"),
        ("Contoso.Payments", "1.0.0+build.7"),
        ("Contoso.Payments", "01.00.00"),
    ] {
        let (status, body) = client.push(&package(id, version, "other content")).await;
        assert_eq!(status, 409, "{id} {version}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("Contoso.Payments 1.0.0"), "{message}");
        assert_eq!(body["typeKey"], "PackageExistsException");
    }
    assert_eq!(
        double.versions(Some("Delivery"), "packages", "Contoso.Payments"),
        vec!["1.0.0".to_owned()]
    );
    let stored = double
        .package(Some("delivery"), "PACKAGES", "contoso.payments", "1.0")
        .unwrap();
    assert_eq!(stored.nupkg, first, "the first push is kept");
}

/// "Package Content": `GET {@id}/{LOWER_ID}/index.json` lists "lowercased,
/// normalized NuGet version strings" without build metadata;
/// `{LOWER_ID}/{LOWER_VERSION}/{LOWER_ID}.{LOWER_VERSION}.nupkg` is the
/// package and `{LOWER_ID}/{LOWER_VERSION}/{LOWER_ID}.nuspec` its manifest.
/// Names not lower-cased and normalized are not the package's URLs. GET
/// and HEAD are both served.
#[tokio::test]
async fn the_flat_container_serves_lower_case_normalized_versions_and_the_bytes_pushed() {
    let double = double().await;
    let client = Client::new(&double);
    let pushed = [
        ("2.0.0-RC.1+sha.abc", "2.0.0-rc.1"),
        ("1.01", "1.1.0"),
        ("2.0.0", "2.0.0"),
        ("2.0.0-beta.11", "2.0.0-beta.11"),
        ("2.0.0-beta.2", "2.0.0-beta.2"),
        ("1.0.0.4", "1.0.0.4"),
    ];
    let mut bytes = Vec::new();
    for (version, _) in pushed {
        bytes.push(package("Contoso.Api", version, version));
        let (status, _) = client.push(bytes.last().unwrap()).await;
        assert_eq!(status, 202, "{version}");
    }
    let base = format!("{}/v3/flat2", client.feed);
    let (status, body) = client.get(&format!("{base}/contoso.api/index.json")).await;
    assert_eq!(status, 200);
    let index: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        index,
        serde_json::json!({ "versions": ["1.0.0.4", "1.1.0", "2.0.0-beta.2", "2.0.0-beta.11", "2.0.0-rc.1", "2.0.0"] }),
        "NuGet's order: numbers, pre-release labels numerically, a release last"
    );
    for ((written, lower), pushed_bytes) in pushed.iter().zip(&bytes) {
        let (status, body) = client
            .get(&format!("{base}/contoso.api/{lower}/contoso.api.{lower}.nupkg"))
            .await;
        assert_eq!(status, 200, "{lower}");
        assert_eq!(&body, pushed_bytes);
        let (status, body) = client
            .get(&format!("{base}/contoso.api/{lower}/contoso.api.nuspec"))
            .await;
        assert_eq!(
            (status, String::from_utf8(body).unwrap()),
            (200, nuspec("Contoso.Api", written))
        );
    }
    // "All URLs found in the package content resource support the HTTP
    // methods GET and HEAD."
    let head = client
        .http
        .head(format!("{base}/contoso.api/2.0.0/contoso.api.2.0.0.nupkg"))
        .basic_auth("", Some(PAT))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status().as_u16(), 200);
    // (reqwest's `content_length` is the empty body's for a HEAD: read the
    // header.)
    let length = head.headers()["content-length"].to_str().unwrap().to_owned();
    assert_eq!(length, bytes[2].len().to_string());
    assert!(head.bytes().await.unwrap().is_empty());
    for not_lower in [
        "Contoso.Api/2.0.0/Contoso.Api.2.0.0.nupkg",
        "contoso.api/2.0.0-RC.1/contoso.api.2.0.0-RC.1.nupkg",
        "contoso.api/1.01/contoso.api.1.01.nupkg",
        "contoso.api/2.0.0-rc.1+sha.abc/contoso.api.2.0.0-rc.1+sha.abc.nupkg",
        "contoso.api/3.0.0/contoso.api.3.0.0.nupkg",
        "Contoso.Api/index.json",
    ] {
        assert_eq!(client.get(&format!("{base}/{not_lower}")).await.0, 404, "{not_lower}");
    }
}

/// "Push and Delete": "400 Bad Request — the provided package is
/// invalid". ".nuspec reference": `id`, `version`, `description` and
/// `authors` are required, an id is at most 100 characters of the id
/// syntax, a version must be a NuGet version; a package has one manifest
/// at its root. The push must be a multipart form with `X-NuGet-ApiKey`
/// ("Request parameters": required).
#[tokio::test]
async fn invalid_packages_and_pushes_are_refused_with_400() {
    let double = double().await;
    let client = Client::new(&double);
    let without = |element: &str| {
        nuspec("Contoso.Bad", "1.0.0")
            .replace(&format!("<{element}>"), "<x>")
            .replace(&format!("</{element}>"), "</x>")
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("not a zip", b"PK but not really a zip".to_vec()),
        ("no manifest", nupkg(&[("content/a.txt", "a")])),
        (
            "manifest not at the root",
            nupkg(&[("sub/Contoso.Bad.nuspec", &nuspec("Contoso.Bad", "1.0.0"))]),
        ),
        (
            "two manifests",
            nupkg(&[("a.nuspec", &nuspec("A", "1.0.0")), ("b.nuspec", &nuspec("B", "1.0.0"))]),
        ),
        ("no id", nupkg(&[("a.nuspec", &without("id"))])),
        ("no version", nupkg(&[("a.nuspec", &without("version"))])),
        ("no authors", nupkg(&[("a.nuspec", &without("authors"))])),
        ("no description", nupkg(&[("a.nuspec", &without("description"))])),
        ("bad id", package("Contoso..Bad", "1.0.0", "")),
        ("id too long", package(&"a".repeat(101), "1.0.0", "")),
        ("bad version", package("Contoso.Bad", "1.0.0-be_ta", "")),
        ("five numbers", package("Contoso.Bad", "1.0.0.0.1", "")),
        (
            "malformed xml",
            nupkg(&[("a.nuspec", "<package><metadata><id>A</version></metadata></package>")]),
        ),
    ];
    for (case, bytes) in cases {
        let (status, body) = client.push(&bytes).await;
        assert_eq!(status, 400, "{case}: {body}");
        assert_eq!(body["typeKey"], "InvalidPackageException", "{case}");
    }
    let good = package("Contoso.Good", "1.0.0", "");
    let bare = client
        .http
        .put(format!("{}/v2/", client.feed))
        .basic_auth("", Some(PAT))
        .header("X-NuGet-ApiKey", "key")
        .header("Content-Type", "application/octet-stream")
        .body(good.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status().as_u16(), 400, "the package must come as a form's file");
    let (content_type, body) = form(&good);
    let keyless = client
        .http
        .put(format!("{}/v2/", client.feed))
        .basic_auth("", Some(PAT))
        .header("Content-Type", content_type)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(keyless.status().as_u16(), 400, "X-NuGet-ApiKey is required");
    assert!(
        double.packages(Some("Delivery"), "packages").is_empty(),
        "nothing refused was kept"
    );
}

/// Azure Artifacts: a deleted version is no longer served, and its id and
/// version can never be pushed again (409). Feeds other than those made
/// answer 404; the PAT (HTTP Basic) is required.
#[tokio::test]
async fn deleted_versions_stay_taken_and_unknown_feeds_and_callers_are_refused() {
    let double = double().await;
    let client = Client::new(&double);
    assert_eq!(client.push(&package("Contoso.Gone", "1.0.0", "")).await.0, 202);
    assert!(double.delete_version(Some("Delivery"), "packages", "Contoso.Gone", "1.0.0"));
    let base = format!("{}/v3/flat2", client.feed);
    assert_eq!(client.get(&format!("{base}/contoso.gone/index.json")).await.0, 404);
    assert_eq!(
        client
            .get(&format!("{base}/contoso.gone/1.0.0/contoso.gone.1.0.0.nupkg"))
            .await
            .0,
        404
    );
    let (status, body) = client.push(&package("Contoso.Gone", "1.0.0", "")).await;
    assert_eq!(status, 409, "{body}");

    let other = format!(
        "{}/Delivery/_packaging/elsewhere/nuget/v3/index.json",
        double.base_url()
    );
    let (status, body) = client.get(&other).await;
    assert_eq!(status, 404);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["typeKey"], "FeedIdNotFoundException");
    let org_feed = format!("{}/_packaging/packages/nuget/v3/index.json", double.base_url());
    assert_eq!(
        client.get(&org_feed).await.0,
        404,
        "the project's feed is not the organization's"
    );
    double.create_feed(None, "packages");
    assert_eq!(client.get(&org_feed).await.0, 200);

    let anonymous = reqwest::get(double.index_url(Some("Delivery"), "packages"))
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
}

/// The shared fault plan answers a push with 429 (`Retry-After`) and 503
/// before the double sees it: nothing is stored until a push gets through.
#[tokio::test]
async fn injected_faults_answer_before_the_feed_and_store_nothing() {
    let double = double().await;
    let client = Client::new(&double);
    let faults = double.running().faults();
    faults.add(FaultRule::new(SERVICE, "/v2/", Fault::Throttle { retry_after_secs: 3 }, 1).method("PUT"));
    faults.add(
        FaultRule::new(SERVICE, "/v2/", Fault::Status(503), 1)
            .method("PUT")
            .after(1),
    );
    let bytes = package("Contoso.Retry", "1.2.3", "");
    assert_eq!(client.push(&bytes).await.0, 429);
    assert!(
        double
            .versions(Some("Delivery"), "packages", "Contoso.Retry")
            .is_empty()
    );
    assert_eq!(client.push(&bytes).await.0, 503);
    assert_eq!(client.push(&bytes).await.0, 202);
    assert_eq!(client.push(&bytes).await.0, 409);
    assert_eq!(
        double.versions(Some("Delivery"), "packages", "Contoso.Retry"),
        vec!["1.2.3".to_owned()]
    );
    assert_eq!(double.running().journal().succeeded(SERVICE, "PUT", "/v2/"), 1);
}
