//! An Argo CD API server double: the `ApplicationService` operations of
//! Argo CD's REST API (the grpc-gateway in front of its gRPC API) that
//! bosun uses or a test needs, with applications kept in memory and a
//! controller that runs each sync.
//!
//! Routes, as Argo CD's `assets/swagger.json` names them (a copy of the
//! relevant part is `conformance/argocd-swagger-subset.json`):
//!
//! - `GET /api/v1/applications` (`ApplicationService_List`): the
//!   applications by name, filtered by `name`, `project`/`projects` and an
//!   equality `selector` on labels.
//! - `POST /api/v1/applications` (`ApplicationService_Create`): creates;
//!   an existing application with an equal spec, labels, annotations and
//!   finalizers is answered as is; a different one is `400` (gRPC
//!   `InvalidArgument`) "existing application spec is different, use upsert
//!   flag to force update" unless `upsert=true` (then updated), as
//!   `server/application/application.go` `Create` does. The name, a
//!   destination and a single `spec.source` with a `repoURL` are required
//!   (the double does not serve multi-source applications).
//! - `GET /api/v1/applications/{name}` (`ApplicationService_Get`): one
//!   application; `refresh` is accepted. Argo CD's rule for one not found
//!   (`getAppEnforceRBAC`): `403 permission denied` when no `project` is
//!   given, so that a caller cannot learn which applications exist; `404`
//!   (`applications.argoproj.io "<name>" not found`) when a `project` is
//!   given, also when the application is in another project.
//! - `PUT /api/v1/applications/{application.metadata.name}`
//!   (`ApplicationService_Update`): replaces spec, labels, annotations and
//!   finalizers.
//! - `POST /api/v1/applications/{name}/sync` (`ApplicationService_Sync`):
//!   sets the operation (answering the application with `operation` set
//!   and no `operationState`, as `argo.SetAppOperation` leaves it); while
//!   one is unfinished another is `400` (gRPC `FailedPrecondition`) "error
//!   setting app operation: another operation is already in progress".
//!
//! The controller: every read of an application is one reconcile. A
//! pending sync shows `status.operationState.phase` `Running` for
//! [`ArgoCdDouble::set_reads_while_running`] reads (1 by default), then
//! finishes: `Succeeded` with `syncResult.revision` and `resources`
//! (`<kind>.<group>/<name> created|configured|unchanged`, `pruned`),
//! `status.sync` `Synced` at the revision, `status.health` (what
//! [`ArgoCdDouble::set_health`] says, `Healthy` by default) and a
//! `status.history` entry; or `Failed` when the test planned it
//! ([`ArgoCdDouble::fail_next_sync`]) or the revision cannot be resolved (a
//! revision that is not a full commit SHA resolves only when it is the
//! application's `targetRevision` and [`ArgoCdDouble::set_target_commit`]
//! says to what).
//!
//! Errors have grpc-gateway's shape (`error`, `code`, `message`). Every
//! request body and query, and every answer, is checked against the
//! swagger subset ([`swagger`]); departures are kept for tests to assert
//! none ([`ArgoCdDouble::violations`]).

mod app;
pub mod swagger;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

pub use app::ManagedResource;

use crate::serve::{Auth, Faults, Journal, Running, ServeError, lock, serve};

/// The name the double is served under.
pub const SERVICE: &str = "argocd";

/// gRPC codes as grpc-gateway writes them in `code`.
const INVALID_ARGUMENT: i64 = 3;
const NOT_FOUND: i64 = 5;
const PERMISSION_DENIED: i64 = 7;
const FAILED_PRECONDITION: i64 = 9;

#[derive(Debug, Default)]
struct Server {
    apps: BTreeMap<String, app::Managed>,
    reads_while_running: usize,
    resource_version: u64,
    /// Sync request bodies accepted, by application.
    syncs: BTreeMap<String, Vec<Value>>,
    violations: Vec<String>,
}

type Shared = Arc<Mutex<Server>>;

/// A running Argo CD double.
#[derive(Debug)]
pub struct ArgoCdDouble {
    running: Running,
    server: Shared,
}

