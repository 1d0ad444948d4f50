//! Datasets: a query's result pinned to a cut of the log, in versions.
//! `CREATE DATASET`, `REFRESH DATASET`, `COPY DATASET ... TO`, `VERIFY
//! DATASET`, `DROP DATASET`; and the rewrite that makes a query read every
//! table and materialized view it names at one cut.

use std::ops::ControlFlow;

use sqlparser::ast::{self, Query, TableFactor, VisitMut, VisitorMut};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer, Word};

use crate::error::SqlError;
use crate::parse::Statement;
use crate::reads::{AsOf, ReadAt};

/// How a dataset's rows are split: each part's name and share (they add
/// up to 100), by a hash of the key column from the seed.
#[derive(Debug, Clone, PartialEq)]
pub struct SplitSpec {
    pub parts: Vec<(String, f64)>,
    pub key: String,
    pub seed: i64,
}

impl SplitSpec {
    /// As `split = '...'` writes it: `train 80, validation 10, test 10`.
    pub fn shown(&self) -> String {
        self.parts
            .iter()
            .map(|(n, p)| format!("{n} {p}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `CREATE DATASET name AS query [AS OF CUT c] [WITH (split = '...',
/// split_key = 'col', seed = n)]`
#[derive(Debug, Clone)]
pub struct CreateDataset {
    pub name: String,
    pub query: Box<Query>,
    pub at_cut: Option<String>,
    pub split: Option<SplitSpec>,
}

fn is_word(t: &Token, kw: &str) -> bool {
    matches!(t, Token::Word(Word { value, quote_style: None, .. }) if value.eq_ignore_ascii_case(kw))
}

fn ident(t: Option<&Token>, what: &str) -> Result<String, SqlError> {
    match t {
        Some(Token::Word(w)) if w.quote_style.is_some() => Ok(w.value.clone()),
        Some(Token::Word(w)) => Ok(w.value.to_lowercase()),
        Some(t) => Err(SqlError::Syntax(format!("expected {what}, found \"{t}\""))),
        None => Err(SqlError::Syntax(format!(
            "expected {what} at end of statement"
        ))),
    }
}

/// Reads the statements of this module; `None` when the text is something
/// else.
pub(crate) fn parse_dataset_statement(sql: &str) -> Result<Option<Statement>, SqlError> {
    let lower = sql.trim_start().to_ascii_lowercase();
    let words: Vec<&str> = lower.split_whitespace().take(3).collect();
    let kind = match words.as_slice() {
        ["create", "dataset", ..] => "create",
        ["refresh", "dataset", ..] => "refresh",
        ["copy", "dataset", ..] => "copy",
        ["verify", "dataset", ..] => "verify",
        ["drop", "dataset", ..] => "drop",
        _ => return Ok(None),
    };
    let all: Vec<Token> = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize()
        .map_err(|e| SqlError::Syntax(e.to_string()))?;
    // Significant tokens, each with its index in `all`.
    let sig: Vec<(usize, &Token)> = all
        .iter()
        .enumerate()
        .filter(|(_, t)| !matches!(t, Token::Whitespace(_) | Token::EOF))
        .collect();
    let mut sig: Vec<(usize, &Token)> = sig;
    while matches!(sig.last(), Some((_, Token::SemiColon))) {
        sig.pop();
    }
    let tok = |i: usize| sig.get(i).map(|(_, t)| *t);
    let extra = |i: usize| -> Result<(), SqlError> {
        match tok(i) {
            Some(t) => Err(SqlError::Syntax(format!("syntax error at or near \"{t}\""))),
            None => Ok(()),
        }
    };
    let at_cut = |i: usize| -> Result<(Option<String>, usize), SqlError> {
        if tok(i).is_some_and(|t| is_word(t, "as")) {
            if !(tok(i + 1).is_some_and(|t| is_word(t, "of"))
                && tok(i + 2).is_some_and(|t| is_word(t, "cut")))
            {
                return Err(SqlError::Syntax("expected AS OF CUT name".into()));
            }
            return Ok((Some(ident(tok(i + 3), "a cut's name")?), i + 4));
        }
        Ok((None, i))
    };
    match kind {
        "drop" => {
            let mut i = 2;
            let if_exists = tok(i).is_some_and(|t| is_word(t, "if"))
                && tok(i + 1).is_some_and(|t| is_word(t, "exists"));
            if if_exists {
                i += 2;
            }
            let mut names = vec![ident(tok(i), "a dataset's name")?];
            i += 1;
            while matches!(tok(i), Some(Token::Comma)) {
                names.push(ident(tok(i + 1), "a dataset's name")?);
                i += 2;
            }
            extra(i)?;
            Ok(Some(Statement::DropDataset { names, if_exists }))
        }
        "refresh" => {
            let name = ident(tok(2), "a dataset's name")?;
            let (at_cut, i) = at_cut(3)?;
            extra(i)?;
            Ok(Some(Statement::RefreshDataset { name, at_cut }))
        }
        "verify" => {
            let name = ident(tok(2), "a dataset's name")?;
            if !tok(3).is_some_and(|t| is_word(t, "version")) {
                return Err(SqlError::Syntax(
                    "VERIFY DATASET takes a version: VERIFY DATASET d VERSION 1".into(),
                ));
            }
            let version = version_number(tok(4))?;
            extra(5)?;
            Ok(Some(Statement::VerifyDataset { name, version }))
        }
        "copy" => {
            let name = ident(tok(2), "a dataset's name")?;
            let mut i = 3;
            let mut version = None;
            if tok(i).is_some_and(|t| is_word(t, "version")) {
                version = Some(version_number(tok(i + 1))?);
                i += 2;
            }
            if !tok(i).is_some_and(|t| is_word(t, "to")) {
                return Err(SqlError::Syntax("expected TO 'path'".into()));
            }
            let location = match tok(i + 1) {
                Some(Token::SingleQuotedString(s)) => s.clone(),
                _ => {
                    return Err(SqlError::Syntax(
                        "COPY DATASET ... TO takes a path in quotes".into(),
                    ))
                }
            };
            i += 2;
            if tok(i).is_some_and(|t| is_word(t, "with")) {
                // Only FORMAT parquet: the rows and their manifest.
                let options: Vec<String> = sig[i + 1..]
                    .iter()
                    .map(|(_, t)| t.to_string().to_lowercase())
                    .filter(|t| !["(", ")", "="].contains(&t.as_str()))
                    .collect();
                if options != ["format", "parquet"] && options != ["format", "'parquet'"] {
                    return Err(SqlError::Unsupported(
                        "COPY DATASET writes Parquet: WITH (FORMAT parquet)".into(),
                    ));
                }
            } else {
                extra(i)?;
            }
            Ok(Some(Statement::CopyDataset {
                name,
                version,
                location,
            }))
        }
        _ => create(sql, &all, &sig).map(Some),
    }
}

fn version_number(t: Option<&Token>) -> Result<u32, SqlError> {
    match t {
        Some(Token::Number(n, _)) => n
            .parse()
            .map_err(|_| SqlError::Syntax(format!("invalid version: {n}"))),
        _ => Err(SqlError::Syntax("expected a version number".into())),
    }
}

fn create(_sql: &str, all: &[Token], sig: &[(usize, &Token)]) -> Result<Statement, SqlError> {
    let tok = |i: usize| sig.get(i).map(|(_, t)| *t);
    let name = ident(tok(2), "a dataset's name")?;
    if !tok(3).is_some_and(|t| is_word(t, "as")) {
        return Err(SqlError::Syntax("expected AS query".into()));
    }
    let mut end = sig.len();
    // A trailing WITH (...): the options.
    let mut options = Vec::new();
    if matches!(tok(end.wrapping_sub(1)), Some(Token::RParen)) {
        let mut depth = 0;
        let mut j = end - 1;
        loop {
            match tok(j) {
                Some(Token::RParen) => depth += 1,
                Some(Token::LParen) => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            if j == 0 {
                break;
            }
            j -= 1;
        }
        if j > 4 && tok(j - 1).is_some_and(|t| is_word(t, "with")) {
            options = sig[j + 1..end - 1]
                .iter()
                .map(|(_, t)| (*t).clone())
                .collect();
            end = j - 1;
        }
    }
    // A trailing AS OF CUT name.
    let mut at_cut = None;
    if end >= 8
        && tok(end - 4).is_some_and(|t| is_word(t, "as"))
        && tok(end - 3).is_some_and(|t| is_word(t, "of"))
        && tok(end - 2).is_some_and(|t| is_word(t, "cut"))
    {
        at_cut = Some(ident(tok(end - 1), "a cut's name")?);
        end -= 4;
    }
    if end <= 4 {
        return Err(SqlError::Syntax(
            "CREATE DATASET needs a query after AS".into(),
        ));
    }
    let text: String = all[sig[4].0..=sig[end - 1].0]
        .iter()
        .map(|t| t.to_string())
        .collect();
    let query = match crate::parse::parse_sql(&text)? {
        Statement::Query(q) => match *q {
            ast::Statement::Query(q) => q,
            _ => {
                return Err(SqlError::Syntax(
                    "CREATE DATASET ... AS takes a query".into(),
                ))
            }
        },
        _ => {
            return Err(SqlError::Syntax(
                "CREATE DATASET ... AS takes a query".into(),
            ))
        }
    };
    Ok(Statement::CreateDataset(Box::new(CreateDataset {
        name,
        query,
        at_cut,
        split: split_options(&options)?,
    })))
}

/// `split = 'train 80, validation 10, test 10', split_key = 'user_id',
/// seed = 7`
fn split_options(tokens: &[Token]) -> Result<Option<SplitSpec>, SqlError> {
    let (mut split, mut key, mut seed) = (None, None, 0i64);
    for option in tokens
        .split(|t| matches!(t, Token::Comma))
        .filter(|o| !tokens.is_empty() || !o.is_empty())
    {
        let [k, Token::Eq, v] = option else {
            return Err(SqlError::Syntax("options are name = value".into()));
        };
        let k = ident(Some(k), "an option name")?;
        let v = match v {
            Token::SingleQuotedString(s) => s.clone(),
            Token::Number(n, _) => n.clone(),
            Token::Word(w) => w.value.clone(),
            other => return Err(SqlError::Syntax(format!("unexpected \"{other}\""))),
        };
        match k.as_str() {
            "split" => split = Some(v),
            "split_key" => key = Some(v),
            "seed" => {
                seed = v.parse().map_err(|_| {
                    SqlError::InvalidOption(format!("seed must be an integer, not \"{v}\""))
                })?
            }
            other => {
                return Err(SqlError::InvalidOption(format!(
                    "unrecognized dataset option \"{other}\" (known: split, split_key, seed)"
                )))
            }
        }
    }
    let Some(split) = split else {
        if key.is_some() {
            return Err(SqlError::InvalidOption(
                "split_key goes with split = '...'".into(),
            ));
        }
        return Ok(None);
    };
    let key = key.ok_or_else(|| {
        SqlError::InvalidOption(
            "split needs split_key = 'column': the rows of a key stay in one part".into(),
        )
    })?;
    let mut parts = Vec::new();
    for part in split.split(',') {
        let mut words = part.split_whitespace();
        let (Some(name), Some(share), None) = (words.next(), words.next(), words.next()) else {
            return Err(SqlError::InvalidOption(format!(
                "split parts are 'name percent, ...', not \"{}\"",
                part.trim()
            )));
        };
        let share: f64 = share
            .trim_end_matches('%')
            .parse()
            .map_err(|_| SqlError::InvalidOption(format!("\"{share}\" is not a percentage")))?;
        if share <= 0.0 || parts.iter().any(|(n, _)| n == name) {
            return Err(SqlError::InvalidOption(format!(
                "split part \"{name}\" needs a share above 0, once"
            )));
        }
        parts.push((name.to_string(), share));
    }
    let total: f64 = parts.iter().map(|(_, s)| s).sum();
    if (total - 100.0).abs() > 1e-9 {
        return Err(SqlError::InvalidOption(format!(
            "split shares add up to {total}, not 100"
        )));
    }
    Ok(Some(SplitSpec { parts, key, seed }))
}

/// Makes `query` read every relation `is_relation` names (its tables and
/// materialized views) at cut `cut`. A relation read `AS OF` already is
/// refused: a dataset reads at one cut.
pub fn read_relations_at(
    query: &mut Query,
    cut: &str,
    is_relation: impl Fn(&str) -> bool,
) -> Result<(), SqlError> {
    struct AtCut<'a, F> {
        cut: &'a str,
        is_relation: F,
        ctes: Vec<String>,
    }
    impl<F: Fn(&str) -> bool> VisitorMut for AtCut<'_, F> {
        type Break = SqlError;
        fn pre_visit_query(&mut self, q: &mut Query) -> ControlFlow<SqlError> {
            if let Some(with) = &q.with {
                self.ctes.extend(
                    with.cte_tables
                        .iter()
                        .map(|c| crate::parse::ident_name(&c.alias.name)),
                );
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_table_factor(&mut self, f: &mut TableFactor) -> ControlFlow<SqlError> {
            let TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } = f
            else {
                return ControlFlow::Continue(());
            };
            let Some(last) = name.0.last().and_then(|p| p.as_ident()) else {
                return ControlFlow::Continue(());
            };
            let written = crate::parse::ident_name(last);
            let (relation, mut read) =
                ReadAt::from_name(&written).unwrap_or((written.clone(), ReadAt::default()));
            if self.ctes.contains(&relation) || !(self.is_relation)(&relation) {
                return ControlFlow::Continue(());
            }
            if read.as_of.is_some() {
                return ControlFlow::Break(SqlError::Unsupported(format!(
                    "a dataset reads every relation at its own cut; leave AS OF off \"{relation}\" and write AS OF CUT after the query"
                )));
            }
            read.as_of = Some(AsOf::Cut(self.cut.to_string()));
            *name =
                ast::ObjectName::from(vec![ast::Ident::with_quote('"', read.name_for(&relation))]);
            if alias.is_none() {
                *alias = Some(ast::TableAlias {
                    explicit: true,
                    name: ast::Ident::with_quote('"', relation),
                    columns: vec![],
                    at: None,
                });
            }
            ControlFlow::Continue(())
        }
    }
    match query.visit(&mut AtCut {
        cut,
        is_relation,
        ctes: Vec::new(),
    }) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_sql;

    #[test]
    fn dataset_statements() {
        match parse_sql(
            "CREATE DATASET evals AS SELECT user_id, prompt FROM requests WHERE model = 'x' AS OF CUT c1 \
             WITH (split = 'train 80, validation 10, test 10', split_key = 'user_id', seed = 7)",
        )
        .unwrap()
        {
            Statement::CreateDataset(d) => {
                assert_eq!(d.name, "evals");
                assert_eq!(d.at_cut.as_deref(), Some("c1"));
                let s = d.split.unwrap();
                assert_eq!(s.key, "user_id");
                assert_eq!(s.seed, 7);
                assert_eq!(s.shown(), "train 80, validation 10, test 10");
                assert!(d.query.to_string().contains("model = 'x'"), "{}", d.query);
            }
            other => panic!("{other:?}"),
        }
        match parse_sql("CREATE DATASET d AS SELECT * FROM t").unwrap() {
            Statement::CreateDataset(d) => assert!(d.at_cut.is_none() && d.split.is_none()),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_sql("COPY DATASET d VERSION 2 TO '/tmp/x.parquet' WITH (FORMAT parquet)")
                .unwrap(),
            Statement::CopyDataset {
                version: Some(2),
                ..
            }
        ));
        assert!(matches!(
            parse_sql("VERIFY DATASET d VERSION 1").unwrap(),
            Statement::VerifyDataset { version: 1, .. }
        ));
        assert!(matches!(
            parse_sql("REFRESH DATASET d AS OF CUT c2").unwrap(),
            Statement::RefreshDataset {
                at_cut: Some(_),
                ..
            }
        ));
        for bad in [
            "CREATE DATASET d AS SELECT * FROM t WITH (split = 'train 80, test 10', split_key = 'k')",
            "CREATE DATASET d AS SELECT * FROM t WITH (split = 'train 80, test 20')",
            "CREATE DATASET d AS SELECT * FROM t WITH (colour = 'red')",
        ] {
            assert!(parse_sql(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_relation_reads_at_the_cut() {
        let mut q = match parse_sql(
            "WITH x AS (SELECT * FROM t) SELECT * FROM x JOIN u ON x.a = u.a JOIN other o ON true",
        )
        .unwrap()
        {
            Statement::Query(q) => match *q {
                ast::Statement::Query(q) => q,
                _ => unreachable!(),
            },
            _ => unreachable!(),
        };
        read_relations_at(&mut q, "d@1", |r| r == "t" || r == "u").unwrap();
        let text = q.to_string();
        assert!(text.contains("AS \"t\""), "{text}");
        assert!(text.contains("AS \"u\""), "{text}");
        assert!(text.contains("JOIN other o"), "{text}");
        assert!(text.contains("FROM x JOIN"), "{text}");
    }
}
