//! SQL type names to Arrow fields, as PostgreSQL reads them (see
//! `types::pg_type` for what a field's metadata says of its type).

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, TimeUnit};
use datafusion::error::DataFusionError;
use sluice_sql::sqlparser::ast::{self, ExactNumberInfo};

use crate::types::{declared_field, unconstrained_numeric, UTC};

/// SQL type names to Arrow fields, as PostgreSQL reads them: `TIMESTAMP` in
/// microseconds, `TIMESTAMPTZ` in UTC, `JSONB`, `JSON`, `VARCHAR(n)` and
/// `NUMERIC(p,s)` marked as such, `FLOAT(p)` by its precision, and
/// `NUMERIC` without a precision as Sluice stores it. Types it does not
/// know go to the next planner (`oid[]`, `regclass`).
#[derive(Debug)]
pub struct PgTypePlanner {
    pub next: Arc<dyn datafusion::logical_expr::planner::TypePlanner>,
}

impl datafusion::logical_expr::planner::TypePlanner for PgTypePlanner {
    fn plan_type_field(
        &self,
        sql_type: &ast::DataType,
    ) -> Result<Option<FieldRef>, DataFusionError> {
        use ast::DataType as T;
        // Every planned type carries a declaration, even one the Arrow
        // type tells: DataFusion passes a cast's input's metadata on to
        // its result unless the target has some (`CAST(j AS text)` of a
        // jsonb is text).
        let plain = |t: DataType| {
            let name = crate::types::PgType::of_data_type(&t).type_name();
            Ok(Some(Arc::new(declared_field("", t, &name))))
        };
        let marked = |t: DataType, d: String| Ok(Some(Arc::new(declared_field("", t, &d))));
        match sql_type {
            // `timestamp(p)` with p below 6 rounds to p digits of a second
            // (`query::pg_casts`); 6 or more is every digit there is.
            T::Timestamp(Some(p), tz) if *p < 6 => {
                let zoned = matches!(tz, ast::TimezoneInfo::Tz | ast::TimezoneInfo::WithTimeZone);
                marked(
                    DataType::Timestamp(TimeUnit::Microsecond, zoned.then(|| Arc::from(UTC))),
                    format!("{}({p})", if zoned { "timestamptz" } else { "timestamp" }),
                )
            }
            T::Timestamp(_, ast::TimezoneInfo::None | ast::TimezoneInfo::WithoutTimeZone) => {
                plain(DataType::Timestamp(TimeUnit::Microsecond, None))
            }
            T::Timestamp(_, ast::TimezoneInfo::Tz | ast::TimezoneInfo::WithTimeZone) => plain(
                DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from(UTC))),
            ),
            // `interval hour to minute`, `interval(2)`: PostgreSQL's typmod
            // (the fields' mask and the precision) in the declaration.
            T::Interval { fields, precision } if fields.is_some() || precision.is_some() => {
                let typmod = sluice_catalog::interval_typmod(
                    sluice_sql::interval_range(fields.as_ref()),
                    *precision,
                )
                .map_err(DataFusionError::Plan)?;
                marked(
                    DataType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano),
                    format!("interval({typmod})"),
                )
            }
            T::JSONB => marked(DataType::Utf8, "jsonb".into()),
            T::JSON => marked(DataType::Utf8, "json".into()),
            T::Varchar(len) | T::CharacterVarying(len) | T::CharVarying(len) => match len {
                Some(ast::CharacterLength::IntegerLength { length, .. }) => {
                    marked(DataType::Utf8, format!("varchar({length})"))
                }
                _ => marked(DataType::Utf8, "varchar".into()),
            },
            T::Text | T::String(_) => plain(DataType::Utf8),
            T::Char(len) | T::Character(len) => {
                let n = match len {
                    Some(ast::CharacterLength::IntegerLength { length, .. }) => *length,
                    _ => 1,
                };
                marked(DataType::Utf8, format!("bpchar({n})"))
            }
            T::Numeric(info) | T::Decimal(info) | T::Dec(info) => match info {
                ExactNumberInfo::PrecisionAndScale(p, s) => {
                    let (p, s) = (*p as u8, *s as i8);
                    if p == 0 || p > 38 || s < 0 || s as u8 > p {
                        return Err(DataFusionError::Plan(format!(
                            "NUMERIC precision {p} must be between 1 and 38, and its scale between 0 and the precision"
                        )));
                    }
                    marked(DataType::Decimal128(p, s), format!("numeric({p},{s})"))
                }
                ExactNumberInfo::Precision(p) => {
                    let p = *p as u8;
                    if p == 0 || p > 38 {
                        return Err(DataFusionError::Plan(format!(
                            "NUMERIC precision {p} must be between 1 and 38"
                        )));
                    }
                    marked(DataType::Decimal128(p, 0), format!("numeric({p},0)"))
                }
                // A cast to NUMERIC keeps its value's digits: its scale is
                // set by `postgres_plan` from what it casts.
                ExactNumberInfo::None => marked(unconstrained_numeric(), "numeric(*)".into()),
            },
            T::Float(ExactNumberInfo::Precision(p)) => match p {
                1..=24 => plain(DataType::Float32),
                25..=53 => plain(DataType::Float64),
                _ => Err(DataFusionError::Plan(format!(
                    "precision for type float must be between 1 and 53, not {p}"
                ))),
            },
            T::Interval { .. } => plain(DataType::Interval(
                arrow::datatypes::IntervalUnit::MonthDayNano,
            )),
            T::Time(_, ast::TimezoneInfo::None | ast::TimezoneInfo::WithoutTimeZone) => {
                plain(DataType::Time64(TimeUnit::Microsecond))
            }
            T::Int(_) | T::Integer(_) | T::Int4(_) => plain(DataType::Int32),
            T::SmallInt(_) | T::Int2(_) => plain(DataType::Int16),
            T::BigInt(_) | T::Int8(_) => plain(DataType::Int64),
            T::Real | T::Float4 => plain(DataType::Float32),
            T::Double(_) | T::DoublePrecision | T::Float8 => plain(DataType::Float64),
            T::Float(ExactNumberInfo::None) => plain(DataType::Float64),
            T::Boolean | T::Bool => plain(DataType::Boolean),
            T::Bytea => plain(DataType::Binary),
            T::Date => plain(DataType::Date32),
            T::Custom(name, args) if args.is_empty() => {
                let name = name
                    .0
                    .last()
                    .and_then(|p| p.as_ident())
                    .map(|i| i.value.to_ascii_lowercase())
                    .unwrap_or_default();
                match name.as_str() {
                    // The types `pg_type` lists by these names.
                    "name" => marked(DataType::Utf8, "name".into()),
                    // `"char"`: one byte of text (quoted; `char` alone is
                    // `char(1)`).
                    "char" => marked(DataType::Utf8, "char".into()),
                    "bpchar" => marked(DataType::Utf8, "bpchar".into()),
                    "int2vector" | "oidvector" => {
                        let element = match name.as_str() {
                            "int2vector" => DataType::Int16,
                            _ => DataType::Int32,
                        };
                        marked(
                            DataType::List(Arc::new(Field::new_list_field(element, true))),
                            name,
                        )
                    }
                    // `_int4`: PostgreSQL's internal name of `int4[]`.
                    array if array.len() > 1 && array.starts_with('_') => {
                        let element = sluice_sql::sqlparser::parser::Parser::new(
                            &sluice_sql::sqlparser::dialect::PostgreSqlDialect {},
                        )
                        .try_with_sql(&array[1..])
                        .and_then(|mut p| p.parse_data_type())
                        .map_err(|e| DataFusionError::Plan(e.to_string()))?;
                        match self.plan_type_field(&element)? {
                            Some(element) => plain(DataType::List(Arc::new(
                                element.as_ref().clone().with_name("item"),
                            ))),
                            None => self.next.plan_type_field(sql_type),
                        }
                    }
                    _ => self.next.plan_type_field(sql_type),
                }
            }
            _ => self.next.plan_type_field(sql_type),
        }
    }
}

