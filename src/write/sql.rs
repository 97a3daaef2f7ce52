//! SQL text for writes, built only from catalog identifiers.

use crate::catalog::{Collection, ColumnType, Identity, ScalarType};
use crate::db::quote_ident;
use crate::geometry::Crs;
use crate::read::sql as read_sql;
use crate::read::{Encoding, Rendering};

/// The expression that writes column `ci` from `arg`, a parameter (`$3`) or
/// an element of one ([`insert_many`]) of type [`bound_type`]; geometries
/// come as EWKB in SRID `srid` (the request's CRS).
fn param_expr(coll: &Collection, ci: usize, arg: &str, srid: i32) -> String {
    match &coll.columns[ci].ty {
        ColumnType::Geometry(g) => {
            let mut geom = format!("ST_GeomFromEWKB({arg}::bytea)");
            if let Some(to) = g.transform_to(srid) {
                geom = format!("ST_Transform({geom}, {to})");
            }
            if g.geography {
                geom.push_str("::geography");
            }
            geom
        }
        // numeric travels as text so that no digit is lost in a float.
        ColumnType::Scalar(ScalarType::Numeric) => format!("{arg}::text::numeric"),
        // Text is not assigned to an enum without a cast.
        ColumnType::Scalar(ScalarType::Text { .. }) if coll.columns[ci].enum_type => {
            format!("{arg}::text::{}", coll.columns[ci].exact_type_sql)
        }
        ColumnType::Array(ScalarType::Numeric) => format!("{arg}::text[]::numeric[]"),
        ColumnType::Scalar(t) => format!("{arg}::{}", t.param_type()),
        ColumnType::Array(t) => format!("{arg}::{}[]", t.param_type()),
        ColumnType::Unsupported => unreachable!("validation never writes unsupported columns"),
    }
}

/// The type a scalar column's value is bound as; `None` for array columns
/// (an array of them would not unnest row by row).
fn bound_type(coll: &Collection, ci: usize) -> Option<&'static str> {
    match &coll.columns[ci].ty {
        ColumnType::Geometry(_) => Some("bytea"),
        ColumnType::Scalar(t) => Some(t.param_type()),
        ColumnType::Array(_) | ColumnType::Unsupported => None,
    }
}

/// What `unnest` of `columns`, each bound as an array from `$first` on,
/// takes and names its columns: `($first::int4[], …)` and `(c0, …)`, each
/// row's value of column `columns[i]` being `u.c{i}`; `None` when a column
/// cannot be bound that way ([`bound_type`]).
fn unnested(
    coll: &Collection,
    columns: &[usize],
    first: usize,
) -> Option<(Vec<String>, Vec<String>)> {
    columns
        .iter()
        .enumerate()
        .map(|(i, &ci)| {
            let array = format!("${}::{}[]", i + first, bound_type(coll, ci)?);
            Some((array, format!("c{i}")))
        })
        .collect::<Option<Vec<_>>>()
        .map(|pairs| pairs.into_iter().unzip())
}

/// The column list of an INSERT of `columns`, with `OVERRIDING SYSTEM VALUE`
/// when one of them is an identity column that is always generated.
fn insert_into(coll: &Collection, columns: &[usize]) -> String {
    let names: Vec<String> = columns
        .iter()
        .map(|&c| quote_ident(&coll.columns[c].name))
        .collect();
    let mut sql = format!(
        "INSERT INTO {} ({})",
        coll.qualified_name(),
        names.join(", ")
    );
    if columns
        .iter()
        .any(|&c| coll.columns[c].identity == Identity::Always)
    {
        sql.push_str(" OVERRIDING SYSTEM VALUE");
    }
    sql
}

/// ` RETURNING <feature id as text>` ([`read_sql::key_text`]).
fn returning_key(coll: &Collection) -> String {
    let column = |ci: usize| quote_ident(&coll.columns[ci].name);
    format!(" RETURNING {}", read_sql::key_text_of(coll, column))
}

/// `INSERT … RETURNING key::text` writing exactly `columns`; the others take their defaults.
pub fn insert(coll: &Collection, columns: &[usize], srid: i32) -> String {
    let mut sql = if columns.is_empty() {
        format!("INSERT INTO {} DEFAULT VALUES", coll.qualified_name())
    } else {
        let params: Vec<String> = columns
            .iter()
            .enumerate()
            .map(|(i, &c)| param_expr(coll, c, &format!("${}", i + 1), srid))
            .collect();
        format!(
            "{} VALUES ({})",
            insert_into(coll, columns),
            params.join(", ")
        )
    };
    sql.push_str(&returning_key(coll));
    sql
}

