//! PostgreSQL's formatting patterns (`to_char`, `to_timestamp`,
//! `to_date`): `YYYY-MM-DD HH24:MI:SS`, `FMMonth DD, YYYY`, `HH12:MI AM`,
//! `Dy`, `IW`, `Q`, quoted text, and the number patterns `9`, `0`, `.`,
//! `,`, `D`, `G`, `S`, `MI`, `PL`, `SG`, `FM`, `PR`.

use super::datetime::{civil_from_days, days_from_civil, days_in_month, US_PER_DAY, US_PER_SEC};

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const ROMAN: [&str; 12] = [
    "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI", "XII",
];

/// The datetime patterns, longest first so that `HH24` wins over `HH`.
const PATTERNS: &[&str] = &[
    "HH24", "HH12", "HH", "MI", "SSSSS", "SSSS", "SS", "MS", "US", "FF1", "FF2", "FF3", "FF4",
    "FF5", "FF6", "A.M.", "a.m.", "P.M.", "p.m.", "AM", "am", "PM", "pm", "Y,YYY", "YYYY", "YYY",
    "YY", "Y", "IYYY", "IYY", "IY", "I", "B.C.", "b.c.", "A.D.", "a.d.", "BC", "bc", "AD", "ad",
    "MONTH", "Month", "month", "MON", "Mon", "mon", "MM", "DAY", "Day", "day", "DY", "Dy", "dy",
    "DDD", "IDDD", "DD", "D", "ID", "W", "WW", "IW", "CC", "J", "Q", "RM", "rm", "TZH", "TZM",
    "TZ", "tz", "OF",
];

/// The patterns of numbers, which PostgreSQL reads whatever their case.
const CASELESS: &[&str] = &[
    "HH24", "HH12", "HH", "MI", "SSSSS", "SSSS", "SS", "MS", "US", "FF1", "FF2", "FF3", "FF4",
    "FF5", "FF6", "Y,YYY", "YYYY", "YYY", "YY", "Y", "IYYY", "IYY", "IY", "I", "MM", "DDD", "IDDD",
    "DD", "D", "ID", "W", "WW", "IW", "CC", "J", "Q", "TZH", "TZM", "OF",
];

/// One piece of a pattern: a field with its modifiers, or literal text.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Field {
        name: &'static str,
        fill: bool,
        ordinal: Option<bool>,
    },
    Text(String),
}

fn pieces(format: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut rest = format;
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('"') {
            let mut text = String::new();
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            text.push(n);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => text.push(c),
                }
            }
            out.push(Piece::Text(text));
            rest = &quoted[end.min(quoted.len())..];
            continue;
        }
        if let Some(escaped) = rest.strip_prefix('\\') {
            let mut chars = escaped.chars();
            if let Some(c) = chars.next() {
                out.push(Piece::Text(c.to_string()));
            }
            rest = chars.as_str();
            continue;
        }
        let mut fill = false;
        let mut body = rest;
        loop {
            if let Some(r) = body.strip_prefix("FM").or_else(|| body.strip_prefix("fm")) {
                fill = true;
                body = r;
            } else if let Some(r) = body.strip_prefix("TM").or_else(|| body.strip_prefix("tm")) {
                // Translated names are not padded.
                fill = true;
                body = r;
            } else {
                break;
            }
        }
        // Patterns of digits are read in any case (`hh24:mi`, `yyyy-mm-dd`);
        // names keep the case they are written in (`Month`, `month`).
        let longest = PATTERNS
            .iter()
            .filter(|p| body.starts_with(**p))
            .max_by_key(|p| p.len())
            .or_else(|| {
                PATTERNS
                    .iter()
                    .filter(|p| {
                        CASELESS.contains(p)
                            && body
                                .get(..p.len())
                                .is_some_and(|b| b.eq_ignore_ascii_case(p))
                    })
                    .max_by_key(|p| p.len())
            });
        if let Some(name) = longest {
            body = &body[name.len()..];
            let ordinal = if let Some(r) = body.strip_prefix("TH") {
                body = r;
                Some(true)
            } else if let Some(r) = body.strip_prefix("th") {
                body = r;
                Some(false)
            } else {
                None
            };
            out.push(Piece::Field {
                name,
                fill,
                ordinal,
            });
            rest = body;
            continue;
        }
        let mut chars = rest.chars();
        let c = chars.next().unwrap_or(' ');
        match out.last_mut() {
            Some(Piece::Text(t)) => t.push(c),
            _ => out.push(Piece::Text(c.to_string())),
        }
        rest = chars.as_str();
    }
    out
}

