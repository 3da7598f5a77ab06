//! The Azure DevOps double's state rules over plain HTTP (reqwest): what a
//! write leaves readable, and the answers Azure DevOps gives to a duplicate
//! repository, a stale ref or push, a second active pull request, a wrong
//! credential and an unknown API version.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bosun_azure_doubles::devops::{DevOpsDouble, RunResult, RunScript, ScriptedTest};
use bosun_azure_doubles::{Auth, Fault, FaultRule, Faults, Journal};
use serde_json::{Value, json};

const PAT: &str = "double-pat";
const ZERO: &str = "0000000000000000000000000000000000000000";

struct Client {
    http: reqwest::Client,
    project_url: String,
}

impl Client {
    fn url(&self, rest: &str) -> String {
        let separator = if rest.contains('?') { '&' } else { '?' };
        format!("{}/_apis/{rest}{separator}api-version=7.1", self.project_url)
    }

    async fn send(&self, method: reqwest::Method, rest: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self.http.request(method, self.url(rest)).basic_auth("", Some(PAT));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    async fn get(&self, rest: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, rest, None).await
    }

    async fn post(&self, rest: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, rest, Some(body)).await
    }

    async fn patch(&self, rest: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::PATCH, rest, Some(body)).await
    }
}

async fn start() -> (DevOpsDouble, Client, String) {
    let double = DevOpsDouble::start(
        Faults::default(),
        Journal::default(),
        Auth::default().basic_password(PAT),
        "contoso",
    )
    .await
    .unwrap();
    let project_id = double.add_project("delivery");
    let client = Client {
        http: reqwest::Client::new(),
        project_url: format!("{}/delivery", double.organization_url()),
    };
    (double, client, project_id)
}