/// One INSERT of many rows writing exactly `columns`, each bound as an
/// array of its values (`$1::int4[]`, …, one element per row), answering
/// the keys in the order of the rows; `None` when a column cannot be bound
/// that way (arrays) or there is none.
///
/// The rows are inserted in the order of the arrays (`ORDER BY` the
/// ordinality), and a CTE's rows are read in the order they were returned.
/// A row that a trigger skipped fails the statement ([`none_skipped`]), so
/// that a COMMIT sent behind it cannot keep the others without it.
pub fn insert_many(coll: &Collection, columns: &[usize], srid: i32) -> Option<String> {
    let (arrays, mut names) = unnested(coll, columns, 1)?;
    let values = row_values(coll, columns, srid);
    let skipped = none_skipped(arrays.first()?, "");
    names.push("n".to_owned());
    Some(format!(
        "WITH ins AS ({} SELECT {} FROM unnest({}) WITH ORDINALITY AS u({}) ORDER BY u.n{} AS k) \
         SELECT k FROM ins UNION ALL {skipped}",
        insert_into(coll, columns),
        values.join(", "),
        arrays.join(", "),
        names.join(", "),
        returning_key(coll),
    ))
}

/// The values of `columns` of the row `u` of arrays `u.c0`, `u.c1`…
fn row_values(coll: &Collection, columns: &[usize], srid: i32) -> Vec<String> {
    columns
        .iter()
        .enumerate()
        .map(|(i, &ci)| param_expr(coll, ci, &format!("u.c{i}"), srid))
        .collect()
}

/// The `SELECT` after a `UNION ALL` that fails the statement when `ins`
/// holds fewer rows than the array `first` (a trigger skipped some), its
/// first columns `lead`: by a cast that cannot succeed rather than
/// `featurepipe.fail`, which a caller's role (`[auth] set_role`) may not
/// be allowed to run.
fn none_skipped(first: &str, lead: &str) -> String {
    format!(
        "SELECT {lead}('featurepipe: a trigger skipped ' || cardinality({first}) - c.n || ' features')::int::text \
           FROM (SELECT count(*) FROM ins) AS c(n) WHERE c.n <> cardinality({first})"
    )
}

/// One INSERT of many rows for Citus, which answers a multi-row INSERT's
/// `RETURNING` shard by shard, not in the rows' order: each row's key is
/// drawn from the key's default (or taken from the row) in a CTE, in the
/// rows' order, before the INSERT, and answered from there as `(n, key)`,
/// `n` the row's place in the arrays `$1`… (from 1). It fails, as
/// [`insert_many`] does, when a trigger skipped a row. `None` when a
/// column cannot be bound as an array, there is none, the key is drawn
/// by an identity (no default expression to draw it with here), or the
/// rows leave more than one column of a key of several to the database
/// ([`Collection::key_drawn`]).
pub fn insert_drawn(coll: &Collection, columns: &[usize], srid: i32) -> Option<String> {
    let pk = coll.key_drawn(columns)?;
    let key = &coll.columns[pk];
    let (arrays, mut names) = unnested(coll, columns, 1)?;
    let skipped = none_skipped(arrays.first()?, "NULL::int8, ");
    let mut values = row_values(coll, columns, srid);
    let (drawn, into) = match columns.iter().position(|&ci| ci == pk) {
        Some(i) => (values[i].clone(), insert_into(coll, columns)),
        None if key.identity == Identity::None => {
            let draw = format!("({})::{}", key.default.as_deref()?, key.exact_type_sql);
            values.insert(0, "u.k".to_owned());
            (draw, insert_into(coll, &[&[pk], columns].concat()))
        }
        None => return None,
    };
    names.push("n".to_owned());
    // Of a key of several columns, the id is made of the row's other key
    // values and the one drawn.
    let id = read_sql::key_text_of(coll, |ci| match columns.iter().position(|&c| c == ci) {
        _ if ci == pk => "u.k".to_owned(),
        Some(i) => format!("u.c{i}"),
        None => unreachable!("key_drawn leaves one key column to be drawn"),
    });
    Some(format!(
        "WITH u AS MATERIALIZED (SELECT *, {drawn} AS k FROM unnest({}) WITH ORDINALITY AS u({})), \
         ins AS ({into} SELECT {} FROM u ORDER BY u.n RETURNING 1) \
         SELECT u.n, {id} FROM u UNION ALL {skipped}",
        arrays.join(", "),
        names.join(", "),
        values.join(", "),
    ))
}

