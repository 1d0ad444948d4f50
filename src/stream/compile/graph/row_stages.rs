//! Lifting the stages that pick or number rows out of a view's plan:
//! `ROW_NUMBER()` bounds, dynamic filters, over-windows, LIMIT and Top-N.

use super::*;

impl JoinGraph {
    /// Remembers the bounds a filter puts on a `ROW_NUMBER()` below it
    /// (`rn <= 3`, `rn < 4`, `rn = 1`): the Top-N of that window function.
    pub(super) fn note_row_number_limits(&mut self, filter: &datafusion::logical_expr::Filter) {
        use datafusion::logical_expr::{BinaryExpr, Operator as Op};
        for conjunct in split_conjunction(&filter.predicate) {
            let Expr::BinaryExpr(BinaryExpr { left, op, right }) = conjunct else {
                continue;
            };
            let (column, op, bound) = match (left.as_ref(), right.as_ref()) {
                (Expr::Column(c), other) => (c, *op, other),
                (other, Expr::Column(c)) => match op.swap() {
                    Some(op) => (c, op, other),
                    None => continue,
                },
                _ => continue,
            };
            let Some(bound) = crate::query::literal_i64(bound) else {
                continue;
            };
            let limit = match op {
                Op::LtEq | Op::Eq => bound,
                Op::Lt => bound - 1,
                _ => continue,
            };
            let Ok(index) = filter.input.schema().index_of_column(column) else {
                continue;
            };
            if let Some(name) = window_output(&filter.input, index) {
                let limit = limit.max(0) as usize;
                match self.row_number_limits.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, l)) => *l = (*l).min(limit),
                    None => self.row_number_limits.push((name, limit)),
                }
            }
        }
    }

    /// `ROW_NUMBER() OVER (PARTITION BY .. ORDER BY ..)` that a filter
    /// above bounds: a Top-N stage whose rows come out numbered.
    pub(super) async fn lift_row_number(
        &mut self,
        window: datafusion::logical_expr::Window,
        state: &SessionState,
    ) -> Result<LogicalPlan, SluiceError> {
        let refuse = || {
            Err(SluiceError::Unsupported(
                "window functions in a materialized view are supported only as a Top-N: \
                 ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...) AS rn in a subquery, \
                 filtered by rn <= N outside it"
                    .into(),
            ))
        };
        let [expr] = window.window_expr.as_slice() else {
            return self.lift_over_window(window, state).await;
        };
        let Expr::WindowFunction(f) = expr.clone().unalias_nested().data else {
            return refuse();
        };
        let is_row_number = matches!(&f.fun,
            datafusion::logical_expr::WindowFunctionDefinition::WindowUDF(u) if u.name() == "row_number");
        let name = window
            .schema
            .field(window.input.schema().fields().len())
            .name()
            .clone();
        let limit = self
            .row_number_limits
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, l)| *l);
        // ROW_NUMBER() that a filter above bounds is a Top-N; any other
        // window function an over-window.
        let Some(limit) = limit
            .filter(|_| is_row_number && f.params.args.is_empty() && f.params.filter.is_none())
        else {
            return self.lift_over_window(window, state).await;
        };
        let input = self
            .lift_joins(window.input.as_ref().clone(), state, true)
            .await?;
        let partition_by = f
            .params
            .partition_by
            .iter()
            .map(|e| state.create_physical_expr(e.clone(), input.schema()))
            .collect::<Result<Vec<_>, _>>()?;
        self.push_top_n(
            input,
            partition_by,
            &f.params.order_by,
            (0, limit, false),
            window.schema.clone(),
            state,
        )
        .await
    }

    /// A projection of one input of an inner join with a scalar subquery's
    /// one row, whose only condition compares that input with the row
    /// (`WHERE amount > (SELECT avg(credit) FROM accounts)`, decorrelated):
    /// a dynamic filter stage, which sends on only the rows that cross the
    /// threshold when it moves. None for any other shape (the join then
    /// pairs every row with the one row).
    pub(super) async fn lift_dynamic_filter(
        &mut self,
        projection: &datafusion::logical_expr::Projection,
        state: &SessionState,
    ) -> Result<Option<LogicalPlan>, SluiceError> {
        use datafusion::logical_expr::BinaryExpr;
        let LogicalPlan::Join(join) = projection.input.as_ref() else {
            return Ok(None);
        };
        let (Some(condition), true, JoinType::Inner) =
            (&join.filter, join.on.is_empty(), join.join_type)
        else {
            return Ok(None);
        };
        let (rows, one) = match (at_most_one_row(&join.left), at_most_one_row(&join.right)) {
            (_, true) => (join.left.as_ref(), join.right.as_ref()),
            (true, false) => (join.right.as_ref(), join.left.as_ref()),
            (false, false) => return Ok(None),
        };
        let within = |e: &Expr, plan: &LogicalPlan| {
            let columns = e.column_refs();
            !columns.is_empty() && columns.iter().all(|c| plan.schema().has_column(c))
        };
        if !projection
            .expr
            .iter()
            .all(|e| e.column_refs().iter().all(|c| rows.schema().has_column(c)))
        {
            return Ok(None);
        }
        let [Expr::BinaryExpr(BinaryExpr { left, op, right })] =
            split_conjunction(condition).as_slice()
        else {
            return Ok(None);
        };
        use datafusion::logical_expr::Operator as Op;
        if !matches!(
            op,
            Op::Lt | Op::LtEq | Op::Gt | Op::GtEq | Op::Eq | Op::NotEq
        ) {
            return Ok(None);
        }
        let (value, op, threshold) = if within(left, rows) && within(right, one) {
            (left.as_ref(), *op, right.as_ref())
        } else if within(right, rows) && within(left, one) {
            match op.swap() {
                Some(swapped) => (right.as_ref(), swapped, left.as_ref()),
                None => return Ok(None),
            }
        } else {
            return Ok(None);
        };
        let lifted_rows = self.lift_joins(rows.clone(), state, true).await?;
        let lifted_one = self.lift_joins(one.clone(), state, true).await?;
        let value_expr = state.create_physical_expr(value.clone(), lifted_rows.schema())?;
        let threshold_expr = state.create_physical_expr(threshold.clone(), lifted_one.schema())?;
        let (rows_input, rows_schema, _) = self.side(&lifted_rows, &[], state).await?;
        let (one_input, one_schema, _) = self.side(&lifted_one, &[], state).await?;
        let operator = DynamicFilterOperator::new(
            rows_schema,
            value_expr,
            op,
            threshold_expr,
            &one_schema,
            format!("{value} {op} {threshold}, crossing rows sent as the threshold moves"),
        )?;
        let output = self.push_stage(
            Box::new(operator),
            "dynamic filter",
            vec![rows_input, one_input],
            true,
            rows.schema().clone(),
            Vec::new(),
            Vec::new(),
        );
        let projection = datafusion::logical_expr::Projection::try_new(
            projection.expr.clone(),
            Arc::new(output),
        )?;
        Ok(Some(LogicalPlan::Projection(projection)))
    }

    /// Window functions that share one PARTITION BY and ORDER BY: an
    /// over-window stage whose rows are its input's with the functions'
    /// values appended.
    pub(super) async fn lift_over_window(
        &mut self,
        window: datafusion::logical_expr::Window,
        state: &SessionState,
    ) -> Result<LogicalPlan, SluiceError> {
        let refuse = |why: String| Err(SluiceError::Unsupported(why));
        let mut spec = None;
        for e in &window.window_expr {
            let Expr::WindowFunction(f) = e.clone().unalias_nested().data else {
                return refuse(format!("{e} is not a window function"));
            };
            if f.params.filter.is_some() {
                return refuse(
                    "FILTER on a window function is not supported in materialized views".into(),
                );
            }
            let this = (f.params.partition_by.clone(), f.params.order_by.clone());
            match &spec {
                None => spec = Some(this),
                Some(s) if *s == this => {}
                Some(_) => {
                    return refuse(
                        "window functions of one query level in a materialized view need one PARTITION BY and ORDER BY; compute the others in a subquery".into(),
                    )
                }
            }
        }
        let Some((partition_by, order_by)) = spec else {
            return refuse("a window with no functions".into());
        };
        let input = self
            .lift_joins(window.input.as_ref().clone(), state, true)
            .await?;
        let in_schema = input.schema();
        let partition = partition_by
            .iter()
            .map(|e| state.create_physical_expr(e.clone(), in_schema))
            .collect::<Result<Vec<_>, _>>()?;
        let order = order_by
            .iter()
            .map(|s| {
                Ok((
                    state.create_physical_expr(s.expr.clone(), in_schema)?,
                    arrow::compute::SortOptions {
                        descending: !s.asc,
                        nulls_first: s.nulls_first,
                    },
                ))
            })
            .collect::<Result<Vec<_>, SluiceError>>()?;
        let planning =
            datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext::default();
        let functions = window
            .window_expr
            .iter()
            .map(|e| {
                datafusion::physical_planner::create_window_expr(
                    e,
                    in_schema,
                    state.execution_props(),
                    &planning,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (mut stage_input, input_schema, _) = self.side(&input, &[], state).await?;
        let logical: Vec<_> = window
            .window_expr
            .iter()
            .filter_map(|e| match e.clone().unalias_nested().data {
                Expr::WindowFunction(f) => Some(*f),
                _ => None,
            })
            .collect();
        let closing = match self.emit_on_close {
            true => {
                let (rule, source, column) =
                    self.close_on_watermark(&input, &order_by, &logical)?;
                if self.input_retracts(&stage_input) {
                    return refuse(
                        "EMIT ON WINDOW CLOSE over window functions needs an input that only grows (an append-only table with a WATERMARK); leave out EMIT ON WINDOW CLOSE".into(),
                    );
                }
                stage_input.watermark = Some(source);
                self.bands.push((source, column, None));
                Some(rule)
            }
            false => None,
        };
        let reach = window_reach(&logical);
        let recomputes = match (reach.behind, reach.ahead, partition_by.is_empty()) {
            _ if closing.is_some() => {
                "a watermark computes a partition's rows from its first not emitted"
            }
            (Some(_), Some(_), true) => "a change recomputes the rows from its peers on",
            (Some(_), Some(_), false) => {
                "a change recomputes its partition's rows from its peers on"
            }
            (_, _, true) => "every change recomputes all rows",
            (_, _, false) => "a change recomputes its partition",
        };
        let description = format!(
            "{} over {} ({recomputes})",
            window
                .window_expr
                .iter()
                .map(|e| e.schema_name().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            match partition_by.is_empty() {
                true => "one partition".to_string(),
                false => format!(
                    "partitions by {}",
                    partition_by
                        .iter()
                        .map(|e| e.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        );
        let description = match closing {
            Some(_) => format!("{description}; a row is emitted once the watermark makes it final"),
            None => description,
        };
        let mut operator = OverWindowOperator::new(
            input_schema,
            partition,
            order,
            functions,
            nullable(window.schema.as_arrow()),
            description,
        )?;
        operator = operator.with_reach(reach);
        if let Some(rule) = closing {
            operator = operator.closing_on_watermark(rule);
            self.closing_stage = Some(self.stages.len());
        }
        Ok(self.push_stage(
            Box::new(operator),
            "over-window",
            vec![stage_input],
            closing.is_none(),
            window.schema.clone(),
            Vec::new(),
            Vec::new(),
        ))
    }

    /// When an over-window under `EMIT ON WINDOW CLOSE` may emit a row:
    /// its ORDER BY must start with a source's WATERMARK column,
    /// ascending, and its functions read a bounded way past the row.
    /// Returns the rule, the source and its column.
    pub(super) fn close_on_watermark(
        &self,
        input: &LogicalPlan,
        order_by: &[datafusion::logical_expr::SortExpr],
        functions: &[datafusion::logical_expr::expr::WindowFunction],
    ) -> Result<(CloseOnWatermark, usize, String), SluiceError> {
        let refuse = |why: &str| {
            Err(SluiceError::Unsupported(format!(
                "EMIT ON WINDOW CLOSE over window functions {why}; leave out EMIT ON WINDOW CLOSE (the view then emits on update)"
            )))
        };
        // NULLS FIRST would put a row that is never final (its time is
        // NULL) before the others of its partition.
        let first = match order_by.first() {
            Some(s) if s.asc && !s.nulls_first => &s.expr,
            _ => {
                return refuse(
                    "needs ORDER BY the table's WATERMARK column first, ascending (NULLS LAST)",
                )
            }
        };
        let traced = match first {
            Expr::Column(c) => input
                .schema()
                .index_of_column(c)
                .ok()
                .and_then(|i| Some((i, source_column(input, i)?))),
            _ => None,
        };
        let marked = traced.and_then(|(i, t)| {
            let s = self.marked(&t.source, &t.column)?;
            (t.window_us.is_none() && t.stage.is_none()).then_some((i, s, t.column))
        });
        let Some((time_index, source, column)) = marked else {
            return refuse("needs ORDER BY the table's WATERMARK column first, ascending");
        };
        let mut rule = CloseOnWatermark {
            time_index,
            rows_after: 0,
            time_after_us: 0,
            lateness_us: self.lateness_us,
        };
        use datafusion::logical_expr::{WindowFrameBound, WindowFrameUnits};
        for f in functions {
            let name = f.fun.name().to_ascii_lowercase();
            let ignores_nulls = f.params.null_treatment
                == Some(datafusion::logical_expr::expr::NullTreatment::IgnoreNulls);
            match name.as_str() {
                // Past NULLs, it reads any number of rows ahead.
                "lead" if ignores_nulls => {
                    return refuse(
                        "cannot emit lead() IGNORE NULLS, which reads any number of rows ahead",
                    )
                }
                "ntile" | "percent_rank" | "cume_dist" => {
                    return refuse(&format!(
                        "cannot emit {name}(), which reads its partition's every row"
                    ))
                }
                "row_number" | "rank" | "dense_rank" | "lag" => continue,
                "lead" => {
                    let Some(n) = offset_argument(f) else {
                        return refuse("needs lead()'s offset to be a constant");
                    };
                    rule.rows_after = rule.rows_after.max(n);
                    continue;
                }
                _ => {}
            }
            let frame = &f.params.window_frame;
            match (&frame.end_bound, &frame.units) {
                (WindowFrameBound::Preceding(_) | WindowFrameBound::CurrentRow, _) => {}
                (WindowFrameBound::Following(v), _) if v.is_null() => {
                    return refuse("cannot emit a frame that ends at UNBOUNDED FOLLOWING")
                }
                (WindowFrameBound::Following(v), WindowFrameUnits::Rows) => {
                    let Some(n) = row_count(v) else {
                        return refuse("needs a constant ROWS ... FOLLOWING");
                    };
                    rule.rows_after = rule.rows_after.max(n);
                }
                (WindowFrameBound::Following(v), WindowFrameUnits::Range) => {
                    let Some(us) = scalar_duration_us(v) else {
                        return refuse("needs RANGE ... FOLLOWING to be a constant INTERVAL");
                    };
                    rule.time_after_us = rule.time_after_us.max(us);
                }
                (WindowFrameBound::Following(_), WindowFrameUnits::Groups) => {
                    return refuse("cannot emit a GROUPS frame that ends after the current row")
                }
            }
        }
        Ok((rule, source, column))
    }

    /// `ORDER BY .. LIMIT N`: a Top-N stage of one group.
    pub(super) async fn lift_limit(
        &mut self,
        limit: datafusion::logical_expr::Limit,
        state: &SessionState,
    ) -> Result<LogicalPlan, SluiceError> {
        use datafusion::logical_expr::{FetchType, SkipType};
        let refuse = |why: &str| Err(SluiceError::Unsupported(why.into()));
        let SkipType::Literal(offset) = limit.get_skip_type()? else {
            return refuse("OFFSET in a materialized view takes a constant number of rows");
        };
        let fetch = match limit.get_fetch_type()? {
            FetchType::Literal(Some(fetch)) => fetch,
            // OFFSET alone: every row after the first ones.
            FetchType::Literal(None) => usize::MAX,
            FetchType::UnsupportedExpr => {
                return refuse("LIMIT in a materialized view takes a constant number of rows")
            }
        };
        let LogicalPlan::Sort(sort) = limit.input.as_ref().clone() else {
            return refuse(
                "LIMIT and OFFSET in a materialized view need ORDER BY: the view keeps the rows at those places in that order (a Top-N)",
            );
        };
        // The optimizer may have pushed offset + limit into the sort.
        let fetch = match sort.fetch {
            Some(f) => f.saturating_sub(offset).min(fetch),
            None => fetch,
        };
        self.lift_top_n(sort, offset, fetch, state).await
    }

    pub(super) async fn lift_top_n(
        &mut self,
        sort: datafusion::logical_expr::Sort,
        offset: usize,
        limit: usize,
        state: &SessionState,
    ) -> Result<LogicalPlan, SluiceError> {
        // Pre-order: the outermost Top-N is lifted first.
        let with_ties = std::mem::take(&mut self.ties_pending);
        let input = self
            .lift_joins(sort.input.as_ref().clone(), state, true)
            .await?;
        let schema = input.schema().clone();
        self.push_top_n(
            input,
            Vec::new(),
            &sort.expr,
            (offset, limit, with_ties),
            schema,
            state,
        )
        .await
    }

    /// The Top-N stage over `input` (lifted), giving rows of `schema`.
    pub(super) async fn push_top_n(
        &mut self,
        input: LogicalPlan,
        partition_by: Vec<Arc<dyn PhysicalExpr>>,
        order_by: &[datafusion::logical_expr::SortExpr],
        (offset, limit, with_ties): (usize, usize, bool),
        schema: DFSchemaRef,
        state: &SessionState,
    ) -> Result<LogicalPlan, SluiceError> {
        let order = order_by
            .iter()
            .map(|s| {
                let e = state.create_physical_expr(s.expr.clone(), input.schema())?;
                Ok((
                    e,
                    arrow::compute::SortOptions {
                        descending: !s.asc,
                        nulls_first: s.nulls_first,
                    },
                ))
            })
            .collect::<Result<Vec<_>, SluiceError>>()?;
        let (stage_input, input_schema, _) = self.side(&input, &[], state).await?;
        let input_retracts = self.input_retracts(&stage_input);
        let numbered = schema.fields().len() > input.schema().fields().len();
        let places = match (offset, limit) {
            (0, limit) => format!("first {limit}"),
            (offset, usize::MAX) => format!("all after the first {offset}"),
            (offset, limit) => format!("{limit} after the first {offset}"),
        };
        let places = match with_ties {
            true => format!("{places} with ties"),
            false => places,
        };
        let description = format!(
            "{}{places} by {}",
            match partition_by.is_empty() {
                true => String::new(),
                false => format!(
                    "per {}: ",
                    partition_by
                        .iter()
                        .map(|e| e.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
            order_by
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let operator = TopNOperator::new(
            TopNSpec {
                partition_by,
                order_by: order,
                offset,
                limit,
                with_ties,
                numbered,
                input_retracts,
            },
            input_schema,
            nullable(schema.as_arrow()),
            description,
        )?;
        Ok(self.push_stage(
            Box::new(operator),
            "top-n",
            vec![stage_input],
            true,
            schema,
            Vec::new(),
            Vec::new(),
        ))
    }
}

/// `lag`'s or `lead`'s offset (1 when not given), when a constant; a
/// negative offset reads the other way, which counts as 0 here.
fn offset_argument(f: &datafusion::logical_expr::expr::WindowFunction) -> Option<u64> {
    match f.params.args.get(1) {
        None => Some(1),
        Some(Expr::Literal(v, _)) => match v.clone().cast_to(&arrow::datatypes::DataType::Int64) {
            Ok(datafusion::common::ScalarValue::Int64(Some(n))) => Some(n.max(0) as u64),
            _ => None,
        },
        Some(_) => None,
    }
}

/// A ROWS frame bound's count of rows.
fn row_count(v: &datafusion::common::ScalarValue) -> Option<u64> {
    match v.clone().cast_to(&arrow::datatypes::DataType::UInt64) {
        Ok(datafusion::common::ScalarValue::UInt64(n)) => n,
        _ => None,
    }
}

/// How far window functions read around a row (see [`WindowReach`]):
/// `lag` and `lead` their offsets, aggregates and value functions their
/// ROWS frames; a RANGE or GROUPS offset or an unbounded start reaches the
/// whole prefix, and an unbounded end or a function of the whole
/// partition (`ntile`, `percent_rank`, `cume_dist`) everything.
fn window_reach(functions: &[datafusion::logical_expr::expr::WindowFunction]) -> WindowReach {
    use datafusion::logical_expr::{WindowFrameBound, WindowFrameUnits};
    let mut reach = WindowReach {
        behind: Some(0),
        ahead: Some(0),
        numbering: Vec::new(),
    };
    let widen = |mine: &mut Option<u64>, theirs: Option<u64>| {
        *mine = match (*mine, theirs) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        }
    };
    for (i, f) in functions.iter().enumerate() {
        let name = f.fun.name().to_ascii_lowercase();
        // IGNORE NULLS reads past any number of NULLs.
        let ignores_nulls = f.params.null_treatment
            == Some(datafusion::logical_expr::expr::NullTreatment::IgnoreNulls);
        let (behind, ahead) = match name.as_str() {
            _ if ignores_nulls => (None, None),
            "row_number" | "rank" => {
                reach.numbering.push((i, false));
                (Some(0), Some(0))
            }
            "dense_rank" => {
                reach.numbering.push((i, true));
                (Some(0), Some(0))
            }
            "lag" => (offset_argument(f), Some(0)),
            "lead" => (Some(0), offset_argument(f)),
            "ntile" | "percent_rank" | "cume_dist" => (None, None),
            _ => {
                let frame = &f.params.window_frame;
                let rows = frame.units == WindowFrameUnits::Rows;
                let behind = match &frame.start_bound {
                    WindowFrameBound::Preceding(v) if rows && !v.is_null() => row_count(v),
                    WindowFrameBound::Preceding(_) => None,
                    _ => Some(0),
                };
                let ahead = match &frame.end_bound {
                    WindowFrameBound::Following(v) if rows && !v.is_null() => row_count(v),
                    WindowFrameBound::Following(_) => None,
                    _ => Some(0),
                };
                (behind, ahead)
            }
        };
        widen(&mut reach.behind, behind);
        widen(&mut reach.ahead, ahead);
    }
    reach
}

/// The name of the `ROW_NUMBER()` (or other window function) output that
/// column `index` of `plan` passes on unchanged, through projections,
/// renames and filters.
fn window_output(plan: &LogicalPlan, index: usize) -> Option<String> {
    match plan {
        LogicalPlan::Window(w) if index >= w.input.schema().fields().len() => {
            Some(w.schema.field(index).name().clone())
        }
        LogicalPlan::Projection(p) => {
            let Expr::Column(c) = p.expr.get(index)?.clone().unalias_nested().data else {
                return None;
            };
            let at = p.input.schema().index_of_column(&c).ok()?;
            window_output(&p.input, at)
        }
        LogicalPlan::SubqueryAlias(a) => window_output(&a.input, index),
        LogicalPlan::Filter(f) => window_output(&f.input, index),
        _ => None,
    }
}
