//! `COPY ... FROM STDIN WITH (FORMAT binary)`: PostgreSQL's binary copy
//! format (what asyncpg's `copy_records_to_table` and pgx's `CopyFrom`
//! send). The reader splits the stream into tuples of fields; the stager
//! decodes each field by the type of the column it goes to: integers,
//! floats, booleans, dates and timestamps straight into Arrow builders,
//! text as it is, numeric and bytea through PostgreSQL's text form. Binary
//! rows pass the same validation, error places and atomicity as text COPY.
//!
//! The stream: an 11-byte signature, a 32-bit flags word, a header
//! extension (length + bytes); then tuples of a 16-bit field count and,
//! per field, a 32-bit length (-1 for NULL) and the value; a field count
//! of -1 ends the data.

use sluice_catalog::SqlType;

use super::error::{IngestError, RowPlace};

const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";
/// Days and microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
const PG_EPOCH_DAYS: i64 = 10_957;
const PG_EPOCH_US: i64 = PG_EPOCH_DAYS * 86_400_000_000;

/// Where the reader is in the stream.
#[derive(Debug, Default)]
pub struct BinaryCopyReader {
    pub header_done: bool,
    pub done: bool,
}

fn bad(tuple: u64, reason: impl Into<String>) -> IngestError {
    IngestError::BadFormat {
        place: RowPlace::Line(tuple),
        reason: reason.into(),
    }
}

impl BinaryCopyReader {
    /// Splits every complete tuple at the start of `buf` (tuples counted
    /// from `first_tuple`, 1-based) into its `fields` fields and hands each
    /// to `sink` (None for NULL) with its number; returns how many tuples
    /// and bytes were used. An incomplete tuple at the end is left for the
    /// next chunk.
    pub fn read(
        &mut self,
        buf: &[u8],
        field_count: usize,
        first_tuple: u64,
        mut sink: impl FnMut(&[Option<&[u8]>], u64) -> Result<(), IngestError>,
    ) -> Result<(u64, usize), IngestError> {
        let mut pos = 0;
        let mut tuples = 0u64;
        let mut fields: Vec<Option<&[u8]>> = Vec::with_capacity(field_count);
        if !self.header_done {
            if buf.len() < SIGNATURE.len() + 8 {
                return Ok((0, 0));
            }
            if &buf[..SIGNATURE.len()] != SIGNATURE {
                return Err(bad(0, "COPY file signature not recognized"));
            }
            let flags = be_u32(&buf[11..15]);
            if flags & (1 << 16) != 0 {
                return Err(bad(0, "COPY with OIDs is not supported"));
            }
            let ext = be_u32(&buf[15..19]) as usize;
            if buf.len() < 19 + ext {
                return Ok((0, 0));
            }
            pos = 19 + ext;
            self.header_done = true;
        }
        while !self.done {
            let tuple = first_tuple + tuples;
            let Some(count) = buf
                .get(pos..pos + 2)
                .map(|b| i16::from_be_bytes([b[0], b[1]]))
            else {
                break;
            };
            if count == -1 {
                self.done = true;
                pos += 2;
                break;
            }
            if count as usize != field_count {
                return Err(bad(
                    tuple,
                    format!("row field count is {count}, expected {field_count}"),
                ));
            }
            // Find the tuple's end before decoding, so a split tuple waits.
            let mut at = pos + 2;
            fields.clear();
            let mut complete = true;
            for _ in 0..field_count {
                let Some(len) = buf.get(at..at + 4).map(be_i32) else {
                    complete = false;
                    break;
                };
                at += 4;
                if len < 0 {
                    fields.push(None);
                    continue;
                }
                let len = len as usize;
                let Some(value) = buf.get(at..at + len) else {
                    complete = false;
                    break;
                };
                fields.push(Some(value));
                at += len;
            }
            if !complete {
                break;
            }
            sink(&fields, tuple)?;
            tuples += 1;
            pos = at;
        }
        Ok((tuples, pos))
    }
}

