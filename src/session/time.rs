//! Timestamps as the agent, a JavaScript program, writes and reads them:
//! formatting epoch milliseconds as `toISOString` does
//! (`2026-02-16T10:20:30.000Z`) and parsing a timestamp to epoch
//! milliseconds as `Date.parse` (or `new Date(ts).getTime()`) does for the
//! ISO family of strings, and reading an entry's `timestamp` member of any
//! JSON type as `new Date(value)` does. docs/engine.md ("Timestamps") says what we match
//! and where we deliberately do not; `fixtures/date-parse/` pins both
//! against Node.

use std::time::{SystemTime, UNIX_EPOCH};

const DAY_MS: i64 = 86_400_000;

/// 400 Gregorian years: the calendar repeats exactly after them.
const ERA_MS: i64 = 146_097 * DAY_MS;

/// The largest distance from the epoch a JavaScript `Date` can hold
/// (100 million days either side).
const JS_MAX_MS: i64 = 8_640_000_000_000_000;

/// Days since 1970-01-01 of a proleptic Gregorian date. A day past the end
/// of its month rolls over into the next (February 30 is March 2), as in
/// JavaScript.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Formats epoch milliseconds as `toISOString` does:
/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for the years 0 to 9999, and a signed
/// six-digit year (`+010000-01-01T00:00:00.000Z`, `-000001-…`) outside
/// them. jiff does the calendar on the same instant moved by whole 400-year
/// eras into its range; the year is then moved back.
pub fn format_iso_ms(ms: i64) -> String {
    let eras = ms.div_euclid(ERA_MS);
    let epoch = jiff::civil::date(1970, 1, 1).at(0, 0, 0, 0);
    let at = epoch.saturating_add(jiff::SignedDuration::from_millis(ms.rem_euclid(ERA_MS)));
    let text = format!("{at:.3}Z");
    let year = i64::from(at.year()) + 400 * eras;
    let rest = &text[4..];
    if (0..=9999).contains(&year) {
        format!("{year:04}{rest}")
    } else {
        let sign = if year < 0 { '-' } else { '+' };
        format!("{sign}{:06}{rest}", year.unsigned_abs())
    }
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The current instant as the reference writes it.
pub fn now_iso() -> String {
    format_iso_ms(now_ms())
}

/// Reads a timestamp left to right.
struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn done(&self) -> bool {
        self.i == self.b.len()
    }

    /// Takes the next byte if it is one of `set`.
    fn eat(&mut self, set: &[u8]) -> Option<u8> {
        let c = *self.b.get(self.i)?;
        set.contains(&c).then(|| {
            self.i += 1;
            c
        })
    }

    /// Exactly `n` ASCII digits as a number.
    fn number(&mut self, n: usize) -> Option<i64> {
        let digits = self.b.get(self.i..self.i + n)?;
        let value = digits.iter().try_fold(0i64, |v, &c| {
            c.is_ascii_digit().then(|| v * 10 + i64::from(c - b'0'))
        })?;
        self.i += n;
        Some(value)
    }

    /// One or more digits after a decimal point: the milliseconds (the
    /// first three digits; the rest are cut off, never rounded) and whether
    /// any digit is not zero.
    fn fraction(&mut self) -> Option<(i64, bool)> {
        let start = self.i;
        while self.b.get(self.i).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
        }
        let digits = &self.b[start..self.i];
        if digits.is_empty() {
            return None;
        }
        let ms = (0..3).fold(0, |v, k| {
            v * 10 + digits.get(k).map_or(0, |&c| i64::from(c - b'0'))
        });
        Some((ms, digits.iter().any(|&c| c != b'0')))
    }
}

/// Parses a timestamp of the ISO family to epoch milliseconds, giving what
/// `Date.parse` gives (docs/engine.md, "Timestamps"):
///
/// - a date `YYYY`, `YYYY-MM` or `YYYY-MM-DD`, the year also as a signed
///   six-digit number (`+012026`, `-000001`; not `-000000`); a day up to 31
///   rolls over past its month's end;
/// - optionally a time after `T`, `t` or a space: `HH:mm`, `HH:mm:ss` or
///   `HH:mm:ss.` and any number of digits; `24:00` (all zeros after it) is
///   the end of the day;
/// - then `Z`, `z`, `±HH:mm` or `±HHmm`; a date-time without one is read
///   as UTC (JavaScript takes the local zone there);
/// - within 8.64e15 ms of the epoch, the range of a JavaScript `Date`.
///
/// `None` for anything else, where JavaScript gives `NaN` or falls back to
/// its implementation-defined parser of other forms.
pub fn parse_iso_ms(s: &str) -> Option<i64> {
    let mut p = Cursor {
        b: s.as_bytes(),
        i: 0,
    };
    let year = match p.eat(b"+-") {
        Some(sign) => {
            let y = p.number(6)?;
            match sign {
                b'+' => y,
                _ if y == 0 => return None,
                _ => -y,
            }
        }
        None => p.number(4)?,
    };
    let (mut month, mut day) = (1, 1);
    if p.eat(b"-").is_some() {
        month = p.number(2)?;
        if p.eat(b"-").is_some() {
            day = p.number(2)?;
        }
    }
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let mut ms = days_from_civil(year, month as u32, day as u32) * DAY_MS;
    if !p.done() {
        p.eat(b"Tt ")?;
        let hour = p.number(2)?;
        p.eat(b":")?;
        let minute = p.number(2)?;
        let (mut second, mut milli, mut nonzero_fraction) = (0, 0, false);
        if p.eat(b":").is_some() {
            second = p.number(2)?;
            if p.eat(b".").is_some() {
                (milli, nonzero_fraction) = p.fraction()?;
            }
        }
        let end_of_day = hour == 24 && minute == 0 && second == 0 && !nonzero_fraction;
        if !(hour < 24 || end_of_day) || minute > 59 || second > 59 {
            return None;
        }
        ms += hour * 3_600_000 + minute * 60_000 + second * 1000 + milli;
        if let Some(sign) = p.eat(b"Zz+-") {
            if sign == b'+' || sign == b'-' {
                let oh = p.number(2)?;
                p.eat(b":");
                let om = p.number(2)?;
                if oh > 23 || om > 59 {
                    return None;
                }
                let offset = (oh * 60 + om) * 60_000;
                ms += if sign == b'+' { -offset } else { offset };
            }
        }
        if !p.done() {
            return None;
        }
    }
    (-JS_MAX_MS..=JS_MAX_MS).contains(&ms).then_some(ms)
}

