//! Conformance of the Argo CD double to Argo CD's published API: the
//! OpenAPI document `assets/swagger.json` of argoproj/argo-cd (the subset
//! checked in as `conformance/argocd-swagger-subset.json`, with its source
//! commit) for routes and shapes, and the API server's code
//! (`server/application/application.go`, `util/argo/argo.go` at that
//! commit) for the answers the document does not spell out. No Argo CD
//! client runs here; every answer below is also checked against the
//! swagger definitions by the double itself, and each test ends by
//! asserting it found no departure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bosun_azure_doubles::argocd::{ArgoCdDouble, ManagedResource, SERVICE, swagger};
use bosun_azure_doubles::{Auth, Fault, FaultRule, Faults, Journal};
use serde_json::{Value, json};

const TOKEN: &str = "argocd-api-token";
const SHA_1: &str = "1111111111111111111111111111111111111111";
const SHA_2: &str = "2222222222222222222222222222222222222222";

async fn double() -> ArgoCdDouble {
    ArgoCdDouble::start(Faults::default(), Journal::default(), Auth::default().bearer(TOKEN))
        .await
        .unwrap()
}

fn application(name: &str, project: &str, tenant: &str) -> Value {
    json!({
        "metadata": { "name": name, "labels": { "bosun.dev/tenant": tenant } },
        "spec": {
            "project": project,
            "source": { "repoURL": "https://dev.azure.com/contoso/Delivery/_git/environments", "path": "dev", "targetRevision": "main" },
            "destination": { "server": "https://kubernetes.default.svc", "namespace": "payments" },
        }
    })
}

struct Api {
    http: reqwest::Client,
    base: String,
}

impl Api {
    fn new(double: &ArgoCdDouble) -> Self {
        Self {
            http: reqwest::Client::new(),
            base: format!("{}/api/v1/applications", double.base_url()),
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer = request.send().await.unwrap();
        let status = answer.status().as_u16();
        (status, answer.json().await.unwrap())
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }
}

fn assert_conforms(double: &ArgoCdDouble) {
    let violations = double.violations();
    assert!(violations.is_empty(), "departures from the swagger: {violations:#?}");
}

/// The subset is the published document's, cut at a named commit; the
/// double's checker finds a departure where there is one.
#[test]
fn the_swagger_subset_names_its_source_and_has_the_operations_used() {
    let subset = swagger::subset();
    assert_eq!(subset.source()["commit"], "37ee0097cf851bc2dd7665fc081bbce61a7e836e");
    assert_eq!(subset.source()["file"], "assets/swagger.json");
    for (method, path, body, answer) in [
        ("GET", "/api/v1/applications", None, "v1alpha1ApplicationList"),
        (
            "POST",
            "/api/v1/applications",
            Some("v1alpha1Application"),
            "v1alpha1Application",
        ),
        ("GET", "/api/v1/applications/{name}", None, "v1alpha1Application"),
        (
            "PUT",
            "/api/v1/applications/{application.metadata.name}",
            Some("v1alpha1Application"),
            "v1alpha1Application",
        ),
        (
            "POST",
            "/api/v1/applications/{name}/sync",
            Some("applicationApplicationSyncRequest"),
            "v1alpha1Application",
        ),
    ] {
        assert_eq!(subset.body_definition(method, path).as_deref(), body, "{method} {path}");
        assert_eq!(
            subset.answer_definition(method, path).as_deref(),
            Some(answer),
            "{method} {path}"
        );
    }
    assert!(
        !subset
            .check("v1alpha1Application", &json!({"spec": {"source": {"repoUrl": "x"}}}))
            .is_empty()
    );
}

/// `Create` (application.go): created once; the same spec again is
/// answered with the existing application; a different spec is
/// `InvalidArgument` (HTTP 400, gRPC code 3) "existing application spec is
/// different, use upsert flag to force update", unless `upsert=true`.
#[tokio::test]
async fn create_is_idempotent_for_the_same_spec_and_refuses_a_different_one() {
    let double = double().await;
    let api = Api::new(&double);
    let app = application("acme.dev", "acme", "acme");
    let (status, created) = api.post("", app.clone()).await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["metadata"]["name"], "acme.dev");
    assert_eq!(created["status"]["sync"]["status"], "OutOfSync");
    let (status, again) = api.post("", app.clone()).await;
    assert_eq!(
        (status, &again),
        (200, &created),
        "the same spec: the existing application"
    );
    let mut other = app.clone();
    other["spec"]["source"]["path"] = json!("prod");
    let (status, refused) = api.post("", other.clone()).await;
    assert_eq!(status, 400);
    assert_eq!(
        refused,
        json!({"error": "existing application spec is different, use upsert flag to force update", "code": 3,
               "message": "existing application spec is different, use upsert flag to force update"})
    );
    let (status, updated) = api.post("?upsert=true", other).await;
    assert_eq!(status, 200);
    assert_eq!(updated["spec"]["source"]["path"], "prod");
    let (status, invalid) = api
        .post("", json!({"metadata": {"name": "x"}, "spec": {"destination": {}}}))
        .await;
    assert_eq!((status, invalid["code"].as_i64()), (400, Some(3)), "{invalid}");
    assert_eq!(double.names(), vec!["acme.dev".to_owned()]);
    assert_conforms(&double);
}

