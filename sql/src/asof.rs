//! `ASOF JOIN`: each row of the left input meets the one row of the right
//! input (of the same keys) nearest in time on one side of it.
//!
//! Two spellings are read, each `[LEFT] ASOF JOIN` (or DuckDB's `ASOF LEFT
//! JOIN`), a plain `ASOF JOIN` being inner:
//!
//! - Snowflake's and DataFusion's: `ASOF JOIN r MATCH_CONDITION (l.t >=
//!   r.t) [ON l.k = r.k]`;
//! - DuckDB's: `ASOF JOIN r ON l.k = r.k AND l.t >= r.t`, or `USING (k, t)`
//!   (the last column is the time, matched with `>=`).
//!
//! Either may end in `WITH (tolerance = '7 days', as_known_at = true)`.
//!
//! sqlparser reads the first spelling alone, without LEFT or options, so
//! [`mark_asof_joins`] rewrites each ASOF JOIN's text into it, with the
//! match condition and the options inside one call of [`ASOF_MARK`]:
//! `ASOF JOIN r MATCH_CONDITION (sluice_asof(left, tolerance, as_known_at,
//! condition)) ON ...` (the condition NULL when it is still in the ON
//! clause). This form is also what a view's stored query holds. Before
//! planning, [`rewrite_asof_joins`] makes each a plain join DataFusion
//! plans, `[LEFT] JOIN r ON sluice_asof(...) AND <equalities>`, with the
//! condition found; the query engine then replaces that join by its ASOF
//! operator (a join with the marker in its condition is never run as a
//! join).

use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, JoinConstraint,
    JoinOperator, ObjectNamePart, Query, Select, SelectItem, SetExpr, TableFactor, TableWithJoins,
    Value, VisitMut, VisitorMut,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer, Whitespace};

use crate::error::SqlError;
use crate::reads::{is_word, next_sig, prev_sig};

/// The function a join's condition carries to say it is an ASOF join:
/// `sluice_asof(left, tolerance, as_known_at, match_condition)`.
pub const ASOF_MARK: &str = "sluice_asof";

/// The options of one ASOF JOIN.
#[derive(Debug, Clone, Default, PartialEq)]
struct AsofOptions {
    left: bool,
    tolerance: Option<String>,
    as_known_at: bool,
}

