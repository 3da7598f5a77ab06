//! Branch policies: configurations (`{project}/_apis/policy/configurations`,
//! and the per-branch query `{project}/_apis/git/policy/configurations`)
//! and the evaluations of a pull request (`{project}/_apis/policy/evaluations`).

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::reply::{Req, error, list, now, ok};
use super::state::{PolicyConfiguration, Project, PullRequest, State, identity};

/// The display name of a policy type id (the ones bosun uses and the
/// common ones).
fn type_name(id: &str) -> &'static str {
    match id.to_ascii_lowercase().as_str() {
        "fa6ba5fd-ee4a-4c6f-9f9e-5ee3e79ff4c3" => "Minimum number of reviewers",
        "0609b952-1397-4640-95ec-e00a01b2c241" => "Build",
        "fd2167ab-b0be-447a-8ec8-39368250530e" => "Required reviewers",
        "40e92b44-2fe1-4dd6-b3d8-74a9c21d0c6e" => "Work item linking",
        "c6a1889d-b943-4856-b76f-9e46bb6b0df2" => "Comment requirements",
        "fa4e907d-c16b-4a4c-9dfa-4916e5d171ab" => "Require a merge strategy",
        "cbdc66da-9728-4af8-aada-9a5a32e4a226" => "Status",
        _ => "Policy",
    }
}

fn configuration_json(state: &State, config: &PolicyConfiguration) -> Value {
    let mut value = config.body.clone();
    let type_id = value["type"]["id"].as_str().unwrap_or_default().to_owned();
    let url = format!(
        "{}/{}/_apis/policy/configurations/{}",
        state.org_url(),
        config.project_id,
        config.id
    );
    value["id"] = json!(config.id);
    value["revision"] = json!(1);
    value["isDeleted"] = json!(false);
    value["createdBy"] = identity();
    value["createdDate"] = json!(value["createdDate"].as_str().map_or_else(now, str::to_owned));
    value["url"] = json!(url);
    value["type"] = json!({
        "id": type_id,
        "url": format!("{}/{}/_apis/policy/types/{type_id}", state.org_url(), config.project_id),
        "displayName": type_name(&type_id),
    });
    value
}

/// Whether a configuration's scope covers `repository_id` and `ref_name`.
fn in_scope(config: &PolicyConfiguration, repository_id: &str, ref_name: &str) -> bool {
    let Some(scopes) = config.body["settings"]["scope"].as_array() else {
        return true;
    };
    scopes.iter().any(|scope| {
        let repo_ok = scope["repositoryId"]
            .as_str()
            .is_none_or(|id| id.eq_ignore_ascii_case(repository_id));
        let ref_ok = match (scope["refName"].as_str(), scope["matchKind"].as_str()) {
            (None, _) => true,
            (Some(name), Some(kind)) if kind.eq_ignore_ascii_case("prefix") => ref_name.starts_with(name),
            (Some(name), _) => name == ref_name,
        };
        repo_ok && ref_ok
    })
}

/// `{project}/_apis/policy/...`; `segments[0]` is `policy`.
pub(crate) fn route(state: &mut State, project: &Project, req: &Req) -> Option<Response> {
    let response = match (req.method.clone(), req.seg(1).as_str(), req.segments.len()) {
        (Method::GET, "configurations", 2) => {
            let wanted = req.param("policyType").map(str::to_ascii_lowercase);
            let values = state
                .policies
                .iter()
                .filter(|c| c.project_id == project.id)
                .filter(|c| {
                    wanted.as_ref().is_none_or(|t| {
                        c.body["type"]["id"]
                            .as_str()
                            .is_some_and(|id| id.eq_ignore_ascii_case(t))
                    })
                })
                .map(|c| configuration_json(state, c))
                .collect();
            list(values)
        }
        (Method::GET, "configurations", 3) => {
            match state
                .policies
                .iter()
                .find(|c| c.project_id == project.id && req.raw(2).parse::<u64>().ok() == Some(c.id))
            {
                Some(config) => ok(configuration_json(state, config)),
                None => error(
                    StatusCode::NOT_FOUND,
                    "PolicyConfigurationNotFoundException",
                    &format!("TF400892: Policy configuration {} not found.", req.raw(2)),
                ),
            }
        }
        (Method::POST, "configurations", 2) => create(state, project, req),
        (Method::GET, "evaluations", 2) => evaluations_of(state, project, req),
        _ => return None,
    };
    Some(response)
}

