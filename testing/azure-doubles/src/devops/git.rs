//! Git repositories, refs, pushes, items and commits
//! (`{project}/_apis/git/repositories/...`).

use std::collections::BTreeMap;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use super::objects::{self, ObjectError, Objects};
use super::reply::{Req, created, date, enum_name, error, list, octets, ok};
use super::state::{Commit, Project, Repository, State, ZERO_ID, identity, object_id};

/// The answer to a write the repository's Git objects refused: 400 for a
/// path Git cannot hold, 500 when `git` itself failed.
pub(crate) fn object_failure(err: &ObjectError) -> Response {
    if err.is_bad_request() {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidArgumentValueException",
            &err.to_string(),
        );
    }
    tracing::error!(error = %err, "the Azure DevOps double could not write Git objects");
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "GitObjectStoreException",
        &err.to_string(),
    )
}

/// `404` TF401019 for a repository that does not exist.
pub(crate) fn repository_not_found(name: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "GitRepositoryNotFoundException",
        &format!(
            "TF401019: The Git repository with name or identifier {name} does not exist or you do not have permissions for the operation you are attempting."
        ),
    )
}

/// `{project}/_apis/git/repositories[/{repo}[/...]]`; `segments[0]` is `repositories`.
pub(crate) fn route(state: &mut State, project: &Project, req: &Req) -> Option<Response> {
    let rest = req.segments.len();
    if rest == 1 {
        return match req.method {
            Method::GET => {
                let values = state
                    .repositories
                    .iter()
                    .filter(|r| r.project_id == project.id)
                    .map(|r| state.repository_json(r))
                    .collect();
                Some(list(values))
            }
            Method::POST => Some(create_repository(state, project, req)),
            _ => None,
        };
    }
    let Some(index) = state.repository_index(&project.id, req.raw(1)) else {
        return Some(repository_not_found(req.raw(1)));
    };
    let response = match (req.method.clone(), req.seg(2).as_str(), rest) {
        (Method::GET, "", 2) => ok(state.repository_json(&state.repositories[index])),
        (Method::GET, "refs", _) => get_refs(state, index, req),
        (Method::POST, "refs", 3) => update_refs(state, index, req),
        (Method::POST, "pushes", 3) => push(state, index, req),
        (Method::GET, "items", _) => items(state, index, req),
        (Method::GET, "commits", 4) => commit(state, index, req.raw(3)),
        (_, "pullrequests", _) => return super::pulls::route(state, project, index, req),
        _ => return None,
    };
    Some(response)
}

fn create_repository(state: &mut State, project: &Project, req: &Req) -> Response {
    let body = match req.json() {
        Ok(body) => body,
        Err(answer) => return *answer,
    };
    let Some(name) = body["name"].as_str().filter(|n| !n.trim().is_empty()) else {
        return error(
            StatusCode::BAD_REQUEST,
            "ArgumentNullException",
            "Value cannot be null.\r\nParameter name: repositoryToCreate.Name",
        );
    };
    if let Some(id) = body["project"]["id"].as_str()
        && !id.eq_ignore_ascii_case(&project.id)
        && !id.eq_ignore_ascii_case(&project.name)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidArgumentValueException",
            "The project in the body is not the project of the URL.",
        );
    }
    if state.repository_index(&project.id, name).is_some() {
        return error(
            StatusCode::CONFLICT,
            "GitRepositoryNameAlreadyExistsException",
            &format!("TF400948: A Git repository with the name {name} already exists."),
        );
    }
    let id = uuid::Uuid::new_v4().to_string();
    let git_dir = state.git_root.join(format!("{id}.git"));
    if let Err(err) = objects::init(&git_dir) {
        return object_failure(&err);
    }
    let repository = Repository {
        id,
        name: name.to_owned(),
        project_id: project.id.clone(),
        default_branch: None,
        commits: BTreeMap::new(),
        refs: BTreeMap::new(),
        pushes: 0,
        objects: Objects::new(git_dir),
    };
    let value = state.repository_json(&repository);
    state.repositories.push(repository);
    created(value)
}

