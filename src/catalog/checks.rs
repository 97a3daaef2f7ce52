//! What a column's CHECK constraints and enum type allow, read from the
//! constraints as PostgreSQL prints them (`pg_get_constraintdef`), in the
//! simple forms a schema can publish: `col IN (…)` (printed `col = ANY
//! (ARRAY[…])`), `col = v`, and bounds (`col >= n`, `col < n`, `BETWEEN`,
//! printed as two bounds joined by `AND`). Anything else (`OR`, `NOT`,
//! functions, other columns) is left to the database, which checks every
//! constraint anyway: only what a constraint certainly implies is taken.

use serde_json::{Number, Value};

/// How a column's values compare, for reading its constraints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `text`, `varchar` or an enum type: compared as the exact string
    /// (`char(n)` is not: it ignores trailing blanks).
    Text,
    /// `smallint`, `integer`, `bigint`.
    Integer,
    /// `real`, `double precision`, `numeric`.
    Number,
    /// Anything else: no constraint is read.
    Other,
}

/// A bound on a number.
#[derive(Debug, Clone, PartialEq)]
pub struct Bound {
    /// The bound itself.
    pub value: Number,
    /// The bound is not allowed itself (`>`, `<`).
    pub exclusive: bool,
}

impl Bound {
    fn as_f64(&self) -> f64 {
        self.value.as_f64().unwrap_or(f64::NAN)
    }

    /// Whether this lower (`lower`) or upper bound allows fewer values than `other`.
    fn tighter(&self, other: &Bound, lower: bool) -> bool {
        let (a, b) = (self.as_f64(), other.as_f64());
        if a == b {
            self.exclusive && !other.exclusive
        } else {
            (a > b) == lower
        }
    }
}

/// What a column allows beyond its type.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Checks {
    /// The only values allowed (strings or numbers), in order.
    pub allowed: Option<Vec<Value>>,
    /// The least value allowed.
    pub minimum: Option<Bound>,
    /// The greatest value allowed.
    pub maximum: Option<Bound>,
}

impl Checks {
    /// What the CHECK constraints `definitions` (as `pg_get_constraintdef`
    /// prints them; on column `column` alone, or on its domain, as `VALUE`)
    /// and the enum type's `labels` allow a column of `kind`.
    pub fn read(
        kind: Kind,
        column: &str,
        labels: Option<&[String]>,
        definitions: &[String],
    ) -> Self {
        if kind == Kind::Other {
            return Checks::default();
        }
        let mut checks = Checks {
            allowed: labels.map(|l| l.iter().cloned().map(Value::String).collect()),
            ..Checks::default()
        };
        for definition in definitions {
            for term in terms(definition, column, kind) {
                checks.add(term);
            }
        }
        checks
    }

    fn add(&mut self, term: Term) {
        match term {
            Term::Allowed(values) => {
                self.allowed = Some(match self.allowed.take() {
                    None => values,
                    Some(before) => before.into_iter().filter(|v| values.contains(v)).collect(),
                })
            }
            Term::Lower(b) if self.minimum.as_ref().is_none_or(|m| b.tighter(m, true)) => {
                self.minimum = Some(b)
            }
            Term::Upper(b) if self.maximum.as_ref().is_none_or(|m| b.tighter(m, false)) => {
                self.maximum = Some(b)
            }
            Term::Lower(_) | Term::Upper(_) => {}
        }
    }
}

/// One condition a constraint certainly imposes.
#[derive(Debug, PartialEq)]
enum Term {
    Allowed(Vec<Value>),
    Lower(Bound),
    Upper(Bound),
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Open,
    Close,
    OpenBracket,
    CloseBracket,
    Comma,
    Dot,
    Cast,
    Op(String),
    /// An unquoted word: a keyword (upper case) or an identifier.
    Word(String),
    /// A `"quoted"` identifier.
    Quoted(String),
    /// A `'string'` literal.
    Str(String),
    /// An unsigned number.
    Num(String),
}

/// The conditions of one constraint definition that are understood.
fn terms(definition: &str, column: &str, kind: Kind) -> Vec<Term> {
    let Some(tokens) = tokenize(definition) else {
        return Vec::new();
    };
    let body = match tokens.as_slice() {
        [Token::Word(check), rest @ ..] if check == "CHECK" => match rest {
            [.., Token::Word(not), Token::Word(valid)] if not == "NOT" && valid == "VALID" => {
                &rest[..rest.len() - 2]
            }
            _ => rest,
        },
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    if enclosed(body) {
        conjuncts(
            &body[1..body.len() - 1],
            &Column { name: column, kind },
            &mut out,
        );
    }
    out
}

struct Column<'a> {
    name: &'a str,
    kind: Kind,
}

