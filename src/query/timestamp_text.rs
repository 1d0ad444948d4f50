//! Timestamp text in the forms PostgreSQL reads and Arrow's parser does
//! not: `2026-01-01 10:00` (minutes, no seconds). An analyzer rule, run
//! after type coercion, completes such a string literal cast to a
//! timestamp (`'2026-01-01 10:00'::timestamp`, or a literal compared with
//! a timestamp column) to `2026-01-01 10:00:00`; the ingest path reads the
//! same form ([`crate::ingest::timestamp_with_seconds`]).

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::{Cast, TryCast};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;

use arrow::datatypes::DataType;

use crate::ingest::timestamp_with_seconds as with_seconds;

/// The analyzer rule; add it to every session that plans user queries.
#[derive(Debug, Default)]
pub struct TimestampText;

impl AnalyzerRule for TimestampText {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            // A projection's columns keep the names the query gave them.
            let keep_names = matches!(node, LogicalPlan::Projection(_));
            node.map_expressions(|e| {
                let name = e.schema_name().to_string();
                let named = matches!(e, Expr::Alias(_));
                let t = e.transform_up(|e| Ok(complete(e)))?;
                Ok(match (t.transformed && keep_names && !named, t) {
                    (true, t) => Transformed::yes(t.data.alias(name)),
                    (false, t) => t,
                })
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "postgres_timestamp_text"
    }
}

fn complete(e: Expr) -> Transformed<Expr> {
    let (inner, to) = match &e {
        Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field }) => {
            (expr.as_ref(), field.data_type())
        }
        _ => return Transformed::no(e),
    };
    let (Expr::Literal(ScalarValue::Utf8(Some(text)), meta), DataType::Timestamp(..)) = (inner, to)
    else {
        return Transformed::no(e);
    };
    let Some(full) = with_seconds(text) else {
        return Transformed::no(e);
    };
    let literal = Box::new(Expr::Literal(ScalarValue::Utf8(Some(full)), meta.clone()));
    Transformed::yes(match e {
        Expr::Cast(Cast { field, .. }) => Expr::Cast(Cast {
            expr: literal,
            field,
        }),
        Expr::TryCast(TryCast { field, .. }) => Expr::TryCast(TryCast {
            expr: literal,
            field,
        }),
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::with_seconds;

    #[test]
    fn minutes_get_seconds_and_other_forms_stay() {
        assert_eq!(
            with_seconds("2026-01-01 10:00").as_deref(),
            Some("2026-01-01 10:00:00")
        );
        assert_eq!(
            with_seconds("2026-01-01T10:00").as_deref(),
            Some("2026-01-01T10:00:00")
        );
        for other in [
            "2026-01-01",
            "2026-01-01 10:00:00",
            "2026-01-01 10:0x",
            "10:00",
        ] {
            assert_eq!(with_seconds(other), None, "{other}");
        }
    }
}
