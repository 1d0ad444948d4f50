//! Dates, timestamps and times as PostgreSQL reads and writes them.
//!
//! Values are Arrow's: a date is days since 1970-01-01 (`Date32`), a
//! timestamp microseconds since 1970-01-01 00:00 (`Timestamp(µs)`, in UTC
//! for `timestamptz`), a time microseconds since midnight. As in
//! PostgreSQL, `infinity` and `-infinity` are the largest and smallest
//! values of the type.
//!
//! Input takes what PostgreSQL's takes with `DateStyle = ISO, MDY`:
//! `2026-01-05`, `2026-01-05 10:11:12.5`, a `T` between date and time, a
//! zone (`Z`, `UTC`, `+02`, `-07:30`), `BC`, month names (`Jan 5 2026`,
//! `5 January 2026`), `01/05/2026`, `20260105`, `24:00:00` (the next
//! day's midnight), and `epoch`, `infinity`, `-infinity`, `now`, `today`,
//! `tomorrow`, `yesterday`. A zone given to a timestamp without time zone
//! is ignored, as PostgreSQL ignores it. Output is PostgreSQL's ISO form:
//! `2026-01-05 10:11:12.5`, `+00` after a timestamptz (the server's zone
//! is UTC), ` BC` after years before 1.

use std::fmt::Write;

pub const US_PER_SEC: i64 = 1_000_000;
pub const US_PER_DAY: i64 = 86_400 * US_PER_SEC;

/// `infinity` and `-infinity` of a timestamp (PostgreSQL's own).
pub const TIMESTAMP_INFINITY: i64 = i64::MAX;
pub const TIMESTAMP_NEG_INFINITY: i64 = i64::MIN;
/// `infinity` and `-infinity` of a date.
pub const DATE_INFINITY: i32 = i32::MAX;
pub const DATE_NEG_INFINITY: i32 = i32::MIN;

/// Why a text is not a date, time or timestamp.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DateTimeError {
    /// 22007
    #[error("invalid input syntax for type {ty}: \"{text}\"")]
    Syntax { ty: &'static str, text: String },
    /// 22008
    #[error("date/time field value out of range: \"{text}\"")]
    FieldOutOfRange { text: String },
    /// 22008
    #[error("{ty} out of range: \"{text}\"")]
    OutOfRange { ty: &'static str, text: String },
}

impl DateTimeError {
    pub fn sqlstate(&self) -> &'static str {
        match self {
            DateTimeError::Syntax { .. } => "22007",
            _ => "22008",
        }
    }
}

/// Year, month, day of a day number (days since 1970-01-01), proleptic
/// Gregorian with a year 0 (1 BC) (Howard Hinnant's algorithm).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m as u32, d as u32)
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let (m, d) = (m as i64, d as i64);
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

pub fn is_leap(y: i64) -> bool {
    y.rem_euclid(4) == 0 && (y.rem_euclid(100) != 0 || y.rem_euclid(400) == 0)
}

pub fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if is_leap(y) => 29,
        _ => 28,
    }
}

/// The earliest date PostgreSQL takes: 4714-11-24 BC (Julian day 0).
const MIN_DAYS: i64 = -2_440_588;
/// The latest timestamp's day PostgreSQL takes: 294276-12-31.
const MAX_DAYS: i64 = 106_751_991 - 1;

/// Whether a timestamp (microseconds since 1970) is one PostgreSQL
/// holds: 4714-11-24 BC to the end of 294276 AD.
pub fn timestamp_in_range(us: i64) -> bool {
    (MIN_DAYS * US_PER_DAY..(MAX_DAYS + 1) * US_PER_DAY).contains(&us)
}

/// A timestamp plus months, days and microseconds, as PostgreSQL's
/// `timestamp_pl_interval`: months first (keeping the day of the month,
/// or the month's last day), then days, then time. None when the result
/// leaves PostgreSQL's range. Infinities stay as they are.
pub fn add_interval(us: i64, months: i32, days: i32, micros: i64) -> Option<i64> {
    if us == TIMESTAMP_INFINITY || us == TIMESTAMP_NEG_INFINITY {
        return Some(us);
    }
    let mut day = us.div_euclid(US_PER_DAY);
    let time = us.rem_euclid(US_PER_DAY);
    if months != 0 {
        let (y, m, d) = civil_from_days(day);
        let total = y * 12 + (m as i64 - 1) + months as i64;
        let (y, m) = (total.div_euclid(12), total.rem_euclid(12) as u32 + 1);
        day = days_from_civil(y, m, d.min(days_in_month(y, m)));
    }
    day = day.checked_add(days as i64)?;
    let out = day
        .checked_mul(US_PER_DAY)?
        .checked_add(time)?
        .checked_add(micros)?;
    timestamp_in_range(out).then_some(out)
}

