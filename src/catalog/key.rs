//! Feature ids of tables whose primary key has several columns (a tenant
//! and an id, as Citus needs of a table distributed by its tenant): the
//! columns' values as text, in the key's order, joined by `,`, each with
//! `%` written `%25` and `,` written `%2C`, so that any text can be a part
//! (`acme,17`; `a%2Cb,17` for the tenant `a,b`).
//!
//! PostgreSQL makes and reads them ([`crate::read::sql::key_text`],
//! [`crate::read::sql::key_equals`]) with the same two replacements as
//! [`joined`] (COPY's ids) and [`parts`], so that an id made by one is read
//! the same by the other.

/// What joins the parts of an id.
pub const SEPARATOR: char = ',';

/// The id of the feature whose key's columns hold `values` (as text, in order).
pub fn joined<S: AsRef<str>>(values: impl IntoIterator<Item = S>) -> String {
    let mut id = String::new();
    for (i, value) in values.into_iter().enumerate() {
        if i > 0 {
            id.push(SEPARATOR);
        }
        id.push_str(&value.as_ref().replace('%', "%25").replace(',', "%2C"));
    }
    id
}

/// The values of the key's columns that `id` names, as text, in order.
pub fn parts(id: &str) -> Vec<String> {
    id.split(SEPARATOR)
        .map(|part| part.replace("%2C", ",").replace("%25", "%"))
        .collect()
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
            &["%2C", "%25,%"],
            &["", ""],
            &[",,", "%"],
        ] {
            assert_eq!(parts(&joined(values)), values, "{values:?}");
            assert_eq!(joined(parts(&joined(values))), joined(values));
        }
    }

    #[test]
    fn an_id_has_as_many_parts_as_separators_and_one() {
        assert_eq!(parts("a,b,c").len(), 3);
        assert_eq!(parts("17").len(), 1);
    }
}