async fn repository(client: &Client, project_id: &str) -> String {
    let (status, created) = client
        .post(
            "git/repositories",
            json!({ "name": "payments-api", "project": { "id": project_id } }),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    created["id"].as_str().unwrap().to_owned()
}

async fn push(client: &Client, repo: &str, branch: &str, old: &str, changes: Value) -> (u16, Value) {
    client
        .post(
            &format!("git/repositories/{repo}/pushes"),
            json!({
                "refUpdates": [{ "name": format!("refs/heads/{branch}"), "oldObjectId": old }],
                "commits": [{ "comment": "change", "changes": changes }],
            }),
        )
        .await
}

fn add(path: &str, content: &str) -> Value {
    json!({ "changeType": "add", "item": { "path": path }, "newContent": { "content": content, "contentType": "rawtext" } })
}

#[tokio::test]
async fn repositories_are_unique_by_name_and_found_by_name_or_id() {
    let (double, client, project_id) = start().await;
    let id = repository(&client, &project_id).await;
    let (status, body) = client
        .post(
            "git/repositories",
            json!({ "name": "Payments-API", "project": { "id": project_id } }),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["typeKey"], "GitRepositoryNameAlreadyExistsException");
    assert!(body["message"].as_str().unwrap().starts_with("TF400948"));
    for key in ["payments-api", id.as_str()] {
        let (status, found) = client.get(&format!("git/repositories/{key}")).await;
        assert_eq!(status, 200);
        assert_eq!(found["id"], id.as_str());
        assert_eq!(found["project"]["name"], "delivery");
        assert!(found.get("defaultBranch").is_none(), "no branch yet: {found}");
    }
    let (status, missing) = client.get("git/repositories/missing").await;
    assert_eq!(status, 404);
    assert_eq!(missing["typeKey"], "GitRepositoryNotFoundException");
    let (status, _) = client.get("../../nowhere/_apis/git/repositories").await;
    assert_eq!(status, 404);
    assert_eq!(double.repositories("delivery").len(), 1);
}

#[tokio::test]
async fn pushes_compare_the_branch_head_and_items_are_readable_at_each_commit() {
    let (double, client, project_id) = start().await;
    let repo = repository(&client, &project_id).await;
    let (status, first) = push(
        &client,
        &repo,
        "main",
        ZERO,
        json!([add("/a.txt", "one"), add("/dir/b.txt", "two")]),
    )
    .await;
    assert_eq!(status, 201, "{first}");
    let first_id = first["refUpdates"][0]["newObjectId"].as_str().unwrap().to_owned();
    assert_eq!(first_id.len(), 40);

    // A second push from the same old head is stale.
    let (status, stale) = push(&client, &repo, "main", ZERO, json!([add("/c.txt", "x")])).await;
    assert_eq!(status, 409, "{stale}");
    assert_eq!(stale["typeKey"], "GitReferenceStaleException");
    // Adding a file that exists, or editing one that does not, is refused.
    let (status, _) = push(&client, &repo, "main", &first_id, json!([add("/a.txt", "again")])).await;
    assert_eq!(status, 400);

    let edit = json!([
        { "changeType": "edit", "item": { "path": "/a.txt" }, "newContent": { "content": "b25lIQ==", "contentType": "base64encoded" } },
        { "changeType": "delete", "item": { "path": "/dir" } },
    ]);
    let (status, second) = push(&client, &repo, "main", &first_id, edit).await;
    assert_eq!(status, 201, "{second}");
    let second_id = second["refUpdates"][0]["newObjectId"].as_str().unwrap().to_owned();

    let item = |version: &str, path: &str| {
        format!(
            "git/repositories/{repo}/items?path={path}&versionDescriptor.version={version}&versionDescriptor.versionType=commit&$format=octetStream"
        )
    };
    assert_eq!(
        client.get(&item(&first_id, "/a.txt")).await,
        (200, Value::String("one".into()))
    );
    assert_eq!(
        client.get(&item(&second_id, "/a.txt")).await,
        (200, Value::String("one!".into()))
    );
    assert_eq!(client.get(&item(&second_id, "/dir/b.txt")).await.0, 404);
    let (status, listing) = client
        .get(&format!(
            "git/repositories/{repo}/items?scopePath=/&recursionLevel=full&versionDescriptor.version={first_id}&versionDescriptor.versionType=commit"
        ))
        .await;
    assert_eq!(status, 200);
    let files: Vec<&str> = listing["value"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["isFolder"] == false)
        .map(|i| i["path"].as_str().unwrap())
        .collect();
    assert_eq!(files, vec!["/a.txt", "/dir/b.txt"]);
    let (_, commit) = client
        .get(&format!("git/repositories/{repo}/commits/{second_id}"))
        .await;
    assert_eq!(commit["parents"], json!([first_id]));

    // Refs: create a branch, then a stale update fails without moving it.
    let (status, created) = client
        .post(
            &format!("git/repositories/{repo}/refs"),
            json!([{ "name": "refs/heads/feature", "oldObjectId": ZERO, "newObjectId": first_id }]),
        )
        .await;
    assert_eq!((status, created["value"][0]["success"].clone()), (200, json!(true)));
    let (_, stale) = client
        .post(
            &format!("git/repositories/{repo}/refs"),
            json!([{ "name": "refs/heads/feature", "oldObjectId": ZERO, "newObjectId": second_id }]),
        )
        .await;
    assert_eq!(stale["value"][0]["success"], false);
    assert_eq!(stale["value"][0]["updateStatus"], "staleOldObjectId");
    let (_, refs) = client
        .get(&format!("git/repositories/{repo}/refs?filter=heads/feature"))
        .await;
    assert_eq!(refs["value"][0]["objectId"], first_id.as_str());
    let info = &double.repositories("delivery")[0];
    assert_eq!(info.default_branch.as_deref(), Some("refs/heads/main"));
    assert_eq!(info.pushes, 2);
    assert_eq!(
        double.file("delivery", "payments-api", "main", "a.txt").as_deref(),
        Some(&b"one!"[..])
    );
}

#[tokio::test]
async fn one_active_pull_request_per_branch_pair_and_completion_merges() {
    let (double, client, project_id) = start().await;
    let repo = repository(&client, &project_id).await;
    let (_, main) = push(&client, &repo, "main", ZERO, json!([add("/a.txt", "one")])).await;
    let main_id = main["refUpdates"][0]["newObjectId"].as_str().unwrap().to_owned();
    let (_, feature) = push(&client, &repo, "feature", ZERO, json!([add("/b.txt", "two")])).await;
    let feature_id = feature["refUpdates"][0]["newObjectId"].as_str().unwrap().to_owned();
    let body = json!({ "sourceRefName": "refs/heads/feature", "targetRefName": "refs/heads/main", "title": "Feature" });
    let (status, pr) = client
        .post(&format!("git/repositories/{repo}/pullrequests"), body.clone())
        .await;
    assert_eq!(status, 201, "{pr}");
    let id = pr["pullRequestId"].as_u64().unwrap();
    let (status, again) = client
        .post(&format!("git/repositories/{repo}/pullrequests"), body)
        .await;
    assert_eq!(status, 409);
    assert_eq!(again["typeKey"], "GitPullRequestExistsException");
    assert!(again["message"].as_str().unwrap().starts_with("TF401179"));

    let (_, statuses) = client
        .post(
            &format!("git/repositories/{repo}/pullrequests/{id}/statuses"),
            json!({ "state": "pending", "context": { "name": "bosun/delivery" } }),
        )
        .await;
    assert_eq!(statuses["state"], "pending");
    let (status, _) = client
        .patch(
            &format!("git/repositories/{repo}/pullrequests/{id}"),
            json!({ "status": "completed", "lastMergeSourceCommit": { "commitId": main_id } }),
        )
        .await;
    assert_eq!(status, 409, "completing needs the source head");
    let (status, done) = client
        .patch(
            &format!("git/repositories/{repo}/pullrequests/{id}"),
            json!({ "status": "completed", "lastMergeSourceCommit": { "commitId": feature_id } }),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed");
    let (_, completed) = client
        .get(&format!(
            "git/repositories/{repo}/pullrequests?searchCriteria.sourceRefName=refs/heads/feature&searchCriteria.status=completed"
        ))
        .await;
    assert_eq!(completed["count"], 1);
    assert_eq!(
        completed["value"][0]["lastMergeSourceCommit"]["commitId"],
        feature_id.as_str()
    );
    let pulls = double.pull_requests("delivery");
    assert_eq!(pulls.len(), 1);
    assert_eq!(
        pulls[0].statuses,
        vec![("bosun/delivery".to_owned(), "pending".to_owned())]
    );
    assert_eq!(
        double.file("delivery", "payments-api", "main", "b.txt").as_deref(),
        Some(&b"two"[..])
    );
    // A new active pull request for the pair is allowed once the first completed.
    assert_eq!(
        client
            .post(
                &format!("git/repositories/{repo}/pullrequests"),
                json!({ "sourceRefName": "refs/heads/feature", "targetRefName": "refs/heads/main", "title": "Again" })
            )
            .await
            .0,
        201
    );
}

#[tokio::test]
async fn a_run_follows_the_script_and_publishes_its_tests_when_finished() {
    let (double, client, project_id) = start().await;
    let repo = repository(&client, &project_id).await;
    let (_, main) = push(
        &client,
        &repo,
        "main",
        ZERO,
        json!([add("/azure-pipelines.yml", "steps: []")]),
    )
    .await;
    let head = main["refUpdates"][0]["newObjectId"].as_str().unwrap().to_owned();
    double.on_run(|start| {
        assert_eq!(start.yaml.as_deref(), Some("steps: []"));
        RunScript::succeeded()
            .with_test_run("unit", vec![ScriptedTest::passed("A.B.C", "a.dll")])
            .held()
    });
    let definition = json!({
        "name": "payments-api", "folder": "\\bosun\\contoso",
        "configuration": { "type": "yaml", "path": "/azure-pipelines.yml", "repository": { "id": repo, "type": "azureReposGit" } },
    });
    let (status, pipeline) = client.post("pipelines", definition.clone()).await;
    assert_eq!(status, 200, "{pipeline}");
    assert_eq!(client.post("pipelines", definition).await.0, 409);
    let pipeline_id = pipeline["id"].as_u64().unwrap();
    let (status, missing) = client
        .post(
            &format!("pipelines/{pipeline_id}/runs"),
            json!({ "resources": { "repositories": { "self": { "refName": "refs/heads/nowhere" } } } }),
        )
        .await;
    assert_eq!(status, 400, "{missing}");
    let (_, run) = client
        .post(
            &format!("pipelines/{pipeline_id}/runs"),
            json!({ "resources": { "repositories": { "self": { "refName": "refs/heads/main", "version": head } } } }),
        )
        .await;
    let run_id = run["id"].as_u64().unwrap();
    assert_eq!(run["state"], "inProgress");
    let (_, tests) = client
        .get(&format!("test/runs?buildUri=vstfs:///Build/Build/{run_id}"))
        .await;
    assert_eq!(tests["count"], 0, "nothing published while running");
    assert!(double.finish_run(run_id));
    assert!(!double.finish_run(run_id));
    let (_, run) = client.get(&format!("pipelines/{pipeline_id}/runs/{run_id}")).await;
    assert_eq!(
        (run["state"].clone(), run["result"].clone()),
        (json!("completed"), json!("succeeded"))
    );
    let (_, build) = client.get(&format!("build/builds/{run_id}")).await;
    assert_eq!(build["definition"]["path"], "\\bosun\\contoso");
    assert_eq!(build["sourceVersion"], head.as_str());
    let (_, tests) = client
        .get(&format!(
            "test/runs?buildUri=vstfs:///Build/Build/{run_id}&includeRunDetails=true"
        ))
        .await;
    assert_eq!(tests["value"][0]["runStatistics"][0]["outcome"], "Passed");
    assert_eq!(double.runs("delivery")[0].result, Some(RunResult::Succeeded));
}

#[tokio::test]
async fn credentials_versions_and_faults_are_answered_as_azure_devops_does() {
    let (double, client, _) = start().await;
    let url = client.url("git/repositories");
    let wrong = client
        .http
        .get(&url)
        .basic_auth("", Some("wrong"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    let newer = client
        .http
        .get(format!("{}/_apis/git/repositories?api-version=9.0", client.project_url))
        .basic_auth("", Some(PAT))
        .send()
        .await
        .unwrap();
    assert_eq!(newer.status().as_u16(), 400);
    double.running().faults().add(FaultRule::new(
        "devops",
        "/git/repositories",
        Fault::Throttle { retry_after_secs: 3 },
        1,
    ));
    let throttled = client.http.get(&url).basic_auth("", Some(PAT)).send().await.unwrap();
    assert_eq!(throttled.status().as_u16(), 429);
    assert_eq!(throttled.headers()["retry-after"], "3");
    assert_eq!(client.get("git/repositories").await.0, 200);
    // The location service Microsoft's clients start with.
    let (status, areas) = client.get("../../_apis/ResourceAreas").await;
    assert_eq!(status, 200);
    assert!(areas["value"].as_array().unwrap().iter().any(|a| a["name"] == "git"));
    let options = client
        .http
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/_apis/git", double.organization_url()),
        )
        .basic_auth("", Some(PAT))
        .send()
        .await
        .unwrap();
    let locations: Value = options.json().await.unwrap();
    assert!(
        locations["value"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["id"] == "9946fd70-0d40-406e-b686-b4744cbbcc37" && l["resourceName"] == "pullRequests")
    );
}

#[tokio::test]
async fn policy_evaluations_are_a_preview_api() {
    let (_double, client, project_id) = start().await;
    let artifact = format!("vstfs:///CodeReview/CodeReviewId/{project_id}/1");
    let (status, refused) = client.get(&format!("policy/evaluations?artifactId={artifact}")).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["typeKey"], "VssInvalidPreviewVersionException");
    let preview = client
        .http
        .get(format!(
            "{}/_apis/policy/evaluations?artifactId={artifact}&api-version=7.1-preview.1",
            client.project_url
        ))
        .basic_auth("", Some(PAT))
        .send()
        .await
        .unwrap();
    assert_eq!(preview.status().as_u16(), 200);
}
