-- Every column of every ordinary or partitioned table in the published schemas.
-- Domains are resolved to their base type; arrays report their element type.
-- Geometry typmods are decoded only when constrained (typmod >= 0).
SELECT n.nspname::text AS schema_name,
       c.relname::text AS table_name,
       a.attnum::int4 AS attnum,
       a.attname::text AS column_name,
       format_type(a.atttypid, a.atttypmod) AS type_sql,
       -- The base type without modifier (-1: `bpchar`, not `character`, which is char(1)):
       -- a cast to it neither truncates nor rounds.
       format_type(base.oid, -1) AS exact_type_sql,
       base.typname::text AS base_type,
       elem.typname::text AS element_type,
       CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END AS typmod,
       (a.attnotnull OR (t.typtype = 'd' AND t.typnotnull)) AS not_null,
       COALESCE(pg_get_expr(d.adbin, d.adrelid),
                CASE WHEN t.typtype = 'd' THEN t.typdefault END) AS default_expr,
       a.attidentity::text AS identity,
       a.attgenerated::text AS generated,
       -- Its place (from 1) in the primary key, if it is one of the key's columns.
       pk.key_position,
       -- On the table or on any of its partitions (at any depth): a partition's
       -- trigger fires for rows routed through the parent.
       EXISTS (SELECT 1 FROM pg_trigger tg
                WHERE (tg.tgrelid = c.oid
                       OR tg.tgrelid IN (SELECT relid FROM pg_partition_tree(c.oid)))
                  AND NOT tg.tgisinternal AND tg.tgenabled <> 'D'
                  AND (tg.tgtype & 1) <> 0   -- ROW
                  AND (tg.tgtype & 2) <> 0   -- BEFORE
                  AND (tg.tgtype & 4) <> 0)  -- INSERT
         AS before_insert_trigger,
       -- A row trigger on UPDATE or DELETE (any timing), or a foreign key from
       -- the table to itself: one statement changing many features would let
       -- either see or check the others' changes at once, not one by one.
       (EXISTS (SELECT 1 FROM pg_trigger tg
                 WHERE (tg.tgrelid = c.oid
                        OR tg.tgrelid IN (SELECT relid FROM pg_partition_tree(c.oid)))
                   AND NOT tg.tgisinternal AND tg.tgenabled <> 'D'
                   AND (tg.tgtype & 1) <> 0          -- ROW
                   AND (tg.tgtype & (8 | 16)) <> 0)  -- DELETE or UPDATE
        OR EXISTS (SELECT 1 FROM pg_constraint k
                    WHERE k.contype = 'f' AND k.conrelid = c.oid AND k.confrelid = c.oid))
         AS changes_alone,
       c.relrowsecurity AS row_security,
       -- An enum type's labels, in order.
       CASE WHEN base.typtype = 'e' THEN
         ARRAY(SELECT e.enumlabel::text FROM pg_enum e
                WHERE e.enumtypid = base.oid ORDER BY e.enumsortorder)
       END AS enum_labels,
       -- The CHECK constraints on this column alone, and its domain's (on VALUE).
       ARRAY(SELECT pg_get_constraintdef(k.oid) FROM pg_constraint k
              WHERE k.contype = 'c'
                AND ((k.conrelid = c.oid AND k.conkey = ARRAY[a.attnum])
                     OR (t.typtype = 'd' AND k.contypid = t.oid))
              ORDER BY k.conname) AS checks,
       obj_description(c.oid, 'pg_class') AS table_comment
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  JOIN pg_type t ON t.oid = a.atttypid
  JOIN pg_type base ON base.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
  LEFT JOIN pg_type elem ON elem.oid = base.typelem AND base.typcategory = 'A'
  LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
  LEFT JOIN LATERAL (
        SELECT k.n::int4 AS key_position
          FROM pg_index i, unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
         WHERE i.indrelid = c.oid AND i.indisprimary
           AND k.attnum = a.attnum AND k.n <= i.indnkeyatts
       ) pk ON true
 WHERE n.nspname = ANY($1::text[])
   AND c.relkind IN ('r', 'p')
   AND NOT c.relispartition
   AND has_table_privilege(c.oid, 'SELECT')
 ORDER BY n.nspname, c.relname, a.attnum
