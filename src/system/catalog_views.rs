//! The `pg_catalog` views that describe relations (`pg_tables`,
//! `pg_matviews`, `pg_views`, `pg_indexes`), defined as PostgreSQL defines
//! them: queries over `pg_class`, `pg_namespace` and `pg_index`, so they
//! say exactly what psql's `\d` and the drivers' reflection see. Tools
//! read them to decide what to do (dbt renames a relation `pg_tables`
//! lists as a table; DuckDB's `ATTACH` reads `pg_indexes`), so a
//! materialized view is in `pg_matviews` and not in `pg_tables`.
//!
//! Each scan plans the view's query in the scanning session and collects
//! its rows (catalogs are small), so the rows are those of that moment.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::{SessionContext, SessionState};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

/// The views this module defines, by name.
pub const CATALOG_VIEWS: [&str; 5] = [
    "pg_tables",
    "pg_matviews",
    "pg_views",
    "pg_indexes",
    "pg_stat_wal_receiver",
];

/// Relations of `public` and the system schemas, with their namespace.
const RELATIONS: &str = "pg_catalog.pg_class c \
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace";

/// `name`'s provider, when it is one of [`CATALOG_VIEWS`].
pub fn catalog_view(name: &str) -> Option<Arc<dyn TableProvider>> {
    let text = |n: &str| Field::new(n, DataType::Utf8, true);
    // PostgreSQL's `name` type, as these views' name columns are.
    let name_of = |n: &str| {
        Field::new(n, DataType::Utf8, true).with_metadata(
            [(
                sluice_catalog::SQL_TYPE_METADATA_KEY.to_string(),
                "name".to_string(),
            )]
            .into_iter()
            .collect(),
        )
    };
    let flag = |n: &str| Field::new(n, DataType::Boolean, true);
    let (fields, sql) = match name {
        "pg_tables" => (
            vec![
                name_of("schemaname"),
                name_of("tablename"),
                name_of("tableowner"),
                name_of("tablespace"),
                flag("hasindexes"),
                flag("hasrules"),
                flag("hastriggers"),
                flag("rowsecurity"),
            ],
            format!(
                "SELECT n.nspname, c.relname, pg_get_userbyid(c.relowner), \
                 CAST(NULL AS VARCHAR), c.relhasindex, c.relhasrules, c.relhastriggers, \
                 c.relrowsecurity FROM {RELATIONS} WHERE c.relkind IN ('r', 'p')"
            ),
        ),
        "pg_matviews" => (
            vec![
                name_of("schemaname"),
                name_of("matviewname"),
                name_of("matviewowner"),
                name_of("tablespace"),
                flag("hasindexes"),
                flag("ispopulated"),
                text("definition"),
            ],
            format!(
                "SELECT n.nspname, c.relname, pg_get_userbyid(c.relowner), \
                 CAST(NULL AS VARCHAR), c.relhasindex, true, \
                 pg_get_viewdef(c.relname) FROM {RELATIONS} WHERE c.relkind = 'm'"
            ),
        ),
        "pg_views" => (
            vec![
                name_of("schemaname"),
                name_of("viewname"),
                name_of("viewowner"),
                text("definition"),
            ],
            format!(
                "SELECT n.nspname, c.relname, pg_get_userbyid(c.relowner), \
                 pg_get_viewdef(c.relname) FROM {RELATIONS} WHERE c.relkind = 'v'"
            ),
        ),
        "pg_indexes" => (
            vec![
                name_of("schemaname"),
                name_of("tablename"),
                name_of("indexname"),
                name_of("tablespace"),
                text("indexdef"),
            ],
            // Only the indexes Sluice keeps: the static rows of PostgreSQL's
            // own catalogs' indexes describe no relation here.
            "SELECT n.nspname, c.relname, i.relname, CAST(NULL AS VARCHAR), \
                 pg_get_indexdef(i.oid) \
             FROM pg_catalog.pg_index x \
             JOIN pg_catalog.pg_class c ON c.oid = x.indrelid \
             JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid \
             LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind IN ('r', 'm', 'p') AND i.relkind IN ('i', 'I') \
               AND pg_get_indexdef(i.oid) IS NOT NULL"
                .to_string(),
        ),
        // No WAL receiver: Sluice is never a standby.
        "pg_stat_wal_receiver" => (
            vec![
                Field::new("pid", DataType::Int32, true),
                text("status"),
                text("sender_host"),
                Field::new("sender_port", DataType::Int32, true),
                text("conninfo"),
            ],
            "SELECT CAST(NULL AS INT) AS a, CAST(NULL AS VARCHAR) AS b, \
                 CAST(NULL AS VARCHAR) AS c, CAST(NULL AS INT) AS d, CAST(NULL AS VARCHAR) AS e \
             WHERE false"
                .to_string(),
        ),
        _ => return None,
    };
    Some(Arc::new(CatalogView {
        schema: Arc::new(Schema::new(fields)),
        sql,
    }))
}

