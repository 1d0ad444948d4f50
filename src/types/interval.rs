//! Intervals as PostgreSQL reads, writes, compares and multiplies them.
//!
//! An interval is months, days and microseconds, kept apart because a
//! month and a day have no fixed length (Arrow's `IntervalMonthDayNano`
//! holds the same three, the last in nanoseconds). Two intervals compare
//! as PostgreSQL compares them: by one span with 30 days a month and 24
//! hours a day, so `INTERVAL '1 day' = INTERVAL '24 hours'`.

use std::fmt::Write;

use arrow::datatypes::IntervalMonthDayNano;

use super::datetime::{write_fraction, US_PER_DAY, US_PER_SEC};

/// Months, days and microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Interval {
    pub months: i32,
    pub days: i32,
    pub micros: i64,
}

const DAYS_PER_MONTH: i64 = 30;
const US_PER_HOUR: i64 = 3600 * US_PER_SEC;
const US_PER_MINUTE: i64 = 60 * US_PER_SEC;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntervalError {
    /// 22007
    #[error("invalid input syntax for type interval: \"{0}\"")]
    Syntax(String),
    /// 22008
    #[error("interval out of range")]
    OutOfRange,
}

impl IntervalError {
    pub fn sqlstate(&self) -> &'static str {
        match self {
            IntervalError::Syntax(_) => "22007",
            IntervalError::OutOfRange => "22008",
        }
    }
}

impl Interval {
    pub fn from_arrow(v: IntervalMonthDayNano) -> Interval {
        Interval {
            months: v.months,
            days: v.days,
            micros: v.nanoseconds.div_euclid(1000),
        }
    }

    pub fn to_arrow(self) -> IntervalMonthDayNano {
        IntervalMonthDayNano::new(self.months, self.days, self.micros.saturating_mul(1000))
    }

    /// The one span two intervals compare by (PostgreSQL's
    /// `interval_cmp_value`).
    pub fn span(self) -> i128 {
        (self.months as i128 * DAYS_PER_MONTH as i128 + self.days as i128) * US_PER_DAY as i128
            + self.micros as i128
    }

    pub fn checked_add(self, o: Interval) -> Option<Interval> {
        Some(Interval {
            months: self.months.checked_add(o.months)?,
            days: self.days.checked_add(o.days)?,
            micros: self.micros.checked_add(o.micros)?,
        })
    }

    pub fn checked_neg(self) -> Option<Interval> {
        Some(Interval {
            months: self.months.checked_neg()?,
            days: self.days.checked_neg()?,
            micros: self.micros.checked_neg()?,
        })
    }

    /// `interval * factor` (PostgreSQL's `interval_mul`): whole months and
    /// days stay so, their fractions cascade down into days and time.
    pub fn times(self, factor: f64) -> Result<Interval, IntervalError> {
        self.scale(|v| v * factor)
    }

    /// `interval / factor` (PostgreSQL's `interval_div`); the divisor is
    /// not zero.
    pub fn divided_by(self, factor: f64) -> Result<Interval, IntervalError> {
        self.scale(|v| v / factor)
    }

    fn scale(self, f: impl Fn(f64) -> f64) -> Result<Interval, IntervalError> {
        let month_f = f(self.months as f64);
        let day_f = f(self.days as f64);
        if !month_f.is_finite()
            || month_f.abs() > i32::MAX as f64
            || !day_f.is_finite()
            || day_f.abs() > i32::MAX as f64
        {
            return Err(IntervalError::OutOfRange);
        }
        let mut months = month_f.trunc() as i32;
        let _ = &mut months;
        let mut days = day_f.trunc() as i32;
        let month_remainder_days = tsround((month_f - months as f64) * DAYS_PER_MONTH as f64);
        let mut sec_remainder = tsround(
            (day_f - days as f64 + month_remainder_days - month_remainder_days.trunc()) * 86_400.0,
        );
        if sec_remainder.abs() >= 86_400.0 {
            days += (sec_remainder / 86_400.0).trunc() as i32;
            sec_remainder -= (sec_remainder / 86_400.0).trunc() * 86_400.0;
        }
        days = days
            .checked_add(month_remainder_days.trunc() as i32)
            .ok_or(IntervalError::OutOfRange)?;
        let time = (f(self.micros as f64) + sec_remainder * US_PER_SEC as f64).round_ties_even();
        if !time.is_finite() || time.abs() >= i64::MAX as f64 {
            return Err(IntervalError::OutOfRange);
        }
        Ok(Interval {
            months,
            days,
            micros: time as i64,
        })
    }