fn ordinal_suffix(n: i64, upper: bool) -> &'static str {
    let s = match (n % 100, n % 10) {
        (11..=13, _) => "th",
        (_, 1) => "st",
        (_, 2) => "nd",
        (_, 3) => "rd",
        _ => "th",
    };
    match (upper, s) {
        (false, s) => s,
        (true, "st") => "ST",
        (true, "nd") => "ND",
        (true, "rd") => "RD",
        (true, _) => "TH",
    }
}

/// ISO 8601 week-numbering year and week of a day number.
fn iso_week(days: i64) -> (i64, i64) {
    let (y, _, _) = civil_from_days(days);
    let weekday_mon0 = (days + 3).rem_euclid(7); // 1970-01-01 was a Thursday
    let thursday = days - weekday_mon0 + 3;
    let (iy, _, _) = civil_from_days(thursday);
    let jan1 = days_from_civil(iy, 1, 1);
    let week = (thursday - jan1) / 7 + 1;
    let _ = y;
    (iy, week)
}

/// `to_char(timestamp, format)`: `us` microseconds since 1970 (in UTC
/// for a timestamptz, whose zone prints as `UTC`/`+00`).
pub fn format_timestamp(us: i64, format: &str, with_zone: bool) -> String {
    let days = us.div_euclid(US_PER_DAY);
    let in_day = us.rem_euclid(US_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    let secs = in_day / US_PER_SEC;
    let (iso_year, iso_week_no) = iso_week(days);
    let bc = year <= 0;
    render(
        &Fields {
            days,
            year,
            month,
            day,
            hour: secs / 3600,
            minute: secs / 60 % 60,
            second: secs % 60,
            secs,
            micros: in_day % US_PER_SEC,
            weekday: (days + 4).rem_euclid(7), // Sunday = 0
            doy: days - days_from_civil(year, 1, 1) + 1,
            iso_year,
            iso_week_no,
            bc,
            shown_year: if bc { 1 - year } else { year },
        },
        format,
        with_zone,
    )
}

/// `to_char(interval, format)`: years and months from the months, days
/// from the days, and hours counted past a day (`26:05` for `HH24:MI` of
/// 26 hours 5 minutes), as PostgreSQL formats an interval.
pub fn format_interval(
    months: i32,
    days: i32,
    micros: i64,
    format: &str,
) -> Result<String, FormatError> {
    // Names of months and days belong to dates, not to spans of time.
    let named = pieces(format).into_iter().any(|p| {
        matches!(p, Piece::Field { name, .. } if name.eq_ignore_ascii_case("month")
            || name.eq_ignore_ascii_case("mon")
            || name.eq_ignore_ascii_case("day")
            || name.eq_ignore_ascii_case("dy"))
    });
    if named {
        return Err(FormatError(
            "invalid format specification for an interval value".into(),
        ));
    }
    let secs = micros / US_PER_SEC;
    let year = i64::from(months / 12);
    Ok(render(
        &Fields {
            days: i64::from(days),
            year,
            month: (months % 12).unsigned_abs(),
            day: days.unsigned_abs(),
            hour: secs / 3600,
            minute: secs / 60 % 60,
            second: secs % 60,
            secs,
            micros: micros % US_PER_SEC,
            weekday: 0,
            doy: i64::from(days),
            iso_year: year,
            iso_week_no: 0,
            bc: false,
            shown_year: year,
        },
        format,
        false,
    ))
}

/// The fields a format can show.
struct Fields {
    days: i64,
    year: i64,
    month: u32,
    day: u32,
    hour: i64,
    minute: i64,
    second: i64,
    secs: i64,
    micros: i64,
    weekday: i64,
    doy: i64,
    iso_year: i64,
    iso_week_no: i64,
    bc: bool,
    shown_year: i64,
}

fn render(fields: &Fields, format: &str, with_zone: bool) -> String {
    let &Fields {
        days,
        year,
        month,
        day,
        hour,
        minute,
        second,
        secs,
        micros,
        weekday,
        doy,
        iso_year,
        iso_week_no,
        bc,
        shown_year,
    } = fields;
    // An interval of no months still names a month.
    let month_index = (month as usize).clamp(1, 12) - 1;
    let mut out = String::new();
    for piece in pieces(format) {
        let (name, fill, ordinal) = match piece {
            Piece::Text(t) => {
                out.push_str(&t);
                continue;
            }
            Piece::Field {
                name,
                fill,
                ordinal,
            } => (name, fill, ordinal),
        };
        let num = |v: i64, width: usize, out: &mut String| {
            if fill {
                out.push_str(&v.to_string());
            } else {
                out.push_str(&format!("{v:0width$}"));
            }
            if let Some(upper) = ordinal {
                out.push_str(ordinal_suffix(v, upper));
            }
        };
        let word = |w: &str, width: usize, out: &mut String| {
            if fill {
                out.push_str(w);
            } else {
                out.push_str(&format!("{w:<width$}"));
            }
        };
        let case = |w: &str, style: &str| match style {
            "upper" => w.to_uppercase(),
            "lower" => w.to_lowercase(),
            _ => w.to_string(),
        };
        match name {
            "HH24" => num(hour, 2, &mut out),
            "HH12" | "HH" => num(if hour % 12 == 0 { 12 } else { hour % 12 }, 2, &mut out),
            "MI" => num(minute, 2, &mut out),
            "SS" => num(second, 2, &mut out),
            "SSSS" | "SSSSS" => num(secs, 0, &mut out),
            "MS" => num(micros / 1000, 3, &mut out),
            "US" => num(micros, 6, &mut out),
            "FF1" => num(micros / 100_000, 1, &mut out),
            "FF2" => num(micros / 10_000, 2, &mut out),
            "FF3" => num(micros / 1000, 3, &mut out),
            "FF4" => num(micros / 100, 4, &mut out),
            "FF5" => num(micros / 10, 5, &mut out),
            "FF6" => num(micros, 6, &mut out),
            "AM" | "PM" => out.push_str(if hour < 12 { "AM" } else { "PM" }),
            "am" | "pm" => out.push_str(if hour < 12 { "am" } else { "pm" }),
            "A.M." | "P.M." => out.push_str(if hour < 12 { "A.M." } else { "P.M." }),
            "a.m." | "p.m." => out.push_str(if hour < 12 { "a.m." } else { "p.m." }),
            "Y,YYY" => out.push_str(&format!("{},{:03}", shown_year / 1000, shown_year % 1000)),
            "YYYY" => num(shown_year, 4, &mut out),
            "YYY" => num(shown_year % 1000, 3, &mut out),
            "YY" => num(shown_year % 100, 2, &mut out),
            "Y" => num(shown_year % 10, 1, &mut out),
            "IYYY" => num(iso_year, 4, &mut out),
            "IYY" => num(iso_year % 1000, 3, &mut out),
            "IY" => num(iso_year % 100, 2, &mut out),
            "I" => num(iso_year % 10, 1, &mut out),
            "BC" | "AD" => out.push_str(if bc { "BC" } else { "AD" }),
            "bc" | "ad" => out.push_str(if bc { "bc" } else { "ad" }),
            "B.C." | "A.D." => out.push_str(if bc { "B.C." } else { "A.D." }),
            "b.c." | "a.d." => out.push_str(if bc { "b.c." } else { "a.d." }),
            "MONTH" => word(&case(MONTHS[month_index], "upper"), 9, &mut out),
            "Month" => word(MONTHS[month_index], 9, &mut out),
            "month" => word(&case(MONTHS[month_index], "lower"), 9, &mut out),
            "MON" => out.push_str(&MONTHS[month_index][..3].to_uppercase()),
            "Mon" => out.push_str(&MONTHS[month_index][..3]),
            "mon" => out.push_str(&MONTHS[month_index][..3].to_lowercase()),
            "MM" => num(month as i64, 2, &mut out),
            "DAY" => word(&case(DAYS[weekday as usize], "upper"), 9, &mut out),
            "Day" => word(DAYS[weekday as usize], 9, &mut out),
            "day" => word(&case(DAYS[weekday as usize], "lower"), 9, &mut out),
            "DY" => out.push_str(&DAYS[weekday as usize][..3].to_uppercase()),
            "Dy" => out.push_str(&DAYS[weekday as usize][..3]),
            "dy" => out.push_str(&DAYS[weekday as usize][..3].to_lowercase()),
            "DDD" => num(doy, 3, &mut out),
            "IDDD" => {
                let start = days_from_civil(iso_year, 1, 4);
                let start = start - (start + 3).rem_euclid(7);
                num(days - start + 1, 3, &mut out)
            }
            "DD" => num(day as i64, 2, &mut out),
            "D" => num(weekday + 1, 1, &mut out),
            "ID" => num(if weekday == 0 { 7 } else { weekday }, 1, &mut out),
            "W" => num((day as i64 - 1) / 7 + 1, 1, &mut out),
            "WW" => num((doy - 1) / 7 + 1, 2, &mut out),
            "IW" => num(iso_week_no, 2, &mut out),
            "CC" => num(
                if year > 0 {
                    (year - 1) / 100 + 1
                } else {
                    -((-year) / 100 + 1)
                },
                2,
                &mut out,
            ),
            "J" => num(days + 2_440_588, 0, &mut out),
            "Q" => num((month as i64 - 1) / 3 + 1, 1, &mut out),
            "RM" => word(ROMAN[month_index], 4, &mut out),
            "rm" => word(&ROMAN[month_index].to_lowercase(), 4, &mut out),
            "TZ" if with_zone => out.push_str("UTC"),
            "tz" if with_zone => out.push_str("utc"),
            "TZ" | "tz" => {}
            "TZH" => out.push_str("+00"),
            "TZM" => out.push_str("00"),
            "OF" => out.push_str("+00"),
            _ => {}
        }
    }
    out
}

/// Why text does not match a format (22007).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FormatError(pub String);

/// `to_timestamp(text, format)` and `to_date`: microseconds since 1970.
pub fn parse_with_format(text: &str, format: &str) -> Result<i64, FormatError> {
    let mut year: Option<i64> = None;
    let mut month: u32 = 1;
    let mut day: u32 = 1;
    let mut hour: i64 = 0;
    let mut minute: i64 = 0;
    let mut second: i64 = 0;
    let mut micros: i64 = 0;
    let mut pm: Option<bool> = None;
    let mut bc = false;
    let mut doy: Option<i64> = None;
    let mut rest = text;
    let skip_space = |r: &mut &str| *r = r.trim_start();
    let number = |r: &mut &str, max: usize, name: &str| -> Result<i64, FormatError> {
        let t = r.trim_start_matches(' ');
        let neg = t.starts_with('-');
        let body = if neg { &t[1..] } else { t };
        let len = body
            .bytes()
            .take(max)
            .take_while(|b| b.is_ascii_digit())
            .count();
        if len == 0 {
            return Err(FormatError(format!(
                "invalid value \"{}\" for \"{name}\"",
                t.chars().take(max.max(1)).collect::<String>()
            )));
        }
        let v: i64 = body[..len].parse().unwrap_or(0);
        *r = &body[len..];
        Ok(if neg { -v } else { v })
    };
    let names = |r: &mut &str, list: &[&str], short: bool| -> Option<usize> {
        let lower = r.to_lowercase();
        for (i, n) in list.iter().enumerate() {
            let n = n.to_lowercase();
            let n = if short { n[..3].to_string() } else { n };
            if lower.starts_with(&n) {
                *r = &r[n.len()..];
                return Some(i);
            }
        }
        None
    };
    let pieces = pieces(format);
    for (at, piece) in pieces.iter().cloned().enumerate() {
        // A field right before another reads only its own width
        // (`YYYYMMDD`), as PostgreSQL reads fields with no separator.
        let packed = matches!(pieces.get(at + 1), Some(Piece::Field { .. }));
        match piece {
            Piece::Text(t) => {
                // Each literal character skips one of the input; spaces
                // skip any run of spaces.
                for c in t.chars() {
                    if c == ' ' {
                        skip_space(&mut rest);
                    } else if let Some(r) = rest.strip_prefix(c) {
                        rest = r;
                    } else {
                        let mut chars = rest.chars();
                        if chars.next().is_some_and(|x| !x.is_ascii_alphanumeric()) {
                            rest = chars.as_str();
                        }
                    }
                }
            }
            Piece::Field { name, .. } => match name {
                "YYYY" | "IYYY" => {
                    year = Some(number(&mut rest, if packed { 4 } else { 6 }, name)?)
                }
                "Y,YYY" => {
                    let thousands = number(&mut rest, 3, name)?;
                    rest = rest.strip_prefix(',').unwrap_or(rest);
                    year = Some(thousands * 1000 + number(&mut rest, 3, name)?);
                }
                "YYY" | "IYY" => year = Some(2000 + number(&mut rest, 3, name)?),
                "YY" | "IY" => {
                    let y = number(&mut rest, 2, name)?;
                    year = Some(if y < 70 { 2000 + y } else { 1900 + y });
                }
                "MM" => month = number(&mut rest, 2, name)? as u32,
                "DD" => day = number(&mut rest, 2, name)? as u32,
                "DDD" => doy = Some(number(&mut rest, 3, name)?),
                "HH24" => hour = number(&mut rest, 2, name)?,
                "HH" | "HH12" => hour = number(&mut rest, 2, name)?,
                "MI" => minute = number(&mut rest, 2, name)?,
                "SS" => second = number(&mut rest, 2, name)?,
                "MS" => micros = number(&mut rest, 3, name)? * 1000,
                "US" => micros = number(&mut rest, 6, name)?,
                "SSSS" | "SSSSS" => {
                    let s = number(&mut rest, 5, name)?;
                    hour = s / 3600;
                    minute = s / 60 % 60;
                    second = s % 60;
                }
                "AM" | "am" | "PM" | "pm" | "A.M." | "a.m." | "P.M." | "p.m." => {
                    let lower = rest.to_lowercase();
                    if lower.starts_with("am") || lower.starts_with("a.m.") {
                        pm = Some(false);
                    } else if lower.starts_with("pm") || lower.starts_with("p.m.") {
                        pm = Some(true);
                    } else {
                        return Err(FormatError(format!("invalid value for \"{name}\"")));
                    }
                    rest = &rest[if lower.as_bytes().get(1) == Some(&b'.') {
                        4
                    } else {
                        2
                    }..];
                }
                "BC" | "bc" | "B.C." | "b.c." | "AD" | "ad" | "A.D." | "a.d." => {
                    let lower = rest.to_lowercase();
                    bc = lower.starts_with("bc") || lower.starts_with("b.c.");
                    let len = if lower.as_bytes().get(1) == Some(&b'.') {
                        4
                    } else {
                        2
                    };
                    rest = rest.get(len..).unwrap_or("");
                }
                "MONTH" | "Month" | "month" => {
                    month = names(&mut rest, &MONTHS, false)
                        .ok_or_else(|| FormatError(format!("invalid value for \"{name}\"")))?
                        as u32
                        + 1
                }
                "MON" | "Mon" | "mon" => {
                    month = names(&mut rest, &MONTHS, true)
                        .ok_or_else(|| FormatError(format!("invalid value for \"{name}\"")))?
                        as u32
                        + 1
                }
                "DAY" | "Day" | "day" => {
                    names(&mut rest, &DAYS, false);
                }
                "DY" | "Dy" | "dy" => {
                    names(&mut rest, &DAYS, true);
                }
                _ => {
                    number(&mut rest, 4, name)?;
                }
            },
        }
    }
    if let Some(p) = pm {
        if !(1..=12).contains(&hour) {
            return Err(FormatError(format!(
                "hour \"{hour}\" is invalid for the 12-hour clock"
            )));
        }
        hour = hour % 12 + if p { 12 } else { 0 };
    }
    let mut y = year.unwrap_or(1);
    if bc {
        y = 1 - y;
    }
    let days = match doy {
        Some(d) => days_from_civil(y, 1, 1) + d - 1,
        None => {
            if !(1..=12).contains(&month) || day < 1 || day > days_in_month(y, month) {
                return Err(FormatError(format!(
                    "date/time field value out of range: \"{text}\""
                )));
            }
            days_from_civil(y, month, day)
        }
    };
    if hour > 24 || minute > 59 || second > 60 {
        return Err(FormatError(format!(
            "date/time field value out of range: \"{text}\""
        )));
    }
    Ok(days * US_PER_DAY + (hour * 3600 + minute * 60 + second) * US_PER_SEC + micros)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::datetime::parse_timestamp;

    fn ts(t: &str, f: &str) -> String {
        format_timestamp(parse_timestamp(t, false).unwrap(), f, false)
    }

    #[test]
    fn to_char_of_timestamps() {
        assert_eq!(ts("2015-07-15", "YYYY-MM-DD"), "2015-07-15");
        assert_eq!(ts("2026-01-01 10:00:00", "DD Mon YYYY"), "01 Jan 2026");
        assert_eq!(ts("2026-01-01 10:00:00", "HH12:MI AM"), "10:00 AM");
        assert_eq!(
            ts("2026-01-01 10:00:00", "Day Month"),
            "Thursday  January  "
        );
        assert_eq!(
            ts(
                "2026-01-05 07:08:09.123456",
                "YYYY MM DD HH HH12 HH24 MI SS MS US"
            ),
            "2026 01 05 07 07 07 08 09 123 123456"
        );
        assert_eq!(ts("2026-01-05", "D DDD IW WW Q"), "2 005 02 01 1");
        assert_eq!(
            ts("2026-12-31 23:59:59", "FMMonth FMDD, YYYY"),
            "December 31, 2026"
        );
        assert_eq!(
            ts("2026-01-05 15:00", "TMDay \"at\" HH:MI pm"),
            "Monday at 03:00 pm"
        );
        assert_eq!(ts("2026-01-01", "DDth"), "01st");
    }

    #[test]
    fn to_timestamp_reads_its_format() {
        let p = |t: &str, f: &str| {
            crate::types::datetime::timestamp_text(parse_with_format(t, f).unwrap(), false)
        };
        assert_eq!(
            p("2026-01-05 10:11:12", "YYYY-MM-DD HH24:MI:SS"),
            "2026-01-05 10:11:12"
        );
        assert_eq!(p("05 Jan 2026", "DD Mon YYYY"), "2026-01-05 00:00:00");
        assert_eq!(
            p("3:04 PM 2026/01/05", "HH:MI AM YYYY/MM/DD"),
            "2026-01-05 15:04:00"
        );
    }
}
