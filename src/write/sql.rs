//! SQL text for writes, built only from catalog identifiers.

use std::fmt::Write as _;

use crate::catalog::{quote_ident, Collection, ColumnType, Identity, ScalarType};

/// The parameter expression for column `ci` bound as `$n`.
fn param_expr(coll: &Collection, ci: usize, n: usize) -> String {
    match &coll.columns[ci].ty {
        ColumnType::Geometry(g) => {
            let geom = format!("ST_GeomFromEWKB(${n}::bytea)");
            match (g.geography, g.transform_to()) {
                (true, _) => format!("{geom}::geography"),
                (false, Some(srid)) => format!("ST_Transform({geom}, {srid})"),
                (false, None) => geom,
            }
        }
        // numeric travels as text so that no digit is lost in a float.
        ColumnType::Scalar(ScalarType::Numeric) => format!("${n}::text::numeric"),
        ColumnType::Array(ScalarType::Numeric) => format!("${n}::text[]::numeric[]"),
        ColumnType::Scalar(t) => format!("${n}::{}", t.param_type()),
        ColumnType::Array(t) => format!("${n}::{}[]", t.param_type()),
        ColumnType::Unsupported => unreachable!("validation never writes unsupported columns"),
    }
}

/// `INSERT … RETURNING key::text` writing exactly `columns`; the others take their defaults.
pub fn insert(coll: &Collection, columns: &[usize]) -> String {
    let pk = coll
        .primary_key
        .expect("only writable collections are inserted into");
    let mut sql = format!("INSERT INTO {}", coll.qualified_name());
    if columns.is_empty() {
        sql.push_str(" DEFAULT VALUES");
    } else {
        let names: Vec<String> = columns
            .iter()
            .map(|&c| quote_ident(&coll.columns[c].name))
            .collect();
        let params: Vec<String> = columns
            .iter()
            .enumerate()
            .map(|(i, &c)| param_expr(coll, c, i + 1))
            .collect();
        write!(sql, " ({})", names.join(", ")).expect("write to String");
        if columns
            .iter()
            .any(|&c| coll.columns[c].identity == Identity::Always)
        {
            sql.push_str(" OVERRIDING SYSTEM VALUE");
        }
        write!(sql, " VALUES ({})", params.join(", ")).expect("write to String");
    }
    write!(
        sql,
        " RETURNING {}::text",
        quote_ident(&coll.columns[pk].name)
    )
    .expect("write to String");
    sql
}
