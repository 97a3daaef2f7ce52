//! A FeatureCollection read as it arrives, a chunk at a time: each feature
//! is validated as soon as its bytes are in and handed on as a row, so that
//! a large body is never held whole.
//!
//! A body is streamed when it is a GeoJSON FeatureCollection that says so
//! (`type`) before its `features`, as GeoJSON writers put it. Any other body
//! (JSON-FG among them: asked for by its media type, or with a `conformsTo`
//! before its features) is held whole and read by [`parse_body`], so that
//! its answer is the one it always had. A feature that a chunk cuts short is read again once more bytes have
//! arrived; each retry waits for at least twice the bytes, so that the cost
//! stays linear.

use bytes::Bytes;

use super::input::{feature_element, top_member, Kind, TopMember};
use super::{
    invalid_json, not_geojson, not_utf8, parse_body, repeated_features, too_many_features,
    FeatureRow, ParsedBody, Reading, Validator,
};
use crate::catalog::Collection;
use crate::error::{Error, FieldError};
use crate::json::{Read, Reader, SyntaxError};

/// How a body read as it arrived was read.
pub enum Streamed {
    /// Not a FeatureCollection naming its type first: held whole and read by
    /// [`parse_body`].
    Whole(Result<ParsedBody, Error>),
    /// Its rows went to the caller as they were read, up to the first
    /// problem: the column sets they use, or why the body is refused.
    Rows(Result<Vec<Vec<usize>>, Error>),
}

/// A problem this close to the end of the bytes in may be one of a value
/// cut short (an escape, a literal): it is looked at again with more bytes.
const LOOKAHEAD: usize = 16;

/// What becomes of one feature of a streamed body: its row, or (with
/// [`Reading::keep_valid`]) its first problem.
pub type Checked = Result<FeatureRow, Box<FieldError>>;

/// What is told each feature of a streamed body: its index, what became of
/// it, and the column sets known so far.
pub type OnFeature<'a> = dyn FnMut(usize, Checked, &[Vec<usize>]) + 'a;

/// Read the body that `chunks` yield (all of them, whatever is found) and
/// validate it against `coll`. While it is clean, each valid feature goes to
/// `on_row` with its index and the column sets known so far; with
/// [`Reading::keep_valid`] every feature does, an invalid one as its first
/// problem, and invalid features do not refuse the body.
pub fn parse_stream(
    chunks: impl Iterator<Item = Bytes>,
    coll: &Collection,
    how: &Reading,
    on_row: &mut OnFeature<'_>,
) -> Streamed {
    let mut w = Window::new(chunks);
    // JSON-FG (asked for, or a `conformsTo` before the features) is read
    // whole: what its root says decides how every feature is read.
    let prefix = match how.jsonfg {
        true => None,
        false => w
            .prefix(how.limits.positions)
            .filter(|_| !w.text.contains("\"conformsTo\"")),
    };
    let streamed = match prefix {
        Some(at) => {
            let mut body = Body {
                v: Validator::new(coll, how, None),
                how,
                place: Place::Elements { first: true },
                index: 0,
                too_many: false,
                kind: Kind::FeatureCollection,
                repeated: false,
            };
            let read = body.read(&mut w, at, on_row);
            Streamed::Rows(w.utf8_error().map_or_else(|| body.end(read), Err))
        }
        None => Streamed::Whole(w.whole(coll, how)),
    };
    // The rest of the body still has to arrive (its size and time limits
    // are checked by whoever reads it): drained, not read.
    w.chunks.for_each(drop);
    streamed
}

/// The body's text from the first byte not yet read (or from the start,
/// before streaming begins), growing a chunk at a time.
struct Window<I> {
    chunks: I,
    text: String,
    /// The bytes of a character the last chunk cut.
    pending: Vec<u8>,
    /// The body offset of `text`'s first byte.
    base: usize,
    /// Newlines before `base`, and the body offset after the last of them.
    lines: usize,
    line_start: usize,
    /// No more bytes will come: the body ended, or stopped being UTF-8.
    ended: bool,
    /// Why the bytes are not UTF-8, as `std::str::Utf8Error` says it.
    utf8: Option<String>,
}