/// The parts of a date and time read from text.
#[derive(Debug, Default, Clone, Copy)]
struct Fields {
    year: Option<i64>,
    month: Option<u32>,
    day: Option<u32>,
    /// Microseconds since midnight.
    time: Option<i64>,
    /// The zone's offset east of UTC, in seconds.
    zone: Option<i64>,
    bc: bool,
    pm: Option<bool>,
}

enum Special {
    Epoch,
    Infinity,
    NegInfinity,
    Now,
    Today,
    Tomorrow,
    Yesterday,
}

fn special(text: &str) -> Option<Special> {
    Some(match text.to_ascii_lowercase().as_str() {
        "epoch" => Special::Epoch,
        "infinity" | "+infinity" => Special::Infinity,
        "-infinity" => Special::NegInfinity,
        "now" => Special::Now,
        "today" => Special::Today,
        "tomorrow" => Special::Tomorrow,
        "yesterday" => Special::Yesterday,
        _ => return None,
    })
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

const WEEKDAYS: [&str; 7] = [
    "sunday",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
];

fn month_of(word: &str) -> Option<u32> {
    if word.len() < 3 {
        return None;
    }
    MONTHS
        .iter()
        .position(|m| m.starts_with(word) || (word == "sept" && *m == "september"))
        .map(|i| i as u32 + 1)
}

fn is_weekday(word: &str) -> bool {
    word.len() >= 3 && WEEKDAYS.iter().any(|d| d.starts_with(word))
}

/// `HH:MM[:SS[.ffffff]]` to microseconds; hours may be 24 only at 24:00:00.
fn parse_clock(text: &str) -> Option<i64> {
    let mut parts = text.split(':');
    let h: i64 = digits(parts.next()?)?;
    let m: i64 = digits(parts.next()?)?;
    let (s, frac) = match parts.next() {
        Some(sec) => match sec.split_once('.') {
            Some((s, f)) => (digits(s)?, fraction_us(f)?),
            None => (digits(sec)?, 0),
        },
        None => (0, 0),
    };
    if parts.next().is_some() {
        return None;
    }
    Some((h * 3600 + m * 60 + s) * US_PER_SEC + frac)
}

fn clock_in_range(us: i64) -> bool {
    us <= US_PER_DAY
}

fn clock_fields_ok(text: &str) -> bool {
    let mut parts = text.split(':');
    let h: i64 = parts.next().and_then(digits).unwrap_or(99);
    let m: i64 = parts.next().and_then(digits).unwrap_or(99);
    let s: i64 = parts
        .next()
        .map(|s| s.split('.').next().and_then(digits).unwrap_or(99))
        .unwrap_or(0);
    h <= 24 && m <= 59 && s <= 60
}

fn digits(s: &str) -> Option<i64> {
    if s.is_empty() || s.len() > 18 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Digits after a decimal point as microseconds, rounded half up at the
/// sixth digit as PostgreSQL rounds.
fn fraction_us(f: &str) -> Option<i64> {
    if f.is_empty() {
        return Some(0);
    }
    if !f.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut us = 0i64;
    for (i, b) in f.bytes().take(6).enumerate() {
        us += (b - b'0') as i64 * 10i64.pow(5 - i as u32);
    }
    if f.len() > 6 && f.as_bytes()[6] >= b'5' {
        us += 1;
    }
    Some(us)
}

/// A zone: `Z`, `UTC`, `GMT`, `+HH`, `+HHMM`, `+HH:MM`, `+HH:MM:SS`, or
/// the same after `-`; seconds east of UTC.
fn parse_zone(text: &str) -> Option<i64> {
    let lower = text.to_ascii_lowercase();
    if matches!(lower.as_str(), "z" | "utc" | "gmt" | "zulu" | "ut") {
        return Some(0);
    }
    let (sign, rest) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => return None,
    };
    let secs = if rest.contains(':') {
        let mut parts = rest.split(':');
        let h = digits(parts.next()?)?;
        let m = digits(parts.next()?)?;
        let s = parts.next().map(digits).unwrap_or(Some(0))?;
        h * 3600 + m * 60 + s
    } else {
        match rest.len() {
            1 | 2 => digits(rest)? * 3600,
            4 => digits(&rest[..2])? * 3600 + digits(&rest[2..])? * 60,
            6 => digits(&rest[..2])? * 3600 + digits(&rest[2..4])? * 60 + digits(&rest[4..])?,
            _ => return None,
        }
    };
    (secs <= 15 * 3600 + 59 * 60 + 59).then_some(sign * secs)
}

/// Reads the fields of a date and time. `Err(true)`: a field is out of
/// range; `Err(false)`: not a date or time at all.
fn read_fields(text: &str) -> Result<Fields, bool> {
    let mut f = Fields::default();
    // Bare numbers not yet placed (`Jan 5 2026`, `5 Jan 2026`).
    let mut loose: Vec<&str> = Vec::new();
    let mut tokens: Vec<&str> = Vec::new();
    for t in text.split(|c: char| c.is_whitespace() || c == ',') {
        if t.is_empty() {
            continue;
        }
        // ISO's `T` between a date and a time.
        if let Some(p) = t.find(['T', 't']) {
            let (d, rest) = t.split_at(p);
            if !d.is_empty()
                && d.as_bytes()[0].is_ascii_digit()
                && rest.len() > 1
                && rest.as_bytes()[1].is_ascii_digit()
            {
                tokens.push(d);
                tokens.push(&rest[1..]);
                continue;
            }
        }
        tokens.push(t);
    }
    for t in tokens {
        let lower = t.to_ascii_lowercase();
        let first = t.as_bytes()[0];
        if t.contains(':') && (first.is_ascii_digit()) {
            // A time, maybe with its zone stuck on (`10:00:00+02`, `10:00Z`).
            let end = t[1..]
                .find(['+', '-', 'z', 'Z'])
                .map(|i| i + 1)
                .unwrap_or(t.len());
            let (clock, zone) = t.split_at(end);
            if f.time.is_some() {
                return Err(false);
            }
            let us = parse_clock(clock).ok_or(false)?;
            if !clock_fields_ok(clock) || !clock_in_range(us) {
                return Err(true);
            }
            f.time = Some(us);
            if !zone.is_empty() {
                f.zone = Some(parse_zone(zone).ok_or(false)?);
            }
        } else if (first == b'+' || first == b'-') && f.time.is_some() && f.zone.is_none() {
            f.zone = Some(parse_zone(t).ok_or(false)?);
        } else if first.is_ascii_digit() && t.contains(['-', '/', '.']) {
            if f.year.is_some() || f.month.is_some() {
                return Err(false);
            }
            let parts: Vec<&str> = t.split(['-', '/', '.']).collect();
            if parts.len() != 3 {
                return Err(false);
            }
            let (y, m, d) = if parts[0].len() >= 3 {
                (parts[0], parts[1], parts[2])
            } else if let Some(m) = month_of(&parts[1].to_ascii_lowercase()) {
                // `05-Jan-2026`
                f.month = Some(m);
                (parts[2], "", parts[0])
            } else {
                // DateStyle MDY: `01/05/2026`.
                (parts[2], parts[0], parts[1])
            };
            f.year = Some(year_of(y).ok_or(false)?);
            if f.month.is_none() {
                f.month = Some(digits(m).ok_or(false)? as u32);
            }
            f.day = Some(digits(d).ok_or(false)? as u32);
        } else if first.is_ascii_digit() {
            if t.len() == 8 && f.year.is_none() && loose.is_empty() {
                f.year = Some(digits(&t[..4]).ok_or(false)?);
                f.month = Some(digits(&t[4..6]).ok_or(false)? as u32);
                f.day = Some(digits(&t[6..]).ok_or(false)? as u32);
            } else {
                digits(t).ok_or(false)?;
                loose.push(t);
            }
        } else if let Some(m) = month_of(&lower) {
            if f.month.is_some() {
                return Err(false);
            }
            f.month = Some(m);
        } else if lower == "bc" {
            f.bc = true;
        } else if lower == "ad" {
        } else if lower == "am" || lower == "a.m." {
            f.pm = Some(false);
        } else if lower == "pm" || lower == "p.m." {
            f.pm = Some(true);
        } else if is_weekday(&lower) {
        } else if let Some(z) = parse_zone(t) {
            f.zone = Some(z);
        } else {
            return Err(false);
        }
    }
    // Place the bare numbers: a day and a year around a month name.
    for t in loose {
        let v = digits(t).ok_or(false)?;
        if f.month.is_some() && f.day.is_none() && t.len() <= 2 {
            f.day = Some(v as u32);
        } else if f.year.is_none() {
            f.year = Some(year_of(t).ok_or(false)?);
        } else {
            return Err(false);
        }
    }
    if let Some(pm) = f.pm {
        let t = f.time.ok_or(false)?;
        let hour = t / (3600 * US_PER_SEC);
        if !(1..=12).contains(&hour) {
            return Err(true);
        }
        let base = t - hour * 3600 * US_PER_SEC;
        f.time = Some(base + ((hour % 12) + if pm { 12 } else { 0 }) * 3600 * US_PER_SEC);
    }
    Ok(f)
}

fn year_of(text: &str) -> Option<i64> {
    let y = digits(text)?;
    // Two-digit years as PostgreSQL reads them: 70-99 are 19xx, else 20xx.
    Some(if text.len() == 2 {
        if y >= 70 {
            1900 + y
        } else {
            2000 + y
        }
    } else {
        y
    })
}

/// The day number of the date fields, checked.
fn day_number(f: &Fields) -> Result<i64, bool> {
    let (Some(y), Some(m), Some(d)) = (f.year, f.month, f.day) else {
        return Err(false);
    };
    if y == 0 && f.bc {
        return Err(true);
    }
    let y = if f.bc { 1 - y } else { y };
    if y == 0 || !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) {
        return Err(true);
    }
    Ok(days_from_civil(y, m, d))
}

