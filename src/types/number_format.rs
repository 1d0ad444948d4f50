//! `to_char(number, format)`: PostgreSQL's number template language
//! (formatting.c's `NUM_processor`), step for step, so that its quirks
//! come out the same: digit slots `9` and `0`, `.`/`D`, `,`/`G`, the
//! sign patterns `S`, `MI`, `PL`, `SG` and `PR`, `L` (the C locale's
//! currency, a space), `V` (times ten per digit after it), `EEEE`,
//! roman numerals `RN`, ordinal suffixes `TH`/`th` and the fill mode
//! `FM`. Anything else is copied as it is, and `"text"` without quotes.
//!
//! The number itself is text: a numeric's or an integer's exact digits,
//! or a float printed to the digits its type holds (15 for double
//! precision, 6 for real), as PostgreSQL's `float8_to_char` prints it.

/// A value to format.
pub enum NumberValue<'a> {
    /// A numeric's or integer's text: `-12.50`, `42`.
    Exact(&'a str),
    /// A float and how many significant digits its type holds.
    Float { value: f64, digits: usize },
}

/// The pattern's actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Nine,
    Zero,
    Point,
    Comma,
    Currency,
    Minus,
    Plus,
    SignAnchored,
    SignBoth,
    Bracket,
    Roman { lower: bool },
    Ordinal { upper: bool },
    Multiply,
    Exponent,
    Fill,
}

/// Keywords in the order PostgreSQL tries them (longest first where one
/// is the start of another); case matters, as in PostgreSQL.
const KEYWORDS: &[(&str, Key)] = &[
    ("9", Key::Nine),
    ("0", Key::Zero),
    (".", Key::Point),
    ("D", Key::Point),
    ("d", Key::Point),
    (",", Key::Comma),
    ("G", Key::Comma),
    ("g", Key::Comma),
    ("EEEE", Key::Exponent),
    ("eeee", Key::Exponent),
    ("FM", Key::Fill),
    ("fm", Key::Fill),
    ("L", Key::Currency),
    ("l", Key::Currency),
    ("MI", Key::Minus),
    ("mi", Key::Minus),
    ("PL", Key::Plus),
    ("pl", Key::Plus),
    ("PR", Key::Bracket),
    ("pr", Key::Bracket),
    ("RN", Key::Roman { lower: false }),
    ("rn", Key::Roman { lower: true }),
    ("SG", Key::SignBoth),
    ("sg", Key::SignBoth),
    ("S", Key::SignAnchored),
    ("s", Key::SignAnchored),
    ("TH", Key::Ordinal { upper: true }),
    ("th", Key::Ordinal { upper: false }),
    ("V", Key::Multiply),
    ("v", Key::Multiply),
];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Action(Key),
    Literal(char),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AnchoredSign {
    Before,
    After,
}

/// What the pattern says of the number (PostgreSQL's `NUMDesc`).
#[derive(Debug, Default)]
struct Description {
    pre: usize,
    post: usize,
    /// The first `0` slot, counted from 0 over digit slots.
    zero_start: Option<usize>,
    /// Digit slots up to and including the last `0`.
    zero_end: usize,
    decimal: bool,
    fill: bool,
    bracket: bool,
    minus: bool,
    plus: bool,
    anchored: Option<AnchoredSign>,
    pre_anchored: usize,
    multiply: usize,
    multiplying: bool,
    exponent: bool,
    roman: bool,
}

/// Why a pattern cannot format a number (22023 in PostgreSQL, or 0A000
/// for `EEEE` combined with other patterns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumberFormatError {
    pub sqlstate: &'static str,
    pub message: String,
}

fn error(message: &str) -> NumberFormatError {
    NumberFormatError {
        sqlstate: "22023",
        message: message.to_string(),
    }
}

