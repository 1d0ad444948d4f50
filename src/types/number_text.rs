//! Numbers read from text as PostgreSQL reads them (`float8in`,
//! `float4in`, `numeric_in`), for casts and for rows written as text
//! (INSERT literals, COPY): surrounding spaces allowed, `1e3` in every
//! numeric type, `NaN` and `Infinity` in floats; a value a type cannot
//! hold fails with 22003 instead of becoming infinity, zero or a wrapped
//! number.
//!
//! NUMERIC here is a 128-bit decimal of a fixed scale (DESIGN.md): `NaN`,
//! `Infinity` and values past 38 digits, which PostgreSQL's numeric holds,
//! fail (22P02 and 22003) rather than read as another number.

use arrow::array::{Float32Array, Float64Array};

/// Why a text is not a number of the type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NumberTextError {
    #[error("invalid input syntax for type {ty}: \"{text}\"")]
    Invalid { ty: &'static str, text: String },
    #[error("\"{text}\" is out of range for type {ty}")]
    OutOfRange { ty: &'static str, text: String },
    /// More digits before the point than NUMERIC(p, s) keeps.
    #[error("numeric field overflow")]
    NumericOverflow { precision: u8, scale: i8 },
    /// More digits than the 128-bit decimal of an unconstrained numeric.
    #[error("value overflows numeric format")]
    NumericFormatOverflow,
    #[error("invalid input syntax for type numeric: \"{0}\" (NUMERIC here is a 128-bit decimal without NaN or infinities; use double precision for them)")]
    NumericSpecial(String),
    #[error("value out of range: {0}")]
    FloatRange(&'static str),
}

impl NumberTextError {
    pub fn sqlstate(&self) -> &'static str {
        match self {
            NumberTextError::Invalid { .. } | NumberTextError::NumericSpecial(_) => "22P02",
            _ => "22003",
        }
    }
}

const DOUBLE: &str = "double precision";
const REAL: &str = "real";

/// Whether `t` (trimmed, sign removed) names an infinity or NaN, as
/// `strtod` reads them.
fn special_word(t: &str) -> bool {
    ["inf", "infinity", "nan"]
        .iter()
        .any(|w| t.eq_ignore_ascii_case(w))
}

/// Whether the mantissa of a number's text has a digit other than zero.
fn nonzero_mantissa(t: &str) -> bool {
    t.split(['e', 'E'])
        .next()
        .is_some_and(|m| m.bytes().any(|b| (b'1'..=b'9').contains(&b)))
}

fn unsigned(t: &str) -> &str {
    t.strip_prefix(['+', '-']).unwrap_or(t)
}

/// Rust reads forms `strtod` does not (`infinity` is shared; `1_0` is
/// not read by either); only digits, one point, an exponent and a sign
/// pass here besides the special words.
fn plain_number(t: &str) -> bool {
    let u = unsigned(t);
    let (mantissa, exponent) = match u.find(['e', 'E']) {
        Some(at) => (&u[..at], Some(&u[at + 1..])),
        None => (u, None),
    };
    let digits = mantissa.bytes().filter(u8::is_ascii_digit).count();
    let points = mantissa.bytes().filter(|&b| b == b'.').count();
    let mantissa_ok = digits > 0 && points <= 1 && digits + points == mantissa.len();
    let exponent_ok = exponent.is_none_or(|e| {
        let e = unsigned(e);
        !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit())
    });
    mantissa_ok && exponent_ok
}

/// `text` as a double precision value.
pub fn parse_float8(text: &str) -> Result<f64, NumberTextError> {
    parse_float(text, DOUBLE, |v: f64| v.is_infinite() || v == 0.0)
}

/// `text` as a real value.
pub fn parse_float4(text: &str) -> Result<f32, NumberTextError> {
    parse_float(text, REAL, |v: f32| v.is_infinite() || v == 0.0)
}

