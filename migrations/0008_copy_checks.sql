-- A COPY sent in one flight (src/write/copy.rs) has its COMMIT sent before
-- its row count is read. These checks run between the two, in the same
-- flight: a failed check fails the transaction, so the COMMIT rolls back.

-- The rows this session has inserted into `tbl` (into its partitions, when
-- it is partitioned), as its statistics counters say: they include this
-- transaction's rows, and rows of earlier transactions not yet reported to
-- the statistics system, so only a difference within one transaction
-- counts. Without counters (track_counts off), this transaction's rows are
-- counted.
CREATE FUNCTION featurepipe.inserted_rows(tbl regclass) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    inserted bigint;
BEGIN
    IF current_setting('track_counts')::boolean THEN
        SELECT coalesce(
                 (SELECT sum(pg_stat_get_xact_tuples_inserted(relid))
                    FROM pg_partition_tree(tbl) WHERE isleaf),
                 pg_stat_get_xact_tuples_inserted(tbl))
          INTO inserted;
    ELSE
        EXECUTE format('SELECT count(*) FROM %s WHERE xmin = pg_current_xact_id()::xid', tbl)
           INTO inserted;
    END IF;
    RETURN inserted;
END
$$;

-- Before a transaction's first COPY into `tbl`: where its count starts.
CREATE FUNCTION featurepipe.copy_begins(tbl regclass) RETURNS void
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT set_config('featurepipe.copy_base', featurepipe.inserted_rows(tbl)::text, true);
$$;

-- The COPYs of this transaction into `tbl` must have inserted `expected`
-- rows in all: a row a BEFORE INSERT trigger silently skipped (one the
-- service's catalog does not know yet) must not commit under an id the
-- client is told.
CREATE FUNCTION featurepipe.check_copied(tbl regclass, expected bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    inserted bigint := featurepipe.inserted_rows(tbl)
                       - nullif(current_setting('featurepipe.copy_base', true), '')::bigint;
BEGIN
    IF inserted IS DISTINCT FROM expected THEN
        RAISE EXCEPTION USING ERRCODE = 'FPCPY',
            MESSAGE = format('COPY into %s wrote %s rows in all, not %s', tbl, inserted, expected);
    END IF;
END
$$;

-- The keys a COPY's last `n` rows drew from the sequence `seq` (its
-- `key` column's default), in the order drawn, i.e. in row order: a
-- session's draws from a sequence follow its increment, so they are the
-- `n` keys this transaction inserted nearest to currval(seq), on the side
-- the sequence comes from. Rows of other sessions in that range have
-- another xmin. Checked first: all rows copied, and `n` keys found.
CREATE FUNCTION featurepipe.copied_keys(tbl regclass, key text, seq regclass,
                                        expected bigint, n int4) RETURNS int8[]
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    keys int8[];
    ascending boolean := (SELECT seqincrement > 0 FROM pg_sequence WHERE seqrelid = seq);
BEGIN
    PERFORM featurepipe.check_copied(tbl, expected);
    EXECUTE format(
        'SELECT array_agg(k ORDER BY k %3$s) FROM (SELECT %1$I::int8 AS k FROM %2$s'
        ' WHERE %1$I %4$s $1 AND xmin = pg_current_xact_id()::xid ORDER BY %1$I %5$s LIMIT $2) AS s',
        key, tbl,
        CASE WHEN ascending THEN 'ASC' ELSE 'DESC' END,
        CASE WHEN ascending THEN '<=' ELSE '>=' END,
        CASE WHEN ascending THEN 'DESC' ELSE 'ASC' END)
      INTO keys USING currval(seq), n;
    IF coalesce(cardinality(keys), 0) <> n THEN
        RAISE EXCEPTION USING ERRCODE = 'FPCPY',
            MESSAGE = format('%s keys of the %s rows copied into %s found', coalesce(cardinality(keys), 0), n, tbl);
    END IF;
    RETURN keys;
END
$$;
