//! Git's smart HTTP protocol for fetching (`{org}/{project}/_git/{repo}`),
//! as Azure Repos serves it to `git clone`/`fetch`/`ls-remote`: `GET
//! info/refs?service=git-upload-pack` and `POST git-upload-pack`, both
//! answered by `git upload-pack --stateless-rpc` on the repository's bare
//! repository (protocol v0, v1 and v2, the client's `Git-Protocol` header
//! passed on as `GIT_PROTOCOL`). Pushing over Git is not served (the
//! double's commits come from the REST API): 403.

use std::path::PathBuf;
use std::process::Stdio;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use tokio::io::AsyncWriteExt as _;

use super::objects;
use super::reply::{error, no_route};
use super::state::State;

/// What a `_git` request asks for.
pub(crate) enum Service {
    /// `GET info/refs?service=git-upload-pack`.
    Advertise(PathBuf),
    /// `POST git-upload-pack`.
    UploadPack(PathBuf),
}

/// Finds the repository and the service of `{org}/{project}/_git/{repo}/...`
/// (`segments[2] == "_git"`); otherwise the answer (404 for an unknown
/// project or repository, 403 for `git-receive-pack`).
pub(crate) fn locate(
    state: &State,
    method: &Method,
    path: &str,
    segments: &[String],
    query: &[(String, String)],
) -> Result<Service, Box<Response>> {
    let Some(project) = state.project(&segments[1]) else {
        return Err(Box::new(super::project_not_found(&segments[1])));
    };
    let Some(name) = segments.get(3) else {
        return Err(Box::new(no_route(method, path)));
    };
    let name = name.strip_suffix(".git").unwrap_or(name);
    let Some(index) = state.repository_index(&project.id, name) else {
        return Err(Box::new(super::git::repository_not_found(name)));
    };
    let dir = state.repositories[index].objects.dir().to_path_buf();
    let service = query
        .iter()
        .find(|(key, _)| key == "service")
        .map(|(_, value)| value.as_str());
    let rest: Vec<&str> = segments[4..].iter().map(String::as_str).collect();
    match (method.clone(), rest.as_slice(), service) {
        (Method::GET, ["info", "refs"], Some("git-upload-pack")) => Ok(Service::Advertise(dir)),
        (Method::POST, ["git-upload-pack"], _) => Ok(Service::UploadPack(dir)),
        (_, ["info", "refs"], Some("git-receive-pack")) | (_, ["git-receive-pack"], _) => Err(Box::new(error(
            StatusCode::FORBIDDEN,
            "GitPushNotSupportedException",
            "The Azure DevOps double takes commits through the REST pushes API, not git push.",
        ))),
        _ => Err(Box::new(no_route(method, path))),
    }
}

/// Answers `service` with `git upload-pack`.
pub(crate) async fn serve(service: Service, headers: &HeaderMap, body: Bytes) -> Response {
    // `version=2` (or `version=1`), passed on as git http-backend does.
    let protocol = headers
        .get("git-protocol")
        .and_then(|v| v.to_str().ok())
        .filter(|v| v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned);
    let v2 = protocol
        .as_deref()
        .is_some_and(|p| p.split(':').any(|p| p == "version=2"));
    match service {
        Service::Advertise(dir) => {
            let mut answer = Vec::new();
            // Protocol v2 starts with its capabilities, without the
            // service line (as git http-backend answers).
            if !v2 {
                answer.extend_from_slice(&pkt_line("# service=git-upload-pack\n"));
                answer.extend_from_slice(b"0000");
            }
            match upload_pack(&dir, true, protocol.as_deref(), Bytes::new()).await {
                Ok(refs) => answer.extend_from_slice(&refs),
                Err(answer) => return *answer,
            }
            git_answer("application/x-git-upload-pack-advertisement", answer)
        }
        Service::UploadPack(dir) => {
            let gzip = headers
                .get(header::CONTENT_ENCODING)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.eq_ignore_ascii_case("gzip") || v.eq_ignore_ascii_case("x-gzip"));
            let body = if gzip {
                let mut plain = Vec::new();
                let read = std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&body[..]), &mut plain);
                if let Err(err) = read {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "InvalidArgumentValueException",
                        &format!("The gzip request body could not be read: {err}"),
                    );
                }
                Bytes::from(plain)
            } else {
                body
            };
            match upload_pack(&dir, false, protocol.as_deref(), body).await {
                Ok(result) => git_answer("application/x-git-upload-pack-result", result),
                Err(answer) => *answer,
            }
        }
    }
}

/// `data` as one pkt-line (its length in 4 hex digits, then `data`).
fn pkt_line(data: &str) -> Vec<u8> {
    let mut line = format!("{:04x}", data.len() + 4).into_bytes();
    line.extend_from_slice(data.as_bytes());
    line
}

fn git_answer(content_type: &'static str, body: Vec<u8>) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Runs `git upload-pack --stateless-rpc [--advertise-refs]` on `dir` with
/// `input`; its output, or a 500 answer saying why it failed.
async fn upload_pack(
    dir: &std::path::Path,
    advertise: bool,
    protocol: Option<&str>,
    input: Bytes,
) -> Result<Vec<u8>, Box<Response>> {
    let failed = |why: String| {
        tracing::error!(error = %why, "the Azure DevOps double's git upload-pack failed");
        Box::new(error(StatusCode::INTERNAL_SERVER_ERROR, "GitUploadPackException", &why))
    };
    let mut command = tokio::process::Command::from(objects::command(dir));
    command.args([
        "-c",
        "uploadpack.allowReachableSHA1InWant=true",
        "-c",
        "uploadpack.allowAnySHA1InWant=true",
        "upload-pack",
        "--stateless-rpc",
    ]);
    if advertise {
        command.arg("--advertise-refs");
    }
    command.arg(dir);
    match protocol {
        Some(protocol) => command.env("GIT_PROTOCOL", protocol),
        None => command.env_remove("GIT_PROTOCOL"),
    };
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .map_err(|err| failed(format!("git upload-pack could not start: {err}")))?;
    // Written beside the reading: upload-pack may answer before it has
    // read everything.
    let writer = child.stdin.take().map(|mut stdin| {
        tokio::spawn(async move {
            // A client that hung up makes this fail; the exit status says so.
            let _ = stdin.write_all(&input).await;
        })
    });
    let output = child
        .wait_with_output()
        .await
        .map_err(|err| failed(format!("git upload-pack did not finish: {err}")))?;
    if let Some(writer) = writer {
        let _ = writer.await;
    }
    if !output.status.success() {
        return Err(failed(format!(
            "git upload-pack failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(output.stdout)
}

#[cfg(test)]
mod tests {
    use super::pkt_line;

    #[test]
    fn a_pkt_line_counts_its_own_length() {
        assert_eq!(
            pkt_line("# service=git-upload-pack\n"),
            b"001e# service=git-upload-pack\n"
        );
    }
}
