//! `pg_type`, `pg_proc`, `pg_operator` and `pg_aggregate` as Sluice has
//! them. datafusion-pg-catalog ships PostgreSQL 16's rows (some 3,300
//! functions, 800 operators, 600 types); a scan keeps the types Sluice
//! has (its value types, their arrays, the pseudo-types signatures name),
//! the functions and aggregates its planner knows by name whose argument
//! and result types are all among those types, and the operators it plans
//! over them. A tool that reads these lists (sqlsmith generates queries
//! from them, an IDE completes names) then calls what exists.
//!
//! `pg_proc.proargtypes` is an `oidvector` (an array, so `unnest` works;
//! shown as `23 25`), and the functions of `information_schema` point at
//! the oid that schema has here.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use super::pg_keys::{scan_all, text_to_list};

/// Which catalog a [`RoutineCatalogTable`] keeps the rows of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoutineCatalog {
    Type,
    Proc,
    Operator,
    Aggregate,
}

impl RoutineCatalog {
    pub fn of(name: &str) -> Option<RoutineCatalog> {
        Some(match name {
            "pg_type" => RoutineCatalog::Type,
            "pg_proc" => RoutineCatalog::Proc,
            "pg_operator" => RoutineCatalog::Operator,
            "pg_aggregate" => RoutineCatalog::Aggregate,
            _ => return None,
        })
    }
}

/// The operators Sluice plans (over the types it has).
const OPERATORS: &[&str] = &[
    "+", "-", "*", "/", "%", "=", "<>", "<", "<=", ">", ">=", "||", "~~", "!~~", "~~*", "!~~*",
    "~", "~*", "!~", "!~*", "->", "->>", "#>", "#>>", "@>", "<@", "?", "?|", "?&", "&&",
];

/// PostgreSQL's oid of `information_schema` in the rows shipped.
const SHIPPED_INFORMATION_SCHEMA_OID: i64 = 13283;

pub struct RoutineCatalogTable {
    kind: RoutineCatalog,
    inner: Arc<dyn TableProvider>,
    /// The shipped `pg_proc` (for `pg_aggregate`: which aggregates are kept).
    pg_proc: Arc<dyn TableProvider>,
    namespaces: Option<Arc<dyn TableProvider>>,
    schema: SchemaRef,
}

impl fmt::Debug for RoutineCatalogTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} catalog", self.kind)
    }
}

impl RoutineCatalogTable {
    pub fn new(
        kind: RoutineCatalog,
        inner: Arc<dyn TableProvider>,
        pg_proc: Arc<dyn TableProvider>,
        namespaces: Option<Arc<dyn TableProvider>>,
    ) -> Self {
        let fields: Vec<Field> = inner
            .schema()
            .fields()
            .iter()
            .map(|f| match (kind, f.name().as_str()) {
                (RoutineCatalog::Proc, "proargtypes") => Field::new(
                    f.name(),
                    DataType::List(Arc::new(Field::new_list_field(DataType::Int32, true))),
                    true,
                )
                .with_metadata(crate::types::declared("oidvector")),
                // PostgreSQL's names are of type name.
                (_, "proname" | "typname" | "oprname") if f.data_type() == &DataType::Utf8 => f
                    .as_ref()
                    .clone()
                    .with_metadata(crate::types::declared("name")),
                _ => f.as_ref().clone(),
            })
            .collect();
        RoutineCatalogTable {
            kind,
            inner,
            pg_proc,
            namespaces,
            schema: Arc::new(Schema::new(fields)),
        }
    }
}

/// The column `name` of `batch` as 64-bit integers (oids are kept as
/// 32-bit integers of either sign).
fn integers(batch: &RecordBatch, name: &str) -> Option<Int64Array> {
    let column = batch.column_by_name(name)?;
    let cast = arrow::compute::cast(column, &DataType::Int64).ok()?;
    Some(cast.as_primitive::<arrow::datatypes::Int64Type>().clone())
}

fn texts(batch: &RecordBatch, name: &str) -> Option<arrow::array::StringArray> {
    let column = batch.column_by_name(name)?;
    let cast = arrow::compute::cast(column, &DataType::Utf8).ok()?;
    Some(cast.as_string::<i32>().clone())
}

/// The oids of the types Sluice has.
fn known_types() -> HashSet<i64> {
    crate::types::known_type_oids().map(i64::from).collect()
}

/// The names of the functions the session's planner knows.
fn function_names(state: &dyn Session) -> HashSet<String> {
    state
        .scalar_functions()
        .keys()
        .chain(state.aggregate_functions().keys())
        .chain(state.window_functions().keys())
        .map(|n| n.to_ascii_lowercase())
        .collect()
}

/// Which rows of the shipped `pg_proc` are functions Sluice has.
fn kept_procs(batch: &RecordBatch, names: &HashSet<String>, types: &HashSet<i64>) -> Vec<bool> {
    let (Some(proname), Some(rettype), Some(argtypes)) = (
        texts(batch, "proname"),
        integers(batch, "prorettype"),
        texts(batch, "proargtypes"),
    ) else {
        return vec![false; batch.num_rows()];
    };
    (0..batch.num_rows())
        .map(|i| {
            !proname.is_null(i)
                && names.contains(proname.value(i))
                && rettype.is_valid(i)
                && types.contains(&rettype.value(i))
                && (argtypes.is_null(i)
                    || argtypes.value(i).split_whitespace().all(|a| {
                        a.parse::<i64>()
                            .ok()
                            .is_some_and(|oid| types.contains(&oid))
                    }))
        })
        .collect()
}

