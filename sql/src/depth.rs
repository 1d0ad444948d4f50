//! Limits that keep one statement from taking the server down: the size of
//! a query's text, and how deeply its expressions nest.
//!
//! Parsing, planning, optimizing and even dropping a syntax tree recurse
//! over it, so a tree thousands of levels deep (a query builder's
//! `a AND b AND c ...` of 100,000 terms is a left-deep chain that deep)
//! would overflow a thread's stack and abort the process. The nesting is
//! estimated from the tokens alone, before any tree exists, and a statement
//! past the limit is refused with 54001, as PostgreSQL refuses one past
//! `max_stack_depth`.

use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::Token;

use crate::SqlError;

/// The deepest expression nesting a statement may have (see
/// [`nesting_depth`]). The server runs statements on threads with stacks
/// large enough for this with a wide margin.
pub const MAX_NESTING_DEPTH: usize = 5_000;

/// How deep sqlparser may recurse (its default is 50, which refuses
/// subqueries nested about 20 deep; PostgreSQL takes far more). Each
/// nested subquery costs the parser a few levels.
pub const PARSER_RECURSION_LIMIT: usize = 1_000;

/// The longest query text one statement (a simple Query or a Parse
/// message) may have; COPY data is not bound by it.
pub const MAX_QUERY_BYTES: usize = 64 << 20;

/// An upper estimate of how deep the syntax tree of these tokens nests:
/// each open parenthesis or bracket is one level, and within one level
/// every binary operator or operator-like keyword (`AND`, `OR`, `NOT`,
/// `IS`, `LIKE`, `BETWEEN`, `CASE`, ...) deepens the left-deep chain it
/// builds by one. Lists (commas) do not nest.
pub fn nesting_depth(tokens: &[Token]) -> usize {
    // Operators seen so far at each open level.
    let mut levels: Vec<usize> = vec![0];
    let mut depth = 0usize;
    let mut deepest = 0usize;
    for t in tokens {
        match t {
            Token::LParen | Token::LBracket | Token::LBrace => {
                levels.push(0);
                depth += 1;
            }
            Token::RParen | Token::RBracket | Token::RBrace if levels.len() > 1 => {
                let ops = levels.pop().unwrap_or(0);
                depth = depth.saturating_sub(ops + 1);
            }
            Token::SemiColon => {
                levels = vec![0];
                depth = 0;
            }
            t if is_operator(t) => {
                if let Some(ops) = levels.last_mut() {
                    *ops += 1;
                }
                depth += 1;
            }
            _ => {}
        }
        deepest = deepest.max(depth);
    }
    deepest
}

fn is_operator(t: &Token) -> bool {
    match t {
        Token::Word(w) => matches!(
            w.keyword,
            Keyword::AND
                | Keyword::OR
                | Keyword::NOT
                | Keyword::IS
                | Keyword::LIKE
                | Keyword::ILIKE
                | Keyword::SIMILAR
                | Keyword::BETWEEN
                | Keyword::IN
                | Keyword::CASE
                | Keyword::WHEN
                | Keyword::UNION
                | Keyword::INTERSECT
                | Keyword::EXCEPT
                | Keyword::JOIN
        ),
        Token::Plus
        | Token::Minus
        | Token::Mul
        | Token::Div
        | Token::Mod
        | Token::StringConcat
        | Token::Eq
        | Token::DoubleEq
        | Token::Neq
        | Token::Lt
        | Token::Gt
        | Token::LtEq
        | Token::GtEq
        | Token::Spaceship
        | Token::DoubleColon
        | Token::Caret
        | Token::Ampersand
        | Token::Pipe
        | Token::Tilde
        | Token::ShiftLeft
        | Token::ShiftRight
        | Token::Arrow
        | Token::LongArrow
        | Token::HashArrow
        | Token::HashLongArrow
        | Token::AtArrow
        | Token::ArrowAt => true,
        _ => false,
    }
}

/// Refuses a statement whose nesting passes [`MAX_NESTING_DEPTH`].
pub fn check_nesting(tokens: &[Token]) -> Result<(), SqlError> {
    let depth = nesting_depth(tokens);
    if depth > MAX_NESTING_DEPTH {
        return Err(SqlError::TooDeep(format!(
            "the statement nests about {depth} levels deep (the limit is {MAX_NESTING_DEPTH}); \
             write long AND/OR chains as IN lists, or split the statement"
        )));
    }
    Ok(())
}

/// Refuses a query text longer than [`MAX_QUERY_BYTES`].
pub fn check_query_size(sql: &str) -> Result<(), SqlError> {
    if sql.len() > MAX_QUERY_BYTES {
        return Err(SqlError::TooLarge(format!(
            "the query text is {} bytes; the limit is {MAX_QUERY_BYTES} (load large values with COPY)",
            sql.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::tokenizer::Tokenizer;

    fn depth(sql: &str) -> usize {
        let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
            .tokenize()
            .unwrap();
        nesting_depth(&tokens)
    }

    #[test]
    fn chains_nest_and_lists_do_not() {
        assert_eq!(depth("SELECT 1"), 0);
        let chain = format!("SELECT 1 WHERE {}", vec!["1=1"; 100].join(" AND "));
        assert_eq!(depth(&chain), 199);
        let list = format!(
            "SELECT 1 WHERE x IN ({})",
            (0..1000)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        assert_eq!(depth(&list), 2);
        let nested = format!("SELECT {}1{}", "(".repeat(50), ")".repeat(50));
        assert_eq!(depth(&nested), 50);
        // A closed level's operators no longer count.
        assert_eq!(depth("SELECT (1+2+3), (4)"), 3);
        // Statements are measured one by one.
        assert_eq!(depth("SELECT 1+1+1; SELECT 2"), 2);
    }

    #[test]
    fn limits_refuse_with_their_sqlstates() {
        let chain = format!("SELECT 1 WHERE {}", vec!["1=1"; 100_000].join(" AND "));
        let tokens = Tokenizer::new(&PostgreSqlDialect {}, &chain)
            .tokenize()
            .unwrap();
        assert_eq!(check_nesting(&tokens).unwrap_err().sqlstate(), "54001");
        let big = "x".repeat(MAX_QUERY_BYTES + 1);
        assert_eq!(check_query_size(&big).unwrap_err().sqlstate(), "54000");
    }
}