/// The text with each ASOF JOIN in the marked form (see the module
/// header); None when there is none.
pub(crate) fn mark_asof_joins(sql: &str) -> Result<Option<String>, SqlError> {
    if !sql
        .as_bytes()
        .windows(4)
        .any(|w| w.eq_ignore_ascii_case(b"asof"))
    {
        return Ok(None);
    }
    let Ok(mut tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return Ok(None);
    };
    let mut changed = false;
    let mut i = 0;
    while i < tokens.len() {
        if !is_word(&tokens[i], "asof") {
            i += 1;
            continue;
        }
        let mut options = AsofOptions::default();
        // `LEFT [OUTER] ASOF JOIN`
        let mut start = i;
        if let Some(p) = prev_sig(&tokens, i) {
            let mut p = p;
            if is_word(&tokens[p], "outer") {
                if let Some(pp) = prev_sig(&tokens, p).filter(|&pp| is_word(&tokens[pp], "left")) {
                    p = pp;
                }
            }
            if is_word(&tokens[p], "left") {
                options.left = true;
                start = p;
            } else if is_word(&tokens[p], "inner") {
                start = p;
            }
        }
        // `ASOF [LEFT [OUTER] | INNER] JOIN`
        let mut j = next_sig(&tokens, i + 1);
        if is_word_at(&tokens, j, "left") {
            options.left = true;
            j = next_sig(&tokens, j + 1);
            if is_word_at(&tokens, j, "outer") {
                j = next_sig(&tokens, j + 1);
            }
        } else if is_word_at(&tokens, j, "inner") {
            j = next_sig(&tokens, j + 1);
        }
        if !is_word_at(&tokens, j, "join") {
            // A column or alias named asof.
            i += 1;
            continue;
        }
        let relation_start = j + 1;
        let constraint_at = constraint_start(&tokens, relation_start)?;
        let mut condition: Option<Vec<Token>> = None;
        let mut rest_at = constraint_at;
        if is_word_at(&tokens, constraint_at, "match_condition") {
            let open = next_sig(&tokens, constraint_at + 1);
            if !matches!(tokens.get(open), Some(Token::LParen)) {
                return Err(SqlError::Syntax(
                    "MATCH_CONDITION takes a condition in parentheses".into(),
                ));
            }
            let close = matching_paren(&tokens, open).ok_or_else(|| {
                SqlError::Syntax("MATCH_CONDITION's parenthesis is not closed".into())
            })?;
            let inner = &tokens[open + 1..close];
            // An earlier rewrite's marked form stays as it is.
            if let Some(first) = inner.iter().find(|t| !matches!(t, Token::Whitespace(_))) {
                if is_word(first, ASOF_MARK) {
                    i = close + 1;
                    continue;
                }
            }
            condition = Some(inner.to_vec());
            rest_at = close + 1;
        }
        let constraint_end = constraint_end(&tokens, rest_at)?;
        // `WITH (tolerance = '7 days', as_known_at = true)`
        let mut end = constraint_end;
        let w = next_sig(&tokens, constraint_end);
        if is_word_at(&tokens, w, "with")
            && matches!(tokens.get(next_sig(&tokens, w + 1)), Some(Token::LParen))
        {
            end = join_options(&tokens, next_sig(&tokens, w + 1), &mut options)?;
        }
        let marker = format!(
            "{ASOF_MARK}({}, {}, {}, {})",
            options.left,
            options
                .tolerance
                .as_ref()
                .map(|t| format!("'{}'", t.replace('\'', "''")))
                .unwrap_or_else(|| "NULL".into()),
            options.as_known_at,
            condition
                .map(|c| format!("({})", c.iter().map(|t| t.to_string()).collect::<String>()))
                .unwrap_or_else(|| "NULL".into()),
        );
        let space = || Token::Whitespace(Whitespace::Space);
        let mut replacement = vec![
            Token::make_keyword("ASOF"),
            space(),
            Token::make_keyword("JOIN"),
        ];
        let relation = trimmed(&tokens[relation_start..constraint_at]);
        let constraint = trimmed(&tokens[rest_at..constraint_end]);
        replacement.push(space());
        replacement.extend(relation.iter().cloned());
        replacement.push(space());
        replacement.push(Token::make_keyword("MATCH_CONDITION"));
        replacement.push(space());
        replacement.push(Token::LParen);
        replacement.push(Token::make_word(&marker, None));
        replacement.push(Token::RParen);
        if !constraint.is_empty() {
            replacement.push(space());
            replacement.extend(constraint.iter().cloned());
        }
        if end < tokens.len() {
            replacement.push(space());
        }
        let len = replacement.len();
        tokens.splice(start..end, replacement);
        i = start + len;
        changed = true;
    }
    Ok(changed.then(|| tokens.iter().map(|t| t.to_string()).collect()))
}

