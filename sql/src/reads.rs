//! How a query reads a relation: at a cut of the log (`t AS OF CUT c`,
//! `AS OF OFFSETS (0 => 8800)`, `AS OF TIMESTAMP '...'`) and as a sample
//! (`TABLESAMPLE HASH (10) REPEATABLE (7) BY (user_id)`, `BERNOULLI`,
//! `SYSTEM`). Neither is syntax `sqlparser` reads for PostgreSQL (and it
//! would drop a sample it read), so both are taken out of the token stream
//! here and folded into the relation's name, `t` then [`READ_MARK`] then the
//! settings, with the relation's own name as its alias: the server's schema
//! resolves such a name to a reader of the relation at that cut or sample.

use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer, Whitespace, Word};

use crate::error::SqlError;

/// Separates a relation's name from how it is read (a character no name
/// typed by a user holds).
pub const READ_MARK: char = '\u{1f}';

/// Which log positions a relation is read at.
#[derive(Debug, Clone, PartialEq)]
pub enum AsOf {
    /// A named cut (`CREATE CUT`).
    Cut(String),
    /// Next offsets per partition (the rows below them).
    Offsets(Vec<(u32, u64)>),
    /// What was committed by then (the literal as written).
    Timestamp(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleMethod {
    /// Rows whose key hashes below the fraction: the same rows whatever
    /// else the table holds.
    Hash,
    /// Each row with the given chance (PostgreSQL's BERNOULLI and SYSTEM).
    Bernoulli,
}

/// `TABLESAMPLE method (percent) [REPEATABLE (seed)] [BY (columns)]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub method: SampleMethod,
    /// 0 to 100.
    pub percent: f64,
    pub seed: Option<i64>,
    /// The columns whose values decide (HASH); none: the primary key.
    pub by: Vec<String>,
}

/// How one relation of a query is read.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReadAt {
    pub as_of: Option<AsOf>,
    pub sample: Option<Sample>,
}

impl ReadAt {
    /// The relation name that carries this read of `relation`.
    pub fn name_for(&self, relation: &str) -> String {
        let mut out = relation.to_string();
        let mut part = |s: String| {
            out.push(READ_MARK);
            out.push_str(&s);
        };
        match &self.as_of {
            Some(AsOf::Cut(c)) => part(format!("cut={c}")),
            Some(AsOf::Offsets(o)) => part(format!(
                "offsets={}",
                o.iter()
                    .map(|(p, o)| format!("{p}:{o}"))
                    .collect::<Vec<_>>()
                    .join(",")
            )),
            Some(AsOf::Timestamp(t)) => part(format!("timestamp={t}")),
            None => {}
        }
        if let Some(s) = &self.sample {
            let method = match s.method {
                SampleMethod::Hash => "hash",
                SampleMethod::Bernoulli => "bernoulli",
            };
            let seed = s.seed.map(|s| s.to_string()).unwrap_or_default();
            part(format!(
                "sample={method}:{}:{seed}:{}",
                s.percent,
                s.by.join(",")
            ));
        }
        out
    }

    /// The relation and how it is read, from a name [`ReadAt::name_for`]
    /// made; None for a plain name.
    pub fn from_name(name: &str) -> Option<(String, ReadAt)> {
        let mut parts = name.split(READ_MARK);
        let relation = parts.next()?.to_string();
        let mut read = ReadAt::default();
        let mut any = false;
        for part in parts {
            any = true;
            let (key, value) = part.split_once('=')?;
            match key {
                "cut" => read.as_of = Some(AsOf::Cut(value.to_string())),
                "timestamp" => read.as_of = Some(AsOf::Timestamp(value.to_string())),
                "offsets" => {
                    let mut offsets = Vec::new();
                    for pair in value.split(',').filter(|p| !p.is_empty()) {
                        let (p, o) = pair.split_once(':')?;
                        offsets.push((p.parse().ok()?, o.parse().ok()?));
                    }
                    read.as_of = Some(AsOf::Offsets(offsets));
                }
                "sample" => {
                    let mut f = value.splitn(4, ':');
                    let method = match f.next()? {
                        "hash" => SampleMethod::Hash,
                        _ => SampleMethod::Bernoulli,
                    };
                    let percent = f.next()?.parse().ok()?;
                    let seed = match f.next()? {
                        "" => None,
                        s => Some(s.parse().ok()?),
                    };
                    let by = f
                        .next()?
                        .split(',')
                        .filter(|c| !c.is_empty())
                        .map(str::to_string)
                        .collect();
                    read.sample = Some(Sample {
                        method,
                        percent,
                        seed,
                        by,
                    });
                }
                _ => return None,
            }
        }
        any.then_some((relation, read))
    }
}

