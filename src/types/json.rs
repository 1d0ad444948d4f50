//! JSON as PostgreSQL's `json` and `jsonb` read and write it.
//!
//! `json` keeps its text as written (once checked). `jsonb` is stored in
//! its canonical text, which is what PostgreSQL prints: object keys
//! sorted (shorter keys first, then bytewise) with the last of a
//! repeated key kept, `", "` and `": "` between items, numbers as
//! `numeric` prints them (`1e2` is `100`, `2.50` stays `2.50`), strings
//! with PostgreSQL's escapes. Canonical text makes equal documents equal
//! strings, so `=`, `GROUP BY` and joins on jsonb compare them as
//! PostgreSQL does.

use std::fmt::Write;

/// A parsed JSON document. Numbers keep their text (as `numeric` would
/// print it) so that no digit is lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(String),
    String(String),
    Array(Vec<Json>),
    /// Keys in the order given (see [`Json::canonical`] for jsonb's).
    Object(Vec<(String, Json)>),
}

/// Text that is not JSON (22P02, `invalid input syntax for type json`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid input syntax for type json")]
pub struct JsonError {
    pub detail: String,
}

pub fn parse(text: &str) -> Result<Json, JsonError> {
    let mut p = Parser {
        b: text.as_bytes(),
        at: 0,
        depth: 0,
    };
    p.space();
    let v = p.value()?;
    p.space();
    if p.at != p.b.len() {
        return Err(p.error("Expected end of input"));
    }
    Ok(v)
}

/// `text` as canonical jsonb text.
pub fn jsonb_text(text: &str) -> Result<String, JsonError> {
    Ok(parse(text)?.canonical().to_string())
}

struct Parser<'a> {
    b: &'a [u8],
    at: usize,
    depth: usize,
}

impl Parser<'_> {
    fn error(&self, what: &str) -> JsonError {
        JsonError {
            detail: format!("{what} at character {}", self.at + 1),
        }
    }

    fn space(&mut self) {
        while self.at < self.b.len() && matches!(self.b[self.at], b' ' | b'\t' | b'\n' | b'\r') {
            self.at += 1;
        }
    }

    fn value(&mut self) -> Result<Json, JsonError> {
        self.depth += 1;
        if self.depth > 6000 {
            return Err(self.error("JSON too deeply nested"));
        }
        let v = match self.b.get(self.at) {
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => self.string().map(Json::String),
            Some(b't') => self.word("true", Json::Bool(true)),
            Some(b'f') => self.word("false", Json::Bool(false)),
            Some(b'n') => self.word("null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.error("Expected JSON value")),
        };
        self.depth -= 1;
        v
    }

    fn word(&mut self, w: &str, v: Json) -> Result<Json, JsonError> {
        if self.b[self.at..].starts_with(w.as_bytes()) {
            self.at += w.len();
            Ok(v)
        } else {
            Err(self.error("Token is invalid"))
        }
    }

    fn object(&mut self) -> Result<Json, JsonError> {
        self.at += 1;
        let mut items = Vec::new();
        self.space();
        if self.b.get(self.at) == Some(&b'}') {
            self.at += 1;
            return Ok(Json::Object(items));
        }
        loop {
            self.space();
            if self.b.get(self.at) != Some(&b'"') {
                return Err(self.error("Expected string"));
            }
            let key = self.string()?;
            self.space();
            if self.b.get(self.at) != Some(&b':') {
                return Err(self.error("Expected \":\""));
            }
            self.at += 1;
            self.space();
            let v = self.value()?;
            items.push((key, v));
            self.space();
            match self.b.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Json::Object(items));
                }
                _ => return Err(self.error("Expected \",\" or \"}\"")),
            }
        }
    }

    fn array(&mut self) -> Result<Json, JsonError> {
        self.at += 1;
        let mut items = Vec::new();
        self.space();
        if self.b.get(self.at) == Some(&b']') {
            self.at += 1;
            return Ok(Json::Array(items));
        }
        loop {
            self.space();
            items.push(self.value()?);
            self.space();
            match self.b.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err(self.error("Expected \",\" or \"]\"")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let h = self
            .b
            .get(self.at..self.at + 4)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or_else(|| self.error("\"\\u\" must be followed by four hexadecimal digits"))?;
        self.at += 4;
        Ok(h)
    }

    fn string(&mut self) -> Result<String, JsonError> {
        self.at += 1;
        let mut out = String::new();
        loop {
            let start = self.at;
            while self.at < self.b.len() && !matches!(self.b[self.at], b'"' | b'\\') {
                if self.b[self.at] < 0x20 {
                    return Err(self.error("Character with value 0x00-0x1f must be escaped"));
                }
                self.at += 1;
            }
            out.push_str(
                std::str::from_utf8(&self.b[start..self.at])
                    .map_err(|_| self.error("invalid UTF-8"))?,
            );
            match self.b.get(self.at) {
                Some(b'"') => {
                    self.at += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.at += 1;
                    let c = *self
                        .b
                        .get(self.at)
                        .ok_or_else(|| self.error("unfinished escape"))?;
                    self.at += 1;
                    match c {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let mut code = self.hex4()?;
                            if (0xd800..0xdc00).contains(&code) {
                                if self.b.get(self.at..self.at + 2) != Some(b"\\u") {
                                    return Err(self.error(
                                        "Unicode low surrogate must follow a high surrogate",
                                    ));
                                }
                                self.at += 2;
                                let low = self.hex4()?;
                                code = 0x10000
                                    + ((code - 0xd800) << 10)
                                    + (low.wrapping_sub(0xdc00) & 0x3ff);
                            }
                            if code == 0 {
                                return Err(self.error("\\u0000 cannot be converted to text"));
                            }
                            out.push(
                                char::from_u32(code)
                                    .ok_or_else(|| self.error("invalid Unicode escape"))?,
                            );
                        }
                        _ => return Err(self.error("Escape sequence is invalid")),
                    }
                }
                _ => return Err(self.error("unterminated string")),
            }
        }
    }

    fn number(&mut self) -> Result<Json, JsonError> {
        let start = self.at;
        if self.b.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        let digits = |p: &mut Self| {
            let s = p.at;
            while p.at < p.b.len() && p.b[p.at].is_ascii_digit() {
                p.at += 1;
            }
            p.at - s
        };
        let int = digits(self);
        if int == 0 || (int > 1 && self.b[self.at - int] == b'0') {
            return Err(self.error("Token is invalid"));
        }
        if self.b.get(self.at) == Some(&b'.') {
            self.at += 1;
            if digits(self) == 0 {
                return Err(self.error("Token is invalid"));
            }
        }
        if matches!(self.b.get(self.at), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.b.get(self.at), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return Err(self.error("Token is invalid"));
            }
        }
        let text = std::str::from_utf8(&self.b[start..self.at]).unwrap_or("0");
        Ok(Json::Number(numeric_text(text)))
    }
}

