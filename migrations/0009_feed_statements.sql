-- Change feeds, second version (src/catalog/feed.rs, v2).
--
-- 1. Only a table's own triggers write its feed. The trigger functions are
--    SECURITY DEFINER and kept PostgreSQL's default EXECUTE for PUBLIC: any
--    role with USAGE on the schema could attach them to a table of its own
--    and log made-up keys for another table, or start a new epoch of its
--    feed. CREATE TRIGGER needs EXECUTE on the function, so revoking it
--    from PUBLIC stops that; the functions also refuse to run for any table
--    but their own (and its partitions). The service makes new functions
--    revoked (v2); this repairs the ones made before.
-- 2. The log holds one entry per statement (per 1,000 keys) rather than one
--    per row: statement triggers with transition tables write `keys`, an
--    array, in one INSERT ... SELECT. Entries of the first version (`key`)
--    stay readable until they are pruned.

CREATE OR REPLACE FUNCTION featurepipe.changes_truncated() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_RELID <> TG_ARGV[0]::oid
       AND NOT EXISTS (SELECT FROM pg_partition_ancestors(TG_RELID) AS a
                        WHERE a.relid = TG_ARGV[0]::oid) THEN
        RAISE EXCEPTION 'featurepipe: the change feed of % is started again only by its own table, not by %',
            TG_ARGV[0]::oid, TG_RELID::regclass USING ERRCODE = '42501';
    END IF;
    UPDATE featurepipe.change_feeds SET epoch = epoch + 1 WHERE relid = TG_ARGV[0]::oid;
    PERFORM pg_notify('featurepipe_changes', TG_ARGV[0]);
    RETURN NULL;
END
$$;

-- Every trigger function of the schema, the per-table ones made by earlier
-- versions of the service among them. A function this role may not change
-- is left with a warning that says what to run.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc AS p
              WHERE p.pronamespace = 'featurepipe'::regnamespace
                AND p.prorettype = 'trigger'::regtype LOOP
        BEGIN
            EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE WARNING 'featurepipe: % is not this role''s: revoke EXECUTE on it from PUBLIC as its owner', f;
        END;
    END LOOP;
END
$$;

ALTER TABLE featurepipe.changes
    ALTER COLUMN key DROP NOT NULL,
    -- The keys one statement changed (at most 1,000 an entry), as text
    -- written in fixed settings (ISO dates, UTC), so that any session
    -- reads them back as the same values.
    ADD COLUMN keys text[],
    -- NOT VALID: the entries logged so far have their key; no scan of them.
    ADD CONSTRAINT changes_one_form CHECK ((key IS NULL) <> (keys IS NULL)) NOT VALID;
