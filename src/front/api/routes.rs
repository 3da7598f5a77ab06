//! Every route of the HTTP API, declared once: its method, its path
//! template, what serves it and what the OpenAPI document says of it.
//! [`super::router`] mounts `routes()`, and `document()` writes
//! `/openapi.json` from the same list, so no route is served without
//! being described or described without being served; a route left out of
//! the document says why (`.undocumented("...")`).
//!
//! A route's path template is also its `route` label in the HTTP metrics
//! and the request log (axum's `MatchedPath`), and the document's path.
//! The list is in the document's order: its `paths`, and the components
//! their schemas bring, come out in this order (the router does not care).
//! The handlers read query strings by the tables here
//! ([`DEAD_LETTER_QUERY`], ...), through [`super::query`], so a
//! parameter's documented type is the one the server takes.
//!
//! A new route is one entry here and one or two cases in the conformance
//! test (`tests/conformance.rs`), which calls every operation of the
//! document.

use axum::handler::Handler;
use axum::routing::{MethodRouter, delete, get, post, put};
use serde_json::Value;

use super::bodies::{
    AcknowledgementBody, BulkReplayBody, ConsumerControlBody, DeadLetterList, DeliveryList, FailureGroupList,
    GroupPurged, GroupReplayBody, Health, Purged, ReleasePolicyBody, ReplayBody, RollbackBody, SagaList,
};
use super::openapi::{
    self, Body, Content, Operation, PathItem, Reply, delivery_event, json_reply, json_rpc_message, schema,
};
use super::{
    ApiState, acknowledge_group, audit_log, bulk_replay, cancel_replay_job, console_page, console_script,
    console_style, consumers, dead_letter, dead_letter_group, dead_letter_groups, dead_letters, deliveries, delivery,
    delivery_events, environment, favicon, healthz, lift_release_hold, metrics, openapi_document, pause_replay_job,
    place_release_hold, purge, purge_group, readyz, release_policy, release_policy_history, replay, replay_group,
    replay_job, replay_jobs, resume_replay_job, rollback_environment, saga, saga_diagram, sagas, send_command,
    set_release_policy, to_console, unacknowledge_group,
};
use crate::front::gateway::{
    DeadLetterDetail, EnvironmentView, FailureGroup, ReplayDone, ReplayJob, ReplayJobs, RollbackAccepted, SagaDiagram,
};
use crate::front::mcp::jsonrpc::ErrorResponse;
use crate::front::ops::Readiness;
use crate::operator::Delivery;
use crate::operator::controls::{ConsumerControlOutcome, ConsumerView};
use crate::ports::store::ConsumerControl;
use crate::ports::store::{ReleasePolicyRecord, SagaRecord};

/// An HTTP method a route answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Method {
    /// `GET` (and `HEAD`, as axum answers it).
    Get,
    /// `POST`.
    Post,
    /// `DELETE`.
    Delete,
    /// `PUT`.
    Put,
}

impl Method {
    /// As the OpenAPI document writes it: `get`, `post`, `delete`, `put`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::Post => "post",
            Self::Delete => "delete",
            Self::Put => "put",
        }
    }
}

/// What answers a route.
pub(crate) enum Serve {
    /// A handler of [`super`], for this route's method alone (boxed: a
    /// method router is some 300 bytes).
    Handler(Box<MethodRouter<ApiState>>),
    /// The MCP SDK's Streamable HTTP service behind the `/mcp` front door
    /// (origin, key, budget, JSON-RPC checks), for every method: mounted
    /// by [`super::router`], which holds what it needs (the state, the
    /// body limit).
    Mcp,
}