fn ref_json(state: &State, repository: &Repository, name: &str, object: &str) -> Value {
    json!({
        "name": name,
        "objectId": object,
        "creator": identity(),
        "url": format!(
            "{}/{}/_apis/git/repositories/{}/refs?filter={}",
            state.org_url(), repository.project_id, repository.id, name.trim_start_matches("refs/")
        ),
    })
}

fn get_refs(state: &State, index: usize, req: &Req) -> Response {
    let repository = &state.repositories[index];
    // `refs?filter=heads/main` or `refs/heads/main` (the route's `{*filter}`).
    let filter = match req.param("filter") {
        Some(filter) => filter.to_owned(),
        None => req.segments[3..].join("/"),
    };
    let prefix = format!("refs/{}", filter.trim_start_matches("refs/"));
    let top = req
        .param("$top")
        .and_then(|t| t.parse::<usize>().ok())
        .unwrap_or(usize::MAX);
    let values = repository
        .refs
        .iter()
        .filter(|(name, _)| filter.is_empty() || name.starts_with(&prefix))
        .take(top)
        .map(|(name, object)| ref_json(state, repository, name, object))
        .collect();
    list(values)
}

/// `POST refs`: each update is compared and set on its own; a stale
/// `oldObjectId` fails that update (`staleOldObjectId`), answered 200 with
/// `success: false` as Azure DevOps does.
fn update_refs(state: &mut State, index: usize, req: &Req) -> Response {
    let body = match req.json() {
        Ok(body) => body,
        Err(answer) => return *answer,
    };
    let Some(updates) = body.as_array() else {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidArgumentValueException",
            "The body must be an array of ref updates.",
        );
    };
    let repository = &mut state.repositories[index];
    let mut results = Vec::new();
    for update in updates {
        let name = update["name"].as_str().unwrap_or_default().to_owned();
        let old = update["oldObjectId"].as_str().unwrap_or(ZERO_ID).to_owned();
        let new = update["newObjectId"].as_str().unwrap_or(ZERO_ID).to_owned();
        let current = repository
            .refs
            .get(&name)
            .cloned()
            .unwrap_or_else(|| ZERO_ID.to_owned());
        let status = if !name.starts_with("refs/") {
            "invalidRefName"
        } else if current != old {
            "staleOldObjectId"
        } else if new != ZERO_ID && !repository.commits.contains_key(&new) {
            "unresolvableToCommit"
        } else {
            let new = (new != ZERO_ID).then_some(new.as_str());
            if let Err(err) = repository.set_ref(&name, new) {
                return object_failure(&err);
            }
            "succeeded"
        };
        results.push(json!({
            "repositoryId": repository.id,
            "name": name,
            "oldObjectId": old,
            "newObjectId": new,
            "isLocked": false,
            "updateStatus": status,
            "success": status == "succeeded",
            "rejectedBy": null,
            "customMessage": null,
        }));
    }
    list(results)
}

fn bad_change(message: &str) -> Response {
    error(StatusCode::BAD_REQUEST, "InvalidArgumentValueException", message)
}

fn refuse(message: &str) -> Box<Response> {
    Box::new(bad_change(message))
}

/// The bytes of a change's `newContent`.
fn content_of(change: &Value) -> Result<Vec<u8>, Box<Response>> {
    let content = change["newContent"]["content"].as_str().unwrap_or_default();
    let content_type = enum_name(
        &change["newContent"]["contentType"],
        &[(0, "rawText"), (1, "base64Encoded")],
    );
    match content_type.as_deref().unwrap_or("rawtext") {
        "rawtext" => Ok(content.as_bytes().to_vec()),
        "base64encoded" => STANDARD
            .decode(content)
            .map_err(|err| refuse(&format!("newContent is not base64: {err}"))),
        other => Err(refuse(&format!("Unknown contentType {other}."))),
    }
}

