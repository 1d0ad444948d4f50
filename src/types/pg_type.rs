//! PostgreSQL's type of a column, from its Arrow field: the type oid,
//! the typmod and the names `format_type` and `pg_typeof` give. One
//! mapping serves the wire's RowDescription and ParameterDescription,
//! `pg_typeof`, `pg_attribute` and `information_schema.columns`, so they
//! always agree.
//!
//! Arrow has one string type and one decimal type, where PostgreSQL has
//! `text`, `varchar(n)`, `json` and `jsonb`, and `numeric` with or without
//! a precision and scale. A field tells which by its metadata
//! (`sluice.sql_type`: `jsonb`, `json`, `varchar(5)`, `varchar`,
//! `numeric(12,3)`), which table columns carry from their definition and
//! casts (`x::varchar(5)`) from the type planner (`query::PgTypePlanner`);
//! a column read through a projection keeps it, an expression computed
//! from it does not (its typmod is -1, as in PostgreSQL).

use std::collections::HashMap;

use arrow::datatypes::{DataType, Field};

pub use sluice_catalog::SQL_TYPE_METADATA_KEY;

/// arrow-pg's metadata key for int4 columns that are oid aliases.
const OID_ALIAS_KEY: &str = "pg.oid_alias";

/// Marks a value cast to an oid alias (`atttypid::regtype`) or computed
/// as one (`pg_typeof`). datafusion-pg-catalog marks its catalog columns
/// with their alias (`atttypid` as a regtype, so that `atttypid = 'int4'`
/// resolves), but PostgreSQL's catalog columns are plain `oid`s: clients
/// (ADBC, JDBC) read them as numbers. Only a marked field is described,
/// and shown, as its alias.
pub const OID_ALIAS_CAST_KEY: &str = "sluice.oid_alias_cast";

/// The metadata of a value of oid alias `kind` (`"regtype"`).
pub fn oid_alias_value(kind: &str) -> HashMap<String, String> {
    [
        (OID_ALIAS_KEY.to_string(), kind.to_string()),
        (OID_ALIAS_CAST_KEY.to_string(), "true".to_string()),
    ]
    .into()
}

/// The time zone of `timestamptz` values (the server runs in UTC).
pub const UTC: &str = "+00:00";

/// A column's PostgreSQL type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PgType {
    pub oid: u32,
    /// `atttypmod`: -1 for none; `varchar(n)`: n + 4; `numeric(p,s)`:
    /// `(p << 16 | s) + 4`.
    pub typmod: i32,
}

/// Oids of the built-in types Sluice's values have.
pub mod oid {
    pub const BOOL: u32 = 16;
    pub const BYTEA: u32 = 17;
    pub const CHAR: u32 = 18;
    pub const NAME: u32 = 19;
    pub const INT8: u32 = 20;
    pub const INT2: u32 = 21;
    pub const INT4: u32 = 23;
    pub const REGPROC: u32 = 24;
    pub const TEXT: u32 = 25;
    pub const OID: u32 = 26;
    /// `int2vector` and `oidvector`: catalog arrays shown as `1 2`.
    pub const INT2VECTOR: u32 = 22;
    pub const OIDVECTOR: u32 = 30;
    pub const JSON: u32 = 114;
    pub const FLOAT4: u32 = 700;
    pub const FLOAT8: u32 = 701;
    pub const UNKNOWN: u32 = 705;
    pub const BPCHAR: u32 = 1042;
    pub const VARCHAR: u32 = 1043;
    pub const DATE: u32 = 1082;
    pub const TIME: u32 = 1083;
    pub const TIMESTAMP: u32 = 1114;
    pub const TIMESTAMPTZ: u32 = 1184;
    pub const INTERVAL: u32 = 1186;
    pub const NUMERIC: u32 = 1700;
    pub const REGCLASS: u32 = 2205;
    pub const REGTYPE: u32 = 2206;
    pub const RECORD: u32 = 2249;
    pub const REGNAMESPACE: u32 = 4089;
    pub const REGROLE: u32 = 4096;
    pub const JSONB: u32 = 3802;
}

pub use sluice_catalog::interval_mask;

