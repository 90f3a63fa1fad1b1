//! Entry points shared by the fuzz targets of the control-file parsers
//! (`fuzz/`) and the smoke tests of the normal suite.

use crate::fs::control::{parse_label_commands, parse_leaf_commands, AppendStream, LabelCommand};
use crate::session::labels;

/// Feeds `data` to an [`AppendStream`] whole and again split at `splits`;
/// when both succeed they must yield the same pieces, each starting with
/// `{` (the splitter only balances brackets; the JSON parse that follows
/// rejects a piece that is not an object).
pub fn exercise_append_stream(data: &[u8], splits: &[usize]) {
    let collect = |pieces: &[&[u8]]| -> Option<Vec<Vec<u8>>> {
        let mut stream = AppendStream::with_cap(1 << 16);
        let mut out = Vec::new();
        for piece in pieces {
            stream
                .feed(piece, &mut |obj| {
                    assert!(obj.starts_with(b"{"), "a piece starts an object");
                    out.push(obj.to_vec());
                    Ok(())
                })
                .ok()?;
        }
        Some(out)
    };
    let whole = collect(&[data]);
    let mut cuts: Vec<usize> = splits.iter().map(|s| s % (data.len() + 1)).collect();
    cuts.sort_unstable();
    let mut pieces = Vec::new();
    let mut last = 0;
    for c in cuts {
        pieces.push(&data[last..c]);
        last = c;
    }
    pieces.push(&data[last..]);
    let split = collect(&pieces);
    if let (Some(a), Some(b)) = (whole, split) {
        assert_eq!(a, b, "splitting the writes changes nothing");
    }
}

/// Parses arbitrary bytes as `leaf` and `labels` commands.
pub fn exercise_commands(data: &[u8]) {
    if let Ok(cmds) = parse_leaf_commands(data) {
        assert!(cmds.len() <= data.iter().filter(|&&b| b == b'\n').count() + 1);
    }
    if let Ok(cmds) = parse_label_commands(data) {
        for cmd in cmds {
            // Fields are unescaped, so an id may hold a space or a tab;
            // what the table prints for a command reads back as that
            // command ("labels" in docs/filesystem.md).
            let line = match &cmd {
                LabelCommand::Set { id, label } => {
                    format!("{}\t{}", labels::escape_id(id), labels::escape_label(label))
                }
                LabelCommand::Clear { id } => labels::escape_id(id),
            };
            assert_eq!(
                labels::parse_line(&line).as_ref(),
                Some(&cmd),
                "the table's line {line:?} reads back as the command"
            );
        }
    }
}
