//! Parsers of the control files' commands (`docs/filesystem.md`, "Control files").
//!
//! * `append` takes a stream of JSON objects. [`AppendStream`] splits the
//!   bytes of successive writes into objects without parsing them (it only
//!   follows strings, escapes and nesting) and hands each complete object
//!   to the caller at once, in order. One object may span many writes and
//!   one write may hold many objects. An object larger than
//!   [`MAX_APPEND_COMMAND`] is refused with `EFBIG`.
//! * `leaf` and `labels` take newline-separated commands. A `leaf` write's
//!   last piece without a newline is a command at once, and the next write
//!   of the same open file continues it ([`LeafLine`]); a `labels` line
//!   waits for its newline, or for the close ([`PartialLine`]). A command
//!   line longer than [`MAX_LINE_COMMAND`] is refused with `EFBIG`.

use std::borrow::Cow;

use crate::session::{Error, Result};

/// The largest single object accepted by `append` (32 MiB). A 3 MB entry
/// (bigger than any one FUSE write) fits easily; the engine then cuts
/// strings over 500,000 characters (`docs/format.md`, "Size limits on write").
pub(crate) const MAX_APPEND_COMMAND: usize = 32 << 20;

/// The longest `leaf` or `labels` command line (64 KiB).
pub(crate) const MAX_LINE_COMMAND: usize = 64 << 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between objects: only whitespace is allowed.
    Between,
    /// Inside an object.
    Object,
    /// Inside an object that exceeded the cap: bytes are dropped until it
    /// closes.
    Skipping,
}

/// The `append` stream of one open file: the part of an object received so
/// far.
#[derive(Debug)]
pub(crate) struct AppendStream {
    buf: Vec<u8>,
    state: State,
    depth: usize,
    in_string: bool,
    escaped: bool,
    cap: usize,
    /// Where each object the last fed write executed (and that is still
    /// taken) ends in it: the last is [`AppendStream::accepted`].
    ends: Vec<usize>,
}

impl Default for AppendStream {
    fn default() -> Self {
        AppendStream::new()
    }
}

impl AppendStream {
    pub(crate) fn new() -> Self {
        AppendStream::with_cap(MAX_APPEND_COMMAND)
    }

    /// A stream with another size cap (tests).
    pub(crate) fn with_cap(cap: usize) -> Self {
        AppendStream {
            buf: Vec::new(),
            state: State::Between,
            depth: 0,
            in_string: false,
            escaped: false,
            cap,
            ends: Vec::new(),
        }
    }

    /// Bytes of an incomplete object waiting for the rest of it (an
    /// oversized object being skipped was already refused and counts 0).
    pub(crate) fn pending(&self) -> usize {
        match self.state {
            State::Object => self.buf.len(),
            State::Between | State::Skipping => 0,
        }
    }

    /// How many bytes of the last write passed to [`AppendStream::feed`]
    /// were used up to the end of the last object executed. When a write
    /// fails after some of its objects were appended, the mount reports
    /// this as a short write: a writer that sends the rest again (every
    /// write-all loop does) then never appends an object twice, and the
    /// write that starts with the bad object gets the error.
    pub(crate) fn accepted(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
    }

    /// Forgets that objects of the last write were accepted: its batch
    /// was refused as a whole (`session::batch`), so none of it was used.
    pub(crate) fn refuse_accepted(&mut self) {
        self.ends.clear();
    }

    /// Only the first `n` objects the last write completed were used (its
    /// batch stopped part way, `session::batch::Appended`): the write is
    /// taken up to the end of object `n` and the rest of it, an incomplete
    /// object included, is dropped, to be sent again by the writer.
    pub(crate) fn accept_only(&mut self, n: usize) {
        self.ends.truncate(n);
        self.reset();
    }

    /// Drops any incomplete object.
    pub(crate) fn reset(&mut self) {
        self.buf = Vec::new();
        self.state = State::Between;
        self.depth = 0;
        self.in_string = false;
        self.escaped = false;
    }

