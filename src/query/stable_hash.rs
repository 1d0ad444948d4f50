//! `hash64(value [, seed])`: a 64-bit hash that is the same on every
//! machine and in every version, for splits and samples that must not
//! move. It is xxHash64 (the published algorithm, seed as given) of the
//! value's bytes: an integer of any width as its 8-byte little-endian
//! `bigint`, text as its UTF-8 bytes, `bytea` as itself, anything else as
//! its text. Several columns hash in turn, each hash the seed of the
//! next; a NULL hashes as no bytes. The result is a `bigint` (the 64 bits
//! as a signed number). `TABLESAMPLE HASH` uses the same hash.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use arrow::datatypes::{DataType, Field, Int64Type};
use datafusion::common::Result;
use datafusion::logical_expr::{ScalarUDF, Signature, TypeSignature, Volatility};
use twox_hash::XxHash64;

use super::udf::field_udf;

/// The bytes a value hashes as, per row (None for NULL).
fn value_bytes(column: &ArrayRef) -> Result<Vec<Option<Vec<u8>>>> {
    let n = column.len();
    let out = match column.data_type() {
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32 => {
            let wide = arrow::compute::cast(column, &DataType::Int64)?;
            let wide = wide.as_primitive::<Int64Type>();
            (0..n)
                .map(|i| (!wide.is_null(i)).then(|| wide.value(i).to_le_bytes().to_vec()))
                .collect()
        }
        DataType::UInt64 => {
            let c = column.as_primitive::<arrow::datatypes::UInt64Type>();
            (0..n)
                .map(|i| (!c.is_null(i)).then(|| c.value(i).to_le_bytes().to_vec()))
                .collect()
        }
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            let b = arrow::compute::cast(column, &DataType::Binary)?;
            b.as_binary::<i32>()
                .iter()
                .map(|v| v.map(<[u8]>::to_vec))
                .collect()
        }
        _ => {
            let text = arrow::compute::cast(column, &DataType::Utf8)?;
            text.as_string::<i32>()
                .iter()
                .map(|v| v.map(|v| v.as_bytes().to_vec()))
                .collect()
        }
    };
    Ok(out)
}

/// The hash of each row of `columns`, the first hashed with `seed`.
pub fn row_hashes(columns: &[ArrayRef], seed: u64, rows: usize) -> Result<Vec<u64>> {
    let mut hashes = vec![seed; rows];
    for column in columns {
        for (h, bytes) in hashes.iter_mut().zip(value_bytes(column)?) {
            *h = XxHash64::oneshot(*h, bytes.as_deref().unwrap_or(&[]));
        }
    }
    Ok(hashes)
}

/// Whether a row whose hash is `hash` is in a sample of `percent` (0 to
/// 100): its hash's place in a million is below the percentage's.
pub fn in_sample(hash: u64, percent: f64) -> bool {
    let threshold = (percent * 10_000.0).round() as u64;
    hash % 1_000_000 < threshold
}

fn hash64(args: &[ArrayRef]) -> Result<ArrayRef> {
    let value = &args[0];
    let rows = value.len();
    let seeds: Option<ArrayRef> = match args.get(1) {
        Some(s) => Some(arrow::compute::cast(s, &DataType::Int64)?),
        None => None,
    };
    let bytes = value_bytes(value)?;
    let out: Int64Array = (0..rows)
        .map(|i| {
            let seed = match &seeds {
                Some(s) if s.is_null(i) => return None,
                Some(s) => s.as_primitive::<Int64Type>().value(i) as u64,
                None => 0,
            };
            bytes[i]
                .as_deref()
                .map(|b| XxHash64::oneshot(seed, b) as i64)
        })
        .collect();
    Ok(Arc::new(out))
}

pub(crate) fn functions() -> Vec<ScalarUDF> {
    vec![field_udf(
        "hash64",
        Signature::one_of(
            vec![TypeSignature::Any(1), TypeSignature::Any(2)],
            Volatility::Immutable,
        ),
        Field::new("", DataType::Int64, true),
        hash64,
    )]
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, StringArray};

    #[test]
    fn xxhash64_of_the_value_bytes() {
        // The published test vectors of xxHash64: "" and "abc", seed 0.
        assert_eq!(XxHash64::oneshot(0, b""), 0xEF46DB3751D8E999);
        assert_eq!(XxHash64::oneshot(0, b"abc"), 0x44BC2CF5AD770999);
        let text: ArrayRef = Arc::new(StringArray::from(vec![Some("abc"), None]));
        let out = hash64(&[text]).unwrap();
        let out = out.as_primitive::<Int64Type>();
        assert_eq!(out.value(0), 0x44BC2CF5AD770999u64 as i64);
        assert!(out.is_null(1));
        // An int and a bigint of one value hash alike.
        let small: ArrayRef = Arc::new(Int32Array::from(vec![42]));
        let big: ArrayRef = Arc::new(Int64Array::from(vec![42]));
        assert_eq!(
            row_hashes(&[small], 7, 1).unwrap(),
            row_hashes(&[big], 7, 1).unwrap()
        );
    }

    #[test]
    fn a_sample_is_the_share_asked() {
        let keys: ArrayRef = Arc::new(Int64Array::from_iter_values(0..100_000));
        let kept = row_hashes(&[keys], 7, 100_000)
            .unwrap()
            .into_iter()
            .filter(|h| in_sample(*h, 10.0))
            .count();
        assert!((9_500..10_500).contains(&kept), "{kept}");
    }
}
