//! A double, with state, of Azure DevOps Services' REST API (7.1, and the
//! 7.2 previews Microsoft's clients ask for), as bosun's Azure DevOps
//! adapters and azure-devops-node-api call it. The organization URL is
//! [`DevOpsDouble::organization_url`] (`http://127.0.0.1:PORT/{org}`);
//! projects are made by the test ([`DevOpsDouble::add_project`]).
//!
//! What it checks and keeps, per operation:
//!
//! - `api-version` (query or `Accept`): absent or at most 7.2, else 400 as
//!   Azure DevOps answers an unknown version;
//! - projects: `GET _apis/projects/{name or id}`, 404 TF200016 for an
//!   unknown one (also for any project-scoped URL);
//! - repositories: create (a second one of the same name is 409 TF400948),
//!   get by name or id (404 TF401019), list;
//! - refs: list by `filter` prefix (and `$top`); `POST refs` compares each
//!   `oldObjectId` with the ref (zeros for a new ref) and answers
//!   `success: false`, `updateStatus: staleOldObjectId` for a stale one;
//! - pushes: one ref update whose `oldObjectId` must be the branch head,
//!   or for a new branch the commit it starts from (zeros for a first
//!   commit; 409 TF401028 otherwise), commits of `add` (the file must not exist),
//!   `edit` (it must), `delete` (a file or a folder) with `rawtext` or
//!   `base64encoded` content; each commit keeps its whole tree, so items
//!   are readable at any commit or branch; the first branch pushed becomes
//!   the default branch;
//! - commits are Git's own: every commit the double makes (a push's, a
//!   pull request's merge) is written with Git's plumbing into a bare
//!   repository of its repository (in a temporary directory the double
//!   removes when dropped, [`DevOpsDouble::git_root`]), so `commitId` and
//!   `treeId` are Git's SHA-1s (author and committer name, email and date
//!   from the push, the push's time when it gives none), and the bare
//!   repository's refs and `HEAD` (the default branch) follow every ref
//!   change (push, `POST refs`, completion, a deleted source branch); a
//!   path Git cannot hold (an empty part, a file where a folder is) is 400;
//! - Git over smart HTTP ([`DevOpsDouble::git_url`],
//!   `{org}/{project}/_git/{repository}`, the repository's `remoteUrl`, by
//!   name or id, `.git` optional): `GET info/refs?service=git-upload-pack`
//!   and `POST git-upload-pack` (gzip bodies too) answered by `git
//!   upload-pack --stateless-rpc`, protocol v0/v1 and v2 (`Git-Protocol`
//!   passed on), any commit fetchable by id (`git fetch --depth 1 <url>
//!   <commit>`), behind the same credentials and faults as the REST API
//!   (401 without them); 404 for an unknown project or repository, 403 for
//!   `git-receive-pack` (commits come through `pushes`);
//! - items: one file as raw bytes (`Accept: application/octet-stream` or
//!   `$format=octetStream`) or JSON (`content` with `includeContent`), a
//!   folder, or with `recursionLevel` the items under `scopePath`; 404
//!   TF401174 for a missing item, TF401175 for an unresolvable version;
//! - commits: get by id (tree, parents, comment, author);
//! - pull requests: create (both branches must exist; a second active one
//!   for the same source and target is 409 TF401179), get, list by
//!   `searchCriteria` (status `active` unless asked), update (title,
//!   description, auto-complete, completion options, status; completing
//!   needs `lastMergeSourceCommit` to be the source head, and merges); with
//!   auto-complete set the pull request is completed once every blocking
//!   policy evaluation is `approved` (at once when none applies), after the
//!   PATCH has answered it active;
//! - pull request statuses: create (a context name and a known state) and
//!   list;
//! - policy configurations: create (a type id and settings), list, get, and
//!   the per-branch query under `git/policy/configurations` by repository,
//!   ref and type; evaluations of a pull request's artifact id, one per
//!   enabled policy in scope (a preview API: a released `api-version` is
//!   400 as Azure DevOps answers it), `queued` unless the test set a status
//!   ([`DevOpsDouble::set_policy_evaluation`]);
//! - pipelines: create from a YAML path in a repository of the project (a
//!   second of the same name in the same folder is refused), get, list;
//!   runs: start (the branch and commit must exist and hold the YAML file),
//!   get, list. A run is a build of the same id whose result, steps, log
//!   and test runs the test's [`PipelineScript`] decides
//!   ([`DevOpsDouble::on_run`]; by default it succeeds at once), held in
//!   progress until [`DevOpsDouble::finish_run`] when the script says so;
//! - build definitions (the pipelines, by name, with their repository) and
//!   builds: list by definition and branch, get, timeline (stage, job and
//!   one task per step), logs and a log's lines (JSON or text); the
//!   pipeline artifacts a finished run published (`builds/{id}/artifacts`,
//!   all or `?artifactName=`; 404 `ArtifactNotFoundException`), each of
//!   resource type `PipelineArtifact` with a `downloadUrl` that answers,
//!   with the same credentials, a zip of the artifact's files under a
//!   folder of its name (`format=zip`, as Azure DevOps serves them; also
//!   `$format=zip` or `Accept: application/zip` on the artifact's own
//!   URL);
//! - test runs by build URI (`runStatistics` with `includeRunDetails`) and
//!   their results (`$top`, `$skip`, `outcomes`);
//! - the location service: `GET _apis/ResourceAreas` and `OPTIONS
//!   _apis/{area}` with the real location ids and route templates, so
//!   Microsoft's clients find every route above.
//!
//! Errors are answered in Azure DevOps' shape (`message`, `typeKey`,
//! `typeName`); faults, the journal and auth come from [`crate::serve`].