/// The time JavaScript's `new Date(value).getTime()` gives for an entry's
/// `timestamp` member, from the member's raw JSON text (docs/engine.md,
/// "Timestamps"); `None` where it gives `NaN`.
///
/// - a string: [`parse_iso_ms`];
/// - a number: epoch milliseconds, truncated towards zero, `None` beyond
///   8.64e15 ms (JavaScript's `TimeClip`);
/// - `null` and `false`: 0; `true`: 1;
/// - an array: its text as `String(array)` writes it (elements joined by
///   commas), parsed as a string;
/// - an object: `None` (its text is `[object Object]`).
pub fn js_date_ms(raw: &str) -> Option<i64> {
    let raw = raw.trim();
    match raw.as_bytes().first()? {
        b'"' => parse_iso_ms(&crate::session::json::decode_json_string(raw)?),
        b'[' => parse_iso_ms(&js_array_text(raw)?),
        b'{' => None,
        _ => match raw {
            "null" | "false" => Some(0),
            "true" => Some(1),
            number => {
                let v: f64 = number.parse().ok()?;
                // `as` saturates, but the range check comes first.
                (v.is_finite() && v.abs() <= JS_MAX_MS as f64).then(|| v.trunc() as i64)
            }
        },
    }
}

/// `String(array)` for a JSON array's raw text, as far as it can be a
/// timestamp of the ISO family: `None` for an array of more than one
/// element (its text has a comma, which no ISO timestamp has), for objects
/// (`[object Object]`, or a `TypeError` when a member named `toString`
/// shadows the method) and for numbers that are not integers below 1e21
/// (JavaScript writes those with a `.` or an exponent).
fn js_array_text(raw: &str) -> Option<String> {
    let items: Vec<&serde_json::value::RawValue> = serde_json::from_str(raw).ok()?;
    let [item] = items.as_slice() else {
        // `[]` is the empty string, not a time either.
        return None;
    };
    let text = item.get().trim();
    match text.as_bytes().first()? {
        b'"' => crate::session::json::decode_json_string(text).map(|s| s.into_owned()),
        b'[' => js_array_text(text),
        b'{' => None,
        _ => match text {
            "null" => Some(String::new()),
            "true" | "false" => Some(text.to_string()),
            number => {
                let v: f64 = number.parse().ok()?;
                (v.fract() == 0.0 && v.abs() < 1e21).then(|| format!("{}", v as i128))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row of `fixtures/date-parse/baseline.jsonl` (made by
    /// `scripts/date_baseline.mjs`): what JavaScript gives for `input`.
    #[derive(serde::Deserialize)]
    struct Row {
        group: String,
        input: Option<String>,
        ms: Option<i64>,
        iso: Option<String>,
    }

    #[derive(serde::Deserialize)]
    struct Inputs {
        groups: Vec<Group>,
        format: Vec<i64>,
    }

    #[derive(serde::Deserialize)]
    struct Group {
        name: String,
        ours: String,
        inputs: Vec<String>,
    }

    fn fixture(name: &str) -> String {
        let path = format!("{}/fixtures/date-parse/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// One row of `fixtures/timestamps/values.jsonl` (made by
    /// `scripts/reference/timestamps.ts`): what `new Date(value).getTime()`
    /// gives in the agent's runtime for a `timestamp` member's JSON text
    /// (`null`: the member is absent).
    #[derive(serde::Deserialize)]
    struct DateRow {
        json: Option<String>,
        followed: bool,
        ms: Option<i64>,
        throws: bool,
    }

    /// `js_date_ms` gives the reference's time for every followed row, and
    /// no time for the rows it deliberately does not follow (legacy strings,
    /// also as an array's text, and an object whose `toString` member makes
    /// JavaScript throw): docs/engine.md, "Timestamps".
    #[test]
    fn reads_timestamp_members_as_the_reference_does() {
        let path = format!(
            "{}/fixtures/timestamps/values.jsonl",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let rows: Vec<DateRow> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(
            rows.len() > 40 && rows.iter().any(|r| !r.followed) && rows.iter().any(|r| r.throws)
        );
        let mut wrong = Vec::new();
        for row in &rows {
            let got = row.json.as_deref().and_then(js_date_ms);
            let want = if row.followed { row.ms } else { None };
            if got != want {
                wrong.push(format!("{:?}: {got:?}, want {want:?}", row.json));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        // Whitespace around the raw text (as a serde raw value may keep it).
        assert_eq!(js_date_ms(" 12.5 "), Some(12));
        assert_eq!(js_date_ms("[ \"2026\" ]"), Some(1_767_225_600_000));
    }

    /// Every row of the Node baseline: `parse_iso_ms` gives what
    /// `Date.parse` gives for the ISO family and nothing for the strings
    /// V8 hands to its legacy parser (docs/engine.md, "Timestamps"), and
    /// `format_iso_ms` gives what `toISOString` gives.
    #[test]
    fn matches_the_node_baseline() {
        let inputs: Inputs = serde_json::from_str(&fixture("inputs.json")).unwrap();
        let rows: Vec<Row> = fixture("baseline.jsonl")
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        // The baseline was made from these inputs (regenerate it after
        // editing them).
        let made_from: Vec<(&str, &str)> = inputs
            .groups
            .iter()
            .flat_map(|g| g.inputs.iter().map(|i| (g.name.as_str(), i.as_str())))
            .collect();
        let parse_rows: Vec<&Row> = rows.iter().filter(|r| r.input.is_some()).collect();
        assert_eq!(
            made_from,
            parse_rows
                .iter()
                .map(|r| (r.group.as_str(), r.input.as_deref().unwrap()))
                .collect::<Vec<_>>(),
            "fixtures/date-parse/baseline.jsonl is not made from inputs.json"
        );
        let formats: Vec<i64> = rows
            .iter()
            .filter(|r| r.input.is_none())
            .filter_map(|r| r.ms)
            .collect();
        assert_eq!(inputs.format, formats);

        let mut wrong = Vec::new();
        for row in &rows {
            if let Some(input) = &row.input {
                let ours = &inputs
                    .groups
                    .iter()
                    .find(|g| g.name == row.group)
                    .unwrap()
                    .ours;
                let want = match ours.as_str() {
                    "node" => row.ms,
                    "null" => None,
                    other => panic!(
                        "group {}: ours must be node or null, not {other}",
                        row.group
                    ),
                };
                let got = parse_iso_ms(input);
                if got != want {
                    wrong.push(format!(
                        "parse {input:?} ({}): {got:?}, want {want:?}",
                        row.group
                    ));
                }
            }
            if let (Some(ms), Some(iso)) = (row.ms, &row.iso) {
                let got = format_iso_ms(ms);
                if &got != iso {
                    wrong.push(format!("format {ms}: {got}, want {iso}"));
                }
                // What toISOString writes reads back as the same instant.
                if parse_iso_ms(iso) != Some(ms) {
                    wrong.push(format!("parse {iso:?}: {:?}, want {ms}", parse_iso_ms(iso)));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "{} differences:\n{}",
            wrong.len(),
            wrong.join("\n")
        );
    }

    #[test]
    fn parses_reference_timestamps() {
        assert_eq!(
            parse_iso_ms("2026-12-02T16:10:09.019Z"),
            Some(1_796_227_809_019)
        );
        assert_eq!(
            parse_iso_ms("2025-01-10T08:00:06.000Z"),
            Some(1_736_496_006_000)
        );
        assert_eq!(parse_iso_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_iso_ms("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(parse_iso_ms("1970-01-01"), Some(0));
        assert_eq!(parse_iso_ms("not a date"), None);
        assert_eq!(parse_iso_ms("2026-13-01T00:00:00Z"), None);
    }

    #[test]
    fn formats_round_trip() {
        for ms in [0, 1_796_227_809_019, 1_736_496_006_000, 951_782_400_123] {
            assert_eq!(parse_iso_ms(&format_iso_ms(ms)), Some(ms));
        }
        assert_eq!(format_iso_ms(1_796_227_809_019), "2026-12-02T16:10:09.019Z");
        // What the hand-written formatter gave before jiff did it.
        assert_eq!(format_iso_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_iso_ms(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(format_iso_ms(951_782_400_123), "2000-02-29T00:00:00.123Z");
        let year_zero = parse_iso_ms("0000-03-01T00:00:00.000Z").unwrap();
        assert_eq!(format_iso_ms(year_zero), "0000-03-01T00:00:00.000Z");
        let last = parse_iso_ms("9999-12-31T23:59:59.999Z").unwrap();
        assert_eq!(format_iso_ms(last), "9999-12-31T23:59:59.999Z");
        // Past 9999 as toISOString writes it (a six-digit year).
        assert_eq!(format_iso_ms(last + 1), "+010000-01-01T00:00:00.000Z");
    }
}
