//! Re-indenting JSON text like `JSON.stringify(v, null, 2)` without
//! decoding its strings.

use super::scan::find_string_stop;

/// Re-indents compact or pretty JSON text like `JSON.stringify(v, null, 2)`
/// without decoding strings, so lone-surrogate escapes survive. The input
/// must be valid JSON.
pub fn pretty(text: &str) -> String {
    let mut out = Vec::with_capacity(text.len() + text.len() / 4);
    // Never fails: the sink only collects.
    let _ = pretty_into(text, 0, &mut out, usize::MAX, &mut |_| Ok(()));
    // The output is the input's bytes plus ASCII punctuation, split only
    // outside strings and at ASCII bytes inside them.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// [`pretty`] written to `w` in pieces of about 64 KiB.
pub(crate) fn write_pretty(text: &str, w: &mut dyn std::io::Write) -> std::io::Result<()> {
    const PIECE: usize = 64 * 1024;
    let mut out = Vec::with_capacity(PIECE + 1024);
    pretty_into(text, 0, &mut out, PIECE, &mut |buf| {
        w.write_all(buf)?;
        buf.clear();
        Ok(())
    })?;
    w.write_all(&out)
}

/// Appends the pretty form of a piece of compact JSON text to `out`, as
/// [`pretty`] prints it at nesting depth `indent`; returns the depth at its
/// end. Printing a text in pieces, each piece starting where the previous
/// one ended (and cut between tokens, never right after an opening bracket
/// whose closing one follows), gives the same bytes as printing it whole:
/// the mount extends a rendered context this way.
pub fn pretty_append(text: &str, indent: usize, out: &mut Vec<u8>) -> usize {
    // Never fails: the sink only collects.
    pretty_into(text, indent, out, usize::MAX, &mut |_| Ok(())).unwrap_or(indent)
}

const SPACES: &[u8; 128] = &[b' '; 128];

fn pretty_into(
    text: &str,
    indent: usize,
    out: &mut Vec<u8>,
    flush_at: usize,
    flush: &mut dyn FnMut(&mut Vec<u8>) -> std::io::Result<()>,
) -> std::io::Result<usize> {
    let bytes = text.as_bytes();
    let mut indent = indent;
    let mut i = 0;
    let newline = |out: &mut Vec<u8>, indent: usize| {
        out.push(b'\n');
        let mut n = indent * 2;
        while n > 0 {
            let k = n.min(SPACES.len());
            out.extend_from_slice(&SPACES[..k]);
            n -= k;
        }
    };
    while i < bytes.len() {
        if out.len() >= flush_at {
            flush(out)?;
        }
        let b = bytes[i];
        match b {
            b'"' => {
                // Copy the string up to its closing quote.
                let start = i;
                i += 1;
                loop {
                    i = find_string_stop(bytes, i);
                    match bytes.get(i) {
                        None => break,
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(b'\\') => i += 2,
                        // control characters, non-ASCII: part of the string
                        Some(_) => i += 1,
                    }
                }
                let end = i.min(bytes.len());
                out.extend_from_slice(&bytes[start..end]);
                continue;
            }
            b'{' | b'[' => {
                let close = if b == b'{' { b'}' } else { b']' };
                let mut j = i + 1;
                while j < bytes.len() && bytes[j].is_ascii_whitespace() {
                    j += 1;
                }
                if j < bytes.len() && bytes[j] == close {
                    out.push(b);
                    out.push(close);
                    i = j + 1;
                    continue;
                }
                out.push(b);
                indent += 1;
                newline(out, indent);
            }
            b'}' | b']' => {
                indent = indent.saturating_sub(1);
                newline(out, indent);
                out.push(b);
            }
            b',' => {
                out.push(b',');
                newline(out, indent);
            }
            b':' => out.extend_from_slice(b": "),
            b' ' | b'\t' | b'\n' | b'\r' => {}
            _ => {
                // numbers and literals: copy the run
                let start = i;
                while i < bytes.len()
                    && !matches!(
                        bytes[i],
                        b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r' | b':'
                    )
                {
                    i += 1;
                }
                out.extend_from_slice(&bytes[start..i]);
                continue;
            }
        }
        i += 1;
    }
    Ok(indent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretty_copies_strings_with_escapes_and_non_ascii() {
        let text = r#"{"a":"x\"y\\","b":"café {[,:]} a long string that spans more than sixteen bytes \n","c":["\\"]}"#;
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(pretty(text), serde_json::to_string_pretty(&v).unwrap());
        let mut streamed = Vec::new();
        write_pretty(text, &mut streamed).unwrap();
        assert_eq!(String::from_utf8(streamed).unwrap(), pretty(text));
        // Invalid input must not panic.
        for bad in [r#"{"a":"x\"#, r#""\"#, "\\", "{\"a"] {
            let _ = pretty(bad);
        }
    }

    #[test]
    fn pretty_matches_json_stringify_layout() {
        let text = r#"{"a":[],"b":{},"c":[1,{"d":"x,y:{"}],"e":null}"#;
        let expected = "{\n  \"a\": [],\n  \"b\": {},\n  \"c\": [\n    1,\n    {\n      \"d\": \"x,y:{\"\n    }\n  ],\n  \"e\": null\n}";
        assert_eq!(pretty(text), expected);
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(pretty(text), serde_json::to_string_pretty(&v).unwrap());
    }
}
