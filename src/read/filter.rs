//! CQL2 filters (OGC API - Features Part 3, `filter=`): parsed by the
//! `cql2` crate, from text or JSON, and turned here into SQL against the
//! catalog. Every literal is a bound parameter; the SQL text holds only
//! catalog identifiers and fixed words.
//!
//! Comparisons follow CQL2 rather than the database's defaults: strings
//! order by code point (`COLLATE "C"`) whatever the database's collation,
//! `/` divides without truncating, and a `BBOX` whose west edge is east of
//! its east edge crosses the antimeridian and covers both sides. NULL is
//! unknown, as in SQL: `NOT (p = 1)` does not match a feature whose `p` is
//! null; `p IS NULL` does.

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use cql2::Expr;
use tokio_postgres::types::ToSql;

use super::sql::col;
use crate::catalog::temporal::{named_time, Temporal};
use crate::catalog::{Collection, ColumnType, ScalarType};
use crate::error::{Error, ErrorKind};
use crate::geometry::{Crs, WGS84_SRID};

/// The filter languages `filter-lang` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    /// `cql2-text`, the default.
    Text,
    /// `cql2-json`.
    Json,
}

impl Lang {
    /// The language `filter-lang` names.
    pub fn named(value: &str) -> Result<Lang, Error> {
        match value {
            "cql2-text" => Ok(Lang::Text),
            "cql2-json" => Ok(Lang::Json),
            other => Err(bad(
                "filter-lang",
                format!("'{other}' is not offered; use cql2-text or cql2-json"),
            )),
        }
    }

    /// Its name, as `filter-lang` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Lang::Text => "cql2-text",
            Lang::Json => "cql2-json",
        }
    }
}

/// A checked filter: its SQL condition, with the values it binds.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    /// As given, for paging links.
    pub given: String,
    /// The language it was given in.
    pub lang: Lang,
    /// `filter-crs` as given, if it was.
    pub crs: Option<String>,
    condition: Vec<Piece>,
    values: Vec<Value>,
}

/// A piece of a condition: SQL text, or the `n`th bound value.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Sql(String),
    Param(usize),
}

/// A value the condition binds.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Text(String),
    Float(f64),
    Int(i64),
    Bool(bool),
    Date(NaiveDate),
    Timestamp(NaiveDateTime),
    Timestamptz(DateTime<Utc>),
}

impl Value {
    /// The cast after its placeholder, which also gives an unnamed
    /// statement the parameter's type ([`crate::db::statement::param_types`]).
    fn cast(&self) -> &'static str {
        match self {
            Value::Text(_) => "text",
            Value::Float(_) => "float8",
            Value::Int(_) => "int8",
            Value::Bool(_) => "bool",
            Value::Date(_) => "date",
            Value::Timestamp(_) => "timestamp",
            Value::Timestamptz(_) => "timestamptz",
        }
    }

    fn boxed(&self) -> Box<dyn ToSql + Sync + Send> {
        match self.clone() {
            Value::Text(v) => Box::new(v),
            Value::Float(v) => Box::new(v),
            Value::Int(v) => Box::new(v),
            Value::Bool(v) => Box::new(v),
            Value::Date(v) => Box::new(v),
            Value::Timestamp(v) => Box::new(v),
            Value::Timestamptz(v) => Box::new(v),
        }
    }
}

impl Filter {
    /// Parse `given` in `lang` and check it against `coll`: every property a
    /// queryable, every operand of a type its operator takes. Geometries
    /// are in `crs` (`filter-crs`, CRS84 unless given).
    pub fn parse(
        coll: &Collection,
        given: &str,
        lang: Lang,
        crs: &Crs,
        crs_given: Option<String>,
    ) -> Result<Filter, Error> {
        let expr = match lang {
            Lang::Text => cql2::parse_text(given).map_err(|e| bad("filter", e.to_string()))?,
            Lang::Json => cql2::parse_json(given).map_err(|e| bad("filter", e.to_string()))?,
        };
        let mut c = Compiler {
            coll,
            crs,
            pieces: Vec::new(),
            values: Vec::new(),
        };
        c.predicate(&expr)?;
        Ok(Filter {
            given: given.to_owned(),
            lang,
            crs: crs_given,
            condition: c.pieces,
            values: c.values,
        })
    }

    /// The condition, its first value bound as `$first`; its values, one
    /// per placeholder in the order they appear (a value written twice, as
    /// an end of a span is, is bound twice; one the condition does not
    /// write is not bound, since PostgreSQL could not type it).
    pub fn sql(&self, first: usize) -> (String, Vec<Box<dyn ToSql + Sync + Send>>) {
        let mut sql = String::new();
        let mut values = Vec::new();
        for piece in &self.condition {
            match piece {
                Piece::Sql(text) => sql.push_str(text),
                Piece::Param(n) => {
                    let value = &self.values[*n];
                    sql.push_str(&format!("${}::{}", first + values.len(), value.cast()));
                    values.push(value.boxed());
                }
            }
        }
        (sql, values)
    }
}

/// 400 for query parameter `param`.
fn bad(param: &str, detail: impl Into<String>) -> Error {
    Error::new(
        ErrorKind::InvalidParameter,
        format!("query parameter '{param}': {}", detail.into()),
    )
}

/// 400 for the part `at` of the filter.
fn refused(at: &Expr, why: impl Into<String>) -> Error {
    let text = at
        .to_text()
        .unwrap_or_else(|_| serde_json::to_string(at).unwrap_or_default());
    bad("filter", format!("at `{text}`: {}", why.into()))
}

/// What an operand is, for the checks CQL2 makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Number,
    Bool,
    Date,
    Instant,
    Geometry,
    /// An array column's value.
    Array,
    /// A NULL literal: of any type.
    Null,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Text => "a string",
            Kind::Number => "a number",
            Kind::Bool => "a boolean",
            Kind::Date => "a date",
            Kind::Instant => "a timestamp",
            Kind::Geometry => "a geometry",
            Kind::Array => "an array",
            Kind::Null => "null",
        }
    }

    /// Whether values of `self` and `other` compare.
    fn compares_with(self, other: Kind) -> bool {
        self == other || self == Kind::Null || other == Kind::Null
    }
}