/// A timestamp's microseconds since 1970-01-01 (UTC for `with_zone`).
pub fn parse_timestamp(text: &str, with_zone: bool) -> Result<i64, DateTimeError> {
    let ty = if with_zone {
        "timestamp with time zone"
    } else {
        "timestamp"
    };
    let trimmed = text.trim();
    if let Some(s) = special(trimmed) {
        let today = now_us().div_euclid(US_PER_DAY) * US_PER_DAY;
        return Ok(match s {
            Special::Epoch => 0,
            Special::Infinity => TIMESTAMP_INFINITY,
            Special::NegInfinity => TIMESTAMP_NEG_INFINITY,
            Special::Now => now_us(),
            Special::Today => today,
            Special::Tomorrow => today + US_PER_DAY,
            Special::Yesterday => today - US_PER_DAY,
        });
    }
    let syntax = || DateTimeError::Syntax {
        ty,
        text: text.to_string(),
    };
    let range = || DateTimeError::FieldOutOfRange {
        text: text.to_string(),
    };
    let f = read_fields(trimmed).map_err(|r| if r { range() } else { syntax() })?;
    let days = day_number(&f).map_err(|r| if r { range() } else { syntax() })?;
    let mut us = days * US_PER_DAY + f.time.unwrap_or(0);
    if with_zone {
        us -= f.zone.unwrap_or(0) * US_PER_SEC;
    }
    if !timestamp_in_range(us) {
        return Err(DateTimeError::OutOfRange {
            ty: "timestamp",
            text: text.to_string(),
        });
    }
    Ok(us)
}