/// Like [`insert`], but a row a BEFORE INSERT trigger skipped (FP422) is an
/// error of the statement, so that a transaction sent ahead of its answers
/// cannot commit without it.
pub fn insert_strict(coll: &Collection, columns: &[usize], srid: i32) -> String {
    format!(
        "WITH ins AS ({}) SELECT COALESCE((SELECT * FROM ins), \
         featurepipe.fail('FP422', 'a BEFORE INSERT trigger returned NULL: the feature would not be written')::text)",
        insert(coll, columns, srid)
    )
}

/// A statement that fails as a missing feature would (P0002): for an id
/// that cannot be a key, inside a session sent ahead of its answers.
pub const NO_SUCH_FEATURE: &str =
    "SELECT featurepipe.fail('P0002', format('no feature %s (not a value of the key''s type)', $1::text))";

/// What a statement on one feature does.
#[derive(Debug, Clone, Copy)]
pub enum ItemChange<'a> {
    /// PUT: the given columns from parameters, every other writable one to its default.
    Replace(&'a [usize]),
    /// PATCH: only the given columns.
    Update(&'a [usize]),
    /// DELETE.
    Delete,
}

/// One statement that locks the feature keyed `$1`, checks the preconditions
/// (`$2` If-Match tags, `$3` If-Unmodified-Since) and, when they hold, makes
/// the change with values from `$4` on (geometry in `rendering`'s CRS). Its
/// one row says whether the feature existed, whether the preconditions held,
/// whether the change was made, and the feature as it is now, as `rendering`
/// has it.
pub fn change_item(coll: &Collection, change: ItemChange<'_>, rendering: &Rendering) -> String {
    change_item_then(
        coll,
        change,
        (&rendering.crs, Some(rendering.encoding)),
        &format!(
            "SELECT (SELECT count(*) FROM cur) > 0, {ONE_ROW} AND EXISTS (SELECT FROM ok), done.* \
             FROM (SELECT) AS one LEFT JOIN done ON true"
        ),
    )
}

/// Whether the entity tags `$2` hold for the current row `cur`: none given;
/// or If-Match's (plain) include its tag or `*`, or there are none, and
/// If-None-Match's (marked `!`) include neither its tag nor `*`.
const TAGS_HOLD: &str = "($2::text[] IS NULL OR ( \
     (cur.etag = ANY($2::text[]) OR '*' = ANY($2::text[]) \
      OR NOT EXISTS (SELECT FROM unnest($2::text[]) AS given(tag) WHERE given.tag NOT LIKE '!%')) \
     AND NOT ('!' || cur.etag = ANY($2::text[]) OR '!*' = ANY($2::text[]))))";

/// True, or an error when a key matched more than one row (a table whose
/// children share keys): the statement fails rather than change several.
const ONE_ROW: &str = "(SELECT CASE WHEN count(*) > 1 \
     THEN featurepipe.fail('21000', format('more than one feature has key %s', $1::text)) \
     ELSE true END FROM done)";

/// Like [`change_item`], but a missing feature (P0002), a failed
/// precondition (FP412) or a change a trigger skipped (FP422) is an error of the statement, so that a transaction
/// sent ahead of its answers cannot commit around it. Answers the ETag
/// (and not the feature, which an edit session does not answer: building
/// it was a third of the time of 1,000 updates).
pub fn change_item_strict(coll: &Collection, change: ItemChange<'_>, crs: &Crs) -> String {
    change_item_then(coll, change, (crs, None),
        &format!(
            "SELECT CASE \
               WHEN NOT EXISTS (SELECT FROM cur) \
                 THEN featurepipe.fail('P0002', format('no feature %s', $1::text)) \
               WHEN NOT EXISTS (SELECT FROM ok) \
                 THEN featurepipe.fail('FP412', format('feature %s has changed since it was read (if_match)', $1::text)) \
               WHEN NOT EXISTS (SELECT FROM done) \
                 THEN featurepipe.fail('FP422', format('a trigger or a row security policy skipped the change of feature %s', $1::text)) \
               ELSE {ONE_ROW} \
             END, done.* FROM (SELECT) AS one LEFT JOIN done ON true"
        ),
    )
}

/// The statement of `change` (geometry in `crs`) that answers `answer`, the
/// feature it returns encoded as `encoding` (`None`: no feature, its ETag
/// alone).
fn change_item_then(
    coll: &Collection,
    change: ItemChange<'_>,
    (crs, encoding): (&Crs, Option<Encoding>),
    answer: &str,
) -> String {
    let table = coll.qualified_name();
    let key = read_sql::key_equals(coll, 1).expect("only writable collections are changed");
    let last_modified = match coll.last_modified {
        Some(ci) => read_sql::col(coll, ci),
        None => "NULL::timestamptz".into(),
    };
    let returning = match encoding {
        Some(encoding) => format!(
            "true, {}",
            read_sql::feature_columns_as(coll, crs, encoding)
        ),
        None => format!("true, NULL::text, md5(t::text), {last_modified}::timestamptz"),
    };
    // An UPDATE is a CTE of its own, and the feature is made from its rows
    // after it, not in its RETURNING: Citus allows only immutable functions
    // there, and to_json is stable. The row's text, and so its ETag, is the
    // same either way.
    let (updated, done) = match change {
        ItemChange::Delete => (
            String::new(),
            format!(
                "DELETE FROM {table} AS t WHERE {key} AND EXISTS (SELECT FROM ok) \
                 RETURNING true, NULL::text, NULL::text, NULL::timestamptz"
            ),
        ),
        ItemChange::Replace(columns) | ItemChange::Update(columns) => {
            let replace = matches!(change, ItemChange::Replace(_));
            let sets = assignments(coll, columns, replace, crs.srid, |i| format!("${}", i + 4));
            if sets.is_empty() {
                // Nothing to change: the locked row as it is.
                let done = format!(
                    "SELECT {returning} FROM {table} AS t WHERE {key} AND EXISTS (SELECT FROM ok)"
                );
                (String::new(), done)
            } else {
                let updated = format!(
                    "updated AS (UPDATE {table} AS t SET {} WHERE {key} AND EXISTS (SELECT FROM ok) \
                     RETURNING t.*), ",
                    sets.join(", ")
                );
                (updated, format!("SELECT {returning} FROM updated AS t"))
            }
        }
    };
    format!(
        "WITH cur AS (SELECT md5(t::text) AS etag, {last_modified} AS lm FROM {table} AS t WHERE {key} FOR UPDATE), \
         ok AS (SELECT FROM cur WHERE {TAGS_HOLD} \
                AND ($3::timestamptz IS NULL OR cur.lm IS NULL OR date_trunc('second', cur.lm) <= $3)), \
         {updated}done AS ({done}) {answer}"
    )
}

/// The `SET` list writing `columns` from `arg(0)`, `arg(1)`… (parameters,
/// or elements of them), on a replace every other writable column to its
/// default, and the last-modified column to now.
fn assignments(
    coll: &Collection,
    columns: &[usize],
    replace: bool,
    srid: i32,
    arg: impl Fn(usize) -> String,
) -> Vec<String> {
    let mut sets = Vec::new();
    for (ci, column) in coll.columns.iter().enumerate() {
        let given = columns.iter().position(|&c| c == ci);
        let value = if let Some(i) = given {
            param_expr(coll, ci, &arg(i), srid)
        } else if replace && Some(ci) != coll.primary_key && !coll.kept_on_change(ci) {
            "DEFAULT".to_owned()
        } else {
            continue;
        };
        sets.push(format!("{} = {value}", quote_ident(&column.name)));
    }
    if let Some(ci) = coll.last_modified {
        sets.push(format!("{} = now()", quote_ident(&coll.columns[ci].name)));
    }
    sets
}

/// One statement making `change` to many features at once: their keys
/// bound as `$1` (`text[]`), each one's If-Match tag as `$2` (`text[]`,
/// NULL for none) and the values of the change's columns from `$3` on, an
/// array each (geometries in `srid`). It answers each feature's place in
/// the arrays (from 1) with its new ETag (NULL after a delete), and fails
/// unless every feature existed, matched its tag and was changed exactly
/// once (a trigger, a row security policy, a repeated key or, on Citus, a
/// concurrent change may say otherwise): the caller then sends them one by
/// one to learn which failed. `None` when a column cannot be bound as an
/// array, or nothing is set.
pub fn change_many(coll: &Collection, change: ItemChange<'_>, srid: i32) -> Option<String> {
    if !coll.has_key() {
        return None;
    }
    let columns = match change {
        ItemChange::Replace(columns) | ItemChange::Update(columns) => columns,
        ItemChange::Delete => &[],
    };
    let (values, value_names) = unnested(coll, columns, 3)?;
    let arrays = [
        vec!["$1::text[]".to_owned(), "$2::text[]".to_owned()],
        values,
    ]
    .concat();
    let names = [
        vec!["id".to_owned(), "tag".to_owned()],
        value_names,
        vec!["n".to_owned()],
    ]
    .concat();
    let many = ManyChanges { coll };
    let sets = |alias: &str| {
        let replace = matches!(change, ItemChange::Replace(_));
        assignments(coll, columns, replace, srid, |i| format!("{alias}.c{i}"))
    };
    let done = match (change, coll.distributed) {
        (ItemChange::Delete, false) => many.deleted_here(),
        (ItemChange::Delete, true) => many.deleted_on_citus(),
        (_, distributed) => {
            let sets = sets(if distributed { "ok" } else { "u" });
            if sets.is_empty() {
                return None;
            }
            match distributed {
                false => many.updated_here(&sets),
                true => many.updated_on_citus(&sets),
            }
        }
    };
    Some(format!(
        "WITH u AS (SELECT * FROM unnest({}) WITH ORDINALITY AS u({})), {done} \
         SELECT n, etag FROM done UNION ALL \
         SELECT NULL::int8, featurepipe.fail('P0001', 'a change of many features did not change each one once')::text \
           FROM (SELECT count(*), count(DISTINCT n) FROM done) AS c(rows, features) \
          WHERE c.rows <> cardinality($1::text[]) OR c.features <> c.rows",
        arrays.join(", "),
        names.join(", "),
    ))
}

/// The CTEs ending in `done(n, etag)` that make the changes of
/// [`change_many`] to the rows of `u` (`id`, `tag`, `c0`…, `n`).
struct ManyChanges<'a> {
    /// The changed collection, which has a key.
    coll: &'a Collection,
}