fn tokenize(text: &str) -> Option<Vec<Token>> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    // The characters from `i` on while `f` holds them, consumed.
    let take_while = |i: &mut usize, f: &dyn Fn(char) -> bool| {
        let start = *i;
        while *i < chars.len() && f(chars[*i]) {
            *i += 1;
        }
        chars[start..*i].iter().collect::<String>()
    };
    while i < chars.len() {
        let c = chars[i];
        let token = match c {
            ' ' => {
                i += 1;
                continue;
            }
            '(' => Token::Open,
            ')' => Token::Close,
            '[' => Token::OpenBracket,
            ']' => Token::CloseBracket,
            ',' => Token::Comma,
            '.' => Token::Dot,
            ':' if chars.get(i + 1) == Some(&':') => {
                i += 1;
                Token::Cast
            }
            '<' | '>' | '=' | '!' | '-' | '+' | '*' | '/' | '~' | '@' | '&' | '|' => {
                let op = take_while(&mut i, &|c| "<>=!-+*/~@&|".contains(c));
                tokens.push(Token::Op(op));
                continue;
            }
            '\'' | '"' => {
                // Quotes inside are doubled.
                let mut s = String::new();
                loop {
                    i += 1;
                    match *chars.get(i)? {
                        q if q == c && chars.get(i + 1) == Some(&c) => {
                            s.push(c);
                            i += 1;
                        }
                        q if q == c => break,
                        other => s.push(other),
                    }
                }
                if c == '"' {
                    Token::Quoted(s)
                } else {
                    Token::Str(s)
                }
            }
            c if c.is_ascii_digit() => {
                let mut n = take_while(&mut i, &|c| c.is_ascii_alphanumeric() || c == '.');
                // An exponent's sign: `1e+30`.
                if n.ends_with(['e', 'E']) && matches!(chars.get(i), Some('+' | '-')) {
                    n.push(chars[i]);
                    i += 1;
                    n.push_str(&take_while(&mut i, &|c| c.is_ascii_digit()));
                }
                tokens.push(Token::Num(n));
                continue;
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let w = take_while(&mut i, &|c| {
                    c.is_ascii_alphanumeric() || c == '_' || c == '$'
                });
                tokens.push(Token::Word(w));
                continue;
            }
            _ => return None,
        };
        tokens.push(token);
        i += 1;
    }
    Some(tokens)
}

