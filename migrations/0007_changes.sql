-- The change feed (GET /collections/{id}/changes; docs/offline-sync.md).
-- A row trigger on each table whose collection has `changes = true`
-- (installed by the service: src/catalog/feed.rs) logs every change,
-- whatever wrote it, as the table, the writing transaction's id and the
-- feature's key. The feed reads the log up to a snapshot horizon, so that
-- no transaction that could still commit is ever passed over.
CREATE TABLE featurepipe.changes (
    -- The collection's table (the parent of a partitioned one).
    relid oid    NOT NULL,
    -- The top-level transaction that made the change (never wraps around).
    tx    xid8   NOT NULL DEFAULT pg_current_xact_id(),
    -- Orders the changes of one transaction (one backend: its cached
    -- values rise), and nothing more.
    seq   bigint GENERATED ALWAYS AS IDENTITY (CACHE 100),
    -- The feature's key, as text; a key change logs the old and the new one.
    key   text   NOT NULL,
    PRIMARY KEY (relid, tx, seq)
);

-- One row per table with a trigger installed. `epoch` counts the times the
-- trigger was (re)created: a cursor of another epoch may have missed
-- changes made while there was none. `pruned_below`: entries of
-- transactions below it are gone; older cursors get 410.
CREATE TABLE featurepipe.change_feeds (
    relid        oid     PRIMARY KEY,
    epoch        integer NOT NULL DEFAULT 1,
    pruned_below xid8    NOT NULL DEFAULT '0'
);

-- When the pruner ran, and the horizon then: every transaction below it
-- had finished at `at`. Pruning to a retention deletes the entries below
-- the horizon of the last mark older than the retention.
CREATE TABLE featurepipe.change_marks (
    at      timestamptz NOT NULL DEFAULT now(),
    horizon xid8        NOT NULL
);
CREATE INDEX change_marks_at ON featurepipe.change_marks (at);

-- Writers (any role) log through the SECURITY DEFINER trigger functions
-- only. Readers: with `[auth] set_role` the feed is read as the caller's
-- role, which sees the entries of the tables it may SELECT (and needs USAGE
-- on the schema, as for edit sessions). The rows themselves are read from
-- the table under its own rights and policies.
REVOKE ALL ON featurepipe.changes, featurepipe.change_feeds, featurepipe.change_marks FROM PUBLIC;
GRANT SELECT ON featurepipe.changes, featurepipe.change_feeds TO PUBLIC;
ALTER TABLE featurepipe.changes ENABLE ROW LEVEL SECURITY;
CREATE POLICY readers_of_the_table ON featurepipe.changes FOR SELECT
    USING (pg_catalog.has_table_privilege(relid, 'SELECT'));
-- The trigger functions insert as the role that installed them: the
-- service's, which needs INSERT when it is not the owner of the log.
CREATE POLICY writers ON featurepipe.changes FOR INSERT WITH CHECK (true);

-- Forget the changes older than `retention` seconds, and mark the horizon
-- now for later runs. The deleted entries are a prefix of every feed
-- (transactions below a horizon), recorded as `pruned_below`. Returns how
-- many entries were deleted.
-- SECURITY DEFINER: as the log's owner, whom its row security does not
-- bind; a service logging in as another role needs EXECUTE on it.
CREATE FUNCTION featurepipe.changes_prune(retention float8) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    cut featurepipe.change_marks;
    feed oid;
    deleted bigint;
    gone bigint := 0;
BEGIN
    INSERT INTO featurepipe.change_marks (horizon)
        VALUES (pg_snapshot_xmin(pg_current_snapshot()));
    SELECT * INTO cut FROM featurepipe.change_marks AS m
     WHERE m.at <= now() - make_interval(secs => retention)
     ORDER BY m.at DESC, m.horizon DESC LIMIT 1;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    DELETE FROM featurepipe.change_marks AS m WHERE m.at < cut.at;
    -- Feed by feed, so that each delete is a range of the primary key.
    FOR feed IN SELECT f.relid FROM featurepipe.change_feeds AS f
                 WHERE f.pruned_below < cut.horizon LOOP
        DELETE FROM featurepipe.changes AS c WHERE c.relid = feed AND c.tx < cut.horizon;
        GET DIAGNOSTICS deleted = ROW_COUNT;
        gone := gone + deleted;
        UPDATE featurepipe.change_feeds SET pruned_below = cut.horizon WHERE relid = feed;
    END LOOP;
    RETURN gone;
END
$$;
REVOKE ALL ON FUNCTION featurepipe.changes_prune(float8) FROM PUBLIC;

-- TRUNCATE logs no rows: it starts a new epoch of the table's feed (the
-- table's oid is the trigger's argument), so that every cursor gets 410 and
-- its client downloads the collection again.
CREATE FUNCTION featurepipe.changes_truncated() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE featurepipe.change_feeds SET epoch = epoch + 1 WHERE relid = TG_ARGV[0]::oid;
    PERFORM pg_notify('featurepipe_changes', TG_ARGV[0]);
    RETURN NULL;
END
$$;
