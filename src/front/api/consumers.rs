//! `GET /v1/consumers`, `GET /v1/consumers/controls`, `POST
//! /v1/consumers/{consumer}/pause` and `.../resume`: which consumers are
//! paused, the log of pauses and resumes, and pausing or resuming one.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};

use super::bodies::ConsumerControlBody;
use super::query::QueryValues;
use super::{ApiResult, ApiState, caller, no_query, routes, typed_body};
use crate::ports::store::ControlAction;

pub(super) async fn consumers(State(state): State<ApiState>, headers: HeaderMap, uri: Uri) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    Ok(Json(state.gateway.consumers(&caller).await?).into_response())
}

pub(super) async fn consumer_controls(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    let query = QueryValues::read(&uri, routes::CONTROLS_QUERY)?;
    let limit = query.integer("limit").unwrap_or(100);
    Ok(Json(state.gateway.consumer_controls(&caller, limit).await?).into_response())
}

pub(super) async fn pause_consumer(
    state: State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    consumer: Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    control(state, headers, uri, consumer, body, ControlAction::Pause).await
}

pub(super) async fn resume_consumer(
    state: State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    consumer: Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    control(state, headers, uri, consumer, body, ControlAction::Resume).await
}

async fn control(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path(consumer): Path<String>,
    body: Result<Bytes, BytesRejection>,
    action: ControlAction,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    let body = typed_body::<ConsumerControlBody>(body)?;
    let reason = body.as_ref().and_then(|body| body.reason.as_deref());
    let outcome = state
        .gateway
        .control_consumer(&caller, &consumer, action, reason, "api")
        .await?;
    Ok(Json(outcome).into_response())
}