fn now() -> String {
    let now = time::OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    now.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_owned())
}

impl ArgoCdDouble {
    /// Serves an Argo CD API with no applications; `auth` is usually
    /// `Auth::default().bearer(token)` (an Argo CD API token).
    pub async fn start(faults: Faults, journal: Journal, auth: Auth) -> Result<ArgoCdDouble, ServeError> {
        let server: Shared = Arc::new(Mutex::new(Server {
            reads_while_running: 1,
            ..Server::default()
        }));
        let router = Router::new()
            .route("/api/v1/applications", get(list).post(create))
            .route("/api/v1/applications/{name}", get(get_one).put(update))
            .route("/api/v1/applications/{name}/sync", post(sync))
            .fallback(|| async { grpc_error(StatusCode::NOT_FOUND, NOT_FOUND, "Not Found") })
            .with_state(server.clone());
        let running = serve(SERVICE, router, faults, journal, auth).await?;
        Ok(ArgoCdDouble { running, server })
    }

    /// `http://127.0.0.1:PORT`, the Argo CD server URL.
    pub fn base_url(&self) -> String {
        self.running.base_url()
    }

    /// The server, its fault plan and journal.
    pub fn running(&self) -> &Running {
        &self.running
    }

    /// Creates an application as an operator would (`kubectl apply` of the
    /// Application): the API's checks apply, and `app` is checked against
    /// `v1alpha1Application` like a request. An existing one is replaced.
    pub fn create_application(&self, app: Value) -> Result<(), String> {
        let mut server = lock(&self.server);
        let name = check_new(&app)?;
        let problems = swagger::subset().check("v1alpha1Application", &app);
        server
            .violations
            .extend(problems.into_iter().map(|p| format!("operator's Application {p}")));
        server.resource_version += 1;
        let mut managed = app::Managed::new(app, &now(), &uuid::Uuid::new_v4().to_string());
        managed.app["metadata"]["resourceVersion"] = json!(server.resource_version.to_string());
        server.apps.insert(name, managed);
        Ok(())
    }

    /// The application as the API would answer it now (without a
    /// reconcile).
    pub fn application(&self, name: &str) -> Option<Value> {
        lock(&self.server).apps.get(name).map(|m| m.app.clone())
    }

    /// Names of every application.
    pub fn names(&self) -> Vec<String> {
        lock(&self.server).apps.keys().cloned().collect()
    }

    /// How many reads see a sync `Running` before it finishes (1 unless
    /// set).
    pub fn set_reads_while_running(&self, reads: usize) {
        lock(&self.server).reads_while_running = reads;
    }

    /// The next sync of `name` fails with `message`.
    pub fn fail_next_sync(&self, name: &str, message: &str) {
        if let Some(managed) = lock(&self.server).apps.get_mut(name) {
            managed.fail_next = Some(message.to_owned());
        }
    }

    /// `name`'s health from now on (`Healthy`, `Progressing`, `Degraded`,
    /// `Suspended`, `Missing`, `Unknown`).
    pub fn set_health(&self, name: &str, health: &str) {
        if let Some(managed) = lock(&self.server).apps.get_mut(name) {
            managed.set_health(health, &now());
        }
    }

    /// What `name`'s manifests hold from the next sync on.
    pub fn set_resources(&self, name: &str, resources: Vec<ManagedResource>) {
        if let Some(managed) = lock(&self.server).apps.get_mut(name) {
            managed.resources = resources;
        }
    }

    /// The commit `name`'s `targetRevision` resolves to (a sync without a
    /// commit SHA deploys it).
    pub fn set_target_commit(&self, name: &str, commit: &str) {
        if let Some(managed) = lock(&self.server).apps.get_mut(name) {
            managed.target_commit = Some(commit.to_owned());
        }
    }

    /// The sync request bodies `name` accepted (not those refused).
    pub fn syncs(&self, name: &str) -> Vec<Value> {
        lock(&self.server).syncs.get(name).cloned().unwrap_or_default()
    }