/// The queryable kind of column `ci`, if it is one.
fn column_kind(coll: &Collection, ci: usize) -> Option<Kind> {
    match &coll.columns[ci].ty {
        ColumnType::Geometry(_) if ci == coll.geometry => Some(Kind::Geometry),
        ColumnType::Scalar(t) => scalar_kind(*t),
        ColumnType::Array(t) if array_base(*t).is_some() => Some(Kind::Array),
        _ => None,
    }
}

/// The kind of values of type `t`, if a filter compares them.
fn scalar_kind(t: ScalarType) -> Option<Kind> {
    Some(match t {
        ScalarType::Text { .. } | ScalarType::Uuid => Kind::Text,
        ScalarType::Int2
        | ScalarType::Int4
        | ScalarType::Int8
        | ScalarType::Float4
        | ScalarType::Float8
        | ScalarType::Numeric => Kind::Number,
        ScalarType::Bool => Kind::Bool,
        ScalarType::Date => Kind::Date,
        ScalarType::Timestamp | ScalarType::Timestamptz => Kind::Instant,
        ScalarType::Json | ScalarType::Jsonb => return None,
    })
}

/// The array type that values of `t` compare as in the array functions:
/// strings as `text`, whatever their column's length.
fn array_base(t: ScalarType) -> Option<&'static str> {
    Some(match t {
        ScalarType::Text { .. } | ScalarType::Uuid => "text[]",
        ScalarType::Int2 | ScalarType::Int4 | ScalarType::Int8 => "int8[]",
        ScalarType::Float4 | ScalarType::Float8 | ScalarType::Numeric => "numeric[]",
        ScalarType::Bool => "bool[]",
        ScalarType::Date => "date[]",
        ScalarType::Timestamp => "timestamp[]",
        ScalarType::Timestamptz => "timestamptz[]",
        ScalarType::Json | ScalarType::Jsonb => return None,
    })
}

/// The columns a filter may name (`/queryables`): the published
/// properties of simple types, and the feature geometry.
pub fn queryables(coll: &Collection) -> impl Iterator<Item = usize> + '_ {
    super::sql::property_columns(coll)
        .chain(std::iter::once(coll.geometry))
        .filter(|&ci| column_kind(coll, ci).is_some())
}

/// An operand, not yet written: a literal waits for the column it is
/// compared with, whose type it is then bound as (so that an index on
/// the column applies).
#[derive(Debug, Clone)]
enum Operand {
    Column(usize, Kind),
    Literal(Literal),
    /// SQL already written, of this kind.
    Written(Vec<Piece>, Kind),
}

#[derive(Debug, Clone)]
enum Literal {
    Text(String),
    Number(f64),
    Bool(bool),
    Date(NaiveDate),
    Instant(DateTime<Utc>),
    Null,
}

impl Literal {
    fn kind(&self) -> Kind {
        match self {
            Literal::Text(_) => Kind::Text,
            Literal::Number(_) => Kind::Number,
            Literal::Bool(_) => Kind::Bool,
            Literal::Date(_) => Kind::Date,
            Literal::Instant(_) => Kind::Instant,
            Literal::Null => Kind::Null,
        }
    }
}

impl Operand {
    fn kind(&self) -> Kind {
        match self {
            Operand::Column(_, k) | Operand::Written(_, k) => *k,
            Operand::Literal(l) => l.kind(),
        }
    }
}

/// The bounds of a temporal operand: its first and last instant as SQL
/// (`timestamptz`, UTC for columns without a time zone).
type Span = (Vec<Piece>, Vec<Piece>);

struct Compiler<'a> {
    coll: &'a Collection,
    crs: &'a Crs,
    pieces: Vec<Piece>,
    values: Vec<Value>,
}