/// For types whose binary form is their text, the text read in place (or
/// why it is not text); None for other types.
pub(super) fn text_in_place<'a>(v: &'a [u8], ty: &SqlType) -> Option<Result<&'a str, String>> {
    match ty.storage() {
        SqlType::Text | SqlType::Varchar { .. } | SqlType::Char { .. } => Some(utf8(v)),
        // jsonb's binary form is a version byte (1) and the text; a client
        // that took the column for text sends the text alone (JSON text
        // never starts with byte 1).
        SqlType::Jsonb => Some(match v.split_first() {
            Some((1, rest)) => utf8(rest),
            _ => utf8(v),
        }),
        _ => None,
    }
}

/// A binary date as days from the Unix epoch (Arrow's Date32).
pub(super) fn unix_days(v: &[u8]) -> Result<i32, String> {
    let days = i32::from_be_bytes(fixed(v, "date")?) as i64 + PG_EPOCH_DAYS;
    chrono::DateTime::from_timestamp(days * 86_400, 0)
        .and_then(|_| i32::try_from(days).ok())
        .ok_or_else(|| "date out of range".to_string())
}

/// A binary timestamp as microseconds from the Unix epoch.
pub(super) fn unix_micros(v: &[u8]) -> Result<i64, String> {
    i64::from_be_bytes(fixed(v, "timestamp")?)
        .checked_add(PG_EPOCH_US)
        .filter(|us| chrono::DateTime::from_timestamp_micros(*us).is_some())
        .ok_or_else(|| "timestamp out of range".to_string())
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be_i32(b: &[u8]) -> i32 {
    i32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

pub(super) fn fixed<const N: usize>(v: &[u8], what: &str) -> Result<[u8; N], String> {
    v.try_into()
        .map_err(|_| format!("{what} field has {} bytes, expected {N}", v.len()))
}

/// PostgreSQL's text form of one value in PostgreSQL's binary form of a
/// type (a binary COPY field, or a parameter bound in binary), or why it
/// is not one.
pub fn field_text(v: &[u8], ty: &SqlType) -> Result<String, String> {
    let mut out = String::new();
    field_text_into(v, ty, &mut out)?;
    Ok(out)
}

/// [`field_text`], appended to `out`.
pub(super) fn field_text_into(v: &[u8], ty: &SqlType, out: &mut String) -> Result<(), String> {
    use std::fmt::Write;
    let _ = match ty {
        SqlType::WithTypmod { base, .. } => return field_text_into(v, base, out),
        SqlType::Boolean => {
            out.push(if fixed::<1>(v, "boolean")?[0] == 0 {
                'f'
            } else {
                't'
            });
            Ok(())
        }
        SqlType::SmallInt => write!(out, "{}", i16::from_be_bytes(fixed(v, "smallint")?)),
        SqlType::Int => write!(out, "{}", i32::from_be_bytes(fixed(v, "integer")?)),
        SqlType::BigInt => write!(out, "{}", i64::from_be_bytes(fixed(v, "bigint")?)),
        SqlType::Real => {
            out.push_str(&float_text(f32::from_be_bytes(fixed(v, "real")?) as f64));
            Ok(())
        }
        SqlType::Double => {
            out.push_str(&float_text(f64::from_be_bytes(fixed(v, "double")?)));
            Ok(())
        }
        SqlType::Numeric { .. } => {
            out.push_str(&numeric_text(v)?);
            Ok(())
        }
        SqlType::Text | SqlType::Varchar { .. } | SqlType::Char { .. } | SqlType::Jsonb => {
            if let Some(text) = text_in_place(v, ty) {
                out.push_str(text?);
            }
            Ok(())
        }
        SqlType::Bytea => {
            out.push_str("\\x");
            v.iter().try_for_each(|b| write!(out, "{b:02x}"))
        }
        SqlType::Date => {
            let days = unix_days(v)? as i64;
            let date =
                chrono::DateTime::from_timestamp(days * 86_400, 0).ok_or("date out of range")?;
            write!(out, "{}", date.format("%Y-%m-%d"))
        }
        SqlType::Interval => {
            // Microseconds, days, months.
            let v: [u8; 16] = fixed(v, "interval")?;
            let micros = i64::from_be_bytes([v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]]);
            let interval = crate::types::interval::Interval {
                micros,
                days: be_i32(&v[8..12]),
                months: be_i32(&v[12..16]),
            };
            crate::types::interval::write_interval(interval, out);
            Ok(())
        }
        SqlType::Time => {
            let us = i64::from_be_bytes(fixed(v, "time")?);
            if !(0..=86_400_000_000).contains(&us) {
                return Err("time out of range".into());
            }
            crate::types::datetime::write_clock(us, out);
            Ok(())
        }
        SqlType::Timestamp | SqlType::TimestampTz => {
            crate::types::datetime::write_timestamp(unix_micros(v)?, false, out);
            if matches!(ty, SqlType::TimestampTz) {
                out.push_str("+00:00");
            }
            Ok(())
        }
        SqlType::Array(element) => {
            array_text(v, element, out)?;
            Ok(())
        }
    };
    Ok(())
}

/// An array's binary form (dimensions, a has-nulls flag, the element
/// type's oid, each dimension's size and lower bound, then each element
/// as a length, -1 for NULL, and its binary form) as an array literal
/// (`{1,2,NULL}`), which the stager reads as text COPY's.
fn array_text(v: &[u8], element: &SqlType, out: &mut String) -> Result<(), String> {
    let word = |at: usize| {
        v.get(at..at + 4)
            .map(be_i32)
            .ok_or_else(|| "array field too short".to_string())
    };
    let dimensions = word(0)?;
    let mut at = 12;
    let count = match dimensions {
        0 => 0,
        1 => {
            at += 8;
            usize::try_from(word(12)?).map_err(|_| "negative array size".to_string())?
        }
        _ => return Err("arrays of more than one dimension are not supported".into()),
    };
    out.push('{');
    for k in 0..count {
        if k > 0 {
            out.push(',');
        }
        let len = word(at)?;
        at += 4;
        if len < 0 {
            out.push_str("NULL");
            continue;
        }
        let end = at + len as usize;
        let bytes = v.get(at..end).ok_or("array element past the field's end")?;
        at = end;
        let mut text = String::new();
        field_text_into(bytes, element, &mut text)?;
        crate::types::text::push_quoted_element(&text, out);
    }
    out.push('}');
    if at != v.len() {
        return Err("array field longer than its elements".into());
    }
    Ok(())
}

fn utf8(v: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(v).map_err(|_| "invalid UTF-8 in a text field".to_string())
}

fn float_text(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        format!("{x:?}")
    }
}