    /// Every departure from the swagger subset seen in a request or an
    /// answer, as `METHOD path: where: what`.
    pub fn violations(&self) -> Vec<String> {
        lock(&self.server).violations.clone()
    }
}

/// The double's own check of an application a caller wants to create:
/// its name, or why Argo CD would refuse it.
fn check_new(app: &Value) -> Result<String, String> {
    let name = app["metadata"]["name"].as_str().unwrap_or("").to_owned();
    if name.is_empty() {
        return Err(
            "Application.argoproj.io \"\" is invalid: metadata.name: Required value: name or generateName is required"
                .to_owned(),
        );
    }
    if app["spec"]["sources"].is_array() {
        return Err(format!(
            "application spec for {name} is invalid: the double serves single-source applications only"
        ));
    }
    let source = &app["spec"]["source"];
    if source["repoURL"].as_str().unwrap_or("").is_empty() {
        return Err(format!(
            "application spec for {name} is invalid: InvalidSpecError: spec.source.repoURL is required"
        ));
    }
    let destination = &app["spec"]["destination"];
    if destination["server"].as_str().unwrap_or("").is_empty() && destination["name"].as_str().unwrap_or("").is_empty()
    {
        return Err(format!(
            "application spec for {name} is invalid: InvalidSpecError: Destination server missing from app spec"
        ));
    }
    Ok(name)
}

fn grpc_error(status: StatusCode, code: i64, message: &str) -> Response {
    (
        status,
        axum::Json(json!({ "error": message, "code": code, "message": message })),
    )
        .into_response()
}

