//! PostgreSQL syntax the parser does not read, rewritten on the tokens
//! before it parses:
//!
//! - `x BETWEEN SYMMETRIC a AND b` (marked here, finished by
//!   `crate::postgres_syntax`);
//! - the postfix operator `x ISNULL` (`x IS NULL`), which the parser would
//!   read as a column alias or refuse.

use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer, Word};

/// The function `BETWEEN SYMMETRIC` is read as: `x BETWEEN SYMMETRIC a
/// AND b` becomes `x BETWEEN sluice_symmetric(a) AND b` here, which the
/// parser reads, and `rewrite_postgres_syntax` then turns into
/// `(x BETWEEN a AND b OR x BETWEEN b AND a)`.
pub(crate) const SYMMETRIC_MARK: &str = "sluice_symmetric";

/// The text with each `BETWEEN SYMMETRIC a AND` marked (see
/// [`SYMMETRIC_MARK`]); None when there is none.
pub(crate) fn between_symmetric(sql: &str) -> Option<String> {
    if !sql.to_ascii_lowercase().contains("symmetric") {
        return None;
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let is_word = |t: &Token, kw: &str| matches!(t, Token::Word(Word { value, quote_style: None, .. }) if value.eq_ignore_ascii_case(kw));
    let mut out: Vec<Token> = Vec::with_capacity(tokens.len() + 4);
    let mut changed = false;
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        out.push(t.clone());
        i += 1;
        if !is_word(t, "between") {
            continue;
        }
        let mut j = i;
        while j < tokens.len() && matches!(tokens[j], Token::Whitespace(_)) {
            j += 1;
        }
        if j >= tokens.len() || !is_word(&tokens[j], "symmetric") {
            continue;
        }
        // The low bound runs to the AND at its own nesting level.
        let mut depth = 0i32;
        let mut end = j + 1;
        while end < tokens.len() {
            match &tokens[end] {
                Token::LParen => depth += 1,
                Token::RParen => depth -= 1,
                t if depth == 0 && is_word(t, "and") => break,
                _ => {}
            }
            end += 1;
        }
        if end >= tokens.len() {
            return None;
        }
        out.push(Token::Whitespace(sqlparser::tokenizer::Whitespace::Space));
        out.push(Token::make_word(SYMMETRIC_MARK, None));
        out.push(Token::LParen);
        out.extend(tokens[j + 1..end].iter().cloned());
        out.push(Token::RParen);
        out.push(Token::Whitespace(sqlparser::tokenizer::Whitespace::Space));
        i = end;
        changed = true;
    }
    changed.then(|| out.iter().map(|t| t.to_string()).collect())
}

/// Words after which `isnull` starts a clause or names a column rather
/// than testing the value before it.
const BEFORE_A_NAME: [&str; 22] = [
    "select",
    "as",
    "from",
    "where",
    "and",
    "or",
    "not",
    "on",
    "by",
    "when",
    "then",
    "else",
    "case",
    "distinct",
    "all",
    "having",
    "set",
    "returning",
    "table",
    "into",
    "using",
    "with",
];

/// The text with each postfix `isnull` written `IS NULL`; None when there
/// is none.
pub(crate) fn postfix_null_tests(sql: &str) -> Option<String> {
    if !sql.to_ascii_lowercase().contains("isnull") {
        return None;
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let significant = |i: usize, step: isize| {
        let mut j = i as isize + step;
        while j >= 0 && (j as usize) < tokens.len() {
            if !matches!(tokens[j as usize], Token::Whitespace(_)) {
                return Some(&tokens[j as usize]);
            }
            j += step;
        }
        None
    };
    let mut out = tokens.clone();
    let mut changed = false;
    for (i, t) in tokens.iter().enumerate() {
        let Token::Word(Word {
            value,
            quote_style: None,
            ..
        }) = t
        else {
            continue;
        };
        if !value.eq_ignore_ascii_case("isnull") {
            continue;
        }
        let ends_a_value = match significant(i, -1) {
            Some(
                Token::Number(..) | Token::SingleQuotedString(_) | Token::RParen | Token::RBracket,
            ) => true,
            Some(Token::Word(w)) => {
                w.quote_style.is_some()
                    || !BEFORE_A_NAME
                        .iter()
                        .any(|k| w.value.eq_ignore_ascii_case(k))
            }
            _ => false,
        };
        let named = matches!(significant(i, 1), Some(Token::LParen | Token::Period));
        if ends_a_value && !named {
            out[i] = Token::make_word("IS NULL", None);
            changed = true;
        }
    }
    changed.then(|| out.iter().map(|t| t.to_string()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postfix_isnull_is_a_null_test_and_a_name_elsewhere() {
        assert_eq!(
            postfix_null_tests("SELECT 1 isnull, x ISNULL FROM t WHERE (a + 1) isnull").as_deref(),
            Some("SELECT 1 IS NULL, x IS NULL FROM t WHERE (a + 1) IS NULL")
        );
        assert_eq!(postfix_null_tests("SELECT isnull FROM t"), None);
        assert_eq!(
            postfix_null_tests("SELECT 1 AS isnull, t.isnull FROM t"),
            None
        );
        assert_eq!(postfix_null_tests("CREATE TABLE t (isnull INT)"), None);
        assert_eq!(postfix_null_tests("SELECT 'isnull'"), None);
    }
}