/// A date's days since 1970-01-01.
pub fn parse_date(text: &str) -> Result<i32, DateTimeError> {
    let trimmed = text.trim();
    if let Some(s) = special(trimmed) {
        let today = now_us().div_euclid(US_PER_DAY) as i32;
        return Ok(match s {
            Special::Epoch => 0,
            Special::Infinity => DATE_INFINITY,
            Special::NegInfinity => DATE_NEG_INFINITY,
            Special::Now | Special::Today => today,
            Special::Tomorrow => today + 1,
            Special::Yesterday => today - 1,
        });
    }
    let syntax = || DateTimeError::Syntax {
        ty: "date",
        text: text.to_string(),
    };
    let range = || DateTimeError::FieldOutOfRange {
        text: text.to_string(),
    };
    let f = read_fields(trimmed).map_err(|r| if r { range() } else { syntax() })?;
    let days = day_number(&f).map_err(|r| if r { range() } else { syntax() })?;
    if !(MIN_DAYS..=MAX_DAYS).contains(&days) {
        return Err(DateTimeError::OutOfRange {
            ty: "date",
            text: text.to_string(),
        });
    }
    Ok(days as i32)
}

/// A time of day's microseconds since midnight.
pub fn parse_time(text: &str) -> Result<i64, DateTimeError> {
    let syntax = || DateTimeError::Syntax {
        ty: "time without time zone",
        text: text.to_string(),
    };
    let trimmed = text.trim();
    if trimmed.eq_ignore_ascii_case("allballs") {
        return Ok(0);
    }
    let f = read_fields(trimmed).map_err(|r| match r {
        true => DateTimeError::FieldOutOfRange {
            text: text.to_string(),
        },
        false => syntax(),
    })?;
    f.time.ok_or_else(syntax)
}

