//! Pipelines and their runs (`{project}/_apis/pipelines[/{id}/runs[/{runId}]]`),
//! build definitions (`{project}/_apis/build/definitions`) and builds with
//! their timelines, logs and pipeline artifacts
//! (`{project}/_apis/build/builds/...`, `{project}/_apis/artifact/...`). A
//! run is a build of the same id; what it does is the test's
//! [`super::RunScript`].

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::reply::{Req, enum_name, error, list, now, octets, ok, text};
use super::script::{RunScript, RunStart, ScriptedArtifact};
use super::state::{Build, Pipeline, Project, State, TestRun, identity};

fn pipeline_not_found(id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "PipelineNotFoundException",
        &format!("Pipeline with id {id} not found."),
    )
}

fn build_not_found(id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "BuildNotFoundException",
        &format!("Build {id} could not be found."),
    )
}

/// `{project}/_apis/pipelines/...`; `segments[0]` is `pipelines`.
pub(crate) fn route_pipelines(state: &mut State, project: &Project, req: &Req) -> Option<Response> {
    if req.segments.len() == 1 {
        return match req.method {
            Method::GET => {
                let values = state
                    .pipelines
                    .iter()
                    .filter(|p| p.project_id == project.id)
                    .map(|p| pipeline_json(state, p))
                    .collect();
                Some(list(values))
            }
            Method::POST => Some(create_pipeline(state, project, req)),
            _ => None,
        };
    }
    let Some(index) = state
        .pipelines
        .iter()
        .position(|p| p.project_id == project.id && req.raw(1).parse::<u64>().ok() == Some(p.id))
    else {
        return Some(pipeline_not_found(req.raw(1)));
    };
    let response = match (req.method.clone(), req.seg(2).as_str(), req.segments.len()) {
        (Method::GET, "", 2) => ok(pipeline_json(state, &state.pipelines[index])),
        (Method::POST, "runs", 3) => run_pipeline(state, index, req),
        (Method::GET, "runs", 3) => {
            let id = state.pipelines[index].id;
            let values = state
                .builds
                .iter()
                .rev()
                .filter(|b| b.pipeline_id == id)
                .map(|b| run_json(state, b))
                .collect();
            list(values)
        }
        (Method::GET, "runs", 4) => {
            let id = state.pipelines[index].id;
            match state
                .builds
                .iter()
                .find(|b| b.pipeline_id == id && req.raw(3).parse::<u64>().ok() == Some(b.id))
            {
                Some(build) => ok(run_json(state, build)),
                None => error(
                    StatusCode::NOT_FOUND,
                    "PipelineRunNotFoundException",
                    &format!("Pipeline run {} not found.", req.raw(3)),
                ),
            }
        }
        _ => return None,
    };
    Some(response)
}

fn pipeline_url(state: &State, pipeline: &Pipeline) -> String {
    format!(
        "{}/{}/_apis/pipelines/{}",
        state.org_url(),
        pipeline.project_id,
        pipeline.id
    )
}

fn pipeline_json(state: &State, pipeline: &Pipeline) -> Value {
    let url = pipeline_url(state, pipeline);
    json!({
        "id": pipeline.id,
        "revision": 1,
        "name": pipeline.name,
        "folder": pipeline.folder,
        "url": format!("{url}?revision=1"),
        "_links": {
            "self": { "href": url },
            "web": { "href": format!("{}/{}/_build/definition?definitionId={}", state.org_url(), pipeline.project_id, pipeline.id) },
        },
        "configuration": {
            "type": "yaml",
            "path": pipeline.yaml_path,
            "repository": { "id": pipeline.repository_id, "type": "azureReposGit" },
        },
    })
}

