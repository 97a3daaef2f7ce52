-- featurepipe keeps its own state in the schema `featurepipe`, never in published
-- schemas. The runner creates the schema and `schema_migrations` itself; this first
-- migration documents the schema so that operators know what owns it.
COMMENT ON SCHEMA featurepipe IS 'State of the featurepipe service (migrations, later idempotency keys). Managed by `featurepipe migrate`.';
