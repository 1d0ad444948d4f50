//! ASOF JOIN in a plan: the join `sluice_sql::rewrite_asof_joins` left,
//! with [`sluice_sql::ASOF_MARK`] in its condition, becomes an
//! [`AsofJoinNode`] (an analyzer rule, run after type coercion, in every
//! session that plans user SQL). Batch queries run it as
//! [`super::asof_exec::AsofJoinExec`]; a view's dataflow lifts it into its
//! ASOF operator.
//!
//! The node holds what both need: the equality keys of each side, the
//! match (`left_time op right_time`, the operator normalized so that the
//! left input's time is on its left), the lookback bound (a `tolerance`
//! option, or `r.t >= l.t - INTERVAL ...` in the condition), the
//! as-known-at columns, and the right input's tie-break columns
//! (`_partition`, `_offset`: the latest row wins among equal times).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, DFSchema, DFSchemaRef, JoinType, Result, ScalarValue};
use datafusion::logical_expr::logical_plan::builder::build_join_schema;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, Extension, LogicalPlan, Operator,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, UserDefinedLogicalNodeCore,
    Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{ExtensionPlanner, PhysicalPlanner};

use crate::error::{into_datafusion, SluiceError};

/// The right input's columns that order rows of equal time: the latest
/// (by partition, then offset) is the match.
pub const TIE_COLUMNS: [&str; 2] = ["_partition", "_offset"];

/// The right input's ingestion time, for `as_known_at`.
pub const INGESTED_COLUMN: &str = "_ingested_at";

/// An ASOF join of two inputs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AsofJoinNode {
    pub left: LogicalPlan,
    pub right: LogicalPlan,
    /// Keeps probes without a match (with NULLs), as LEFT ASOF JOIN does.
    pub keep_unmatched: bool,
    pub left_keys: Vec<Expr>,
    pub right_keys: Vec<Expr>,
    pub left_time: Expr,
    pub right_time: Expr,
    /// `left_time op right_time`: `>=` or `>` looks back, `<=` or `<`
    /// ahead.
    pub op: Operator,
    /// The lookback bound, over the left input: the match's time is at or
    /// after it (at or before it when looking ahead); after it alone when
    /// strict.
    pub bound: Option<Expr>,
    pub bound_strict: bool,
    /// How far the bound is from the probe's time, when a constant.
    pub lookback_us: Option<i64>,
    /// As known at: the left time (the probe's) and the right input's
    /// ingestion time, which must not be after it.
    pub known: Option<(Expr, Expr)>,
    /// The right input's columns that order rows of equal time.
    pub ties: Vec<Expr>,
    pub schema: DFSchemaRef,
}

impl AsofJoinNode {
    /// Whether the match looks back (`>=`, `>`).
    pub fn backward(&self) -> bool {
        matches!(self.op, Operator::GtEq | Operator::Gt)
    }

    /// One line: what it computes.
    pub fn describe(&self) -> String {
        let keys = self
            .left_keys
            .iter()
            .zip(&self.right_keys)
            .map(|(l, r)| format!("{l} = {r} AND "))
            .collect::<String>();
        let bound = self
            .bound
            .as_ref()
            .map(|b| {
                let cmp = match (self.backward(), self.bound_strict) {
                    (true, false) => ">=",
                    (true, true) => ">",
                    (false, false) => "<=",
                    (false, true) => "<",
                };
                format!(" AND {} {cmp} {b}", self.right_time)
            })
            .unwrap_or_default();
        let known = self
            .known
            .as_ref()
            .map(|(l, r)| format!(" AND {r} <= {l}"))
            .unwrap_or_default();
        format!(
            "{}ASOF JOIN ON {keys}{} {} {}{bound}{known}, ties by {}",
            if self.keep_unmatched { "LEFT " } else { "" },
            self.left_time,
            self.op,
            self.right_time,
            match self.ties.is_empty() {
                true => "nothing".to_string(),
                false => self
                    .ties
                    .iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            }
        )
    }
}

impl PartialOrd for AsofJoinNode {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        (&self.left, &self.right, self.expressions()).partial_cmp(&(
            &other.left,
            &other.right,
            other.expressions(),
        ))
    }
}