/// What the OpenAPI document says of a route.
#[derive(Debug, Clone)]
pub(crate) enum Doc {
    /// This operation.
    Operation(Operation),
    /// One operation per sendable command, the path's parameter written
    /// as its type (`/v1/commands/CreateCommit`), the body its contract's
    /// JSON Schema ([`openapi`] writes them from the contracts).
    PerCommand,
    /// Nothing: the route is left out of the document, for this reason
    /// (written for the reader; the tests hold it to say something).
    Undocumented(#[cfg_attr(not(test), allow(dead_code, reason = "read by the reader and the tests"))] &'static str),
}

/// One route of the API.
pub(crate) struct ApiRoute {
    /// The method it answers (and is documented under).
    pub(crate) method: Method,
    /// Its path template, `{name}` for a parameter.
    pub(crate) path: &'static str,
    /// What answers it.
    pub(crate) serve: Serve,
    /// What the document says of it.
    pub(crate) doc: Doc,
}

impl ApiRoute {
    /// The route's entry in the document's `paths`; `None` when it is
    /// left out.
    pub(crate) fn path_item(&self) -> Option<PathItem<'_>> {
        let method = self.method.as_str();
        match &self.doc {
            Doc::Operation(operation) => Some(PathItem::Operation {
                method,
                path: self.path,
                operation,
            }),
            Doc::PerCommand => Some(PathItem::PerCommand {
                method,
                path: self.path,
            }),
            Doc::Undocumented(_) => None,
        }
    }
}

/// A route whose documentation is still to be said: finish it with
/// [`NewRoute::documented`], [`NewRoute::per_command`] or
/// [`NewRoute::undocumented`].
pub(crate) struct NewRoute {
    method: Method,
    path: &'static str,
    serve: Serve,
}

impl NewRoute {
    /// Described by `operation`.
    pub(crate) fn documented(self, operation: Operation) -> ApiRoute {
        self.finish(Doc::Operation(operation))
    }

    /// Described once per sendable command ([`Doc::PerCommand`]).
    pub(crate) fn per_command(self) -> ApiRoute {
        self.finish(Doc::PerCommand)
    }

    /// Left out of the document, for the reason `why`.
    pub(crate) fn undocumented(self, why: &'static str) -> ApiRoute {
        self.finish(Doc::Undocumented(why))
    }

    fn finish(self, doc: Doc) -> ApiRoute {
        ApiRoute {
            method: self.method,
            path: self.path,
            serve: self.serve,
            doc,
        }
    }
}

