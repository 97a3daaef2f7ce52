//! Feature ids of tables whose primary key has several columns (a tenant
//! and an id, as Citus needs of a table distributed by its tenant): the
//! columns' values as text, in the key's order, joined by `,`, each with
//! the characters of [`ESCAPED`] written `~` and their byte in hex (`,` is
//! `~2C`), so that any text can be a part (`acme,17`; `a~2Cb,17` for the
//! tenant `a,b`).
//!
//! An id is then a URL path segment as it stands, which is how QGIS uses
//! it: it puts an id into an item's URL without encoding it (with `%2C` for
//! the comma, the service read `a%2Cb,3` as `a,b,3`), and takes a new
//! feature's id from its `Location` as sent (`acme%2C4` was another feature
//! than `acme,4`). Not escaped: letters beyond ASCII, which a URL must
//! encode whatever the id's own escapes.
//!
//! PostgreSQL makes and reads them ([`crate::read::sql::key_text`],
//! [`crate::read::sql::key_equals`]) with the same replacements as
//! [`joined`] (COPY's ids) and [`parts`], so that an id made by one is read
//! the same by the other.

/// What joins the parts of an id.
pub const SEPARATOR: char = ',';

/// The characters a value's text writes as `~` and their byte in hex, `~`
/// first: the escape itself, the separator, and the ASCII characters a URL
/// path segment cannot hold as they are.
pub const ESCAPED: [char; 18] = [
    '~', ',', ' ', '"', '#', '%', '/', '<', '>', '?', '[', '\\', ']', '^', '`', '{', '|', '}',
];

/// How `c` (one of [`ESCAPED`]) is written: `~2C` for `,`.
pub fn escape(c: char) -> String {
    format!("~{:02X}", u32::from(c))
}

/// `value` with each character of [`ESCAPED`] escaped.
fn escaped(value: &str) -> String {
    ESCAPED
        .iter()
        .fold(value.to_owned(), |v, &c| match v.contains(c) {
            true => v.replace(c, &escape(c)),
            false => v,
        })
}

/// A part of an id as the value it escapes: `~` last, since every `~` of an
/// escaped value begins an escape.
fn unescaped(part: &str) -> String {
    ESCAPED
        .iter()
        .rev()
        .fold(part.to_owned(), |v, &c| match v.contains('~') {
            true => v.replace(&escape(c), &c.to_string()),
            false => v,
        })
}

/// The id of the feature whose key's columns hold `values` (as text, in order).
pub fn joined<S: AsRef<str>>(values: impl IntoIterator<Item = S>) -> String {
    let mut id = String::new();
    for (i, value) in values.into_iter().enumerate() {
        if i > 0 {
            id.push(SEPARATOR);
        }
        id.push_str(&escaped(value.as_ref()));
    }
    id
}

/// The values of the key's columns that `id` names, as text, in order.
pub fn parts(id: &str) -> Vec<String> {
    id.split(SEPARATOR).map(unescaped).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_text_comes_back_as_it_was() {
        for values in [
            &["acme", "17"][..],
            &["a,b", "17"],
            &["100%", "x"],
            &["~2C", "~7E,~"],
            &["%2C", "100%"],
            &["", ""],
            &[",,", "~"],
            &["a b/c?d#e", "[x]{y}|z\\\"<>^`"],
        ] {
            assert_eq!(parts(&joined(values)), values, "{values:?}");
            assert_eq!(joined(parts(&joined(values))), joined(values));
        }
    }

    #[test]
    fn an_id_is_a_path_segment_as_it_stands() {
        let id = joined(["a b/c?d#e%f,g~", "[x]{y}|z\\\"<>^`"]);
        assert_eq!(
            id,
            "a~20b~2Fc~3Fd~23e~25f~2Cg~7E,~5Bx~5D~7By~7D~7Cz~5C~22~3C~3E~5E~60"
        );
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"~,".contains(&b)));
        assert_eq!(joined(["acme", "17"]), "acme,17");
    }

    #[test]
    fn an_id_has_as_many_parts_as_separators_and_one() {
        assert_eq!(parts("a,b,c").len(), 3);
        assert_eq!(parts("17").len(), 1);
    }
}