/// Applies one commit's `changes` to `files`.
fn apply_changes(files: &mut BTreeMap<String, Vec<u8>>, changes: &[Value]) -> Result<(), Box<Response>> {
    for change in changes {
        let path = change["item"]["path"].as_str().unwrap_or_default();
        if !path.starts_with('/') || path.len() < 2 {
            return Err(refuse(&format!("The path '{path}' is not a valid item path.")));
        }
        let kind = enum_name(&change["changeType"], &[(1, "add"), (2, "edit"), (16, "delete")]).unwrap_or_default();
        match kind.as_str() {
            "add" => {
                if files.contains_key(path) {
                    return Err(refuse(&format!(
                        "TF402455: The item {path} already exists; an add cannot create it."
                    )));
                }
                files.insert(path.to_owned(), content_of(change)?);
            }
            "edit" => {
                if !files.contains_key(path) {
                    return Err(refuse(&format!(
                        "TF401174: The item {path} could not be found to edit."
                    )));
                }
                files.insert(path.to_owned(), content_of(change)?);
            }
            "delete" => {
                let folder = format!("{path}/");
                let before = files.len();
                files.retain(|name, _| name != path && !name.starts_with(&folder));
                if files.len() == before {
                    return Err(refuse(&format!(
                        "TF401174: The item {path} could not be found to delete."
                    )));
                }
            }
            other => return Err(refuse(&format!("The change type '{other}' is not supported."))),
        }
    }
    Ok(())
}

/// `POST pushes`: one ref update, its `oldObjectId` compared with the
/// branch (for a new branch: the commit it starts from, or zeros); a stale
/// one is 409 TF401028.
fn push(state: &mut State, index: usize, req: &Req) -> Response {
    let body = match req.json() {
        Ok(body) => body,
        Err(answer) => return *answer,
    };
    let update = &body["refUpdates"][0];
    let Some(name) = update["name"].as_str().filter(|n| n.starts_with("refs/")) else {
        return bad_change("A push needs one refUpdates entry naming a ref.");
    };
    let old = update["oldObjectId"].as_str().unwrap_or(ZERO_ID).to_owned();
    let Some(commits) = body["commits"].as_array().filter(|c| !c.is_empty()) else {
        return bad_change("A push needs at least one commit.");
    };
    let org_url = state.org_url();
    let repository = &mut state.repositories[index];
    // An existing branch must be at `oldObjectId`; a new one starts from
    // `oldObjectId` (the base branch's commit, or zeros for a first commit).
    let stale = match repository.refs.get(name) {
        Some(current) => *current != old,
        None => old != ZERO_ID && !repository.commits.contains_key(&old),
    };
    if stale {
        return error(
            StatusCode::CONFLICT,
            "GitReferenceStaleException",
            &format!(
                "TF401028: The reference '{name}' has already been updated by another client, so you cannot update it. Please update again."
            ),
        );
    }
    let mut parent = (old != ZERO_ID).then(|| old.clone());
    let mut files = parent
        .as_ref()
        .and_then(|p| repository.commits.get(p))
        .map(|c| c.files.clone())
        .unwrap_or_default();
    let at = time::OffsetDateTime::now_utc();
    let date = date(at);
    let mut made = Vec::new();
    for commit in commits {
        if let Err(answer) = apply_changes(&mut files, commit["changes"].as_array().map_or(&[][..], Vec::as_slice)) {
            return *answer;
        }
        let comment = commit["comment"].as_str().unwrap_or_default().to_owned();
        let signature = |who: &Value| {
            let mut who = if who.is_object() {
                who.clone()
            } else {
                json!({"name": "Bosun Service", "email": "bosun@contoso.example"})
            };
            if who["date"].is_null() {
                who["date"] = json!(date);
            }
            who
        };
        let author = signature(&commit["author"]);
        let committer = signature(&commit["committer"]);
        let parents: Vec<String> = parent.iter().cloned().collect();
        let written = repository.objects.tree(&files).and_then(|tree| {
            let id = repository
                .objects
                .commit(&tree, &parents, &comment, &author, &committer, at)?;
            Ok((tree, id))
        });
        let (tree, id) = match written {
            Ok(written) => written,
            Err(err) => return object_failure(&err),
        };
        repository.commits.insert(
            id.clone(),
            Commit {
                id: id.clone(),
                tree_id: tree,
                parents,
                comment,
                author,
                committer,
                files: files.clone(),
            },
        );
        made.push(id.clone());
        parent = Some(id);
    }
    let new = parent.unwrap_or_default();
    if let Err(err) = repository.set_ref(name, Some(&new)) {
        return object_failure(&err);
    }
    repository.pushes += 1;
    let push_id = repository.pushes;
    let repo_url = format!(
        "{org_url}/{}/_apis/git/repositories/{}",
        repository.project_id, repository.id
    );
    let commits: Vec<Value> = made
        .iter()
        .filter_map(|id| repository.commits.get(id))
        .map(|c| commit_json(&repo_url, c))
        .collect();
    let repository = state.repository_json(&state.repositories[index]);
    created(json!({
        "pushId": push_id,
        "date": date,
        "pushedBy": identity(),
        "repository": repository,
        "commits": commits,
        "refUpdates": [{ "repositoryId": repository["id"], "name": name, "oldObjectId": old, "newObjectId": new }],
        "url": format!("{repo_url}/pushes/{push_id}"),
    }))
}