/// A query's text with each marked ASOF JOIN spelled as a user writes it
/// (`[LEFT] ASOF JOIN r [MATCH_CONDITION (...)] ON ... [WITH (...)]`): what
/// a view's definition shows. Reading it again gives the same query.
pub fn unmark_asof_joins(sql: &str) -> String {
    if !sql.contains(ASOF_MARK) {
        return sql.to_string();
    }
    let Ok(mut tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return sql.to_string();
    };
    let mut i = 0;
    while i < tokens.len() {
        let open = next_sig(&tokens, i + 1);
        let mark = next_sig(&tokens, open + 1);
        let args_open = next_sig(&tokens, mark + 1);
        let marked = is_word(&tokens[i], "match_condition")
            && matches!(tokens.get(open), Some(Token::LParen))
            && is_word_at(&tokens, mark, ASOF_MARK)
            && matches!(tokens.get(args_open), Some(Token::LParen));
        let (Some(close), Some(args_close), Some(asof)) = (
            marked.then(|| matching_paren(&tokens, open)).flatten(),
            marked.then(|| matching_paren(&tokens, args_open)).flatten(),
            (0..i).rev().find(|&j| is_word(&tokens[j], "asof")),
        ) else {
            i += 1;
            continue;
        };
        // The marker's four arguments, split at its own commas.
        let mut args: Vec<Vec<Token>> = vec![Vec::new()];
        let mut depth = 0usize;
        for t in &tokens[args_open + 1..args_close] {
            match t {
                Token::LParen => depth += 1,
                Token::RParen => depth = depth.saturating_sub(1),
                Token::Comma if depth == 0 => {
                    args.push(Vec::new());
                    continue;
                }
                _ => {}
            }
            if let Some(last) = args.last_mut() {
                last.push(t.clone());
            }
        }
        let text = |ts: &[Token]| {
            trimmed(ts)
                .iter()
                .map(|t| t.to_string())
                .collect::<String>()
        };
        let [left, tolerance, known, condition] = match <[Vec<Token>; 4]>::try_from(args) {
            Ok(a) => a.map(|a| text(&a)),
            Err(_) => {
                i += 1;
                continue;
            }
        };
        let Ok(constraint_end) = constraint_end(&tokens, close + 1) else {
            i += 1;
            continue;
        };
        let mut options = Vec::new();
        if !tolerance.eq_ignore_ascii_case("null") {
            options.push(format!("tolerance = {tolerance}"));
        }
        if known.eq_ignore_ascii_case("true") {
            options.push("as_known_at = true".to_string());
        }
        let relation = text(&tokens[asof + 1..i]);
        let mut out = String::new();
        if left.eq_ignore_ascii_case("true") {
            out.push_str("LEFT ");
        }
        out.push_str(&format!("ASOF {relation}"));
        if !condition.eq_ignore_ascii_case("null") {
            out.push_str(&format!(" MATCH_CONDITION {condition}"));
        }
        let constraint = text(&tokens[close + 1..constraint_end]);
        if !constraint.is_empty() {
            out.push_str(&format!(" {constraint}"));
        }
        if !options.is_empty() {
            out.push_str(&format!(" WITH ({})", options.join(", ")));
        }
        let replacement = vec![Token::make_word(&out, None)];
        tokens.splice(asof..constraint_end, replacement);
        i = asof + 1;
    }
    tokens.iter().map(|t| t.to_string()).collect()
}

/// Where the relation after `ASOF JOIN` ends: its MATCH_CONDITION, ON or
/// USING.
fn constraint_start(tokens: &[Token], from: usize) -> Result<usize, SqlError> {
    let mut depth = 0usize;
    for (k, t) in tokens.iter().enumerate().skip(from) {
        match t {
            Token::LParen => depth += 1,
            Token::RParen if depth == 0 => break,
            Token::RParen => depth -= 1,
            t if depth == 0
                && ["match_condition", "on", "using"]
                    .iter()
                    .any(|w| is_word(t, w)) =>
            {
                return Ok(k)
            }
            t if depth == 0 && (ends_clause(t) || matches!(t, Token::Comma | Token::SemiColon)) => {
                break
            }
            _ => {}
        }
    }
    Err(SqlError::Syntax(
        "ASOF JOIN needs its match: MATCH_CONDITION (l.t >= r.t), or ON l.k = r.k AND l.t >= r.t, or USING (k, t)"
            .into(),
    ))
}

/// Where the ON or USING clause from `from` ends (`from` itself when
/// there is none).
fn constraint_end(tokens: &[Token], from: usize) -> Result<usize, SqlError> {
    let at = next_sig(tokens, from);
    if is_word_at(tokens, at, "using") {
        let open = next_sig(tokens, at + 1);
        if !matches!(tokens.get(open), Some(Token::LParen)) {
            return Err(SqlError::Syntax(
                "USING takes columns in parentheses".into(),
            ));
        }
        return matching_paren(tokens, open)
            .map(|c| c + 1)
            .ok_or_else(|| SqlError::Syntax("USING's parenthesis is not closed".into()));
    }
    if !is_word_at(tokens, at, "on") {
        return Ok(from);
    }
    let mut depth = 0usize;
    let mut k = at + 1;
    while k < tokens.len() {
        match &tokens[k] {
            Token::LParen => depth += 1,
            Token::RParen if depth == 0 => break,
            Token::RParen => depth -= 1,
            t if depth == 0
                && (ends_clause(t)
                    || is_word(t, "with")
                    || matches!(t, Token::Comma | Token::SemiColon)) =>
            {
                break
            }
            _ => {}
        }
        k += 1;
    }
    // Whitespace before the next clause stays outside.
    while k > at + 1 && matches!(tokens[k - 1], Token::Whitespace(_)) {
        k -= 1;
    }
    Ok(k)
}