/// Each element type's array type, and the names of both.
const TYPES: &[(u32, u32, &str, &str)] = &[
    // (oid, array oid, typname, format_type name)
    (oid::BOOL, 1000, "bool", "boolean"),
    (oid::BYTEA, 1001, "bytea", "bytea"),
    (oid::CHAR, 1002, "char", "\"char\""),
    (oid::NAME, 1003, "name", "name"),
    (oid::INT8, 1016, "int8", "bigint"),
    (oid::INT2, 1005, "int2", "smallint"),
    (oid::INT4, 1007, "int4", "integer"),
    (oid::REGPROC, 1008, "regproc", "regproc"),
    (oid::TEXT, 1009, "text", "text"),
    (oid::OID, 1028, "oid", "oid"),
    (oid::JSON, 199, "json", "json"),
    (oid::FLOAT4, 1021, "float4", "real"),
    (oid::FLOAT8, 1022, "float8", "double precision"),
    (oid::UNKNOWN, 0, "unknown", "unknown"),
    (oid::BPCHAR, 1014, "bpchar", "character"),
    (oid::VARCHAR, 1015, "varchar", "character varying"),
    (oid::DATE, 1182, "date", "date"),
    (oid::TIME, 1183, "time", "time without time zone"),
    (
        oid::TIMESTAMP,
        1115,
        "timestamp",
        "timestamp without time zone",
    ),
    (
        oid::TIMESTAMPTZ,
        1185,
        "timestamptz",
        "timestamp with time zone",
    ),
    (oid::INTERVAL, 1187, "interval", "interval"),
    (oid::NUMERIC, 1231, "numeric", "numeric"),
    (oid::REGCLASS, 2210, "regclass", "regclass"),
    (oid::REGTYPE, 2211, "regtype", "regtype"),
    (oid::RECORD, 2287, "record", "record"),
    (oid::REGNAMESPACE, 4090, "regnamespace", "regnamespace"),
    (oid::REGROLE, 4097, "regrole", "regrole"),
    (oid::JSONB, 3807, "jsonb", "jsonb"),
];

/// The pseudo-types and catalog vector types function signatures and
/// catalog columns name (no values of them are stored): oid and name.
pub const PSEUDO_TYPES: &[(u32, &str)] = &[
    (oid::INT2VECTOR, "int2vector"),
    (oid::OIDVECTOR, "oidvector"),
    (2275, "cstring"),
    (2276, "\"any\""),
    (2277, "anyarray"),
    (2278, "void"),
    (2279, "trigger"),
    (2281, "internal"),
    (2283, "anyelement"),
    (2776, "anynonarray"),
    (3838, "event_trigger"),
    (5077, "anycompatible"),
    (5078, "anycompatiblearray"),
    (5079, "anycompatiblenonarray"),
];

/// The oids of every type Sluice has: its value types, their arrays,
/// and the pseudo-types of [`PSEUDO_TYPES`].
pub fn known_type_oids() -> impl Iterator<Item = u32> {
    TYPES
        .iter()
        .flat_map(|t| [t.0, t.1])
        .filter(|&o| o != 0)
        .chain(PSEUDO_TYPES.iter().map(|t| t.0))
}

impl PgType {
    pub const fn plain(oid: u32) -> PgType {
        PgType { oid, typmod: -1 }
    }

    /// The type of a column with this field.
    pub fn of_field(field: &Field) -> PgType {
        if let Some(kind) = field.metadata().get(OID_ALIAS_KEY) {
            if let Some(t) = oid_alias(kind) {
                let cast = field.metadata().contains_key(OID_ALIAS_CAST_KEY);
                return PgType::plain(if cast { t } else { oid::OID });
            }
        }
        if let Some(declared) = field.metadata().get(SQL_TYPE_METADATA_KEY) {
            if let Some(t) = PgType::from_declared(declared, field.data_type()) {
                return t;
            }
        }
        PgType::of_data_type(field.data_type())
    }

    /// The type of values of an Arrow type with no more said of them.
    pub fn of_data_type(t: &DataType) -> PgType {
        let oid = match t {
            DataType::Null => oid::TEXT,
            DataType::Boolean => oid::BOOL,
            DataType::Int8 | DataType::Int16 | DataType::UInt8 => oid::INT2,
            DataType::Int32 | DataType::UInt16 => oid::INT4,
            DataType::Int64 | DataType::UInt32 | DataType::UInt64 => oid::INT8,
            DataType::Float16 | DataType::Float32 => oid::FLOAT4,
            DataType::Float64 => oid::FLOAT8,
            DataType::Decimal32(..)
            | DataType::Decimal64(..)
            | DataType::Decimal128(..)
            | DataType::Decimal256(..) => oid::NUMERIC,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => oid::TEXT,
            DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::FixedSizeBinary(_) => oid::BYTEA,
            DataType::Date32 | DataType::Date64 => oid::DATE,
            DataType::Time32(_) | DataType::Time64(_) => oid::TIME,
            DataType::Timestamp(_, None) => oid::TIMESTAMP,
            DataType::Timestamp(_, Some(_)) => oid::TIMESTAMPTZ,
            DataType::Interval(_) | DataType::Duration(_) => oid::INTERVAL,
            DataType::List(f)
            | DataType::LargeList(f)
            | DataType::ListView(f)
            | DataType::LargeListView(f)
            | DataType::FixedSizeList(f, _) => {
                let element = PgType::of_field(f);
                // An array of arrays is one array of more dimensions, of
                // the same type.
                if f.data_type().is_nested() && !matches!(f.data_type(), DataType::Struct(_)) {
                    return element;
                }
                return PgType::plain(array_of(element.oid).unwrap_or(1009));
            }
            DataType::Dictionary(_, value) => return PgType::of_data_type(value),
            DataType::Struct(_) => oid::RECORD,
            _ => oid::TEXT,
        };
        PgType::plain(oid)
    }