/// `method` at `path`, answered by `handler`.
pub(crate) fn route<H, T>(method: Method, path: &'static str, handler: H) -> NewRoute
where
    H: Handler<T, ApiState>,
    T: 'static,
{
    let serve = match method {
        Method::Get => get(handler),
        Method::Post => post(handler),
        Method::Delete => delete(handler),
        Method::Put => put(handler),
    };
    NewRoute {
        method,
        path,
        serve: Serve::Handler(Box::new(serve)),
    }
}

/// The MCP endpoint at `path` ([`Serve::Mcp`]). It is documented as
/// `POST`, the one method that carries a JSON-RPC message; the SDK answers
/// the others itself.
pub(crate) fn mcp(path: &'static str) -> NewRoute {
    NewRoute {
        method: Method::Post,
        path,
        serve: Serve::Mcp,
    }
}

/// The OpenAPI document of [`routes`], as `/openapi.json` serves it.
pub(crate) fn document() -> Value {
    let routes = routes();
    openapi::document(routes.iter().filter_map(ApiRoute::path_item))
}

/// The most a list of deliveries or dead letters shows at once.
pub const MAX_LISTED: u64 = 500;

/// The errors of a read by id: no key, no scope, not found, a query
/// parameter (it takes none), over budget, store down.
const READ_ONE: &[u16] = &[401, 403, 404, 422, 429, 503];
/// The errors of a list with validated query parameters.
const READ_LIST: &[u16] = &[401, 403, 422, 429, 503];
/// The 202 of a bulk replay job, with where to follow it.
const JOB_ACCEPTED: &[Reply] = &[Reply {
    status: 202,
    description: "the replay job, started; follow it at `Location`",
    content: Content::Json(schema::<ReplayJob>),
    headers: &[("Location", "`/v1/replays/{id}`")],
}];

/// Every route of the API, the console's and `/mcp`, in the document's
/// order.
pub(crate) fn routes() -> Vec<ApiRoute> {
    vec![
        route(Method::Get, "/", to_console).undocumented("a redirect to /console, for a person at a browser"),
        route(Method::Get, "/favicon.ico", favicon)
            .undocumented("a browser's own request for a page's icon: 204 No Content, bosun has none"),
        route(Method::Get, "/healthz", healthz).documented(Operation {
            operation_id: "getHealth",
            summary: "Liveness: the process answers.",
            scope: None,
            query: &[],
            body: None,
            replies: vec![json_reply(200, "the process answers", schema::<Health>)],
            errors: &[],
        }),
        route(Method::Get, "/readyz", readyz).documented(Operation {
            operation_id: "getReadiness",
            summary: "Readiness: transport, store and schema version reachable and correct, not draining (503 otherwise).",
            scope: None,
            query: &[],
            body: None,
            replies: vec![
                json_reply(200, "ready", schema::<Readiness>),
                json_reply(503, "not ready: the failing checks say why", schema::<Readiness>),
            ],
            errors: &[],
        }),
        route(Method::Get, "/metrics", metrics).documented(Operation {
            operation_id: "getMetrics",
            summary: "Prometheus metrics (text exposition format 0.0.4).",
            scope: None,
            query: &[],
            body: None,
            replies: vec![Reply {
                status: 200,
                description: "Prometheus text",
                content: Content::Media("text/plain"),
                headers: &[],
            }],
            errors: &[],
        }),
        route(Method::Get, "/openapi.json", openapi_document).documented(Operation {
            operation_id: "getOpenApiDocument",
            summary: "This document.",
            scope: None,
            query: &[],
            body: None,
            replies: vec![Reply {
                status: 200,
                description: "OpenAPI 3.1 document",
                content: Content::AnyJson,
                headers: &[],
            }],
            errors: &[],
        }),
        route(Method::Get, "/console", console_page).documented(Operation {
            operation_id: "getConsole",
            summary: "The operator console (HTML).",
            scope: None,
            query: &[],
            body: None,
            replies: vec![Reply {
                status: 200,
                description: "HTML page",
                content: Content::Media("text/html"),
                headers: &[],
            }],
            errors: &[],
        }),
        route(Method::Get, "/console/app.js", console_script)
            .undocumented("the console's own script, which only the console page loads"),
        route(Method::Get, "/console/app.css", console_style)
            .undocumented("the console's own style sheet, which only the console page loads"),
        route(Method::Get, "/v1/deliveries", deliveries).documented(Operation {
            operation_id: "listDeliveries",
            summary: "Recent deliveries of the key's tenant, newest first, with their status.",
            scope: Some("deliveries:read"),
            query: DELIVERIES_QUERY,
            body: None,
            replies: vec![json_reply(200, "the deliveries", schema::<DeliveryList>)],
            errors: READ_LIST,
        }),
        route(Method::Get, "/v1/deliveries/{correlationId}", delivery).documented(Operation {
            operation_id: "getDelivery",
            summary: "A delivery's timeline, by message, and its status (in-progress, completed, failed).",
            scope: Some("deliveries:read"),
            query: &[],
            body: None,
            replies: vec![json_reply(200, "the delivery", schema::<Delivery>)],
            errors: READ_ONE,
        }),
        route(Method::Get, "/v1/deliveries/{correlationId}/events", delivery_events).documented(Operation {
            operation_id: "streamDeliveryEvents",
            summary: "Server-sent events: `timeline` per timeline line (a TimelineEntry), then `end` with the final status (`{\"status\"}`); the stream closes when the delivery completes or fails.",
            scope: Some("deliveries:read"),
            query: &[],
            body: None,
            replies: vec![Reply {
                status: 200,
                description: "an event stream; each event is one of `DeliveryEvent`",
                content: Content::Events(delivery_event),
                headers: &[],
            }],
            errors: READ_ONE,
        }),
        route(Method::Get, "/v1/sagas", sagas).documented(Operation {
            operation_id: "listSagas",
            summary: "Sagas of the key's tenant.",
            scope: Some("deliveries:read"),
            query: SAGAS_QUERY,
            body: None,
            replies: vec![json_reply(200, "the sagas", schema::<SagaList>)],
            errors: READ_LIST,
        }),
        route(Method::Get, "/v1/sagas/{kind}/{key}", saga).documented(Operation {
            operation_id: "getSaga",
            summary: "One saga: state, version and history.",
            scope: Some("deliveries:read"),
            query: &[],
            body: None,
            replies: vec![json_reply(200, "the saga", schema::<SagaRecord>)],
            errors: READ_ONE,
        }),
        route(Method::Get, "/v1/sagas/{kind}/{key}/diagram", saga_diagram).documented(Operation {
            operation_id: "getSagaDiagram",
            summary: "A saga's state machine (states, transitions with the message types that take them), the state it is in, the states it has been in and how often each transition was taken, reconstructed from the message type of each save, and its last 50 saves.",
            scope: Some("deliveries:read"),
            query: &[],
            body: None,
            replies: vec![json_reply(200, "the diagram", schema::<SagaDiagram>)],
            errors: &[401, 403, 404, 422, 429, 503],
        }),
        route(Method::Get, "/v1/tenants/{tenant}/release-policy", release_policy).documented(Operation {
            operation_id: "getReleasePolicy",
            summary: "The tenant's approval policy in force: its version, who set it, when and why, and the document (404 when the tenant has none: the default applies).",
            scope: Some("deliveries:read"),
            query: &[],
            body: None,
            replies: vec![json_reply(200, "the policy in force", schema::<ReleasePolicyRecord>)],
            errors: READ_ONE,
        }),
        route(Method::Put, "/v1/tenants/{tenant}/release-policy", set_release_policy).documented(Operation {
            operation_id: "setReleasePolicy",
            summary: "Stores the tenant's next approval policy version, checked as the release saga reads it; 409 when another version was stored since `expectedVersion`.",
            scope: Some("admin"),
            query: &[],
            body: Some(Body {
                description: "the new policy, why, and the version it was made against",
                required: true,
                content: Content::Json(schema::<ReleasePolicyBody>),
            }),
            replies: vec![json_reply(200, "the version stored", schema::<ReleasePolicyRecord>)],
            errors: &[400, 401, 403, 404, 409, 413, 422, 429, 503],
        }),
        route(Method::Put, "/v1/tenants/{tenant}/release-policy/holds/{environment}", place_release_hold).documented(
            Operation {
                operation_id: "placeReleaseHold",
                summary: "Holds every promotion to one environment of the tenant (a new policy version, as the caller): releases that reach it wait, saying why, until the hold is lifted or its `until` passes.",
                scope: Some("releases:override"),
                query: &[],
                body: Some(Body {
                    description: "why, and when the hold ends on its own",
                    required: true,
                    content: Content::Json(schema::<bosun_sagas::release::Hold>),
                }),
                replies: vec![json_reply(200, "the policy version stored", schema::<ReleasePolicyRecord>)],
                errors: &[400, 401, 403, 404, 409, 413, 422, 429, 503],
            },
        ),
        route(Method::Delete, "/v1/tenants/{tenant}/release-policy/holds/{environment}", lift_release_hold).documented(
            Operation {
                operation_id: "liftReleaseHold",
                summary: "Lifts the hold on one environment of the tenant (a new policy version, as the caller); waiting releases go on at their next look. 404 when it is not on hold.",
                scope: Some("releases:override"),
                query: &[],
                body: None,
                replies: vec![json_reply(200, "the policy version stored", schema::<ReleasePolicyRecord>)],
                errors: &[401, 403, 404, 409, 429, 503],
            },
        ),
        route(Method::Get, "/v1/tenants/{tenant}/environments/{environment}", environment).documented(Operation {
            operation_id: "getEnvironment",
            summary: "One environment of the tenant, as its GitOps saga keeps it: its phase, and per module the release it runs, the releases verified there (newest first: what a rollback can go back to) and the promotions queued. 404 when nothing was ever promoted there (or it is another tenant's).",
            scope: Some("deliveries:read"),
            query: &[],
            body: None,
            replies: vec![json_reply(200, "the environment", schema::<EnvironmentView>)],
            errors: READ_ONE,
        }),
        route(
            Method::Post,
            "/v1/tenants/{tenant}/environments/{environment}/rollback",
            rollback_environment,
        )
        .documented(Operation {
            operation_id: "rollbackEnvironment",
            summary: "Rolls one module of the environment back to a release verified there, as the caller (stamped `requestedBy`): checked first as `bosun releases rollback` checks it, then sent as `RollbackEnvironment`, which the environment's GitOps saga carries out. Needs releases:rollback, and releases:override too with `overrideReason`. 404 when nothing was ever promoted there (or it is another tenant's); 422 with the reason when the check refuses it: nothing verified before the current release to go back to, a `toReleaseId` never verified there, several modules and no `moduleId`, or the promotion gate closed (a deny window, outside the allow windows, a hold) without `overrideReason`.",
            scope: Some("releases:rollback"),
            query: &[],
            body: Some(Body {
                description: "why, and optionally the module, the release to go back to and an override reason",
                required: true,
                content: Content::Json(schema::<RollbackBody>),
            }),
            replies: vec![Reply {
                status: 202,
                description: "the rollback, checked and sent; follow its delivery at `Location`",
                content: Content::Json(schema::<RollbackAccepted>),
                headers: &[("Location", "`/v1/deliveries/{correlationId}`")],
            }],
            errors: &[400, 401, 403, 404, 413, 422, 429, 503],
        }),
        route(Method::Get, "/v1/tenants/{tenant}/release-policy/history", release_policy_history).documented(
            Operation {
                operation_id: "getReleasePolicyHistory",
                summary: "Every version of the tenant's approval policy, oldest first: who changed it, when and why.",
                scope: Some("deliveries:read"),
                query: &[],
                body: None,
                replies: vec![json_reply(200, "the versions", schema::<Vec<ReleasePolicyRecord>>)],
                errors: READ_ONE,
            },
        ),
        route(Method::Get, "/v1/tenants/{tenant}/audit", audit_log).documented(Operation {
            operation_id: "getAuditLog",
            summary: "The tenant's release audit log in log order: every release decision (requested, approvals given and refused with the rule, approved, rejected, overridden, waiting for a window, promoted, deployed, completed) and policy change (holds included), each with who, when, why and through which door. Page with `after`.",
            scope: Some("deliveries:read"),
            query: AUDIT_QUERY,
            body: None,
            replies: vec![json_reply(200, "the entries", schema::<Vec<crate::ports::store::AuditEntry>>)],
            errors: &[401, 403, 404, 422, 429, 503],
        }),
        route(Method::Get, "/v1/consumers", consumers::consumers).documented(Operation {
            operation_id: "listConsumers",
            summary: "Every consumer and whether an operator paused it (its replicas then take no message; they wait in its queue), with its latest pause or resume: who, when, through which door and why.",
            scope: Some("deliveries:read"),
            query: &[],
            body: None,
            replies: vec![json_reply(200, "the consumers", schema::<Vec<ConsumerView>>)],
            errors: &[401, 403, 429, 503],
        }),
        route(Method::Get, "/v1/consumers/controls", consumers::consumer_controls).documented(Operation {
            operation_id: "listConsumerControls",
            summary: "The log of consumer pauses and resumes, newest first: who, when, through which door and why. A platform key's (consumers:pause).",
            scope: Some("consumers:pause"),
            query: CONTROLS_QUERY,
            body: None,
            replies: vec![json_reply(200, "the entries", schema::<Vec<ConsumerControl>>)],
            errors: &[401, 403, 422, 429, 503],
        }),
        route(Method::Post, "/v1/consumers/{consumer}/pause", consumers::pause_consumer).documented(Operation {
            operation_id: "pauseConsumer",
            summary: "Pauses a consumer for every tenant, as the caller: within a few seconds every replica stops taking its messages, which wait in its queue (none is dead-lettered by the pause), and says so in /readyz and /metrics. Recorded with who, when, the door and the reason (required). A platform key's (consumers:pause); pausing a paused consumer changes nothing (`changed` false).",
            scope: Some("consumers:pause"),
            query: &[],
            body: Some(Body {
                description: "why",
                required: true,
                content: Content::Json(schema::<ConsumerControlBody>),
            }),
            replies: vec![json_reply(200, "what the pause did", schema::<ConsumerControlOutcome>)],
            errors: &[400, 401, 403, 413, 422, 429, 503],
        }),
        route(Method::Post, "/v1/consumers/{consumer}/resume", consumers::resume_consumer).documented(Operation {
            operation_id: "resumeConsumer",
            summary: "Resumes a paused consumer, as the caller: its replicas take messages again within a few seconds, the ones that waited first. Recorded like a pause (the reason is optional). A platform key's (consumers:pause); resuming a running consumer changes nothing (`changed` false).",
            scope: Some("consumers:pause"),
            query: &[],
            body: Some(Body {
                description: "why (optional)",
                required: false,
                content: Content::Json(schema::<ConsumerControlBody>),
            }),
            replies: vec![json_reply(200, "what the resume did", schema::<ConsumerControlOutcome>)],
            errors: &[400, 401, 403, 413, 422, 429, 503],
        }),
        route(Method::Get, "/v1/dead-letters", dead_letters).documented(Operation {
            operation_id: "listDeadLetters",
            summary: "Dead letters of the key's tenant, newest first.",
            scope: Some("deliveries:read or dead-letters:replay"),
            query: DEAD_LETTER_QUERY,
            body: None,
            replies: vec![json_reply(200, "the dead letters", schema::<DeadLetterList>)],
            errors: READ_LIST,
        }),
        route(Method::Get, "/v1/dead-letters/groups", dead_letter_groups).documented(Operation {
            operation_id: "listFailureGroups",
            summary: "Dead letters not yet replayed, grouped by root cause (fingerprint: the error's kind and its message with ids, numbers, hashes, paths and timestamps masked, plus consumer and message type), largest group first.",
            scope: Some("deliveries:read or dead-letters:replay"),
            query: DEAD_LETTER_QUERY,
            body: None,
            replies: vec![json_reply(200, "the groups", schema::<FailureGroupList>)],
            errors: READ_LIST,
        }),
        route(Method::Get, "/v1/dead-letters/groups/{fingerprint}", dead_letter_group).documented(Operation {
            operation_id: "getFailureGroup",
            summary: "One failure group of the key's tenant.",
            scope: Some("deliveries:read or dead-letters:replay"),
            query: &[],
            body: None,
            replies: vec![json_reply(200, "the group", schema::<FailureGroup>)],
            errors: READ_ONE,
        }),
        route(Method::Delete, "/v1/dead-letters/groups/{fingerprint}", purge_group).documented(Operation {
            operation_id: "purgeFailureGroup",
            summary: "Purges every dead letter of a failure group.",
            scope: Some("admin"),
            query: &[],
            body: None,
            replies: vec![json_reply(200, "the dead letters purged", schema::<GroupPurged>)],
            errors: READ_ONE,
        }),
        route(
            Method::Put,
            "/v1/dead-letters/groups/{fingerprint}/acknowledgement",
            acknowledge_group,
        )
        .documented(Operation {
            operation_id: "acknowledgeFailureGroup",
            summary: "Acknowledges a failure group of the key's tenant, with an optional note: it is left out of the group list (unless `includeAcknowledged`) until a failure of its cause newer than the acknowledgement arrives, then listed again with the note. Acknowledging again replaces the note.",
            scope: Some("dead-letters:replay"),
            query: &[],
            body: Some(Body {
                description: "the note (optional)",
                required: false,
                content: Content::Json(schema::<AcknowledgementBody>),
            }),
            replies: vec![json_reply(200, "the group, acknowledged", schema::<FailureGroup>)],
            errors: &[400, 401, 403, 404, 413, 422, 429, 503],
        }),
        route(
            Method::Delete,
            "/v1/dead-letters/groups/{fingerprint}/acknowledgement",
            unacknowledge_group,
        )
        .documented(Operation {
            operation_id: "unacknowledgeFailureGroup",
            summary: "Takes back the acknowledgement of a failure group of the key's tenant: it is listed again. 404 when it was not acknowledged.",
            scope: Some("dead-letters:replay"),
            query: &[],
            body: None,
            replies: vec![json_reply(200, "the group", schema::<FailureGroup>)],
            errors: READ_ONE,
        }),
        route(Method::Post, "/v1/dead-letters/groups/{fingerprint}/replay", replay_group).documented(Operation {
            operation_id: "replayFailureGroup",
            summary: "Replays every dead letter of a failure group as a bulk replay; follow it at the returned Location.",
            scope: Some("dead-letters:replay"),
            query: &[],
            body: Some(Body {
                description: "optional: `{\"rate\": N}` replays per second",
                required: false,
                content: Content::Json(schema::<GroupReplayBody>),
            }),
            replies: JOB_ACCEPTED.to_vec(),
            errors: &[400, 401, 403, 404, 413, 422, 429, 503],
        }),
        route(Method::Get, "/v1/dead-letters/{id}", dead_letter).documented(Operation {
            operation_id: "getDeadLetter",
            summary: "One dead letter (full id or unique prefix) with its original envelope.",
            scope: Some("deliveries:read or dead-letters:replay"),
            query: &[],
            body: None,
            replies: vec![json_reply(200, "the dead letter", schema::<DeadLetterDetail>)],
            errors: &[401, 403, 404, 409, 422, 429, 503],
        }),
        route(Method::Delete, "/v1/dead-letters/{id}", purge).documented(Operation {
            operation_id: "purgeDeadLetter",
            summary: "Purges a dead letter and the transport's copy.",
            scope: Some("admin"),
            query: &[],
            body: None,
            replies: vec![json_reply(200, "the dead letter purged", schema::<Purged>)],
            errors: &[401, 403, 404, 409, 422, 429, 503],
        }),
        route(Method::Post, "/v1/dead-letters/{id}/replay", replay).documented(Operation {
            operation_id: "replayDeadLetter",
            summary: "Replays a dead letter to the queue or subscription it came from; with `{\"payload\": ...}` the payload is replaced first (edit-and-replay, validated against the contract).",
            scope: Some("dead-letters:replay"),
            query: &[],
            body: Some(Body {
                description: "optional: `{\"payload\": {...}}`, the edited payload",
                required: false,
                content: Content::Json(schema::<ReplayBody>),
            }),
            replies: vec![json_reply(200, "the replay", schema::<ReplayDone>)],
            errors: &[400, 401, 403, 404, 409, 413, 422, 429, 503],
        }),
        route(Method::Post, "/v1/dead-letters/replays", bulk_replay).documented(Operation {
            operation_id: "startBulkReplay",
            summary: "Starts replaying many dead letters at a limited rate; follow it at the returned Location.",
            scope: Some("dead-letters:replay"),
            query: &[],
            body: Some(Body {
                description: "`{\"ids\": [...]}` or `{\"filter\": {consumer, type, reason, since}}`, and `\"rate\"` per second",
                required: true,
                content: Content::Json(schema::<BulkReplayBody>),
            }),
            replies: JOB_ACCEPTED.to_vec(),
            errors: &[400, 401, 403, 404, 413, 422, 429, 503],
        }),
        route(Method::Get, "/v1/replays", replay_jobs).documented(Operation {
            operation_id: "listReplayJobs",
            summary: "Bulk replay jobs, newest first, with their counts: stored, so every replica shows the same.",
            scope: Some("deliveries:read or dead-letters:replay"),
            query: REPLAY_JOBS_QUERY,
            body: None,
            replies: vec![json_reply(200, "the jobs, newest first", schema::<ReplayJobs>)],
            errors: &[401, 403, 422, 429, 503],
        }),
        route(Method::Get, "/v1/replays/{id}", replay_job).documented(Operation {
            operation_id: "getReplayJob",
            summary: "A bulk replay job's progress (stored, the same from every replica): status, total, done, replayed, failed, who started, paused, resumed or cancelled it.",
            scope: Some("deliveries:read or dead-letters:replay"),
            query: &[],
            body: None,
            replies: vec![json_reply(200, "the replay job", schema::<ReplayJob>)],
            errors: READ_ONE,
        }),
        route(Method::Post, "/v1/replays/{id}/pause", pause_replay_job).documented(Operation {
            operation_id: "pauseReplayJob",
            summary: "Pauses a running bulk replay job after the replay in progress (409 when it is not running).",
            scope: Some("dead-letters:replay"),
            query: &[],
            body: None,
            replies: vec![json_reply(200, "the paused job", schema::<ReplayJob>)],
            errors: &[401, 403, 404, 409, 422, 429, 503],
        }),
        route(Method::Post, "/v1/replays/{id}/resume", resume_replay_job).documented(Operation {
            operation_id: "resumeReplayJob",
            summary: "Resumes a paused bulk replay job where it stopped (409 when it is not paused).",
            scope: Some("dead-letters:replay"),
            query: &[],
            body: None,
            replies: vec![json_reply(200, "the resumed job", schema::<ReplayJob>)],
            errors: &[401, 403, 404, 409, 422, 429, 503],
        }),
        route(Method::Post, "/v1/replays/{id}/cancel", cancel_replay_job).documented(Operation {
            operation_id: "cancelReplayJob",
            summary: "Cancels a running or paused bulk replay job; what it did not replay stays dead-lettered (409 when it has ended).",
            scope: Some("dead-letters:replay"),
            query: &[],
            body: None,
            replies: vec![json_reply(200, "the cancelled job", schema::<ReplayJob>)],
            errors: &[401, 403, 404, 409, 422, 429, 503],
        }),
        mcp("/mcp").documented(Operation {
            operation_id: "callMcp",
            summary: "Model Context Protocol (Streamable HTTP): JSON-RPC 2.0 requests, JSON answers. Tools: send_command, describe_command, get_delivery, wait_for_delivery, list_failures, get_failure, get_release, get_environment, replay_failure, replay_failure_group, get_replay_job, control_replay_job, purge_failure_group, rollback_environment.",
            scope: Some("per tool"),
            query: &[],
            body: Some(Body {
                description: "a JSON-RPC 2.0 message (send `Accept: application/json, text/event-stream` and `Content-Type: application/json`, as the MCP specification asks)",
                required: true,
                content: Content::Json(json_rpc_message),
            }),
            replies: vec![
                Reply {
                    status: 200,
                    description: "a JSON-RPC 2.0 answer",
                    content: Content::AnyJson,
                    headers: &[],
                },
                Reply {
                    status: 202,
                    description: "a notification, accepted",
                    content: Content::Empty,
                    headers: &[],
                },
                Reply {
                    status: 400,
                    description: "the body is not one JSON-RPC 2.0 message: -32700 (not JSON, or nested deeper than 128 levels) or -32600 (not a request, notification or response; a batch), as a JSON-RPC error",
                    content: Content::Json(schema::<ErrorResponse>),
                    headers: &[],
                },
                Reply {
                    status: 406,
                    description: "the request's `Accept` does not list both application/json and text/event-stream (-32600, as a JSON-RPC error)",
                    content: Content::Json(schema::<ErrorResponse>),
                    headers: &[],
                },
                Reply {
                    status: 413,
                    description: "the body is over BOSUN_HTTP_MAX_BODY_BYTES (-32600, as a JSON-RPC error)",
                    content: Content::Json(schema::<ErrorResponse>),
                    headers: &[],
                },
                Reply {
                    status: 415,
                    description: "the request's `Content-Type` is not application/json (-32600, as a JSON-RPC error)",
                    content: Content::Json(schema::<ErrorResponse>),
                    headers: &[],
                },
            ],
            errors: &[401, 403, 429],
        }),
        // Last: the document lists the per-command operations after the
        // others.
        route(Method::Post, "/v1/commands/{type}", send_command).per_command(),
    ]
}

mod queries;
pub use queries::*;

#[cfg(test)]
mod tests;
