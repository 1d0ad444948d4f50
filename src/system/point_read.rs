//! Point reads: a `SELECT` of plain columns of one materialized view
//! filtered by equalities of its columns with parameters or literals
//! (`SELECT * FROM totals WHERE tenant = $1`), or of one keyed table by
//! its whole primary key (`SELECT * FROM users WHERE id = $1`). A
//! statement of that shape is answered with no plan per execution: a
//! view's by a hash lookup in its published snapshot (an index built once
//! per snapshot), reading the same snapshot a planned query would; a
//! keyed table's by the location of the key's latest record
//! ([`TableLog::read_by_key`]), as of the newest commit, as a planned
//! query outside a transaction block reads it.

use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator};

use super::view_table::ViewTable;
use crate::error::SluiceError;
use crate::log::{LogStore, TableLog};
use crate::query::provider::LogTableProvider;
use crate::stream::ViewManager;

/// What a key column is compared with.
#[derive(Debug, Clone)]
enum KeyValue {
    /// `$n`
    Param(String),
    Literal(ScalarValue),
}

/// What a point read reads.
#[derive(Debug)]
enum Target {
    View(String),
    /// A keyed table, by the key columns' positions in primary key order
    /// (among `key_columns`); its id tells a table dropped and created
    /// again.
    Table {
        name: String,
        id: u64,
        key_order: Vec<usize>,
    },
}