/// Words that start the clause after a join's condition.
fn ends_clause(t: &Token) -> bool {
    [
        "join",
        "inner",
        "left",
        "right",
        "full",
        "cross",
        "natural",
        "asof",
        "where",
        "group",
        "having",
        "order",
        "limit",
        "offset",
        "fetch",
        "window",
        "qualify",
        "union",
        "except",
        "intersect",
        "emit",
        "returning",
        "lateral",
    ]
    .iter()
    .any(|w| is_word(t, w))
}

/// Reads `(key = value, ...)` at `open`; returns where it ends.
fn join_options(
    tokens: &[Token],
    open: usize,
    options: &mut AsofOptions,
) -> Result<usize, SqlError> {
    let close = matching_paren(tokens, open)
        .ok_or_else(|| SqlError::Syntax("WITH's parenthesis is not closed".into()))?;
    let inner: Vec<&Token> = tokens[open + 1..close]
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    for option in inner.split(|t| matches!(t, Token::Comma)) {
        let [Token::Word(key), Token::Eq, value] = option else {
            return Err(SqlError::Syntax(
                "ASOF JOIN ... WITH takes (tolerance = '7 days', as_known_at = true)".into(),
            ));
        };
        let value = match value {
            Token::SingleQuotedString(s) => s.clone(),
            Token::Number(n, _) => n.clone(),
            Token::Word(w) => w.value.to_lowercase(),
            _ => String::new(),
        };
        match key.value.to_lowercase().as_str() {
            "tolerance" => options.tolerance = Some(value),
            "as_known_at" => {
                options.as_known_at = match value.as_str() {
                    "true" | "on" | "1" => true,
                    "false" | "off" | "0" => false,
                    _ => {
                        return Err(SqlError::InvalidOption(format!(
                            "as_known_at takes true or false, not \"{value}\""
                        )))
                    }
                }
            }
            other => {
                return Err(SqlError::InvalidOption(format!(
                "unknown ASOF JOIN option \"{other}\" (the options are tolerance and as_known_at)"
            )))
            }
        }
    }
    Ok(close + 1)
}

/// The tokens without whitespace at either end.
fn trimmed(tokens: &[Token]) -> &[Token] {
    let sig = |t: &Token| !matches!(t, Token::Whitespace(_));
    match (tokens.iter().position(sig), tokens.iter().rposition(sig)) {
        (Some(a), Some(b)) => &tokens[a..=b],
        _ => &[],
    }
}

fn matching_paren(tokens: &[Token], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (k, t) in tokens.iter().enumerate().skip(open) {
        match t {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    return Some(k);
                }
            }
            _ => {}
        }
    }
    None
}

fn is_word_at(tokens: &[Token], i: usize, w: &str) -> bool {
    tokens.get(i).is_some_and(|t| is_word(t, w))
}

