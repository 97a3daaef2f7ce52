-- A fingerprint of the definitions of the tables in the published schemas:
-- any DDL that may change what tables.sql reads changes it (a table made,
-- dropped or renamed; a column added, dropped, renamed or retyped; a
-- default, constraint, key, trigger, domain, enum, comment or grant).
-- Only system catalogs, which every role may read, found by their indexes,
-- and hashed here: one short row per poll.
WITH tables AS (
    SELECT c.oid,
           format('table %s %s %s %s %s %s %s', c.oid, n.nspname, c.relname, c.relkind,
                  c.relispartition, c.relrowsecurity, c.relacl) AS line
      FROM pg_class c
      JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = ANY($1::text[])
       AND c.relkind IN ('r', 'p')
),
columns AS (
    SELECT a.atttypid,
           format('column %s %s %s %s %s %s %s %s %s', a.attrelid, a.attnum, a.attname,
                  a.atttypid, a.atttypmod, a.attnotnull, a.attisdropped, a.attidentity,
                  a.attgenerated) AS line
      FROM pg_attribute a
     WHERE a.attrelid IN (SELECT oid FROM tables) AND a.attnum > 0
),
-- The domains and enums the columns are of (a domain's NOT NULL and default count).
types AS (
    SELECT t.oid,
           format('type %s %s %s %s %s %s', t.oid, t.typtype, t.typbasetype, t.typtypmod,
                  t.typnotnull, t.typdefaultbin) AS line
      FROM pg_type t
     WHERE t.oid IN (SELECT atttypid FROM columns) AND t.typtype IN ('d', 'e')
)
SELECT COALESCE(md5(string_agg(line, E'\n' ORDER BY line)), '') AS fingerprint,
       -- Citus's metadata, which says which tables it distributes, is read apart.
       to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL AS citus
  FROM (
        SELECT line FROM tables
        UNION ALL
        SELECT line FROM columns
        UNION ALL
        SELECT line FROM types
        UNION ALL
        SELECT format('default %s %s %s', d.adrelid, d.adnum, d.adbin)
          FROM pg_attrdef d
         WHERE d.adrelid IN (SELECT oid FROM tables)
        UNION ALL
        SELECT format('constraint %s %s %s %s %s %s %s', co.conrelid, co.contypid, co.conname,
                      co.contype, co.conkey, co.convalidated, co.conbin)
          FROM pg_constraint co
         WHERE co.conrelid IN (SELECT oid FROM tables)
            OR co.contypid IN (SELECT oid FROM types)
        UNION ALL
        SELECT format('index %s %s %s %s %s', i.indrelid, i.indexrelid, i.indisprimary,
                      i.indnkeyatts, i.indkey)
          FROM pg_index i
         WHERE i.indrelid IN (SELECT oid FROM tables)
        UNION ALL
        SELECT format('trigger %s %s %s %s %s', tg.tgrelid, tg.tgname, tg.tgtype, tg.tgenabled,
                      tg.tgisinternal)
          FROM pg_trigger tg
         WHERE tg.tgrelid IN (SELECT oid FROM tables)
        UNION ALL
        SELECT format('enum %s %s %s', e.enumtypid, e.enumsortorder, e.enumlabel)
          FROM pg_enum e
         WHERE e.enumtypid IN (SELECT oid FROM types)
        UNION ALL
        SELECT format('comment %s %s %s', ds.objoid, ds.objsubid, ds.description)
          FROM pg_description ds
         WHERE ds.classoid = 'pg_class'::regclass AND ds.objoid IN (SELECT oid FROM tables)
       ) AS parts