impl UserDefinedLogicalNodeCore for AsofJoinNode {
    fn name(&self) -> &str {
        "AsofJoin"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.left, &self.right]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        let mut out = self.left_keys.clone();
        out.extend(self.right_keys.iter().cloned());
        out.push(self.left_time.clone());
        out.push(self.right_time.clone());
        out.extend(self.bound.iter().cloned());
        if let Some((l, r)) = &self.known {
            out.push(l.clone());
            out.push(r.clone());
        }
        out.extend(self.ties.iter().cloned());
        out
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}", self.describe())
    }

    fn with_exprs_and_inputs(&self, exprs: Vec<Expr>, inputs: Vec<LogicalPlan>) -> Result<Self> {
        let [left, right]: [LogicalPlan; 2] = inputs.try_into().map_err(|_| {
            datafusion::error::DataFusionError::Internal("ASOF JOIN has two inputs".into())
        })?;
        let mut exprs = exprs.into_iter();
        let mut take = |n: usize| exprs.by_ref().take(n).collect::<Vec<_>>();
        let left_keys = take(self.left_keys.len());
        let right_keys = take(self.right_keys.len());
        let mut times = take(2).into_iter();
        let (Some(left_time), Some(right_time)) = (times.next(), times.next()) else {
            return Err(datafusion::error::DataFusionError::Internal(
                "ASOF JOIN lost its times".into(),
            ));
        };
        let bound = take(usize::from(self.bound.is_some())).pop();
        let known = match self.known.is_some() {
            true => {
                let mut k = take(2).into_iter();
                k.next().zip(k.next())
            }
            false => None,
        };
        let ties = take(self.ties.len());
        let schema = Arc::new(build_join_schema(
            left.schema(),
            right.schema(),
            &self.join_type(),
        )?);
        Ok(AsofJoinNode {
            left,
            right,
            keep_unmatched: self.keep_unmatched,
            left_keys,
            right_keys,
            left_time,
            right_time,
            op: self.op,
            bound,
            bound_strict: self.bound_strict,
            lookback_us: self.lookback_us,
            known,
            ties,
            schema,
        })
    }

    fn necessary_children_exprs(&self, output_columns: &[usize]) -> Option<Vec<Vec<usize>>> {
        let width = self.left.schema().fields().len();
        let mut left: Vec<usize> = output_columns
            .iter()
            .copied()
            .filter(|&i| i < width)
            .collect();
        let mut right: Vec<usize> = output_columns
            .iter()
            .filter(|&&i| i >= width)
            .map(|&i| i - width)
            .collect();
        for e in self.expressions() {
            for c in e.column_refs() {
                if let Ok(i) = self.left.schema().index_of_column(c) {
                    left.push(i);
                } else if let Ok(i) = self.right.schema().index_of_column(c) {
                    right.push(i);
                } else {
                    return None;
                }
            }
        }
        for side in [&mut left, &mut right] {
            side.sort_unstable();
            side.dedup();
        }
        Some(vec![left, right])
    }
}

impl AsofJoinNode {
    fn join_type(&self) -> JoinType {
        match self.keep_unmatched {
            true => JoinType::Left,
            false => JoinType::Inner,
        }
    }
}

/// The marker function: only ever planned inside an ASOF join's
/// condition, which the rule takes it out of.
#[derive(Debug, PartialEq, Eq, Hash)]
struct AsofMark {
    signature: Signature,
}

impl ScalarUDFImpl for AsofMark {
    fn name(&self) -> &str {
        sluice_sql::ASOF_MARK
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Err(into_datafusion(SluiceError::Unsupported(
            "ASOF JOIN's condition is only read as an ASOF join's".into(),
        )))
    }
}

/// The marker, to register on a session.
pub fn asof_mark() -> ScalarUDF {
    ScalarUDF::new_from_impl(AsofMark {
        signature: Signature::any(4, Volatility::Immutable),
    })
}

/// Turns each marked join into an [`AsofJoinNode`].
#[derive(Debug, Default)]
pub struct AsofJoins;

impl AnalyzerRule for AsofJoins {
    fn name(&self) -> &str {
        "asof_joins"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| match node {
            LogicalPlan::Join(join) if join.filter.as_ref().is_some_and(has_mark) => {
                let node = asof_node(join).map_err(into_datafusion)?;
                Ok(Transformed::yes(LogicalPlan::Extension(Extension {
                    node: Arc::new(node),
                })))
            }
            node => Ok(Transformed::no(node)),
        })
        .map(|t| t.data)
    }
}

fn is_mark(e: &Expr) -> bool {
    matches!(e, Expr::ScalarFunction(f) if f.func.name() == sluice_sql::ASOF_MARK)
}

fn has_mark(filter: &Expr) -> bool {
    split_conjunction(filter).into_iter().any(is_mark)
}

fn unsupported(what: impl Into<String>) -> SluiceError {
    SluiceError::Unsupported(what.into())
}

