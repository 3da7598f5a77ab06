//! An Azure Artifacts NuGet feed double: the NuGet v3 protocol as Azure
//! Artifacts serves it under
//! `{organization}[/{project}]/_packaging/{feed}/nuget/`, with packages
//! kept in memory.
//!
//! What it serves and checks, per the NuGet Server API documents
//! (learn.microsoft.com/nuget/api):
//!
//! - `GET v3/index.json`, the service index ("Service index"): `version`
//!   `3.0.0` and the resources this double serves, `PackagePublish/2.0.0`
//!   (`v2/`, as Azure Artifacts names its push endpoint) and
//!   `PackageBaseAddress/3.0.0` (`v3/flat2/`).
//! - `PUT v2/` (and `PUT v2/package`), a push ("Push and Delete"): the
//!   `X-NuGet-ApiKey` header must be present (the document marks it
//!   required; Azure Artifacts authenticates by the PAT and ignores its
//!   value); the body must be `multipart/form-data` whose file is the
//!   `.nupkg`. The package is read as NuGet reads it: a ZIP with exactly
//!   one `.nuspec` at its root naming a valid id, a valid version, authors
//!   and a description ([`read_package`]); anything else answers
//!   `400`. The version's identity is the lower-cased id and the
//!   lower-cased normalized version (`1.0` is `1.0.0`, `+metadata`
//!   dropped). A new identity answers `202 Accepted`; an identity the feed
//!   holds, or held and deleted, answers `409 Conflict`: versions are
//!   immutable, as on Azure Artifacts.
//! - `GET v3/flat2/{LOWER_ID}/index.json` ("Package Content"): the
//!   versions, lower-case and normalized, in NuGet's order; `404` when the
//!   feed has none.
//! - `GET v3/flat2/{LOWER_ID}/{LOWER_VERSION}/{LOWER_ID}.{LOWER_VERSION}.nupkg`
//!   and `.../{LOWER_ID}.nuspec`: the bytes pushed; `404` for anything
//!   else, including an id or version not in lower-case normalized form
//!   (the document has clients build these names; a flat container is
//!   static files).
//!
//! Errors come in Azure DevOps's JSON shape (`$id`, `innerException`,
//! `message`, `typeName`, `typeKey`, `errorCode`, `eventId`). Feeds exist
//! once a test makes them ([`ArtifactsDouble::create_feed`]); any other
//! feed answers `404`.

mod nuget;
mod xml;

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

pub use nuget::{Manifest, NuGetVersion, PackageProblem, id_ok, read_package};

use crate::serve::{Auth, Faults, Journal, Running, ServeError, lock, serve};

/// The name the double is served under (for [`crate::FaultRule`]s and the
/// [`Journal`]).
pub const SERVICE: &str = "artifacts";

/// The largest push accepted (Azure Artifacts takes NuGet packages up to
/// 500 MB).
const MAX_PUSH_BYTES: usize = 500 * 1024 * 1024;

/// One version on a feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPackage {
    /// The id as the `.nuspec` writes it.
    pub id: String,
    /// The normalized version, in the `.nuspec`'s case.
    pub version: String,
    /// The `.nupkg` pushed.
    pub nupkg: Vec<u8>,
    /// Its `.nuspec`.
    pub nuspec: Vec<u8>,
    /// Deleted: not served, and its version cannot be pushed again.
    pub deleted: bool,
}

/// A feed: lower-cased id → version identity → package.
#[derive(Debug, Default)]
struct Feed {
    packages: BTreeMap<String, BTreeMap<String, (NuGetVersion, StoredPackage)>>,
}

#[derive(Debug, Default)]
struct Feeds {
    /// `(project lower-cased or empty, feed lower-cased)` → feed.
    feeds: HashMap<(String, String), Feed>,
}

fn feed_key(project: Option<&str>, feed: &str) -> (String, String) {
    (project.unwrap_or("").to_lowercase(), feed.to_lowercase())
}