/// Whether the tag of `u` holds for the row `t`.
const TAG_HOLDS: &str = "(u.tag IS NULL OR u.tag = '*' OR u.tag = md5(t::text))";

impl ManyChanges<'_> {
    /// The key of `t` equal to the id `{alias}.id`.
    fn key(&self, alias: &str) -> String {
        read_sql::key_matches(self.coll, &format!("{alias}.id"))
            .expect("change_many checked the key")
    }

    /// The key among the keys of `$1`; of a key of several columns, no
    /// condition: no one column's array says which shards hold them.
    fn among(&self) -> String {
        match self.coll.primary_key {
            Some(pk) => format!(
                "{} = ANY($1::text[]::{}[])",
                read_sql::col(self.coll, pk),
                self.coll.columns[pk].exact_type_sql
            ),
            None => "true".to_owned(),
        }
    }

    /// On one server the tag is compared in the change's own condition,
    /// which a concurrent change makes the database evaluate again on the
    /// row as it is now.
    fn deleted_here(&self) -> String {
        format!(
            "done(n, etag) AS (DELETE FROM {} AS t USING u WHERE {} AND {TAG_HOLDS} \
             RETURNING u.n, NULL::text)",
            self.coll.qualified_name(),
            self.key("u")
        )
    }

    fn updated_here(&self, sets: &[String]) -> String {
        format!(
            "done(n, etag) AS (UPDATE {} AS t SET {} FROM u WHERE {} AND {TAG_HOLDS} \
             RETURNING u.n, md5(t::text))",
            self.coll.qualified_name(),
            sets.join(", "),
            self.key("u")
        )
    }

    /// Citus refuses a row's text (a stable function) in an UPDATE's
    /// condition and in RETURNING, and a multi-shard `FOR UPDATE`: the
    /// tags are compared with the rows as first read (`ok`), and only rows
    /// still in that version (`xmin`) are changed, which a concurrent
    /// change makes the database check again on the row as it is now. The
    /// keys are also compared with the array itself, so that the statement
    /// goes only to the shards that hold them. Not on one server: there
    /// this shape took 22–49 ms for 1,000 updates, the other 4–5 ms.
    fn read_on_citus(&self) -> String {
        format!(
            "ok AS (SELECT u.*, t.xmin AS version FROM u JOIN {} AS t ON {} WHERE {} AND {TAG_HOLDS}), ",
            self.coll.qualified_name(),
            self.key("u"),
            self.among()
        )
    }

    /// The rows of `ok` still as they were read.
    fn unchanged(&self) -> String {
        format!(
            "t.xmin = ok.version AND {} AND {}",
            self.key("ok"),
            self.among()
        )
    }

    fn deleted_on_citus(&self) -> String {
        format!(
            "{}done(n, etag) AS (DELETE FROM {} AS t USING ok WHERE {} RETURNING ok.n, NULL::text)",
            self.read_on_citus(),
            self.coll.qualified_name(),
            self.unchanged()
        )
    }

    fn updated_on_citus(&self, sets: &[String]) -> String {
        format!(
            "{}updated AS (UPDATE {} AS t SET {} FROM ok WHERE {} RETURNING t.*), \
             done(n, etag) AS (SELECT u.n, md5(t::text) FROM updated AS t JOIN u ON {})",
            self.read_on_citus(),
            self.coll.qualified_name(),
            sets.join(", "),
            self.unchanged(),
            self.key("u")
        )
    }
}