mod git;
mod location;
mod objects;
mod pipelines;
mod policy;
mod pulls;
mod reply;
mod script;
mod smart;
mod state;
mod tests_api;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State as Shared};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::Response;

pub use script::{
    PipelineScript, RunResult, RunScript, RunStart, ScriptedArtifact, ScriptedStep, ScriptedTest, ScriptedTestRun,
};

use crate::serve::lock;
use crate::{Auth, Faults, Journal, Running, ServeError, serve};
use reply::{Req, check_api_version, error, no_route, ok, percent_decode};
use state::{Project, State};

/// The double's name in the journal and in fault rules.
pub const SERVICE: &str = "devops";

/// A repository as the test sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepositoryInfo {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// `refs/heads/main`, once a branch was pushed.
    pub default_branch: Option<String>,
    /// Its refs and the commits they point at.
    pub refs: Vec<(String, String)>,
    /// Pushes accepted.
    pub pushes: u64,
}

/// A pull request as the test sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequestInfo {
    /// Its id.
    pub id: u64,
    /// The repository's name.
    pub repository: String,
    /// `refs/heads/...`.
    pub source: String,
    /// `refs/heads/...`.
    pub target: String,
    /// `active`, `completed` or `abandoned`.
    pub status: String,
    /// Its title.
    pub title: String,
    /// Whether auto-complete is set.
    pub auto_complete: bool,
    /// The merge commit, once completed.
    pub merge_commit: Option<String>,
    /// The statuses posted to it, as `(context name, state)`.
    pub statuses: Vec<(String, String)>,
}

/// A pipeline run (and build) as the test sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInfo {
    /// The run's and build's id.
    pub id: u64,
    /// Its pipeline.
    pub pipeline_id: u64,
    /// `refs/heads/...`.
    pub branch: String,
    /// The commit run.
    pub commit: String,
    /// Its result once finished, `None` while in progress.
    pub result: Option<RunResult>,
}

/// The Azure DevOps double, serving while it lives.
pub struct DevOpsDouble {
    running: Running,
    state: Arc<Mutex<State>>,
    /// The repositories' bare Git repositories, removed with the double
    /// (after `running`, which stops serving them).
    git_root: tempfile::TempDir,
}