/// numeric's binary form: digit count, weight (of the first base-10000
/// digit), sign, display scale, then the base-10000 digits.
fn numeric_text(v: &[u8]) -> Result<String, String> {
    if v.len() < 8 {
        return Err("numeric field too short".into());
    }
    let word = |i: usize| i16::from_be_bytes([v[i], v[i + 1]]);
    let ndigits = word(0) as usize;
    let weight = word(2) as i64;
    let sign = u16::from_be_bytes([v[4], v[5]]);
    let dscale = word(6).max(0) as usize;
    if v.len() != 8 + 2 * ndigits {
        return Err("numeric field length does not match its digits".into());
    }
    match sign {
        0xC000 => return Ok("NaN".into()),
        0xD000 => return Ok("Infinity".into()),
        0xF000 => return Ok("-Infinity".into()),
        0x0000 | 0x4000 => {}
        _ => return Err("invalid numeric sign".into()),
    }
    let digits: Vec<i64> = (0..ndigits).map(|i| word(8 + 2 * i) as i64).collect();
    if digits.iter().any(|d| !(0..10_000).contains(d)) {
        return Err("invalid numeric digit".into());
    }
    // Integer part: digits with weight >= 0.
    let mut int = String::new();
    for w in (0..=weight.max(0)).rev() {
        let idx = weight - w;
        let d = if idx >= 0 && (idx as usize) < ndigits && weight >= 0 {
            digits[idx as usize]
        } else {
            0
        };
        if int.is_empty() {
            if d != 0 || w == 0 {
                int = d.to_string();
            }
        } else {
            int.push_str(&format!("{d:04}"));
        }
    }
    if int.is_empty() {
        int.push('0');
    }
    let mut frac = String::new();
    let mut idx = weight + 1;
    while frac.len() < dscale {
        let d = if idx >= 0 && (idx as usize) < ndigits {
            digits[idx as usize]
        } else {
            0
        };
        frac.push_str(&format!("{d:04}"));
        idx += 1;
    }
    frac.truncate(dscale);
    let mut s = String::new();
    if sign == 0x4000 {
        s.push('-');
    }
    s.push_str(&int);
    if dscale > 0 {
        s.push('.');
        s.push_str(&frac);
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric(ndigits: i16, weight: i16, sign: u16, dscale: i16, digits: &[i16]) -> Vec<u8> {
        let mut v = Vec::new();
        for w in [ndigits, weight] {
            v.extend_from_slice(&w.to_be_bytes());
        }
        v.extend_from_slice(&sign.to_be_bytes());
        v.extend_from_slice(&dscale.to_be_bytes());
        for d in digits {
            v.extend_from_slice(&d.to_be_bytes());
        }
        v
    }

    #[test]
    fn numerics_read_as_postgresql_prints_them() {
        // 12345.678 = [1, 2345, 6780] weight 1, dscale 3
        assert_eq!(
            numeric_text(&numeric(3, 1, 0, 3, &[1, 2345, 6780])).unwrap(),
            "12345.678"
        );
        assert_eq!(
            numeric_text(&numeric(1, -1, 0x4000, 2, &[5000])).unwrap(),
            "-0.50"
        );
        assert_eq!(numeric_text(&numeric(0, 0, 0, 0, &[])).unwrap(), "0");
        assert_eq!(
            numeric_text(&numeric(1, 2, 0, 0, &[7])).unwrap(),
            "700000000"
        );
        assert_eq!(
            numeric_text(&numeric(1, -1, 0, 6, &[12])).unwrap(),
            "0.001200"
        );
        assert_eq!(numeric_text(&numeric(0, 0, 0xC000, 0, &[])).unwrap(), "NaN");
    }

    #[test]
    fn tuples_split_across_chunks_wait_for_their_rest() {
        let mut data = SIGNATURE.to_vec();
        data.extend_from_slice(&0u32.to_be_bytes());
        data.extend_from_slice(&0u32.to_be_bytes());
        for (id, name) in [(1i64, Some("a")), (2, None)] {
            data.extend_from_slice(&2i16.to_be_bytes());
            data.extend_from_slice(&8i32.to_be_bytes());
            data.extend_from_slice(&id.to_be_bytes());
            match name {
                Some(n) => {
                    data.extend_from_slice(&(n.len() as i32).to_be_bytes());
                    data.extend_from_slice(n.as_bytes());
                }
                None => data.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        data.extend_from_slice(&(-1i16).to_be_bytes());
        for split in 1..data.len() {
            let mut r = BinaryCopyReader::default();
            let mut carry = data[..split].to_vec();
            let mut rows: Vec<Vec<Option<Vec<u8>>>> = Vec::new();
            let mut collect = |fields: &[Option<&[u8]>], _: u64| {
                rows.push(fields.iter().map(|f| f.map(<[u8]>::to_vec)).collect());
                Ok(())
            };
            let (got, used) = r.read(&carry, 2, 1, &mut collect).unwrap();
            carry.drain(..used);
            carry.extend_from_slice(&data[split..]);
            r.read(&carry, 2, 1 + got, &mut collect).unwrap();
            assert!(r.done, "split at {split}");
            assert_eq!(
                rows,
                vec![
                    vec![Some(1i64.to_be_bytes().to_vec()), Some(b"a".to_vec())],
                    vec![Some(2i64.to_be_bytes().to_vec()), None]
                ],
                "split at {split}"
            );
        }
    }
}