struct CatalogView {
    schema: SchemaRef,
    sql: String,
}

impl fmt::Debug for CatalogView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CatalogView")
    }
}

#[async_trait]
impl TableProvider for CatalogView {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let session = state
            .as_any()
            .downcast_ref::<SessionState>()
            .ok_or_else(|| DataFusionError::Internal("a catalog view needs a session".into()))?;
        let rows = SessionContext::new_with_state(session.clone())
            .sql(&self.sql)
            .await?
            .collect()
            .await?;
        // The query's columns in order, named and typed as the view says.
        let rows = rows
            .into_iter()
            .map(|batch| {
                let columns =
                    super::sluice_catalog::cast_to(batch.columns(), self.schema.fields())?;
                Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
            })
            .collect::<Result<Vec<_>>>()?;
        super::sluice_catalog::scan_rows(&self.schema, rows, state, projection, filters, limit)
            .await
    }
}

/// `pg_get_viewdef(oid or name)`: the defining query of a view or a
/// materialized view (as its creator wrote it); NULL for any other
/// relation. PostgreSQL still takes a view's name here; Sluice's own
/// catalog views call it by name, psql by oid.
pub fn viewdef_function(
    views: Arc<crate::stream::ViewManager>,
    store: Arc<crate::log::LogStore>,
    names: Arc<super::pg_catalog_info::RelationNames>,
) -> datafusion::logical_expr::ScalarUDF {
    use super::pg_keys::{as_columnar, rows_of, CatalogFunction};
    use arrow::array::{AsArray, StringArray};
    let definition = move |args: &[datafusion::logical_expr::ColumnarValue]| {
        let rows = rows_of(args);
        let text = arrow::compute::cast(&args[0].to_array(rows)?, &DataType::Utf8)?;
        let definition = |name: &str| match views.view(name) {
            Some(v) => Some(sluice_sql::unmark_asof_joins(&v.def.query)),
            None => store
                .query_view(name)
                .map(|v| sluice_sql::unmark_asof_joins(&v.query)),
        };
        let out: StringArray = text
            .as_string::<i32>()
            .iter()
            .map(|given| {
                let given = given?;
                // A name, or an oid (psql's `'16401'::oid`).
                definition(given).or_else(|| definition(&names.name(given.parse().ok()?)?))
            })
            .collect();
        Ok(as_columnar(args, Arc::new(out)))
    };
    datafusion::logical_expr::ScalarUDF::new_from_impl(CatalogFunction::new(
        "pg_get_viewdef",
        2,
        DataType::Utf8,
        definition,
    ))
}

