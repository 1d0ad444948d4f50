//! Erasure requests: `ERASE FROM t [WHERE cond] [WITH (suppress = ...)]`,
//! `ERASE FROM ALL TABLES WHERE cond [WITH (...)]` and `VERIFY ERASURE n`.

use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer, Word};

use crate::error::SqlError;
use crate::parse::Statement;

fn is_word(t: &Token, kw: &str) -> bool {
    matches!(t, Token::Word(Word { value, quote_style: None, .. }) if value.eq_ignore_ascii_case(kw))
}

/// Reads the statements of this module; `None` when the text is something
/// else.
pub(crate) fn parse_erasure_statement(sql: &str) -> Result<Option<Statement>, SqlError> {
    let lower = sql.trim_start().to_ascii_lowercase();
    let words: Vec<&str> = lower.split_whitespace().take(2).collect();
    let verify = match words.as_slice() {
        ["erase", ..] => false,
        ["verify", w] if w.trim_end_matches(';') == "erasure" => true,
        _ => return Ok(None),
    };
    let all: Vec<Token> = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize()
        .map_err(|e| SqlError::Syntax(e.to_string()))?;
    let mut sig: Vec<(usize, &Token)> = all
        .iter()
        .enumerate()
        .filter(|(_, t)| !matches!(t, Token::Whitespace(_) | Token::EOF))
        .collect();
    while matches!(sig.last(), Some((_, Token::SemiColon))) {
        sig.pop();
    }
    let tok = |i: usize| sig.get(i).map(|(_, t)| *t);
    if verify {
        let id = match tok(2) {
            Some(Token::Number(n, _)) => n.parse::<u64>().ok(),
            _ => None,
        }
        .ok_or_else(|| {
            SqlError::Syntax("VERIFY ERASURE takes an erasure's number: VERIFY ERASURE 1".into())
        })?;
        if let Some(t) = tok(3) {
            return Err(SqlError::Syntax(format!("syntax error at or near \"{t}\"")));
        }
        return Ok(Some(Statement::VerifyErasure { id }));
    }
    if !tok(1).is_some_and(|t| is_word(t, "from")) {
        return Err(SqlError::Syntax(
            "expected ERASE FROM table [WHERE ...] or ERASE FROM ALL TABLES WHERE ...".into(),
        ));
    }
    // A trailing WITH (suppress = '...').
    let mut end = sig.len();
    let mut suppress = None;
    if let Some(w) = (2..sig.len()).find(|&i| {
        tok(i).is_some_and(|t| is_word(t, "with")) && matches!(tok(i + 1), Some(Token::LParen))
    }) {
        if !matches!(sig.last(), Some((_, Token::RParen))) {
            return Err(SqlError::Syntax(
                "expected WITH (suppress = 'forever' | '30 days') at the end".into(),
            ));
        }
        let mut i = w + 2;
        while i < sig.len() - 1 {
            let name = match tok(i) {
                Some(Token::Word(word)) => word.value.to_lowercase(),
                Some(t) => {
                    return Err(SqlError::Syntax(format!("syntax error at or near \"{t}\"")))
                }
                None => break,
            };
            if !matches!(tok(i + 1), Some(Token::Eq)) {
                return Err(SqlError::Syntax(format!("expected = after \"{name}\"")));
            }
            let value = match tok(i + 2) {
                Some(Token::SingleQuotedString(s)) => s.clone(),
                Some(Token::Word(word)) => word.value.clone(),
                _ => return Err(SqlError::Syntax(format!("expected a value for \"{name}\""))),
            };
            match name.as_str() {
                "suppress" => suppress = Some(suppress_option(&value)?),
                other => {
                    return Err(SqlError::InvalidOption(format!(
                        "unknown ERASE option \"{other}\": ERASE takes suppress = 'forever' or a duration"
                    )))
                }
            }
            i += 3;
            if matches!(tok(i), Some(Token::Comma)) {
                i += 1;
            }
        }
        end = w;
    }
    let text = |from: usize, to: usize| -> String {
        match (sig.get(from), sig.get(to.saturating_sub(1))) {
            (Some((a, _)), Some((b, _))) if from < to => {
                all[*a..=*b].iter().map(|t| t.to_string()).collect()
            }
            _ => String::new(),
        }
    };
    if tok(2).is_some_and(|t| is_word(t, "all")) && tok(3).is_some_and(|t| is_word(t, "tables")) {
        if !tok(4).is_some_and(|t| is_word(t, "where")) || end <= 5 {
            return Err(SqlError::Syntax(
                "ERASE FROM ALL TABLES needs a WHERE clause over a column the tables share".into(),
            ));
        }
        let selection = text(5, end);
        // The condition must parse as one.
        crate::parse::parse_sql(&format!("SELECT 1 WHERE {selection}"))?;
        return Ok(Some(Statement::Erase {
            table: None,
            selection: Some(selection),
            suppress,
        }));
    }
    match crate::parse::parse_sql(&format!("DELETE FROM {}", text(2, end)))? {
        Statement::Delete { table, selection } => Ok(Some(Statement::Erase {
            table: Some(table),
            selection,
            suppress,
        })),
        _ => Err(SqlError::Syntax(
            "expected ERASE FROM table [WHERE ...]".into(),
        )),
    }
}

/// `suppress = 'forever'` (None inside) or a duration ('30 days'), as
/// written, after checking it.
fn suppress_option(value: &str) -> Result<String, SqlError> {
    let v = value.trim().to_lowercase();
    if v == "forever" {
        return Ok(v);
    }
    crate::ddl::parse_duration_us(&v).map_err(|_| {
        SqlError::InvalidOption(format!(
            "invalid suppress \"{value}\": expected 'forever' or a duration such as '30 days'"
        ))
    })?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn erase(sql: &str) -> (Option<String>, Option<String>, Option<String>) {
        match parse_erasure_statement(sql).unwrap().unwrap() {
            Statement::Erase {
                table,
                selection,
                suppress,
            } => (table, selection, suppress),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn erase_statements_read_their_table_condition_and_suppression() {
        assert_eq!(
            erase("ERASE FROM requests WHERE user_id = 'u42';"),
            (
                Some("requests".into()),
                Some("user_id = 'u42'".into()),
                None
            )
        );
        assert_eq!(
            erase(
                "erase from \"Req\" where a in (1, 2) and b like 'x%' with (suppress = 'forever')"
            ),
            (
                Some("Req".into()),
                Some("a IN (1, 2) AND b LIKE 'x%'".into()),
                Some("forever".into())
            )
        );
        assert_eq!(
            erase("ERASE FROM ALL TABLES WHERE user_id = 'u42' WITH (suppress = '30 days')"),
            (None, Some("user_id = 'u42'".into()), Some("30 days".into()))
        );
        assert_eq!(erase("ERASE FROM t"), (Some("t".into()), None, None));
        assert!(matches!(
            parse_erasure_statement("VERIFY ERASURE 7").unwrap(),
            Some(Statement::VerifyErasure { id: 7 })
        ));
        for bad in [
            "ERASE t",
            "ERASE FROM ALL TABLES",
            "ERASE FROM t WITH (suppress = 'sometimes')",
            "ERASE FROM t WITH (keep = 'x')",
            "VERIFY ERASURE x",
            "ERASE FROM t WHERE (",
        ] {
            assert!(parse_erasure_statement(bad).is_err(), "{bad}");
        }
        assert!(parse_erasure_statement("SELECT 1").unwrap().is_none());
    }
}