    /// Feeds the bytes of one write. Each object completed by them is passed
    /// to `exec` as soon as its closing brace is seen. Stops at the first
    /// error — from `exec`, malformed input between objects, or an object
    /// over the cap — and returns it; the rest of this write is dropped then
    /// (objects executed before stay executed). An oversized object makes
    /// this write and every later one up to the object's end fail with
    /// [`Error::TooLarge`].
    pub(crate) fn feed(
        &mut self,
        data: &[u8],
        exec: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        self.ends.clear();
        let mut i = 0;
        while i < data.len() {
            match self.state {
                State::Between => {
                    let b = data[i];
                    i += 1;
                    match b {
                        b' ' | b'\t' | b'\n' | b'\r' => {}
                        b'{' => {
                            self.buf.clear();
                            self.buf.push(b);
                            self.state = State::Object;
                            self.depth = 1;
                            self.in_string = false;
                            self.escaped = false;
                        }
                        other => {
                            self.reset();
                            return Err(Error::Invalid(format!(
                                "append expects JSON objects; found {} where an object should start",
                                describe_byte(other)
                            )));
                        }
                    }
                }
                State::Object | State::Skipping => {
                    let skipping = self.state == State::Skipping;
                    let start = i;
                    let mut closed = false;
                    while i < data.len() {
                        let b = data[i];
                        i += 1;
                        if self.scan(b) {
                            closed = true;
                            break;
                        }
                    }
                    if !skipping {
                        self.buf.extend_from_slice(&data[start..i]);
                    }
                    if !skipping && self.buf.len() > self.cap {
                        let size = self.buf.len();
                        self.buf = Vec::new();
                        if closed {
                            self.state = State::Between;
                        } else {
                            self.state = State::Skipping;
                        }
                        return Err(too_large(size, self.cap));
                    }
                    if !closed {
                        if skipping {
                            return Err(too_large(self.cap + 1, self.cap));
                        }
                        return Ok(());
                    }
                    self.state = State::Between;
                    if skipping {
                        return Err(too_large(self.cap + 1, self.cap));
                    }
                    let object = std::mem::take(&mut self.buf);
                    if let Err(e) = exec(&object) {
                        self.reset();
                        return Err(e);
                    }
                    self.ends.push(i);
                    self.buf = object;
                    self.buf.clear();
                    if self.buf.capacity() > (1 << 20) {
                        self.buf = Vec::new();
                    }
                }
            }
        }
        Ok(())
    }

    /// Follows one byte inside an object; true when it closes the object.
    fn scan(&mut self, b: u8) -> bool {
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
            }
            return false;
        }
        match b {
            b'"' => self.in_string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                return self.depth == 0;
            }
            _ => {}
        }
        false
    }
}

fn too_large(size: usize, cap: usize) -> Error {
    Error::TooLarge(format!(
        "an append command of more than {size} bytes exceeds the limit of {cap} bytes"
    ))
}

fn describe_byte(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}'", b as char)
    } else {
        format!("byte 0x{b:02x}")
    }
}

/// Splits one write into command lines: separated by `\n`, a last piece
/// without a newline is a command too (a final newline does not start an
/// empty one). The lines are not trimmed (a `labels` line that starts with
/// a tab names the empty id).
fn command_lines(data: &[u8]) -> Result<Vec<&str>> {
    let text = std::str::from_utf8(data)
        .map_err(|_| Error::Invalid("commands must be UTF-8 text".into()))?;
    let body = text.strip_suffix('\n').unwrap_or(text);
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for line in body.split('\n') {
        if line.len() > MAX_LINE_COMMAND {
            return Err(Error::TooLarge(format!(
                "a command line of {} bytes exceeds the limit of {MAX_LINE_COMMAND} bytes",
                line.len()
            )));
        }
        out.push(line);
    }
    Ok(out)
}

/// A command written to `leaf`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LeafCommand {
    /// Move the leaf to this entry.
    Branch(String),
    /// Set the leaf to null.
    Reset,
}

/// Parses the commands of one write to `leaf`: an id branches, an empty
/// command or `null` resets.
pub(crate) fn parse_leaf_commands(data: &[u8]) -> Result<Vec<LeafCommand>> {
    Ok(command_lines(data)?
        .into_iter()
        .map(|line| match line.trim() {
            "" | "null" => LeafCommand::Reset,
            id => LeafCommand::Branch(id.to_string()),
        })
        .collect())
}

