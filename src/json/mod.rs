//! A validating JSON reader over borrowed text, built for request bodies.
//!
//! The callers walk the document themselves (objects, arrays, strings,
//! numbers), so a body is checked and read in one pass without a tree of
//! values and without a serde visitor per value: request parsing is the
//! service's hottest loop. Strings without escapes and skipped values are
//! borrowed from the input.

mod float;

use std::borrow::Cow;

/// Nesting deeper than this is refused (as serde_json does), so hostile
/// input cannot exhaust the stack.
const MAX_DEPTH: u32 = 128;

/// Where and why the text is not JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntaxError {
    /// Byte offset of the problem.
    pub offset: usize,
    /// What was wrong there.
    pub what: &'static str,
}

impl SyntaxError {
    /// The problem with its line and column (1-based) in `text`.
    pub fn describe(&self, text: &str) -> String {
        let before = &text.as_bytes()[..self.offset.min(text.len())];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let column = before.len()
            - before
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |p| p + 1);
        format!("{} at line {line} column {}", self.what, column + 1)
    }

    /// The problem without its place (for text that is part of a larger body).
    pub fn message(&self) -> &'static str {
        self.what
    }
}

/// A number as read: where it starts, its sign, its decimal digits as an
/// integer (wrapping beyond 19 digits, when `digits` says so) and the power
/// of ten to scale them by.
struct Decimal {
    start: usize,
    negative: bool,
    significand: u64,
    digits: usize,
    scale: i64,
}

/// A reading step failed; the reader keeps why ([`Reader::error`]), so the
/// result of every step stays small enough for registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stop;

/// Result of a reading step.
pub type Read<T> = Result<T, Stop>;