/// `getAppEnforceRBAC`: an application that does not exist is `403
/// permission denied` (code 7) when no project is named, `404`
/// `applications.argoproj.io "<name>" not found` (code 5) when one is,
/// and an application in another project than the one named is 404 too.
/// List filters by project and label selector.
#[tokio::test]
async fn get_hides_what_does_not_exist_unless_a_project_is_named_and_list_filters() {
    let double = double().await;
    let api = Api::new(&double);
    double
        .create_application(application("acme.dev", "acme", "acme"))
        .unwrap();
    double
        .create_application(application("globex.dev", "globex", "globex"))
        .unwrap();
    assert_eq!(api.get("/acme.dev").await.0, 200);
    assert_eq!(
        api.get("/nope.dev").await,
        (
            403,
            json!({"error": "permission denied", "code": 7, "message": "permission denied"})
        )
    );
    let not_found = json!({"error": "applications.argoproj.io \"nope.dev\" not found", "code": 5,
                           "message": "applications.argoproj.io \"nope.dev\" not found"});
    assert_eq!(api.get("/nope.dev?project=acme").await, (404, not_found));
    assert_eq!(api.get("/acme.dev?project=globex").await.0, 404);
    assert_eq!(api.get("/acme.dev?project=acme&refresh=normal").await.0, 200);
    let names = |list: &Value| -> Vec<String> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&api.get("").await.1), vec!["acme.dev", "globex.dev"]);
    assert_eq!(names(&api.get("?projects=globex").await.1), vec!["globex.dev"]);
    assert_eq!(
        names(&api.get("?selector=bosun.dev%2Ftenant%3Dacme").await.1),
        vec!["acme.dev"]
    );
    let (status, _) = api
        .call(
            reqwest::Method::PUT,
            "/acme.dev",
            Some(application("acme.dev", "acme", "acme-renamed")),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        double.application("acme.dev").unwrap()["metadata"]["labels"]["bosun.dev/tenant"],
        "acme-renamed"
    );
    let anonymous = reqwest::get(format!("{}/acme.dev", api.base)).await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    assert_conforms(&double);
}