/// Makes each ASOF JOIN of the statement a join DataFusion plans, with
/// [`ASOF_MARK`] and the match condition first in its ON clause (see the
/// module header). Runs after the hidden columns are taken out of `*`,
/// which lists a `USING` column once.
pub fn rewrite_asof_joins(statement: &mut sqlparser::ast::Statement) -> Result<(), SqlError> {
    let mut rewriter = AsofRewriter { error: None };
    let _ = statement.visit(&mut rewriter);
    match rewriter.error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

struct AsofRewriter {
    error: Option<SqlError>,
}

impl VisitorMut for AsofRewriter {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let Err(e) = rewrite_set(&mut query.body) {
            self.error = Some(e);
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

fn rewrite_set(set: &mut SetExpr) -> Result<(), SqlError> {
    match set {
        SetExpr::Select(select) => rewrite_select(select),
        SetExpr::SetOperation { left, right, .. } => {
            rewrite_set(left)?;
            rewrite_set(right)
        }
        _ => Ok(()),
    }
}

fn rewrite_select(select: &mut Select) -> Result<(), SqlError> {
    let mut using_columns: Vec<(String, Ident)> = Vec::new();
    for twj in &mut select.from {
        rewrite_joins(twj, &mut using_columns)?;
    }
    if using_columns.is_empty() {
        return Ok(());
    }
    // A USING column named alone is the left input's, as DuckDB reads it.
    let mut qualify = QualifyUsing {
        columns: using_columns,
    };
    for item in &mut select.projection {
        if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
            let _ = e.visit(&mut qualify);
        }
    }
    if let Some(e) = &mut select.selection {
        let _ = e.visit(&mut qualify);
    }
    if let Some(e) = &mut select.having {
        let _ = e.visit(&mut qualify);
    }
    if let sqlparser::ast::GroupByExpr::Expressions(exprs, _) = &mut select.group_by {
        for e in exprs {
            let _ = e.visit(&mut qualify);
        }
    }
    Ok(())
}

struct QualifyUsing {
    columns: Vec<(String, Ident)>,
}

impl VisitorMut for QualifyUsing {
    type Break = ();

    fn pre_visit_query(&mut self, _query: &mut Query) -> ControlFlow<()> {
        // A subquery's names are its own.
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::Identifier(id) = expr {
            let name = crate::parse::ident_name(id);
            if let Some((_, q)) = self.columns.iter().find(|(c, _)| *c == name) {
                *expr = Expr::CompoundIdentifier(vec![q.clone(), id.clone()]);
            }
        }
        ControlFlow::Continue(())
    }
}

fn rewrite_joins(
    twj: &mut TableWithJoins,
    using_columns: &mut Vec<(String, Ident)>,
) -> Result<(), SqlError> {
    nested(&mut twj.relation, using_columns)?;
    for k in 0..twj.joins.len() {
        nested(&mut twj.joins[k].relation, using_columns)?;
        let JoinOperator::AsOf {
            match_condition,
            constraint,
        } = twj.joins[k].join_operator.clone()
        else {
            continue;
        };
        let (mut args, given) = marker_args(&match_condition);
        let left = matches!(&args[0], Expr::Value(v) if v.value == Value::Boolean(true));
        let mut conjuncts = match constraint {
            JoinConstraint::On(e) => conjuncts(e),
            JoinConstraint::None => Vec::new(),
            JoinConstraint::Using(columns) => {
                let left = match k {
                    0 => qualifier(&twj.relation),
                    _ => qualifier(&twj.joins[k - 1].relation),
                };
                let right = qualifier(&twj.joins[k].relation);
                let (Some(left), Some(right)) = (left, right) else {
                    return Err(SqlError::Unsupported(
                        "ASOF JOIN ... USING needs a table or an aliased relation on each side; write ON l.k = r.k AND l.t >= r.t".into(),
                    ));
                };
                let names: Vec<Ident> = columns
                    .iter()
                    .filter_map(|c| c.0.last().and_then(ObjectNamePart::as_ident).cloned())
                    .collect();
                let Some((time, keys)) = names.split_last() else {
                    return Err(SqlError::Syntax(
                        "USING takes at least the time column".into(),
                    ));
                };
                let column =
                    |q: &Ident, c: &Ident| Expr::CompoundIdentifier(vec![q.clone(), c.clone()]);
                let mut out: Vec<Expr> = keys
                    .iter()
                    .map(|c| Expr::BinaryOp {
                        left: Box::new(column(&left, c)),
                        op: BinaryOperator::Eq,
                        right: Box::new(column(&right, c)),
                    })
                    .collect();
                out.push(Expr::BinaryOp {
                    left: Box::new(column(&left, time)),
                    op: BinaryOperator::GtEq,
                    right: Box::new(column(&right, time)),
                });
                using_columns.extend(
                    names
                        .iter()
                        .map(|c| (crate::parse::ident_name(c), left.clone())),
                );
                out
            }
            JoinConstraint::Natural => {
                return Err(SqlError::Unsupported(
                    "NATURAL ASOF JOIN is not supported; write ON or USING".into(),
                ))
            }
        };
        if !given {
            let found: Vec<usize> = conjuncts
                .iter()
                .enumerate()
                .filter(|(_, c)| is_time_match(c))
                .map(|(i, _)| i)
                .collect();
            match found.as_slice() {
                [one] => args[3] = conjuncts.remove(*one),
                [] => {
                    return Err(SqlError::Syntax(
                        "ASOF JOIN needs one inequality (>=, >, <= or <) between a column of each side, in ON or MATCH_CONDITION".into(),
                    ))
                }
                _ => {
                    return Err(SqlError::Unsupported(
                        "ASOF JOIN takes one inequality between the two sides' columns; put the match in MATCH_CONDITION".into(),
                    ))
                }
            }
        }
        let marker = marker_call(args)?;
        let condition = conjuncts.into_iter().fold(marker, |acc, c| Expr::BinaryOp {
            left: Box::new(acc),
            op: BinaryOperator::And,
            right: Box::new(c),
        });
        twj.joins[k].join_operator = match left {
            true => JoinOperator::LeftOuter(JoinConstraint::On(condition)),
            false => JoinOperator::Join(JoinConstraint::On(condition)),
        };
    }
    Ok(())
}

fn nested(factor: &mut TableFactor, using: &mut Vec<(String, Ident)>) -> Result<(), SqlError> {
    if let TableFactor::NestedJoin {
        table_with_joins, ..
    } = factor
    {
        rewrite_joins(table_with_joins, using)?;
    }
    Ok(())
}

/// The marker's four arguments, and whether the match condition is among
/// them (a MATCH_CONDITION that is no marker is the condition itself).
fn marker_args(e: &Expr) -> (Vec<Expr>, bool) {
    let null = || Expr::Value(Value::Null.into());
    if let Expr::Function(f) = e {
        let is_mark = f
            .name
            .0
            .last()
            .and_then(ObjectNamePart::as_ident)
            .is_some_and(|i| i.value.eq_ignore_ascii_case(ASOF_MARK));
        if let (true, FunctionArguments::List(list)) = (is_mark, &f.args) {
            let args: Vec<Expr> = list
                .args
                .iter()
                .filter_map(|a| match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
                    _ => None,
                })
                .collect();
            if args.len() == 4 {
                let given = !matches!(&args[3], Expr::Value(v) if v.value == Value::Null);
                return (args, given);
            }
        }
    }
    (
        vec![
            Expr::Value(Value::Boolean(false).into()),
            null(),
            Expr::Value(Value::Boolean(false).into()),
            e.clone(),
        ],
        true,
    )
}

fn marker_call(args: Vec<Expr>) -> Result<Expr, SqlError> {
    let text = format!(
        "{ASOF_MARK}({})",
        args.iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&text)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| SqlError::Syntax(e.to_string()))
}