/// A cursor over JSON text; see the module documentation.
pub struct Reader<'a> {
    text: &'a str,
    pos: usize,
    depth: u32,
    /// Why reading stopped, once it has.
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `text`.
    pub fn new(text: &'a str) -> Self {
        Reader {
            text,
            pos: 0,
            depth: 0,
            what: "",
        }
    }

    /// A reader at the start of `text`, which is nested `depth` levels deep
    /// in a larger document (a part of a body read as it arrives): the
    /// nesting limit counts the levels around it.
    pub fn nested(text: &'a str, depth: u32) -> Self {
        Reader {
            depth,
            ..Reader::new(text)
        }
    }

    /// Bytes of the text read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    #[cold]
    #[inline(never)]
    fn fail<T>(&mut self, what: &'static str) -> Read<T> {
        self.what = what;
        Err(Stop)
    }

    /// Where and why reading stopped (after a step returned [`Stop`]).
    pub fn error(&self) -> SyntaxError {
        SyntaxError {
            offset: self.pos,
            what: self.what,
        }
    }

    /// The next byte that is not whitespace, without consuming it (0 at the end).
    #[inline(always)]
    pub fn peek(&mut self) -> u8 {
        let bytes = self.text.as_bytes();
        while let Some(&b) = bytes.get(self.pos) {
            // Every whitespace byte is at most a space: one test for the usual case.
            if b > b' ' {
                return b;
            }
            match b {
                b' ' | b'\n' | b'\r' | b'\t' => self.pos += 1,
                _ => return b,
            }
        }
        0
    }

    /// Only whitespace is left.
    pub fn end(&mut self) -> Read<()> {
        self.peek();
        if self.pos == self.text.len() {
            Ok(())
        } else {
            self.fail("trailing characters")
        }
    }

    #[inline(always)]
    fn enter(&mut self) -> Read<()> {
        self.depth += 1;
        self.pos += 1;
        if self.depth > MAX_DEPTH {
            return self.fail("recursion limit exceeded");
        }
        Ok(())
    }

    /// Enter the object that comes next, if it is one (`false`: nothing consumed).
    #[inline(always)]
    pub fn object(&mut self) -> Read<bool> {
        match self.peek() {
            b'{' => self.enter().map(|()| true),
            _ => Ok(false),
        }
    }

    /// Enter the array that comes next, if it is one (`false`: nothing consumed).
    #[inline(always)]
    pub fn array(&mut self) -> Read<bool> {
        match self.peek() {
            b'[' => self.enter().map(|()| true),
            _ => Ok(false),
        }
    }

    /// Whether the value that comes next is `null` (consumed if so).
    #[inline(always)]
    pub fn null(&mut self) -> Read<bool> {
        match self.peek() {
            b'n' => self.literal(b"null").map(|()| true),
            _ => Ok(false),
        }
    }

    /// The next member name of the object entered last, positioned at its
    /// value; `None` after its closing brace. `first` starts `true`.
    #[inline(always)]
    pub fn member(&mut self, first: &mut bool) -> Read<Option<Cow<'a, str>>> {
        if !self.at_key(first)? {
            return Ok(None);
        }
        let name = self.quoted()?;
        self.colon()?;
        Ok(Some(name))
    }

    /// Like [`Reader::member`], for objects whose members that matter have
    /// known names: the index of the name in `names`, or `names.len()` for
    /// any other.
    #[inline(always)]
    pub fn member_named(&mut self, first: &mut bool, names: &[&str]) -> Read<Option<usize>> {
        if !self.at_key(first)? {
            return Ok(None);
        }
        let index = self.quoted_among(names)?.unwrap_or(names.len());
        self.colon()?;
        Ok(Some(index))
    }

    /// Whether the object entered last has another member, with the cursor
    /// on its name's opening quote.
    #[inline(always)]
    fn at_key(&mut self, first: &mut bool) -> Read<bool> {
        if !self.more(b'}', first, "expected `,` or `}`")? {
            return Ok(false);
        }
        if self.peek() != b'"' {
            return self.fail("key must be a string");
        }
        Ok(true)
    }

    /// The `:` after a member name.
    #[inline(always)]
    fn colon(&mut self) -> Read<()> {
        if self.peek() != b':' {
            return self.fail("expected `:`");
        }
        self.pos += 1;
        Ok(())
    }

    /// A string that is most likely one of `names`: its index there, or
    /// (`Err`) the string itself.
    #[inline]
    pub fn string_among(&mut self, names: &[&str]) -> Read<Result<usize, Cow<'a, str>>> {
        if self.peek() != b'"' {
            return self.fail("expected a string");
        }
        self.quoted_among(names)
    }

    /// The string whose opening quote is at the cursor, as its index in
    /// `names` or (`Err`) itself. A string written without escapes is
    /// compared in place, which is most of the cost of reading a feature's
    /// keys.
    #[inline(always)]
    fn quoted_among(&mut self, names: &[&str]) -> Read<Result<usize, Cow<'a, str>>> {
        let rest = &self.text.as_bytes()[self.pos + 1..];
        let known = names.iter().position(|name| {
            let n = name.len();
            rest.get(n) == Some(&b'"') && rest[..n] == *name.as_bytes()
        });
        if let Some(i) = known {
            self.pos += names[i].len() + 2;
            return Ok(Ok(i));
        }
        let string = self.quoted()?;
        Ok(names.iter().position(|n| *n == string).ok_or(string))
    }

    /// Whether the array entered last has another element (positioned at it).
    /// `first` starts `true`.
    #[inline(always)]
    pub fn element(&mut self, first: &mut bool) -> Read<bool> {
        self.more(b']', first, "expected `,` or `]`")
    }

    #[inline(always)]
    fn more(&mut self, close: u8, first: &mut bool, expected: &'static str) -> Read<bool> {
        let b = self.peek();
        if b == close {
            self.pos += 1;
            self.depth -= 1;
            return Ok(false);
        }
        if *first {
            *first = false;
            return match b {
                0 => self.fail("EOF while parsing"),
                _ => Ok(true),
            };
        }
        if b != b',' {
            return self.fail(if b == 0 {
                "EOF while parsing"
            } else {
                expected
            });
        }
        self.pos += 1;
        if self.peek() == close {
            return self.fail("trailing comma");
        }
        Ok(true)
    }

    /// Read a string (the next value must be one), borrowed unless it has escapes.
    #[inline]
    pub fn string(&mut self) -> Read<Cow<'a, str>> {
        if self.peek() != b'"' {
            return self.fail("expected a string");
        }
        self.quoted()
    }

    /// Read the string whose opening quote is at the cursor.
    #[inline]
    fn quoted(&mut self) -> Read<Cow<'a, str>> {
        let start = self.pos + 1;
        let end = self.plain_run(start);
        match self.text.as_bytes().get(end) {
            Some(b'"') => {
                self.pos = end + 1;
                Ok(Cow::Borrowed(&self.text[start..end]))
            }
            _ => {
                self.pos = end;
                let mut out = String::from(&self.text[start..end]);
                self.escaped(Some(&mut out))?;
                Ok(Cow::Owned(out))
            }
        }
    }

    /// The end of the run of string bytes from `from` that need no attention
    /// (anything but a quote, a backslash or a control character).
    #[inline]
    fn plain_run(&self, from: usize) -> usize {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        let bytes = self.text.as_bytes();
        let mut i = from;
        // Eight bytes at a time: a byte's high bit is set in `found` where it
        // is a quote, a backslash or below 0x20. Borrows only run upwards,
        // so the lowest set bit marks the first such byte exactly.
        while let Some(chunk) = bytes.get(i..i + 8) {
            let x = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
            let quote = x ^ (ONES * u64::from(b'"'));
            let backslash = x ^ (ONES * u64::from(b'\\'));
            let found = (quote.wrapping_sub(ONES) & !quote
                | backslash.wrapping_sub(ONES) & !backslash
                | x.wrapping_sub(ONES * 0x20) & !x)
                & HIGH;
            if found != 0 {
                return i + (found.trailing_zeros() / 8) as usize;
            }
            i += 8;
        }
        while i < bytes.len() && !matches!(bytes[i], b'"' | b'\\' | 0..=0x1f) {
            i += 1;
        }
        i
    }

    /// The rest of a string from an escape, a control character or the end:
    /// checked, and decoded into `out` when given.
    fn escaped(&mut self, mut out: Option<&mut String>) -> Read<()> {
        let bytes = self.text.as_bytes();
        loop {
            let end = self.plain_run(self.pos);
            if let Some(out) = out.as_deref_mut() {
                out.push_str(&self.text[self.pos..end]);
            }
            self.pos = end;
            match bytes.get(end) {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(b'\\') => {}
                Some(_) => return self.fail("control character in string"),
                None => return self.fail("EOF while parsing a string"),
            }
            self.pos += 1;
            let decoded = match bytes.get(self.pos) {
                Some(b'"') => '"',
                Some(b'\\') => '\\',
                Some(b'/') => '/',
                Some(b'b') => '\u{8}',
                Some(b'f') => '\u{c}',
                Some(b'n') => '\n',
                Some(b'r') => '\r',
                Some(b't') => '\t',
                Some(b'u') => {
                    self.pos += 1;
                    let unit = self.hex4()?;
                    // Skipped text is not decoded: a lone surrogate fails
                    // only where the value is used (as serde_json does).
                    if let Some(out) = out.as_deref_mut() {
                        out.push(self.utf16(unit)?);
                    }
                    continue;
                }
                _ => return self.fail("invalid escape"),
            };
            if let Some(out) = out.as_deref_mut() {
                out.push(decoded);
            }
            self.pos += 1;
        }
    }

    /// Four hex digits of a `\u` escape.
    fn hex4(&mut self) -> Read<u16> {
        let digits = self.text.as_bytes().get(self.pos..self.pos + 4);
        let value = digits.and_then(|d| {
            d.iter().try_fold(0u16, |acc, &b| {
                let v = (b as char).to_digit(16)?;
                Some(acc << 4 | v as u16)
            })
        });
        match value {
            Some(v) => {
                self.pos += 4;
                Ok(v)
            }
            None => self.fail("invalid escape"),
        }
    }

    /// The character of a `\u` escape, joining a surrogate pair.
    fn utf16(&mut self, unit: u16) -> Read<char> {
        if !(0xD800..0xDC00).contains(&unit) {
            return match char::from_u32(unit.into()) {
                Some(c) => Ok(c),
                None => self.fail("lone trailing surrogate in hex escape"),
            };
        }
        if self.text.as_bytes().get(self.pos..self.pos + 2) != Some(b"\\u") {
            return self.fail("lone leading surrogate in hex escape");
        }
        self.pos += 2;
        let low = self.hex4()?;
        if !(0xDC00..0xE000).contains(&low) {
            return self.fail("lone leading surrogate in hex escape");
        }
        let c = 0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(low) - 0xDC00);
        match char::from_u32(c) {
            Some(c) => Ok(c),
            None => self.fail("invalid escape"),
        }
    }

    fn literal(&mut self, word: &'static [u8]) -> Read<()> {
        let bytes = self.text.as_bytes();
        if bytes.get(self.pos..self.pos + word.len()) == Some(word) {
            self.pos += word.len();
            Ok(())
        } else {
            self.fail("expected value")
        }
    }

    /// Read a number (the next value must be one) as the nearest f64.
    pub fn number(&mut self) -> Read<f64> {
        self.peek();
        let d = self.decimal()?;
        let value = match float::from_decimal(d.significand, d.digits, d.scale) {
            Some(value) => value,
            None => {
                let text = &self.text[d.start + usize::from(d.negative)..self.pos];
                text.parse::<f64>().unwrap_or(f64::INFINITY)
            }
        };
        if value.is_infinite() {
            self.pos = d.start;
            return self.fail("number out of range");
        }
        Ok(if d.negative { -value } else { value })
    }

    /// Check the number at the cursor and move past it, with its decimal
    /// significand and exponent (for [`Reader::number`]'s fast path).
    #[inline(always)]
    fn decimal(&mut self) -> Read<Decimal> {
        let bytes = self.text.as_bytes();
        let start = self.pos;
        let negative = bytes.get(start) == Some(&b'-');
        let mut pos = start + usize::from(negative);
        let mut significand: u64 = 0;
        // Digits from `pos` on, added to the significand; how many there were.
        let mut run = |pos: &mut usize| {
            let first = *pos;
            while let Some(chunk) = bytes.get(*pos..*pos + 8) {
                let (n, value) = float::leading_digits(u64::from_le_bytes(
                    chunk.try_into().expect("eight bytes"),
                ));
                significand = significand
                    .wrapping_mul(float::SCALE[n])
                    .wrapping_add(value);
                *pos += n;
                if n < 8 {
                    return *pos - first;
                }
            }
            // The last few bytes of the text.
            while let Some(digit) = bytes.get(*pos).map(|b| b.wrapping_sub(b'0')) {
                if digit > 9 {
                    break;
                }
                significand = significand.wrapping_mul(10).wrapping_add(u64::from(digit));
                *pos += 1;
            }
            *pos - first
        };
        let int_start = pos;
        let int_digits = run(&mut pos);
        let mut ok = int_digits > 0 && !(int_digits > 1 && bytes[int_start] == b'0');
        let mut digits = int_digits;
        let mut scale: i64 = 0;
        if ok && bytes.get(pos) == Some(&b'.') {
            pos += 1;
            let fraction = run(&mut pos);
            ok = fraction > 0;
            digits += fraction;
            scale = -(fraction as i64);
        }
        if ok && matches!(bytes.get(pos), Some(b'e' | b'E')) {
            pos += 1;
            let minus = bytes.get(pos) == Some(&b'-');
            pos += usize::from(matches!(bytes.get(pos), Some(b'-' | b'+')));
            let exp_start = pos;
            let mut exponent: i64 = 0;
            while let Some(&d @ b'0'..=b'9') = bytes.get(pos) {
                exponent = (exponent * 10 + i64::from(d - b'0')).min(1 << 40);
                pos += 1;
            }
            ok = pos > exp_start;
            scale += if minus { -exponent } else { exponent };
        }
        self.pos = pos;
        if !ok {
            return self.fail("invalid number");
        }
        Ok(Decimal {
            start,
            negative,
            significand,
            digits,
            scale,
        })
    }

    /// Skip the next value, checking its syntax, and return its text.
    pub fn raw(&mut self) -> Read<&'a str> {
        self.peek();
        let start = self.pos;
        self.skip()?;
        Ok(&self.text[start..self.pos])
    }

    /// Skip the next value, checking its syntax.
    pub fn skip(&mut self) -> Read<()> {
        match self.peek() {
            b'"' => {
                self.pos += 1;
                self.escaped(None)
            }
            b'-' | b'0'..=b'9' => self.skip_number(),
            b'{' => {
                self.enter()?;
                let mut first = true;
                while self.member(&mut first)?.is_some() {
                    self.skip()?;
                }
                Ok(())
            }
            b'[' => {
                self.enter()?;
                let mut first = true;
                while self.element(&mut first)? {
                    self.skip()?;
                }
                Ok(())
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            0 => self.fail("EOF while parsing a value"),
            _ => self.fail("expected value"),
        }
    }

    /// A number's syntax only: its value is read later from its text, when needed.
    fn skip_number(&mut self) -> Read<()> {
        self.decimal().map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn number(text: &str) -> Result<f64, SyntaxError> {
        let mut r = Reader::new(text);
        let v = r.number().and_then(|v| r.end().map(|()| v));
        v.map_err(|Stop| r.error())
    }

    fn valid(text: &str) -> bool {
        let mut r = Reader::new(text);
        r.skip().and_then(|()| r.end()).is_ok()
    }

    #[test]
    fn numbers_are_correctly_rounded() {
        for text in [
            "0",
            "-0",
            "1",
            "-10.0",
            "35.00213",
            "0.1",
            "1e22",
            "1e23",
            "123456789012345678",
            "9007199254740993",
            "2.2250738585072014e-308",
            "1.7976931348623157e308",
            "4.9e-324",
            "0.30000000000000004",
            "-123.456e-7",
            "1E+2",
        ] {
            assert_eq!(number(text), Ok(text.parse::<f64>().unwrap()), "{text}");
        }
        assert_eq!(number("1e400").unwrap_err().what, "number out of range");
        for bad in ["01", "1.", ".5", "-", "1e", "+1", "1.e5", "--1"] {
            assert!(number(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn strings_decode_escapes_and_borrow_otherwise() {
        let mut r = Reader::new(r#""plain""#);
        assert!(matches!(r.string(), Ok(Cow::Borrowed("plain"))));
        let mut r = Reader::new(r#""a\"b\\c\/\n\u00e9\ud83d\ude00""#);
        assert_eq!(r.string().unwrap(), "a\"b\\c/\né😀");
        for bad in [
            r#""\ud800""#,
            r#""\udc00""#,
            r#""\x""#,
            "\"a\u{1}\"",
            r#""open"#,
        ] {
            assert!(Reader::new(bad).string().is_err(), "{bad}");
        }
    }

    #[test]
    fn skipping_checks_the_syntax() {
        for good in [
            "{}",
            "[]",
            r#"{"a":[1,{"b":null}],"c":"\u0041"}"#,
            " true ",
            "false",
            "-0.5e-3",
            r#""\ud800""#,
        ] {
            assert!(valid(good), "{good}");
        }
        for bad in [
            "",
            "{",
            "[1,]",
            r#"{"a":1,}"#,
            "{'a':1}",
            "[1 2]",
            "NaN",
            "Infinity",
            "nul",
            "{} {}",
            r#"{"a"}"#,
            r#"{1:2}"#,
            "\u{feff}{}",
        ] {
            assert!(!valid(bad), "{bad}");
        }
        let deep = format!("{}{}", "[".repeat(129), "]".repeat(129));
        assert!(!valid(&deep));
        let fine = format!("{}{}", "[".repeat(128), "]".repeat(128));
        assert!(valid(&fine));
    }

    #[test]
    fn errors_name_line_and_column() {
        let text = "{\n  \"a\": tru\n}";
        let mut r = Reader::new(text);
        assert_eq!(r.skip(), Err(Stop));
        assert_eq!(
            r.error().describe(text),
            "expected value at line 2 column 8"
        );
    }
}