fn parse(format: &str) -> Result<(Vec<Node>, Description), NumberFormatError> {
    let mut nodes = Vec::new();
    let mut d = Description::default();
    let mut rest = format;
    while let Some(c) = rest.chars().next() {
        if c == '"' {
            let body = &rest[1..];
            let end = body.find('"').unwrap_or(body.len());
            nodes.extend(body[..end].chars().map(Node::Literal));
            rest = body.get(end + 1..).unwrap_or("");
            continue;
        }
        let Some((word, key)) = KEYWORDS.iter().find(|(w, _)| rest.starts_with(w)) else {
            nodes.push(Node::Literal(c));
            rest = &rest[c.len_utf8()..];
            continue;
        };
        rest = &rest[word.len()..];
        if d.exponent && !matches!(key, Key::Fill) {
            return Err(NumberFormatError {
                sqlstate: "42601",
                message: "\"EEEE\" must be the last pattern used".into(),
            });
        }
        match key {
            Key::Nine | Key::Zero => {
                if d.bracket {
                    return Err(error("\"9\" must be ahead of \"PR\""));
                }
                if d.multiplying {
                    d.multiply += 1;
                } else {
                    if *key == Key::Zero && d.zero_start.is_none() {
                        d.zero_start = Some(d.pre + d.post);
                    }
                    match d.decimal {
                        true => d.post += 1,
                        false => d.pre += 1,
                    }
                    if *key == Key::Zero {
                        d.zero_end = d.pre + d.post;
                    }
                }
            }
            Key::Point => {
                if d.decimal {
                    return Err(error("multiple decimal points"));
                }
                if d.multiplying {
                    return Err(error("cannot use \"V\" and decimal point together"));
                }
                d.decimal = true;
            }
            Key::Fill => d.fill = true,
            Key::SignAnchored => {
                if d.anchored.is_some() {
                    return Err(error("cannot use \"S\" twice"));
                }
                if d.plus || d.minus || d.bracket {
                    return Err(error(
                        "cannot use \"S\" and \"PL\"/\"MI\"/\"SG\"/\"PR\" together",
                    ));
                }
                match d.decimal {
                    false => {
                        d.anchored = Some(AnchoredSign::Before);
                        d.pre_anchored = d.pre;
                    }
                    true => d.anchored = Some(AnchoredSign::After),
                }
            }
            Key::Minus | Key::Plus | Key::SignBoth => {
                if d.anchored.is_some() {
                    return Err(error("cannot use \"S\" and \"MI\"/\"PL\"/\"SG\" together"));
                }
                if matches!(key, Key::Minus | Key::SignBoth) {
                    d.minus = true;
                }
                if matches!(key, Key::Plus | Key::SignBoth) {
                    d.plus = true;
                }
            }
            Key::Bracket => {
                if d.anchored.is_some() || d.plus || d.minus {
                    return Err(error(
                        "cannot use \"PR\" and \"S\"/\"PL\"/\"MI\"/\"SG\" together",
                    ));
                }
                d.bracket = true;
            }
            Key::Roman { .. } => {
                if d.roman {
                    return Err(error("cannot use \"RN\" twice"));
                }
                d.roman = true;
            }
            Key::Multiply => {
                if d.decimal {
                    return Err(error("cannot use \"V\" and decimal point together"));
                }
                d.multiplying = true;
            }
            Key::Exponent => {
                if d.bracket || d.minus || d.plus || d.roman || d.anchored.is_some() {
                    return Err(error("\"EEEE\" is incompatible with other formats"));
                }
                d.exponent = true;
            }
            Key::Comma | Key::Currency | Key::Ordinal { .. } => {}
        }
        nodes.push(Node::Action(*key));
    }
    Ok((nodes, d))
}

/// Decimal text (`12.345`, no sign) rounded half away from zero to
/// `decimals` places; `decimals` 0 leaves no point.
fn round_decimal(text: &str, decimals: usize) -> String {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let mut digits: Vec<u8> = format!("{int}{frac:0<decimals$}").into_bytes();
    let keep = int.len() + decimals;
    let round_up = frac.as_bytes().get(decimals).is_some_and(|d| *d >= b'5');
    digits.truncate(keep);
    let mut int_len = int.len();
    if round_up {
        let mut i = digits.len();
        loop {
            if i == 0 {
                digits.insert(0, b'1');
                int_len += 1;
                break;
            }
            i -= 1;
            if digits[i] == b'9' {
                digits[i] = b'0';
            } else {
                digits[i] += 1;
                break;
            }
        }
    }
    let s = String::from_utf8(digits).unwrap_or_default();
    let (i, f) = s.split_at(int_len);
    let i = match i.trim_start_matches('0') {
        "" => "0",
        i => i,
    };
    match decimals {
        0 => i.to_string(),
        _ => format!("{i}.{f}"),
    }
}

/// Decimal text times 10^n.
fn shift_point(text: &str, n: usize) -> String {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let moved: String = frac.chars().chain(std::iter::repeat('0')).take(n).collect();
    let rest = frac.get(n..).unwrap_or("");
    match rest {
        "" => format!("{int}{moved}"),
        r => format!("{int}{moved}.{r}"),
    }
}