impl<I: Iterator<Item = Bytes>> Window<I> {
    fn new(chunks: I) -> Self {
        Window {
            chunks,
            text: String::new(),
            pending: Vec::new(),
            base: 0,
            lines: 0,
            line_start: 0,
            ended: false,
            utf8: None,
        }
    }

    /// Take the next chunk; `false` when no more will come.
    fn more(&mut self) -> bool {
        if self.ended {
            return false;
        }
        let Some(chunk) = self.chunks.next() else {
            self.ended = true;
            if !self.pending.is_empty() {
                let at = self.base + self.text.len();
                self.utf8 = Some(format!("incomplete utf-8 byte sequence from index {at}"));
            }
            return false;
        };
        let joined;
        let bytes: &[u8] = if self.pending.is_empty() {
            &chunk
        } else {
            self.pending.extend_from_slice(&chunk);
            joined = std::mem::take(&mut self.pending);
            &joined
        };
        match std::str::from_utf8(bytes) {
            Ok(text) => self.text.push_str(text),
            Err(e) => {
                let good = e.valid_up_to();
                let valid = std::str::from_utf8(&bytes[..good]).expect("valid up to there");
                self.text.push_str(valid);
                match e.error_len() {
                    None => self.pending = bytes[good..].to_vec(),
                    Some(n) => {
                        let at = self.base + self.text.len();
                        self.utf8 = Some(format!(
                            "invalid utf-8 sequence of {n} bytes from index {at}"
                        ));
                        self.ended = true;
                    }
                }
            }
        }
        true
    }

    /// Grow the text until it holds at least twice the bytes after `from`
    /// that it held; whether it grew at all.
    fn grow(&mut self, from: usize) -> bool {
        let want = (self.text.len() - from) * 2 + 1;
        let before = self.text.len();
        while self.text.len() - from < want && self.more() {}
        self.text.len() > before
    }

    /// Forget the first `n` bytes (read, and no longer needed).
    fn forget(&mut self, n: usize) {
        let gone = &self.text.as_bytes()[..n];
        self.lines += memchr::memchr_iter(b'\n', gone).count();
        if let Some(last) = memchr::memrchr(b'\n', gone) {
            self.line_start = self.base + last + 1;
        }
        self.base += n;
        self.text.drain(..n);
    }

    /// Whether a problem found at `offset` of the text may be the text's end
    /// cutting a value short.
    fn cut_short(&self, offset: usize) -> bool {
        !self.ended && offset + LOOKAHEAD >= self.text.len()
    }

    /// `e` (at an offset of the text) with its line and column in the body.
    fn describe(&self, e: &SyntaxError) -> String {
        let before = &self.text.as_bytes()[..e.offset.min(self.text.len())];
        let line = self.lines + memchr::memchr_iter(b'\n', before).count() + 1;
        let column = match memchr::memrchr(b'\n', before) {
            Some(last) => before.len() - (last + 1),
            None => self.base + before.len() - self.line_start,
        };
        format!("{} at line {line} column {}", e.what, column + 1)
    }

    fn utf8_error(&self) -> Option<Error> {
        self.utf8.as_deref().map(not_utf8)
    }

    /// Read the start of the body: the offset just inside its `features`
    /// array when it is a FeatureCollection that says so first, else `None`.
    fn prefix(&mut self, max_positions: usize) -> Option<usize> {
        loop {
            let mut r = Reader::new(&self.text);
            let error = match streams_at(&mut r, max_positions) {
                Ok(at) => return at,
                Err(_) => r.error(),
            };
            if !(self.cut_short(error.offset) && self.grow(0)) {
                return None;
            }
        }
    }

    /// The whole body, read as [`parse_body`] reads it.
    fn whole(&mut self, coll: &Collection, how: &Reading) -> Result<ParsedBody, Error> {
        while self.more() {}
        match self.utf8_error() {
            Some(e) => Err(e),
            None => parse_body(self.text.as_bytes(), coll, how),
        }
    }
}