/// `POST pipelines`: a YAML pipeline of a repository of the project; a
/// second one of the same name in the same folder is refused.
fn create_pipeline(state: &mut State, project: &Project, req: &Req) -> Response {
    let body = match req.json() {
        Ok(body) => body,
        Err(answer) => return *answer,
    };
    let name = body["name"].as_str().unwrap_or_default().to_owned();
    let folder = body["folder"].as_str().unwrap_or("\\").to_owned();
    let configuration = &body["configuration"];
    let kind = enum_name(
        &configuration["type"],
        &[(0, "unknown"), (1, "yaml"), (2, "designerJson")],
    );
    if name.trim().is_empty() || kind.as_deref() != Some("yaml") {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidArgumentValueException",
            "A pipeline needs a name and a yaml configuration.",
        );
    }
    let Some(path) = configuration["path"].as_str().map(str::to_owned) else {
        return error(
            StatusCode::BAD_REQUEST,
            "ArgumentNullException",
            "Value cannot be null.\r\nParameter name: configuration.path",
        );
    };
    let repository = configuration["repository"]["id"]
        .as_str()
        .or_else(|| configuration["repository"]["name"].as_str())
        .unwrap_or_default();
    let Some(repository_index) = state.repository_index(&project.id, repository) else {
        return super::git::repository_not_found(repository);
    };
    if state.pipelines.iter().any(|p| {
        p.project_id == project.id && p.name.eq_ignore_ascii_case(&name) && p.folder.eq_ignore_ascii_case(&folder)
    }) {
        return error(
            StatusCode::CONFLICT,
            "DefinitionExistsException",
            &format!("The pipeline name {name} is already in use in folder {folder}."),
        );
    }
    let pipeline = Pipeline {
        id: state.next(),
        project_id: project.id.clone(),
        name,
        folder,
        yaml_path: path,
        repository_id: state.repositories[repository_index].id.clone(),
    };
    let value = pipeline_json(state, &pipeline);
    state.pipelines.push(pipeline);
    ok(value)
}

/// `POST pipelines/{id}/runs`: runs `resources.repositories.self` (the
/// branch, at `version` or its head); the YAML file must be there. The
/// test's script decides what the run does.
fn run_pipeline(state: &mut State, index: usize, req: &Req) -> Response {
    let body = match req.json() {
        Ok(body) => body,
        Err(answer) => return *answer,
    };
    let pipeline = state.pipelines[index].clone();
    let Some(repository) = state.repositories.iter().find(|r| r.id == pipeline.repository_id) else {
        return super::git::repository_not_found(&pipeline.repository_id);
    };
    let own = &body["resources"]["repositories"]["self"];
    let branch = own["refName"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| repository.default_branch.clone())
        .unwrap_or_default();
    let commit = match own["version"].as_str() {
        Some(version) => Some(version.to_ascii_lowercase()),
        None => repository.refs.get(&branch).cloned(),
    };
    let Some(commit) = commit.filter(|c| repository.commits.contains_key(c)) else {
        return error(
            StatusCode::BAD_REQUEST,
            "PipelineValidationException",
            &format!(
                "Could not find a commit to run on {branch} of repository {}.",
                repository.name
            ),
        );
    };
    let Some(yaml) = repository
        .commits
        .get(&commit)
        .and_then(|c| c.files.get(&pipeline.yaml_path))
        .cloned()
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "PipelineValidationException",
            &format!(
                "File {} not found in repository {} branch {branch} version {commit}.",
                pipeline.yaml_path, repository.name
            ),
        );
    };
    let files = repository
        .commits
        .get(&commit)
        .map(|c| {
            c.files
                .iter()
                .map(|(path, bytes)| (path.trim_start_matches('/').to_owned(), bytes.clone()))
                .collect()
        })
        .unwrap_or_default();
    let id = state.next();
    let start = RunStart {
        run_id: id,
        pipeline_id: pipeline.id,
        pipeline_name: pipeline.name.clone(),
        folder: pipeline.folder.clone(),
        yaml_path: pipeline.yaml_path.clone(),
        branch: branch.clone(),
        commit: commit.clone(),
        yaml: String::from_utf8(yaml).ok(),
        files,
    };
    let script = state
        .script
        .as_ref()
        .map_or_else(RunScript::succeeded, |script| script(&start));
    let date = now();
    let build = Build {
        id,
        project_id: pipeline.project_id.clone(),
        pipeline_id: pipeline.id,
        source_branch: branch,
        source_version: commit,
        queue_time: date.clone(),
        start_time: date,
        finish_time: None,
        completed: false,
        script,
    };
    let held = build.script.held;
    state.builds.push(build);
    if !held {
        finish(state, id);
    }
    let value = state
        .builds
        .iter()
        .find(|b| b.id == id)
        .map(|b| run_json(state, b))
        .unwrap_or_default();
    ok(value)
}

