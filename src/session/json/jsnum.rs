//! JSON text of a new entry as the agent writes it: `JSON.stringify`'s
//! numbers. The agent is JavaScript, where every number is a double
//! printed by `Number.prototype.toString`: `1e2` is written `100`, `1.5e3`
//! `1500`, `-0` `0`, `2**64` `18446744073709552000`, and an integer beyond
//! 2^53 loses its last digits. `serde_json` prints a double that holds an
//! integer as `100.0` and keeps big integers exact, so new entries would
//! differ from what the agent writes for the same input (stored lines are
//! never re-serialized: their bytes are kept).

use std::io;

use serde::Serialize;
use serde_json::ser::Formatter;
use serde_json::Value;

/// The largest integer a double holds exactly (2^53).
const EXACT: u64 = 1 << 53;

/// `serde_json`'s compact output with JavaScript's numbers.
struct JsNumbers;

impl Formatter for JsNumbers {
    fn write_f64<W: ?Sized + io::Write>(&mut self, w: &mut W, value: f64) -> io::Result<()> {
        w.write_all(ryu_js::Buffer::new().format(value).as_bytes())
    }

    fn write_f32<W: ?Sized + io::Write>(&mut self, w: &mut W, value: f32) -> io::Result<()> {
        self.write_f64(w, f64::from(value))
    }

    fn write_i64<W: ?Sized + io::Write>(&mut self, w: &mut W, value: i64) -> io::Result<()> {
        if value.unsigned_abs() > EXACT {
            // As JavaScript reads it: the nearest double.
            return self.write_f64(w, value as f64);
        }
        w.write_all(value.to_string().as_bytes())
    }

    fn write_u64<W: ?Sized + io::Write>(&mut self, w: &mut W, value: u64) -> io::Result<()> {
        if value > EXACT {
            return self.write_f64(w, value as f64);
        }
        w.write_all(value.to_string().as_bytes())
    }
}

/// `value` as one line of JSON with JavaScript's numbers (strings,
/// objects and arrays as `serde_json` writes them compactly, which is what
/// `JSON.stringify` writes for text without lone surrogates).
pub(crate) fn to_js_line(value: &Value) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, JsNumbers);
    if value.serialize(&mut ser).is_err() {
        // Writing to a vector does not fail, and a `Value` always
        // serializes; keep serde's own text if it ever did.
        return value.to_string();
    }
    String::from_utf8(out).unwrap_or_else(|_| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn js(text: &str) -> String {
        to_js_line(&serde_json::from_str::<Value>(text).unwrap())
    }

    #[test]
    fn numbers_are_written_as_javascript_writes_them() {
        // Each pair: input, then what `JSON.stringify(JSON.parse(input))`
        // gives in JavaScript.
        for (input, want) in [
            ("1e2", "100"),
            ("1.50e3", "1500"),
            ("-0", "0"),
            ("-0.0", "0"),
            ("0.1", "0.1"),
            ("1.5", "1.5"),
            ("123", "123"),
            ("-7", "-7"),
            ("1e21", "1e+21"),
            ("1e-7", "1e-7"),
            ("0.000001", "0.000001"),
            ("18446744073709551616", "18446744073709552000"),
            ("9007199254740993", "9007199254740992"),
            ("-9007199254740993", "-9007199254740992"),
            ("12345678901234567890123", "1.2345678901234568e+22"),
        ] {
            assert_eq!(js(input), want, "{input}");
        }
    }

    #[test]
    fn everything_else_is_serde_compact() {
        let text = r#"{"a":[1,2.5,{"b":"x\n\u001b"}],"c":null,"d":true}"#;
        assert_eq!(js(text), text);
    }
}