/// `text` as a float of type `ty`; `extreme` tells the values a number
/// out of range reads as (an infinity, or zero for a nonzero mantissa).
fn parse_float<F: std::str::FromStr + Copy>(
    text: &str,
    ty: &'static str,
    extreme: fn(F) -> bool,
) -> Result<F, NumberTextError> {
    let t = text.trim();
    let invalid = || NumberTextError::Invalid {
        ty,
        text: text.to_string(),
    };
    if special_word(unsigned(t)) {
        return t.parse::<F>().map_err(|_| invalid());
    }
    if !plain_number(t) {
        return Err(invalid());
    }
    let v = t.parse::<F>().map_err(|_| invalid())?;
    // Both extremes are out of range unless the text is a zero.
    if extreme(v) && nonzero_mantissa(t) {
        return Err(NumberTextError::OutOfRange {
            ty,
            text: text.to_string(),
        });
    }
    Ok(v)
}

/// What a value past an unconstrained numeric's digits fails with: the
/// declared NUMERIC(p, s) overflows its field, an unconstrained one the
/// 128-bit format itself.
pub fn unconstrained_overflow(e: NumberTextError) -> NumberTextError {
    match e {
        NumberTextError::NumericOverflow { .. } => NumberTextError::NumericFormatOverflow,
        other => other,
    }
}

/// `text` as NUMERIC(precision, scale): the unscaled value, rounded half
/// away from zero at `scale` digits after the point, as PostgreSQL
/// rounds a value into a column's typmod.
pub fn parse_numeric(text: &str, precision: u8, scale: i8) -> Result<i128, NumberTextError> {
    let t = text.trim();
    let invalid = || NumberTextError::Invalid {
        ty: "numeric",
        text: text.to_string(),
    };
    let u = unsigned(t);
    if special_word(u) {
        let word = match u.to_ascii_lowercase().as_str() {
            "nan" => "NaN".to_string(),
            _ if t.starts_with('-') => "-Infinity".to_string(),
            _ => "Infinity".to_string(),
        };
        return Err(NumberTextError::NumericSpecial(word));
    }
    if !plain_number(t) {
        return Err(invalid());
    }
    let negative = t.starts_with('-');
    let (mantissa, exponent) = match u.find(['e', 'E']) {
        Some(at) => (&u[..at], &u[at + 1..]),
        None => (u, "0"),
    };
    // PostgreSQL limits the exponent to about +-1000; past that no
    // 128-bit value is near.
    let exponent: i64 = exponent.parse().map_err(|_| invalid())?;
    let overflow = NumberTextError::NumericOverflow { precision, scale };
    if exponent.abs() > 100_000 {
        return match exponent > 0 && nonzero_mantissa(mantissa) {
            true => Err(overflow),
            false => Ok(0),
        };
    }
    let (whole, fraction) = match mantissa.find('.') {
        Some(at) => (&mantissa[..at], &mantissa[at + 1..]),
        None => (mantissa, ""),
    };
    // Digits without leading zeros, read twice rather than copied.
    let digits = || {
        whole
            .bytes()
            .chain(fraction.bytes())
            .map(|b| b - b'0')
            .skip_while(|&d| d == 0)
    };
    let count = digits().count();
    // value = digits * 10^(exponent - fraction digits); unscaled = value
    // * 10^scale.
    let shift = exponent - fraction.len() as i64 + i64::from(scale);
    let limit = 10i128.pow(u32::from(precision.min(38)));
    let mut unscaled: i128 = 0;
    let (kept, round_up) = if shift >= 0 {
        (count, false)
    } else {
        let drop = (-shift) as usize;
        match count.checked_sub(drop) {
            Some(kept) => (kept, digits().nth(kept).is_some_and(|d| d >= 5)),
            None => (0, false),
        }
    };
    for d in digits().take(kept) {
        unscaled = unscaled
            .checked_mul(10)
            .and_then(|v| v.checked_add(i128::from(d)))
            .ok_or(overflow.clone())?;
    }
    if shift > 0 {
        for _ in 0..shift {
            unscaled = unscaled.checked_mul(10).ok_or(overflow.clone())?;
        }
    }
    if round_up {
        unscaled += 1;
    }
    if unscaled >= limit {
        return Err(overflow);
    }
    Ok(if negative { -unscaled } else { unscaled })
}

