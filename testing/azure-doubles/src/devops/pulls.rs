//! Pull requests and their statuses
//! (`{project}/_apis/git/repositories/{repo}/pullrequests[/{id}[/statuses]]`).

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::objects::ObjectError;
use super::reply::{PULL_REQUEST_STATUS, Req, created, date, enum_name, error, list, now, ok};
use super::state::{Commit, Project, PullRequest, State, identity, object_id};

/// Routes `segments[2] == pullrequests` of repository `index`.
pub(crate) fn route(state: &mut State, project: &Project, index: usize, req: &Req) -> Option<Response> {
    let response = match (req.method.clone(), req.segments.len(), req.seg(4).as_str()) {
        (Method::GET, 3, _) => list_pull_requests(state, index, req),
        (Method::POST, 3, _) => create(state, project, index, req),
        (method, 4..=6, kind) => {
            let Some(pr) = req.raw(3).parse::<u64>().ok().and_then(|id| {
                state
                    .pull_requests
                    .iter()
                    .position(|p| p.id == id && p.repository_id == state.repositories[index].id)
            }) else {
                return Some(error(
                    StatusCode::NOT_FOUND,
                    "GitPullRequestNotFoundException",
                    &format!("TF401180: The requested pull request was not found: {}", req.raw(3)),
                ));
            };
            match (method, kind) {
                (Method::GET, "") => ok(pull_request_json(state, &state.pull_requests[pr])),
                (Method::PATCH, "") => update(state, pr, req),
                (Method::GET, "statuses") => list(state.pull_requests[pr].statuses.clone()),
                (Method::POST, "statuses") => create_status(state, pr, req),
                _ => return None,
            }
        }
        _ => return None,
    };
    Some(response)
}

/// A `GitPullRequest`.
pub(crate) fn pull_request_json(state: &State, pr: &PullRequest) -> Value {
    let repository = state
        .repositories
        .iter()
        .find(|r| r.id == pr.repository_id)
        .map(|r| state.repository_json(r))
        .unwrap_or(Value::Null);
    let repo_url = repository["url"].as_str().unwrap_or_default().to_owned();
    let commit_ref = |id: &Option<String>| {
        id.as_ref().map_or(
            Value::Null,
            |id| json!({ "commitId": id, "url": format!("{repo_url}/commits/{id}") }),
        )
    };
    let project_id = repository["project"]["id"].as_str().unwrap_or_default().to_owned();
    let mut value = json!({
        "repository": repository,
        "pullRequestId": pr.id,
        "codeReviewId": pr.id,
        "status": pr.status,
        "createdBy": identity(),
        "creationDate": pr.created,
        "title": pr.title,
        "description": pr.description,
        "sourceRefName": pr.source,
        "targetRefName": pr.target,
        "mergeStatus": "succeeded",
        "isDraft": false,
        "mergeId": object_id(&[b"merge", pr.id.to_string().as_bytes()]),
        "lastMergeSourceCommit": commit_ref(&pr.last_merge_source_commit),
        "lastMergeTargetCommit": commit_ref(&pr.last_merge_target_commit),
        "reviewers": [],
        "url": format!("{repo_url}/pullRequests/{}", pr.id),
        "supportsIterations": true,
        "artifactId": format!("vstfs:///Git/PullRequestId/{project_id}%2f{}%2f{}", pr.repository_id, pr.id),
    });
    if pr.last_merge_commit.is_some() {
        value["lastMergeCommit"] = commit_ref(&pr.last_merge_commit);
        value["closedDate"] = json!(pr.created);
    }
    if let Some(by) = &pr.auto_complete_set_by {
        value["autoCompleteSetBy"] = by.clone();
    }
    if let Some(options) = &pr.completion_options {
        value["completionOptions"] = options.clone();
    }
    value
}

/// `GET pullrequests` with `searchCriteria.sourceRefName`,
/// `.targetRefName` and `.status` (`active` when not given, `all` for
/// every status), newest first.
fn list_pull_requests(state: &State, index: usize, req: &Req) -> Response {
    let repository_id = &state.repositories[index].id;
    let source = req.param("searchCriteria.sourceRefName");
    let target = req.param("searchCriteria.targetRefName");
    let status = req
        .param("searchCriteria.status")
        .and_then(|s| {
            enum_name(
                &s.parse::<i64>().map_or_else(|_| Value::from(s), Value::from),
                PULL_REQUEST_STATUS,
            )
        })
        .unwrap_or_else(|| "active".to_owned());
    let top = req.param("$top").and_then(|t| t.parse::<usize>().ok()).unwrap_or(101);
    let values = state
        .pull_requests
        .iter()
        .rev()
        .filter(|pr| &pr.repository_id == repository_id)
        .filter(|pr| source.is_none_or(|s| s.eq_ignore_ascii_case(&pr.source)))
        .filter(|pr| target.is_none_or(|t| t.eq_ignore_ascii_case(&pr.target)))
        .filter(|pr| status == "all" || pr.status == status)
        .take(top)
        .map(|pr| pull_request_json(state, pr))
        .collect();
    list(values)
}