pub(crate) use crate::session::labels::LabelCommand;

/// Parses the commands of one write to `labels`: one per line (see
/// `session::labels::parse_line`: `<id> <label>` sets, `<id>` alone
/// clears, both unescaped). Blank lines are ignored.
pub(crate) fn parse_label_commands(data: &[u8]) -> Result<Vec<LabelCommand>> {
    Ok(command_lines(data)?
        .into_iter()
        .filter_map(crate::session::labels::parse_line)
        .collect())
}

/// What an open control file keeps between its writes: the `append`
/// object, the `leaf` piece and the `labels` line in progress.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    pub append: AppendStream,
    pub leaf: LeafLine,
    pub labels: PartialLine,
}

/// The `leaf` command in progress on one open file: a write whose last
/// piece has no newline runs that piece at once (so `printf %s ID > leaf`
/// gets its error), and remembers it; the next write then continues it. A
/// newline that starts the next write ends the piece (it is not an empty
/// command: `print()` of unbuffered Python and Rust's `writeln!` send the
/// id and its newline in two writes), and text that starts it completes
/// the piece, which runs again whole.
#[derive(Debug, Default)]
pub(crate) struct LeafLine {
    ran: Vec<u8>,
}

impl LeafLine {
    /// The commands of one write, the piece of the write before included
    /// when this one continues it, and the piece to remember once they
    /// ran ([`LeafLine::ran`]).
    pub(crate) fn commands(&mut self, data: &[u8]) -> Result<(Vec<LeafCommand>, Vec<u8>)> {
        let before = std::mem::take(&mut self.ran);
        if data.is_empty() {
            return Ok((Vec::new(), before));
        }
        let text: Cow<'_, [u8]> = match data.split_first() {
            _ if before.is_empty() => Cow::Borrowed(data),
            Some((b'\n', rest)) => Cow::Borrowed(rest),
            _ => Cow::Owned([before.as_slice(), data].concat()),
        };
        let piece = match text.iter().rposition(|&b| b == b'\n') {
            Some(end) => text[end + 1..].to_vec(),
            None => text.to_vec(),
        };
        Ok((parse_leaf_commands(&text)?, piece))
    }

    /// The commands of the last write ran: its last piece (empty when it
    /// ended with a newline) is what the next write may continue.
    pub(crate) fn ran(&mut self, piece: Vec<u8>) {
        self.ran = piece;
    }

    /// The file was closed: the piece is complete.
    pub(crate) fn end(&mut self) {
        self.ran.clear();
    }
}

/// The start of a `labels` line whose newline has not arrived yet: a line
/// cut by a write boundary (a table bigger than one write, `dd bs=`,
/// stdio buffers) waits for the rest, and a last line without a newline
/// is taken at the close.
#[derive(Debug, Default)]
pub(crate) struct PartialLine {
    partial: Vec<u8>,
}

impl PartialLine {
    /// The complete lines of `data` (after what was left over before);
    /// keeps the rest for the next write.
    pub(crate) fn lines(&mut self, data: &[u8]) -> Result<Vec<LabelCommand>> {
        self.partial.extend_from_slice(data);
        let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') else {
            if self.partial.len() > MAX_LINE_COMMAND {
                let size = self.partial.len();
                self.partial.clear();
                return Err(Error::TooLarge(format!(
                    "a command line of {size} bytes exceeds the limit of {MAX_LINE_COMMAND} bytes"
                )));
            }
            return Ok(Vec::new());
        };
        let rest = self.partial.split_off(end + 1);
        let complete = std::mem::replace(&mut self.partial, rest);
        parse_label_commands(&complete)
    }

    /// The last line, if it had no newline.
    pub(crate) fn finish(&mut self) -> Result<Vec<LabelCommand>> {
        let rest = std::mem::take(&mut self.partial);
        parse_label_commands(&rest)
    }

    /// A line is waiting for its newline.
    pub(crate) fn is_pending(&self) -> bool {
        !self.partial.is_empty()
    }

    /// Drops the line in progress (the file was truncated: a table starts).
    pub(crate) fn clear(&mut self) {
        self.partial.clear();
    }
}

