//! `INSERT ... VALUES` whose values are literals and parameters (`$n`),
//! prepared once and executed many times. Each execution puts its
//! parameters' text (or the text of their binary form) straight into a
//! [`RowStager`], so it is converted and validated exactly as a literal
//! INSERT or COPY is, with no query plan per execution.

use std::borrow::Cow;

use arrow::record_batch::RecordBatch;
use sluice_catalog::{SqlType, TableDef};
use sluice_sql::InsertValue;

use super::binary_copy::field_text;
use super::error::IngestError;
use super::stager::{resolve_columns, RowStager};

/// One parameter as bound by a client.
#[derive(Debug, Clone, Copy)]
pub enum BoundParam<'a> {
    Null,
    /// PostgreSQL's text form (UTF-8).
    Text(&'a [u8]),
    /// PostgreSQL's binary form of the given type.
    Binary(&'a [u8], &'a SqlType),
}

/// An INSERT prepared for execution without planning.
#[derive(Debug, Clone)]
pub struct PreparedInsert {
    pub table: String,
    /// The statement's column list (empty: every column, in order).
    columns: Vec<String>,
    rows: Vec<Vec<InsertValue>>,
    pub on_conflict_do_nothing: bool,
    /// Each parameter's type: the type of the column it fills.
    param_types: Vec<SqlType>,
}

impl PreparedInsert {
    /// `None` when the rows do not fit this path (a parameter that fills
    /// columns of two types, or one that fills none; rows of the wrong
    /// width): DataFusion plans those, and words their errors.
    pub fn new(
        def: &TableDef,
        columns: Vec<String>,
        rows: Vec<Vec<InsertValue>>,
        on_conflict_do_nothing: bool,
    ) -> Result<Option<PreparedInsert>, IngestError> {
        let targets = resolve_columns(def, &columns)?;
        let mut types: Vec<Option<SqlType>> = Vec::new();
        for row in &rows {
            if row.len() != targets.len() {
                return Ok(None);
            }
            for (value, &column) in row.iter().zip(&targets) {
                let InsertValue::Param(n) = value else {
                    continue;
                };
                if types.len() < *n {
                    types.resize(*n, None);
                }
                let ty = &def.columns[column].ty;
                match &types[n - 1] {
                    Some(t) if t != ty => return Ok(None),
                    Some(_) => {}
                    None => types[n - 1] = Some(ty.clone()),
                }
            }
        }
        let Some(param_types) = types.into_iter().collect::<Option<Vec<_>>>() else {
            return Ok(None);
        };
        Ok(Some(PreparedInsert {
            table: def.name.clone(),
            columns,
            rows,
            on_conflict_do_nothing,
            param_types,
        }))
    }

    pub fn param_types(&self) -> &[SqlType] {
        &self.param_types
    }

    /// The statement's rows with `params` bound, as validated batches of
    /// the table's data schema (`def` is the table as it is now).
    pub fn stage(
        &self,
        def: &TableDef,
        params: &[BoundParam<'_>],
        max_bytes: u64,
    ) -> Result<Vec<RecordBatch>, IngestError> {
        if params.len() != self.param_types.len() {
            return Err(IngestError::ParameterCount {
                expected: self.param_types.len(),
                got: params.len(),
            });
        }
        let texts = params
            .iter()
            .enumerate()
            .map(|(i, p)| param_text(i + 1, p))
            .collect::<Result<Vec<_>, _>>()?;
        let mut stager = RowStager::new(def, &self.columns, false)?.with_limit(max_bytes);
        let mut fields: Vec<Option<&str>> = Vec::new();
        for (i, row) in self.rows.iter().enumerate() {
            fields.clear();
            fields.extend(row.iter().map(|v| match v {
                InsertValue::Literal(text) => text.as_deref(),
                InsertValue::Param(n) => texts[n - 1].as_deref(),
            }));
            stager.push_row(&fields, i as u64 + 1)?;
        }
        stager.finish()
    }
}

fn param_text<'a>(index: usize, p: &BoundParam<'a>) -> Result<Option<Cow<'a, str>>, IngestError> {
    let bad = |reason: String| IngestError::BadParameter { index, reason };
    Ok(match p {
        BoundParam::Null => None,
        BoundParam::Text(bytes) => Some(Cow::Borrowed(
            std::str::from_utf8(bytes).map_err(|_| bad("invalid UTF-8".into()))?,
        )),
        BoundParam::Binary(bytes, ty) => Some(Cow::Owned(field_text(bytes, ty).map_err(bad)?)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::Int64Type;
    use sluice_catalog::{ColumnDef, TableOptions};

    fn table() -> TableDef {
        let col = |name: &str, ty: SqlType, nullable: bool| ColumnDef {
            name: name.into(),
            ty,
            nullable,
        };
        TableDef {
            id: 1,
            name: "t".into(),
            columns: vec![
                col("id", SqlType::BigInt, false),
                col("name", SqlType::Text, true),
            ],
            options: TableOptions::default(),
        }
    }

    fn values(sql: &str) -> (Vec<String>, Vec<Vec<InsertValue>>) {
        match sluice_sql::parse_sql(sql).unwrap() {
            sluice_sql::Statement::Insert {
                columns,
                values: Some(v),
                ..
            } => (columns, v),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parameters_in_text_and_binary_fill_their_columns() {
        let def = table();
        let (columns, rows) = values("INSERT INTO t (name, id) VALUES ($2, $1), ('lit', 7)");
        let p = PreparedInsert::new(&def, columns, rows, false)
            .unwrap()
            .unwrap();
        assert_eq!(p.param_types(), &[SqlType::BigInt, SqlType::Text]);
        let id = 42i64.to_be_bytes();
        let batches = p
            .stage(
                &def,
                &[BoundParam::Binary(&id, &SqlType::BigInt), BoundParam::Null],
                u64::MAX,
            )
            .unwrap();
        let b = &batches[0];
        let ids = b.column(0).as_primitive::<Int64Type>();
        assert_eq!(ids.values().to_vec(), vec![42, 7]);
        assert!(b.column(1).is_null(0));
        assert_eq!(b.column(1).as_string::<i32>().value(1), "lit");
    }

    #[test]
    fn bad_parameters_are_refused_with_their_sqlstate() {
        let def = table();
        let (columns, rows) = values("INSERT INTO t VALUES ($1, $2)");
        let p = PreparedInsert::new(&def, columns, rows, false)
            .unwrap()
            .unwrap();
        let cases: Vec<(Vec<BoundParam>, &str)> = vec![
            (vec![BoundParam::Text(b"x"), BoundParam::Null], "22P02"),
            (vec![BoundParam::Null, BoundParam::Null], "23502"),
            (
                vec![
                    BoundParam::Binary(b"\0\0", &SqlType::BigInt),
                    BoundParam::Null,
                ],
                "22P03",
            ),
            (vec![BoundParam::Text(b"1")], "08P01"),
        ];
        for (params, state) in cases {
            let e = p.stage(&def, &params, u64::MAX).unwrap_err();
            assert_eq!(e.sqlstate(), state, "{e}");
        }
    }

    #[test]
    fn rows_this_path_cannot_type_are_left_to_the_planner() {
        let def = table();
        for sql in [
            "INSERT INTO t VALUES ($1, $1)",
            "INSERT INTO t VALUES ($2, 'a')",
            "INSERT INTO t VALUES (1)",
        ] {
            let (columns, rows) = values(sql);
            assert!(
                PreparedInsert::new(&def, columns, rows, false)
                    .unwrap()
                    .is_none(),
                "{sql}"
            );
        }
    }
}