/// Finishes run `id`: its result, finish time and test runs. `false`
/// when there is no such run or it had finished.
pub(crate) fn finish(state: &mut State, id: u64) -> bool {
    let Some(index) = state.builds.iter().position(|b| b.id == id && !b.completed) else {
        return false;
    };
    let build = &mut state.builds[index];
    build.completed = true;
    let finished = now();
    build.finish_time = Some(finished.clone());
    let project_id = build.project_id.clone();
    let test_runs = build.script.test_runs.clone();
    for test_run in test_runs {
        let run_id = state.next();
        state.test_runs.push(TestRun {
            id: run_id,
            project_id: project_id.clone(),
            build_id: id,
            name: test_run.name,
            results: test_run.tests,
            completed_date: finished.clone(),
        });
    }
    true
}

fn build_web(state: &State, build: &Build) -> String {
    format!(
        "{}/{}/_build/results?buildId={}",
        state.org_url(),
        build.project_id,
        build.id
    )
}

fn run_json(state: &State, build: &Build) -> Value {
    let pipeline = state.pipelines.iter().find(|p| p.id == build.pipeline_id);
    let pipeline_url = pipeline.map(|p| pipeline_url(state, p)).unwrap_or_default();
    let url = format!("{pipeline_url}/runs/{}", build.id);
    let mut value = json!({
        "id": build.id,
        "name": format!("20260101.{}", build.id),
        "state": if build.completed { "completed" } else { "inProgress" },
        "createdDate": build.queue_time,
        "url": url,
        "pipeline": {
            "id": build.pipeline_id,
            "revision": 1,
            "name": pipeline.map(|p| p.name.clone()),
            "folder": pipeline.map(|p| p.folder.clone()),
            "url": format!("{pipeline_url}?revision=1"),
        },
        "resources": {
            "repositories": {
                "self": {
                    "repository": { "id": pipeline.map(|p| p.repository_id.clone()), "type": "azureReposGit" },
                    "refName": build.source_branch,
                    "version": build.source_version,
                },
            },
        },
        "_links": {
            "self": { "href": url },
            "web": { "href": build_web(state, build) },
            "pipeline.web": { "href": format!("{}/{}/_build/definition?definitionId={}", state.org_url(), build.project_id, build.pipeline_id) },
            "pipeline": { "href": format!("{pipeline_url}?revision=1") },
        },
    });
    if build.completed {
        value["result"] = json!(build.script.result.as_str());
        value["finishedDate"] = json!(build.finish_time);
    }
    value
}

/// `{project}/_apis/build/...`; `segments[0]` is `build`.
pub(crate) fn route_build(state: &mut State, project: &Project, req: &Req) -> Option<Response> {
    if req.method != Method::GET {
        return None;
    }
    let response = match (req.seg(1).as_str(), req.segments.len()) {
        ("definitions", 2) => {
            let name = req.param("name");
            let values = state
                .pipelines
                .iter()
                .filter(|p| p.project_id == project.id && name.is_none_or(|n| n.eq_ignore_ascii_case(&p.name)))
                .map(|p| definition_json(state, p, false))
                .collect();
            list(values)
        }
        ("definitions", 3) => match state
            .pipelines
            .iter()
            .find(|p| p.project_id == project.id && req.raw(2).parse::<u64>().ok() == Some(p.id))
        {
            Some(pipeline) => ok(definition_json(state, pipeline, true)),
            None => error(
                StatusCode::NOT_FOUND,
                "DefinitionNotFoundException",
                &format!("The requested build definition {} could not be found.", req.raw(2)),
            ),
        },
        ("builds", 2) => list_builds(state, project, req),
        ("builds", _) => {
            let Some(build) = state
                .builds
                .iter()
                .find(|b| b.project_id == project.id && req.raw(2).parse::<u64>().ok() == Some(b.id))
            else {
                return Some(build_not_found(req.raw(2)));
            };
            match (req.seg(3).as_str(), req.segments.len()) {
                ("", 3) => ok(build_json(state, build)),
                ("timeline", 4 | 5) => ok(timeline_json(state, build)),
                ("logs", 4) => list(logs_json(state, build)),
                ("logs", 5) if req.raw(4) == "1" => {
                    let lines = log_lines(build);
                    if req.accept.contains("text/plain") {
                        text(lines.join("\n"))
                    } else {
                        list(lines.into_iter().map(Value::from).collect())
                    }
                }
                ("logs", 5) => error(
                    StatusCode::NOT_FOUND,
                    "BuildLogNotFoundException",
                    &format!("Build log {} could not be found.", req.raw(4)),
                ),
                ("artifacts", 4) => artifacts(state, build, req),
                _ => return None,
            }
        }
        _ => return None,
    };
    Some(response)
}