impl std::fmt::Debug for DevOpsDouble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevOpsDouble")
            .field("running", &self.running)
            .finish_non_exhaustive()
    }
}

impl DevOpsDouble {
    /// Serves an organization named `organization` (no projects yet).
    pub async fn start(faults: Faults, journal: Journal, auth: Auth, organization: &str) -> Result<Self, ServeError> {
        let git_root = tempfile::Builder::new()
            .prefix("bosun-devops-double-")
            .tempdir()
            .map_err(|source| ServeError::Io {
                service: SERVICE,
                what: "making the directory of its Git repositories",
                source,
            })?;
        let state = Arc::new(Mutex::new(State {
            organization: organization.to_owned(),
            git_root: git_root.path().to_path_buf(),
            ..State::default()
        }));
        let router = Router::new().fallback(handle).with_state(Arc::clone(&state));
        let running = serve(SERVICE, router, faults, journal, auth).await?;
        lock(&state).base_url = running.base_url();
        Ok(Self {
            running,
            state,
            git_root,
        })
    }

    /// `http://127.0.0.1:PORT/{organization}/{project}/_git/{repository}`,
    /// the URL `git` fetches a repository from (as Azure Repos', the
    /// repository's `remoteUrl`).
    pub fn git_url(&self, project: &str, repository: &str) -> String {
        format!("{}/{project}/_git/{repository}", self.organization_url())
    }

    /// The directory the repositories' bare Git repositories are in.
    pub fn git_root(&self) -> &std::path::Path {
        self.git_root.path()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        self.running.base_url()
    }

    /// `http://127.0.0.1:PORT/{organization}`, the URL clients are given.
    pub fn organization_url(&self) -> String {
        lock(&self.state).org_url()
    }

    /// The server (faults, journal).
    pub fn running(&self) -> &Running {
        &self.running
    }

    /// Adds a project and returns its id.
    pub fn add_project(&self, name: &str) -> String {
        let id = uuid::Uuid::new_v4().to_string();
        lock(&self.state).projects.push(Project {
            id: id.clone(),
            name: name.to_owned(),
        });
        id
    }

    /// Decides what every run started from now on does.
    pub fn on_run(&self, script: impl Fn(&RunStart) -> RunScript + Send + Sync + 'static) {
        lock(&self.state).script = Some(Arc::new(script));
    }

    /// Finishes a run held in progress; `false` when it is not one.
    pub fn finish_run(&self, run_id: u64) -> bool {
        pipelines::finish(&mut lock(&self.state), run_id)
    }

    /// Sets the status (`approved`, `rejected`, `running` ...) of policy
    /// configuration `configuration_id`'s evaluation on pull request
    /// `pull_request_id`; an approved set may let auto-complete complete it.
    pub fn set_policy_evaluation(&self, pull_request_id: u64, configuration_id: u64, status: &str) {
        let mut state = lock(&self.state);
        state
            .evaluation_status
            .insert((pull_request_id, configuration_id), status.to_owned());
        if let Some(index) = state.pull_requests.iter().position(|pr| pr.id == pull_request_id) {
            pulls::auto_complete(&mut state, index);
        }
    }

    fn project_id(state: &State, project: &str) -> Option<String> {
        state.project(project).map(|p| p.id.clone())
    }

    /// The repositories of `project`.
    pub fn repositories(&self, project: &str) -> Vec<RepositoryInfo> {
        let state = lock(&self.state);
        let Some(project_id) = Self::project_id(&state, project) else {
            return Vec::new();
        };
        state
            .repositories
            .iter()
            .filter(|r| r.project_id == project_id)
            .map(|r| RepositoryInfo {
                id: r.id.clone(),
                name: r.name.clone(),
                default_branch: r.default_branch.clone(),
                refs: r.refs.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                pushes: r.pushes,
            })
            .collect()
    }