/// A number in scientific notation as PostgreSQL prints it for `EEEE`:
/// `1.23e+03`, at least two exponent digits.
fn scientific(value: f64, decimals: usize) -> String {
    let s = format!("{:.*e}", decimals, value.abs());
    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}

fn roman(n: i64) -> String {
    if !(1..=3999).contains(&n) {
        return "#".repeat(15);
    }
    let parts: [(i64, &str); 13] = [
        (1000, "M"),
        (900, "CM"),
        (500, "D"),
        (400, "CD"),
        (100, "C"),
        (90, "XC"),
        (50, "L"),
        (40, "XL"),
        (10, "X"),
        (9, "IX"),
        (5, "V"),
        (4, "IV"),
        (1, "I"),
    ];
    let mut n = n;
    let mut out = String::new();
    for (v, s) in parts {
        while n >= v {
            out.push_str(s);
            n -= v;
        }
    }
    out
}

/// English ordinal suffix of the number's last digits (`get_th`).
fn ordinal(number: &str, upper: bool) -> &'static str {
    let b = number.as_bytes();
    let last = b.last().copied().unwrap_or(b'0');
    let suffix = if b.len() > 1 && b[b.len() - 2] == b'1' {
        "th"
    } else {
        match last {
            b'1' => "st",
            b'2' => "nd",
            b'3' => "rd",
            _ => "th",
        }
    };
    match (upper, suffix) {
        (false, s) => s,
        (true, "st") => "ST",
        (true, "nd") => "ND",
        (true, "rd") => "RD",
        (true, _) => "TH",
    }
}

/// `to_char(value, format)` for a number.
pub fn format_number(value: NumberValue, format: &str) -> Result<String, NumberFormatError> {
    let (nodes, mut d) = parse(format)?;
    let negative_text = |t: &str| t.starts_with('-');
    // The digits to place (no sign), and the sign.
    let (negative, mut number): (bool, String) = if d.roman {
        let whole = match &value {
            NumberValue::Exact(t) => round_decimal(t.trim_start_matches('-'), 0)
                .parse::<i64>()
                .unwrap_or(0)
                .saturating_mul(if negative_text(t) { -1 } else { 1 }),
            NumberValue::Float { value, .. } => value.round() as i64,
        };
        (false, roman(whole))
    } else if d.exponent {
        let v = match &value {
            NumberValue::Exact(t) => t.parse::<f64>().unwrap_or(f64::NAN),
            NumberValue::Float { value, .. } => *value,
        };
        if !v.is_finite() {
            let mut hashes = "#".repeat(d.pre + d.post + 6);
            hashes.replace_range(d.pre..d.pre + 1, ".");
            return Ok(format!(" {hashes}"));
        }
        let text = scientific(v, d.post);
        return Ok(match v.is_sign_negative() && v != 0.0 {
            true => format!("-{text}"),
            false => format!(" {text}"),
        });
    } else {
        let (negative, digits) = match &value {
            NumberValue::Exact(t) => {
                let abs = t.trim_start_matches('-');
                let abs = match d.multiply {
                    0 => abs.to_string(),
                    m => shift_point(abs, m),
                };
                let digits = round_decimal(&abs, d.post);
                // A value rounded to zero has no sign, as numeric has no -0.
                let nonzero = digits.bytes().any(|b| (b'1'..=b'9').contains(&b));
                (negative_text(t) && nonzero, digits)
            }
            NumberValue::Float { value, digits } => {
                let v = match d.multiply {
                    0 => *value,
                    m => value * 10f64.powi(m as i32),
                };
                if !v.is_finite() {
                    (false, "#".repeat(d.pre + 1))
                } else {
                    let int_len = format!("{:.0}", v.abs()).len();
                    let post = match int_len {
                        l if l >= *digits => 0,
                        l => d.post.min(digits - l),
                    };
                    let mut text = format!("{:.*}", post, v.abs());
                    // Fewer digits than the pattern's: PostgreSQL pads
                    // none; the slots after them print nothing.
                    if post < d.post && d.post > 0 && !text.contains('.') {
                        text.push('.');
                    }
                    let negative = v < 0.0 && text.bytes().any(|b| (b'1'..=b'9').contains(&b));
                    (negative, text)
                }
            }
        };
        (negative, digits)
    };
    d.pre += d.multiply;
    let mut out_pre_spaces = 0usize;
    if !d.roman {
        let pre_len = number.find('.').unwrap_or(number.len());
        if pre_len < d.pre {
            out_pre_spaces = d.pre - pre_len;
        } else if pre_len > d.pre || number.starts_with('#') {
            let mut hashes = "#".repeat(d.pre + d.post + 1);
            hashes.replace_range(d.pre..d.pre + 1, ".");
            number = hashes;
        }
    }
    Ok(process(&nodes, &d, &number, negative, out_pre_spaces))
}