fn create(state: &mut State, project: &Project, req: &Req) -> Response {
    let body = match req.json() {
        Ok(body) => body,
        Err(answer) => return *answer,
    };
    if body["type"]["id"]
        .as_str()
        .is_none_or(|id| uuid::Uuid::parse_str(id).is_err())
    {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidArgumentValueException",
            "The policy configuration must name its type by id.",
        );
    }
    if !body["settings"].is_object() {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidArgumentValueException",
            "The policy configuration must have settings.",
        );
    }
    let config = PolicyConfiguration {
        id: state.next(),
        project_id: project.id.clone(),
        body,
    };
    let value = configuration_json(state, &config);
    state.policies.push(config);
    ok(value)
}

/// `GET {project}/_apis/git/policy/configurations?repositoryId=&refName=&policyType=`.
pub(crate) fn git_configurations(state: &State, project: &Project, req: &Req) -> Response {
    let repository = req.param("repositoryId").unwrap_or_default();
    let ref_name = req.param("refName").unwrap_or_default();
    let wanted = req.param("policyType").map(str::to_ascii_lowercase);
    let values = state
        .policies
        .iter()
        .filter(|c| c.project_id == project.id)
        .filter(|c| repository.is_empty() || in_scope(c, repository, if ref_name.is_empty() { "" } else { ref_name }))
        .filter(|c| {
            wanted.as_ref().is_none_or(|t| {
                c.body["type"]["id"]
                    .as_str()
                    .is_some_and(|id| id.eq_ignore_ascii_case(t))
            })
        })
        .map(|c| configuration_json(state, c))
        .collect();
    list(values)
}

/// The evaluations of every enabled policy applying to `pr`'s repository
/// and target branch; `queued` unless the test set another status.
pub(crate) fn evaluations(state: &State, pr: &PullRequest) -> Vec<Value> {
    let Some(repository) = state.repositories.iter().find(|r| r.id == pr.repository_id) else {
        return Vec::new();
    };
    let artifact = format!("vstfs:///CodeReview/CodeReviewId/{}/{}", repository.project_id, pr.id);
    state
        .policies
        .iter()
        .filter(|c| c.project_id == repository.project_id)
        .filter(|c| c.body["isEnabled"] != json!(false))
        .filter(|c| in_scope(c, &repository.id, &pr.target))
        .map(|c| {
            let status = state
                .evaluation_status
                .get(&(pr.id, c.id))
                .cloned()
                .unwrap_or_else(|| "queued".to_owned());
            json!({
                "evaluationId": format!("{:08x}-0000-4000-8000-{:012x}", pr.id, c.id),
                "artifactId": artifact,
                "configuration": configuration_json(state, c),
                "status": status,
                "startedDate": pr.created,
                "context": null,
            })
        })
        .collect()
}

/// `GET policy/evaluations?artifactId=vstfs:///CodeReview/CodeReviewId/{projectId}/{id}`.
fn evaluations_of(state: &State, project: &Project, req: &Req) -> Response {
    if let Err(answer) = req.require_preview() {
        return *answer;
    }
    let Some(artifact) = req.param("artifactId") else {
        return error(
            StatusCode::BAD_REQUEST,
            "ArgumentNullException",
            "Value cannot be null.\r\nParameter name: artifactId",
        );
    };
    let parts: Vec<&str> = artifact
        .trim_start_matches("vstfs:///CodeReview/CodeReviewId/")
        .split('/')
        .collect();
    let (Some(project_id), Some(id)) = (parts.first(), parts.get(1).and_then(|id| id.parse::<u64>().ok())) else {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidArgumentValueException",
            &format!("The artifact id {artifact} is not a pull request artifact id."),
        );
    };
    if !project_id.eq_ignore_ascii_case(&project.id) {
        return list(Vec::new());
    }
    let values = state
        .pull_requests
        .iter()
        .find(|pr| pr.id == id)
        .map(|pr| evaluations(state, pr))
        .unwrap_or_default();
    list(values)
}