/// Which input an expression's columns are all of: 0 left, 1 right; None
/// for neither (a constant, or columns of both).
fn side_of(e: &Expr, left: &DFSchema, right: &DFSchema) -> Option<usize> {
    let columns = e.column_refs();
    if columns.is_empty() {
        return None;
    }
    if columns.iter().all(|c| left.has_column(c)) {
        Some(0)
    } else if columns.iter().all(|c| right.has_column(c)) {
        Some(1)
    } else {
        None
    }
}

fn flipped(op: Operator) -> Operator {
    match op {
        Operator::Gt => Operator::Lt,
        Operator::GtEq => Operator::LtEq,
        Operator::Lt => Operator::Gt,
        Operator::LtEq => Operator::GtEq,
        op => op,
    }
}

fn asof_node(join: datafusion::logical_expr::Join) -> Result<AsofJoinNode, SluiceError> {
    let left_schema = join.left.schema().clone();
    let right_schema = join.right.schema().clone();
    let filter = join
        .filter
        .clone()
        .unwrap_or_else(|| Expr::Literal(ScalarValue::Boolean(Some(true)), None));
    let mut conditions = Vec::new();
    let mut args = None;
    for c in split_conjunction(&filter) {
        match c {
            Expr::ScalarFunction(f) if is_mark(c) => args = Some(f.args.clone()),
            c => conditions.push(c.clone()),
        }
    }
    let Some([keep, tolerance, known, matched]) = args.and_then(|a| <[Expr; 4]>::try_from(a).ok())
    else {
        return Err(unsupported("ASOF JOIN's marker takes four arguments"));
    };
    let flag = |e: &Expr| matches!(e, Expr::Literal(ScalarValue::Boolean(Some(true)), _));
    let keep_unmatched = flag(&keep);
    let as_known_at = flag(&known);
    let tolerance = match tolerance {
        Expr::Literal(
            ScalarValue::Utf8(Some(t))
            | ScalarValue::Utf8View(Some(t))
            | ScalarValue::LargeUtf8(Some(t)),
            _,
        ) => Some(t),
        Expr::Cast(c) => match c.expr.as_ref() {
            Expr::Literal(ScalarValue::Utf8(Some(t)), _) => Some(t.clone()),
            _ => None,
        },
        _ => None,
    };
    let Expr::BinaryExpr(BinaryExpr {
        left: a,
        op,
        right: b,
    }) = strip_alias(matched)
    else {
        return Err(SluiceError::Sql(sluice_sql::SqlError::Syntax(
            "ASOF JOIN's match is one comparison (>=, >, <= or <) of a time of each side".into(),
        )));
    };
    if !matches!(
        op,
        Operator::Gt | Operator::GtEq | Operator::Lt | Operator::LtEq
    ) {
        return Err(SluiceError::Sql(sluice_sql::SqlError::Syntax(format!(
            "ASOF JOIN matches with >=, >, <= or <, not {op}"
        ))));
    }
    let (left_time, op, right_time) = match (
        side_of(&a, &left_schema, &right_schema),
        side_of(&b, &left_schema, &right_schema),
    ) {
        (Some(0), Some(1)) => (*a, op, *b),
        (Some(1), Some(0)) => (*b, flipped(op), *a),
        _ => {
            return Err(unsupported(
                "ASOF JOIN's match compares a column of the left input with one of the right",
            ))
        }
    };
    let backward = matches!(op, Operator::GtEq | Operator::Gt);
    let time_type = left_time.get_type(&left_schema)?;
    let right_time = same_type(right_time, &right_schema, &time_type)?;
    let mut left_keys = Vec::new();
    let mut right_keys = Vec::new();
    for (l, r) in join.on.iter().cloned() {
        left_keys.push(l);
        right_keys.push(r);
    }
    let mut bound = None;
    let mut bound_strict = false;
    for c in conditions {
        let Expr::BinaryExpr(BinaryExpr {
            left: a,
            op: cop,
            right: b,
        }) = &c
        else {
            return Err(other_condition(&c));
        };
        let (sa, sb) = (
            side_of(a, &left_schema, &right_schema),
            side_of(b, &left_schema, &right_schema),
        );
        match (cop, sa, sb) {
            (Operator::Eq, Some(0), Some(1)) => {
                left_keys.push(a.as_ref().clone());
                right_keys.push(b.as_ref().clone());
                continue;
            }
            (Operator::Eq, Some(1), Some(0)) => {
                left_keys.push(b.as_ref().clone());
                right_keys.push(a.as_ref().clone());
                continue;
            }
            _ => {}
        }
        // `r.t >= l.t - INTERVAL '7 days'`, either way round.
        let (cop, other) = if strip_casts(a) == strip_casts(&right_time) && sb == Some(0) {
            (*cop, b.as_ref().clone())
        } else if strip_casts(b) == strip_casts(&right_time) && sa == Some(0) {
            (flipped(*cop), a.as_ref().clone())
        } else {
            return Err(other_condition(&c));
        };
        let fits = match backward {
            true => matches!(cop, Operator::GtEq | Operator::Gt),
            false => matches!(cop, Operator::LtEq | Operator::Lt),
        };
        if !fits || bound.is_some() {
            return Err(other_condition(&c));
        }
        bound_strict = matches!(cop, Operator::Gt | Operator::Lt);
        bound = Some(same_type(other, &left_schema, &time_type)?);
    }
    if let Some(tolerance) = tolerance {
        if bound.is_some() {
            return Err(unsupported(
                "ASOF JOIN takes its lookback once: a tolerance or a bound in the condition",
            ));
        }
        bound = Some(tolerance_bound(
            &left_time, &time_type, &tolerance, backward,
        )?);
    }
    let lookback_us = bound
        .as_ref()
        .and_then(|b| constant_lookback(b, &left_time));
    for (l, r) in left_keys.iter().zip(right_keys.iter_mut()) {
        let t = l.get_type(&left_schema)?;
        *r = same_type(r.clone(), &right_schema, &t)?;
    }
    let find = |name: &str| -> Option<Expr> {
        let mut found = right_schema
            .iter()
            .filter(|(_, f)| f.name() == name)
            .map(|(q, f)| Expr::Column(Column::new(q.cloned(), f.name())));
        let first = found.next();
        first.filter(|_| found.next().is_none())
    };
    let known = match as_known_at {
        false => None,
        true => {
            if !backward {
                return Err(unsupported(
                    "as_known_at looks back (>= or >): what was known at the left row's time",
                ));
            }
            if !time_type.is_temporal() {
                return Err(SluiceError::Sql(sluice_sql::SqlError::DatatypeMismatch(format!(
                    "as_known_at compares the left time with when the right row was ingested, and {time_type} is no time"
                ))));
            }
            let ingested = find(INGESTED_COLUMN).ok_or_else(|| {
                unsupported(
                    "as_known_at needs the right input's _ingested_at: join a table (or keep _ingested_at in the subquery)",
                )
            })?;
            Some((left_time.clone(), ingested))
        }
    };
    let ties: Vec<Expr> = match TIE_COLUMNS
        .iter()
        .map(|c| find(c))
        .collect::<Option<Vec<_>>>()
    {
        Some(ties) => ties,
        // No log positions: the greatest row wins, so the answer is still
        // one answer.
        None => right_schema
            .iter()
            .filter(|(_, f)| orderable(f.data_type()))
            .map(|(q, f)| Expr::Column(Column::new(q.cloned(), f.name())))
            .collect(),
    };
    let left = join.left.as_ref().clone();
    let right = join.right.as_ref().clone();
    let join_type = match keep_unmatched {
        true => JoinType::Left,
        false => JoinType::Inner,
    };
    let schema = Arc::new(build_join_schema(
        left.schema(),
        right.schema(),
        &join_type,
    )?);
    Ok(AsofJoinNode {
        left,
        right,
        keep_unmatched,
        left_keys,
        right_keys,
        left_time,
        right_time,
        op,
        bound,
        bound_strict,
        lookback_us,
        known,
        ties,
        schema,
    })
}