fn commit_json(repo_url: &str, commit: &Commit) -> Value {
    json!({
        "commitId": commit.id,
        "treeId": commit.tree_id,
        "parents": commit.parents,
        "comment": commit.comment,
        "author": commit.author,
        "committer": commit.committer,
        "url": format!("{repo_url}/commits/{}", commit.id),
    })
}

fn commit(state: &State, index: usize, id: &str) -> Response {
    let repository = &state.repositories[index];
    let repo_url = format!(
        "{}/{}/_apis/git/repositories/{}",
        state.org_url(),
        repository.project_id,
        repository.id
    );
    match repository.commits.get(&id.to_ascii_lowercase()) {
        Some(commit) => ok(commit_json(&repo_url, commit)),
        None => error(
            StatusCode::NOT_FOUND,
            "GitUnresolvableToCommitException",
            &format!(
                "TF401175:The version descriptor <Commit: {id}> could not be resolved to a version in the repository {}",
                repository.name
            ),
        ),
    }
}

/// The commit a request's `versionDescriptor` names (the default branch
/// when it names none).
pub(crate) fn resolve_version<'a>(repository: &'a Repository, req: &Req) -> Result<&'a Commit, Box<Response>> {
    // Names or the enum's numbers (Microsoft's clients send numbers).
    let kind = match req
        .param("versionDescriptor.versionType")
        .unwrap_or("branch")
        .to_ascii_lowercase()
        .as_str()
    {
        "2" | "commit" => "commit".to_owned(),
        "1" | "tag" => "tag".to_owned(),
        _ => "branch".to_owned(),
    };
    let version = req.param("versionDescriptor.version");
    let not_found = |label: &str| {
        error(
            StatusCode::NOT_FOUND,
            "GitUnresolvableToCommitException",
            &format!(
                "TF401175:The version descriptor <{label}> could not be resolved to a version in the repository {}",
                repository.name
            ),
        )
    };
    let commit_id = match kind.as_str() {
        "commit" => version.map(str::to_ascii_lowercase),
        _ => {
            let branch = match version {
                Some(branch) => format!("refs/heads/{}", branch.trim_start_matches("refs/heads/")),
                None => repository.default_branch.clone().unwrap_or_default(),
            };
            repository.refs.get(&branch).cloned()
        }
    };
    let label = format!(
        "{}: {}",
        if kind == "commit" { "Commit" } else { "Branch" },
        version.unwrap_or_default()
    );
    commit_id
        .and_then(|id| repository.commits.get(&id))
        .ok_or_else(|| Box::new(not_found(&label)))
}