#[derive(Clone)]
struct Shared {
    organization: String,
    feeds: Arc<Mutex<Feeds>>,
}

/// A running Azure Artifacts double.
#[derive(Debug)]
pub struct ArtifactsDouble {
    running: Running,
    organization: String,
    feeds: Arc<Mutex<Feeds>>,
}

impl ArtifactsDouble {
    /// Serves the feeds of `organization` (none until
    /// [`ArtifactsDouble::create_feed`]).
    pub async fn start(
        faults: Faults,
        journal: Journal,
        auth: Auth,
        organization: &str,
    ) -> Result<ArtifactsDouble, ServeError> {
        let feeds = Arc::new(Mutex::new(Feeds::default()));
        let shared = Shared {
            organization: organization.to_owned(),
            feeds: feeds.clone(),
        };
        let router = Router::new()
            .fallback(handle)
            .with_state(shared)
            .layer(DefaultBodyLimit::max(MAX_PUSH_BYTES));
        let running = serve(SERVICE, router, faults, journal, auth).await?;
        Ok(ArtifactsDouble {
            running,
            organization: organization.to_owned(),
            feeds,
        })
    }

    /// The organization's packaging URL, as `https://pkgs.dev.azure.com/{organization}`
    /// (no trailing slash): what bosun's `packaging_url` is set to.
    pub fn base_url(&self) -> String {
        format!("{}/{}", self.running.base_url(), self.organization)
    }

    /// A feed's NuGet v3 service index.
    pub fn index_url(&self, project: Option<&str>, feed: &str) -> String {
        let project = project.map(|p| format!("/{p}")).unwrap_or_default();
        format!("{}{project}/_packaging/{feed}/nuget/v3/index.json", self.base_url())
    }

    /// The server, its fault plan and journal.
    pub fn running(&self) -> &Running {
        &self.running
    }

    /// Makes a feed (organization-scoped when `project` is `None`); making
    /// one that exists changes nothing.
    pub fn create_feed(&self, project: Option<&str>, feed: &str) {
        lock(&self.feeds).feeds.entry(feed_key(project, feed)).or_default();
    }

    /// The versions of a package the feed serves (deleted ones left out),
    /// lower-case normalized, in NuGet's order.
    pub fn versions(&self, project: Option<&str>, feed: &str, package_id: &str) -> Vec<String> {
        let feeds = lock(&self.feeds);
        feeds
            .feeds
            .get(&feed_key(project, feed))
            .map(|feed| served_versions(feed, &package_id.to_lowercase()))
            .unwrap_or_default()
    }

    /// One version (by any spelling NuGet takes as the same), deleted or not.
    pub fn package(&self, project: Option<&str>, feed: &str, package_id: &str, version: &str) -> Option<StoredPackage> {
        let identity = NuGetVersion::parse(version)?.identity();
        let feeds = lock(&self.feeds);
        feeds
            .feeds
            .get(&feed_key(project, feed))?
            .packages
            .get(&package_id.to_lowercase())?
            .get(&identity)
            .map(|(_, stored)| stored.clone())
    }