/// Where a FeatureCollection's features start, if it names its type first.
fn streams_at(r: &mut Reader<'_>, max_positions: usize) -> Read<Option<usize>> {
    if r.peek() == 0 {
        r.skip()?; // nothing yet: an error at the end, which asks for more
    }
    if !r.object()? {
        return Ok(None);
    }
    let (mut first, mut kind) = (true, None);
    while let Some(member) = top_member(r, &mut first, max_positions)? {
        match member {
            TopMember::Type(k) => kind = Some(k),
            TopMember::Features if kind == Some(Kind::FeatureCollection) => {
                if r.array()? {
                    return Ok(Some(r.position()));
                }
                r.skip()?; // not an array, or not here yet
                return Ok(None);
            }
            TopMember::Features => return Ok(None),
            TopMember::Other => {}
        }
    }
    Ok(None)
}

/// Where the reading of a streamed body is.
#[derive(Clone, Copy)]
enum Place {
    /// In a `features` array.
    Elements { first: bool },
    /// Among the body's other members.
    Members { first: bool },
    /// After the body's closing brace.
    End,
}

/// The state of a FeatureCollection read as it arrives.
struct Body<'a> {
    v: Validator<'a>,
    how: &'a Reading,
    place: Place,
    /// The index of the next feature.
    index: usize,
    /// More features than a body may have: read on for the syntax only.
    too_many: bool,
    /// What the last `type` member said.
    kind: Kind,
    /// `features` was given again after the streamed one.
    repeated: bool,
}

