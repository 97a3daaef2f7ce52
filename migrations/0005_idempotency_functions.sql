-- Idempotency bookkeeping runs as the service's own role: with `[auth]
-- set_role` a request runs as its caller's database role, which must neither
-- read nor forge nor delete other callers' stored responses. These functions
-- are all such a role needs (EXECUTE, and USAGE on the schema).
REVOKE ALL ON featurepipe.idempotency FROM PUBLIC;

-- Forget expired keys, a bounded number at a time, skipping rows other
-- transactions hold: keyed writes never wait on each other's expiry.
CREATE FUNCTION featurepipe.idempotency_expire(ttl float8) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    DELETE FROM featurepipe.idempotency WHERE key IN (
        SELECT key FROM featurepipe.idempotency
         WHERE created < now() - make_interval(secs => ttl)
         LIMIT 1000 FOR UPDATE SKIP LOCKED)
$$;

-- Claim a key; a concurrent request with the same key waits, then fails (23505).
CREATE FUNCTION featurepipe.idempotency_claim(k text, hash text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    INSERT INTO featurepipe.idempotency (key, request_hash) VALUES (k, hash)
$$;

-- Store the response, in the transaction that wrote the rows.
CREATE FUNCTION featurepipe.idempotency_store(k text, st int4, b bytea, loc text, h jsonb)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    UPDATE featurepipe.idempotency
       SET status = st, body = b, location = loc, headers = h
     WHERE key = k
$$;

-- The stored response of a key that has not expired.
CREATE FUNCTION featurepipe.idempotency_lookup(k text, ttl float8)
RETURNS TABLE (request_hash text, status int4, body bytea, location text, headers jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT i.request_hash, i.status, i.body, i.location, i.headers
      FROM featurepipe.idempotency AS i
     WHERE i.key = k AND i.created >= now() - make_interval(secs => ttl)
       AND i.status IS NOT NULL
$$;
