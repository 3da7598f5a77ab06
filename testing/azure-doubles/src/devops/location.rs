//! The location service Microsoft's clients ask before their calls:
//! `GET {org}/_apis/ResourceAreas` (where each resource area is served)
//! and `OPTIONS {org}/_apis/{area}` (each area's API resource locations:
//! location id, route template and versions). The ids and route
//! templates are Azure DevOps' own, as azure-devops-node-api's generated
//! clients look them up.

use serde_json::{Value, json};

/// `(area, location id, resource name, route template, resource version)`
/// of every API the double serves.
const LOCATIONS: &[(&str, &str, &str, &str, u32)] = &[
    (
        "git",
        "225f7195-f9c7-4d14-ab28-a83f7ff77e1f",
        "repositories",
        "{project}/_apis/{area}/{resource}/{repositoryId}",
        2,
    ),
    (
        "git",
        "2d874a60-a811-4f62-9c9f-963a6ea0a55b",
        "refs",
        "{project}/_apis/{area}/repositories/{repositoryId}/{resource}/{*filter}",
        2,
    ),
    (
        "git",
        "ea98d07b-3c87-4971-8ede-a613694ffb55",
        "pushes",
        "{project}/_apis/{area}/repositories/{repositoryId}/{resource}/{pushId}",
        3,
    ),
    (
        "git",
        "fb93c0db-47ed-4a31-8c20-47552878fb44",
        "items",
        "{project}/_apis/{area}/repositories/{repositoryId}/{resource}/{*path}",
        1,
    ),
    (
        "git",
        "c2570c3b-5b3f-41b8-98bf-5407bfde8d58",
        "commits",
        "{project}/_apis/{area}/repositories/{repositoryId}/{resource}/{commitId}",
        2,
    ),
    (
        "git",
        "9946fd70-0d40-406e-b686-b4744cbbcc37",
        "pullRequests",
        "{project}/_apis/{area}/repositories/{repositoryId}/{resource}/{pullRequestId}",
        2,
    ),
    (
        "git",
        "b5f6bb4f-8d1e-4d79-8d11-4c9172c99c35",
        "pullRequestStatuses",
        "{project}/_apis/{area}/repositories/{repositoryId}/pullRequests/{pullRequestId}/statuses/{statusId}",
        2,
    ),
    (
        "git",
        "2c420070-a0a2-49cc-9639-c9f271c5ff07",
        "policyConfigurations",
        "{project}/_apis/{area}/policy/configurations",
        1,
    ),
    (
        "policy",
        "dad91cbe-d183-45f8-9c6e-9c1164472121",
        "configurations",
        "{project}/_apis/{area}/{resource}/{configurationId}",
        1,
    ),
    (
        "policy",
        "c23ddff5-229c-4d04-a80b-0fdce9f360c8",
        "evaluations",
        "{project}/_apis/{area}/{resource}/{evaluationId}",
        1,
    ),
    (
        "pipelines",
        "28e1305e-2afe-47bf-abaf-cbb0e6a91988",
        "pipelines",
        "{project}/_apis/{resource}/{pipelineId}",
        1,
    ),
    (
        "pipelines",
        "7859261e-d2e9-4a68-b820-a5d84cc5bb3d",
        "runs",
        "{project}/_apis/pipelines/{pipelineId}/{resource}/{runId}",
        1,
    ),
    (
        "build",
        "0cd358e1-9217-4d94-8269-1c1ee6f93dcf",
        "builds",
        "{project}/_apis/{area}/{resource}/{buildId}",
        7,
    ),
    (
        "build",
        "8baac422-4c6e-4de5-8532-db96d92acffa",
        "Timeline",
        "{project}/_apis/{area}/builds/{buildId}/{resource}/{timelineId}",
        3,
    ),
    (
        "build",
        "35a80daf-7f30-45fc-86e8-6b813d9c90df",
        "logs",
        "{project}/_apis/{area}/builds/{buildId}/{resource}/{logId}",
        2,
    ),
    (
        "build",
        "1db06c96-014e-44e1-ac91-90b2d4b3e984",
        "artifacts",
        "{project}/_apis/{area}/builds/{buildId}/{resource}",
        5,
    ),
    (
        "build",
        "dbeaf647-6167-421a-bda9-c9327b25e2e6",
        "Definitions",
        "{project}/_apis/{area}/{resource}/{definitionId}",
        7,
    ),
    (
        "Test",
        "cadb3810-d47d-4a3c-a234-fe5f3be50138",
        "Runs",
        "{project}/_apis/{area}/{resource}/{runId}",
        3,
    ),
    (
        "Test",
        "4637d869-3a76-4468-8057-0bb02aa385cf",
        "Results",
        "{project}/_apis/{area}/Runs/{runId}/{resource}/{testCaseResultId}",
        6,
    ),
    (
        "core",
        "603fe2ac-9723-48b9-88ad-09305aa6c6e1",
        "projects",
        "_apis/{resource}/{*projectId}",
        4,
    ),
    (
        "Location",
        "e81700f7-3be2-46de-8624-2eb35882fcaa",
        "ResourceAreas",
        "_apis/{resource}/{areaId}",
        1,
    ),
];

/// `(resource area id, name)` of the areas the double serves. The
/// Pipelines client looks its area up by the work item tracking area's id
/// (a known quirk of azure-devops-node-api), so that id is listed too.
const AREAS: &[(&str, &str)] = &[
    ("4e080c62-fa21-4fbc-8fef-2a10a2b38049", "git"),
    ("fb13a388-40dd-4a04-b530-013a739c72ef", "policy"),
    ("2e0bf237-8973-4ec9-a581-9c3d679d1776", "pipelines"),
    ("5264459e-e5e0-4bd8-b118-0985e68a4ec5", "wit"),
    ("965220d5-5bb9-42cf-8d67-9b146df2a5a4", "build"),
    ("c2aa639c-3ccc-4740-b3b6-ce2a1e1d984e", "Test"),
    ("79134c72-4a58-4b42-976c-04e7115f32bf", "core"),
];

/// The API resource locations of `area` (any case), as `OPTIONS
/// _apis/{area}` answers: `{count, value}`.
pub(crate) fn locations(area: &str) -> Value {
    let value: Vec<Value> = LOCATIONS
        .iter()
        .filter(|(name, ..)| name.eq_ignore_ascii_case(area))
        .map(|(name, id, resource, template, version)| {
            // Policy evaluations are only in preview: no released version.
            let released = if *resource == "evaluations" { "0.0" } else { "7.1" };
            json!({
                "id": id,
                "area": name,
                "resourceName": resource,
                "routeTemplate": template,
                "resourceVersion": version,
                "minVersion": "1.0",
                "maxVersion": "7.2",
                "releasedVersion": released,
            })
        })
        .collect();
    json!({ "count": value.len(), "value": value })
}

/// `GET _apis/ResourceAreas`: every area served at the organization URL.
pub(crate) fn resource_areas(organization_url: &str) -> Value {
    let value: Vec<Value> = AREAS
        .iter()
        .map(|(id, name)| json!({ "id": id, "name": name, "locationUrl": format!("{organization_url}/") }))
        .collect();
    json!({ "count": value.len(), "value": value })
}
