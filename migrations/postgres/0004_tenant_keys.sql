-- bosun schema version 4: tenants are walls. The release saga is keyed by
-- tenant and releaseId (`<tenant>/<releaseId>`), as the GitOps saga is by
-- tenant and environment. Applied by `bosun migrate` inside one
-- transaction; never edit a migration that has shipped: add a new one.

-- Sagas saved before their tenant was kept (schema 3) take the tenant of
-- the delivery of the first message they saved, when that is known.
UPDATE bosun_sagas s
SET tenant_id = (
    SELECT d.tenant_id
    FROM bosun_saga_history h
    JOIN bosun_timeline t ON t.message_id = h.message_id
    JOIN bosun_deliveries d ON d.correlation_id = t.correlation_id
    WHERE h.kind = s.kind AND h.key = s.key
    ORDER BY h.version
    LIMIT 1
)
WHERE s.tenant_id IS NULL;

-- Release sagas move under their tenant, with their history, so that a
-- release in flight before the upgrade completes after it. A saga whose
-- tenant is still unknown keeps its old key (only platform operators see it).
UPDATE bosun_saga_history h
SET key = s.tenant_id || '/' || h.key
FROM bosun_sagas s
WHERE h.kind = 'release' AND s.kind = 'release' AND s.key = h.key
  AND s.tenant_id IS NOT NULL AND position('/' in s.key) = 0;

UPDATE bosun_sagas
SET key = tenant_id || '/' || key
WHERE kind = 'release' AND tenant_id IS NOT NULL AND position('/' in key) = 0;