/// `POST pullrequests`: both branches must exist; a second active pull
/// request for the same two branches is 409 TF401179.
fn create(state: &mut State, project: &Project, index: usize, req: &Req) -> Response {
    let body = match req.json() {
        Ok(body) => body,
        Err(answer) => return *answer,
    };
    let source = body["sourceRefName"].as_str().unwrap_or_default().to_owned();
    let target = body["targetRefName"].as_str().unwrap_or_default().to_owned();
    let repository = &state.repositories[index];
    let (Some(source_head), Some(target_head)) = (repository.refs.get(&source), repository.refs.get(&target)) else {
        return error(
            StatusCode::BAD_REQUEST,
            "GitPullRequestCannotBeActivated",
            "TF401398: The pull request cannot be activated because the source and/or the target branch no longer exists, or the requested refs are not branches",
        );
    };
    if source == target {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidArgumentValueException",
            "TF401387: The source and target branches of a pull request must be different.",
        );
    }
    if state.pull_requests.iter().any(|pr| {
        pr.repository_id == repository.id && pr.status == "active" && pr.source == source && pr.target == target
    }) {
        return error(
            StatusCode::CONFLICT,
            "GitPullRequestExistsException",
            "TF401179: An active pull request for the source and target branch already exists.",
        );
    }
    let pr = PullRequest {
        id: state.next_id + 1,
        repository_id: repository.id.clone(),
        source,
        target,
        title: body["title"].as_str().unwrap_or_default().to_owned(),
        description: body["description"].as_str().unwrap_or_default().to_owned(),
        status: "active".to_owned(),
        created: now(),
        auto_complete_set_by: None,
        completion_options: None,
        last_merge_source_commit: Some(source_head.clone()),
        last_merge_target_commit: Some(target_head.clone()),
        last_merge_commit: None,
        statuses: Vec::new(),
    };
    let _ = state.next();
    let _ = project;
    let value = pull_request_json(state, &pr);
    state.pull_requests.push(pr);
    created(value)
}

/// `PATCH pullrequests/{id}`: title, description, auto-complete and
/// completion options, and status (`abandoned`, `active`, or `completed`,
/// which needs `lastMergeSourceCommit` to be the source's head as Azure
/// DevOps asks).
fn update(state: &mut State, index: usize, req: &Req) -> Response {
    let body = match req.json() {
        Ok(body) => body,
        Err(answer) => return *answer,
    };
    let pr = &mut state.pull_requests[index];
    if let Some(title) = body["title"].as_str() {
        pr.title = title.to_owned();
    }
    if let Some(description) = body["description"].as_str() {
        pr.description = description.to_owned();
    }
    if body["autoCompleteSetBy"].is_object() {
        let mut by = identity();
        by["id"] = body["autoCompleteSetBy"]["id"].clone();
        pr.auto_complete_set_by = Some(by);
    }
    if body["completionOptions"].is_object() {
        pr.completion_options = Some(body["completionOptions"].clone());
    }
    let answer_before_completing = if let Some(status) = enum_name(&body["status"], PULL_REQUEST_STATUS) {
        match status.as_str() {
            "abandoned" | "active" => {
                if pr.status == "completed" {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "InvalidArgumentValueException",
                        "TF401181: The pull request cannot be edited due to its state.",
                    );
                }
                pr.status = status;
                None
            }
            "completed" => {
                let asked = body["lastMergeSourceCommit"]["commitId"].as_str().unwrap_or_default();
                if pr.last_merge_source_commit.as_deref() != Some(asked) {
                    return error(
                        StatusCode::CONFLICT,
                        "GitPullRequestStaleException",
                        "TF401192: The pull request was updated by another client; lastMergeSourceCommit does not match the source branch.",
                    );
                }
                if let Err(err) = complete(state, index) {
                    return super::git::object_failure(&err);
                }
                None
            }
            other => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "InvalidArgumentValueException",
                    &format!("The status {other} is not valid."),
                );
            }
        }
    } else {
        Some(())
    };
    let value = pull_request_json(state, &state.pull_requests[index]);
    // Auto-complete completes once the blocking policies pass; the PATCH
    // answer still shows the pull request active, as Azure DevOps does.
    if answer_before_completing.is_some() {
        auto_complete(state, index);
    }
    ok(value)
}