/// A JSON number as `numeric` prints it: `1e2` is `100`, `1.50e1` is
/// `15.0`, `-0` is `0`.
pub fn numeric_text(text: &str) -> String {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(i) => (&rest[..i], rest[i + 1..].parse::<i64>().unwrap_or(0)),
        None => (rest, 0),
    };
    if exponent == 0 && !mantissa.starts_with('.') {
        let zero = mantissa.bytes().all(|b| b == b'0' || b == b'.');
        return match (negative && !zero, mantissa.is_empty()) {
            (_, true) => "0".into(),
            (true, _) => format!("-{mantissa}"),
            (false, _) => mantissa.to_string(),
        };
    }
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{int}{frac}");
    let scale = frac.len() as i64 - exponent;
    let (digits, scale) = if scale < 0 {
        (format!("{digits}{}", "0".repeat((-scale) as usize)), 0usize)
    } else {
        (digits, scale as usize)
    };
    let digits = if digits.len() <= scale {
        format!("{}{digits}", "0".repeat(scale + 1 - digits.len()))
    } else {
        digits
    };
    let split = digits.len() - scale;
    let int_part = digits[..split].trim_start_matches('0');
    let int_part = if int_part.is_empty() { "0" } else { int_part };
    let mut out = String::new();
    let zero = digits.bytes().all(|b| b == b'0');
    if negative && !zero {
        out.push('-');
    }
    out.push_str(int_part);
    if scale > 0 {
        out.push('.');
        out.push_str(&digits[split..]);
    }
    out
}

