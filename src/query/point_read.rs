//! Point reads of a materialized view: a `SELECT` of plain columns of one
//! view filtered by equalities of its columns with parameters or literals
//! (`SELECT * FROM totals WHERE tenant = $1`). A prepared statement of that
//! shape is answered by a hash lookup in the view's published snapshot
//! (an index built once per snapshot), with no plan per execution; it
//! reads the same snapshot a planned query would, so answers are the same.

use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator};

use super::view_table::ViewTable;
use crate::error::SluiceError;
use crate::stream::ViewManager;

/// What a key column is compared with.
#[derive(Debug, Clone)]
enum KeyValue {
    /// `$n`
    Param(String),
    Literal(ScalarValue),
}

#[derive(Debug)]
pub struct PointRead {
    view: String,
    /// The view's columns when the statement was prepared.
    view_schema: SchemaRef,
    key_columns: Vec<usize>,
    key_values: Vec<KeyValue>,
    /// View columns of the result, in order.
    projection: Vec<usize>,
    output: SchemaRef,
}

impl PointRead {
    /// The point read a planned (not yet optimized) query is, if it is one.
    pub fn recognize(plan: &LogicalPlan) -> Option<PointRead> {
        let LogicalPlan::Projection(projection) = plan else {
            return None;
        };
        let LogicalPlan::Filter(filter) = projection.input.as_ref() else {
            return None;
        };
        let mut below = filter.input.as_ref();
        if let LogicalPlan::SubqueryAlias(alias) = below {
            below = alias.input.as_ref();
        }
        let LogicalPlan::TableScan(scan) = below else {
            return None;
        };
        if !scan.filters.is_empty() || scan.fetch.is_some() || scan.projection.is_some() {
            return None;
        }
        let provider = source_as_provider(&scan.source).ok()?;
        let view = provider.downcast_ref::<ViewTable>()?;
        let view_schema = view.schema_when_planned();
        let column_index = |e: &Expr| match e {
            Expr::Column(c) => view_schema.index_of(&c.name).ok(),
            _ => None,
        };
        let projection = projection
            .expr
            .iter()
            .map(|e| match e {
                Expr::Alias(a) => column_index(&a.expr),
                e => column_index(e),
            })
            .collect::<Option<Vec<usize>>>()?;
        let mut key_columns = Vec::new();
        let mut key_values = Vec::new();
        for term in split_conjunction(&filter.predicate) {
            let Expr::BinaryExpr(BinaryExpr {
                left,
                op: Operator::Eq,
                right,
            }) = term
            else {
                return None;
            };
            let (column, value) = match (column_index(left), column_index(right)) {
                (Some(c), None) => (c, right.as_ref()),
                (None, Some(c)) => (c, left.as_ref()),
                _ => return None,
            };
            if key_columns.contains(&column)
                || !exact_equality(view_schema.field(column).data_type())
            {
                return None;
            }
            key_columns.push(column);
            key_values.push(match value {
                Expr::Placeholder(p) => KeyValue::Param(p.id.clone()),
                Expr::Literal(v, _) => KeyValue::Literal(v.clone()),
                _ => return None,
            });
        }
        Some(PointRead {
            view: view.name().to_string(),
            view_schema,
            key_columns,
            key_values,
            projection,
            output: Arc::new(plan.schema().as_arrow().clone()),
        })
    }

    /// The rows as of the view's last published snapshot.
    pub fn execute(
        &self,
        views: &ViewManager,
        params: Option<&ParamValues>,
    ) -> Result<RecordBatch, SluiceError> {
        let view = views
            .view(&self.view)
            .ok_or_else(|| SluiceError::UndefinedTable(self.view.clone()))?;
        if view.schema.fields() != self.view_schema.fields() {
            return Err(SluiceError::Unsupported(
                "cached plan must not change result type".into(),
            ));
        }
        let key = self
            .key_values
            .iter()
            .map(|k| match (k, params) {
                (KeyValue::Literal(v), _) => Ok(v.clone()),
                (KeyValue::Param(id), Some(params)) => {
                    Ok(params.get_placeholders_with_values(id)?.value)
                }
                (KeyValue::Param(id), None) => Err(SluiceError::Unsupported(format!(
                    "no value for parameter {id}"
                ))),
            })
            .collect::<Result<Vec<_>, SluiceError>>()?;
        view.point_read(
            &self.key_columns,
            &key,
            &self.projection,
            self.output.clone(),
        )
    }
}

/// Types whose values are equal in SQL exactly when their row encodings
/// are (floats are not: -0 = 0 and NaN = NaN in SQL).
fn exact_equality(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Boolean
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::Date32
            | DataType::Timestamp(_, _)
            | DataType::Decimal128(_, _)
    )
}