/// datafusion-pg-catalog's SQL type planner, and `oid[]` as a list whose
/// element is marked as an oid, so a `$1::oid[]` parameter is described as
/// `oid[]` (asyncpg's type lookup binds one, and asyncpg has no codec for
/// `int4[]` before that lookup answers).
#[derive(Debug)]
pub struct OidArrayTypePlanner;

impl datafusion::logical_expr::planner::TypePlanner for OidArrayTypePlanner {
    fn plan_type_field(
        &self,
        sql_type: &sluice_sql::sqlparser::ast::DataType,
    ) -> Result<Option<arrow::datatypes::FieldRef>, DataFusionError> {
        use datafusion_pg_catalog::pg_catalog::oid_type_planner::PgOidTypePlanner;
        use sluice_sql::sqlparser::ast::{ArrayElemTypeDef, DataType as SqlType};
        if let SqlType::Array(ArrayElemTypeDef::SquareBracket(element, None)) = sql_type {
            if let SqlType::Custom(name, args) = element.as_ref() {
                let is_oid = args.is_empty()
                    && name
                        .0
                        .last()
                        .and_then(|p| p.as_ident())
                        .is_some_and(|i| i.value.eq_ignore_ascii_case("oid"));
                if is_oid {
                    let element = Field::new("item", DataType::Int32, true).with_metadata(
                        [(
                            arrow_pg::datatypes::PG_OID_ALIAS_KEY.to_string(),
                            "oid".to_string(),
                        )]
                        .into(),
                    );
                    return Ok(Some(Arc::new(Field::new(
                        "",
                        DataType::List(Arc::new(element)),
                        true,
                    ))));
                }
            }
        }
        // A cast to an oid alias is described and shown as that type.
        Ok(PgOidTypePlanner.plan_type_field(sql_type)?.map(|f| {
            match f.metadata().get(arrow_pg::datatypes::PG_OID_ALIAS_KEY) {
                Some(kind) => {
                    let metadata = crate::types::oid_alias_value(kind);
                    Arc::new(f.as_ref().clone().with_metadata(metadata))
                }
                None => f,
            }
        }))
    }
}
