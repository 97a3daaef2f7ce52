//! What a credential allows: read and/or write, per collection, written as
//! an OAuth-style scope such as `read:* write:survey_*`.

/// Rights over collections, from a scope string.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grant {
    read: Vec<String>,
    write: Vec<String>,
}

impl Grant {
    /// Every right on every collection (authentication switched off).
    pub fn everything() -> Self {
        Grant {
            read: vec!["*".into()],
            write: vec!["*".into()],
        }
    }

    /// Parse space-separated `read:PATTERN` / `write:PATTERN` entries, where a
    /// pattern is a collection id in which `*` stands for any characters.
    pub fn parse(scope: &str) -> Result<Self, String> {
        let mut grant = Grant::default();
        for entry in scope.split_whitespace() {
            match entry.split_once(':') {
                Some(("read", pattern)) if !pattern.is_empty() => {
                    grant.read.push(pattern.to_owned())
                }
                Some(("write", pattern)) if !pattern.is_empty() => {
                    grant.write.push(pattern.to_owned())
                }
                _ => {
                    return Err(format!(
                        "'{entry}' is not a scope entry (read:PATTERN or write:PATTERN, e.g. read:* write:parcels)"
                    ))
                }
            }
        }
        Ok(grant)
    }

    /// The rights of both.
    pub fn union(mut self, other: &Grant) -> Self {
        self.read.extend(other.read.iter().cloned());
        self.write.extend(other.write.iter().cloned());
        self
    }

    /// Whether collection `id` may be read.
    pub fn can_read(&self, id: &str) -> bool {
        self.read.iter().any(|p| matches(p, id))
    }

    /// Whether collection `id` may be written.
    pub fn can_write(&self, id: &str) -> bool {
        self.write.iter().any(|p| matches(p, id))
    }

    /// Whether some collection may be written.
    pub fn writes_any(&self) -> bool {
        !self.write.is_empty()
    }

    /// Whether it grants anything at all.
    pub fn is_empty(&self) -> bool {
        self.read.is_empty() && self.write.is_empty()
    }
}

/// Whether `id` matches `pattern`, where `*` matches any run of characters.
fn matches(pattern: &str, id: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = id.strip_prefix(first) else {
        return false;
    };
    let mut parts: Vec<&str> = parts.collect();
    let Some(last) = parts.pop() else {
        return rest.is_empty(); // no `*`: the whole id must match
    };
    for part in parts {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_grant_by_pattern() {
        let g = Grant::parse("read:*  write:survey_* write:public.parcels").unwrap();
        assert!(g.can_read("anything"));
        assert!(g.can_write("survey_2026"));
        assert!(g.can_write("survey_"));
        assert!(g.can_write("public.parcels"));
        assert!(!g.can_write("parcels"));
        assert!(!g.can_write("my_survey_1"));
        let exact = Grant::parse("write:a*b*c").unwrap();
        assert!(exact.can_write("abc") && exact.can_write("a1b2c") && exact.can_write("abcbc"));
        assert!(!exact.can_write("acb") && !exact.can_write("ab") && !exact.can_read("abc"));
        assert!(Grant::parse("").unwrap().is_empty());
        for bad in ["admin", "read:", "delete:*", "read"] {
            assert!(Grant::parse(bad).is_err(), "{bad}");
        }
    }
}