pub(crate) fn is_word(t: &Token, kw: &str) -> bool {
    matches!(t, Token::Word(Word { value, quote_style: None, .. }) if value.eq_ignore_ascii_case(kw))
}

fn word_name(w: &Word) -> String {
    match w.quote_style {
        Some(_) => w.value.clone(),
        None => w.value.to_lowercase(),
    }
}

/// Words that end a FROM item rather than name its alias.
const NOT_ALIAS: &[&str] = &[
    "where",
    "join",
    "inner",
    "left",
    "right",
    "full",
    "cross",
    "natural",
    "on",
    "using",
    "group",
    "order",
    "limit",
    "offset",
    "fetch",
    "union",
    "except",
    "intersect",
    "window",
    "having",
    "tablesample",
    "for",
    "returning",
    "lateral",
    "qualify",
    "as",
];

/// The text with each `AS OF ...` and `TABLESAMPLE ...` folded into the
/// relation's name (see the module header); None when there is none.
pub(crate) fn mark_reads(sql: &str) -> Result<Option<String>, SqlError> {
    if !might_read_at(sql.as_bytes()) {
        return Ok(None);
    }
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return Ok(None);
    };
    let mut tokens = tokens;
    let mut changed = mark_as_of(&mut tokens)?;
    changed |= mark_samples(&mut tokens)?;
    Ok(changed.then(|| tokens.iter().map(|t| t.to_string()).collect()))
}

/// Whether the text may hold `AS OF` or `TABLESAMPLE` (a scan without a
/// copy: every statement passes here, bulk INSERTs too).
fn might_read_at(sql: &[u8]) -> bool {
    let word_at = |i: usize, w: &[u8]| {
        sql.get(i..i + w.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(w))
    };
    (0..sql.len()).any(|i| {
        if word_at(i, b"tablesample") {
            return true;
        }
        if !word_at(i, b"as") || !sql.get(i + 2).is_some_and(u8::is_ascii_whitespace) {
            return false;
        }
        let mut j = i + 2;
        while sql.get(j).is_some_and(u8::is_ascii_whitespace) {
            j += 1;
        }
        word_at(j, b"of") && sql.get(j + 2).is_none_or(|b| !b.is_ascii_alphanumeric())
    })
}

/// Index of the next token that is not whitespace, from `i`.
pub(crate) fn next_sig(tokens: &[Token], mut i: usize) -> usize {
    while i < tokens.len() && matches!(tokens[i], Token::Whitespace(_)) {
        i += 1;
    }
    i
}

/// Index of the token before `i` that is not whitespace.
pub(crate) fn prev_sig(tokens: &[Token], i: usize) -> Option<usize> {
    (0..i)
        .rev()
        .find(|&j| !matches!(tokens[j], Token::Whitespace(_)))
}

/// The name a read of the relation named by word `w` carries: an earlier
/// mark kept.
fn with_read(w: &Word, f: impl FnOnce(&mut ReadAt)) -> (String, String) {
    let name = word_name(w);
    let (relation, mut read) = ReadAt::from_name(&name).unwrap_or((name, ReadAt::default()));
    f(&mut read);
    (read.name_for(&relation), relation)
}

fn quoted(name: String) -> Token {
    Token::Word(Word {
        value: name,
        quote_style: Some('"'),
        keyword: sqlparser::keywords::Keyword::NoKeyword,
    })
}

/// ` AS "relation"`: a relation read at a cut or sampled keeps its name.
fn alias(relation: String) -> [Token; 4] {
    let space = || Token::Whitespace(Whitespace::Space);
    [
        space(),
        Token::make_keyword("AS"),
        space(),
        quoted(relation),
    ]
}