fn definition_json(state: &State, pipeline: &Pipeline, full: bool) -> Value {
    let project = state
        .projects
        .iter()
        .find(|p| p.id == pipeline.project_id)
        .map(|p| state.project_json(p))
        .unwrap_or(Value::Null);
    let url = format!(
        "{}/{}/_apis/build/Definitions/{}?revision=1",
        state.org_url(),
        pipeline.project_id,
        pipeline.id
    );
    let mut value = json!({
        "id": pipeline.id,
        "name": pipeline.name,
        "path": pipeline.folder,
        "revision": 1,
        "type": "build",
        "queueStatus": "enabled",
        "quality": "definition",
        "uri": format!("vstfs:///Build/Definition/{}", pipeline.id),
        "url": url,
        "project": project,
        "createdDate": "2026-01-01T00:00:00Z",
        "authoredBy": identity(),
    });
    if full {
        let repository = state.repositories.iter().find(|r| r.id == pipeline.repository_id);
        value["repository"] = json!({
            "id": pipeline.repository_id,
            "type": "TfsGit",
            "name": repository.map(|r| r.name.clone()),
            "defaultBranch": repository.and_then(|r| r.default_branch.clone()),
            "url": repository.map(|r| state.repository_json(r)["remoteUrl"].clone()),
            "clean": null,
            "checkoutSubmodules": false,
        });
        value["process"] = json!({ "yamlFilename": pipeline.yaml_path, "type": 2 });
    }
    value
}

/// `GET build/builds?definitions=&branchName=&queryOrder=&$top=`.
fn list_builds(state: &State, project: &Project, req: &Req) -> Response {
    let definitions: Vec<u64> = req
        .param("definitions")
        .map(|d| d.split(',').filter_map(|id| id.trim().parse().ok()).collect())
        .unwrap_or_default();
    let branch = req.param("branchName");
    let top = req
        .param("$top")
        .and_then(|t| t.parse::<usize>().ok())
        .unwrap_or(usize::MAX);
    let ascending = req
        .param("queryOrder")
        .is_some_and(|o| o.eq_ignore_ascii_case("queueTimeAscending"));
    let mut builds: Vec<&Build> = state
        .builds
        .iter()
        .filter(|b| b.project_id == project.id)
        .filter(|b| definitions.is_empty() || definitions.contains(&b.pipeline_id))
        .filter(|b| branch.is_none_or(|name| name == b.source_branch))
        .collect();
    if !ascending {
        builds.reverse();
    }
    list(builds.into_iter().take(top).map(|b| build_json(state, b)).collect())
}

fn build_json(state: &State, build: &Build) -> Value {
    let pipeline = state.pipelines.iter().find(|p| p.id == build.pipeline_id);
    let url = format!(
        "{}/{}/_apis/build/Builds/{}",
        state.org_url(),
        build.project_id,
        build.id
    );
    let project = state
        .projects
        .iter()
        .find(|p| p.id == build.project_id)
        .map(|p| state.project_json(p))
        .unwrap_or(Value::Null);
    let mut value = json!({
        "id": build.id,
        "buildNumber": format!("20260101.{}", build.id),
        "status": if build.completed { "completed" } else { "inProgress" },
        "queueTime": build.queue_time,
        "startTime": build.start_time,
        "url": url,
        "uri": format!("vstfs:///Build/Build/{}", build.id),
        "definition": pipeline.map(|p| definition_json(state, p, false)),
        "project": project,
        "sourceBranch": build.source_branch,
        "sourceVersion": build.source_version,
        "priority": "normal",
        "reason": "manual",
        "requestedFor": identity(),
        "requestedBy": identity(),
        "repository": {
            "id": pipeline.map(|p| p.repository_id.clone()),
            "type": "TfsGit",
        },
        "logs": { "id": 0, "type": "Container", "url": format!("{url}/logs") },
        "tags": [],
        "retainedByRelease": false,
        "_links": {
            "self": { "href": url },
            "web": { "href": build_web(state, build) },
            "timeline": { "href": format!("{url}/Timeline") },
        },
    });
    if build.completed {
        value["result"] = json!(build.script.result.as_str());
        value["finishTime"] = json!(build.finish_time);
    }
    value
}