    /// The type a column declared as `declared` (a metadata value) has.
    fn from_declared(declared: &str, data_type: &DataType) -> Option<PgType> {
        let text = matches!(
            data_type,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        );
        let decimal = matches!(
            data_type,
            DataType::Decimal128(..) | DataType::Decimal256(..)
        );
        let (name, args) = match declared.split_once('(') {
            Some((name, rest)) => (name.trim(), Some(rest.trim_end_matches(')'))),
            None => (declared.trim(), None),
        };
        let numbers: Vec<i32> = args
            .map(|a| a.split(',').filter_map(|n| n.trim().parse().ok()).collect())
            .unwrap_or_default();
        // A declaration of another type than the values have (a cast's
        // input's, which DataFusion passes on) says nothing.
        match name {
            "jsonb" | "json" | "varchar" | "bpchar" | "name" | "char" if !text => return None,
            "numeric" if !decimal => return None,
            "timestamp" if !matches!(data_type, DataType::Timestamp(_, None)) => return None,
            "timestamptz" if !matches!(data_type, DataType::Timestamp(_, Some(_))) => return None,
            "interval" if !matches!(data_type, DataType::Interval(_)) => return None,
            _ => {}
        }
        let list = matches!(data_type, DataType::List(_));
        match name {
            "int2vector" | "oidvector" if !list => return None,
            _ => {}
        }
        Some(match (name, numbers.as_slice()) {
            ("int2vector", _) => PgType::plain(oid::INT2VECTOR),
            ("oidvector", _) => PgType::plain(oid::OIDVECTOR),
            ("jsonb", _) => PgType::plain(oid::JSONB),
            ("name", _) => PgType::plain(oid::NAME),
            ("char", _) => PgType::plain(oid::CHAR),
            ("json", _) => PgType::plain(oid::JSON),
            ("varchar", []) => PgType::plain(oid::VARCHAR),
            ("varchar", [n]) => PgType {
                oid: oid::VARCHAR,
                typmod: n + 4,
            },
            ("bpchar", []) => PgType::plain(oid::BPCHAR),
            ("bpchar", [n]) => PgType {
                oid: oid::BPCHAR,
                typmod: n + 4,
            },
            ("timestamp", [p]) => PgType {
                oid: oid::TIMESTAMP,
                typmod: *p,
            },
            ("timestamptz", [p]) => PgType {
                oid: oid::TIMESTAMPTZ,
                typmod: *p,
            },
            ("interval", [m]) => PgType {
                oid: oid::INTERVAL,
                typmod: *m,
            },
            ("numeric", []) => PgType::plain(oid::NUMERIC),
            ("numeric", [p, s]) => PgType {
                oid: oid::NUMERIC,
                typmod: ((p << 16) | (s & 0xffff)) + 4,
            },
            ("numeric", [p]) => PgType {
                oid: oid::NUMERIC,
                typmod: (p << 16) + 4,
            },
            _ => return (data_type.is_null()).then(|| PgType::plain(oid::TEXT)),
        })
    }

    /// `pg_type.typname`: `int4`, `varchar`, `_int4` for an array.
    pub fn type_name(&self) -> String {
        if let Some((_, _, name, _)) = TYPES.iter().find(|t| t.0 == self.oid) {
            return name.to_string();
        }
        if let Some((_, _, name, _)) = TYPES.iter().find(|t| t.1 == self.oid) {
            return format!("_{name}");
        }
        "unknown".into()
    }