fn mark_as_of(tokens: &mut Vec<Token>) -> Result<bool, SqlError> {
    let mut changed = false;
    let mut i = 0;
    while i < tokens.len() {
        if !is_word(&tokens[i], "as") {
            i += 1;
            continue;
        }
        let of = next_sig(tokens, i + 1);
        let kind = next_sig(tokens, of + 1);
        if of >= tokens.len()
            || !is_word(&tokens[of], "of")
            || kind >= tokens.len()
            || !["cut", "offsets", "timestamp"]
                .iter()
                .any(|k| is_word(&tokens[kind], k))
        {
            i += 1;
            continue;
        }
        let Some(name_at) = prev_sig(tokens, i) else {
            return Err(SqlError::Syntax(
                "AS OF follows a table or view name".into(),
            ));
        };
        let Token::Word(name_word) = tokens[name_at].clone() else {
            return Err(SqlError::Syntax(
                "AS OF follows a table or view name, not a subquery".into(),
            ));
        };
        // What a statement writes is the table as it is now.
        let mut before = prev_sig(tokens, name_at);
        while let Some(b) = before.filter(|&b| matches!(tokens[b], Token::Period)) {
            before = prev_sig(tokens, b).and_then(|w| prev_sig(tokens, w));
        }
        if before.is_some_and(|b| {
            ["into", "update", "table"]
                .iter()
                .any(|k| is_word(&tokens[b], k))
        }) {
            return Err(SqlError::Unsupported(
                "AS OF reads a table as it was; a statement writes it as it is now".into(),
            ));
        }
        let value_at = next_sig(tokens, kind + 1);
        let (as_of, end) = if is_word(&tokens[kind], "cut") {
            match tokens.get(value_at) {
                Some(Token::Word(w)) => (AsOf::Cut(word_name(w)), value_at + 1),
                _ => return Err(SqlError::Syntax("AS OF CUT takes a cut's name".into())),
            }
        } else if is_word(&tokens[kind], "timestamp") {
            match tokens.get(value_at) {
                Some(Token::SingleQuotedString(s)) => (AsOf::Timestamp(s.clone()), value_at + 1),
                _ => {
                    return Err(SqlError::Syntax(
                        "AS OF TIMESTAMP takes a timestamp literal: AS OF TIMESTAMP '2026-12-01 00:00:00+00'"
                            .into(),
                    ))
                }
            }
        } else {
            offsets(tokens, value_at)?
        };
        let (name, relation) = with_read(&name_word, |r| r.as_of = Some(as_of));
        // The relation keeps its own name as its alias unless one follows.
        let after = next_sig(tokens, end);
        let aliased = match tokens.get(after) {
            Some(Token::Word(w)) => {
                w.quote_style.is_some()
                    || !NOT_ALIAS.contains(&w.value.to_lowercase().as_str())
                    || is_word(&tokens[after], "as")
            }
            _ => false,
        };
        let mut replacement = vec![quoted(name)];
        if !aliased {
            replacement.extend(alias(relation));
        }
        let len = replacement.len();
        tokens.splice(name_at..end, replacement);
        i = name_at + len;
        changed = true;
    }
    Ok(changed)
}

/// `OFFSETS (0 => 8800, 1 => 9040)` from `at` (the parenthesis); the
/// offsets and where they end.
fn offsets(tokens: &[Token], at: usize) -> Result<(AsOf, usize), SqlError> {
    let bad = || SqlError::Syntax("AS OF OFFSETS takes (partition => offset, ...)".into());
    if !matches!(tokens.get(at), Some(Token::LParen)) {
        return Err(bad());
    }
    let mut out = Vec::new();
    let mut i = next_sig(tokens, at + 1);
    loop {
        let number = |i: usize| match tokens.get(i) {
            Some(Token::Number(n, _)) => n.parse::<u64>().ok(),
            _ => None,
        };
        let partition = number(i)
            .and_then(|p| u32::try_from(p).ok())
            .ok_or_else(bad)?;
        i = next_sig(tokens, i + 1);
        if !matches!(tokens.get(i), Some(Token::RArrow | Token::Eq)) {
            return Err(bad());
        }
        i = next_sig(tokens, i + 1);
        let offset = number(i).ok_or_else(bad)?;
        out.push((partition, offset));
        i = next_sig(tokens, i + 1);
        match tokens.get(i) {
            Some(Token::Comma) => i = next_sig(tokens, i + 1),
            Some(Token::RParen) => return Ok((AsOf::Offsets(out), i + 1)),
            _ => return Err(bad()),
        }
    }
}