    /// A file's bytes on a branch (`main`) of a repository, `None` when
    /// any of them is missing.
    pub fn file(&self, project: &str, repository: &str, branch: &str, path: &str) -> Option<Vec<u8>> {
        let state = lock(&self.state);
        let project_id = Self::project_id(&state, project)?;
        let repository = &state.repositories[state.repository_index(&project_id, repository)?];
        let head = repository.refs.get(&format!("refs/heads/{branch}"))?;
        let path = format!("/{}", path.trim_start_matches('/'));
        repository.commits.get(head)?.files.get(&path).cloned()
    }

    /// The pull requests of `project`, oldest first.
    pub fn pull_requests(&self, project: &str) -> Vec<PullRequestInfo> {
        let state = lock(&self.state);
        let Some(project_id) = Self::project_id(&state, project) else {
            return Vec::new();
        };
        state
            .pull_requests
            .iter()
            .filter_map(|pr| {
                let repository = state
                    .repositories
                    .iter()
                    .find(|r| r.id == pr.repository_id && r.project_id == project_id)?;
                Some(PullRequestInfo {
                    id: pr.id,
                    repository: repository.name.clone(),
                    source: pr.source.clone(),
                    target: pr.target.clone(),
                    status: pr.status.clone(),
                    title: pr.title.clone(),
                    auto_complete: pr.auto_complete_set_by.is_some(),
                    merge_commit: pr.last_merge_commit.clone(),
                    statuses: pr
                        .statuses
                        .iter()
                        .map(|s| {
                            (
                                s["context"]["name"].as_str().unwrap_or_default().to_owned(),
                                s["state"].as_str().unwrap_or_default().to_owned(),
                            )
                        })
                        .collect(),
                })
            })
            .collect()
    }

    /// The policy configurations of `project`, as created (with their ids).
    pub fn policy_configurations(&self, project: &str) -> Vec<(u64, serde_json::Value)> {
        let state = lock(&self.state);
        let Some(project_id) = Self::project_id(&state, project) else {
            return Vec::new();
        };
        state
            .policies
            .iter()
            .filter(|c| c.project_id == project_id)
            .map(|c| (c.id, c.body.clone()))
            .collect()
    }

    /// The pipelines of `project` as `(id, folder, name, yaml path)`.
    pub fn pipelines(&self, project: &str) -> Vec<(u64, String, String, String)> {
        let state = lock(&self.state);
        let Some(project_id) = Self::project_id(&state, project) else {
            return Vec::new();
        };
        state
            .pipelines
            .iter()
            .filter(|p| p.project_id == project_id)
            .map(|p| (p.id, p.folder.clone(), p.name.clone(), p.yaml_path.clone()))
            .collect()
    }

    /// The runs of `project`, oldest first.
    pub fn runs(&self, project: &str) -> Vec<RunInfo> {
        let state = lock(&self.state);
        let Some(project_id) = Self::project_id(&state, project) else {
            return Vec::new();
        };
        state
            .builds
            .iter()
            .filter(|b| b.project_id == project_id)
            .map(|b| RunInfo {
                id: b.id,
                pipeline_id: b.pipeline_id,
                branch: b.source_branch.clone(),
                commit: b.source_version.clone(),
                result: b.completed.then_some(b.script.result),
            })
            .collect()
    }

    /// How many test runs builds of `project` published.
    pub fn test_run_count(&self, project: &str) -> usize {
        let state = lock(&self.state);
        let Some(project_id) = Self::project_id(&state, project) else {
            return 0;
        };
        state.test_runs.iter().filter(|r| r.project_id == project_id).count()
    }
}