/// `t - INTERVAL 'n'` (or `+`) of the probe's time `t` itself: n in µs.
fn constant_lookback(bound: &Expr, time: &Expr) -> Option<i64> {
    let Expr::BinaryExpr(BinaryExpr {
        left,
        op: Operator::Minus | Operator::Plus,
        right,
    }) = strip_casts(bound)
    else {
        return None;
    };
    if strip_casts(left) != strip_casts(time) {
        return None;
    }
    match strip_casts(right) {
        Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(v)), _) if v.months == 0 => {
            Some(i64::from(v.days) * 86_400_000_000 + v.nanoseconds / 1000)
        }
        Expr::Literal(ScalarValue::IntervalDayTime(Some(v)), _) => {
            Some(i64::from(v.days) * 86_400_000_000 + i64::from(v.milliseconds) * 1000)
        }
        Expr::Literal(ScalarValue::DurationMicrosecond(Some(us)), _) => Some(*us),
        _ => None,
    }
}

fn orderable(t: &DataType) -> bool {
    t.is_primitive()
        || matches!(
            t,
            DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Utf8View
                | DataType::Boolean
                | DataType::Binary
        )
}

fn other_condition(c: &Expr) -> SluiceError {
    unsupported(format!(
        "ASOF JOIN's condition takes equalities of the two sides, the match and a lookback bound (r.t >= l.t - INTERVAL '7 days'); \"{c}\" is none of them: put it in WHERE or a subquery"
    ))
}