/// PostgreSQL's text of a date.
pub fn write_date(days: i32, out: &mut String) {
    match days {
        DATE_INFINITY => out.push_str("infinity"),
        DATE_NEG_INFINITY => out.push_str("-infinity"),
        _ => {
            let (y, m, d) = civil_from_days(days as i64);
            let (year, bc) = if y <= 0 { (1 - y, true) } else { (y, false) };
            let _ = write!(out, "{year:04}-{m:02}-{d:02}");
            if bc {
                out.push_str(" BC");
            }
        }
    }
}

pub fn date_text(days: i32) -> String {
    let mut s = String::with_capacity(10);
    write_date(days, &mut s);
    s
}

/// `HH:MM:SS` and the fraction without trailing zeros.
pub fn write_clock(us_of_day: i64, out: &mut String) {
    let secs = us_of_day / US_PER_SEC;
    let fraction = us_of_day % US_PER_SEC;
    let _ = write!(
        out,
        "{:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    );
    write_fraction(fraction, out);
}

/// `.ffffff` without trailing zeros; nothing for zero.
pub fn write_fraction(us: i64, out: &mut String) {
    if us == 0 {
        return;
    }
    let mut digits = format!("{:06}", us.abs());
    while digits.ends_with('0') {
        digits.pop();
    }
    out.push('.');
    out.push_str(&digits);
}

/// PostgreSQL's text of a timestamp (`+00` after one with a time zone):
/// fractional seconds only when there are some, without trailing zeros.
/// Written by hand: this runs for every timestamp a FETCH or a query
/// sends, and a formatter that reads a format string costs a quarter of a
/// FETCH's time.
pub fn write_timestamp(us: i64, with_zone: bool, out: &mut String) {
    match us {
        TIMESTAMP_INFINITY => return out.push_str("infinity"),
        TIMESTAMP_NEG_INFINITY => return out.push_str("-infinity"),
        _ => {}
    }
    let days = us.div_euclid(US_PER_DAY);
    let in_day = us.rem_euclid(US_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    if !(1..=9999).contains(&y) {
        // Years before 1 (BC) or past 9999: the slow path.
        let (year, bc) = if y <= 0 { (1 - y, true) } else { (y, false) };
        let _ = write!(out, "{year:04}-{m:02}-{d:02} ");
        write_clock(in_day, out);
        if with_zone {
            out.push_str("+00");
        }
        if bc {
            out.push_str(" BC");
        }
        return;
    }
    let secs = in_day / US_PER_SEC;
    let fraction = in_day % US_PER_SEC;
    let mut b = [0u8; 29];
    let two = |b: &mut [u8], at: usize, v: i64| {
        b[at] = b'0' + (v / 10) as u8;
        b[at + 1] = b'0' + (v % 10) as u8;
    };
    two(&mut b, 0, y / 100);
    two(&mut b, 2, y % 100);
    b[4] = b'-';
    two(&mut b, 5, m as i64);
    b[7] = b'-';
    two(&mut b, 8, d as i64);
    b[10] = b' ';
    two(&mut b, 11, secs / 3600);
    b[13] = b':';
    two(&mut b, 14, secs / 60 % 60);
    b[16] = b':';
    two(&mut b, 17, secs % 60);
    let mut len = 19;
    if fraction != 0 {
        b[19] = b'.';
        let mut f = fraction;
        for i in (20..26).rev() {
            b[i] = b'0' + (f % 10) as u8;
            f /= 10;
        }
        len = 26;
        while b[len - 1] == b'0' {
            len -= 1;
        }
    }
    if with_zone {
        b[len..len + 3].copy_from_slice(b"+00");
        len += 3;
    }
    // Only ASCII digits and punctuation were written.
    out.push_str(std::str::from_utf8(&b[..len]).unwrap_or_default());
}

pub fn timestamp_text(us: i64, with_zone: bool) -> String {
    let mut s = String::with_capacity(29);
    write_timestamp(us, with_zone, &mut s);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(text: &str) -> String {
        timestamp_text(parse_timestamp(text, false).unwrap(), false)
    }

    #[test]
    fn timestamps_read_as_postgresql_reads_them() {
        for (input, want) in [
            ("2026-01-05 10:11:12", "2026-01-05 10:11:12"),
            ("2026-01-05T10:11:12.5", "2026-01-05 10:11:12.5"),
            ("2026-01-05 10:11", "2026-01-05 10:11:00"),
            ("2026-01-05", "2026-01-05 00:00:00"),
            ("2026-01-01 24:00:00", "2026-01-02 00:00:00"),
            ("epoch", "1970-01-01 00:00:00"),
            ("Jan 5 2026 10:00", "2026-01-05 10:00:00"),
            ("5 January 2026", "2026-01-05 00:00:00"),
            ("January 5, 2026 3:04 PM", "2026-01-05 15:04:00"),
            ("01/05/2026", "2026-01-05 00:00:00"),
            ("20260105", "2026-01-05 00:00:00"),
            ("0044-03-15 12:00 BC", "0044-03-15 12:00:00 BC"),
            ("2026-01-05 10:00:00+02", "2026-01-05 10:00:00"),
            ("2026-01-05 10:00:00.1234567", "2026-01-05 10:00:00.123457"),
            ("infinity", "infinity"),
            ("-infinity", "-infinity"),
            ("12026-01-05", "12026-01-05 00:00:00"),
        ] {
            assert_eq!(ts(input), want, "{input}");
        }
        let tz = |t: &str| timestamp_text(parse_timestamp(t, true).unwrap(), true);
        assert_eq!(tz("2026-01-01 10:00:00+02"), "2026-01-01 08:00:00+00");
        assert_eq!(tz("2026-01-01 10:00:00-07:30"), "2026-01-01 17:30:00+00");
        assert_eq!(tz("2026-01-01 10:00:00Z"), "2026-01-01 10:00:00+00");
        assert_eq!(tz("2026-01-01 10:00:00 UTC"), "2026-01-01 10:00:00+00");
        assert_eq!(tz("2026-01-01T10:00:00+0530"), "2026-01-01 04:30:00+00");
        for bad in [
            "",
            "x",
            "2026-01-05 10",
            "2026-01-05 10:00:00 nowhere",
            "10:00",
        ] {
            let e = parse_timestamp(bad, false).unwrap_err();
            assert_eq!(e.sqlstate(), "22007", "{bad}");
        }
        for out_of_range in ["2026-02-30", "2026-13-01 00:00", "2026-01-01 25:00:00"] {
            let e = parse_timestamp(out_of_range, false).unwrap_err();
            assert_eq!(e.sqlstate(), "22008", "{out_of_range}");
        }
    }

    #[test]
    fn timestamps_print_as_postgresql_prints_them() {
        let at = |s: &str| {
            chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
                .unwrap()
                .and_utc()
                .timestamp_micros()
        };
        assert_eq!(
            timestamp_text(at("2026-01-01 10:00:00.000"), false),
            "2026-01-01 10:00:00"
        );
        assert_eq!(
            timestamp_text(at("2026-01-01 10:00:00.500"), false),
            "2026-01-01 10:00:00.5"
        );
        assert_eq!(
            timestamp_text(at("2026-01-01 10:00:00.000120"), true),
            "2026-01-01 10:00:00.00012+00"
        );
        assert_eq!(
            timestamp_text(at("1969-12-31 23:59:59.999999"), false),
            "1969-12-31 23:59:59.999999"
        );
        // Every day of four centuries, against chrono.
        let mut us = at("1900-01-01 00:00:00");
        while us < at("2300-01-01 00:00:00") {
            let want = chrono::DateTime::from_timestamp_micros(us)
                .unwrap()
                .naive_utc()
                .format("%Y-%m-%d %H:%M:%S")
                .to_string();
            assert_eq!(timestamp_text(us, false), want);
            us += 86_400_000_000 + 3_600_000_000 + 61_000_000;
        }
    }

    #[test]
    fn dates_and_times() {
        let d = |t: &str| date_text(parse_date(t).unwrap());
        assert_eq!(d("2026-01-05"), "2026-01-05");
        assert_eq!(d("2026-01-05 10:00"), "2026-01-05");
        assert_eq!(d("0044-03-15 BC"), "0044-03-15 BC");
        assert_eq!(d("-infinity"), "-infinity");
        assert_eq!(d("1500-01-01"), "1500-01-01");
        assert_eq!(parse_date("2026-02-29").unwrap_err().sqlstate(), "22008");
        let mut s = String::new();
        write_clock(parse_time("10:00").unwrap(), &mut s);
        assert_eq!(s, "10:00:00");
        s.clear();
        write_clock(parse_time("23:59:59.25").unwrap(), &mut s);
        assert_eq!(s, "23:59:59.25");
    }
}