#[async_trait]
impl TableProvider for RoutineCatalogTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let types = known_types();
        let batches = scan_all(self.inner.as_ref(), state).await?;
        let mut out = Vec::with_capacity(batches.len());
        // The kept aggregates, by oid and by name (`aggfnoid` is a
        // regproc: a name here).
        let (mut aggregate_oids, mut aggregate_names) = (HashSet::new(), HashSet::new());
        if self.kind == RoutineCatalog::Aggregate {
            let names = function_names(state);
            for batch in scan_all(self.pg_proc.as_ref(), state).await? {
                let (Some(oids), Some(proname)) =
                    (integers(&batch, "oid"), texts(&batch, "proname"))
                else {
                    continue;
                };
                for (i, keep) in kept_procs(&batch, &names, &types).into_iter().enumerate() {
                    if keep {
                        aggregate_oids.insert(oids.value(i));
                        aggregate_names.insert(proname.value(i).to_string());
                    }
                }
            }
        }
        let information_schema = match (&self.namespaces, self.kind) {
            (Some(namespaces), RoutineCatalog::Proc) => {
                let mut oid = None;
                for batch in scan_all(namespaces.as_ref(), state).await? {
                    if let (Some(names), Some(oids)) =
                        (texts(&batch, "nspname"), integers(&batch, "oid"))
                    {
                        for i in 0..batch.num_rows() {
                            if names.is_valid(i) && names.value(i) == "information_schema" {
                                oid = Some(oids.value(i));
                            }
                        }
                    }
                }
                oid
            }
            _ => None,
        };
        let names = function_names(state);
        for batch in batches {
            let keep: Vec<bool> = match self.kind {
                RoutineCatalog::Type => match integers(&batch, "oid") {
                    Some(oids) => oids
                        .iter()
                        .map(|o| o.is_some_and(|o| types.contains(&o)))
                        .collect(),
                    None => vec![true; batch.num_rows()],
                },
                RoutineCatalog::Proc => kept_procs(&batch, &names, &types),
                RoutineCatalog::Operator => {
                    let (Some(name), Some(left), Some(right), Some(result)) = (
                        texts(&batch, "oprname"),
                        integers(&batch, "oprleft"),
                        integers(&batch, "oprright"),
                        integers(&batch, "oprresult"),
                    ) else {
                        continue;
                    };
                    let typed = |a: &Int64Array, i: usize| {
                        a.is_valid(i) && (a.value(i) == 0 || types.contains(&a.value(i)))
                    };
                    (0..batch.num_rows())
                        .map(|i| {
                            name.is_valid(i)
                                && OPERATORS.contains(&name.value(i))
                                && typed(&left, i)
                                && typed(&right, i)
                                && typed(&result, i)
                                && result.value(i) != 0
                        })
                        .collect()
                }
                RoutineCatalog::Aggregate => {
                    let numeric = batch
                        .column_by_name("aggfnoid")
                        .is_some_and(|c| c.data_type().is_integer());
                    match (integers(&batch, "aggfnoid"), texts(&batch, "aggfnoid")) {
                        (Some(oids), _) if numeric => oids
                            .iter()
                            .map(|o| o.is_some_and(|o| aggregate_oids.contains(&o)))
                            .collect(),
                        (_, Some(names)) => names
                            .iter()
                            .map(|n| {
                                n.is_some_and(|n| {
                                    let n = n.strip_prefix("pg_catalog.").unwrap_or(n);
                                    aggregate_names.contains(n)
                                })
                            })
                            .collect(),
                        _ => vec![false; batch.num_rows()],
                    }
                }
            };
            let kept = arrow::compute::filter_record_batch(&batch, &BooleanArray::from(keep))?;
            let mut columns: Vec<ArrayRef> = kept.columns().to_vec();
            if self.kind == RoutineCatalog::Proc {
                let schema = kept.schema();
                if let Ok(i) = schema.index_of("proargtypes") {
                    columns[i] = text_to_list(columns[i].as_ref(), &DataType::Int32)?;
                }
                if let (Ok(i), Some(oid)) = (schema.index_of("pronamespace"), information_schema) {
                    let remapped = arrow::compute::cast(&columns[i], &DataType::Int64)?;
                    let remapped: Int64Array = remapped
                        .as_primitive::<arrow::datatypes::Int64Type>()
                        .iter()
                        .map(|n| match n {
                            Some(SHIPPED_INFORMATION_SCHEMA_OID) => Some(oid),
                            other => other,
                        })
                        .collect();
                    columns[i] = arrow::compute::cast(&remapped, schema.field(i).data_type())?;
                }
            }
            out.push(RecordBatch::try_new(self.schema.clone(), columns)?);
        }
        super::sluice_catalog::scan_rows(&self.schema, out, state, projection, filters, limit).await
    }
}
