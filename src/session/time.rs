//! ISO-8601 timestamps: formatting "now" as the reference writes it
//! (`2026-02-16T10:20:30.000Z`) and parsing timestamps to epoch
//! milliseconds, as `new Date(ts).getTime()` does for ISO strings.

use std::time::{SystemTime, UNIX_EPOCH};

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Formats epoch milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ` (what
/// JavaScript's `toISOString` gives for years 0 to 9999). An instant past
/// the year 9999 (reachable only through a zone offset at its very end) is
/// formatted as the last millisecond of 9999.
pub fn format_iso_ms(ms: i64) -> String {
    let epoch = jiff::civil::date(1970, 1, 1).at(0, 0, 0, 0);
    let at = epoch.saturating_add(jiff::SignedDuration::from_millis(ms));
    format!("{at:.3}Z")
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The current instant as the reference writes it.
pub fn now_iso() -> String {
    format_iso_ms(now_ms())
}

fn digits(s: &[u8]) -> Option<i64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0i64, |n, &c| {
        if c.is_ascii_digit() {
            n.checked_mul(10)?.checked_add(i64::from(c - b'0'))
        } else {
            None
        }
    })
}

/// Parses an ISO-8601 date-time (`YYYY-MM-DD`, optionally `THH:MM`,
/// `:SS`, `.fraction`, and `Z` or `±HH:MM`) to epoch milliseconds. A
/// date-time without a zone is taken as UTC. `None` for anything else
/// (where JavaScript would give `NaN`).
pub fn parse_iso_ms(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let y = digits(&b[0..4])?;
    let mo = digits(&b[5..7])? as u32;
    let d = digits(&b[8..10])? as u32;
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) {
        return None;
    }
    let mut ms = days_from_civil(y, mo, d) * 86_400_000;
    let rest = &b[10..];
    if rest.is_empty() {
        return Some(ms);
    }
    if rest[0] != b'T' || rest.len() < 6 || rest[3] != b':' {
        return None;
    }
    let h = digits(&rest[1..3])?;
    let mi = digits(&rest[4..6])?;
    if h > 24 || mi > 59 {
        return None;
    }
    ms += h * 3_600_000 + mi * 60_000;
    let mut i = 6;
    if rest.get(i) == Some(&b':') {
        let sec = digits(rest.get(i + 1..i + 3)?)?;
        if sec > 59 {
            return None;
        }
        ms += sec * 1000;
        i += 3;
        if rest.get(i) == Some(&b'.') {
            let start = i + 1;
            let mut end = start;
            while end < rest.len() && rest[end].is_ascii_digit() {
                end += 1;
            }
            if end == start {
                return None;
            }
            let frac = &rest[start..end];
            let mut milli = 0i64;
            for k in 0..3 {
                milli = milli * 10 + frac.get(k).map(|c| (c - b'0') as i64).unwrap_or(0);
            }
            ms += milli;
            i = end;
        }
    }
    match &rest[i..] {
        [] | [b'Z'] => Some(ms),
        [sign @ (b'+' | b'-'), oh1, oh2, b':', om1, om2] => {
            let oh = digits(&[*oh1, *oh2])?;
            let om = digits(&[*om1, *om2])?;
            let offset = (oh * 60 + om) * 60_000;
            Some(if *sign == b'+' {
                ms - offset
            } else {
                ms + offset
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(format_iso_ms(last + 1), "9999-12-31T23:59:59.999Z");
    }
}
