//! Finding the features in GeoJSON input as it is read, without parsing or
//! holding more than one feature: the elements of a FeatureCollection's
//! `features` array, or the records of a GeoJSON Text Sequence (RFC 8142:
//! each record after an RS, 0x1E; newline-delimited GeoJSON too).
//!
//! The scanner only follows strings, escapes and nesting to find where each
//! feature ends; each feature's bytes are copied out as they are, and whether
//! they are valid JSON is checked by the caller.

use std::io::BufRead;

use memchr::memchr2;

/// The record separator of RFC 8142.
const RS: u8 = 0x1e;
/// UTF-8's byte order mark, skipped at the start of the input.
const BOM: &[u8] = b"\xef\xbb\xbf";

/// Why the input cannot be read on: its bytes are not GeoJSON as expected.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The input could not be read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A byte that cannot come where it is.
    #[error("byte {at}: expected {expected}, found {found}")]
    Unexpected {
        /// Offset of the byte in the input.
        at: u64,
        /// What would have been right there.
        expected: &'static str,
        /// The byte, shown readably.
        found: String,
    },
    /// The input ends inside a feature or a FeatureCollection.
    #[error("the input ends inside {inside} (which starts at byte {at}): is it cut short?")]
    Truncated {
        /// What it ends inside.
        inside: String,
        /// Where that starts.
        at: u64,
    },
    /// One feature is larger than the limit: most likely the JSON is broken
    /// (an unclosed string or bracket), and memory must stay bounded.
    #[error(
        "feature {feature} (from byte {at}) is larger than {limit} bytes: is the JSON broken? \
         (--batch-bytes sets the limit)"
    )]
    TooLarge {
        /// The feature's index in the input.
        feature: u64,
        /// Where it starts.
        at: u64,
        /// The limit.
        limit: usize,
    },
}

/// Where the scanner is between features.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// Between top-level values: FeatureCollections or sequence records.
    Top,
    /// Inside the `features` array of the FeatureCollection starting at `at`;
    /// `first` until its first element has been read.
    Features { at: u64, first: bool },
}

/// Yields each feature of the input in turn (see the module's doc).
pub struct Splitter<R> {
    input: R,
    /// Bytes consumed so far.
    offset: u64,
    place: Place,
    /// Index of the next feature.
    feature: u64,
    /// Most bytes one feature (or the members of a FeatureCollection before
    /// `features`) may have.
    max_feature: usize,
    /// Where the object being copied starts in the input.
    start: u64,
    /// The length `out` may not pass while copying it.
    cap: usize,
}

impl<R: BufRead> Splitter<R> {
    /// A splitter over `input` refusing features larger than `max_feature` bytes.
    pub fn new(input: R, max_feature: usize) -> Self {
        Splitter {
            input,
            offset: 0,
            place: Place::Top,
            feature: 0,
            max_feature,
            start: 0,
            cap: 0,
        }
    }

    /// Bytes of the input consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Append the next feature's bytes to `out`; its offset in the input, or
    /// `None` at the end of the input.
    pub fn next_into(&mut self, out: &mut Vec<u8>) -> Result<Option<u64>, InputError> {
        loop {
            match self.place {
                Place::Top => {
                    self.skip_bom()?;
                    match self.skip_space(None, true)? {
                        None => return Ok(None),
                        Some(b'{') => {}
                        Some(b) => return Err(self.unexpected(b, "a GeoJSON object ('{')")),
                    }
                    let start = out.len();
                    let at = self.begin(out);
                    if self.read_object(out)? {
                        self.feature += 1;
                        return Ok(Some(at));
                    }
                    // A FeatureCollection: its members so far are not a feature.
                    out.truncate(start);
                    self.place = Place::Features { at, first: true };
                }
                Place::Features { at, first } => {
                    let expected = if first {
                        "a feature ('{') or ']'"
                    } else {
                        "',' or ']' after a feature"
                    };
                    match self.skip_space(None, false)? {
                        Some(b']') => {
                            self.consume(1);
                            // The collection's other members, up to its '}', are skipped.
                            if !self.scan(&mut ValueEnd::inside_object(), None)? {
                                return Err(self.collection_truncated(at));
                            }
                            self.place = Place::Top;
                            continue;
                        }
                        Some(b',') if !first => {
                            self.consume(1);
                            match self.skip_space(None, false)? {
                                Some(b'{') => {}
                                Some(b) => return Err(self.unexpected(b, "a feature ('{')")),
                                None => return Err(self.collection_truncated(at)),
                            }
                        }
                        Some(b'{') if first => {}
                        Some(b) => return Err(self.unexpected(b, expected)),
                        None => return Err(self.collection_truncated(at)),
                    }
                    let feature_at = self.begin(out);
                    self.copy_value(Some(out))?;
                    self.place = Place::Features { at, first: false };
                    self.feature += 1;
                    return Ok(Some(feature_at));
                }
            }
        }
    }

