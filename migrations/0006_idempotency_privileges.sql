-- Migration 5's SECURITY DEFINER functions kept PostgreSQL's default EXECUTE
-- for PUBLIC: any role that could connect could read or overwrite another
-- caller's stored response, or expire every key. They are the service's
-- alone now. A request running as its caller's role (`[auth] set_role`)
-- switches to the service's own role for each bookkeeping statement and back
-- (src/write/mod.rs, `as_service`), so no caller role needs EXECUTE. The
-- owner (the login that migrates) keeps it; a service that logs in as
-- another role needs `GRANT EXECUTE` on these four functions (README).

-- How far back keys are remembered: the service's TTL, within 1 minute and
-- 1 year, so that no argument (zero, negative, NaN, infinite) expires every
-- key at once. Lookup and expiry share it, so they agree on what has expired.
CREATE FUNCTION featurepipe.idempotency_cutoff(ttl float8) RETURNS timestamptz
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    -- least() ranks NaN above every number: a NaN ttl keeps keys a year.
    SELECT now() - make_interval(secs => least(greatest(ttl, 60), 31622400))
$$;

CREATE OR REPLACE FUNCTION featurepipe.idempotency_expire(ttl float8) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    DELETE FROM featurepipe.idempotency WHERE key IN (
        SELECT key FROM featurepipe.idempotency
         WHERE created < featurepipe.idempotency_cutoff(ttl)
         LIMIT 1000 FOR UPDATE SKIP LOCKED)
$$;

CREATE OR REPLACE FUNCTION featurepipe.idempotency_lookup(k text, ttl float8)
RETURNS TABLE (request_hash text, status int4, body bytea, location text, headers jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT i.request_hash, i.status, i.body, i.location, i.headers
      FROM featurepipe.idempotency AS i
     WHERE i.key = k AND i.created >= featurepipe.idempotency_cutoff(ttl)
       AND i.status IS NOT NULL
$$;

REVOKE ALL ON FUNCTION
    featurepipe.idempotency_cutoff(float8),
    featurepipe.idempotency_expire(float8),
    featurepipe.idempotency_claim(text, text),
    featurepipe.idempotency_store(text, int4, bytea, text, jsonb),
    featurepipe.idempotency_lookup(text, float8)
FROM PUBLIC;