impl Json {
    /// jsonb's form: object keys sorted (shorter first, then bytewise),
    /// the last of a repeated key kept, all the way down.
    pub fn canonical(self) -> Json {
        match self {
            Json::Array(items) => Json::Array(items.into_iter().map(Json::canonical).collect()),
            Json::Object(items) => {
                let mut out: Vec<(String, Json)> = Vec::with_capacity(items.len());
                for (k, v) in items {
                    let v = v.canonical();
                    match out.iter_mut().find(|(key, _)| *key == k) {
                        Some(slot) => slot.1 = v,
                        None => out.push((k, v)),
                    }
                }
                out.sort_by(|a, b| a.0.len().cmp(&b.0.len()).then_with(|| a.0.cmp(&b.0)));
                Json::Object(out)
            }
            other => other,
        }
    }

    /// PostgreSQL's `jsonb_typeof`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "boolean",
            Json::Number(_) => "number",
            Json::String(_) => "string",
            Json::Array(_) => "array",
            Json::Object(_) => "object",
        }
    }

    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(items) => items.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// An array's element; a negative index counts from the end. A
    /// scalar is its own element 0 (and -1), as in PostgreSQL.
    pub fn index(&self, i: i64) -> Option<&Json> {
        match self {
            Json::Array(items) => {
                let i = if i < 0 { items.len() as i64 + i } else { i };
                usize::try_from(i).ok().and_then(|i| items.get(i))
            }
            Json::Object(_) => None,
            scalar => (i == 0 || i == -1).then_some(scalar),
        }
    }

    /// The value at a path of keys (or array indexes written as numbers).
    pub fn path(&self, path: &[String]) -> Option<&Json> {
        let mut v = self;
        for p in path {
            v = match v {
                Json::Object(_) => v.get(p)?,
                Json::Array(_) => v.index(p.trim().parse().ok()?)?,
                _ => return None,
            };
        }
        Some(v)
    }

    /// What `->>` gives: a string's own text, anything else's JSON text;
    /// None for JSON null.
    pub fn as_text(&self) -> Option<String> {
        match self {
            Json::Null => None,
            Json::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    }

    /// `@>`: whether every part of `other` is in `self` (PostgreSQL's
    /// containment, where an array contains the elements it holds in any
    /// order, and a top-level array contains a scalar it holds).
    pub fn contains(&self, other: &Json) -> bool {
        match (self, other) {
            (Json::Object(a), Json::Object(b)) => b.iter().all(|(k, bv)| {
                a.iter()
                    .find(|(ak, _)| ak == k)
                    .is_some_and(|(_, av)| av.contains(bv))
            }),
            (Json::Array(a), Json::Array(b)) => b.iter().all(|bv| {
                a.iter().any(|av| match (av, bv) {
                    (Json::Array(_) | Json::Object(_), _) => av.contains(bv),
                    _ => av.same(bv),
                })
            }),
            (Json::Array(a), scalar) if !matches!(scalar, Json::Object(_)) => {
                a.iter().any(|av| av.same(scalar))
            }
            (a, b) => a.same(b),
        }
    }

    /// Equal values (numbers by value: `1.0` equals `1`).
    pub fn same(&self, other: &Json) -> bool {
        match (self, other) {
            (Json::Number(a), Json::Number(b)) => {
                a == b || a.parse::<f64>().ok() == b.parse::<f64>().ok()
            }
            (Json::Array(a), Json::Array(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same(y))
            }
            (Json::Object(a), Json::Object(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .all(|(k, v)| b.iter().any(|(bk, bv)| bk == k && v.same(bv)))
            }
            (a, b) => a == b,
        }
    }

    /// Writes the text as jsonb prints it (see the module header).
    pub fn write(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Number(n) => out.push_str(n),
            Json::String(s) => write_string(s, out),
            Json::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    v.write(out);
                }
                out.push(']');
            }
            Json::Object(items) => {
                out.push('{');
                for (i, (k, v)) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_string(k, out);
                    out.push_str(": ");
                    v.write(out);
                }
                out.push('}');
            }
        }
    }

    /// Bytes that sort as jsonb values sort in PostgreSQL
    /// (`compareJsonbContainers`): an object above an array, above a
    /// boolean, a number, a string, null; more pairs or elements above
    /// fewer; then pair by pair in jsonb's key order (shorter keys
    /// first), keys before their values; numbers by value (as doubles),
    /// strings by their bytes.
    pub fn sort_key(&self, out: &mut Vec<u8>) {
        // Strings end in 0x00 0x00, a 0x00 inside them is 0x00 0xFF, so
        // a string never sorts by what follows it.
        let string = |s: &str, out: &mut Vec<u8>| {
            for b in s.bytes() {
                out.push(b);
                if b == 0 {
                    out.push(0xFF);
                }
            }
            out.extend_from_slice(&[0, 0]);
        };
        match self {
            Json::Null => out.push(1),
            Json::String(s) => {
                out.push(2);
                string(s, out);
            }
            Json::Number(n) => {
                out.push(3);
                let v: f64 = n.parse().unwrap_or(0.0);
                let v = if v == 0.0 { 0.0 } else { v };
                let bits = v.to_bits();
                let ordered = match v.is_sign_negative() {
                    true => !bits,
                    false => bits | (1 << 63),
                };
                out.extend_from_slice(&ordered.to_be_bytes());
            }
            Json::Bool(b) => {
                out.push(4);
                out.push(u8::from(*b));
            }
            Json::Array(items) => {
                out.push(5);
                out.extend_from_slice(&(items.len() as u32).to_be_bytes());
                for v in items {
                    v.sort_key(out);
                }
            }
            Json::Object(items) => {
                out.push(6);
                out.extend_from_slice(&(items.len() as u32).to_be_bytes());
                let mut pairs: Vec<&(String, Json)> = items.iter().collect();
                pairs.sort_by(|a, b| a.0.len().cmp(&b.0.len()).then_with(|| a.0.cmp(&b.0)));
                for (k, v) in pairs {
                    string(k, out);
                    v.sort_key(out);
                }
            }
        }
    }

    /// The text `to_json` gives a composite value: no spaces
    /// (`{"f1":1,"f2":[1,2]}`).
    pub fn write_compact(&self, out: &mut String) {
        match self {
            Json::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write_compact(out);
                }
                out.push(']');
            }
            Json::Object(items) => {
                out.push('{');
                for (i, (k, v)) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(k, out);
                    out.push(':');
                    v.write_compact(out);
                }
                out.push('}');
            }
            scalar => scalar.write(out),
        }
    }

    /// `jsonb_pretty`'s text: four spaces an indent level.
    pub fn write_pretty(&self, level: usize, out: &mut String) {
        let pad = |n: usize, out: &mut String| out.push_str(&" ".repeat(4 * n));
        match self {
            Json::Array(items) if !items.is_empty() => {
                out.push_str("[\n");
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(",\n");
                    }
                    pad(level + 1, out);
                    v.write_pretty(level + 1, out);
                }
                out.push('\n');
                pad(level, out);
                out.push(']');
            }
            Json::Object(items) if !items.is_empty() => {
                out.push_str("{\n");
                for (i, (k, v)) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(",\n");
                    }
                    pad(level + 1, out);
                    write_string(k, out);
                    out.push_str(": ");
                    v.write_pretty(level + 1, out);
                }
                out.push('\n');
                pad(level, out);
                out.push('}');
            }
            other => other.write(out),
        }
    }
}

