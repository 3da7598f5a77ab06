//! Test runs and results (`{project}/_apis/test/runs[/{id}[/results]]`),
//! published when a pipeline run whose script has test runs finishes.

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::reply::{Req, error, list, ok};
use super::state::{Project, State, TestRun};

/// Outcomes counted as failed in a run's totals.
const FAILED: [&str; 4] = ["Failed", "Error", "Timeout", "Aborted"];

/// `{project}/_apis/test/...`; `segments[0]` is `test`.
pub(crate) fn route(state: &State, project: &Project, req: &Req) -> Option<Response> {
    if req.method != Method::GET || req.seg(1) != "runs" {
        return None;
    }
    if req.segments.len() == 2 {
        return Some(list_runs(state, project, req));
    }
    let Some(run) = state
        .test_runs
        .iter()
        .find(|r| r.project_id == project.id && req.raw(2).parse::<u64>().ok() == Some(r.id))
    else {
        return Some(error(
            StatusCode::NOT_FOUND,
            "TestObjectNotFoundException",
            &format!("Test run {} not found.", req.raw(2)),
        ));
    };
    match (req.seg(3).as_str(), req.segments.len()) {
        ("", 3) => Some(ok(run_json(state, run, true))),
        ("results", 4) => Some(results(state, run, req)),
        _ => None,
    }
}

/// `GET test/runs?buildUri=vstfs:///Build/Build/{id}&includeRunDetails=`;
/// `runStatistics` only with run details, as Azure DevOps answers.
fn list_runs(state: &State, project: &Project, req: &Req) -> Response {
    let build = req
        .param("buildUri")
        .map(|uri| uri.trim_start_matches("vstfs:///Build/Build/").parse::<u64>().ok());
    let details = req
        .param("includeRunDetails")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let values = state
        .test_runs
        .iter()
        .filter(|r| r.project_id == project.id)
        .filter(|r| build.is_none_or(|b| b == Some(r.build_id)))
        .map(|r| run_json(state, r, details))
        .collect();
    list(values)
}

fn run_url(state: &State, run: &TestRun) -> String {
    format!("{}/{}/_apis/test/Runs/{}", state.org_url(), run.project_id, run.id)
}

fn run_json(state: &State, run: &TestRun, details: bool) -> Value {
    let total = run.results.len();
    let passed = run.results.iter().filter(|t| t.outcome == "Passed").count();
    let failed = run
        .results
        .iter()
        .filter(|t| FAILED.contains(&t.outcome.as_str()))
        .count();
    let mut value = json!({
        "id": run.id,
        "name": run.name,
        "url": run_url(state, run),
        "isAutomated": true,
        "state": "Completed",
        "totalTests": total,
        "passedTests": passed,
        "unanalyzedTests": failed,
        "incompleteTests": 0,
        "notApplicableTests": total - passed - failed,
        "build": { "id": run.build_id.to_string() },
        "buildConfiguration": { "id": run.build_id, "number": format!("20260101.{}", run.build_id), "uri": format!("vstfs:///Build/Build/{}", run.build_id) },
        "startedDate": run.completed_date,
        "completedDate": run.completed_date,
        "webAccessUrl": format!("{}/{}/_TestManagement/Runs?runId={}", state.org_url(), run.project_id, run.id),
    });
    if details {
        let mut outcomes: Vec<(String, usize)> = Vec::new();
        for test in &run.results {
            match outcomes.iter_mut().find(|(o, _)| *o == test.outcome) {
                Some((_, count)) => *count += 1,
                None => outcomes.push((test.outcome.clone(), 1)),
            }
        }
        value["runStatistics"] = json!(
            outcomes
                .into_iter()
                .map(|(outcome, count)| json!({ "state": "Completed", "outcome": outcome, "count": count }))
                .collect::<Vec<_>>()
        );
    }
    value
}

/// `GET test/Runs/{id}/results?$top=&$skip=&outcomes=`.
fn results(state: &State, run: &TestRun, req: &Req) -> Response {
    let top = req
        .param("$top")
        .and_then(|t| t.parse::<usize>().ok())
        .unwrap_or(1000)
        .min(1000);
    let skip = req.param("$skip").and_then(|t| t.parse::<usize>().ok()).unwrap_or(0);
    let outcomes: Option<Vec<String>> = req.param("outcomes").map(|o| {
        o.split(',')
            .map(|s| outcome_name(s.trim()).to_ascii_lowercase())
            .collect()
    });
    let url = run_url(state, run);
    let values = run
        .results
        .iter()
        .enumerate()
        .filter(|(_, t)| {
            outcomes
                .as_ref()
                .is_none_or(|o| o.contains(&t.outcome.to_ascii_lowercase()))
        })
        .skip(skip)
        .take(top)
        .map(|(index, t)| {
            let id = 100_000 + index;
            json!({
                "id": id,
                "testRun": { "id": run.id.to_string(), "name": run.name, "url": url },
                "automatedTestName": t.name,
                "automatedTestStorage": t.storage,
                "testCaseTitle": t.name.rsplit('.').next().unwrap_or(&t.name),
                "outcome": t.outcome,
                "durationInMs": t.duration_ms,
                "errorMessage": t.error_message,
                "state": "Completed",
                "build": { "id": run.build_id.to_string() },
                "startedDate": run.completed_date,
                "completedDate": run.completed_date,
                "url": format!("{url}/Results/{id}"),
            })
        })
        .collect();
    list(values)
}

/// A `TestOutcome` by name or by the enum's number (Microsoft's clients
/// send numbers).
fn outcome_name(outcome: &str) -> &str {
    const NAMES: [&str; 15] = [
        "Unspecified",
        "None",
        "Passed",
        "Failed",
        "Inconclusive",
        "Timeout",
        "Aborted",
        "Blocked",
        "NotExecuted",
        "Warning",
        "Error",
        "NotApplicable",
        "Paused",
        "InProgress",
        "NotImpacted",
    ];
    outcome
        .parse::<usize>()
        .ok()
        .and_then(|n| NAMES.get(n).copied())
        .unwrap_or(outcome)
}