/// The statement that changes every feature `condition` selects (an edit
/// by filter): updates `columns` from `$1`… (geometries in `srid`), or with
/// `None` deletes; it answers the keys of the features it touched, as text.
/// Row security and the caller's rights apply as to any statement.
pub fn change_where(
    coll: &Collection,
    columns: Option<&[usize]>,
    srid: i32,
    condition: &str,
) -> String {
    let table = coll.qualified_name();
    let returning = returning_key(coll);
    let param = |i: usize| format!("${}", i + 1);
    match columns.map(|columns| assignments(coll, columns, false, srid, param)) {
        None => format!("DELETE FROM {table} AS t WHERE {condition}{returning}"),
        // Nothing to change: the selected rows, locked as an update would.
        Some(sets) if sets.is_empty() => {
            let key = read_sql::key_text(coll);
            format!("SELECT {key} FROM {table} AS t WHERE {condition} FOR UPDATE")
        }
        Some(sets) => format!(
            "UPDATE {table} AS t SET {} WHERE {condition}{returning}",
            sets.join(", ")
        ),
    }
}

/// The client's key `$1` as a value of the key column; an error (22023) when
/// the column's modifier would change it (`varchar(10)` truncates, `numeric(5,2)`
/// rounds), so that no feature is stored under another id than its URL's.
fn exact_key(coll: &Collection, pk: usize) -> String {
    let (typed, exact) = (&coll.columns[pk].type_sql, &coll.columns[pk].exact_type_sql);
    format!(
        "CASE WHEN $1::text::{typed}::{exact} = $1::text::{exact} THEN $1::text::{typed} \
         ELSE featurepipe.fail('22023', format('feature id %s is not a value of the key column: \
         it would be stored as %s', $1::text, $1::text::{typed}::text))::text::{typed} END"
    )
}

/// `INSERT` of a feature whose key (`$1`) the client chose (geometry in
/// `rendering`'s CRS), returning it as stored, as `rendering` has it.
pub fn insert_item(coll: &Collection, columns: &[usize], rendering: &Rendering) -> String {
    let crs = &rendering.crs;
    let pk = coll
        .primary_key
        .expect("only writable collections are inserted into");
    let mut names = vec![quote_ident(&coll.columns[pk].name)];
    let mut values = vec![exact_key(coll, pk)];
    for (i, &ci) in columns.iter().enumerate() {
        names.push(quote_ident(&coll.columns[ci].name));
        values.push(param_expr(coll, ci, &format!("${}", i + 2), crs.srid));
    }
    if let Some(ci) = coll.last_modified {
        names.push(quote_ident(&coll.columns[ci].name));
        values.push("now()".to_owned());
    }
    format!(
        "INSERT INTO {} AS t ({}) VALUES ({}) RETURNING {}",
        coll.qualified_name(),
        names.join(", "),
        values.join(", "),
        read_sql::feature_columns_as(coll, crs, rendering.encoding)
    )
}