fn strip_alias(e: Expr) -> Expr {
    match e {
        Expr::Alias(a) => strip_alias(*a.expr),
        e => e,
    }
}

fn strip_casts(e: &Expr) -> &Expr {
    match e {
        Expr::Cast(c) => strip_casts(&c.expr),
        Expr::TryCast(c) => strip_casts(&c.expr),
        e => e,
    }
}

fn same_type(e: Expr, schema: &DFSchema, to: &DataType) -> Result<Expr, SluiceError> {
    match e.get_type(schema)? == *to {
        true => Ok(e),
        false => Ok(e.cast_to(to, schema)?),
    }
}

/// `left_time - tolerance` (`+` looking ahead), of the time's type.
fn tolerance_bound(
    time: &Expr,
    time_type: &DataType,
    tolerance: &str,
    backward: bool,
) -> Result<Expr, SluiceError> {
    use datafusion::arrow::compute::cast;
    let bad = || {
        SluiceError::Sql(sluice_sql::SqlError::InvalidOption(format!(
            "tolerance \"{tolerance}\" is not {} for a time of type {time_type}",
            if time_type.is_temporal() {
                "an interval ('7 days')"
            } else {
                "a number"
            }
        )))
    };
    let text = datafusion::arrow::array::StringArray::from(vec![tolerance]);
    let amount_type = match time_type {
        DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64 => {
            DataType::Interval(datafusion::arrow::datatypes::IntervalUnit::MonthDayNano)
        }
        DataType::Time64(_) | DataType::Time32(_) => DataType::Duration(TimeUnit::Microsecond),
        t if t.is_numeric() => t.clone(),
        _ => return Err(bad()),
    };
    let amount = match &amount_type {
        DataType::Duration(_) => {
            let us = sluice_sql::parse_duration_us(tolerance).map_err(|_| bad())?;
            ScalarValue::DurationMicrosecond(Some(us))
        }
        t => {
            let cast = cast(&text, t).map_err(|_| bad())?;
            let v = ScalarValue::try_from_array(&cast, 0).map_err(|_| bad())?;
            if v.is_null() {
                return Err(bad());
            }
            v
        }
    };
    let op = match backward {
        true => Operator::Minus,
        false => Operator::Plus,
    };
    let shifted = Expr::BinaryExpr(BinaryExpr::new(
        Box::new(time.clone()),
        op,
        Box::new(Expr::Literal(amount, None)),
    ));
    Ok(Expr::Cast(datafusion::logical_expr::Cast::new(
        Box::new(shifted),
        time_type.clone(),
    )))
}

/// Plans [`AsofJoinNode`]s as [`super::asof_exec::AsofJoinExec`].
pub struct AsofJoinPlanner;

#[async_trait]
impl ExtensionPlanner for AsofJoinPlanner {
    async fn plan_extension(
        &self,
        planner: &dyn PhysicalPlanner,
        node: &dyn datafusion::logical_expr::UserDefinedLogicalNode,
        logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        session: &dyn datafusion::catalog::Session,
        planning_ctx: &datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(node) = node.as_any().downcast_ref::<AsofJoinNode>() else {
            return Ok(None);
        };
        let (Some(left), Some(right)) = (logical_inputs.first(), logical_inputs.get(1)) else {
            return Ok(None);
        };
        let spec =
            super::asof_exec::AsofSpec::plan(node, left.schema(), right.schema(), |e, s| {
                planner.create_physical_expr(e, s, session, planning_ctx)
            })?;
        Ok(Some(Arc::new(super::asof_exec::AsofJoinExec::try_new(
            physical_inputs[0].clone(),
            physical_inputs[1].clone(),
            Arc::new(spec),
            Arc::new(node.schema.as_arrow().clone()),
        )?)))
    }
}

/// The batch session's query planner: DataFusion's, with ASOF joins.
#[derive(Debug)]
pub struct AsofQueryPlanner;

#[async_trait]
impl datafusion::execution::context::QueryPlanner for AsofQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session_state: &dyn datafusion::catalog::Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        datafusion::physical_planner::DefaultPhysicalPlanner::with_extension_planners(vec![
            Arc::new(AsofJoinPlanner),
        ])
        .create_physical_plan(logical_plan, session_state)
        .await
    }
}