/// The index of the token closing the bracket opened at `tokens[0]`.
fn closing(tokens: &[Token]) -> Option<usize> {
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate() {
        match t {
            Token::Open | Token::OpenBracket => depth += 1,
            Token::Close | Token::CloseBracket => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether `tokens` is one parenthesized expression: `( … )`.
fn enclosed(tokens: &[Token]) -> bool {
    tokens.first() == Some(&Token::Open) && closing(tokens) == Some(tokens.len() - 1)
}

fn without_parens(mut tokens: &[Token]) -> &[Token] {
    while enclosed(tokens) {
        tokens = &tokens[1..tokens.len() - 1];
    }
    tokens
}

/// `tokens` split at each token outside brackets that `is_separator`.
fn split_outside(tokens: &[Token], is_separator: impl Fn(&Token) -> bool) -> Vec<&[Token]> {
    let (mut parts, mut start, mut depth) = (Vec::new(), 0, 0i32);
    for (i, t) in tokens.iter().enumerate() {
        match t {
            Token::Open | Token::OpenBracket => depth += 1,
            Token::Close | Token::CloseBracket => depth -= 1,
            t if depth == 0 && is_separator(t) => {
                parts.push(&tokens[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&tokens[start..]);
    parts
}

fn is_word(t: &Token, word: &str) -> bool {
    matches!(t, Token::Word(w) if w == word)
}

/// The terms of `A AND B AND …`; an `OR` anywhere at this level leaves all of it to the database.
fn conjuncts(tokens: &[Token], column: &Column<'_>, out: &mut Vec<Term>) {
    let tokens = without_parens(tokens);
    if split_outside(tokens, |t| is_word(t, "OR")).len() > 1 {
        return;
    }
    let parts = split_outside(tokens, |t| is_word(t, "AND"));
    if parts.len() > 1 {
        for part in parts {
            conjuncts(part, column, out);
        }
    } else if let Some(term) = comparison(tokens, column) {
        out.push(term);
    }
}

/// `col op literal`, `literal op col` or `col = ANY (ARRAY[…])`.
fn comparison(tokens: &[Token], column: &Column<'_>) -> Option<Term> {
    let sides = split_outside(tokens, |t| matches!(t, Token::Op(_)));
    let [left, right] = sides.as_slice() else {
        return None;
    };
    let op = tokens.iter().find_map(|t| match t {
        Token::Op(op) => Some(op.as_str()),
        _ => None,
    })?;
    if is_column(left, column.name) {
        if op == "=" && right.first().is_some_and(|t| is_word(t, "ANY")) {
            return any_of(&right[1..], column.kind);
        }
        term(op, literal(right, column.kind)?, column.kind, false)
    } else if is_column(right, column.name) {
        term(op, literal(left, column.kind)?, column.kind, true)
    } else {
        None
    }
}

/// The condition `column op value` (`value op column` when `flipped`).
fn term(op: &str, value: Value, kind: Kind, flipped: bool) -> Option<Term> {
    let bound = |exclusive| match &value {
        Value::Number(n) if kind != Kind::Text => Some(Bound {
            value: n.clone(),
            exclusive,
        }),
        _ => None,
    };
    let op = match (op, flipped) {
        (">=", true) => "<=",
        (">", true) => "<",
        ("<=", true) => ">=",
        ("<", true) => ">",
        (op, _) => op,
    };
    match op {
        "=" => allowed(vec![value], kind),
        ">=" => bound(false).map(Term::Lower),
        ">" => bound(true).map(Term::Lower),
        "<=" => bound(false).map(Term::Upper),
        "<" => bound(true).map(Term::Upper),
        _ => None,
    }
}

/// `values` as the only ones allowed, where the kind publishes them: strings
/// of text, integers of integer columns.
fn allowed(values: Vec<Value>, kind: Kind) -> Option<Term> {
    let fits = |v: &Value| match kind {
        Kind::Text => v.is_string(),
        Kind::Integer => v.as_i64().is_some(),
        Kind::Number | Kind::Other => false,
    };
    values.iter().all(fits).then_some(Term::Allowed(values))
}

/// `(ARRAY[a, b, …])` after `= ANY`, possibly cast as a whole.
fn any_of(tokens: &[Token], kind: Kind) -> Option<Term> {
    let array = without_parens(uncast(without_parens(tokens))?.0);
    let [Token::Word(word), Token::OpenBracket, elements @ .., Token::CloseBracket] = array else {
        return None;
    };
    if word != "ARRAY" || elements.is_empty() {
        return None;
    }
    let values = split_outside(elements, |t| *t == Token::Comma)
        .into_iter()
        .map(|element| literal(element, kind))
        .collect::<Option<Vec<Value>>>()?;
    allowed(values, kind)
}

/// Casts a column may carry in a comparison without changing its value.
const EXACT_COLUMN_CASTS: [&str; 3] = ["text", "numeric", "double precision"];

/// Whether `tokens` is the column (`VALUE` in a domain's constraint), possibly
/// parenthesized and cast without loss.
fn is_column(tokens: &[Token], name: &str) -> bool {
    let Some((inner, casts)) = uncast(tokens) else {
        return false;
    };
    casts
        .iter()
        .all(|c| EXACT_COLUMN_CASTS.contains(&c.as_str()))
        && match without_parens(inner) {
            [Token::Word(w)] => w == name || w == "VALUE",
            [Token::Quoted(q)] => q == name,
            _ => false,
        }
}

/// Types that make a quoted literal a number.
const NUMBER_TYPES: [&str; 6] = [
    "smallint",
    "integer",
    "bigint",
    "numeric",
    "real",
    "double precision",
];

/// A constant, possibly parenthesized and cast: `'a'::text`, `10`,
/// `'-5'::integer`, `(0.1)::double precision`.
fn literal(tokens: &[Token], kind: Kind) -> Option<Value> {
    let (inner, casts) = uncast(tokens)?;
    let number = || casts.iter().any(|c| NUMBER_TYPES.contains(&c.as_str()));
    let value = match without_parens(inner) {
        [Token::Num(n)] => Value::Number(n.parse().ok()?),
        [Token::Str(s)] if number() => Value::Number(s.parse().ok()?),
        [Token::Str(s)] => Value::String(s.clone()),
        _ => return None,
    };
    // A `real` constant is compared as the float4 it rounds to.
    match (value, casts.first().map(String::as_str)) {
        (Value::Number(n), Some("real")) => {
            let rounded = n.as_f64()? as f32;
            Number::from_f64(f64::from(rounded)).map(Value::Number)
        }
        (Value::String(_), _) if kind != Kind::Text => None,
        (value, _) => Some(value),
    }
}

/// `tokens` without the casts around it (`(x)::a::b`), and the types cast
/// to, outermost first; `None` when a type has a modifier (`varchar(3)`
/// truncates, `numeric(5,2)` rounds).
fn uncast(mut tokens: &[Token]) -> Option<(&[Token], Vec<String>)> {
    let mut casts = Vec::new();
    loop {
        tokens = without_parens(tokens);
        let Some(at) = last_cast(tokens) else {
            return Some((tokens, casts));
        };
        casts.push(type_name(&tokens[at + 1..])?);
        tokens = &tokens[..at];
    }
}

/// The position of the last `::` outside brackets.
fn last_cast(tokens: &[Token]) -> Option<usize> {
    let mut depth = 0i32;
    let mut last = None;
    for (i, t) in tokens.iter().enumerate() {
        match t {
            Token::Open | Token::OpenBracket => depth += 1,
            Token::Close | Token::CloseBracket => depth -= 1,
            Token::Cast if depth == 0 => last = Some(i),
            _ => {}
        }
    }
    last
}

/// A type name as printed (`character varying`, `s.mood`, `"My type"`, `text[]`).
fn type_name(tokens: &[Token]) -> Option<String> {
    let mut name = String::new();
    for t in tokens {
        match t {
            Token::Word(w) | Token::Quoted(w) => {
                if !name.is_empty() && !name.ends_with('.') {
                    name.push(' ');
                }
                name.push_str(w);
            }
            Token::Dot => name.push('.'),
            Token::OpenBracket => name.push('['),
            Token::CloseBracket => name.push(']'),
            _ => return None,
        }
    }
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(kind: Kind, column: &str, definitions: &[&str]) -> Checks {
        let definitions: Vec<String> = definitions.iter().map(|d| d.to_string()).collect();
        Checks::read(kind, column, None, &definitions)
    }

    fn bound(value: Value, exclusive: bool) -> Option<Bound> {
        Some(Bound {
            value: serde_json::from_value(value).unwrap(),
            exclusive,
        })
    }

    // The definitions below are what PostgreSQL 17 prints for the constraints named.
    #[test]
    fn lists_of_values() {
        // kind text CHECK (kind IN ('a', 'b', 'it''s'))
        let c = read(
            Kind::Text,
            "kind",
            &["CHECK ((kind = ANY (ARRAY['a'::text, 'b'::text, 'it''s'::text])))"],
        );
        assert_eq!(c.allowed, Some(vec![json!("a"), json!("b"), json!("it's")]));
        // vk varchar(10) CHECK (vk IN ('x', 'y'))
        let c = read(
            Kind::Text,
            "vk",
            &["CHECK (((vk)::text = ANY ((ARRAY['x'::character varying, 'y'::character varying])::text[])))"],
        );
        assert_eq!(c.allowed, Some(vec![json!("x"), json!("y")]));
        // big bigint CHECK (big IN (1, 2, 3)), and NOT VALID ones (still checked on writes)
        let c = read(
            Kind::Integer,
            "big",
            &["CHECK ((big = ANY (ARRAY[(1)::bigint, (2)::bigint, (3)::bigint])))"],
        );
        assert_eq!(c.allowed, Some(vec![json!(1), json!(2), json!(3)]));
        let c = read(
            Kind::Integer,
            "n",
            &["CHECK ((n = ANY (ARRAY['-1'::integer, 1]))) NOT VALID"],
        );
        assert_eq!(c.allowed, Some(vec![json!(-1), json!(1)]));
        // A single value, a quoted column, a domain's VALUE.
        let c = read(Kind::Text, "Upper", &["CHECK ((\"Upper\" = 'U'::text))"]);
        assert_eq!(c.allowed, Some(vec![json!("U")]));
        let c = read(
            Kind::Text,
            "c",
            &["CHECK ((VALUE = ANY (ARRAY['red'::text, 'green'::text])))"],
        );
        assert_eq!(c.allowed, Some(vec![json!("red"), json!("green")]));
    }

    #[test]
    fn enum_labels_meet_the_constraints() {
        let labels = ["sad".to_owned(), "ok".to_owned(), "happy".to_owned()];
        let md2 = ["CHECK ((md2 = ANY (ARRAY['ok'::mood, 'happy'::mood])))".to_owned()];
        let c = Checks::read(Kind::Text, "md2", Some(&labels), &md2);
        assert_eq!(c.allowed, Some(vec![json!("ok"), json!("happy")]));
        // `<>` is left to the database: the labels stay.
        let md = ["CHECK ((md <> 'sad'::mood))".to_owned()];
        let c = Checks::read(Kind::Text, "md", Some(&labels), &md);
        assert_eq!(c.allowed.unwrap().len(), 3);
    }

    #[test]
    fn bounds() {
        // n int CHECK (n BETWEEN -5 AND 10)
        let c = read(
            Kind::Integer,
            "n",
            &["CHECK (((n >= '-5'::integer) AND (n <= 10)))"],
        );
        assert_eq!(c.minimum, bound(json!(-5), false));
        assert_eq!(c.maximum, bound(json!(10), false));
        // m int CHECK (m > 0 AND m < 2.5)
        let c = read(
            Kind::Integer,
            "m",
            &["CHECK (((m > 0) AND ((m)::numeric < 2.5)))"],
        );
        assert_eq!(c.minimum, bound(json!(0), true));
        assert_eq!(c.maximum, bound(json!(2.5), true));
        // d float8 CHECK (d > -1.5 AND d <= 1e30)
        let c = read(
            Kind::Number,
            "d",
            &["CHECK (((d > ('-1.5'::numeric)::double precision) AND (d <= ('1000000000000000000000000000000'::numeric)::double precision)))"],
        );
        assert_eq!(c.minimum, bound(json!(-1.5), true));
        assert_eq!(c.maximum, bound(json!(1e30), false));
        // A reversed comparison, two constraints, a domain's BETWEEN.
        let c = read(Kind::Integer, "rev", &["CHECK ((10 >= rev))"]);
        assert_eq!((c.minimum, c.maximum), (None, bound(json!(10), false)));
        let c = read(
            Kind::Number,
            "x",
            &["CHECK ((x >= (0)::numeric))", "CHECK ((x < 100.5))"],
        );
        assert_eq!(c.minimum, bound(json!(0), false));
        assert_eq!(c.maximum, bound(json!(100.5), true));
        let c = read(
            Kind::Number,
            "p",
            &[
                "CHECK (((VALUE >= (0)::numeric) AND (VALUE <= (100)::numeric)))",
                "CHECK ((VALUE > 0))",
            ],
        );
        assert_eq!(c.minimum, bound(json!(0), true), "the tighter bound");
        // r real CHECK (r >= 0.1): compared as double precision.
        let c = read(
            Kind::Number,
            "r",
            &["CHECK ((r >= (0.1)::double precision))"],
        );
        assert_eq!(c.minimum, bound(json!(0.1), false));
        let c = read(Kind::Number, "r", &["CHECK ((r <= (0.1)::real))"]);
        assert_eq!(c.maximum, bound(json!(f64::from(0.1f32)), false));
    }

    #[test]
    fn anything_else_is_left_to_the_database() {
        for (kind, column, definition) in [
            (Kind::Integer, "orr", "CHECK (((orr > 0) OR (orr IS NULL)))"),
            (Kind::Text, "arr", "CHECK ((arr <@ ARRAY['a'::text]))"),
            (Kind::Integer, "n", "CHECK ((NOT (n = 3)))"),
            (Kind::Integer, "n", "CHECK ((n > other))"),
            (Kind::Integer, "n", "CHECK ((abs(n) < 5))"),
            (Kind::Integer, "n", "CHECK (((n)::integer > 5))"),
            (
                Kind::Text,
                "t",
                "CHECK ((t = ANY (ARRAY['a'::text, NULL::text])))",
            ),
            (
                Kind::Text,
                "t",
                "CHECK (((t)::character(2) = 'ab'::bpchar))",
            ),
            (Kind::Text, "t", "CHECK ((t = 'abc'::character varying(2)))"),
            (Kind::Text, "t", "CHECK ((t = E'a\\\\b'::text))"),
            (Kind::Text, "t", "CHECK ((t > 'm'::text))"),
            (Kind::Number, "x", "CHECK ((x = ANY (ARRAY[1.5, 2.5])))"),
            (
                Kind::Other,
                "bk",
                "CHECK ((bk = ANY (ARRAY['x'::bpchar, 'y'::bpchar])))",
            ),
            (Kind::Integer, "n", "CHECK ((n >= 'NaN'::numeric))"),
            (Kind::Integer, "n", "not a constraint ("),
        ] {
            assert_eq!(
                read(kind, column, &[definition]),
                Checks::default(),
                "{definition}"
            );
        }
        // Of `A AND B`, the part that is understood is taken.
        let c = read(Kind::Integer, "n", &["CHECK (((n > 0) AND (abs(n) < 5)))"]);
        assert_eq!((c.minimum, c.maximum), (bound(json!(0), true), None));
    }
}