impl Compiler<'_> {
    fn sql(&mut self, text: &str) {
        self.pieces.push(Piece::Sql(text.to_owned()));
    }

    fn bind(&mut self, value: Value) {
        self.pieces.push(Piece::Param(self.values.len()));
        self.values.push(value);
    }

    /// Write `pieces` (made by [`Compiler::capture`]).
    fn emit(&mut self, pieces: Vec<Piece>) {
        self.pieces.extend(pieces);
    }

    /// What `f` writes, taken out rather than written.
    fn capture(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<(), Error>,
    ) -> Result<Vec<Piece>, Error> {
        let before = std::mem::take(&mut self.pieces);
        let done = f(self);
        let captured = std::mem::replace(&mut self.pieces, before);
        done.map(|()| captured)
    }

    /// A boolean expression.
    fn predicate(&mut self, e: &Expr) -> Result<(), Error> {
        match e {
            Expr::Bool(b) => {
                self.sql(if *b { "true" } else { "false" });
                Ok(())
            }
            Expr::Property { .. } => {
                let operand = self.operand(e)?;
                if operand.kind() != Kind::Bool {
                    return Err(refused(
                        e,
                        format!("{} is not a condition", operand.kind().name()),
                    ));
                }
                self.write(operand, None);
                Ok(())
            }
            Expr::Operation { op, args } => self.operation(e, op, args),
            _ => Err(refused(e, "not a condition")),
        }
    }

    fn operation(&mut self, e: &Expr, op: &str, args: &[Box<Expr>]) -> Result<(), Error> {
        match (op, args) {
            ("and" | "or", [_, _, ..]) => {
                self.sql("(");
                for (i, arg) in args.iter().enumerate() {
                    if i > 0 {
                        self.sql(if op == "and" { " AND " } else { " OR " });
                    }
                    self.predicate(arg)?;
                }
                self.sql(")");
                Ok(())
            }
            ("not", [arg]) => {
                self.sql("(NOT ");
                self.predicate(arg)?;
                self.sql(")");
                Ok(())
            }
            ("=" | "<>" | "<" | "<=" | ">" | ">=", [a, b]) => {
                let (a, b) = (self.operand(a)?, self.operand(b)?);
                let a = Self::coerced(a, &b);
                let b = Self::coerced(b, &a);
                self.compare(e, op, a, b)
            }
            ("like", [a, b]) => {
                let (a, b) = (self.operand(a)?, self.operand(b)?);
                for side in [&a, &b] {
                    if !matches!(side.kind(), Kind::Text | Kind::Null) {
                        return Err(refused(
                            e,
                            format!("LIKE takes strings, not {}", side.kind().name()),
                        ));
                    }
                }
                self.sql("(");
                self.write(a, None);
                self.sql(" LIKE ");
                self.write(b, None);
                self.sql(")");
                Ok(())
            }
            ("between", [a, low, high]) => {
                let a = self.operand(a)?;
                let low = Self::coerced(self.operand(low)?, &a);
                let high = Self::coerced(self.operand(high)?, &a);
                if !matches!(
                    a.kind(),
                    Kind::Number | Kind::Text | Kind::Date | Kind::Instant
                ) {
                    return Err(refused(
                        e,
                        format!("BETWEEN does not order {}", a.kind().name()),
                    ));
                }
                let column = self.column_of(&a);
                for bound in [&low, &high] {
                    if !a.kind().compares_with(bound.kind()) {
                        return Err(mismatch(e, &a, bound));
                    }
                }
                let collate = ordered_collation(a.kind());
                self.sql("(");
                self.write(a, None);
                self.sql(collate);
                self.sql(" BETWEEN ");
                self.write(low, column);
                self.sql(collate);
                self.sql(" AND ");
                self.write(high, column);
                self.sql(collate);
                self.sql(")");
                Ok(())
            }
            ("in", [a, list]) => {
                let Expr::Array(items) = list.as_ref() else {
                    return Err(refused(e, "IN takes a list"));
                };
                if items.is_empty() {
                    return Err(refused(e, "IN takes a list of at least one value"));
                }
                let a = self.operand(a)?;
                let column = self.column_of(&a);
                let items = items
                    .iter()
                    .map(|item| self.operand(item).map(|i| Self::coerced(i, &a)))
                    .collect::<Result<Vec<_>, _>>()?;
                if let Some(item) = items.iter().find(|i| !a.kind().compares_with(i.kind())) {
                    return Err(mismatch(e, &a, item));
                }
                self.sql("(");
                self.write(a, None);
                self.sql(" IN (");
                for (i, item) in items.into_iter().enumerate() {
                    if i > 0 {
                        self.sql(", ");
                    }
                    self.write(item, column);
                }
                self.sql("))");
                Ok(())
            }
            ("isNull", [a]) => {
                let a = self.operand(a)?;
                self.sql("(");
                self.write(a, None);
                self.sql(" IS NULL)");
                Ok(())
            }
            (array, [a, b]) if array.starts_with("a_") => self.array(e, array, a, b),
            (spatial, [a, b]) if spatial.starts_with("s_") => self.spatial(e, spatial, a, b),
            (temporal, [a, b]) if temporal.starts_with("t_") => self.temporal(e, temporal, a, b),
            _ => Err(refused(
                e,
                format!(
                    "'{op}' with {} arguments is not a condition this service runs",
                    args.len()
                ),
            )),
        }
    }

    /// `a op b`, strings in code-point order.
    fn compare(&mut self, e: &Expr, op: &str, a: Operand, b: Operand) -> Result<(), Error> {
        if !a.kind().compares_with(b.kind()) {
            return Err(mismatch(e, &a, &b));
        }
        if a.kind() == Kind::Geometry || b.kind() == Kind::Geometry {
            return Err(refused(
                e,
                "geometries are compared by spatial functions (S_EQUALS, …)",
            ));
        }
        if matches!(a.kind(), Kind::Bool) && !matches!(op, "=" | "<>") {
            return Err(refused(e, "booleans are not ordered"));
        }
        let collate = match op {
            "=" | "<>" => "",
            _ => ordered_collation(a.kind()),
        };
        let (ca, cb) = (self.column_of(&a), self.column_of(&b));
        self.sql("(");
        self.write(a, cb);
        self.sql(collate);
        self.sql(&format!(" {op} "));
        self.write(b, ca);
        self.sql(collate);
        self.sql(")");
        Ok(())
    }

    /// A string literal compared with a date or a timestamp, read as one
    /// when it is one (clients write `d = '2024-01-31'` for `DATE('…')`).
    fn coerced(operand: Operand, other: &Operand) -> Operand {
        match (&operand, other.kind()) {
            (Operand::Literal(Literal::Text(s)), Kind::Date) => match parse_date(s) {
                Some(d) => Operand::Literal(Literal::Date(d)),
                None => operand,
            },
            (Operand::Literal(Literal::Text(s)), Kind::Instant) => match parse_instant(s) {
                Some(t) => Operand::Literal(Literal::Instant(t)),
                None => operand,
            },
            _ => operand,
        }
    }

    /// The column an operand is, for binding a literal compared with it.
    fn column_of(&self, operand: &Operand) -> Option<usize> {
        match operand {
            Operand::Column(ci, _) => Some(*ci),
            _ => None,
        }
    }

    /// Write an operand; a literal bound as column `like`'s type.
    fn write(&mut self, operand: Operand, like: Option<usize>) {
        match operand {
            Operand::Column(ci, _) => {
                let c = col(self.coll, ci);
                // Enums and uuids compare with strings as text.
                match &self.coll.columns[ci].ty {
                    ColumnType::Scalar(ScalarType::Uuid) => self.sql(&format!("{c}::text")),
                    ColumnType::Scalar(ScalarType::Text { .. })
                        if self.coll.columns[ci].enum_type =>
                    {
                        self.sql(&format!("{c}::text"))
                    }
                    _ => self.sql(&c),
                }
            }
            Operand::Written(pieces, _) => self.emit(pieces),
            Operand::Literal(l) => {
                let ty = like.and_then(|ci| match &self.coll.columns[ci].ty {
                    ColumnType::Scalar(t) => Some(*t),
                    _ => None,
                });
                self.literal(l, ty);
            }
        }
    }

    /// Bind a literal, as a value of `ty` where it is one.
    fn literal(&mut self, l: Literal, ty: Option<ScalarType>) {
        match (l, ty) {
            (Literal::Null, _) => self.sql("NULL"),
            (Literal::Number(v), Some(ScalarType::Int2 | ScalarType::Int4 | ScalarType::Int8))
                if v.fract() == 0.0 && v.abs() < 9.0e18 =>
            {
                self.bind(Value::Int(v as i64))
            }
            (Literal::Number(v), Some(ScalarType::Numeric)) => {
                self.bind(Value::Float(v));
                self.sql("::numeric");
            }
            (Literal::Number(v), _) => self.bind(Value::Float(v)),
            (Literal::Text(v), _) => self.bind(Value::Text(v)),
            (Literal::Bool(v), _) => self.bind(Value::Bool(v)),
            (Literal::Date(v), _) => self.bind(Value::Date(v)),
            (Literal::Instant(v), Some(ScalarType::Timestamp)) => {
                self.bind(Value::Timestamp(v.naive_utc()))
            }
            (Literal::Instant(v), _) => self.bind(Value::Timestamptz(v)),
        }
    }

    /// An operand: a queryable, a literal, or a function of them.
    fn operand(&mut self, e: &Expr) -> Result<Operand, Error> {
        Ok(match e {
            Expr::Property { property } => {
                let ci = self.queryable(e, property)?;
                Operand::Column(ci, column_kind(self.coll, ci).expect("a queryable"))
            }
            Expr::Literal(s) => Operand::Literal(Literal::Text(s.clone())),
            Expr::Float(v) => Operand::Literal(Literal::Number(*v)),
            Expr::Bool(b) => Operand::Literal(Literal::Bool(*b)),
            Expr::Null => Operand::Literal(Literal::Null),
            Expr::Date { date } => Operand::Literal(Literal::Date(date_of(e, date)?)),
            Expr::Timestamp { timestamp } => {
                Operand::Literal(Literal::Instant(instant_of(e, timestamp)?))
            }
            Expr::Geometry(_) | Expr::BBox { .. } => {
                let pieces = self.capture(|c| c.geometry_literal(e))?;
                Operand::Written(pieces, Kind::Geometry)
            }
            Expr::Operation { op, args } => match (op.as_str(), &args[..]) {
                ("casei" | "accenti", [arg]) => {
                    let arg = self.operand(arg)?;
                    if !matches!(arg.kind(), Kind::Text | Kind::Null) {
                        return Err(refused(
                            e,
                            format!(
                                "{} takes a string, not {}",
                                op.to_uppercase(),
                                arg.kind().name()
                            ),
                        ));
                    }
                    // CASEI as PostgreSQL's lower; ACCENTI as the string
                    // decomposed (NFD) without its combining marks, with no
                    // extension needed (`unaccent` would be one).
                    let (head, tail) = match op.as_str() {
                        "casei" => ("lower(", ")"),
                        _ => ("regexp_replace(normalize(", ", NFD), '[\\u0300-\\u036f\\u1ab0-\\u1aff\\u1dc0-\\u1dff\\u20d0-\\u20ff\\ufe20-\\ufe2f]', '', 'g')"),
                    };
                    let pieces = self.capture(|c| {
                        c.sql(head);
                        c.write(arg, None);
                        c.sql(tail);
                        Ok(())
                    })?;
                    Operand::Written(pieces, Kind::Text)
                }
                ("div" | "^", [_, _]) | ("+" | "-" | "*" | "/" | "%", [_, _, ..]) => {
                    let operands = args
                        .iter()
                        .map(|a| self.operand(a))
                        .collect::<Result<Vec<_>, _>>()?;
                    if let Some(o) = operands
                        .iter()
                        .find(|o| !matches!(o.kind(), Kind::Number | Kind::Null))
                    {
                        return Err(refused(
                            e,
                            format!("arithmetic takes numbers, not {}", o.kind().name()),
                        ));
                    }
                    let pieces = self.capture(|c| {
                        c.arithmetic(op, operands);
                        Ok(())
                    })?;
                    Operand::Written(pieces, Kind::Number)
                }
                _ => {
                    return Err(refused(
                        e,
                        format!("'{op}' is not a function this service supports"),
                    ))
                }
            },
            Expr::Array(_) => {
                return Err(refused(
                    e,
                    "a list is taken only by IN and the array functions",
                ))
            }
            Expr::Interval { .. } => {
                return Err(refused(
                    e,
                    "an interval is taken only by temporal functions",
                ))
            }
        })
    }

    /// Arithmetic on numbers, as `numeric`: `/` does not truncate, `div` does.
    fn arithmetic(&mut self, op: &str, operands: Vec<Operand>) {
        let function = match op {
            "div" => Some("div("),
            "^" => Some("power("),
            _ => None,
        };
        match function {
            Some(f) => self.sql(f),
            None => self.sql(&"(".repeat(operands.len() - 1)),
        }
        for (i, operand) in operands.into_iter().enumerate() {
            match (i, function) {
                (0, _) => {}
                (_, Some(_)) => self.sql(", "),
                (_, None) => self.sql(&format!(" {op} ")),
            }
            // A divisor of zero makes the result unknown (NULL), as a NULL
            // operand does, rather than fail the whole query.
            let divisor = i > 0 && matches!(op, "/" | "%" | "div");
            self.sql(if divisor { "NULLIF((" } else { "(" });
            self.write(operand, None);
            self.sql(if divisor {
                ")::numeric, 0)"
            } else {
                ")::numeric"
            });
            if i > 0 && function.is_none() {
                self.sql(")");
            }
        }
        if function.is_some() {
            self.sql(")");
        }
    }

    /// The column a property names, if a filter may name it.
    fn queryable(&self, e: &Expr, name: &str) -> Result<usize, Error> {
        match named_time(self.coll, name) {
            Some(Temporal { start, end: None, .. }) => return Ok(start),
            Some(Temporal { .. }) => {
                return Err(refused(
                    e,
                    format!("'{name}' is an interval here: compare it with the temporal functions (T_INTERSECTS, …)"),
                ))
            }
            None => {}
        }
        let ci = self
            .coll
            .column_index(name)
            .or_else(|| (name == "geometry").then_some(self.coll.geometry));
        match ci {
            Some(ci) if queryables(self.coll).any(|q| q == ci) => Ok(ci),
            _ => {
                let names: Vec<&str> = queryables(self.coll)
                    .map(|ci| self.coll.columns[ci].name.as_str())
                    .collect();
                Err(refused(
                    e,
                    format!(
                        "'{name}' is not a queryable of this collection (its queryables: {})",
                        names.join(", ")
                    ),
                ))
            }
        }
    }

    /// A geometry or BBOX literal in the filter's CRS, as a geometry in
    /// the column's SRID.
    fn geometry_literal(&mut self, e: &Expr) -> Result<(), Error> {
        let srid = self.crs.srid;
        let gc = self.coll.geometry_column();
        let to = match gc.srid {
            0 => srid,
            s => s,
        };
        // A box's numbers are read in the CRS's axis order here, and made
        // x first; a geometry's coordinates are flipped by PostGIS.
        let flip = self.crs.lat_first && matches!(e, Expr::Geometry(_));
        let (head, tail) = match (to == srid, flip) {
            (true, false) => ("(".to_owned(), ")".to_owned()),
            (true, true) => ("ST_FlipCoordinates(".to_owned(), ")".to_owned()),
            (false, false) => ("ST_Transform(".to_owned(), format!(", {to})")),
            (false, true) => (
                "ST_Transform(ST_FlipCoordinates(".to_owned(),
                format!("), {to})"),
            ),
        };
        self.sql(&head);
        match e {
            Expr::Geometry(g) => {
                let geojson = serde_json::to_value(g).map_err(|err| refused(e, err.to_string()))?;
                if let Some(why) = malformed(&geojson) {
                    return Err(refused(e, why));
                }
                let wkt = g.to_wkt().map_err(|err| refused(e, err.to_string()))?;
                self.sql("ST_GeomFromText(");
                self.bind(Value::Text(wkt));
                self.sql(&format!(", {srid})"));
            }
            Expr::BBox { bbox } => {
                let numbers = bbox
                    .iter()
                    .map(|v| match v.as_ref() {
                        Expr::Float(v) => Ok(*v),
                        _ => Err(refused(e, "a BBOX takes numbers")),
                    })
                    .collect::<Result<Vec<f64>, Error>>()?;
                let [x0, y0, x1, y1] = match numbers[..] {
                    [a, b, c, d] => [a, b, c, d],
                    [a, b, _, d, e2, _] => [a, b, d, e2],
                    _ => return Err(refused(e, "a BBOX has 4 or 6 numbers")),
                };
                let [west, south, east, north] = match self.crs.lat_first {
                    true => [y0, x0, y1, x1],
                    false => [x0, y0, x1, y1],
                };
                if south > north {
                    return Err(refused(
                        e,
                        "the BBOX's south edge is north of its north edge",
                    ));
                }
                // West of east in longitudes crosses the antimeridian: both sides.
                let parts = match west > east && srid == WGS84_SRID {
                    true => vec![[west, south, 180.0, north], [-180.0, south, east, north]],
                    false => vec![[west, south, east, north]],
                };
                let collect = parts.len() > 1;
                if collect {
                    self.sql("ST_Collect(");
                }
                for (i, part) in parts.into_iter().enumerate() {
                    if i > 0 {
                        self.sql(", ");
                    }
                    self.sql("ST_MakeEnvelope(");
                    for (j, v) in part.into_iter().enumerate() {
                        if j > 0 {
                            self.sql(", ");
                        }
                        self.bind(Value::Float(v));
                    }
                    self.sql(&format!(", {srid})"));
                }
                if collect {
                    self.sql(")");
                }
            }
            _ => unreachable!("only geometry literals"),
        }
        self.sql(&tail);
        Ok(())
    }

    /// `S_INTERSECTS(a, b)` and the other spatial functions, by PostGIS's.
    fn spatial(&mut self, e: &Expr, op: &str, a: &Expr, b: &Expr) -> Result<(), Error> {
        let function = match op {
            "s_intersects" => "ST_Intersects",
            "s_disjoint" => "ST_Disjoint",
            "s_equals" => "ST_Equals",
            "s_touches" => "ST_Touches",
            "s_within" => "ST_Within",
            "s_contains" => "ST_Contains",
            "s_crosses" => "ST_Crosses",
            "s_overlaps" => "ST_Overlaps",
            _ => return Err(refused(e, format!("'{op}' is not a spatial function"))),
        };
        let (a, b) = (self.operand(a)?, self.operand(b)?);
        for side in [&a, &b] {
            if side.kind() != Kind::Geometry {
                return Err(refused(
                    e,
                    format!(
                        "{} takes geometries, not {}",
                        op.to_uppercase(),
                        side.kind().name()
                    ),
                ));
            }
        }
        let gc = self.coll.geometry_column();
        // geography has its own ST_Intersects (indexed); the other
        // functions are planar, on its geometry.
        let geography_too = gc.geography && function == "ST_Intersects";
        self.sql(&format!("{function}("));
        for (i, side) in [a, b].into_iter().enumerate() {
            if i > 0 {
                self.sql(", ");
            }
            match side {
                Operand::Column(ci, _) if gc.geography && !geography_too => {
                    self.sql(&format!("{}::geometry", col(self.coll, ci)))
                }
                // An unconstrained column is taken to be in the filter's CRS.
                Operand::Column(ci, _) if !gc.geography && gc.srid == 0 => self.sql(&format!(
                    "ST_SetSRID({}, {})",
                    col(self.coll, ci),
                    self.crs.srid
                )),
                Operand::Written(pieces, _) if geography_too => {
                    self.sql("(");
                    self.emit(pieces);
                    self.sql(")::geography");
                }
                other => self.write(other, None),
            }
        }
        self.sql(")");
        Ok(())
    }

    /// `A_EQUALS(a, b)`, `A_CONTAINS`, `A_CONTAINEDBY` and `A_OVERLAPS`: each
    /// side an array column or a list of literals, compared as arrays of
    /// the column's values (PostgreSQL's `=`, `@>`, `<@` and `&&`).
    fn array(&mut self, e: &Expr, op: &str, a: &Expr, b: &Expr) -> Result<(), Error> {
        let operator = match op {
            "a_equals" => " = ",
            "a_contains" => " @> ",
            "a_containedBy" => " <@ ",
            "a_overlaps" => " && ",
            _ => return Err(refused(e, format!("'{op}' is not an array function"))),
        };
        // The column's values say what a list's literals are.
        let element = [a, b].into_iter().find_map(|side| match side {
            Expr::Property { property } => match self
                .queryable(side, property)
                .map(|ci| &self.coll.columns[ci].ty)
            {
                Ok(ColumnType::Array(t)) => Some(*t),
                _ => None,
            },
            _ => None,
        });
        let (a, b) = (self.array_side(a, element)?, self.array_side(b, element)?);
        self.sql("(");
        self.emit(a);
        self.sql(operator);
        self.emit(b);
        self.sql(")");
        Ok(())
    }

    /// One side of an array function, as an array of its base type
    /// ([`array_base`]): an array column, or a list of literals bound as
    /// values of `element` (else as their own kind).
    fn array_side(&mut self, e: &Expr, element: Option<ScalarType>) -> Result<Vec<Piece>, Error> {
        let given = match e {
            Expr::Property { property } => {
                let ci = self.queryable(e, property)?;
                match &self.coll.columns[ci].ty {
                    ColumnType::Array(t) => {
                        let base = array_base(*t).expect("a queryable array compares");
                        return self.capture(|c| {
                            c.sql(&format!("{}::{base}", col(c.coll, ci)));
                            Ok(())
                        });
                    }
                    _ => return Err(refused(e, format!("'{property}' is not an array"))),
                }
            }
            Expr::Array(items) => items,
            _ => return Err(refused(e, "the array functions take arrays and lists")),
        };
        let literals = given
            .iter()
            .map(|item| match self.operand(item)? {
                Operand::Literal(l) => Ok(l),
                _ => Err(refused(item, "a list of an array function holds literals")),
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let element = element.or_else(|| {
            literals.first().map(|l| match l {
                Literal::Number(_) => ScalarType::Numeric,
                Literal::Bool(_) => ScalarType::Bool,
                Literal::Date(_) => ScalarType::Date,
                Literal::Instant(_) => ScalarType::Timestamptz,
                Literal::Text(_) | Literal::Null => ScalarType::Text { max_chars: None },
            })
        });
        let element = element.unwrap_or(ScalarType::Text { max_chars: None });
        let kind = scalar_kind(element).expect("an array column's values compare");
        // A string may say a date or a timestamp, as in comparisons.
        let takes = |l: &Literal| {
            kind.compares_with(l.kind())
                || (matches!(l, Literal::Text(_)) && matches!(kind, Kind::Date | Kind::Instant))
        };
        if let Some(l) = literals.iter().find(|l| !takes(l)) {
            let message = format!(
                "{} is compared with an array of {}s",
                l.kind().name(),
                &kind.name()[2..]
            );
            return Err(refused(e, message));
        }
        let base = array_base(element).expect("an array column's values compare");
        self.capture(|c| {
            c.sql("ARRAY[");
            for (i, l) in literals.into_iter().enumerate() {
                if i > 0 {
                    c.sql(", ");
                }
                c.literal(l, Some(element));
            }
            c.sql(&format!("]::{base}"));
            Ok(())
        })
    }

    /// `T_AFTER(a, b)` and the other temporal functions, on the first and
    /// last instants of each side (CQL2's table of temporal relations).
    fn temporal(&mut self, e: &Expr, op: &str, a: &Expr, b: &Expr) -> Result<(), Error> {
        let (a, b) = (self.span(a)?, self.span(b)?);
        let ((a0, a1), (b0, b1)) = (a, b);
        use Cmp::*;
        // Each relation holds when all its terms do; disjoint, when one does.
        let (terms, joint): (Vec<Term<'_>>, &str) = match op {
            "t_after" => (vec![(&a0, Gt, &b1)], " AND "),
            "t_before" => (vec![(&a1, Lt, &b0)], " AND "),
            "t_contains" => (vec![(&a0, Lt, &b0), (&a1, Gt, &b1)], " AND "),
            "t_during" => (vec![(&a0, Gt, &b0), (&a1, Lt, &b1)], " AND "),
            "t_equals" => (vec![(&a0, Eq, &b0), (&a1, Eq, &b1)], " AND "),
            "t_finishedBy" => (vec![(&a0, Lt, &b0), (&a1, Eq, &b1)], " AND "),
            "t_finishes" => (vec![(&a0, Gt, &b0), (&a1, Eq, &b1)], " AND "),
            "t_intersects" => (vec![(&a0, Le, &b1), (&a1, Ge, &b0)], " AND "),
            "t_meets" => (vec![(&a1, Eq, &b0)], " AND "),
            "t_metBy" => (vec![(&a0, Eq, &b1)], " AND "),
            "t_overlappedBy" => (
                vec![(&a0, Gt, &b0), (&a0, Lt, &b1), (&a1, Gt, &b1)],
                " AND ",
            ),
            "t_overlaps" => (
                vec![(&a0, Lt, &b0), (&a1, Gt, &b0), (&a1, Lt, &b1)],
                " AND ",
            ),
            "t_startedBy" => (vec![(&a0, Eq, &b0), (&a1, Gt, &b1)], " AND "),
            "t_starts" => (vec![(&a0, Eq, &b0), (&a1, Lt, &b1)], " AND "),
            // Not intersecting: after or before.
            "t_disjoint" => (vec![(&a0, Gt, &b1), (&a1, Lt, &b0)], " OR "),
            _ => return Err(refused(e, format!("'{op}' is not a temporal function"))),
        };
        self.sql("(");
        for (i, (x, cmp, y)) in terms.into_iter().enumerate() {
            if i > 0 {
                self.sql(joint);
            }
            self.term(x, cmp, y);
        }
        self.sql(")");
        Ok(())
    }

    fn term(&mut self, x: &[Piece], cmp: Cmp, y: &[Piece]) {
        self.sql("(");
        self.emit(x.to_vec());
        self.sql(cmp.sql());
        self.emit(y.to_vec());
        self.sql(")");
    }

    /// The first and last instant of a temporal operand, as `timestamptz`.
    fn span(&mut self, e: &Expr) -> Result<Span, Error> {
        match e {
            Expr::Interval { interval } => match &interval[..] {
                [start, end] => Ok((self.bound(e, start, true)?, self.bound(e, end, false)?)),
                _ => Err(refused(e, "an interval has two ends")),
            },
            // A date spans its day; an instant is one.
            _ => Ok((self.bound(e, e, true)?, self.bound(e, e, false)?)),
        }
    }

    /// One end of a span: an instant, a date (its first or last instant,
    /// as `first`), a temporal column, or `..` (open).
    fn bound(&mut self, at: &Expr, e: &Expr, first: bool) -> Result<Vec<Piece>, Error> {
        self.capture(|c| {
            match e {
                Expr::Literal(s) if s == ".." => c.sql(if first {
                    "'-infinity'::timestamptz"
                } else {
                    "'infinity'::timestamptz"
                }),
                Expr::Literal(s) => match (parse_instant(s), parse_date(s)) {
                    (Some(t), _) => c.bind(Value::Timestamptz(t)),
                    (None, Some(d)) => c.day_end(d, first),
                    (None, None) => return Err(refused(at, format!("'{s}' is not an instant"))),
                },
                Expr::Timestamp { timestamp } => {
                    c.bind(Value::Timestamptz(instant_of(e, timestamp)?))
                }
                Expr::Date { date } => {
                    let d = date_of(e, date)?;
                    c.day_end(d, first)
                }
                Expr::Property { property } => match named_time(c.coll, property) {
                    // An interval's NULL end is open (JSON-FG's ".."); an
                    // instant's NULL is no time, which matches nothing.
                    Some(Temporal {
                        start,
                        end: Some(end),
                        ..
                    }) => {
                        let (ci, open) = if first {
                            (start, "-infinity")
                        } else {
                            (end, "infinity")
                        };
                        let column = instant(c.coll, ci, first).expect("a time column is temporal");
                        c.sql(&format!("COALESCE({column}, '{open}'::timestamptz)"))
                    }
                    Some(Temporal {
                        start, end: None, ..
                    }) => c.sql(&instant(c.coll, start, first).expect("a time column is temporal")),
                    None => {
                        let ci = c.queryable(e, property)?;
                        match instant(c.coll, ci, first) {
                            Some(column) => c.sql(&column),
                            None => {
                                return Err(refused(
                                    e,
                                    format!("'{property}' is not a date or a timestamp"),
                                ))
                            }
                        }
                    }
                },
                _ => {
                    return Err(refused(
                        at,
                        "temporal functions take dates, timestamps and intervals",
                    ))
                }
            }
            Ok(())
        })
    }

    /// The first (or last) instant of day `d`, UTC.
    fn day_end(&mut self, d: NaiveDate, first: bool) {
        self.sql("(");
        self.bind(Value::Date(d));
        match first {
            true => self.sql("::timestamp AT TIME ZONE 'UTC')"),
            false => self.sql(" + 1)::timestamp AT TIME ZONE 'UTC' - interval '1 microsecond'"),
        }
    }
}

/// Column `ci` as its first (or last) instant, `timestamptz`: a date spans
/// its day, a `timestamp` is UTC. `None` for a column of another type.
fn instant(coll: &Collection, ci: usize, first: bool) -> Option<String> {
    let column = col(coll, ci);
    Some(match &coll.columns[ci].ty {
        ColumnType::Scalar(ScalarType::Timestamptz) => column,
        ColumnType::Scalar(ScalarType::Timestamp) => format!("({column} AT TIME ZONE 'UTC')"),
        ColumnType::Scalar(ScalarType::Date) if first => {
            format!("({column}::timestamp AT TIME ZONE 'UTC')")
        }
        ColumnType::Scalar(ScalarType::Date) => {
            format!("(({column} + 1)::timestamp AT TIME ZONE 'UTC' - interval '1 microsecond')")
        }
        _ => return None,
    })
}

/// One comparison of a temporal relation: an end of one side with an end
/// of the other.
type Term<'a> = (&'a Vec<Piece>, Cmp, &'a Vec<Piece>);

/// Why a geometry literal (as GeoJSON) is not one PostGIS takes, if it is not:
/// a line of fewer than two points, a ring of fewer than four or not closed.
fn malformed(geometry: &serde_json::Value) -> Option<&'static str> {
    let kind = geometry["type"].as_str().unwrap_or("");
    let coordinates = &geometry["coordinates"];
    let points = |v: &serde_json::Value| v.as_array().map_or(0, Vec::len);
    let line = |v: &serde_json::Value| points(v) < 2;
    let ring = |v: &serde_json::Value| {
        let ring = v.as_array();
        ring.is_none_or(|r| r.len() < 4 || r.first() != r.last())
    };
    let rings_bad = |v: &serde_json::Value| v.as_array().is_none_or(|rs| rs.iter().any(ring));
    let each = |v: &serde_json::Value, bad: &dyn Fn(&serde_json::Value) -> bool| {
        v.as_array().is_none_or(|parts| parts.iter().any(bad))
    };
    match kind {
        "LineString" if line(coordinates) => Some("a LINESTRING has at least two points"),
        "MultiLineString" if each(coordinates, &line) => {
            Some("each line of a MULTILINESTRING has at least two points")
        }
        "Polygon" if rings_bad(coordinates) => {
            Some("a POLYGON's rings are closed (the last point is the first) and have at least four points")
        }
        "MultiPolygon" if each(coordinates, &rings_bad) => {
            Some("a MULTIPOLYGON's rings are closed (the last point is the first) and have at least four points")
        }
        "GeometryCollection" => geometry["geometries"]
            .as_array()
            .and_then(|parts| parts.iter().find_map(malformed)),
        _ => None,
    }
}

