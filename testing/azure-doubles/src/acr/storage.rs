//! The storage account behind ACR Tasks' SAS URLs: `PUT` of a build
//! context to the write SAS `listBuildSourceUploadUrl` issued, `GET` of a
//! run's log through the read SAS `listLogSasUrl` issued. No bearer token:
//! the query's signature is the credential.
//!
//! Checks, with Blob Storage's XML errors: the signature (`sig`) is the one
//! issued for that very blob and allows the operation (`403
//! AuthenticationFailed`); a `PUT` carries `x-ms-blob-type: BlockBlob`
//! (`400 MissingRequiredHeader`, or `InvalidHeaderValue` for another type);
//! a `GET` names a blob that exists (`404 BlobNotFound`).

use std::collections::HashMap;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::put;

use super::{Sas, Shared};
use crate::serve::lock;

/// The container build contexts are uploaded to.
pub(super) const SOURCE_CONTAINER: &str = "source-upload";
/// The container run logs are read from.
pub(super) const LOG_CONTAINER: &str = "run-logs";
/// The storage service version the double answers with.
const STORAGE_VERSION: &str = "2019-12-12";

pub(super) fn router(state: Shared) -> Router {
    Router::new()
        .route("/{container}/{*name}", put(put_blob).get(get_blob))
        .with_state(state)
}

/// Issues a SAS URL for `container/name`: write (`sp=cw`) or read
/// (`sp=r`), valid for an hour.
pub(super) fn sign(state: &Shared, container: &str, name: &str, write: bool) -> String {
    let signature = uuid::Uuid::new_v4().simple().to_string();
    let expiry = (time::OffsetDateTime::now_utc() + time::Duration::hours(1))
        .replace_nanosecond(0)
        .ok()
        .and_then(|at| at.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default();
    let mut state = lock(state);
    state.sas.insert(
        format!("/{container}/{name}"),
        Sas {
            signature: signature.clone(),
            write,
        },
    );
    let permissions = if write { "cw" } else { "r" };
    format!(
        "{}/{container}/{name}?sv={STORAGE_VERSION}&se={}&sr=b&sp={permissions}&sig={signature}",
        state.blob_base,
        expiry.replace(':', "%3A")
    )
}

/// A Blob Storage error: XML, with `x-ms-error-code`.
fn storage_error(status: StatusCode, code: &str, message: &str) -> Response {
    let request_id = uuid::Uuid::new_v4();
    let body = format!(
        "\u{feff}<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>{code}</Code><Message>{message}\nRequestId:{request_id}\nTime:{}</Message></Error>",
        super::arm::now_rfc3339()
    );
    (
        status,
        [
            (header::CONTENT_TYPE, "application/xml".to_owned()),
            (header::HeaderName::from_static("x-ms-error-code"), code.to_owned()),
            (
                header::HeaderName::from_static("x-ms-request-id"),
                request_id.to_string(),
            ),
        ],
        body,
    )
        .into_response()
}

fn authentication_failed() -> Response {
    storage_error(
        StatusCode::FORBIDDEN,
        "AuthenticationFailed",
        "Server failed to authenticate the request. Make sure the value of Authorization header is formed correctly including the signature.",
    )
}

/// Whether the query signs `path` for the operation.
fn signed(shared: &Shared, path: &str, query: &HashMap<String, String>, write: bool) -> bool {
    let state = lock(shared);
    let Some(sas) = state.sas.get(path) else {
        return false;
    };
    query.get("sig") == Some(&sas.signature) && sas.write == write
}

async fn put_blob(
    State(shared): State<Shared>,
    Path((container, name)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = format!("/{container}/{name}");
    if !signed(&shared, &path, &query, true) {
        return authentication_failed();
    }
    match headers.get("x-ms-blob-type").and_then(|value| value.to_str().ok()) {
        None => {
            return storage_error(
                StatusCode::BAD_REQUEST,
                "MissingRequiredHeader",
                "An HTTP header that's mandatory for this request is not specified.",
            );
        }
        Some("BlockBlob") => {}
        Some(_) => {
            return storage_error(
                StatusCode::BAD_REQUEST,
                "InvalidHeaderValue",
                "The value for one of the HTTP headers is not in the correct format.",
            );
        }
    }
    let etag = format!(
        "\"0x{}\"",
        &uuid::Uuid::new_v4().simple().to_string()[..15].to_ascii_uppercase()
    );
    lock(&shared).blobs.insert(path, body.to_vec());
    (
        StatusCode::CREATED,
        [
            (header::ETAG, etag),
            (
                header::HeaderName::from_static("x-ms-request-id"),
                uuid::Uuid::new_v4().to_string(),
            ),
            (
                header::HeaderName::from_static("x-ms-version"),
                STORAGE_VERSION.to_owned(),
            ),
            (
                header::HeaderName::from_static("x-ms-request-server-encrypted"),
                "true".to_owned(),
            ),
        ],
    )
        .into_response()
}

async fn get_blob(
    State(shared): State<Shared>,
    Path((container, name)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let path = format!("/{container}/{name}");
    if !signed(&shared, &path, &query, false) {
        return authentication_failed();
    }
    let state = lock(&shared);
    let found = if container == LOG_CONTAINER {
        let run_id = name.strip_suffix("/rawtext.log").unwrap_or_default();
        state
            .runs
            .values()
            .find(|run| run.run_id == run_id)
            .map(|run| (run.log.clone().into_bytes(), "text/plain; charset=utf-8"))
    } else {
        state
            .blobs
            .get(&path)
            .map(|bytes| (bytes.clone(), "application/octet-stream"))
    };
    match found {
        Some((bytes, content_type)) => (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, content_type.to_owned()),
                (
                    header::HeaderName::from_static("x-ms-blob-type"),
                    "BlockBlob".to_owned(),
                ),
            ],
            bytes,
        )
            .into_response(),
        None => storage_error(
            StatusCode::NOT_FOUND,
            "BlobNotFound",
            "The specified blob does not exist.",
        ),
    }
}
