"""schemathesis hooks for tests/schemathesis.rs (loaded through SCHEMATHESIS_HOOKS).

`refusals_are_announced`: a command whose payload and headers are valid by
the document may still be refused with 422, but only for a rule the
document announces ("Also checked by bosun, beyond this schema" in the
description of a field on the refused field's path) or for a reused
Idempotency-Key; an edited replay's payload may be refused naming a field
of the payload (it is checked against the contract of the dead letter's
message type, which the document cannot tie to an id); an approval policy
may be refused naming a field of its body whose rule is announced the same
way; a rollback may be refused for the environment's state (nothing
verified to go back to, a closed promotion window), naming no field. Any
other 422 of
valid data fails the run, as the built-in positive_data_acceptance check
would.
"""

import re

import schemathesis

BEYOND_SCHEMA = "Also checked by bosun, beyond this schema:"

_announced = None


def _fields_checked_beyond_the_schema(document):
    """Names of properties whose description announces a rule beyond the schema."""
    names = set()

    def walk(node):
        if isinstance(node, dict):
            for name, schema in (node.get("properties") or {}).items():
                if isinstance(schema, dict) and _announces(schema):
                    names.add(name)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    return names


def _announces(schema):
    if BEYOND_SCHEMA in (schema.get("description") or ""):
        return True
    return any(isinstance(part, dict) and _announces(part) for part in schema.get("allOf", []))


@schemathesis.check
def refusals_are_announced(ctx, response, case):
    global _announced
    if response.status_code != 422 or case.meta is None or not case.meta.generation.mode.is_positive:
        return None
    error = response.json().get("error", {})
    field = error.get("field") or ""
    if case.path == "/v1/dead-letters/{id}/replay":
        if field == "payload" or field.startswith("payload."):
            return None
        raise AssertionError(f"a schema-valid replay was refused for something else than its payload: {error}")
    if case.path == "/v1/tenants/{tenant}/environments/{environment}/rollback":
        if not field:
            return None
        raise AssertionError(f"a schema-valid rollback was refused for a field: {error}")
    policy = case.path in (
        "/v1/tenants/{tenant}/release-policy",
        "/v1/tenants/{tenant}/release-policy/holds/{environment}",
    )
    if not case.path.startswith("/v1/commands/") and not policy:
        return None
    if error.get("code") == "idempotency-key-reused":
        return None
    if _announced is None:
        _announced = _fields_checked_beyond_the_schema(case.operation.schema.raw_schema)
    names = [name for name in re.split(r"[.\[\]]", field) if name and not name.isdigit()]
    if field.startswith("payload.") and any(name in _announced for name in names):
        return None
    if policy and any(name in _announced for name in names):
        return None
    raise AssertionError(
        f"schema-valid data was refused for a rule the document does not announce: {error}"
    )