    /// Start copying an object to `out` here; its offset.
    fn begin(&mut self, out: &[u8]) -> u64 {
        self.start = self.offset;
        self.cap = out.len() + self.max_feature;
        self.start
    }

    /// Skip a UTF-8 byte order mark at the very start of the input.
    fn skip_bom(&mut self) -> Result<(), InputError> {
        if self.offset != 0 || self.input.fill_buf()?.first() != Some(&BOM[0]) {
            return Ok(());
        }
        for &expected in BOM {
            match self.input.fill_buf()?.first() {
                Some(&b) if b == expected => self.consume(1),
                Some(&b) => return Err(self.unexpected(b, "a GeoJSON object ('{')")),
                None => return Ok(()),
            }
        }
        Ok(())
    }

    /// Read a top-level object into `out`, member by member: `true` when it
    /// is a record (a feature), `false` when a `features` array starts (the
    /// array's `[` consumed).
    fn read_object(&mut self, out: &mut Vec<u8>) -> Result<bool, InputError> {
        self.keep(out)?; // '{'
        if self.skip_space(Some(out), false)? == Some(b'}') {
            self.keep(out)?;
            return Ok(true);
        }
        loop {
            let next = self.skip_space(Some(out), false)?;
            let key = out.len();
            match next {
                Some(b'"') => self.copy_value(Some(out))?,
                Some(b) => return Err(self.unexpected(b, "a member name ('\"')")),
                None => return Err(self.feature_truncated()),
            }
            let is_features = &out[key..] == b"\"features\"";
            match self.skip_space(Some(out), false)? {
                Some(b':') => self.keep(out)?,
                Some(b) => return Err(self.unexpected(b, "':' after a member name")),
                None => return Err(self.feature_truncated()),
            }
            match self.skip_space(Some(out), false)? {
                Some(b'[') if is_features => {
                    self.consume(1);
                    return Ok(false);
                }
                Some(_) => self.copy_value(Some(out))?,
                None => return Err(self.feature_truncated()),
            }
            match self.skip_space(Some(out), false)? {
                Some(b',') => self.keep(out)?,
                Some(b'}') => {
                    self.keep(out)?;
                    return Ok(true);
                }
                Some(b) => return Err(self.unexpected(b, "',' or '}' after a member")),
                None => return Err(self.feature_truncated()),
            }
        }
    }

    /// Skip whitespace (and RS between records when `rs`), copying it to
    /// `keep` if given; the next byte, not consumed, or `None` at the end.
    fn skip_space(
        &mut self,
        mut keep: Option<&mut Vec<u8>>,
        rs: bool,
    ) -> Result<Option<u8>, InputError> {
        loop {
            let chunk = self.input.fill_buf()?;
            let Some(&first) = chunk.first() else {
                return Ok(None);
            };
            let n = chunk
                .iter()
                .take_while(|&&b| matches!(b, b' ' | b'\t' | b'\n' | b'\r') || (rs && b == RS))
                .count();
            if n == 0 {
                return Ok(Some(first));
            }
            if let Some(out) = keep.as_mut() {
                out.extend_from_slice(&chunk[..n]);
                self.check_size(out)?;
            }
            self.consume(n);
        }
    }