/// Completes pull request `index` if auto-complete is set and every
/// blocking policy that applies to it is approved.
pub(crate) fn auto_complete(state: &mut State, index: usize) {
    let pr = &state.pull_requests[index];
    if pr.status != "active" || pr.auto_complete_set_by.is_none() {
        return;
    }
    let pending = super::policy::evaluations(state, pr).iter().any(|evaluation| {
        evaluation["configuration"]["isBlocking"] == json!(true) && evaluation["status"] != json!("approved")
    });
    if !pending && let Err(err) = complete(state, index) {
        // Left active: a later PATCH or evaluation tries again.
        tracing::error!(error = %err, "the Azure DevOps double could not merge a pull request");
    }
}

/// Merges the pull request (no fast-forward: a merge commit on the target
/// whose tree is the source's, with the target and the source as parents)
/// and marks it completed; `Err` (and nothing changed) when the merge
/// commit cannot be written.
fn complete(state: &mut State, index: usize) -> Result<(), ObjectError> {
    let pr = state.pull_requests[index].clone();
    let Some(repository) = state.repositories.iter_mut().find(|r| r.id == pr.repository_id) else {
        return Ok(());
    };
    let (Some(source), Some(target)) = (
        repository.refs.get(&pr.source).cloned(),
        repository.refs.get(&pr.target).cloned(),
    ) else {
        return Ok(());
    };
    let Some(files) = repository.commits.get(&source).map(|c| c.files.clone()) else {
        return Ok(());
    };
    let message = pr
        .completion_options
        .as_ref()
        .and_then(|o| o["mergeCommitMessage"].as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("Merged PR {}: {}", pr.id, pr.title));
    let at = time::OffsetDateTime::now_utc();
    let signature = json!({ "name": "Bosun Service", "email": "bosun@contoso.example", "date": date(at) });
    let tree = repository
        .commits
        .get(&source)
        .map(|c| c.tree_id.clone())
        .unwrap_or_default();
    let parents = vec![target.clone(), source.clone()];
    let id = repository
        .objects
        .commit(&tree, &parents, &message, &signature, &signature, at)?;
    repository.commits.insert(
        id.clone(),
        Commit {
            id: id.clone(),
            tree_id: tree,
            parents,
            comment: message,
            author: signature.clone(),
            committer: signature,
            files,
        },
    );
    repository.set_ref(&pr.target, Some(&id))?;
    let delete_source = pr
        .completion_options
        .as_ref()
        .is_some_and(|o| o["deleteSourceBranch"] == json!(true));
    if delete_source {
        repository.set_ref(&pr.source, None)?;
    }
    let pr = &mut state.pull_requests[index];
    pr.status = "completed".to_owned();
    pr.last_merge_source_commit = Some(source);
    pr.last_merge_target_commit = Some(target);
    pr.last_merge_commit = Some(id);
    Ok(())
}

/// `POST pullrequests/{id}/statuses`: `state` and `context.name` needed.
fn create_status(state: &mut State, index: usize, req: &Req) -> Response {
    let body = match req.json() {
        Ok(body) => body,
        Err(answer) => return *answer,
    };
    if body["context"]["name"].as_str().is_none_or(str::is_empty) {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidArgumentValueException",
            "The status context name must not be empty.",
        );
    }
    let allowed = [
        (0, "notSet"),
        (1, "pending"),
        (2, "succeeded"),
        (3, "failed"),
        (4, "error"),
        (5, "notApplicable"),
    ];
    let asked = enum_name(&body["state"], &allowed).unwrap_or_else(|| "notset".to_owned());
    let Some(status_state) = allowed
        .iter()
        .map(|(_, name)| *name)
        .find(|name| name.eq_ignore_ascii_case(&asked))
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidArgumentValueException",
            &format!("The status state {asked} is not valid."),
        );
    };
    let pr = &mut state.pull_requests[index];
    let id = pr.statuses.len() + 1;
    let date = now();
    let status = json!({
        "id": id,
        "state": status_state,
        "description": body["description"],
        "context": body["context"],
        "targetUrl": body["targetUrl"],
        "creationDate": date,
        "updatedDate": date,
        "createdBy": identity(),
    });
    pr.statuses.push(status.clone());
    ok(status)
}
