-- The response headers a replay must carry besides Location (Content-Type,
-- ETag, Last-Modified, Content-Crs, Preference-Applied): PUT, PATCH and
-- DELETE take Idempotency-Key too.
ALTER TABLE featurepipe.idempotency ADD COLUMN headers jsonb;