    /// Copy one JSON value (its first byte is next) to `out`, or skip it when `None`.
    fn copy_value(&mut self, out: Option<&mut Vec<u8>>) -> Result<(), InputError> {
        let first = self.input.fill_buf()?.first().copied();
        let Some(first) = first else {
            return Err(self.feature_truncated());
        };
        if self.scan(&mut ValueEnd::starting_with(first), out)? {
            Ok(())
        } else {
            Err(self.feature_truncated())
        }
    }

    /// Consume input up to where `end` says the value ends, copying it to
    /// `out` if given; `false` when the input ends first.
    fn scan(
        &mut self,
        end: &mut ValueEnd,
        mut out: Option<&mut Vec<u8>>,
    ) -> Result<bool, InputError> {
        loop {
            let chunk = self.input.fill_buf()?;
            if chunk.is_empty() {
                return Ok(false);
            }
            let found = end.scan(chunk);
            let n = found.unwrap_or(chunk.len());
            if let Some(out) = out.as_mut() {
                out.extend_from_slice(&chunk[..n]);
                self.check_size(out)?;
            }
            self.consume(n);
            if found.is_some() {
                return Ok(true);
            }
        }
    }

    /// Copy the next byte (already seen) to `out`.
    fn keep(&mut self, out: &mut Vec<u8>) -> Result<(), InputError> {
        if let Some(&b) = self.input.fill_buf()?.first() {
            out.push(b);
            self.consume(1);
        }
        self.check_size(out)
    }

    fn consume(&mut self, n: usize) {
        self.input.consume(n);
        self.offset += n as u64;
    }

    fn check_size(&self, out: &[u8]) -> Result<(), InputError> {
        if out.len() > self.cap {
            return Err(InputError::TooLarge {
                feature: self.feature,
                at: self.start,
                limit: self.max_feature,
            });
        }
        Ok(())
    }

    fn unexpected(&self, found: u8, expected: &'static str) -> InputError {
        let found = if found.is_ascii_graphic() {
            format!("'{}'", found as char)
        } else {
            format!("byte 0x{found:02x}")
        };
        InputError::Unexpected {
            at: self.offset,
            expected,
            found,
        }
    }

    fn feature_truncated(&self) -> InputError {
        InputError::Truncated {
            inside: format!("feature {}", self.feature),
            at: self.start,
        }
    }

    fn collection_truncated(&self, at: u64) -> InputError {
        InputError::Truncated {
            inside: "a FeatureCollection".into(),
            at,
        }
    }
}

/// Finds where a JSON value ends, a chunk at a time, by following its strings
/// (with escapes) and nesting.
#[derive(Debug)]
struct ValueEnd {
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// A number or literal: it ends at the first delimiter.
    scalar: bool,
}

impl ValueEnd {
    /// The value whose first byte is `first` (not yet scanned).
    fn starting_with(first: u8) -> Self {
        ValueEnd {
            depth: 0,
            in_string: false,
            escaped: false,
            scalar: !matches!(first, b'{' | b'[' | b'"'),
        }
    }

    /// The rest of an object whose `{` has been read: it ends at its `}`.
    fn inside_object() -> Self {
        ValueEnd {
            depth: 1,
            in_string: false,
            escaped: false,
            scalar: false,
        }
    }

