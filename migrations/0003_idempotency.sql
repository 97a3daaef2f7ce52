-- Idempotency keys: a write carrying `Idempotency-Key` claims its key in the
-- same transaction as its rows and stores its response there before COMMIT,
-- so a retry finds either nothing (nothing was written) or the response.
CREATE TABLE featurepipe.idempotency (
    key          text PRIMARY KEY,
    request_hash text NOT NULL,
    created      timestamptz NOT NULL DEFAULT now(),
    status       integer,
    body         bytea,
    location     text
);
CREATE INDEX idempotency_created ON featurepipe.idempotency (created);