#[derive(Debug)]
pub struct PointRead {
    target: Target,
    /// The view's (or table's) columns when the statement was prepared.
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
        let mut keyed = None;
        let (mut target, view_schema) = match provider.downcast_ref::<ViewTable>() {
            Some(view) => (
                Target::View(view.name().to_string()),
                view.schema_when_planned(),
            ),
            None => {
                let table = provider
                    .downcast_ref::<LogTableProvider>()?
                    .keyed_latest()?;
                // A source's table takes writes the key locations do not
                // follow.
                if table.def().written_by_source().is_some() {
                    return None;
                }
                let target = Target::Table {
                    name: table.def().name.clone(),
                    id: table.def().id,
                    key_order: Vec::new(),
                };
                keyed = Some(table.clone());
                (target, provider.schema())
            }
        };
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
                Expr::Literal(v, _) => {
                    KeyValue::Literal(exact_in(v, view_schema.field(column).data_type())?)
                }
                _ => return None,
            });
        }
        if let (Target::Table { key_order, .. }, Some(table)) = (&mut target, &keyed) {
            // The whole primary key, and nothing else, picks one record.
            *key_order = primary_key_order(table, &key_columns)?;
        }
        Some(PointRead {
            target,
            view_schema,
            key_columns,
            key_values,
            projection,
            output: Arc::new(plan.schema().as_arrow().clone()),
        })
    }

    /// Whether a key is given by a parameter (`$1`), not a literal.
    pub fn has_params(&self) -> bool {
        self.key_values
            .iter()
            .any(|k| matches!(k, KeyValue::Param(_)))
    }

    /// Whether each key parameter's value in `params` is exactly a value
    /// of its key column's type (literals of a text query, which SQL would
    /// otherwise coerce: 1.5 is no INT).
    pub fn params_fit(&self, params: &ParamValues) -> bool {
        self.key_values
            .iter()
            .zip(&self.key_columns)
            .all(|(k, &c)| match k {
                KeyValue::Literal(_) => true,
                KeyValue::Param(id) => params.get_placeholders_with_values(id).is_ok_and(|v| {
                    exact_in(&v.value, self.view_schema.field(c).data_type()).is_some()
                }),
            })
    }

    /// Whether it reads a keyed table: inside a transaction block, which
    /// reads its own writes (and in REPEATABLE READ its snapshot), the
    /// query is planned instead.
    pub fn reads_table(&self) -> bool {
        matches!(self.target, Target::Table { .. })
    }

    /// The rows: a view's as of its last published snapshot, a keyed
    /// table's as of its newest commit.
    pub async fn execute(
        &self,
        views: &ViewManager,
        tables: &LogStore,
        params: Option<&ParamValues>,
    ) -> Result<RecordBatch, SluiceError> {
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
        let changed = || SluiceError::Unsupported("cached plan must not change result type".into());
        match &self.target {
            Target::View(name) => {
                let view = views
                    .view(name)
                    .ok_or_else(|| SluiceError::UndefinedTable(name.clone()))?;
                if view.schema.fields() != self.view_schema.fields() {
                    return Err(changed());
                }
                view.readable()?;
                view.point_read(
                    &self.key_columns,
                    &key,
                    &self.projection,
                    self.output.clone(),
                )
            }
            Target::Table {
                name,
                id,
                key_order,
            } => {
                let table = tables
                    .table(name)
                    .ok_or_else(|| SluiceError::UndefinedTable(name.clone()))?;
                if table.def().id != *id {
                    return Err(changed());
                }
                self.read_table(&table, key_order, &key).await
            }
        }
    }

    /// A keyed table's record of the key, projected; no row for a NULL
    /// key (`= NULL` is never true) or a key with no live record.
    async fn read_table(
        &self,
        table: &TableLog,
        key_order: &[usize],
        key: &[ScalarValue],
    ) -> Result<RecordBatch, SluiceError> {
        let empty = || RecordBatch::new_empty(self.output.clone());
        if key.iter().any(ScalarValue::is_null) {
            return Ok(empty());
        }
        let mut columns = Vec::with_capacity(key_order.len());
        for &k in key_order {
            let ty = self.view_schema.field(self.key_columns[k]).data_type();
            let value = key[k].cast_to(ty)?;
            // A parameter's value out of the column's range equals nothing.
            if value.is_null() {
                return Ok(empty());
            }
            columns.push(value.to_array_of_size(1)?);
        }
        let Some(found) = table.read_by_key(columns).await? else {
            return Ok(empty());
        };
        let n = table.def().columns.len();
        let columns = self
            .projection
            .iter()
            .zip(self.output.fields())
            .map(|(&c, field)| {
                let column: arrow::array::ArrayRef = match c.checked_sub(n) {
                    None => found.record.column(c).clone(),
                    Some(0) => {
                        Arc::new(arrow::array::Int32Array::from(vec![found.partition as i32]))
                    }
                    Some(1) => Arc::new(arrow::array::Int64Array::from(vec![found.offset as i64])),
                    Some(_) => Arc::new(
                        arrow::array::TimestampMicrosecondArray::from(vec![found.ingested_at_us])
                            .with_timezone("+00:00"),
                    ),
                };
                Ok(arrow::compute::cast(&column, field.data_type())?)
            })
            .collect::<Result<Vec<_>, SluiceError>>()?;
        Ok(RecordBatch::try_new(self.output.clone(), columns)?)
    }
}

/// For a keyed table's point read: the position in `key_columns` of each
/// primary key column, in primary key order, when they are the whole
/// primary key.
fn primary_key_order(table: &TableLog, key_columns: &[usize]) -> Option<Vec<usize>> {
    let primary = table.def().primary_key_indices();
    if primary.len() != key_columns.len() {
        return None;
    }
    primary
        .iter()
        .map(|p| key_columns.iter().position(|k| k == p))
        .collect()
}

/// `value` as a value of `column_type`, when it is one exactly (`5` of a
/// BIGINT column, `'acme'` of a TEXT one). Otherwise (`5.5` or `'5'` of a
/// BIGINT column, a text timestamp) the query is planned as usual, which
/// applies SQL's coercions: a cast would truncate 5.5 to 5.
fn exact_in(value: &ScalarValue, column_type: &DataType) -> Option<ScalarValue> {
    let same_kind = |a: &DataType, b: &DataType| {
        (a.is_integer() && b.is_integer())
            || (matches!(a, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
                && matches!(b, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View))
            || a == b
    };
    if value.is_null() || !same_kind(&value.data_type(), column_type) {
        return None;
    }
    let cast = value.cast_to(column_type).ok()?;
    // An integer out of the column's range is not a value of it.
    let back = cast.cast_to(&value.data_type()).ok()?;
    (back == *value).then_some(cast)
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
