//! Values kept to a type's typmod as PostgreSQL keeps them: a
//! `timestamp(p)` rounded to p digits of a second (half away from zero,
//! `AdjustTimestampForTypmod`), an interval cut to its fields and its
//! seconds rounded to its precision (`AdjustIntervalForTypmod`). Casts
//! (`query::pg_casts`) and every write to a column of such a type
//! (`ingest`) use these.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, IntervalMonthDayNanoType, TimeUnit, TimestampMicrosecondType};
use arrow::error::ArrowError;
use sluice_catalog::{interval_mask as m, SqlType};

use super::interval::Interval;

const US_PER_HOUR: i64 = 3_600_000_000;
const US_PER_MINUTE: i64 = 60_000_000;

/// `v` rounded to a multiple of `scale`, half away from zero.
fn round_half_away(v: i64, scale: i64) -> i64 {
    let offset = scale / 2;
    match v >= 0 {
        true => (v.saturating_add(offset) / scale) * scale,
        false => -((v.saturating_neg().saturating_add(offset) / scale) * scale),
    }
}

/// Timestamps rounded to `p` digits of a second (any unit; microseconds
/// are what they are computed in).
pub fn round_timestamps(input: &ArrayRef, p: u8) -> Result<ArrayRef, ArrowError> {
    let DataType::Timestamp(unit, zone) = input.data_type() else {
        return Ok(input.clone());
    };
    if p >= 6 {
        return Ok(input.clone());
    }
    let us_type = DataType::Timestamp(TimeUnit::Microsecond, zone.clone());
    let us = arrow::compute::cast(input, &us_type)?;
    let scale = 10i64.pow(6 - u32::from(p));
    let rounded: arrow::array::TimestampMicrosecondArray = us
        .as_primitive::<TimestampMicrosecondType>()
        .unary(|v| round_half_away(v, scale));
    let rounded: ArrayRef = Arc::new(rounded.with_timezone_opt(zone.clone()));
    match unit {
        TimeUnit::Microsecond => Ok(rounded),
        _ => arrow::compute::cast(&rounded, input.data_type()),
    }
}

/// One interval kept to a typmod's fields and precision.
pub fn interval_for_typmod(mut i: Interval, typmod: i32) -> Interval {
    let (range, precision) = (typmod >> 16, typmod & 0xFFFF);
    let day_time = |i: &mut Interval| {
        i.days = 0;
        i.micros = 0;
    };
    match range {
        m::YEAR => {
            i.months = (i.months / 12) * 12;
            day_time(&mut i);
        }
        m::MONTH => day_time(&mut i),
        r if r == m::YEAR | m::MONTH => day_time(&mut i),
        m::DAY => i.micros = 0,
        m::HOUR => i.micros = (i.micros / US_PER_HOUR) * US_PER_HOUR,
        m::MINUTE => i.micros = (i.micros / US_PER_MINUTE) * US_PER_MINUTE,
        r if r == m::DAY | m::HOUR => i.micros = (i.micros / US_PER_HOUR) * US_PER_HOUR,
        r if r == m::DAY | m::HOUR | m::MINUTE || r == m::HOUR | m::MINUTE => {
            i.micros = (i.micros / US_PER_MINUTE) * US_PER_MINUTE
        }
        _ => {}
    }
    if (0..6).contains(&precision) {
        i.micros = round_half_away(i.micros, 10i64.pow(6 - precision as u32));
    }
    i
}

/// Intervals kept to a typmod's fields and precision.
pub fn intervals_for_typmod(input: &ArrayRef, typmod: i32) -> ArrayRef {
    let Some(values) = input.as_primitive_opt::<IntervalMonthDayNanoType>() else {
        return input.clone();
    };
    let out: arrow::array::IntervalMonthDayNanoArray =
        values.unary(|v| interval_for_typmod(Interval::from_arrow(v), typmod).to_arrow());
    Arc::new(out)
}

/// A column's values as a column of type `ty` keeps them: rounded or cut
/// to its typmod; the values themselves for any other type.
pub fn for_column(values: &ArrayRef, ty: &SqlType) -> Result<ArrayRef, ArrowError> {
    let SqlType::WithTypmod { base, typmod } = ty else {
        return Ok(values.clone());
    };
    match base.as_ref() {
        SqlType::Timestamp | SqlType::TimestampTz => {
            round_timestamps(values, u8::try_from(*typmod).unwrap_or(6))
        }
        SqlType::Interval => Ok(intervals_for_typmod(values, *typmod)),
        _ => Ok(values.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_half_away_from_zero() {
        assert_eq!(round_half_away(1_500_000, 1_000_000), 2_000_000);
        assert_eq!(round_half_away(-1_500_000, 1_000_000), -2_000_000);
        assert_eq!(round_half_away(1_499_999, 1_000_000), 1_000_000);
    }

    #[test]
    fn intervals_keep_their_fields() {
        let i = Interval {
            months: 14,
            days: 3,
            micros: 2 * US_PER_HOUR + 3 * US_PER_MINUTE + 4_500_000,
        };
        let year = (m::YEAR << 16) | m::FULL_PRECISION;
        assert_eq!(interval_for_typmod(i, year).months, 12);
        let hour_to_minute = ((m::HOUR | m::MINUTE) << 16) | m::FULL_PRECISION;
        let cut = interval_for_typmod(i, hour_to_minute);
        assert_eq!(
            (cut.days, cut.micros),
            (3, 2 * US_PER_HOUR + 3 * US_PER_MINUTE)
        );
        let second_0 = m::FULL_RANGE << 16;
        assert_eq!(interval_for_typmod(i, second_0).micros % 1_000_000, 0);
    }
}
