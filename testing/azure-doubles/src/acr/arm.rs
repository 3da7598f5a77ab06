//! The ARM operations of ACR Tasks, api-version `2019-06-01-preview`.
//!
//! Each checks, before anything else, the `api-version` (`400
//! MissingApiVersionParameter` / `InvalidApiVersionParameter`), then the
//! subscription (`404 SubscriptionNotFound`), the resource group (`404
//! ResourceGroupNotFound`) and the registry (`404 ResourceNotFound`), in
//! ARM's error shape `{"error": {"code", "message"}}`.
//!
//! - `listBuildSourceUploadUrl`: a new `relativePath`
//!   (`source/<yyyyMMddHHmm>/<guid>.tar.gz`) and its write SAS URL;
//! - `scheduleRun`: a `DockerBuildRequest` (other run request types are
//!   refused with `400`); `dockerFilePath` and `platform.os` are required
//!   and `timeout` is 300 to 28800 s, as in the API's schema; answers
//!   `200` with the `Run` resource, `Queued` (or, after
//!   [`super::AcrDouble::answer_schedule_accepted`], `202` with a
//!   `Location` of `operationResults/{id}`, which answers `202` once, then
//!   `200` with the `Run`);
//! - `runs/{runId}`: the `Run` (`404 ResourceNotFound` for an unknown id),
//!   one step further each read (see [`super`]);
//! - `runs/{runId}/listLogSasUrl`: `logLink`, a read SAS URL of the log.

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::collections::HashMap;

use super::{API_VERSION, AcrBackend, AcrConfig, Run, RunStatus, Shared, buildah, builder, storage};
use crate::serve::lock;

const REGISTRY: &str =
    "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.ContainerRegistry/registries/{name}";

pub(super) fn router(state: Shared) -> Router {
    Router::new()
        .route(&format!("{REGISTRY}/listBuildSourceUploadUrl"), post(upload_url))
        .route(&format!("{REGISTRY}/scheduleRun"), post(schedule_run))
        .route(&format!("{REGISTRY}/runs/{{run}}"), get(get_run))
        .route(&format!("{REGISTRY}/runs/{{run}}/listLogSasUrl"), post(log_url))
        .route(
            &format!("{REGISTRY}/operationResults/{{operation}}"),
            get(operation_result),
        )
        .with_state(state)
}

/// The registry's resource path.
pub(super) fn resource_path(config: &AcrConfig) -> String {
    format!(
        "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.ContainerRegistry/registries/{}",
        config.subscription, config.resource_group, config.registry_name
    )
}

/// An ARM error answer.
pub(super) fn arm_error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, axum::Json(json!({"error": {"code": code, "message": message}}))).into_response()
}

/// Checks the api-version and that the registry exists.
fn locate(
    state: &Shared,
    names: &HashMap<String, String>,
    query: &HashMap<String, String>,
) -> Result<(), Box<Response>> {
    match query.get("api-version").map(String::as_str) {
        None | Some("") => {
            return Err(Box::new(arm_error(
                StatusCode::BAD_REQUEST,
                "MissingApiVersionParameter",
                "The api-version query parameter (?api-version=) is required for all requests.",
            )));
        }
        Some(API_VERSION) => {}
        Some(other) => {
            return Err(Box::new(arm_error(
                StatusCode::BAD_REQUEST,
                "InvalidApiVersionParameter",
                &format!("The api-version '{other}' is invalid. The supported versions are '{API_VERSION}'."),
            )));
        }
    }
    let state = lock(state);
    let config = &state.config;
    let name = |key: &str| names.get(key).map(String::as_str).unwrap_or_default();
    if !name("sub").eq_ignore_ascii_case(&config.subscription) {
        return Err(Box::new(arm_error(
            StatusCode::NOT_FOUND,
            "SubscriptionNotFound",
            &format!("The subscription '{}' could not be found.", name("sub")),
        )));
    }
    if !name("rg").eq_ignore_ascii_case(&config.resource_group) {
        return Err(Box::new(arm_error(
            StatusCode::NOT_FOUND,
            "ResourceGroupNotFound",
            &format!("Resource group '{}' could not be found.", name("rg")),
        )));
    }
    if !name("name").eq_ignore_ascii_case(&config.registry_name) {
        return Err(Box::new(arm_error(
            StatusCode::NOT_FOUND,
            "ResourceNotFound",
            &format!(
                "The Resource 'Microsoft.ContainerRegistry/registries/{}' under resource group '{}' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix",
                name("name"),
                name("rg")
            ),
        )));
    }
    Ok(())
}

pub(super) fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

async fn upload_url(
    State(state): State<Shared>,
    Path(names): Path<HashMap<String, String>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if let Err(refused) = locate(&state, &names, &query) {
        return *refused;
    }
    let now = time::OffsetDateTime::now_utc();
    let relative_path = format!(
        "source/{:04}{:02}{:02}{:02}{:02}/{}.tar.gz",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        uuid::Uuid::new_v4().simple()
    );
    let upload_url = storage::sign(&state, storage::SOURCE_CONTAINER, &relative_path, true);
    axum::Json(json!({"uploadUrl": upload_url, "relativePath": relative_path})).into_response()
}