    /// Whole days out of the time part (`justify_hours`).
    pub fn justify_hours(self) -> Interval {
        let mut days = self.days as i64 + self.micros / US_PER_DAY;
        let mut micros = self.micros % US_PER_DAY;
        if days > 0 && micros < 0 {
            micros += US_PER_DAY;
            days -= 1;
        } else if days < 0 && micros > 0 {
            micros -= US_PER_DAY;
            days += 1;
        }
        Interval {
            months: self.months,
            days: days.clamp(i32::MIN as i64, i32::MAX as i64) as i32,
            micros,
        }
    }

    /// Whole months out of the days (`justify_days`).
    pub fn justify_days(self) -> Interval {
        let mut months = self.months + self.days / DAYS_PER_MONTH as i32;
        let mut days = self.days % DAYS_PER_MONTH as i32;
        if months > 0 && days < 0 {
            days += DAYS_PER_MONTH as i32;
            months -= 1;
        } else if months < 0 && days > 0 {
            days -= DAYS_PER_MONTH as i32;
            months += 1;
        }
        Interval {
            months,
            days,
            micros: self.micros,
        }
    }

    /// `justify_interval`: both, with the signs made to agree.
    pub fn justify(self) -> Interval {
        let mut months = self.months;
        let mut days = self.days as i64 + self.micros / US_PER_DAY;
        let mut micros = self.micros % US_PER_DAY;
        months += (days / DAYS_PER_MONTH) as i32;
        days %= DAYS_PER_MONTH;
        if months > 0 && (days < 0 || (days == 0 && micros < 0)) {
            days += DAYS_PER_MONTH;
            months -= 1;
        } else if months < 0 && (days > 0 || (days == 0 && micros > 0)) {
            days -= DAYS_PER_MONTH;
            months += 1;
        }
        if days > 0 && micros < 0 {
            micros += US_PER_DAY;
            days -= 1;
        } else if days < 0 && micros > 0 {
            micros -= US_PER_DAY;
            days += 1;
        }
        Interval {
            months,
            days: days as i32,
            micros,
        }
    }
}

/// Rounds to microseconds' worth of seconds, as PostgreSQL's `TSROUND`.
fn tsround(v: f64) -> f64 {
    (v * 1e6).round_ties_even() / 1e6
}

/// PostgreSQL's text of an interval (`IntervalStyle = postgres`):
/// `1 year 2 mons 3 days 04:05:06.5`, `-1 days +01:00:00`, `00:00:00`.
pub fn write_interval(v: Interval, out: &mut String) {
    let years = v.months / 12;
    let months = v.months % 12;
    let mut is_zero = true;
    let mut is_before = false;
    let mut part = |value: i64, unit: &str, out: &mut String| {
        if value == 0 {
            return;
        }
        let _ = write!(
            out,
            "{}{}{} {}{}",
            if is_zero { "" } else { " " },
            if is_before && value > 0 { "+" } else { "" },
            value,
            unit,
            if value != 1 { "s" } else { "" }
        );
        is_before = value < 0;
        is_zero = false;
    };
    part(years as i64, "year", out);
    part(months as i64, "mon", out);
    part(v.days as i64, "day", out);
    if is_zero || v.micros != 0 {
        let minus = v.micros < 0;
        let t = v.micros.unsigned_abs() as i64;
        let hours = t / US_PER_HOUR;
        let minutes = t / US_PER_MINUTE % 60;
        let seconds = t / US_PER_SEC % 60;
        let _ = write!(
            out,
            "{}{}{:02}:{:02}:{:02}",
            if is_zero { "" } else { " " },
            if minus {
                "-"
            } else if is_before {
                "+"
            } else {
                ""
            },
            hours,
            minutes,
            seconds
        );
        write_fraction(t % US_PER_SEC, out);
    }
}

pub fn interval_text(v: Interval) -> String {
    let mut s = String::new();
    write_interval(v, &mut s);
    s
}