/// A `labels` file opened with `O_TRUNC`, or truncated to 0 through the
/// open file (`ftruncate`: an editor's in-place save): the table written
/// to it becomes the labels. Each line is checked when its write arrives
/// (a bad line fails that write, every later write of the table and its
/// close); the table is applied when the file is closed — its lines set
/// labels, and the labels of entries it does not name are cleared — at the
/// `flush` of a close by the process that opened the file once something
/// was written (its writers may be children closing their copies after
/// each line), else at the `release` (`: > labels`: the empty table). A table with a bad line
/// changes nothing. While it is written, `labels` reports the size of what
/// was written so far, as a truncated file does.
#[derive(Debug, Default)]
pub(crate) struct LabelTable {
    /// Something was written through this handle (or it was truncated).
    pub written: bool,
    /// The table was applied, and nothing was written since.
    pub applied: bool,
    /// Bytes written to the table so far.
    pub bytes: u64,
    /// Why a line was refused: the table is not applied.
    pub failed: Option<Error>,
    /// Checked lines waiting for the close.
    pub pending: Vec<LabelCommand>,
    /// Ids named by the table so far.
    pub seen: std::collections::HashSet<String>,
    /// The start of a line whose newline has not arrived yet.
    pub line: PartialLine,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stream: &mut AppendStream, data: &[u8], got: &mut Vec<String>) -> Result<()> {
        stream.feed(data, &mut |obj| {
            let text = String::from_utf8(obj.to_vec()).unwrap();
            if text.contains("FAIL") {
                return Err(Error::Invalid("fail".into()));
            }
            got.push(text);
            Ok(())
        })
    }

    #[test]
    fn splits_objects_across_and_within_writes() {
        let mut s = AppendStream::new();
        let mut got = Vec::new();
        run(&mut s, b"{\"a\":\"}{\\\"\",", &mut got).unwrap();
        assert!(got.is_empty());
        assert!(s.pending() > 0);
        run(&mut s, b"\"b\":[1,{}]}\n{\"c\":1}  {\"d\"", &mut got).unwrap();
        assert_eq!(got, vec!["{\"a\":\"}{\\\"\",\"b\":[1,{}]}", "{\"c\":1}"]);
        run(&mut s, b":2}\n", &mut got).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(s.pending(), 0);
    }

    #[test]
    fn a_batch_taken_in_part_ends_after_its_last_object_taken() {
        let mut s = AppendStream::new();
        let data = b"{\"a\":1}\n{\"b\":2} {\"c\":3}\n{\"d\"";
        s.feed(data, &mut |_| Ok(())).unwrap();
        assert_eq!(s.pending(), 4, "the incomplete object waits");
        s.accept_only(2);
        assert_eq!(
            s.accepted(),
            data.iter().position(|&b| b == b'2').unwrap() + 2
        );
        assert_eq!(s.pending(), 0, "the rest is sent again by the writer");
        s.accept_only(0);
        assert_eq!(s.accepted(), 0);
    }

    #[test]
    fn stops_at_the_first_failure() {
        let mut s = AppendStream::new();
        let mut got = Vec::new();
        let err = run(&mut s, b"{\"x\":1}{\"FAIL\":1}{\"y\":1}", &mut got).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)));
        assert_eq!(got, vec!["{\"x\":1}"]);
        assert_eq!(s.pending(), 0);
        let err = run(&mut s, b"  [1]\n", &mut got).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)));
        run(&mut s, b"{\"z\":1}", &mut got).unwrap();
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn oversized_objects_fail_until_they_end() {
        let mut s = AppendStream::with_cap(16);
        let mut got = Vec::new();
        assert!(run(&mut s, b"{\"a\":\"0123456789", &mut got).is_ok());
        let e = run(&mut s, b"0123456789", &mut got).unwrap_err();
        assert!(matches!(e, Error::TooLarge(_)));
        let e = run(&mut s, b"more", &mut got).unwrap_err();
        assert!(matches!(e, Error::TooLarge(_)));
        assert_eq!(s.pending(), 0, "already refused");
        let e = run(&mut s, b"\"}{\"ignored\":1}", &mut got).unwrap_err();
        assert!(matches!(e, Error::TooLarge(_)));
        assert_eq!(s.pending(), 0);
        run(&mut s, b"{\"ok\":1}", &mut got).unwrap();
        assert_eq!(got, vec!["{\"ok\":1}"]);
    }

    #[test]
    fn leaf_commands() {
        use LeafCommand::*;
        assert_eq!(
            parse_leaf_commands(b"abc\n").unwrap(),
            vec![Branch("abc".into())]
        );
        assert_eq!(parse_leaf_commands(b"\n").unwrap(), vec![Reset]);
        assert_eq!(parse_leaf_commands(b"null").unwrap(), vec![Reset]);
        assert_eq!(parse_leaf_commands(b"").unwrap(), vec![]);
        assert_eq!(
            parse_leaf_commands(b"a\n\nb").unwrap(),
            vec![Branch("a".into()), Reset, Branch("b".into())]
        );
        assert!(parse_leaf_commands(b"\xff\n").is_err());
    }

    #[test]
    fn label_commands() {
        assert_eq!(
            parse_label_commands(b"abc  my label \nxyz\n\n").unwrap(),
            vec![
                LabelCommand::Set {
                    id: "abc".into(),
                    label: "my label".into()
                },
                LabelCommand::Clear { id: "xyz".into() }
            ]
        );
        assert_eq!(
            parse_label_commands(b"abc\t \n").unwrap(),
            vec![LabelCommand::Clear { id: "abc".into() }]
        );
    }

    #[test]
    fn a_leaf_piece_is_ended_or_continued_by_the_next_write() {
        use LeafCommand::*;
        let mut l = LeafLine::default();
        let (cmds, piece) = l.commands(b"abc").unwrap();
        assert_eq!(cmds, vec![Branch("abc".into())]);
        l.ran(piece);
        // The newline ends the piece: no empty command (no reset).
        let (cmds, piece) = l.commands(b"\n").unwrap();
        assert_eq!(cmds, vec![]);
        l.ran(piece);
        // After a newline, a lone newline is an empty command again.
        let (cmds, _) = l.commands(b"\n").unwrap();
        assert_eq!(cmds, vec![Reset]);
        // Text continues the piece, which runs again whole.
        let mut l = LeafLine::default();
        let (_, piece) = l.commands(b"x\nab").unwrap();
        l.ran(piece);
        let (cmds, piece) = l.commands(b"cd\ne").unwrap();
        assert_eq!(cmds, vec![Branch("abcd".into()), Branch("e".into())]);
        l.ran(piece);
        l.end();
        let (cmds, _) = l.commands(b"\n").unwrap();
        assert_eq!(cmds, vec![Reset], "a close ends the piece");
        // A failed write remembers nothing.
        let mut l = LeafLine::default();
        let _ = l.commands(b"bad").unwrap();
        let (cmds, _) = l.commands(b"\n").unwrap();
        assert_eq!(cmds, vec![Reset]);
    }

    #[test]
    fn a_label_line_waits_for_its_newline() {
        let mut p = PartialLine::default();
        assert_eq!(p.lines(b"e0 hel").unwrap(), vec![]);
        assert!(p.is_pending());
        assert_eq!(
            p.lines(b"lo\ne1 sec").unwrap(),
            vec![LabelCommand::Set {
                id: "e0".into(),
                label: "hello".into()
            }]
        );
        assert_eq!(
            p.finish().unwrap(),
            vec![LabelCommand::Set {
                id: "e1".into(),
                label: "sec".into()
            }]
        );
        assert!(!p.is_pending());
        assert_eq!(p.lines(b"x").unwrap(), vec![]);
        p.clear();
        assert_eq!(p.finish().unwrap(), vec![]);
    }

    #[test]
    fn a_table_line_of_the_empty_id_writes_back() {
        assert_eq!(
            parse_label_commands(b"\tmylabel\n  u1 x\n").unwrap(),
            vec![
                LabelCommand::Set {
                    id: String::new(),
                    label: "mylabel".into()
                },
                LabelCommand::Set {
                    id: "u1".into(),
                    label: "x".into()
                }
            ]
        );
    }
}