fn timeline_json(state: &State, build: &Build) -> Value {
    let url = format!(
        "{}/{}/_apis/build/builds/{}",
        state.org_url(),
        build.project_id,
        build.id
    );
    let log = json!({ "id": 1, "type": "Container", "url": format!("{url}/logs/1") });
    let record_state = if build.completed { "completed" } else { "inProgress" };
    let result = |ok: bool| {
        if !build.completed {
            Value::Null
        } else if ok {
            json!("succeeded")
        } else {
            json!("failed")
        }
    };
    let all_ok = build.script.steps.iter().all(|s| s.succeeded);
    let stage_id = format!("{:08x}-0000-4000-8000-000000000001", build.id);
    let job_id = format!("{:08x}-0000-4000-8000-000000000002", build.id);
    let mut records = vec![
        json!({ "id": stage_id, "parentId": null, "type": "Stage", "name": "Build", "order": 1,
                "startTime": build.start_time, "finishTime": build.finish_time, "state": record_state,
                "result": result(all_ok), "errorCount": 0, "warningCount": 0, "log": null }),
        json!({ "id": job_id, "parentId": stage_id, "type": "Job", "name": "Job", "order": 1,
                "startTime": build.start_time, "finishTime": build.finish_time, "state": record_state,
                "result": result(all_ok), "errorCount": 0, "warningCount": 0, "log": log }),
    ];
    for (order, step) in build.script.steps.iter().enumerate() {
        records.push(json!({
            "id": format!("{:08x}-0000-4000-8000-{:012x}", build.id, order + 10),
            "parentId": job_id,
            "type": "Task",
            "name": step.name,
            "order": order + 1,
            "startTime": build.start_time,
            "finishTime": build.finish_time,
            "state": record_state,
            "result": result(step.succeeded),
            "errorCount": usize::from(!step.succeeded),
            "warningCount": 0,
            "log": log,
        }));
    }
    json!({
        "records": records,
        "lastChangedBy": "00000002-0000-8888-8000-000000000000",
        "lastChangedOn": build.finish_time.clone().unwrap_or_else(|| build.start_time.clone()),
        "id": format!("{:08x}-0000-4000-8000-000000000000", build.id),
        "changeId": 1,
        "url": format!("{url}/Timeline"),
    })
}

fn log_lines(build: &Build) -> Vec<String> {
    build.script.log.clone()
}

fn logs_json(state: &State, build: &Build) -> Vec<Value> {
    let url = format!(
        "{}/{}/_apis/build/builds/{}/logs/1",
        state.org_url(),
        build.project_id,
        build.id
    );
    vec![json!({
        "lineCount": build.script.log.len(),
        "createdOn": build.start_time,
        "lastChangedOn": build.finish_time.clone().unwrap_or_else(|| build.start_time.clone()),
        "id": 1,
        "type": "Container",
        "url": url,
    })]
}

/// The opaque id in an artifact's download URL: project, build and name.
fn artifact_token(project_id: &str, build_id: u64, name: &str) -> String {
    let text = format!("pipelineartifact://{project_id}/{build_id}/{name}");
    text.bytes().map(|byte| format!("{byte:02x}")).collect()
}

/// `(build id, name)` of an artifact token, for `project_id`.
fn parse_artifact_token(project_id: &str, token: &str) -> Option<(u64, String)> {
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| token.get(i..i + 2).and_then(|pair| u8::from_str_radix(pair, 16).ok()))
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let rest = text.strip_prefix("pipelineartifact://")?;
    let (project, rest) = rest.split_once('/')?;
    let (build, name) = rest.split_once('/')?;
    (project == project_id).then(|| Some((build.parse().ok()?, name.to_owned())))?
}