/// Reads an interval as PostgreSQL does: `1 day`, `1 year 2 months`,
/// `3 days 04:05:06`, `1.5 hours`, `-1 hour`, `@ 1 day ago`, `01:30`,
/// `1-2` (a year and two months), ISO 8601's `P1Y2M3DT4H5M6S`, and a
/// bare number of seconds.
pub fn parse_interval(text: &str) -> Result<Interval, IntervalError> {
    let syntax = || IntervalError::Syntax(text.to_string());
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(syntax());
    }
    if let Some(iso) = trimmed.strip_prefix(['P', 'p']) {
        return parse_iso(iso).ok_or_else(syntax);
    }
    let mut acc = Accumulator::default();
    let lower = trimmed.to_ascii_lowercase();
    let mut tokens: Vec<&str> = lower
        .split_whitespace()
        .flat_map(split_number_unit)
        .collect();
    if tokens.first() == Some(&"@") {
        tokens.remove(0);
    }
    let ago = tokens.last() == Some(&"ago");
    if ago {
        tokens.pop();
    }
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i];
        if t.contains(':') {
            let (sign, clock) = match t.as_bytes()[0] {
                b'-' => (-1.0, &t[1..]),
                b'+' => (1.0, &t[1..]),
                _ => (1.0, t),
            };
            let us = parse_interval_clock(clock).ok_or_else(syntax)?;
            acc.clock += sign * us;
            i += 1;
            continue;
        }
        // `1-2`: years and months.
        if let Some((y, m)) = t.split_once('-').filter(|(y, _)| !y.is_empty()) {
            let (y, m): (i64, i64) = (
                y.parse().map_err(|_| syntax())?,
                m.parse().map_err(|_| syntax())?,
            );
            let sign = if y < 0 { -1 } else { 1 };
            acc.months = y
                .checked_mul(12)
                .and_then(|y| y.checked_add(sign * m))
                .and_then(|ym| acc.months.checked_add(ym))
                .ok_or(IntervalError::OutOfRange)?;
            i += 1;
            continue;
        }
        let _: f64 = t.parse().map_err(|_| syntax())?;
        if !t.bytes().any(|b| b.is_ascii_digit()) {
            return Err(syntax());
        }
        let (whole, frac) = whole_and_fraction(t).ok_or(IntervalError::OutOfRange)?;
        let u = match tokens.get(i + 1).and_then(|u| unit(u)) {
            Some(u) => {
                i += 2;
                u
            }
            None => {
                // A bare number is seconds, and only at the end.
                if i + 1 < tokens.len() {
                    return Err(syntax());
                }
                i += 1;
                Unit::Second
            }
        };
        acc.add(whole, frac, u).ok_or(IntervalError::OutOfRange)?;
    }
    let mut v = acc.finish().ok_or(IntervalError::OutOfRange)?;
    if ago {
        v = v.checked_neg().ok_or(IntervalError::OutOfRange)?;
    }
    Ok(v)
}

/// `10days` → `10`, `days`.
fn split_number_unit(t: &str) -> Vec<&str> {
    let split = t
        .char_indices()
        .find(|(i, c)| *i > 0 && c.is_ascii_alphabetic())
        .map(|(i, _)| i);
    match split {
        Some(i) if t[..i].bytes().last().is_some_and(|b| b.is_ascii_digit()) => {
            vec![&t[..i], &t[i..]]
        }
        _ => vec![t],
    }
}

/// `HH:MM[:SS[.f]]` or `MM:SS.f` as microseconds.
fn parse_interval_clock(t: &str) -> Option<f64> {
    let parts: Vec<&str> = t.split(':').collect();
    let num = |s: &str| -> Option<f64> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return None;
        }
        s.parse().ok()
    };
    match parts.as_slice() {
        [h, m] if !m.contains('.') => {
            Some(num(h)? * US_PER_HOUR as f64 + num(m)? * US_PER_MINUTE as f64)
        }
        [m, s] => Some(num(m)? * US_PER_MINUTE as f64 + num(s)? * US_PER_SEC as f64),
        [h, m, s] => Some(
            num(h)? * US_PER_HOUR as f64
                + num(m)? * US_PER_MINUTE as f64
                + num(s)? * US_PER_SEC as f64,
        ),
        _ => None,
    }
}

#[derive(Clone, Copy)]
enum Unit {
    Microsecond,
    Millisecond,
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
    Decade,
    Century,
    Millennium,
}

fn unit(word: &str) -> Option<Unit> {
    Some(match word {
        "microsecond" | "microseconds" | "us" | "usec" | "usecs" | "useconds" => Unit::Microsecond,
        "millisecond" | "milliseconds" | "ms" | "msec" | "msecs" | "mseconds" => Unit::Millisecond,
        "second" | "seconds" | "s" | "sec" | "secs" => Unit::Second,
        "minute" | "minutes" | "m" | "min" | "mins" => Unit::Minute,
        "hour" | "hours" | "h" | "hr" | "hrs" => Unit::Hour,
        "day" | "days" | "d" => Unit::Day,
        "week" | "weeks" | "w" => Unit::Week,
        "month" | "months" | "mon" | "mons" => Unit::Month,
        "year" | "years" | "y" | "yr" | "yrs" => Unit::Year,
        "decade" | "decades" => Unit::Decade,
        "century" | "centuries" | "c" => Unit::Century,
        "millennium" | "millennia" | "millenniums" => Unit::Millennium,
        _ => return None,
    })
}

