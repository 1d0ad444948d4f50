//! PostgreSQL's hash functions, bit for bit: `hashtext(text)` is
//! PostgreSQL's `hash_any` (Bob Jenkins' lookup3, as `src/common/hashfn.c`
//! has it) of the text's UTF-8 bytes, as an `integer`. A dataset split or
//! sample keyed by `hashtext(user_id)` then puts each key where
//! PostgreSQL would, and stays put as rows are added.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Int32Array};
use arrow::datatypes::{DataType, Field};
use datafusion::common::Result;
use datafusion::logical_expr::{ScalarUDF, Signature, Volatility};

use super::udf::field_udf;

fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

fn finish(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}

/// The little-endian word of up to 4 bytes, each shifted by its place.
fn word(bytes: &[u8]) -> u32 {
    bytes
        .iter()
        .enumerate()
        .fold(0u32, |w, (i, b)| w.wrapping_add((*b as u32) << (8 * i)))
}

/// PostgreSQL's `hash_bytes` (`hash_any`) on a little-endian machine.
pub fn hash_bytes(key: &[u8]) -> u32 {
    let start = 0x9e37_79b9u32
        .wrapping_add(key.len() as u32)
        .wrapping_add(3_923_095);
    let (mut a, mut b, mut c) = (start, start, start);
    let mut rest = key;
    while rest.len() >= 12 {
        a = a.wrapping_add(word(&rest[0..4]));
        b = b.wrapping_add(word(&rest[4..8]));
        c = c.wrapping_add(word(&rest[8..12]));
        mix(&mut a, &mut b, &mut c);
        rest = &rest[12..];
    }
    // The last bytes: c's low byte is left to the length it started with.
    let n = rest.len();
    if n > 8 {
        c = c.wrapping_add(word(&rest[8..]) << 8);
    }
    if n > 4 {
        b = b.wrapping_add(word(&rest[4..n.min(8)]));
    }
    if n > 0 {
        a = a.wrapping_add(word(&rest[..n.min(4)]));
    }
    finish(&mut a, &mut b, &mut c);
    c
}

fn hashtext(a: &[ArrayRef]) -> Result<ArrayRef> {
    let text = arrow::compute::cast(&a[0], &DataType::Utf8)?;
    let out: Int32Array = text
        .as_string::<i32>()
        .iter()
        .map(|v| v.map(|v| hash_bytes(v.as_bytes()) as i32))
        .collect();
    Ok(Arc::new(out))
}

pub(crate) fn functions() -> Vec<ScalarUDF> {
    vec![field_udf(
        "hashtext",
        Signature::string(1, Volatility::Immutable),
        Field::new("", DataType::Int32, true),
        hashtext,
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_as_postgresql() {
        // SELECT hashtext(...) in PostgreSQL 15.18: every length of tail
        // (0 to 11 bytes past whole 12-byte blocks), and UTF-8.
        for (text, postgres) in [
            ("", -1477818771),
            ("a", 1075015857),
            ("abc", -785388649),
            ("abcd", -393934804),
            ("abcdefgh", -1960928205),
            ("abcdefghi", -92131489),
            ("abcdefghijk", -1483803693),
            ("abcdefghijkl", -1586087212),
            ("héllo wörld, 12345678", 1235558626),
            ("user_42", -1453952089),
        ] {
            assert_eq!(hash_bytes(text.as_bytes()) as i32, postgres, "{text:?}");
        }
    }
}