fn conjuncts(e: Expr) -> Vec<Expr> {
    match e {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            let mut out = conjuncts(*left);
            out.extend(conjuncts(*right));
            out
        }
        Expr::Nested(inner)
            if matches!(
                *inner,
                Expr::BinaryOp {
                    op: BinaryOperator::And,
                    ..
                }
            ) =>
        {
            conjuncts(*inner)
        }
        e => vec![e],
    }
}

/// `a.t >= b.t` (or `>`, `<=`, `<`) between two columns: DuckDB's match.
fn is_time_match(e: &Expr) -> bool {
    fn column(e: &Expr) -> bool {
        match e {
            Expr::Identifier(_) | Expr::CompoundIdentifier(_) => true,
            Expr::Nested(e) => column(e),
            Expr::Cast { expr, .. } => column(expr),
            _ => false,
        }
    }
    matches!(e, Expr::BinaryOp { left, op: BinaryOperator::Gt | BinaryOperator::GtEq | BinaryOperator::Lt | BinaryOperator::LtEq, right } if column(left) && column(right))
}

/// The name a relation's columns are qualified by: its alias, or a
/// table's name.
fn qualifier(factor: &TableFactor) -> Option<Ident> {
    match factor {
        TableFactor::Table { alias: Some(a), .. } | TableFactor::Derived { alias: Some(a), .. } => {
            Some(a.name.clone())
        }
        TableFactor::Table { name, .. } => {
            name.0.last().and_then(ObjectNamePart::as_ident).cloned()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marked(sql: &str) -> String {
        mark_asof_joins(sql).unwrap().unwrap()
    }

    fn planned(sql: &str) -> String {
        let mut s = crate::parse_sql(sql).unwrap();
        match &mut s {
            crate::Statement::Query(q) => {
                rewrite_asof_joins(q).unwrap();
                q.to_string()
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn marks_each_spelling() {
        assert_eq!(
            marked("SELECT * FROM l ASOF JOIN r MATCH_CONDITION (l.t >= r.t) ON l.k = r.k"),
            "SELECT * FROM l ASOF JOIN r MATCH_CONDITION (sluice_asof(false, NULL, false, (l.t >= r.t))) ON l.k = r.k"
        );
        assert_eq!(
            marked("SELECT * FROM l LEFT ASOF JOIN r ON l.k = r.k AND l.t >= r.t WITH (tolerance = '7 days') WHERE true"),
            "SELECT * FROM l ASOF JOIN r MATCH_CONDITION (sluice_asof(true, '7 days', false, NULL)) ON l.k = r.k AND l.t >= r.t  WHERE true"
        );
        assert!(marked("SELECT * FROM l ASOF LEFT JOIN r USING (k, t)")
            .contains("sluice_asof(true, NULL, false, NULL)) USING (k, t)"));
        assert_eq!(mark_asof_joins("SELECT asof FROM t").unwrap(), None);
        assert!(mark_asof_joins("SELECT * FROM l ASOF JOIN r WHERE true").is_err());
        assert!(mark_asof_joins("SELECT * FROM l ASOF JOIN r ON true WITH (speed = 1)").is_err());
    }

    #[test]
    fn plans_as_a_marked_join() {
        assert_eq!(
            planned("SELECT * FROM l ASOF JOIN r ON l.k = r.k AND r.t <= l.t"),
            "SELECT * FROM l JOIN r ON sluice_asof(false, NULL, false, r.t <= l.t) AND l.k = r.k"
        );
        assert_eq!(
            planned("SELECT k, t, a FROM l AS x LEFT ASOF JOIN r USING (k, t) WITH (as_known_at = true)"),
            "SELECT x.k, x.t, a FROM l AS x LEFT OUTER JOIN r ON sluice_asof(true, NULL, true, x.t >= r.t) AND x.k = r.k"
        );
        // Stored in the marked form, a view's query reads back the same.
        let once = planned("SELECT * FROM l ASOF JOIN r MATCH_CONDITION (l.t > r.t)");
        assert_eq!(
            once,
            "SELECT * FROM l JOIN r ON sluice_asof(false, NULL, false, (l.t > r.t))"
        );
    }

    #[test]
    fn shows_each_join_as_written() {
        for (written, shown) in [
            (
                "SELECT * FROM l LEFT ASOF JOIN r ON l.k = r.k AND l.t >= r.t WITH (tolerance = '7 days')",
                "SELECT * FROM l LEFT ASOF JOIN r ON l.k = r.k AND l.t >= r.t WITH (tolerance = '7 days')",
            ),
            (
                "SELECT * FROM l ASOF JOIN r MATCH_CONDITION (l.t >= r.t) ON l.k = r.k WHERE l.x > 1",
                "SELECT * FROM l ASOF JOIN r MATCH_CONDITION (l.t >= r.t) ON l.k = r.k WHERE l.x > 1",
            ),
            (
                "SELECT * FROM l ASOF JOIN (SELECT * FROM r) AS s USING (k, t) WITH (as_known_at = true)",
                "SELECT * FROM l ASOF JOIN (SELECT * FROM r) AS s USING(k, t) WITH (as_known_at = true)",
            ),
        ] {
            // As a view keeps it: the marked statement printed.
            let stored = crate::parse_sql(written).unwrap();
            let crate::Statement::Query(q) = stored else { panic!() };
            let shown_now = unmark_asof_joins(&q.to_string());
            assert_eq!(shown_now, shown);
            // Read again, it is the same query.
            let again = crate::parse_sql(&shown_now).unwrap();
            let crate::Statement::Query(q2) = again else { panic!() };
            assert_eq!(q.to_string(), q2.to_string());
        }
        assert_eq!(unmark_asof_joins("SELECT 1"), "SELECT 1");
    }

    #[test]
    fn refuses_what_it_cannot_match() {
        let err = |sql: &str| {
            let mut s = crate::parse_sql(sql).unwrap();
            match &mut s {
                crate::Statement::Query(q) => rewrite_asof_joins(q).unwrap_err().sqlstate(),
                _ => "",
            }
        };
        assert_eq!(err("SELECT * FROM l ASOF JOIN r ON l.k = r.k"), "42601");
        assert_eq!(
            err("SELECT * FROM l ASOF JOIN r ON l.t >= r.t AND l.u < r.u"),
            "0A000"
        );
    }
}