    /// Every `(id, version)` on a feed, deleted ones included.
    pub fn packages(&self, project: Option<&str>, feed: &str) -> Vec<(String, String)> {
        let feeds = lock(&self.feeds);
        feeds
            .feeds
            .get(&feed_key(project, feed))
            .map(|feed| {
                feed.packages
                    .values()
                    .flat_map(|versions| versions.values().map(|(_, p)| (p.id.clone(), p.version.clone())))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Deletes a version as a feed owner can: no longer served, and never
    /// pushable again. `false` when there is no such version.
    pub fn delete_version(&self, project: Option<&str>, feed: &str, package_id: &str, version: &str) -> bool {
        let Some(identity) = NuGetVersion::parse(version).map(|v| v.identity()) else {
            return false;
        };
        let mut feeds = lock(&self.feeds);
        let stored = feeds
            .feeds
            .get_mut(&feed_key(project, feed))
            .and_then(|feed| feed.packages.get_mut(&package_id.to_lowercase()))
            .and_then(|versions| versions.get_mut(&identity));
        match stored {
            Some((_, stored)) => {
                stored.deleted = true;
                true
            }
            None => false,
        }
    }
}

fn served_versions(feed: &Feed, lower_id: &str) -> Vec<String> {
    let Some(versions) = feed.packages.get(lower_id) else {
        return Vec::new();
    };
    let mut served: Vec<&NuGetVersion> = versions
        .values()
        .filter(|(_, stored)| !stored.deleted)
        .map(|(version, _)| version)
        .collect();
    served.sort_by(|a, b| a.compare(b));
    served.dedup_by(|a, b| a.compare(b) == Ordering::Equal);
    served.into_iter().map(NuGetVersion::identity).collect()
}

/// An error in Azure DevOps's shape.
fn azure_error(status: StatusCode, type_key: &str, message: &str) -> Response {
    let body = json!({
        "$id": "1",
        "innerException": null,
        "message": message,
        "typeName": format!("Microsoft.VisualStudio.Services.Packaging.Shared.WebApi.Exceptions.{type_key}, Microsoft.VisualStudio.Services.Packaging.Shared.WebApi"),
        "typeKey": type_key,
        "errorCode": 0,
        "eventId": 3000,
    });
    (status, axum::Json(body)).into_response()
}

/// Where a request goes, parsed from
/// `/{organization}[/{project}]/_packaging/{feed}/nuget/{rest}`.
struct Route {
    project: Option<String>,
    feed: String,
    rest: Vec<String>,
}

fn route(organization: &str, path: &str) -> Option<Route> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let packaging = segments.iter().position(|s| *s == "_packaging")?;
    let (scope, after) = segments.split_at(packaging);
    let project = match scope {
        [org] if org.eq_ignore_ascii_case(organization) => None,
        [org, project] if org.eq_ignore_ascii_case(organization) => Some((*project).to_owned()),
        _ => return None,
    };
    match after {
        [_, feed, "nuget", rest @ ..] if !feed.is_empty() => Some(Route {
            project,
            feed: (*feed).to_owned(),
            rest: rest.iter().map(|s| (*s).to_owned()).collect(),
        }),
        _ => None,
    }
}

async fn handle(State(shared): State<Shared>, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let Some(route) = route(&shared.organization, uri.path()) else {
        return azure_error(StatusCode::NOT_FOUND, "NotFoundException", "no such resource");
    };
    let key = feed_key(route.project.as_deref(), &route.feed);
    if !lock(&shared.feeds).feeds.contains_key(&key) {
        return azure_error(
            StatusCode::NOT_FOUND,
            "FeedIdNotFoundException",
            &format!("The feed with ID '{}' doesn't exist.", route.feed),
        );
    }
    let feed_base = {
        let authority = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("localhost");
        let project = route.project.as_deref().map(|p| format!("/{p}")).unwrap_or_default();
        format!(
            "http://{authority}/{}{project}/_packaging/{}/nuget",
            shared.organization, route.feed
        )
    };
    let rest: Vec<&str> = route.rest.iter().map(String::as_str).collect();
    let read = method == Method::GET || method == Method::HEAD;
    match rest.as_slice() {
        ["v3", "index.json"] if read => service_index(&feed_base),
        ["v2", ""] | ["v2", "package"] | ["v2", "package", ""] if method == Method::PUT => {
            push(&shared, &key, &route.feed, &headers, &body)
        }
        ["v3", "flat2", lower_id, "index.json"] if read => {
            let feeds = lock(&shared.feeds);
            let versions = feeds
                .feeds
                .get(&key)
                .map(|f| served_versions(f, lower_id))
                .unwrap_or_default();
            if versions.is_empty() || lower_id.to_lowercase() != *lower_id {
                return not_found_package(lower_id, &route.feed);
            }
            axum::Json(json!({ "versions": versions })).into_response()
        }
        ["v3", "flat2", lower_id, lower_version, file] if read => {
            flat_file(&shared, &key, &route.feed, lower_id, lower_version, file)
        }
        _ => azure_error(StatusCode::NOT_FOUND, "NotFoundException", "no such resource"),
    }
}

fn service_index(feed_base: &str) -> Response {
    axum::Json(json!({
        "version": "3.0.0",
        "resources": [
            { "@id": format!("{feed_base}/v2/"), "@type": "PackagePublish/2.0.0", "comment": "Push and delete (or unlist) packages." },
            { "@id": format!("{feed_base}/v3/flat2/"), "@type": "PackageBaseAddress/3.0.0", "comment": "Base URL of where NuGet packages are stored, in the format https://{base}/{id-lower}/{version-lower}/{id-lower}.{version-lower}.nupkg" },
        ]
    }))
    .into_response()
}

fn not_found_package(id: &str, feed: &str) -> Response {
    azure_error(
        StatusCode::NOT_FOUND,
        "PackageNotFoundException",
        &format!("The package '{id}' wasn't found in feed '{feed}'."),
    )
}

fn push(shared: &Shared, key: &(String, String), feed: &str, headers: &HeaderMap, body: &[u8]) -> Response {
    if headers.get("x-nuget-apikey").is_none() {
        return azure_error(
            StatusCode::BAD_REQUEST,
            "InvalidPackageException",
            "The X-NuGet-ApiKey header is required to push a package.",
        );
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let read = nuget::first_file(content_type, body).and_then(|package| Ok((package, read_package(package)?)));
    let (package, manifest) = match read {
        Ok(read) => read,
        Err(problem) => {
            return azure_error(StatusCode::BAD_REQUEST, "InvalidPackageException", &problem.to_string());
        }
    };
    let lower_id = manifest.id.to_lowercase();
    let identity = manifest.version.identity();
    let mut feeds = lock(&shared.feeds);
    let Some(stored_feed) = feeds.feeds.get_mut(key) else {
        return azure_error(StatusCode::NOT_FOUND, "FeedIdNotFoundException", "the feed was deleted");
    };
    let versions = stored_feed.packages.entry(lower_id).or_default();
    if let Some((_, existing)) = versions.get(&identity) {
        let message = if existing.deleted {
            format!(
                "The version {} of package '{}' was deleted from feed '{feed}'; a deleted version cannot be pushed again.",
                existing.version, existing.id
            )
        } else {
            format!(
                "The feed '{feed}' already contains '{} {}'.",
                existing.id, existing.version
            )
        };
        return azure_error(StatusCode::CONFLICT, "PackageExistsException", &message);
    }
    let normalized = manifest.version.normalized();
    versions.insert(
        identity,
        (
            manifest.version,
            StoredPackage {
                id: manifest.id,
                version: normalized,
                nupkg: package.to_vec(),
                nuspec: manifest.nuspec,
                deleted: false,
            },
        ),
    );
    StatusCode::ACCEPTED.into_response()
}

fn flat_file(
    shared: &Shared,
    key: &(String, String),
    feed: &str,
    lower_id: &str,
    lower_version: &str,
    file: &str,
) -> Response {
    let feeds = lock(&shared.feeds);
    let stored = feeds
        .feeds
        .get(key)
        .and_then(|f| f.packages.get(lower_id))
        .and_then(|versions| versions.get(lower_version))
        .map(|(_, stored)| stored)
        .filter(|stored| !stored.deleted);
    let Some(stored) = stored else {
        return not_found_package(lower_id, feed);
    };
    if file == format!("{lower_id}.{lower_version}.nupkg") {
        (
            [(header::CONTENT_TYPE, "application/octet-stream")],
            stored.nupkg.clone(),
        )
            .into_response()
    } else if file == format!("{lower_id}.nuspec") {
        ([(header::CONTENT_TYPE, "application/xml")], stored.nuspec.clone()).into_response()
    } else {
        not_found_package(lower_id, feed)
    }
}