/// Every request: the organization, then the organization's `_apis` or a
/// project's.
async fn handle(
    Shared(shared): Shared<Arc<Mutex<State>>>,
    method: Method,
    uri: Uri,
    Query(query): Query<Vec<(String, String)>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let mut versions = query.clone();
    if let Some(version) = accept
        .split(';')
        .find_map(|part| part.trim().strip_prefix("api-version="))
    {
        versions.push(("api-version".to_owned(), version.to_owned()));
    }
    let api_version = versions
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case("api-version"))
        .map(|(_, version)| version.clone());
    if let Err(answer) = check_api_version(&versions) {
        return *answer;
    }
    let segments: Vec<String> = uri
        .path()
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    if segments.get(2).is_some_and(|s| s.eq_ignore_ascii_case("_git")) {
        // Found under the lock, served (a git process) without it.
        let located = {
            let state = lock(&shared);
            if serves_organization(&state, &segments) {
                smart::locate(&state, &method, uri.path(), &segments, &query)
            } else {
                Err(Box::new(organization_not_found()))
            }
        };
        return match located {
            Ok(service) => smart::serve(service, &headers, body).await,
            Err(answer) => *answer,
        };
    }
    let mut state = lock(&shared);
    if !serves_organization(&state, &segments) {
        return organization_not_found();
    }
    let second = segments.get(1).map(|s| s.to_ascii_lowercase()).unwrap_or_default();
    let req = |rest: &[String]| Req {
        method: method.clone(),
        segments: rest.to_vec(),
        query: query.clone(),
        accept: accept.clone(),
        body: body.clone(),
        api_version: api_version.clone(),
    };
    if second == "_apis" {
        return organization(&mut state, &req(&segments[2..]), uri.path());
    }
    let is_project_api = segments.get(2).is_some_and(|s| s.eq_ignore_ascii_case("_apis"));
    if !is_project_api {
        return no_route(&method, uri.path());
    }
    let Some(project) = state.project(&segments[1]).cloned() else {
        return project_not_found(&segments[1]);
    };
    let req = req(&segments[3..]);
    let answer = match (req.seg(0).as_str(), req.seg(1).as_str()) {
        ("git", "repositories") => git::route(&mut state, &project, &req.shifted()),
        ("git", "policy") if req.seg(2) == "configurations" && req.method == Method::GET => {
            Some(policy::git_configurations(&state, &project, &req))
        }
        ("policy", _) => policy::route(&mut state, &project, &req),
        ("pipelines", _) => pipelines::route_pipelines(&mut state, &project, &req),
        ("build", _) => pipelines::route_build(&mut state, &project, &req),
        ("artifact", _) => pipelines::route_artifact_content(&state, &project, &req),
        ("test", _) => tests_api::route(&state, &project, &req),
        _ => None,
    };
    answer.unwrap_or_else(|| no_route(&method, uri.path()))
}

fn serves_organization(state: &State, segments: &[String]) -> bool {
    segments
        .first()
        .is_some_and(|org| org.eq_ignore_ascii_case(&state.organization))
}

fn organization_not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "OrganizationNotFoundException",
        "The organization in the URL is not the one this double serves.",
    )
}

fn project_not_found(name: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "ProjectDoesNotExistWithNameException",
        &format!(
            "TF200016: The following project does not exist: {name}. Verify that the name of the project is correct and that the project exists on the specified Azure DevOps Server."
        ),
    )
}

/// `{org}/_apis/...`: the location service and projects.
fn organization(state: &mut State, req: &Req, path: &str) -> Response {
    match (req.method.clone(), req.seg(0).as_str(), req.segments.len()) {
        (Method::OPTIONS, area, 1) => ok(location::locations(area)),
        (Method::GET, "resourceareas", 1) => ok(location::resource_areas(&state.org_url())),
        (Method::GET, "projects", 1) => {
            let values = state.projects.iter().map(|p| state.project_json(p)).collect();
            reply::list(values)
        }
        (Method::GET, "projects", 2) => match state.project(req.raw(1)) {
            Some(project) => ok(state.project_json(project)),
            None => project_not_found(req.raw(1)),
        },
        (method, ..) => no_route(&method, path),
    }
}