/// `name=value` pairs of a query, percent-decoded.
fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(name), decode(value))
        })
        .collect()
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'+' => out.push(b' '),
            b'%' if index + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[index + 1..index + 3])
                    .ok()
                    .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                {
                    Some(byte) => {
                        out.push(byte);
                        index += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Checks a request's query and body, and later its answer, against
/// operation `method path` of the swagger subset, collecting departures.
struct Checked {
    method: &'static str,
    path: &'static str,
    problems: Vec<String>,
}

impl Checked {
    fn request(&mut self, query: &[(String, String)], body: Option<&Value>) {
        let swagger = swagger::subset();
        let declared = swagger.query_parameters(self.method, self.path).unwrap_or_default();
        for (name, _) in query {
            if !declared.contains(name) {
                self.note(&format!("query `{name}`: not a parameter of this operation"));
            }
        }
        if let (Some(body), Some(definition)) = (body, swagger.body_definition(self.method, self.path)) {
            for problem in swagger.check(&definition, body) {
                self.note(&format!("request body {problem}"));
            }
        }
    }

    /// Answers `body` with `status`, checked as the operation's answer
    /// (`runtimeError` for an error).
    fn answer(&mut self, status: StatusCode, body: Value) -> Response {
        let swagger = swagger::subset();
        let definition = if status == StatusCode::OK {
            swagger.answer_definition(self.method, self.path)
        } else {
            Some("runtimeError".to_owned())
        };
        if let Some(definition) = definition {
            for problem in swagger.check(&definition, &body) {
                self.note(&format!("answer {problem}"));
            }
        }
        (status, axum::Json(body)).into_response()
    }

    /// A gRPC error as grpc-gateway answers it.
    fn error(&mut self, status: StatusCode, code: i64, message: &str) -> Response {
        self.answer(status, json!({ "error": message, "code": code, "message": message }))
    }

    fn note(&mut self, problem: &str) {
        let line = format!("{} {}: {problem}", self.method, self.path);
        self.problems.push(line);
    }
}

/// Runs `handler` on the server's state with a [`Checked`] for operation
/// `method path`, keeping what it found.
fn handled(
    server: &Shared,
    method: &'static str,
    path: &'static str,
    handler: impl FnOnce(&mut Server, &mut Checked) -> Response,
) -> Response {
    let mut guard = lock(server);
    let mut checked = Checked {
        method,
        path,
        problems: Vec::new(),
    };
    let response = handler(&mut guard, &mut checked);
    guard.violations.extend(checked.problems);
    response
}

fn parse_body(bytes: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(bytes).map_err(|err| format!("invalid character in request body: {err}"))
}

const LIST: &str = "/api/v1/applications";
const ONE: &str = "/api/v1/applications/{name}";
const UPDATE: &str = "/api/v1/applications/{application.metadata.name}";
const SYNC: &str = "/api/v1/applications/{name}/sync";

fn project_of(app: &Value) -> &str {
    app["spec"]["project"]
        .as_str()
        .filter(|p| !p.is_empty())
        .unwrap_or("default")
}

async fn list(State(server): State<Shared>, RawQuery(query): RawQuery) -> Response {
    handled(&server, "GET", LIST, |server, checked| {
        let pairs = query_pairs(query.as_deref());
        checked.request(&pairs, None);
        let now = now();
        for managed in server.apps.values_mut() {
            managed.reconcile(&now);
        }
        let wanted = |key: &str| {
            pairs
                .iter()
                .filter(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .collect::<Vec<_>>()
        };
        let names = wanted("name");
        let mut projects = wanted("project");
        projects.extend(wanted("projects"));
        let selectors: Vec<(String, String)> = wanted("selector")
            .iter()
            .flat_map(|s| s.split(','))
            .filter_map(|term| term.split_once('='))
            .map(|(k, v)| (k.trim().to_owned(), v.trim_start_matches('=').trim().to_owned()))
            .collect();
        let items: Vec<Value> = server
            .apps
            .values()
            .map(|m| m.app.clone())
            .filter(|app| names.is_empty() || names.iter().any(|n| app["metadata"]["name"] == n.as_str()))
            .filter(|app| projects.is_empty() || projects.iter().any(|p| p == project_of(app)))
            .filter(|app| {
                selectors
                    .iter()
                    .all(|(k, v)| app["metadata"]["labels"][k] == v.as_str())
            })
            .collect();
        let version = server.resource_version.to_string();
        checked.answer(
            StatusCode::OK,
            json!({ "metadata": { "resourceVersion": version }, "items": items }),
        )
    })
}

async fn get_one(State(server): State<Shared>, Path(name): Path<String>, RawQuery(query): RawQuery) -> Response {
    handled(&server, "GET", ONE, |server, checked| {
        let pairs = query_pairs(query.as_deref());
        checked.request(&pairs, None);
        let project = pairs.iter().find(|(k, _)| k == "project").map(|(_, v)| v.as_str());
        let not_found = format!("applications.argoproj.io \"{name}\" not found");
        let Some(managed) = server.apps.get_mut(&name) else {
            // getAppEnforceRBAC: without a project, not found is permission
            // denied (existence is not disclosed); with one, 404.
            return match project {
                Some(_) => checked.error(StatusCode::NOT_FOUND, NOT_FOUND, &not_found),
                None => checked.error(StatusCode::FORBIDDEN, PERMISSION_DENIED, "permission denied"),
            };
        };
        if project.is_some_and(|p| p != project_of(&managed.app)) {
            return checked.error(StatusCode::NOT_FOUND, NOT_FOUND, &not_found);
        }
        managed.reconcile(&now());
        let app = managed.app.clone();
        checked.answer(StatusCode::OK, app)
    })
}

async fn create(State(server): State<Shared>, RawQuery(query): RawQuery, body: Bytes) -> Response {
    handled(&server, "POST", LIST, |server, checked| {
        let pairs = query_pairs(query.as_deref());
        let parsed = parse_body(&body);
        checked.request(&pairs, parsed.as_ref().ok());
        let upsert = pairs.iter().any(|(k, v)| k == "upsert" && v == "true");
        let app = match parsed.and_then(|app| check_new(&app).map(|name| (name, app))) {
            Ok(app) => app,
            Err(message) => return checked.error(StatusCode::BAD_REQUEST, INVALID_ARGUMENT, &message),
        };
        let (name, app) = app;
        server.resource_version += 1;
        let version = json!(server.resource_version.to_string());
        if let Some(existing) = server.apps.get_mut(&name) {
            // Create: "act idempotent if existing spec matches new spec".
            let same = ["labels", "annotations", "finalizers"]
                .iter()
                .all(|field| existing.app["metadata"].get(*field) == app["metadata"].get(*field))
                && existing.app["spec"] == app["spec"];
            if same {
                let existing = existing.app.clone();
                return checked.answer(StatusCode::OK, existing);
            }
            if !upsert {
                return checked.error(
                    StatusCode::BAD_REQUEST,
                    INVALID_ARGUMENT,
                    "existing application spec is different, use upsert flag to force update",
                );
            }
            existing.update(&app);
            existing.app["metadata"]["resourceVersion"] = version;
            let updated = existing.app.clone();
            return checked.answer(StatusCode::OK, updated);
        }
        let mut managed = app::Managed::new(app, &now(), &uuid::Uuid::new_v4().to_string());
        managed.app["metadata"]["resourceVersion"] = version;
        let created = managed.app.clone();
        server.apps.insert(name, managed);
        checked.answer(StatusCode::OK, created)
    })
}

async fn update(
    State(server): State<Shared>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    handled(&server, "PUT", UPDATE, |server, checked| {
        let pairs = query_pairs(query.as_deref());
        let parsed = parse_body(&body);
        checked.request(&pairs, parsed.as_ref().ok());
        let app = parsed.and_then(|mut app| {
            app["metadata"]["name"] = json!(name);
            check_new(&app).map(|_| app)
        });
        let app = match app {
            Ok(app) => app,
            Err(message) => return checked.error(StatusCode::BAD_REQUEST, INVALID_ARGUMENT, &message),
        };
        server.resource_version += 1;
        let version = json!(server.resource_version.to_string());
        let Some(existing) = server.apps.get_mut(&name) else {
            return checked.error(StatusCode::FORBIDDEN, PERMISSION_DENIED, "permission denied");
        };
        existing.update(&app);
        existing.app["metadata"]["resourceVersion"] = version;
        let updated = existing.app.clone();
        checked.answer(StatusCode::OK, updated)
    })
}

/// A field of the sync request, typed as Argo CD's JSON decoder types it.
fn field<T>(
    request: &Value,
    name: &str,
    go_type: &str,
    read: impl Fn(&Value) -> Option<T>,
) -> Result<Option<T>, String> {
    match request.get(name) {
        None => Ok(None),
        Some(value) => read(value).map(Some).ok_or_else(|| {
            format!(
                "json: cannot unmarshal {value} into Go struct field ApplicationSyncRequest.{name} of type {go_type}"
            )
        }),
    }
}

async fn sync(
    State(server): State<Shared>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    handled(&server, "POST", SYNC, |server, checked| {
        let pairs = query_pairs(query.as_deref());
        let parsed = parse_body(&body);
        checked.request(&pairs, parsed.as_ref().ok());
        let fields = parsed.and_then(|request| {
            let revision = field(&request, "revision", "string", |v| v.as_str().map(str::to_owned))?;
            let prune = field(&request, "prune", "bool", Value::as_bool)?;
            Ok((request, revision.unwrap_or_default(), prune.unwrap_or(false)))
        });
        let (request, revision, prune) = match fields {
            Ok(fields) => fields,
            Err(message) => return checked.error(StatusCode::BAD_REQUEST, INVALID_ARGUMENT, &message),
        };
        let reads = server.reads_while_running;
        let Some(managed) = server.apps.get_mut(&name) else {
            return checked.error(StatusCode::FORBIDDEN, PERMISSION_DENIED, "permission denied");
        };
        if managed.operation_running() {
            return checked.error(
                StatusCode::BAD_REQUEST,
                FAILED_PRECONDITION,
                "error setting app operation: another operation is already in progress",
            );
        }
        managed.start_sync(&revision, prune, reads, &now());
        let answered = managed.app.clone();
        server.syncs.entry(name).or_default().push(request);
        checked.answer(StatusCode::OK, answered)
    })
}