/// Parts as they are read, each number's whole part and fraction apart
/// (the fraction read from its own digits, so `2.3` is 2 and .3, not
/// 2.3 - 2), fractions cascading down as PostgreSQL 15's `DecodeInterval`
/// does: a year's fraction to whole months (rounded), a month's to days
/// of 30 and on to microseconds, a week's to days, a day's to
/// microseconds. Every sum is checked (22008 past the range).
#[derive(Default)]
struct Accumulator {
    months: i64,
    days: i64,
    micros: i64,
    /// A clock part's microseconds (`01:02:03.5`), added at the end.
    clock: f64,
}

impl Accumulator {
    /// `frac * scale` microseconds, rounded (`AdjustFractMicroseconds`).
    fn fract_micros(&mut self, frac: f64, scale: f64) -> Option<()> {
        if frac == 0.0 {
            return Some(());
        }
        let v = frac * scale;
        let mut us = v.trunc();
        let rest = v - us;
        if rest > 0.5 {
            us += 1.0;
        } else if rest < -0.5 {
            us -= 1.0;
        }
        if us.abs() >= i64::MAX as f64 {
            return None;
        }
        self.micros = self.micros.checked_add(us as i64)?;
        Some(())
    }

    /// `frac * scale` days, the rest as microseconds (`AdjustFractDays`).
    fn fract_days(&mut self, frac: f64, scale: f64) -> Option<()> {
        if frac == 0.0 {
            return Some(());
        }
        let v = frac * scale;
        let days = v.trunc();
        self.days = self.days.checked_add(days as i64)?;
        self.fract_micros(v - days, US_PER_DAY as f64)
    }

    fn add_micros(&mut self, whole: i64, frac: f64, scale: i64) -> Option<()> {
        self.micros = self.micros.checked_add(whole.checked_mul(scale)?)?;
        self.fract_micros(frac, scale as f64)
    }

    fn add_years(&mut self, whole: i64, frac: f64, scale: i64) -> Option<()> {
        self.months = self.months.checked_add(whole.checked_mul(scale * 12)?)?;
        let extra = (frac * scale as f64 * 12.0).round_ties_even();
        self.months = self.months.checked_add(extra as i64)?;
        Some(())
    }

    fn add(&mut self, whole: i64, frac: f64, u: Unit) -> Option<()> {
        match u {
            Unit::Microsecond => self.add_micros(whole, frac, 1),
            Unit::Millisecond => self.add_micros(whole, frac, 1000),
            Unit::Second => self.add_micros(whole, frac, US_PER_SEC),
            Unit::Minute => self.add_micros(whole, frac, US_PER_MINUTE),
            Unit::Hour => self.add_micros(whole, frac, US_PER_HOUR),
            Unit::Day => {
                self.days = self.days.checked_add(whole)?;
                self.fract_micros(frac, US_PER_DAY as f64)
            }
            Unit::Week => {
                self.days = self.days.checked_add(whole.checked_mul(7)?)?;
                self.fract_days(frac, 7.0)
            }
            Unit::Month => {
                self.months = self.months.checked_add(whole)?;
                self.fract_days(frac, DAYS_PER_MONTH as f64)
            }
            Unit::Year => self.add_years(whole, frac, 1),
            Unit::Decade => self.add_years(whole, frac, 10),
            Unit::Century => self.add_years(whole, frac, 100),
            Unit::Millennium => self.add_years(whole, frac, 1000),
        }
    }

    /// The interval, or None past what it holds: months and days in 32
    /// bits, and microseconds that fit Arrow's nanoseconds (about 2.56
    /// million hours; PostgreSQL's microseconds reach a thousand times
    /// further).
    fn finish(self) -> Option<Interval> {
        if self.clock.abs() >= i64::MAX as f64 {
            return None;
        }
        let micros = self.micros.checked_add(self.clock.round() as i64)?;
        micros.checked_mul(1000)?;
        Some(Interval {
            months: i32::try_from(self.months).ok()?,
            days: i32::try_from(self.days).ok()?,
            micros,
        })
    }
}

/// A number's whole part and its fraction, both with its sign: `-1.2` is
/// (-1, -0.2), the fraction read from its own digits.
fn whole_and_fraction(t: &str) -> Option<(i64, f64)> {
    if t.contains(['e', 'E']) {
        let v: f64 = t.parse().ok()?;
        if !v.is_finite() || v.abs() >= i64::MAX as f64 {
            return None;
        }
        return Some((v.trunc() as i64, v - v.trunc()));
    }
    let negative = t.starts_with('-');
    let unsigned = t.trim_start_matches(['-', '+']);
    let (int, frac) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    if !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole: i64 = match int {
        "" => 0,
        i => i.parse().ok()?,
    };
    let fraction: f64 = match frac {
        "" => 0.0,
        f => format!("0.{f}").parse().ok()?,
    };
    Some(match negative {
        true => (-whole, -fraction),
        false => (whole, fraction),
    })
}