/// The pattern walked over the number (`NUM_processor` for to_char).
fn process(
    nodes: &[Node],
    d: &Description,
    number: &str,
    negative: bool,
    out_pre_spaces: usize,
) -> String {
    let num: Vec<char> = number.chars().collect();
    let sign = if negative { '-' } else { '+' };
    let mut bracket = d.bracket;
    let mut anchored = d.anchored;
    let mut sign_wrote = if d.plus || d.minus {
        !d.plus || d.minus
    } else {
        if sign != '-' && d.fill {
            bracket = false;
        }
        if anchored == Some(AnchoredSign::Before) && d.pre == d.pre_anchored {
            anchored = Some(AnchoredSign::After);
        }
        sign == '+' && d.fill && anchored.is_none()
    };
    let mut num_count = (d.post + d.pre).saturating_sub(1);
    // The last digit worth printing in fill mode (`get_last_relevant_decnum`).
    let mut last_relevant: Option<usize> = None;
    if d.fill && d.decimal {
        if let Some(point) = num.iter().position(|c| *c == '.') {
            let mut at = point;
            for (i, c) in num.iter().enumerate().skip(point + 1) {
                if *c != '0' {
                    at = i;
                }
            }
            let mut relevant = at;
            if d.zero_end > out_pre_spaces {
                let last_zero = d.zero_end - out_pre_spaces;
                if relevant < last_zero {
                    relevant = last_zero;
                }
            }
            last_relevant = Some(relevant);
        }
    }
    if !sign_wrote && out_pre_spaces == 0 {
        num_count += 1;
    }
    let zero_start = d.zero_start;
    let has_zero = zero_start.is_some();
    let mut out = String::new();
    let mut at = 0usize; // index into num
    let mut num_curr = 0usize;
    let mut num_in = false;
    let char_at = |i: usize| num.get(i).copied();
    for node in nodes {
        let key = match node {
            Node::Literal(c) => {
                out.push(*c);
                continue;
            }
            Node::Action(k) => *k,
        };
        match key {
            Key::Nine | Key::Zero | Key::Point => {
                if d.roman {
                    continue;
                }
                num_in = false;
                let predec_space = !has_zero && at == 0 && char_at(0) == Some('0') && d.post != 0;
                let relevant_point = last_relevant.is_some_and(|r| char_at(r) == Some('.'));
                if !sign_wrote
                    && (num_curr >= out_pre_spaces || has_zero && zero_start == Some(num_curr))
                    && (!predec_space || relevant_point)
                {
                    match anchored {
                        Some(AnchoredSign::Before) => {
                            out.push(sign);
                            sign_wrote = true;
                        }
                        Some(_) => {}
                        None if bracket => {
                            out.push(if sign == '+' { ' ' } else { '<' });
                            sign_wrote = true;
                        }
                        None if sign == '+' => {
                            if !d.fill {
                                out.push(' ');
                            }
                            sign_wrote = true;
                        }
                        None => {
                            out.push('-');
                            sign_wrote = true;
                        }
                    }
                }
                if num_curr < out_pre_spaces && zero_start.is_none_or(|z| z > num_curr) {
                    if !d.fill {
                        out.push(' ');
                    }
                } else if num_curr < out_pre_spaces && zero_start.is_some_and(|z| z <= num_curr) {
                    out.push('0');
                    num_in = true;
                } else {
                    match char_at(at) {
                        // Always written: PostgreSQL leaves it out only
                        // when the last relevant digit is the point and
                        // not in fill mode, which has no relevant digit.
                        Some('.') => out.push('.'),
                        Some(c) => {
                            let predec_space =
                                !has_zero && at == 0 && char_at(0) == Some('0') && d.post != 0;
                            if last_relevant.is_some_and(|r| at > r) && key != Key::Zero {
                            } else if predec_space {
                                if !d.fill {
                                    out.push(' ');
                                } else if relevant_point {
                                    out.push('0');
                                }
                            } else {
                                out.push(c);
                                num_in = true;
                            }
                        }
                        // Past the number's digits (a point the number
                        // has none for): nothing.
                        None => {}
                    }
                    if at < num.len() {
                        at += 1;
                    }
                }
                let mut end = num_count + usize::from(out_pre_spaces > 0) + usize::from(d.decimal);
                if last_relevant.is_some_and(|r| r == at) {
                    end = num_curr;
                }
                if num_curr + 1 == end {
                    if sign_wrote && bracket {
                        out.push(if sign == '+' { ' ' } else { '>' });
                    } else if anchored == Some(AnchoredSign::After) {
                        out.push(sign);
                    }
                }
                num_curr += 1;
            }
            Key::Comma => {
                if !num_in {
                    if !d.fill {
                        out.push(' ');
                    }
                } else {
                    out.push(',');
                }
            }
            Key::Currency => out.push(' '),
            Key::Roman { lower } => {
                let r = match lower {
                    true => number.to_lowercase(),
                    false => number.to_string(),
                };
                match d.fill {
                    true => out.push_str(&r),
                    false => out.push_str(&format!("{r:>15}")),
                }
            }
            Key::Ordinal { upper } => {
                if d.roman || number.starts_with('#') || negative || d.decimal {
                    continue;
                }
                out.push_str(ordinal(number, upper));
            }
            Key::Minus => {
                if sign == '-' {
                    out.push('-');
                } else if !d.fill {
                    out.push(' ');
                }
            }
            Key::Plus => {
                if sign == '+' {
                    out.push('+');
                } else if !d.fill {
                    out.push(' ');
                }
            }
            Key::SignBoth => out.push(sign),
            Key::SignAnchored | Key::Bracket | Key::Multiply | Key::Exponent | Key::Fill => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(v: &str, f: &str) -> String {
        format_number(NumberValue::Exact(v), f).unwrap()
    }

    fn double(v: f64, f: &str) -> String {
        format_number(
            NumberValue::Float {
                value: v,
                digits: 15,
            },
            f,
        )
        .unwrap()
    }

    /// Each checked against PostgreSQL 15.
    #[test]
    fn patterns_as_postgresql_prints_them() {
        let cases: &[(&str, &str, &str)] = &[
            ("42", "FM999th", "42nd"),
            ("-42", "S99", "-42"),
            ("42", "S99", "+42"),
            ("-5", "S999", "  -5"),
            ("-5", "999S", "  5-"),
            ("5", "999MI", "  5 "),
            ("-5", "999MI", "  5-"),
            ("-5", "MI999", "-  5"),
            ("5", "PL999", "+   5"),
            ("-5", "SG999", "-  5"),
            ("-5", "999PR", "  <5>"),
            ("5", "999PR", "   5 "),
            ("1234.5", "9.99EEEE", " 1.23e+03"),
            ("-0.000123", "9.99EEEE", "-1.23e-04"),
            ("0", "9.99EEEE", " 0.00e+00"),
            ("0.5", "FM990.0", "0.5"),
            ("0.5", "FM999.999", ".5"),
            ("12", "FM999.", "12"),
            ("3", "FMRN", "III"),
            ("1994", "RN", "        MCMXCIV"),
            ("4000", "RN", "###############"),
            ("12", "99V9", " 120"),
            ("1.5", "9V99", " 150"),
            ("1234567", "9,999,999", " 1,234,567"),
            ("-1234567.891", "FM9G999G999D00", "-1,234,567.89"),
            ("11", "99th", " 11th"),
            ("12", "99TH", " 12TH"),
            ("3", "99th", "  3rd"),
            ("-3", "FM99th", "-3"),
            ("3.7", "FM9th", "4th"),
            ("123", "00000", " 00123"),
            ("123", "09999", " 00123"),
            ("123", "99099", "   123"),
            ("0", "999", "   0"),
            ("0", "FM999", "0"),
            ("0.1", "9.9", "  .1"),
            ("-0.1", "9.9", " -.1"),
            ("-0.1", "FM9.9", "-.1"),
            ("1", "L999", "    1"),
            ("12345", "99", " ##"),
            ("12.5", "99", " 13"),
            ("-12.5", "99", "-13"),
            ("125", "FM9999999999999999.00", "125.00"),
            ("100", "FM999.99", "100."),
            ("1234.5", "9999.99", " 1234.50"),
            ("0.5", "0.00", " 0.50"),
            ("-12", "999", " -12"),
            ("12", "FM999", "12"),
            ("12345", "999", " ###"),
        ];
        for (v, f, want) in cases {
            assert_eq!(&exact(v, f), want, "to_char({v}, '{f}')");
        }
        assert_eq!(double(1e20, "9.9EEEE"), " 1.0e+20");
        assert_eq!(double(1.23, "9.99"), " 1.23");
    }
}