impl std::fmt::Display for Json {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = String::new();
        self.write(&mut s);
        f.write_str(&s)
    }
}

/// A JSON string literal with PostgreSQL's escapes.
pub fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonb_text_is_postgresqls() {
        for (input, want) in [
            ("{\"a\":1}", "{\"a\": 1}"),
            ("{\"b\": 1, \"a\": 2}", "{\"a\": 2, \"b\": 1}"),
            ("{\"a\":1,\"a\":2}", "{\"a\": 2}"),
            ("[1, 2.50, 1e2]", "[1, 2.50, 100]"),
            ("  \"x\" ", "\"x\""),
            ("null", "null"),
            ("{\"aa\": 1, \"b\": 2}", "{\"b\": 2, \"aa\": 1}"),
            ("[1.5e-3, -0, 1E+2, 12.340e1]", "[0.0015, 0, 100, 123.40]"),
            ("\"a\\u00e9\\n\"", "\"aé\\n\""),
        ] {
            assert_eq!(jsonb_text(input).unwrap(), want, "{input}");
        }
        for bad in ["{bad", "[1,]", "01", "\"\\u0000\"", "", "1 2"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn containment_and_paths() {
        let j = parse("{\"a\": {\"c\": \"d\"}, \"e\": [1, 2, 3]}").unwrap();
        assert!(j.contains(&parse("{\"e\": [3, 1]}").unwrap()));
        assert!(!j.contains(&parse("{\"e\": [4]}").unwrap()));
        assert_eq!(
            j.path(&["a".into(), "c".into()]).and_then(Json::as_text),
            Some("d".into())
        );
        assert_eq!(
            j.path(&["e".into(), "-1".into()]).map(|v| v.to_string()),
            Some("3".into())
        );
    }
}
