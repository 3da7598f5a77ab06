"""Drives bosun through a Python client that openapi-python-client generated
from bosun's /openapi.json (tests/openapi_client.rs generates it and runs
this with the generated package importable as `bosun_client`).

Every answer is parsed by the generated models; the checks are on typed
attributes, never on raw JSON. Environment: BOSUN_URL, BOSUN_API_KEY.
"""

import datetime
import os
import sys
import time
import uuid

from bosun_client import AuthenticatedClient, Client
from bosun_client.api.default import (
    get_dead_letter,
    get_delivery,
    get_failure_group,
    get_health,
    get_readiness,
    get_replay_job,
    get_saga,
    get_saga_diagram,
    list_dead_letters,
    list_deliveries,
    list_failure_groups,
    list_sagas,
    send_create_commit,
    send_probe,
    start_bulk_replay,
)
from bosun_client.models import (
    BulkReplayBody,
    BundleFile,
    CommandAccepted,
    CreateCommit,
    DeadLetterDetail,
    DeadLetterList,
    Delivery,
    DeliveryList,
    Error,
    FailureGroup,
    FailureGroupList,
    Health,
    Probe,
    Readiness,
    ReplayJob,
    SagaDiagram,
    SagaKind,
    SagaList,
    SagaRecord,
)

URL = os.environ["BOSUN_URL"]
KEY = os.environ["BOSUN_API_KEY"]


def check(condition, what):
    if not condition:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


def eventually(what, attempt, timeout=60.0):
    deadline = time.monotonic() + timeout
    while True:
        value = attempt()
        if value is not None:
            print(f"ok: {what}")
            return value
        if time.monotonic() > deadline:
            print(f"FAILED: {what} (within {timeout} s)", file=sys.stderr)
            sys.exit(1)
        time.sleep(0.1)


# An answer the document does not declare raises: every status is typed.
anonymous = Client(base_url=URL, raise_on_unexpected_status=True)
client = AuthenticatedClient(base_url=URL, token=KEY, raise_on_unexpected_status=True)

health = get_health.sync(client=anonymous)
check(isinstance(health, Health) and health.status == "ok", "GET /healthz is a Health")
ready = get_readiness.sync(client=anonymous)
check(isinstance(ready, Readiness) and ready.ready, "GET /readyz is a ready Readiness")

# Errors come back typed, with their code.
refused = get_delivery.sync(correlation_id=str(uuid.uuid4()), client=anonymous)
check(isinstance(refused, Error) and refused.error.code == "unauthorized", "no key: a typed 401 Error")
missing = get_delivery.sync_detailed(correlation_id=str(uuid.uuid4()), client=client)
check(
    missing.status_code == 404 and isinstance(missing.parsed, Error) and missing.parsed.error.code == "not-found",
    "an unknown delivery: a typed 404 Error",
)
invalid = send_probe.sync(client=client, body=Probe(group="Not An Identifier!"))
check(
    isinstance(invalid, Error) and invalid.error.code == "invalid-field" and invalid.error.field == "payload.group",
    "an invalid payload: a typed 422 Error naming the field",
)

# A command, followed to its end.
accepted = send_probe.sync(client=client, body=Probe(group="openapi", sequence=7))
check(isinstance(accepted, CommandAccepted), "POST /v1/commands/Probe is a CommandAccepted")
check(accepted.message_type == "Probe" and accepted.tenant_id == "contoso", "it names its type and tenant")
check(isinstance(accepted.correlation_id, uuid.UUID), "its correlationId is a UUID")
correlation = str(accepted.correlation_id)

listed = list_deliveries.sync(client=client, limit=10)
check(isinstance(listed, DeliveryList), "GET /v1/deliveries is a DeliveryList")
mine = [d for d in listed.deliveries if d.correlation_id == correlation]
check(len(mine) == 1 and mine[0].message_type == "Probe", "the probe's delivery is listed")
check(isinstance(mine[0].started_at, datetime.datetime), "its startedAt is a datetime")


def completed():
    delivery = get_delivery.sync(correlation_id=correlation, client=client)
    return delivery if isinstance(delivery, Delivery) and delivery.status == "completed" else None


delivery = eventually("the probe's delivery completes (GET /v1/deliveries/{id} is a Delivery)", completed)
types = [message.message_type for message in delivery.messages]
check(types[:1] == ["Probe"] and "ProbeEchoed" in types, f"its messages are Probe then ProbeEchoed: {types}")
check(all(message.status.value == "completed" for message in delivery.messages), "every message completed")

# Its saga.
sagas = list_sagas.sync(client=client, kind=SagaKind.PROBE)
check(isinstance(sagas, SagaList) and len(sagas.sagas) >= 1, "GET /v1/sagas is a SagaList with the probe saga")
saga = get_saga.sync(kind=SagaKind.PROBE, key="openapi", client=client)
check(isinstance(saga, SagaRecord) and saga.version >= 1, "GET /v1/sagas/probe/openapi is a SagaRecord")
check(isinstance(saga.updated_at, datetime.datetime), "its updatedAt is a datetime")
diagram = get_saga_diagram.sync(kind=SagaKind.PROBE, key="openapi", client=client)
check(isinstance(diagram, SagaDiagram) and len(diagram.machine.states) >= 1, "its diagram is a SagaDiagram")

# A commit for a repository that does not exist: retried, then dead-lettered.
commit = send_create_commit.sync(
    client=client,
    body=CreateCommit(
        repository="no-such-repository",
        branch="main",
        message="from the generated client",
        files=[BundleFile(path="README.md", content="# hello\n")],
    ),
)
check(isinstance(commit, CommandAccepted), "POST /v1/commands/CreateCommit is a CommandAccepted")


def dead_lettered():
    found = list_dead_letters.sync(client=client, consumer="commit", include_replayed=True, limit=10)
    if not isinstance(found, DeadLetterList):
        return None
    mine = [d for d in found.dead_letters if d.correlation_id == str(commit.correlation_id)]
    return mine[0] if mine else None


dead = eventually("the commit is dead-lettered (GET /v1/dead-letters is a DeadLetterList)", dead_lettered)
check(dead.reason == "retries-exhausted" and dead.status.value == "dead", f"it is dead: {dead.reason}")
detail = get_dead_letter.sync(id=str(dead.id), client=client)
check(isinstance(detail, DeadLetterDetail) and detail.id == dead.id, "GET /v1/dead-letters/{id} is a DeadLetterDetail")
check(len(detail.attempts) >= 1 and isinstance(detail.dead_lettered_at, datetime.datetime), "with its attempts")

groups = list_failure_groups.sync(client=client, consumer="commit")
check(isinstance(groups, FailureGroupList) and len(groups.groups) == 1, "GET /v1/dead-letters/groups: one group")
group = get_failure_group.sync(fingerprint=groups.groups[0].fingerprint, client=client)
check(isinstance(group, FailureGroup) and dead.id in group.ids, "GET /v1/dead-letters/groups/{fp} is its FailureGroup")
check(len(group.trend.counts) == 24, "with a 24-hour trend")

job = start_bulk_replay.sync(client=client, body=BulkReplayBody(ids=[dead.id], rate=50.0))
check(isinstance(job, ReplayJob) and job.total == 1, "POST /v1/dead-letters/replays is a ReplayJob")


def finished():
    progress = get_replay_job.sync(id=str(job.id), client=client)
    return progress if isinstance(progress, ReplayJob) and progress.status == "finished" else None


done = eventually("the replay job finishes (GET /v1/replays/{id} is a ReplayJob)", finished)
check(done.replayed == [dead.id] and done.failed == [], "it replayed the dead letter")
print("the generated client works")
