-- bosun schema version 13: an API key's lifecycle. Every key made from now
-- on expires (`expires_at`; keys made before have none and are listed by
-- `bosun keys list --expiring` so they can be rotated); `last_used_at` is
-- when the front door last accepted it (to the minute); `bosun keys rotate`
-- links a key and its successor and ends the old one's life after a grace
-- period. Columns only: a release that does not know them reads its own
-- columns by name. Applied by `bosun migrate` inside one transaction; never
-- edit a migration that has shipped: add a new one.

ALTER TABLE bosun_api_keys
    ADD COLUMN expires_at timestamptz,
    ADD COLUMN last_used_at timestamptz,
    ADD COLUMN rotated_from text,
    ADD COLUMN rotated_to text;
