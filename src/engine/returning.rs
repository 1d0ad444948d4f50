//! `INSERT ... RETURNING`: the RETURNING list is planned as a query over
//! the target table (`SELECT list FROM t`), so its names, types and
//! privileges resolve as they would in a query, and it is computed over
//! the rows the INSERT writes, put in the place of the table's scan.
//!
//! The rows are computed before they are written: an error in the list
//! (a division by zero) writes nothing, as in PostgreSQL, where the
//! statement fails whole. Rows an erasure in force suppresses are not
//! written, so they are not returned either.

use std::sync::Arc;

use arrow::array::{new_null_array, ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use datafusion::catalog::MemTable;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::ScalarValue;
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::{Expr, LogicalPlan, TableScanBuilder};

use super::*;

/// A planned RETURNING list.
#[derive(Debug)]
pub struct Returning {
    table: String,
    /// `SELECT list FROM table`, over the table as the catalog has it.
    plan: LogicalPlan,
    /// The result's columns as the client sees them.
    pub columns: SchemaRef,
}

impl Planner {
    /// Plans `query` (`SELECT list FROM table [AS alias]`, as the parser
    /// gives an INSERT's RETURNING) for rows of `table`.
    pub(crate) async fn returning(
        &self,
        table: &str,
        query: &str,
        role: &SessionRole,
    ) -> Result<Returning, SluiceError> {
        let log = self
            .store
            .table(table)
            .ok_or_else(|| SluiceError::UndefinedTable(table.to_string()))?;
        let stmt = match parse_sql(query)? {
            Statement::Query(q) => *q,
            _ => return Err(SluiceError::Internal(format!("not a query: {query}"))),
        };
        let (plan, columns) = self.plan_shown(stmt, role).await?;
        // The hidden columns (_partition, _offset, ...) have values only
        // once the log has placed the row.
        let def = log.def();
        let mut hidden_names = Vec::new();
        plan.apply(|node| {
            if let LogicalPlan::TableScan(scan) = node {
                if scan.table_name.table() == table {
                    hidden_names.extend(
                        scan.source
                            .schema()
                            .fields()
                            .iter()
                            .filter(|f| def.column_index(f.name()).is_none())
                            .map(|f| f.name().clone()),
                    );
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        let mut hidden = None;
        plan.apply(|node| {
            node.apply_expressions(|e| {
                e.apply(|e| {
                    if let Expr::Column(c) = e {
                        if hidden_names.contains(&c.name) {
                            hidden = Some(c.name.clone());
                            return Ok(TreeNodeRecursion::Stop);
                        }
                    }
                    Ok(TreeNodeRecursion::Continue)
                })
            })
        })?;
        if let Some(name) = hidden {
            return Err(SluiceError::Unsupported(format!(
                "RETURNING {name} is not supported: the log gives a row its {name} as it appends it, after the statement's result"
            )));
        }
        Ok(Returning {
            table: table.to_string(),
            plan,
            columns,
        })
    }
}

impl Returning {
    /// SELECT on what the list reads (the table, and any other relation
    /// a subquery in it names), checked at every execution.
    pub(crate) fn check_access(
        &self,
        planner: &Planner,
        role: &SessionRole,
    ) -> Result<(), SluiceError> {
        planner.check_access(role, &self.plan)
    }

    /// The plan reading `rows` (of the table's columns) where it read the
    /// table.
    fn over(&self, rows: &[RecordBatch]) -> Result<LogicalPlan, SluiceError> {
        let replaced = self.plan.clone().transform_up(|node| match node {
            LogicalPlan::TableScan(scan) if scan.table_name.table() == self.table => {
                let schema = scan.source.schema();
                let batches = rows
                    .iter()
                    .map(|b| as_table_rows(b, &schema))
                    .collect::<Result<Vec<_>, SluiceError>>()
                    .map_err(crate::error::into_datafusion)?;
                let table = MemTable::try_new(schema, vec![batches])?;
                let scan = TableScanBuilder::new(
                    scan.table_name.clone(),
                    provider_as_source(Arc::new(table)),
                )
                .with_projection(scan.projection.clone())
                .with_filters(scan.filters.clone())
                .with_fetch(scan.fetch)
                .build()?;
                Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
            }
            other => Ok(Transformed::no(other)),
        })?;
        Ok(replaced.data)
    }
}

/// `batch` (a table's columns, as staged) as rows of the scan's `schema`:
/// its columns by name, the hidden ones (which RETURNING may not name)
/// filled with a placeholder of their type.
fn as_table_rows(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, SluiceError> {
    let n = batch.num_rows();
    let columns = schema
        .fields()
        .iter()
        .map(|f| -> Result<ArrayRef, SluiceError> {
            Ok(match batch.column_by_name(f.name()) {
                Some(c) if c.data_type() == f.data_type() => c.clone(),
                Some(c) => arrow::compute::cast(c, f.data_type())?,
                None if f.is_nullable() => new_null_array(f.data_type(), n),
                None => ScalarValue::new_default(f.data_type())?.to_array_of_size(n)?,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

impl Engine {
    /// Plans the RETURNING list of an INSERT into `table`, if it has one.
    pub(crate) async fn plan_returning(
        &self,
        session: &Session,
        table: &str,
        query: Option<&str>,
    ) -> Result<Option<Returning>, SluiceError> {
        match query {
            None => Ok(None),
            Some(q) => Ok(Some(
                self.planner.returning(table, q, &session.role()).await?,
            )),
        }
    }

    /// Writes `batches` (staged rows of `log`'s table) as an INSERT,
    /// answering with the RETURNING list's rows when there is one.
    pub(crate) async fn insert_rows(
        &self,
        session: &Session,
        log: &Arc<TableLog>,
        batches: Vec<RecordBatch>,
        on_conflict_do_nothing: bool,
        returning: Option<&Returning>,
    ) -> Result<Outcome, SluiceError> {
        let returned = match returning {
            None => None,
            Some(r) => {
                let def = log.def();
                let written = batches
                    .iter()
                    .map(|b| log.suppressions.kept(b.clone(), def.columns.len()))
                    .collect::<Result<Vec<_>, _>>()?;
                let plan = r.over(&written)?;
                let watch = session.cancel.watch();
                let rows = watch.run(self.collect_plan(session, plan)).await?;
                Some((r.columns.clone(), rows))
            }
        };
        let n = self
            .write(session, log, batches, on_conflict_do_nothing)
            .await?;
        Ok(match returned {
            None => Outcome::Done {
                tag: "INSERT",
                rows: Some(n),
            },
            Some((schema, batches)) => Outcome::Batches {
                schema,
                batches,
                tag: "INSERT 0",
            },
        })
    }

    /// An INSERT planned by DataFusion (`INSERT ... SELECT`, or VALUES
    /// with expressions) with a RETURNING list: the rows its plan would
    /// hand the table's sink are computed here, conformed to the table as
    /// the sink conforms them, and written by [`Engine::insert_rows`].
    pub(crate) async fn run_insert_returning(
        &self,
        session: &Session,
        plan: LogicalPlan,
        returning: &Returning,
    ) -> Result<Outcome, SluiceError> {
        let LogicalPlan::Dml(dml) = plan else {
            return Err(SluiceError::Internal(format!(
                "an INSERT planned as {}",
                plan.display()
            )));
        };
        let table = dml.table_name.table().to_string();
        let log = self
            .store
            .table(&table)
            .ok_or_else(|| SluiceError::UndefinedTable(table.clone()))?;
        let input = Arc::unwrap_or_clone(dml.input);
        let watch = session.cancel.watch();
        let computed = watch.run(self.collect_plan(session, input)).await?;
        let def = log.def();
        let limit = log.max_statement_bytes();
        let mut batches = Vec::with_capacity(computed.len());
        let (mut row, mut staged) = (1u64, 0u64);
        for batch in &computed {
            let conformed = conform_batch(&def, batch, row)?;
            staged += conformed.get_array_memory_size() as u64;
            if staged > limit {
                return Err(crate::ingest::IngestError::TooLarge { limit }.into());
            }
            row += batch.num_rows() as u64;
            batches.push(conformed);
        }
        self.insert_rows(session, &log, batches, false, Some(returning))
            .await
    }
}