/// A comparison between instants.
#[derive(Clone, Copy)]
enum Cmp {
    Lt,
    Le,
    Eq,
    Ge,
    Gt,
}

impl Cmp {
    fn sql(self) -> &'static str {
        match self {
            Cmp::Lt => " < ",
            Cmp::Le => " <= ",
            Cmp::Eq => " = ",
            Cmp::Ge => " >= ",
            Cmp::Gt => " > ",
        }
    }
}

/// The collation that orders values of `kind` as CQL2 does: strings by
/// code point.
fn ordered_collation(kind: Kind) -> &'static str {
    match kind {
        Kind::Text => " COLLATE \"C\"",
        _ => "",
    }
}

fn mismatch(e: &Expr, a: &Operand, b: &Operand) -> Error {
    refused(
        e,
        format!("{} is compared with {}", a.kind().name(), b.kind().name()),
    )
}

fn parse_date(s: &str) -> Option<NaiveDate> {
    NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()
}

fn parse_instant(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// The date of `DATE('…')`.
fn date_of(at: &Expr, date: &Expr) -> Result<NaiveDate, Error> {
    match date {
        Expr::Literal(s) => {
            parse_date(s).ok_or_else(|| refused(at, format!("'{s}' is not a date (YYYY-MM-DD)")))
        }
        _ => Err(refused(at, "DATE takes a string")),
    }
}

/// The instant of `TIMESTAMP('…')`.
fn instant_of(at: &Expr, timestamp: &Expr) -> Result<DateTime<Utc>, Error> {
    match timestamp {
        Expr::Literal(s) => parse_instant(s)
            .ok_or_else(|| refused(at, format!("'{s}' is not an RFC 3339 timestamp"))),
        _ => Err(refused(at, "TIMESTAMP takes a string")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Column;
    use crate::geometry::GeometryColumn;

    fn sites() -> Collection {
        let geometry = GeometryColumn {
            geography: false,
            kind: None,
            z: None,
            srid: WGS84_SRID,
        };
        Collection::new(
            "sites",
            vec![
                Column::new("id", ColumnType::Scalar(ScalarType::Int4)),
                Column::new(
                    "name",
                    ColumnType::Scalar(ScalarType::Text { max_chars: None }),
                ),
                Column::new("pop", ColumnType::Scalar(ScalarType::Int4)),
                Column::new("geom", ColumnType::Geometry(geometry)),
            ],
            3,
        )
    }

    /// The SQL of `filter` and how many values it binds.
    fn sql(filter: &str) -> (String, usize) {
        let filter = Filter::parse(&sites(), filter, Lang::Text, &Crs::crs84(), None).unwrap();
        let (sql, values) = filter.sql(1);
        (sql, values.len())
    }

    #[test]
    fn literals_are_bound_not_written() {
        let (text, values) = sql("name = 'x'' OR 1=1 --'");
        assert_eq!(text, "(t.\"name\" = $1::text)");
        assert_eq!(values, 1);
    }

    #[test]
    fn a_whole_number_compared_with_an_integer_column_is_bound_as_an_integer() {
        // So that a B-tree index on the column serves.
        assert_eq!(sql("pop = 10").0, "(t.\"pop\" = $1::int8)");
        assert_eq!(sql("pop = 10.5").0, "(t.\"pop\" = $1::float8)");
    }

    #[test]
    fn strings_order_by_code_point() {
        assert_eq!(
            sql("name < 'a'").0,
            "(t.\"name\" COLLATE \"C\" < $1::text COLLATE \"C\")"
        );
        assert_eq!(sql("name = 'a'").0, "(t.\"name\" = $1::text)");
    }

    #[test]
    fn a_box_across_the_antimeridian_covers_both_sides() {
        let (text, values) = sql("S_INTERSECTS(geom, BBOX(170, -10, -170, 10))");
        assert!(
            text.starts_with("ST_Intersects(t.\"geom\", (ST_Collect(ST_MakeEnvelope("),
            "{text}"
        );
        assert_eq!(values, 8);
    }

    #[test]
    fn placeholders_follow_the_parameters_before_them() {
        let filter = Filter::parse(
            &sites(),
            "pop > 1 AND name LIKE 'a%'",
            Lang::Text,
            &Crs::crs84(),
            None,
        )
        .unwrap();
        assert_eq!(
            filter.sql(5).0,
            "((t.\"pop\" > $5::int8) AND (t.\"name\" LIKE $6::text))"
        );
    }
}