/// `Sync` sets the operation (answer: `operation.sync.revision`, no
/// `operationState`, as `SetAppOperation` leaves it); a second sync while
/// it runs is `FailedPrecondition` (400, code 9) "another operation is
/// already in progress"; the controller shows it `Running`, then
/// `Succeeded` with `syncResult.revision`, `status.sync` `Synced` at the
/// revision, `status.health` and a history entry; per-resource messages
/// say `created`, `unchanged`, `configured`, `pruned`.
#[tokio::test]
async fn a_sync_runs_then_succeeds_at_the_revision_and_reports_each_resource() {
    let double = double().await;
    let api = Api::new(&double);
    double
        .create_application(application("acme.dev", "acme", "acme"))
        .unwrap();
    let deployment = ManagedResource::new("apps", "v1", "Deployment", "payments", "payments-api");
    let service = ManagedResource::new("", "v1", "Service", "payments", "payments-api");
    double.set_resources("acme.dev", vec![deployment.clone(), service.clone()]);

    let (status, answered) = api
        .post("/acme.dev/sync", json!({"revision": SHA_1, "prune": true}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(answered["operation"]["sync"]["revision"], SHA_1);
    assert!(answered["status"].get("operationState").is_none(), "{answered}");
    let (_, running) = api.get("/acme.dev").await;
    assert_eq!(running["status"]["operationState"]["phase"], "Running");
    let (status, busy) = api.post("/acme.dev/sync", json!({"revision": SHA_2})).await;
    assert_eq!((status, busy["code"].as_i64()), (400, Some(9)));
    assert!(
        busy["message"]
            .as_str()
            .unwrap()
            .contains("another operation is already in progress")
    );
    let (_, done) = api.get("/acme.dev").await;
    let status = &done["status"];
    assert_eq!(status["operationState"]["phase"], "Succeeded");
    assert_eq!(status["operationState"]["syncResult"]["revision"], SHA_1);
    assert_eq!(status["sync"]["status"], "Synced");
    assert_eq!(status["sync"]["revision"], SHA_1);
    assert_eq!(status["health"]["status"], "Healthy");
    assert_eq!(status["history"].as_array().unwrap().len(), 1);
    assert!(done.get("operation").is_none(), "the controller clears the operation");
    let messages = |app: &Value| -> Vec<String> {
        app["status"]["operationState"]["syncResult"]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["message"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        messages(&done),
        vec!["deployment.apps/payments-api created", "service/payments-api created"]
    );

    double.set_reads_while_running(0);
    api.post("/acme.dev/sync", json!({"revision": SHA_1, "prune": true}))
        .await;
    let (_, same) = api.get("/acme.dev").await;
    assert_eq!(
        messages(&same),
        vec![
            "deployment.apps/payments-api unchanged",
            "service/payments-api unchanged"
        ]
    );
    double.set_resources("acme.dev", vec![deployment]);
    api.post("/acme.dev/sync", json!({"revision": SHA_2, "prune": true}))
        .await;
    let (_, next) = api.get("/acme.dev").await;
    assert_eq!(
        messages(&next),
        vec!["deployment.apps/payments-api configured", "pruned"]
    );
    assert_eq!(next["status"]["sync"]["revision"], SHA_2);
    assert_eq!(next["status"]["history"].as_array().unwrap().len(), 3);
    assert_eq!(double.syncs("acme.dev").len(), 3, "the refused sync is not kept");
    assert_conforms(&double);
}

/// A sync the test makes fail ends `Failed` with its message, the
/// application `OutOfSync`; a degraded health shows; a sync without a
/// revision deploys what `targetRevision` resolves to, and fails when it
/// resolves to nothing. A wrongly typed field is a JSON decoding error
/// (400, code 3).
#[tokio::test]
async fn syncs_fail_health_degrades_and_the_target_revision_resolves() {
    let double = double().await;
    let api = Api::new(&double);
    double.set_reads_while_running(0);
    double
        .create_application(application("acme.dev", "acme", "acme"))
        .unwrap();
    double.fail_next_sync("acme.dev", "one or more objects failed to apply");
    api.post("/acme.dev/sync", json!({"revision": SHA_1})).await;
    let (_, failed) = api.get("/acme.dev").await;
    assert_eq!(failed["status"]["operationState"]["phase"], "Failed");
    assert_eq!(
        failed["status"]["operationState"]["message"],
        "one or more objects failed to apply"
    );
    assert_eq!(failed["status"]["sync"]["status"], "OutOfSync");

    api.post("/acme.dev/sync", json!({})).await;
    let (_, unresolved) = api.get("/acme.dev").await;
    assert_eq!(unresolved["status"]["operationState"]["phase"], "Failed");
    assert!(
        unresolved["status"]["operationState"]["message"]
            .as_str()
            .unwrap()
            .contains("unable to resolve 'main'")
    );
    double.set_target_commit("acme.dev", SHA_2);
    double.set_health("acme.dev", "Degraded");
    api.post("/acme.dev/sync", json!({"prune": true})).await;
    let (_, synced) = api.get("/acme.dev").await;
    assert_eq!(synced["status"]["operationState"]["phase"], "Succeeded");
    assert_eq!(synced["status"]["sync"]["revision"], SHA_2);
    assert_eq!(synced["status"]["health"]["status"], "Degraded");

    let (status, typed) = api.post("/acme.dev/sync", json!({"prune": "yes"})).await;
    assert_eq!((status, typed["code"].as_i64()), (400, Some(3)));
    assert_eq!(
        double.violations(),
        vec!["POST /api/v1/applications/{name}/sync: request body $.prune: expected boolean , got \"yes\"".to_owned()],
        "the double reports the request's departure from the swagger"
    );
}

/// What the swagger does not declare is reported: a misspelt field (Argo
/// CD's decoder would ignore it silently) and an unknown query parameter.
/// Faults from the shared plan answer before the API.
#[tokio::test]
async fn departures_are_reported_and_faults_answer_first() {
    let double = double().await;
    let api = Api::new(&double);
    double
        .create_application(application("acme.dev", "acme", "acme"))
        .unwrap();
    let (status, _) = api.post("/acme.dev/sync", json!({"revison": SHA_1})).await;
    assert_eq!(status, 200, "Argo CD ignores unknown fields");
    api.get("/acme.dev?refresh=normal&verbose=1").await;
    assert_eq!(
        double.violations(),
        vec![
            "POST /api/v1/applications/{name}/sync: request body $.revison: not a property of this definition"
                .to_owned(),
            "GET /api/v1/applications/{name}: query `verbose`: not a parameter of this operation".to_owned(),
        ]
    );
    double.running().faults().add(FaultRule::new(
        SERVICE,
        "/sync",
        Fault::Throttle { retry_after_secs: 1 },
        1,
    ));
    double
        .running()
        .faults()
        .add(FaultRule::new(SERVICE, "/sync", Fault::Status(502), 1).after(1));
    assert_eq!(api.post("/acme.dev/sync", json!({})).await.0, 429);
    let answer = api
        .http
        .post(format!("{}/acme.dev/sync", api.base))
        .bearer_auth(TOKEN)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 502);
    assert_eq!(double.syncs("acme.dev").len(), 1);
}