/// Doubles as reals, failing where PostgreSQL's `float84` fails: a finite
/// value too large (overflow) or a nonzero one too small (underflow).
pub fn narrow_to_real(values: &Float64Array) -> Result<Float32Array, NumberTextError> {
    for v in values.iter().flatten() {
        let r = v as f32;
        if r.is_infinite() && v.is_finite() {
            return Err(NumberTextError::FloatRange("overflow"));
        }
        if r == 0.0 && v != 0.0 {
            return Err(NumberTextError::FloatRange("underflow"));
        }
    }
    Ok(values.unary::<_, arrow::datatypes::Float32Type>(|v| v as f32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_read_as_postgresql_reads_them() {
        assert_eq!(parse_float8(" 1e3 "), Ok(1000.0));
        assert_eq!(parse_float8("-Infinity"), Ok(f64::NEG_INFINITY));
        assert!(parse_float8("NaN").unwrap().is_nan());
        assert_eq!(parse_float8("4.9e-324"), Ok(4.9e-324));
        assert_eq!(parse_float8("10e400").unwrap_err().sqlstate(), "22003");
        assert_eq!(parse_float8("1e-400").unwrap_err().sqlstate(), "22003");
        assert_eq!(parse_float8("0e-400"), Ok(0.0));
        assert_eq!(parse_float8("1e").unwrap_err().sqlstate(), "22P02");
        assert_eq!(parse_float8("1_0").unwrap_err().sqlstate(), "22P02");
        assert_eq!(parse_float4("3.4e38"), Ok(3.4e38));
        assert_eq!(parse_float4("1e39").unwrap_err().sqlstate(), "22003");
    }

    #[test]
    fn numerics_round_half_away_from_zero_and_fail_past_their_digits() {
        assert_eq!(parse_numeric("1e3", 38, 10), Ok(1000 * 10i128.pow(10)));
        assert_eq!(parse_numeric("-1.25", 10, 1), Ok(-13));
        assert_eq!(parse_numeric("1.249", 10, 2), Ok(125));
        assert_eq!(parse_numeric(".5e-1", 10, 2), Ok(5));
        assert_eq!(parse_numeric("0.0049", 10, 2), Ok(0));
        assert_eq!(parse_numeric("9e27", 38, 10), Ok(9 * 10i128.pow(37)));
        assert_eq!(
            parse_numeric("1e28", 38, 10).unwrap_err().sqlstate(),
            "22003"
        );
        assert_eq!(
            parse_numeric("123.4", 4, 2).unwrap_err().sqlstate(),
            "22003"
        );
        assert_eq!(
            parse_numeric("NaN", 38, 10).unwrap_err().sqlstate(),
            "22P02"
        );
        assert_eq!(
            unconstrained_overflow(parse_numeric("1e28", 38, 10).unwrap_err()).to_string(),
            "value overflows numeric format"
        );
        assert_eq!(
            parse_numeric("1e400", 38, 10).unwrap_err().sqlstate(),
            "22003"
        );
        assert_eq!(parse_numeric("1e-400", 38, 10), Ok(0));
        assert_eq!(
            parse_numeric("abc", 38, 10).unwrap_err().sqlstate(),
            "22P02"
        );
    }

    #[test]
    fn doubles_narrow_to_reals_only_where_they_fit() {
        let ok = Float64Array::from(vec![Some(1.5), None, Some(f64::INFINITY)]);
        assert_eq!(narrow_to_real(&ok).unwrap().value(0), 1.5);
        assert!(narrow_to_real(&Float64Array::from(vec![2e40])).is_err());
        assert!(narrow_to_real(&Float64Array::from(vec![1e-50])).is_err());
    }
}