fn invalid(message: &str) -> Response {
    arm_error(
        StatusCode::BAD_REQUEST,
        "InvalidRequestContent",
        &format!("The request content was invalid and could not be deserialized: '{message}'."),
    )
}

/// The refusal of a run request the API's schema does not allow.
fn check_request(request: &Value) -> Result<(), Box<Response>> {
    match request["type"].as_str() {
        Some("DockerBuildRequest") => {}
        Some(other @ ("FileTaskRunRequest" | "EncodedTaskRunRequest" | "TaskRunRequest")) => {
            return Err(Box::new(arm_error(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!("The double runs DockerBuildRequest only, not {other}."),
            )));
        }
        _ => return Err(Box::new(invalid("Required property 'type' not found or unknown"))),
    }
    if request["dockerFilePath"].as_str().is_none_or(str::is_empty) {
        return Err(Box::new(invalid(
            "Required property 'dockerFilePath' not found in JSON",
        )));
    }
    if !request["platform"]["os"].is_string() {
        return Err(Box::new(invalid("Required property 'platform.os' not found in JSON")));
    }
    if let Some(timeout) = request.get("timeout").filter(|value| !value.is_null())
        && !timeout.as_u64().is_some_and(|secs| (300..=28_800).contains(&secs))
    {
        return Err(Box::new(arm_error(
            StatusCode::BAD_REQUEST,
            "InvalidParameter",
            "The value of parameter timeout must be between 300 and 28800.",
        )));
    }
    if let Some(names) = request.get("imageNames").filter(|value| !value.is_null())
        && !names.as_array().is_some_and(|names| names.iter().all(Value::is_string))
    {
        return Err(Box::new(invalid("imageNames must be an array of strings")));
    }
    Ok(())
}

async fn schedule_run(
    State(state): State<Shared>,
    Path(names): Path<HashMap<String, String>>,
    Query(query): Query<HashMap<String, String>>,
    headers: axum::http::HeaderMap,
    body: String,
) -> Response {
    if let Err(refused) = locate(&state, &names, &query) {
        return *refused;
    }
    let Ok(request) = serde_json::from_str::<Value>(&body) else {
        return invalid("the body is not JSON");
    };
    if let Err(refused) = check_request(&request) {
        return *refused;
    }
    let mut state = lock(&state);
    let number = state.next_run;
    state.next_run += 1;
    let run_id = run_id(&state.config.registry_name, number);
    let run = Run {
        run_id,
        status: RunStatus::Queued,
        request,
        output_images: Vec::new(),
        error_message: None,
        log: String::new(),
        create_time: now_rfc3339(),
        start_time: None,
        finish_time: None,
    };
    let body = run_resource(&resource_path(&state.config), &run);
    state.runs.insert(number, run);
    if !state.schedule_accepted {
        return axum::Json(body).into_response();
    }
    let operation = uuid::Uuid::new_v4().to_string();
    state.operations.insert(operation.clone(), (number, 1));
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("127.0.0.1");
    let location = format!(
        "http://{host}{}/operationResults/{operation}?api-version={API_VERSION}",
        resource_path(&state.config)
    );
    (
        StatusCode::ACCEPTED,
        [
            (axum::http::header::LOCATION, location),
            (axum::http::header::RETRY_AFTER, "1".to_owned()),
        ],
    )
        .into_response()
}

/// The result of a `scheduleRun` answered `202`: `202` while its reads left
/// last, then `200` with the `Run`.
async fn operation_result(
    State(state): State<Shared>,
    Path(names): Path<HashMap<String, String>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if let Err(refused) = locate(&state, &names, &query) {
        return *refused;
    }
    let mut state = lock(&state);
    let operation = names.get("operation").cloned().unwrap_or_default();
    let Some((number, left)) = state.operations.get_mut(&operation) else {
        return arm_error(
            StatusCode::NOT_FOUND,
            "ResourceNotFound",
            "The operation was not found.",
        );
    };
    if *left > 0 {
        *left -= 1;
        return (StatusCode::ACCEPTED, [(axum::http::header::RETRY_AFTER, "1")]).into_response();
    }
    let number = *number;
    let path = resource_path(&state.config);
    match state.runs.get(&number) {
        Some(run) => axum::Json(run_resource(&path, run)).into_response(),
        None => arm_error(StatusCode::NOT_FOUND, "ResourceNotFound", "The run was not found."),
    }
}

/// `c` and a letter of the registry's name, then the run's number in base
/// 36, as ACR's run ids look (`cb1`, `cb2`, ..., `cba`).
fn run_id(registry: &str, number: u64) -> String {
    let letter = registry
        .bytes()
        .find(u8::is_ascii_alphabetic)
        .map_or('a', |byte| char::from(byte.to_ascii_lowercase()));
    let mut digits = Vec::new();
    let mut rest = number;
    loop {
        let digit = u32::try_from(rest % 36).unwrap_or_default();
        digits.push(char::from_digit(digit, 36).unwrap_or('0'));
        rest /= 36;
        if rest == 0 {
            break;
        }
    }
    let digits: String = digits.into_iter().rev().collect();
    format!("c{letter}{digits}")
}

