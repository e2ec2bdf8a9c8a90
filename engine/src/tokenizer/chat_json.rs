//! Python-compatible helpers for chat templates: `json.dumps` as Hugging Face's `tojson`
//! filter calls it (separators, indent, key order, float `repr`, string escapes) and
//! `strftime` for `strftime_now` (UTC, common directives).

use minijinja::value::ValueKind;
use minijinja::{ErrorKind, Value};

/// `json.dumps` options.
pub struct Options {
    pub indent: Option<String>,
    pub item_sep: String,
    pub key_sep: String,
    pub sort_keys: bool,
    pub ensure_ascii: bool,
}

fn err(msg: String) -> minijinja::Error {
    minijinja::Error::new(ErrorKind::InvalidOperation, msg)
}

/// Serialize like Python's `json.dumps(value, **opts)`.
pub fn dumps(value: &Value, opts: &Options) -> Result<String, minijinja::Error> {
    let mut out = String::new();
    write_value(value, opts, 0, &mut out)?;
    Ok(out)
}

fn newline(opts: &Options, level: usize, out: &mut String) {
    if let Some(ind) = &opts.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(ind);
        }
    }
}

fn write_value(
    v: &Value,
    opts: &Options,
    level: usize,
    out: &mut String,
) -> Result<(), minijinja::Error> {
    match v.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&number(v)),
        ValueKind::String => write_str(v.as_str().unwrap_or(""), opts.ensure_ascii, out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_sep);
                }
                newline(opts, level + 1, out);
                write_value(item, opts, level + 1, out)?;
            }
            newline(opts, level, out);
            out.push(']');
        }
        ValueKind::Map => {
            let mut items = Vec::new();
            for k in v.try_iter()? {
                let val = v.get_item(&k)?;
                items.push((key_string(&k)?, val));
            }
            if opts.sort_keys {
                items.sort_by(|a, b| a.0.cmp(&b.0));
            }
            if items.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (k, val)) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_sep);
                }
                newline(opts, level + 1, out);
                write_str(k, opts.ensure_ascii, out);
                out.push_str(&opts.key_sep);
                write_value(val, opts, level + 1, out)?;
            }
            newline(opts, level, out);
            out.push('}');
        }
        kind => {
            return Err(err(format!(
                "tojson: Object of kind {kind} is not JSON serializable"
            )));
        }
    }
    Ok(())
}

fn key_string(k: &Value) -> Result<String, minijinja::Error> {
    match k.kind() {
        ValueKind::String => Ok(k.as_str().unwrap_or("").to_owned()),
        ValueKind::Number => Ok(number(k)),
        ValueKind::Bool => Ok(if k.is_true() { "true" } else { "false" }.to_owned()),
        ValueKind::None => Ok("null".to_owned()),
        kind => Err(err(format!(
            "tojson: keys must be str, int, float, bool or None, not {kind}"
        ))),
    }
}

fn number(v: &Value) -> String {
    if v.is_integer() {
        return v.to_string();
    }
    match f64::try_from(v.clone()) {
        Ok(f) => float_repr(f),
        Err(_) => v.to_string(),
    }
}

/// Python's `repr(float)`: shortest round-trip digits, scientific outside [1e-4, 1e16).
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.to_owned();
    }
    let sci = format!("{:e}", f.abs());
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mant.chars().filter(char::is_ascii_digit).collect();
    let sign = if f < 0.0 { "-" } else { "" };
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let e = exp as usize;
            let (int, frac) = if digits.len() > e + 1 {
                (digits[..e + 1].to_owned(), digits[e + 1..].to_owned())
            } else {
                (format!("{digits:0<width$}", width = e + 1), "0".to_owned())
            };
            format!("{sign}{int}.{frac}")
        } else {
            format!("{sign}0.{}{digits}", "0".repeat((-exp - 1) as usize))
        }
    } else {
        let (first, rest) = digits.split_at(1.min(digits.len()));
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{first}{frac}e{esign}{:02}", exp.abs())
    }
}

fn write_str(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ensure_ascii && (c as u32) > 0x7E => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

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
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// (year, month 1..=12, day 1..=31) of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// C `strftime` over UTC for the directives chat templates use
/// (`%Y %y %m %d %e %j %H %I %M %S %p %B %b %h %A %a %%`); others are copied as written.
pub fn strftime(fmt: &str, unix_seconds: i64) -> String {
    let days = unix_seconds.div_euclid(86_400);
    let secs = unix_seconds.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss) = (secs / 3600, secs / 60 % 60, secs % 60);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let month = MONTHS.get(m as usize - 1).copied().unwrap_or("");
    let day_name = DAYS.get(weekday).copied().unwrap_or("");
    let yday = days - {
        // days since epoch of Jan 1st of `y`
        let mut jan1 = days;
        while civil_from_days(jan1 - 1).0 == y {
            jan1 -= 1;
        }
        jan1
    } + 1;
    let mut out = String::new();
    let mut it = fmt.chars();
    while let Some(c) = it.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y.rem_euclid(100))),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('e') => out.push_str(&format!("{d:2}")),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('H') => out.push_str(&format!("{hh:02}")),
            Some('I') => out.push_str(&format!("{:02}", if hh % 12 == 0 { 12 } else { hh % 12 })),
            Some('M') => out.push_str(&format!("{mm:02}")),
            Some('S') => out.push_str(&format!("{ss:02}")),
            Some('p') => out.push_str(if hh < 12 { "AM" } else { "PM" }),
            Some('B') => out.push_str(month),
            Some('b' | 'h') => out.push_str(month.get(..3).unwrap_or("")),
            Some('A') => out.push_str(day_name),
            Some('a') => out.push_str(day_name.get(..3).unwrap_or("")),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        for (f, want) in [
            (1.0, "1.0"),
            (2.5, "2.5"),
            (123.0, "123.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (123456789.125, "123456789.125"),
            (-0.5, "-0.5"),
            (0.1, "0.1"),
            (1e22, "1e+22"),
            (1.2345e-7, "1.2345e-07"),
            (9999999999999998.0, "9999999999999998.0"),
        ] {
            assert_eq!(float_repr(f), want, "{f}");
        }
    }

    #[test]
    fn strftime_known_dates() {
        // 2024-02-29 13:05:09 UTC, a Thursday.
        let t = 1_709_211_909;
        assert_eq!(
            strftime("%Y-%m-%d %H:%M:%S %a %A %b %B %j %y %I%p %%", t),
            "2024-02-29 13:05:09 Thu Thursday Feb February 060 24 01PM %"
        );
        assert_eq!(strftime("%d %b %Y", 0), "01 Jan 1970");
    }
}