/// `pg_get_function_result(oid)` and `pg_get_function_arguments(oid)`
/// (psql's `\df`): the result type and the argument types of the function
/// `pg_proc` lists under that oid, named as `format_type` names them
/// (`pg_type`'s name for a type Sluice does not describe itself); NULL for
/// an oid `pg_proc` does not list.
pub fn function_signature_functions(
    pg_proc: &[RecordBatch],
    pg_type: &[RecordBatch],
) -> [datafusion::logical_expr::ScalarUDF; 2] {
    use super::pg_keys::{as_columnar, int64s, rows_of, CatalogFunction};
    use arrow::array::{Array, AsArray, StringArray};
    use std::collections::HashMap;
    let text_of = super::sluice_catalog::text_column;
    let mut type_names: HashMap<i64, String> = HashMap::new();
    for batch in pg_type {
        if let (Some(oids), Some(names)) = (text_of(batch, "oid"), text_of(batch, "typname")) {
            let (oids, names) = (oids.as_string::<i32>(), names.as_string::<i32>());
            for i in 0..batch.num_rows() {
                if let (Ok(oid), false) = (oids.value(i).parse::<i64>(), names.is_null(i)) {
                    type_names.insert(oid, names.value(i).to_string());
                }
            }
        }
    }
    let type_name = move |oid: i64| {
        let sluice = u32::try_from(oid)
            .map(|o| crate::types::PgType { oid: o, typmod: -1 }.format())
            .unwrap_or_default();
        match sluice.as_str() {
            "unknown" | "" => type_names.get(&oid).cloned().unwrap_or(sluice),
            _ => sluice,
        }
    };
    // oid -> (result, arguments)
    let mut signatures: HashMap<i64, (String, String)> = HashMap::new();
    for batch in pg_proc {
        let (Some(oids), Some(results), Some(args)) = (
            text_of(batch, "oid"),
            text_of(batch, "prorettype"),
            text_of(batch, "proargtypes"),
        ) else {
            continue;
        };
        let sets = text_of(batch, "proretset");
        let (all_types, modes, names) = (
            text_of(batch, "proallargtypes"),
            text_of(batch, "proargmodes"),
            text_of(batch, "proargnames"),
        );
        // `['i', 'o']`, `[114, 25]`: the catalog's lists as text.
        let list = |c: &Option<arrow::array::ArrayRef>, i: usize| -> Vec<String> {
            match c {
                Some(c) if !c.is_null(i) => c
                    .as_string::<i32>()
                    .value(i)
                    .trim_matches(|ch| ch == '[' || ch == ']' || ch == '{' || ch == '}')
                    .split(',')
                    .map(|v| v.trim().trim_matches('\'').trim_matches('"').to_string())
                    .filter(|v| !v.is_empty())
                    .collect(),
                _ => Vec::new(),
            }
        };
        let (oids, results, args) = (
            oids.as_string::<i32>(),
            results.as_string::<i32>(),
            args.as_string::<i32>(),
        );
        for i in 0..batch.num_rows() {
            let Ok(oid) = oids.value(i).parse::<i64>() else {
                continue;
            };
            let result = results
                .value(i)
                .parse::<i64>()
                .map(&type_name)
                .unwrap_or_default();
            let set = sets
                .as_ref()
                .is_some_and(|s| matches!(s.as_string::<i32>().value(i), "true" | "t"));
            // As PostgreSQL writes them: each argument's mode, name and
            // type, outputs of a TABLE function left out.
            let mut types = list(&all_types, i);
            if types.is_empty() {
                types = args
                    .value(i)
                    .split_whitespace()
                    .map(str::to_string)
                    .collect();
            }
            let (modes, names) = (list(&modes, i), list(&names, i));
            let arguments: Vec<String> = types
                .iter()
                .enumerate()
                .filter_map(|(k, t)| {
                    let mode = match modes.get(k).map(String::as_str) {
                        Some("o") => "OUT ",
                        Some("b") => "INOUT ",
                        Some("v") => "VARIADIC ",
                        Some("t") => return None,
                        _ => "",
                    };
                    let name = names
                        .get(k)
                        .filter(|n| !n.is_empty())
                        .map(|n| format!("{n} "))
                        .unwrap_or_default();
                    let ty = match type_name(t.parse::<i64>().ok()?) {
                        // Keywords, quoted as format_type quotes them.
                        ty if ty == "any" || ty == "char" => format!("\"{ty}\""),
                        ty => ty,
                    };
                    Some(format!("{mode}{name}{ty}"))
                })
                .collect();
            let result = if set {
                format!("SETOF {result}")
            } else {
                result
            };
            signatures.insert(oid, (result, arguments.join(", ")));
        }
    }
    let signatures = Arc::new(signatures);
    let function = |name: &'static str, pick: fn(&(String, String)) -> &String| {
        let signatures = signatures.clone();
        let f = move |args: &[datafusion::logical_expr::ColumnarValue]| {
            let rows = rows_of(args);
            let out: StringArray = int64s(&args[0], rows)?
                .iter()
                .map(|oid| signatures.get(&(*oid)?).map(|s| pick(s).clone()))
                .collect();
            Ok(as_columnar(args, Arc::new(out)))
        };
        datafusion::logical_expr::ScalarUDF::new_from_impl(CatalogFunction::new(
            name,
            1,
            DataType::Utf8,
            f,
        ))
    };
    [
        function("pg_get_function_result", |s| &s.0),
        function("pg_get_function_arguments", |s| &s.1),
    ]
}