/// A `BuildArtifact` of resource type `PipelineArtifact`.
fn artifact_json(state: &State, build: &Build, index: usize, artifact: &ScriptedArtifact) -> Value {
    let token = artifact_token(&build.project_id, build.id, &artifact.name);
    let size: usize = artifact.files.values().map(Vec::len).sum();
    json!({
        "id": index + 1,
        "name": artifact.name,
        "source": "3b3f9c2e-6a55-4c36-9d0e-2f8f1a7c5b10",
        "resource": {
            "type": "PipelineArtifact",
            "data": token,
            "properties": {
                "RootId": token,
                "artifactsize": size.to_string(),
                "HashType": "DEDUP1024K",
                "DomainId": "0",
            },
            "url": format!(
                "{}/{}/_apis/build/builds/{}/artifacts?artifactName={}&api-version=7.1",
                state.org_url(),
                build.project_id,
                build.id,
                artifact.name
            ),
            "downloadUrl": format!(
                "{}/{}/_apis/artifact/{token}/content?format=zip",
                state.org_url(),
                build.project_id
            ),
        },
    })
}

fn artifact_not_found(build_id: u64, name: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "ArtifactNotFoundException",
        &format!("Artifact {name} does not exist for build {build_id}."),
    )
}

/// `GET builds/{id}/artifacts[?artifactName=..[&$format=zip]]`: what a
/// finished run published (nothing while it runs); one artifact's zip
/// with `$format=zip` or `Accept: application/zip` (as
/// azure-devops-node-api's `getArtifactContentZip` asks).
fn artifacts(state: &State, build: &Build, req: &Req) -> Response {
    let published: &[ScriptedArtifact] = if build.completed { &build.script.artifacts } else { &[] };
    let Some(name) = req.param("artifactName") else {
        let values = published
            .iter()
            .enumerate()
            .map(|(index, artifact)| artifact_json(state, build, index, artifact))
            .collect();
        return list(values);
    };
    let Some((index, artifact)) = published.iter().enumerate().find(|(_, a)| a.name == name) else {
        return artifact_not_found(build.id, name);
    };
    let zip_asked = req
        .param("$format")
        .is_some_and(|format| format.eq_ignore_ascii_case("zip"))
        || req.accept.contains("application/zip");
    if zip_asked {
        return artifact_zip(artifact);
    }
    ok(artifact_json(state, build, index, artifact))
}

/// `GET {project}/_apis/artifact/{token}/content?format=zip`: the download
/// URL of an artifact.
pub(crate) fn route_artifact_content(state: &State, project: &Project, req: &Req) -> Option<Response> {
    if req.method != Method::GET || req.segments.len() != 3 || req.seg(2) != "content" {
        return None;
    }
    let Some((build_id, name)) = parse_artifact_token(&project.id, req.raw(1)) else {
        return Some(error(
            StatusCode::NOT_FOUND,
            "ArtifactNotFoundException",
            "The artifact in the URL does not exist.",
        ));
    };
    if !req
        .param("format")
        .is_some_and(|format| format.eq_ignore_ascii_case("zip"))
    {
        return Some(error(
            StatusCode::BAD_REQUEST,
            "InvalidArgumentValueException",
            "format: only zip is served for a pipeline artifact.",
        ));
    }
    let artifact = state
        .builds
        .iter()
        .find(|b| b.id == build_id && b.project_id == project.id && b.completed)
        .and_then(|b| b.script.artifacts.iter().find(|a| a.name == name));
    Some(match artifact {
        Some(artifact) => artifact_zip(artifact),
        None => artifact_not_found(build_id, &name),
    })
}

/// The artifact as Azure DevOps zips it: a folder entry of its name, then
/// each file under it, deflated, with no Unix permissions (the service
/// does not keep them).
fn artifact_zip(artifact: &ScriptedArtifact) -> Response {
    match zipped(artifact) {
        Ok(bytes) => {
            let mut response = octets(bytes);
            response.headers_mut().insert(
                axum::http::header::CONTENT_TYPE,
                axum::http::HeaderValue::from_static("application/zip"),
            );
            response
        }
        Err(err) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "ArtifactException",
            &format!("could not zip the artifact: {err}"),
        ),
    }
}

fn zipped(artifact: &ScriptedArtifact) -> zip::result::ZipResult<Vec<u8>> {
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    writer.add_directory(format!("{}/", artifact.name), options)?;
    for (path, bytes) in &artifact.files {
        writer.start_file(format!("{}/{path}", artifact.name), options)?;
        std::io::Write::write_all(&mut writer, bytes)?;
    }
    Ok(writer.finish()?.into_inner())
}