    /// `format_type(oid, typmod)`: `integer`, `character varying(5)`,
    /// `numeric(12,3)`, `integer[]`.
    pub fn format(&self) -> String {
        let base = |oid: u32| TYPES.iter().find(|t| t.0 == oid).map(|t| t.3);
        if let Some(name) = base(self.oid) {
            return match (self.oid, self.typmod) {
                (oid::VARCHAR | oid::BPCHAR, m) if m >= 4 => format!("{name}({})", m - 4),
                (oid::TIMESTAMP, p) if p >= 0 => format!("timestamp({p}) without time zone"),
                (oid::TIMESTAMPTZ, p) if p >= 0 => format!("timestamp({p}) with time zone"),
                (oid::INTERVAL, m) if m >= 0 => sluice_catalog::interval_type_name(m),
                (oid::NUMERIC, m) if m >= 4 => {
                    let m = m - 4;
                    format!("numeric({},{})", m >> 16, m & 0xffff)
                }
                _ => name.to_string(),
            };
        }
        if let Some((oid, ..)) = TYPES.iter().find(|t| t.1 == self.oid) {
            return format!("{}[]", PgType::plain(*oid).format());
        }
        if let Some((_, name)) = PSEUDO_TYPES.iter().find(|t| t.0 == self.oid) {
            return name.to_string();
        }
        "unknown".into()
    }

    /// `varchar(n)`'s n.
    pub fn max_length(&self) -> Option<i32> {
        matches!(self.oid, oid::VARCHAR | oid::BPCHAR)
            .then_some(self.typmod - 4)
            .filter(|n| *n >= 0)
    }

    /// `numeric(p,s)`'s p and s.
    pub fn precision_scale(&self) -> Option<(i32, i32)> {
        (self.oid == oid::NUMERIC && self.typmod >= 4)
            .then(|| ((self.typmod - 4) >> 16, (self.typmod - 4) & 0xffff))
    }
}

/// The array type whose elements are `element`.
pub fn array_of(element: u32) -> Option<u32> {
    TYPES.iter().find(|t| t.0 == element).map(|t| t.1)
}

fn oid_alias(kind: &str) -> Option<u32> {
    Some(match kind {
        "oid" => oid::OID,
        "regclass" => oid::REGCLASS,
        "regtype" => oid::REGTYPE,
        "regproc" => oid::REGPROC,
        "regnamespace" => oid::REGNAMESPACE,
        "regrole" => oid::REGROLE,
        _ => return None,
    })
}

/// The metadata that marks a field as declared `declared`.
pub fn declared(declared: &str) -> HashMap<String, String> {
    [(SQL_TYPE_METADATA_KEY.to_string(), declared.to_string())].into()
}

/// A field of `data_type`, declared as `declared` (see the module header).
pub fn declared_field(name: &str, data_type: DataType, declared_as: &str) -> Field {
    Field::new(name, data_type, true).with_metadata(declared(declared_as))
}

/// What a `NUMERIC` without precision and scale holds here: 38 digits,
/// 10 of them after the point (see `SqlType::DEFAULT_NUMERIC`).
pub fn unconstrained_numeric() -> DataType {
    sluice_catalog::SqlType::DEFAULT_NUMERIC.to_arrow()
}

/// Whether values of this field are JSON text (`json` or `jsonb`).
pub fn is_json(field: &Field) -> bool {
    matches!(PgType::of_field(field).oid, oid::JSON | oid::JSONB)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn fields_have_postgres_types() {
        let f = |t: DataType| PgType::of_field(&Field::new("c", t, true));
        assert_eq!(f(DataType::Int32).oid, oid::INT4);
        assert_eq!(f(DataType::UInt64).oid, oid::INT8);
        assert_eq!(f(DataType::Decimal128(12, 3)), PgType::plain(oid::NUMERIC));
        let v = PgType::of_field(&declared_field("v", DataType::Utf8, "varchar(5)"));
        assert_eq!(
            v,
            PgType {
                oid: oid::VARCHAR,
                typmod: 9
            }
        );
        assert_eq!(v.format(), "character varying(5)");
        assert_eq!(v.max_length(), Some(5));
        let n = PgType::of_field(&declared_field(
            "n",
            DataType::Decimal128(12, 3),
            "numeric(12,3)",
        ));
        assert_eq!(n.typmod, 786439);
        assert_eq!(n.format(), "numeric(12,3)");
        assert_eq!(n.precision_scale(), Some((12, 3)));
        let j = PgType::of_field(&declared_field("j", DataType::Utf8, "jsonb"));
        assert_eq!(
            (j.oid, j.format(), j.type_name()),
            (oid::JSONB, "jsonb".into(), "jsonb".into())
        );
        let list = f(DataType::List(Arc::new(Field::new_list_field(
            DataType::Int32,
            true,
        ))));
        assert_eq!(
            (list.oid, list.format(), list.type_name()),
            (1007, "integer[]".into(), "_int4".into())
        );
    }
}