fn mark_samples(tokens: &mut Vec<Token>) -> Result<bool, SqlError> {
    let mut changed = false;
    let mut i = 0;
    while i < tokens.len() {
        if !is_word(&tokens[i], "tablesample") {
            i += 1;
            continue;
        }
        let name_at = sampled_relation(tokens, i).ok_or_else(|| {
            SqlError::Syntax("TABLESAMPLE follows a table or view (and its alias)".into())
        })?;
        let (sample, end) = sample(tokens, i)?;
        let Token::Word(w) = tokens[name_at].clone() else {
            return Err(SqlError::Syntax(
                "TABLESAMPLE follows a table or view".into(),
            ));
        };
        let (name, relation) = with_read(&w, |r| r.sample = Some(sample));
        // Without an alias, the relation keeps its name.
        let alias_follows = prev_sig(tokens, i) != Some(name_at);
        tokens.drain(i..end);
        if !alias_follows {
            tokens.splice(i..i, alias(relation));
        }
        tokens[name_at] = quoted(name);
        i += 1;
        changed = true;
    }
    Ok(changed)
}

/// The relation name's token before the TABLESAMPLE at `at`, over its alias
/// (`t`, `t x`, `t AS x`, `t AS x (a, b)`).
fn sampled_relation(tokens: &[Token], at: usize) -> Option<usize> {
    let mut j = prev_sig(tokens, at)?;
    if matches!(tokens[j], Token::RParen) {
        // Column aliases.
        let mut depth = 0;
        loop {
            match tokens[j] {
                Token::RParen => depth += 1,
                Token::LParen => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            j = j.checked_sub(1)?;
        }
        j = prev_sig(tokens, j)?;
    }
    let Token::Word(_) = &tokens[j] else {
        return None;
    };
    let before = prev_sig(tokens, j)?;
    if is_word(&tokens[before], "as") {
        return prev_sig(tokens, before);
    }
    match &tokens[before] {
        Token::Word(w)
            if w.quote_style.is_some()
                || !["from", "join", "only", "lateral"]
                    .contains(&w.value.to_lowercase().as_str()) =>
        {
            Some(before)
        }
        _ => Some(j),
    }
}

/// `TABLESAMPLE method (percent) [REPEATABLE (seed)] [BY (a, b)]` from
/// `at`; the sample and where it ends.
fn sample(tokens: &[Token], at: usize) -> Result<(Sample, usize), SqlError> {
    let method_at = next_sig(tokens, at + 1);
    let method = match tokens.get(method_at) {
        Some(t) if is_word(t, "hash") => SampleMethod::Hash,
        Some(t) if is_word(t, "bernoulli") || is_word(t, "system") => SampleMethod::Bernoulli,
        Some(Token::Word(w)) => {
            return Err(SqlError::UndefinedObject(format!(
                "tablesample method {} does not exist",
                w.value.to_lowercase()
            )))
        }
        _ => {
            return Err(SqlError::Syntax(
                "TABLESAMPLE takes HASH, BERNOULLI or SYSTEM".into(),
            ))
        }
    };
    let (percent, mut end) = parenthesized_number(tokens, next_sig(tokens, method_at + 1))
        .ok_or_else(|| SqlError::Syntax("TABLESAMPLE takes a percentage: BERNOULLI (10)".into()))?;
    if !(0.0..=100.0).contains(&percent) {
        return Err(SqlError::InvalidTablesample(
            "sample percentage must be between 0 and 100".into(),
        ));
    }
    let mut seed = None;
    let mut by = Vec::new();
    loop {
        let k = next_sig(tokens, end);
        match tokens.get(k) {
            Some(t) if is_word(t, "repeatable") => {
                let (s, e) =
                    parenthesized_number(tokens, next_sig(tokens, k + 1)).ok_or_else(|| {
                        SqlError::Syntax("REPEATABLE takes a number: REPEATABLE (7)".into())
                    })?;
                seed = Some(s as i64);
                end = e;
            }
            Some(t) if is_word(t, "by") => {
                let mut j = next_sig(tokens, k + 1);
                if !matches!(tokens.get(j), Some(Token::LParen)) {
                    return Err(SqlError::Syntax("BY takes columns: BY (user_id)".into()));
                }
                loop {
                    j = next_sig(tokens, j + 1);
                    match tokens.get(j) {
                        Some(Token::Word(w)) => by.push(word_name(w)),
                        _ => return Err(SqlError::Syntax("BY takes columns: BY (user_id)".into())),
                    }
                    j = next_sig(tokens, j + 1);
                    match tokens.get(j) {
                        Some(Token::Comma) => {}
                        Some(Token::RParen) => break,
                        _ => return Err(SqlError::Syntax("BY takes columns: BY (user_id)".into())),
                    }
                }
                end = j + 1;
            }
            _ => break,
        }
    }
    if method == SampleMethod::Bernoulli && !by.is_empty() {
        return Err(SqlError::Syntax(
            "BY goes with TABLESAMPLE HASH; BERNOULLI and SYSTEM choose rows by their place in the log"
                .into(),
        ));
    }
    Ok((
        Sample {
            method,
            percent,
            seed,
            by,
        },
        end,
    ))
}

/// `(number)` at `at` (a sign allowed); the number and where it ends.
fn parenthesized_number(tokens: &[Token], at: usize) -> Option<(f64, usize)> {
    if !matches!(tokens.get(at), Some(Token::LParen)) {
        return None;
    }
    let mut j = next_sig(tokens, at + 1);
    let negative = matches!(tokens.get(j), Some(Token::Minus));
    if negative {
        j = next_sig(tokens, j + 1);
    }
    let n: f64 = match tokens.get(j) {
        Some(Token::Number(n, _)) => n.parse().ok()?,
        _ => return None,
    };
    let close = next_sig(tokens, j + 1);
    matches!(tokens.get(close), Some(Token::RParen))
        .then_some((if negative { -n } else { n }, close + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marked(sql: &str) -> String {
        mark_reads(sql).unwrap().unwrap()
    }

    #[test]
    fn as_of_folds_into_the_name_and_keeps_the_alias() {
        let m = format!("\"t{READ_MARK}cut=c1\" AS \"t\" WHERE");
        assert!(marked("SELECT * FROM t AS OF CUT c1 WHERE a = 1").contains(&m));
        let m = format!("\"t{READ_MARK}offsets=0:8800,1:9040\" x");
        assert!(marked("SELECT * FROM t AS OF OFFSETS (0 => 8800, 1 => 9040) x").contains(&m));
        let m = format!("\"v{READ_MARK}timestamp=2026-12-01 00:00:00+00\" AS \"v\"");
        assert!(marked("SELECT * FROM v AS OF TIMESTAMP '2026-12-01 00:00:00+00'").contains(&m));
        assert_eq!(mark_reads("SELECT a AS of FROM t").unwrap(), None);
        assert!(!might_read_at(b"SELECT a AS offset, b as official FROM t"));
        assert!(might_read_at(b"SELECT * FROM t as\n  OF CUT c"));
        assert!(might_read_at(
            b"SELECT * FROM t TableSample HASH (1) BY (k)"
        ));
    }

    #[test]
    fn names_round_trip() {
        let read = ReadAt {
            as_of: Some(AsOf::Offsets(vec![(0, 5), (3, 9)])),
            sample: Some(Sample {
                method: SampleMethod::Hash,
                percent: 12.5,
                seed: Some(-7),
                by: vec!["user_id".into(), "day".into()],
            }),
        };
        let name = read.name_for("requests");
        assert_eq!(ReadAt::from_name(&name), Some(("requests".into(), read)));
        assert_eq!(ReadAt::from_name("requests"), None);
    }

    #[test]
    fn samples_after_the_alias() {
        let sql =
            marked("SELECT * FROM t AS x TABLESAMPLE HASH (10) REPEATABLE (7) BY (u) WHERE a");
        let (_, read) = ReadAt::from_name(sql.split('"').nth(1).unwrap()).unwrap();
        let s = read.sample.unwrap();
        assert_eq!(
            (s.method, s.percent, s.seed, s.by),
            (SampleMethod::Hash, 10.0, Some(7), vec!["u".to_string()])
        );
        assert!(sql.contains("AS x  WHERE"), "{sql}");
        let sql = marked("SELECT count(*) FROM t TABLESAMPLE BERNOULLI (50)");
        assert!(sql.contains("AS \"t\""), "{sql}");
        // Both: a cut and a sample of it.
        let sql = marked("SELECT * FROM t AS OF CUT c TABLESAMPLE SYSTEM (5) REPEATABLE (1)");
        let (_, read) = ReadAt::from_name(sql.split('"').nth(1).unwrap()).unwrap();
        assert_eq!(read.as_of, Some(AsOf::Cut("c".into())));
        assert_eq!(read.sample.unwrap().method, SampleMethod::Bernoulli);
        assert!(matches!(
            mark_reads("SELECT * FROM t TABLESAMPLE foo (5)"),
            Err(SqlError::UndefinedObject(_))
        ));
        assert!(mark_reads("SELECT * FROM t TABLESAMPLE BERNOULLI (150)").is_err());
    }
}