    /// Scan `chunk`: `Some(n)` when the value ends after its first `n` bytes.
    fn scan(&mut self, chunk: &[u8]) -> Option<usize> {
        if self.scalar {
            return chunk
                .iter()
                .position(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b',' | b']' | b'}'));
        }
        let mut i = 0;
        while i < chunk.len() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                    i += 1;
                    continue;
                }
                let j = i + memchr2(b'"', b'\\', &chunk[i..])?;
                if chunk[j] == b'\\' {
                    self.escaped = true;
                } else {
                    self.in_string = false;
                    if self.depth == 0 {
                        return Some(j + 1);
                    }
                }
                i = j + 1;
                continue;
            }
            match chunk[i] {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    // A closing bracket with nothing open ends the value too:
                    // the JSON is broken, and checking the feature will say so.
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        return Some(i + 1);
                    }
                }
                _ => {}
            }
            i += 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every feature of `input` read through a buffer of `buffer` bytes.
    fn split(input: &[u8], buffer: usize) -> Result<Vec<String>, InputError> {
        let mut splitter = Splitter::new(std::io::BufReader::with_capacity(buffer, input), 1 << 20);
        let mut features = Vec::new();
        loop {
            let mut out = Vec::new();
            match splitter.next_into(&mut out)? {
                Some(_) => features.push(String::from_utf8(out).unwrap()),
                None => return Ok(features),
            }
        }
    }

    /// Split with every buffer size from 1 byte up, so that every chunk boundary is crossed.
    fn split_all_ways(input: &str) -> Vec<String> {
        let whole = split(input.as_bytes(), 1 << 16).unwrap();
        for buffer in 1..input.len().min(64) {
            assert_eq!(
                split(input.as_bytes(), buffer).unwrap(),
                whole,
                "buffer {buffer}"
            );
        }
        whole
    }

    const A: &str = r#"{"type":"Feature","geometry":{"type":"Point","coordinates":[1,2]},"properties":{"s":"a \"}]\\"}}"#;
    const B: &str =
        r#"{ "type" : "Feature", "geometry" : null, "properties" : { "features": [1] } }"#;

    #[test]
    fn a_feature_collection_gives_its_features_as_they_are() {
        let input = format!(
            "\u{feff}{{\"type\":\"FeatureCollection\", \"name\":\"x\",\n \"features\" : [ {A} ,\n{B}\n],\"bbox\":[0,0,1,1]}}\n"
        );
        assert_eq!(split_all_ways(&input), vec![A, B]);
        let empty = r#"{"type":"FeatureCollection","features":[]}"#;
        assert!(split_all_ways(empty).is_empty());
    }

    #[test]
    fn a_text_sequence_gives_its_records() {
        let rs = format!("\x1e{A}\n\x1e{B}\n");
        assert_eq!(split_all_ways(&rs), vec![A, B]);
        let lines = format!("{A}\n{B}\n\n{A}");
        assert_eq!(split_all_ways(&lines), vec![A, B, A]);
        // Collections in a sequence give their features.
        let mixed = format!("{{\"features\":[{A}],\"type\":\"FeatureCollection\"}}\n{B}");
        assert_eq!(split_all_ways(&mixed), vec![A, B]);
    }

    #[test]
    fn broken_input_is_named_where_it_breaks() {
        let cases = [
            (
                format!("[{A}]"),
                "byte 0: expected a GeoJSON object ('{'), found '['",
            ),
            (
                format!("{{\"features\":[{A} {B}]}}"),
                "expected ',' or ']' after a feature, found '{'",
            ),
            (
                format!("{{\"features\":[{A},"),
                "the input ends inside a FeatureCollection (which starts at byte 0)",
            ),
            (
                format!("{A}\n{{\"type\":\"Feature\",\"properties\":{{\"s\":\"open"),
                "the input ends inside feature 1",
            ),
            (
                "{\"features\":[1]}".into(),
                "expected a feature ('{') or ']', found '1'",
            ),
            (
                "{\"a\" 1}".into(),
                "expected ':' after a member name, found '1'",
            ),
        ];
        for (input, message) in cases {
            let error = split(input.as_bytes(), 7).unwrap_err().to_string();
            assert!(error.contains(message), "{input}: {error}");
        }
    }

    #[test]
    fn a_feature_larger_than_the_limit_is_refused() {
        let input = format!("{A}\n{{\"s\":\"{}", "x".repeat(10_000));
        let mut splitter = Splitter::new(
            std::io::BufReader::with_capacity(64, input.as_bytes()),
            1000,
        );
        let mut out = Vec::new();
        assert_eq!(splitter.next_into(&mut out).unwrap(), Some(0));
        let error = splitter.next_into(&mut out).unwrap_err().to_string();
        assert!(error.starts_with("feature 1 (from byte"), "{error}");
        assert!(out.len() <= A.len() + 1000 + 64, "{}", out.len());
    }
}