/// ISO 8601's `1Y2M3DT4H5M6S` (after the `P`).
fn parse_iso(text: &str) -> Option<Interval> {
    let mut acc = Accumulator::default();
    let mut in_time = false;
    let mut number = String::new();
    for c in text.chars() {
        match c {
            'T' | 't' => in_time = true,
            '0'..='9' | '.' | '-' => number.push(c),
            _ => {
                let (whole, frac) = whole_and_fraction(&number)?;
                number.clear();
                let u = match (c.to_ascii_uppercase(), in_time) {
                    ('Y', false) => Unit::Year,
                    ('M', false) => Unit::Month,
                    ('W', false) => Unit::Week,
                    ('D', false) => Unit::Day,
                    ('H', true) => Unit::Hour,
                    ('M', true) => Unit::Minute,
                    ('S', true) => Unit::Second,
                    _ => return None,
                };
                acc.add(whole, frac, u)?;
            }
        }
    }
    if !number.is_empty() {
        return None;
    }
    acc.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) -> String {
        interval_text(parse_interval(text).unwrap())
    }

    #[test]
    fn intervals_read_and_print_as_postgresql() {
        for (input, want) in [
            ("1 day", "1 day"),
            ("25 hours", "25:00:00"),
            ("90 minutes", "01:30:00"),
            ("1 month 2 days 03:04:05", "1 mon 2 days 03:04:05"),
            ("1.5 seconds", "00:00:01.5"),
            ("-1 hour", "-01:00:00"),
            ("1 year 2 months", "1 year 2 mons"),
            ("13 months", "1 year 1 mon"),
            ("0", "00:00:00"),
            ("1 week", "7 days"),
            ("1 day -1 hour", "1 day -01:00:00"),
            ("-1 day 1 hour", "-1 days +01:00:00"),
            ("@ 2 days ago", "-2 days"),
            ("1.5 months", "1 mon 15 days"),
            ("1.5 days", "1 day 12:00:00"),
            ("P1Y2M3DT4H5M6S", "1 year 2 mons 3 days 04:05:06"),
            ("1-2", "1 year 2 mons"),
            ("-1.2 year", "-1 years -2 mons"),
            ("2.3 month", "2 mons 9 days"),
            ("1.5 week", "10 days 12:00:00"),
            ("1.5 decades", "15 years"),
            ("0.7 day", "16:48:00"),
            ("10 mins", "00:10:00"),
            ("3600", "01:00:00"),
            ("2 days 01:30", "2 days 01:30:00"),
        ] {
            assert_eq!(round_trip(input), want, "{input}");
        }
        assert!(parse_interval("x").is_err());
        assert!(parse_interval("1 fortnight").is_err());
    }

    #[test]
    fn intervals_compare_by_one_span() {
        let p = |t: &str| parse_interval(t).unwrap();
        assert_eq!(p("1 day").span(), p("24 hours").span());
        assert_eq!(p("1 month").span(), p("30 days").span());
        assert!(p("1 hour").span() > p("59 minutes").span());
    }

    #[test]
    fn multiplying_cascades_fractions() {
        let p = |t: &str| parse_interval(t).unwrap();
        assert_eq!(
            interval_text(p("2 days 1 hour").times(2.0).unwrap()),
            "4 days 02:00:00"
        );
        assert_eq!(
            interval_text(p("1 hour").divided_by(2.0).unwrap()),
            "00:30:00"
        );
        assert_eq!(
            interval_text(p("1 month").times(1.5).unwrap()),
            "1 mon 15 days"
        );
        assert_eq!(interval_text(p("1 second").times(3.0).unwrap()), "00:00:03");
        let i = Interval {
            months: 0,
            days: 0,
            micros: 386 * US_PER_DAY + 56_362 * US_PER_SEC,
        };
        assert_eq!(interval_text(i.justify_hours()), "386 days 15:39:22");
        assert_eq!(
            interval_text(p("27 hours").justify_hours()),
            "1 day 03:00:00"
        );
        assert_eq!(interval_text(p("35 days").justify_days()), "1 mon 5 days");
        assert_eq!(
            interval_text(p("1 month -1 hour").justify()),
            "29 days 23:00:00"
        );
    }
}