impl Body<'_> {
    /// Read from offset `at` of the window to the end of the body; the first
    /// syntax error, described.
    fn read<I: Iterator<Item = Bytes>>(
        &mut self,
        w: &mut Window<I>,
        mut at: usize,
        on_row: &mut OnFeature<'_>,
    ) -> Result<(), String> {
        loop {
            let depth = match self.place {
                Place::Elements { .. } => 2,
                Place::Members { .. } => 1,
                Place::End => 0,
            };
            let text = &w.text[at..];
            // An item that ends this close to the end of the bytes in may
            // go on (a number): it is read again with more.
            let limit = match w.ended {
                true => usize::MAX,
                false => text.len().saturating_sub(LOOKAHEAD),
            };
            let mut r = Reader::nested(text, depth);
            let mut done = 0;
            let error = match self.steps(&mut r, limit, &mut done, on_row) {
                Ok(true) => return Ok(()),
                Ok(false) => None,
                Err(_) => Some(r.error()),
            };
            if let Some(e) = &error {
                if !w.cut_short(at + e.offset) {
                    let offset = at + e.offset;
                    return Err(w.describe(&SyntaxError {
                        offset,
                        ..e.clone()
                    }));
                }
            }
            // What was read is forgotten; the rest is read again with more bytes.
            w.forget(at + done);
            at = 0;
            if !w.grow(0) {
                // No more bytes: a problem stands; else read on to the end.
                if let Some(e) = error {
                    let offset = e.offset - done;
                    return Err(w.describe(&SyntaxError { offset, ..e }));
                }
            }
        }
    }

    /// Read whole items (a feature, a member, the end) from `r`, setting
    /// `done` to the bytes read after each; an item that ends past `limit` is
    /// left for later. `true` at the end of the body, `false` when more bytes
    /// are needed.
    fn steps(
        &mut self,
        r: &mut Reader<'_>,
        limit: usize,
        done: &mut usize,
        on_row: &mut OnFeature<'_>,
    ) -> Read<bool> {
        loop {
            match self.place {
                Place::Elements { mut first } => {
                    let feature = match r.element(&mut first)? {
                        true => Some(feature_element(r, self.how.limits.positions)?),
                        false => None,
                    };
                    if r.position() > limit {
                        return Ok(false);
                    }
                    let Some(feature) = feature else {
                        self.place = Place::Members { first: false };
                        *done = r.position();
                        continue;
                    };
                    let i = self.index;
                    self.index += 1;
                    self.place = Place::Elements { first };
                    if i >= self.how.limits.features {
                        self.too_many = true;
                    } else {
                        let row = self.v.feature(i, Some(i), &feature);
                        let checked = match row {
                            Some(row) => Some(Ok(row)),
                            // Set aside with its first problem (`keep_valid`).
                            None => self.v.rejected.pop().map(|(_, e)| Err(e)),
                        };
                        let clean = self.v.total == 0 || self.how.keep_valid;
                        if let Some(checked) = checked.filter(|_| clean && !self.too_many) {
                            on_row(i, checked, &self.v.shapes);
                        }
                    }
                }
                Place::Members { mut first } => {
                    let member = top_member(r, &mut first, self.how.limits.positions)?;
                    if let Some(TopMember::Features) = member {
                        r.skip()?; // a second `features`: read for its syntax only
                    }
                    if r.position() > limit {
                        return Ok(false);
                    }
                    self.place = match member {
                        None => Place::End,
                        Some(TopMember::Type(kind)) => {
                            self.kind = kind;
                            Place::Members { first }
                        }
                        Some(TopMember::Features) => {
                            self.repeated = true;
                            Place::Members { first }
                        }
                        Some(TopMember::Other) => Place::Members { first },
                    };
                }
                // Only whitespace may follow; the end is known once no byte does.
                Place::End => {
                    r.end()?;
                    *done = r.position();
                    return Ok(limit == usize::MAX);
                }
            }
            *done = r.position();
        }
    }

    /// The answer once the whole body has been read, as [`parse_body`] gives it.
    fn end(self, read: Result<(), String>) -> Result<Vec<Vec<usize>>, Error> {
        read.map_err(|e| invalid_json(&e))?;
        if self.too_many {
            return Err(too_many_features(self.how.limits.features));
        }
        if self.kind != Kind::FeatureCollection {
            return Err(not_geojson());
        }
        if self.repeated {
            return Err(repeated_features());
        }
        if self.v.total == 0 || self.how.keep_valid {
            return Ok(self.v.shapes.clone());
        }
        Err(self.v.failure())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Column, ColumnType, ScalarType};
    use crate::feature::InputLimits;
    use crate::geometry::GeometryColumn;

    fn table() -> Collection {
        let mut id = Column::new("id", ColumnType::Scalar(ScalarType::Int4));
        id.default = Some("nextval('t_id_seq'::regclass)".into());
        let geom = GeometryColumn::from_typmod((4326 << 8) | (1 << 2), false);
        let columns = vec![
            id,
            Column::new(
                "name",
                ColumnType::Scalar(ScalarType::Text { max_chars: None }),
            ),
            Column::new("n", ColumnType::Scalar(ScalarType::Int4)),
            Column::new("geom", ColumnType::Geometry(geom)),
        ];
        Collection::new("t", columns, 3)
    }

    /// What `parse_body` makes of `body`, as text to compare.
    fn whole(body: &[u8], how: &Reading) -> String {
        match parse_body(body, &table(), how) {
            Ok(p) => format!("Ok({:?}, {:?})", p.rows, p.shapes),
            Err(e) => format!("Err({e:?})"),
        }
    }

    /// What reading `body` in chunks of `size` bytes makes of it, the same way.
    fn streamed(body: &[u8], size: usize, how: &Reading) -> (bool, String) {
        let chunks = body.chunks(size).map(Bytes::copy_from_slice);
        let mut rows = Vec::new();
        let outcome = parse_stream(chunks, &table(), how, &mut |_, row, _| {
            rows.push(row.expect("only valid rows are handed on"))
        });
        match outcome {
            Streamed::Whole(r) => (
                false,
                match r {
                    Ok(p) => format!("Ok({:?}, {:?})", p.rows, p.shapes),
                    Err(e) => format!("Err({e:?})"),
                },
            ),
            Streamed::Rows(Ok(shapes)) => (true, format!("Ok({rows:?}, {shapes:?})")),
            Streamed::Rows(Err(e)) => (true, format!("Err({e:?})")),
        }
    }

    fn point(i: usize) -> String {
        format!(
            r#"{{"type":"Feature","geometry":{{"type":"Point","coordinates":[{i}.25,-1e1]}},"properties":{{"name":"p\u00e9 {i}","n":{i}}}}}"#
        )
    }

    fn collection(features: &[String], after: &str) -> String {
        format!(
            "{{\"type\":\"FeatureCollection\",\n\"features\":[{}]{after}}}\n",
            features.join(",\n ")
        )
    }

    /// Every body answers as `parse_body` answers it, however it is cut.
    fn same_every_way(body: &str, streams: bool, how: &Reading) {
        let expected = whole(body.as_bytes(), how);
        for size in (1..40).chain([97, 4096]) {
            let (streaming, got) = streamed(body.as_bytes(), size, how);
            assert_eq!(streaming, streams, "{body}");
            assert_eq!(got, expected, "chunks of {size}: {body}");
        }
    }

    #[test]
    fn a_collection_is_read_as_parse_body_reads_it() {
        let how = Reading::default();
        let points: Vec<String> = (0..5).map(point).collect();
        same_every_way(&collection(&points, ""), true, &how);
        same_every_way(&collection(&points, ",\"bbox\":[1,2,3,40000]"), true, &how);
        same_every_way(&collection(&[], ""), true, &how);
        // Invalid features: every problem listed, with its pointer.
        let mut bad = points.clone();
        bad[1] = bad[1].replace("\"n\":1", "\"n\":\"one\"");
        bad[4] = bad[4].replace("\"name\"", "\"nom\"");
        same_every_way(&collection(&bad, ""), true, &how);
        // Not JSON: the line and column in the whole body.
        for broken in [
            collection(&points, ",").replace("]}", ""),
            collection(&points, "").replace("-1e1]", "-1e1,]"),
            collection(&points, "") + "x",
            collection(&points, "").replace("\\u00e9", "\\u00"),
            collection(&points, "").replace("]}\n", "]"),
            collection(&points, ",\"x\":tru"),
        ] {
            same_every_way(&broken, true, &how);
        }
        // Two `features` members: the second is read as today.
        same_every_way(
            &collection(&points, &format!(",\"features\":[{}]", points[0])),
            true,
            &how,
        );
        same_every_way(&collection(&points, ",\"features\":7"), true, &how);
        let few = Reading {
            limits: InputLimits {
                features: 3,
                ..InputLimits::default()
            },
            ..Reading::default()
        };
        same_every_way(&collection(&points, ""), true, &few);
    }

    #[test]
    fn other_bodies_are_held_whole() {
        let how = Reading::default();
        let points: Vec<String> = (0..3).map(point).collect();
        let type_last = format!(
            "{{\"features\":[{}],\"type\":\"FeatureCollection\"}}",
            points.join(",")
        );
        same_every_way(&type_last, false, &how);
        same_every_way(&point(7), false, &how);
        same_every_way("[1,2]", false, &how);
        // JSON-FG: its root decides how features are read.
        let fg = format!(
            "{{\"type\":\"FeatureCollection\",\"conformsTo\":[\"http://www.opengis.net/spec/json-fg-1/0.2/conf/core\"],\"features\":[{}]}}",
            points.join(",")
        );
        same_every_way(&fg, false, &how);
        same_every_way(
            "{\"type\":\"FeatureCollection\",\"features\":{}}",
            false,
            &how,
        );
    }

    #[test]
    fn bytes_that_are_not_utf8_are_named_where_they_are() {
        let how = Reading::default();
        let points: Vec<String> = (0..3).map(point).collect();
        let body = collection(&points, "");
        for cut in [body.len() - 30, body.len() - 1] {
            let mut bytes = body.as_bytes().to_vec();
            bytes.insert(cut, 0xff);
            let expected = whole(&bytes, &how);
            for size in 1..20 {
                assert_eq!(streamed(&bytes, size, &how).1, expected, "{size}");
            }
        }
        // A character cut short by the end of the body.
        let mut bytes = body.as_bytes().to_vec();
        bytes.extend_from_slice(&[0xc3]);
        assert_eq!(streamed(&bytes, 5, &how).1, whole(&bytes, &how));
    }
}