/// The `Run` resource as ARM answers it.
fn run_resource(registry: &str, run: &Run) -> Value {
    let platform = &run.request["platform"];
    let mut properties = json!({
        "runId": run.run_id,
        "status": run.status.as_str(),
        "lastUpdatedTime": run.finish_time.clone().or_else(|| run.start_time.clone()).unwrap_or_else(|| run.create_time.clone()),
        "runType": "QuickBuild",
        "createTime": run.create_time,
        "platform": {
            "os": platform["os"].as_str().unwrap_or("Linux").to_ascii_lowercase(),
            "architecture": platform["architecture"].as_str().unwrap_or("amd64"),
        },
        "agentConfiguration": {"cpu": 2},
        "provisioningState": "Succeeded",
        "isArchiveEnabled": run.request["isArchiveEnabled"].as_bool().unwrap_or(false),
    });
    if let Some(variant) = platform["variant"].as_str() {
        properties["platform"]["variant"] = json!(variant);
    }
    if let Some(start) = &run.start_time {
        properties["startTime"] = json!(start);
    }
    if let Some(finish) = &run.finish_time {
        properties["finishTime"] = json!(finish);
    }
    if !run.output_images.is_empty() {
        properties["outputImages"] = run
            .output_images
            .iter()
            .map(|image| {
                json!({"registry": image.registry, "repository": image.repository, "tag": image.tag, "digest": image.digest})
            })
            .collect();
    }
    if let Some(message) = &run.error_message {
        properties["runErrorMessage"] = json!(message);
    }
    json!({
        "type": "Microsoft.ContainerRegistry/registries/runs",
        "id": format!("{registry}/runs/{}", run.run_id),
        "name": run.run_id,
        "properties": properties,
    })
}

fn run_not_found(run_id: &str) -> Response {
    arm_error(
        StatusCode::NOT_FOUND,
        "ResourceNotFound",
        &format!("The Resource 'Microsoft.ContainerRegistry/registries/runs/{run_id}' was not found."),
    )
}

async fn get_run(
    State(shared): State<Shared>,
    Path(names): Path<HashMap<String, String>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if let Err(refused) = locate(&shared, &names, &query) {
        return *refused;
    }
    let run_id = names.get("run").cloned().unwrap_or_default();
    let mut state = lock(&shared);
    let Some(number) = state
        .runs
        .iter()
        .find(|(_, run)| run.run_id == run_id)
        .map(|(number, _)| *number)
    else {
        return run_not_found(&run_id);
    };
    advance(&shared, &mut state, number);
    let Some(run) = state.runs.get(&number) else {
        return run_not_found(&run_id);
    };
    axum::Json(run_resource(&resource_path(&state.config), run)).into_response()
}

/// Moves a run one step: `Queued` → `Running` → built (with the buildah
/// backend, `Running` starts the build in the background and its task
/// finishes the run).
fn advance(shared: &Shared, state: &mut super::AcrState, number: u64) {
    let Some(run) = state.runs.get(&number) else {
        return;
    };
    match run.status {
        RunStatus::Queued => {
            if let Some(run) = state.runs.get_mut(&number) {
                run.status = RunStatus::Running;
                run.start_time = Some(now_rfc3339());
                run.log.push_str(&builder::log_line("Downloading source code..."));
            }
            buildah::start(shared, state, number);
        }
        // buildah's runs are finished by their build task; until then
        // they are `Running`.
        RunStatus::Running if matches!(state.config.backend, AcrBackend::Buildah(_)) => {}
        RunStatus::Running => {
            let source = run.request["sourceLocation"].as_str().unwrap_or_default();
            let path = format!("/{}/{source}", storage::SOURCE_CONTAINER);
            let context = state.blobs.get(&path).cloned();
            let outcome = builder::build(context.as_deref(), &run.request, &state.config.login_server);
            for artifact in &outcome.artifacts {
                state.registry.store(artifact);
            }
            if let Some(run) = state.runs.get_mut(&number) {
                run.log.push_str(&outcome.log);
                run.finish_time = Some(now_rfc3339());
                match outcome.error {
                    None => {
                        run.status = RunStatus::Succeeded;
                        run.output_images = outcome.images;
                    }
                    Some(message) => {
                        run.status = RunStatus::Failed;
                        run.error_message = Some(message);
                    }
                }
            }
        }
        RunStatus::Succeeded | RunStatus::Failed => {}
    }
}

async fn log_url(
    State(shared): State<Shared>,
    Path(names): Path<HashMap<String, String>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if let Err(refused) = locate(&shared, &names, &query) {
        return *refused;
    }
    let run_id = names.get("run").cloned().unwrap_or_default();
    if !lock(&shared).runs.values().any(|run| run.run_id == run_id) {
        return run_not_found(&run_id);
    }
    let link = storage::sign(&shared, storage::LOG_CONTAINER, &format!("{run_id}/rawtext.log"), false);
    axum::Json(json!({"logLink": link, "logArtifactLink": null})).into_response()
}