/// `GET items`: one file (raw bytes or JSON, with `content` when asked),
/// a folder, or with `recursionLevel` the items under `scopePath`.
fn items(state: &State, index: usize, req: &Req) -> Response {
    let repository = &state.repositories[index];
    let commit = match resolve_version(repository, req) {
        Ok(commit) => commit,
        Err(answer) => return *answer,
    };
    let route_path = (req.segments.len() > 3).then(|| format!("/{}", req.segments[3..].join("/")));
    let path = req
        .param("path")
        .map(str::to_owned)
        .or(route_path)
        .or_else(|| req.param("scopePath").map(str::to_owned))
        .unwrap_or_else(|| "/".to_owned());
    let path = if path.starts_with('/') {
        path
    } else {
        format!("/{path}")
    };
    let repo_url = format!(
        "{}/{}/_apis/git/repositories/{}",
        state.org_url(),
        repository.project_id,
        repository.id
    );
    let item = |path: &str, folder: bool| {
        let object = match commit.files.get(path) {
            Some(bytes) if !folder => object_id(&[b"blob", bytes]),
            _ => object_id(&[b"tree", path.as_bytes(), commit.tree_id.as_bytes()]),
        };
        json!({
            "objectId": object,
            "gitObjectType": if folder { "tree" } else { "blob" },
            "commitId": commit.id,
            "path": path,
            "isFolder": folder,
            "url": format!("{repo_url}/items?path={path}&versionType=Commit&version={}", commit.id),
        })
    };
    let folder_prefix = if path == "/" {
        "/".to_owned()
    } else {
        format!("{path}/")
    };
    let is_folder = path == "/" || commit.files.keys().any(|name| name.starts_with(&folder_prefix));
    if !is_folder && !commit.files.contains_key(&path) {
        return error(
            StatusCode::NOT_FOUND,
            "GitItemNotFoundException",
            &format!(
                "TF401174: The item '{path}' could not be found in the repository '{}' at the version specified by '<Commit: {}>' (resolved to commit '{}').",
                repository.name, commit.id, commit.id
            ),
        );
    }
    let recursion = match req
        .param("recursionLevel")
        .unwrap_or("none")
        .to_ascii_lowercase()
        .as_str()
    {
        "120" | "full" => "full",
        "1" | "4" | "onelevel" | "onelevelplusnestedemptyfolders" => "onelevel",
        _ => "none",
    };
    if recursion != "none" && req.param("path").is_none() {
        let mut values = vec![item(&path, is_folder)];
        let mut folders = std::collections::BTreeSet::new();
        for name in commit.files.keys().filter(|name| name.starts_with(&folder_prefix)) {
            let rest = &name[folder_prefix.len()..];
            let mut parts: Vec<&str> = rest.split('/').collect();
            parts.pop();
            let mut folder = folder_prefix.trim_end_matches('/').to_owned();
            for part in parts.iter().take(if recursion == "full" { usize::MAX } else { 1 }) {
                folder = format!("{folder}/{part}");
                folders.insert(folder.clone());
            }
            if recursion == "full" || parts.is_empty() {
                values.push(item(name, false));
            }
        }
        values.extend(folders.iter().map(|f| item(f, true)));
        return list(values);
    }
    if is_folder {
        return ok(item(&path, true));
    }
    let bytes = commit.files.get(&path).cloned().unwrap_or_default();
    if req.wants_octets() {
        return octets(bytes);
    }
    let mut value = item(&path, false);
    if req
        .param("includeContent")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    {
        value["content"] = json!(String::from_utf8_lossy(&bytes));
    }
    ok(value)
}
