//! Context reconstruction (`docs/format.md`, "Entries"): what the model sees at a leaf.
//!
//! The walk and the state (thinking level, models, TTSR rules, mode) use only
//! the index; entry lines are read just for the messages that are emitted.
//! Messages are assembled from raw JSON slices of those lines, so values the
//! engine does not interpret (and lone-surrogate escapes) pass through
//! unchanged.

use std::borrow::Cow;

use crate::session::error::{Error, Result};
use crate::session::format::{EntryKind, Facts, Role};
use crate::session::index::{Loc, TreeIndex};
use crate::session::json::{
    json_string, pretty, scan_object, write_pretty, Member, Members, ObjectScan, RawObject,
};
use crate::session::time::js_date_ms;

/// Which leaf to build the context at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafSel<'a> {
    /// A reset leaf: the empty context.
    Null,
    /// An entry id; an unknown id falls back to the last entry.
    Id(&'a str),
    /// The last entry in file order.
    Last,
    /// An entry's position in the index (the session's own leaf, passed
    /// without a lookup of its id); an invalid one falls back to the last
    /// entry.
    At(u32),
}

/// Reads entry lines and resolves blob references for the context builder.
pub(crate) trait LineSource {
    /// The line (without `\n`) of the entry at `idx`.
    fn line(&self, idx: u32) -> Result<Cow<'_, [u8]>>;
    /// Resolves image blob refs in `json`, the value of the entry member
    /// `key` (see [`crate::session::blobrefs`]). `None` when nothing changed.
    fn resolve_blobs(&self, key: &str, json: &str) -> Option<String>;
    /// Calls `f` with the line of each entry of `idxs`, in that order.
    /// The default reads them one by one; sources backed by a file read
    /// neighbouring lines together (see [`for_each_line_coalesced`]).
    fn for_each_line(
        &self,
        idxs: &[u32],
        f: &mut dyn FnMut(u32, &[u8]) -> Result<()>,
    ) -> Result<()> {
        for &i in idxs {
            let line = self.line(i)?;
            f(i, &line)?;
        }
        Ok(())
    }
}

/// Lines further apart than this are not read together.
pub(crate) const MAX_GAP: u64 = 64 * 1024;
/// Upper bound of one coalesced read (a longer line is read alone).
pub(crate) const MAX_RUN: u64 = 1 << 20;

/// The run of on-disk lines at the start of `idxs` (whose first line is
/// on disk) that one read fetches: lines in file order, each within
/// [`MAX_GAP`] of the one before, spanning at most `max_run` bytes (a
/// longer first line is read alone). Gives the number of lines and the
/// byte range `start..end`.
pub(crate) fn line_run(
    loc: &dyn Fn(u32) -> Result<Loc>,
    idxs: &[u32],
    max_run: u64,
) -> Result<(usize, u64, u64)> {
    let Some(&first) = idxs.first() else {
        return Ok((0, 0, 0));
    };
    let first = loc(first)?;
    let start = first.offset;
    let mut end = start + u64::from(first.len);
    let mut n = 1;
    while let Some(&next) = idxs.get(n) {
        let l = loc(next)?;
        let l_end = l.offset + u64::from(l.len);
        if l.in_memory || l.offset < end || l.offset - end > MAX_GAP || l_end - start > max_run {
            break;
        }
        end = l_end;
        n += 1;
    }
    Ok((n, start, end))
}

/// [`LineSource::for_each_line`] for file-backed sources: runs of on-disk
/// lines that follow each other closely in the file are fetched with one
/// `read_at(offset, len)`; in-memory lines come from `line`. A read that
/// comes back short means the file changed under the index: an error.
pub(crate) fn for_each_line_coalesced<'s>(
    locs: &dyn Fn(u32) -> Option<Loc>,
    idxs: &[u32],
    read_at: &dyn Fn(u64, usize) -> Result<Vec<u8>>,
    line: &dyn Fn(u32) -> Result<Cow<'s, [u8]>>,
    f: &mut dyn FnMut(u32, &[u8]) -> Result<()>,
) -> Result<()> {
    let loc = |i: u32| locs(i).ok_or_else(|| Error::EntryNotFound(format!("#{i}")));
    let mut k = 0;
    while k < idxs.len() {
        if loc(idxs[k])?.in_memory {
            f(idxs[k], &line(idxs[k])?)?;
            k += 1;
            continue;
        }
        let (n, start, end) = line_run(&loc, &idxs[k..], MAX_RUN)?;
        let buf = read_at(start, (end - start) as usize)?;
        for &i in &idxs[k..k + n] {
            let l = loc(i)?;
            let from = (l.offset - start) as usize;
            let Some(bytes) = buf.get(from..from + l.len as usize) else {
                return Err(stale(i));
            };
            f(i, bytes)?;
        }
        k += n;
    }
    Ok(())
}

/// What makes two TTSR rule names the same: their string value, so
/// `"a"` and `"\u0061"` are one rule (the first spelling is shown). Names
/// that are not strings, or hold escapes of lone surrogates (which decode
/// lossily), compare by their JSON text.
fn rule_key(raw: &str) -> std::borrow::Cow<'_, str> {
    match crate::session::json::decode_json_string(raw) {
        Some(s) if !(s.contains('\u{fffd}') && raw.contains("\\u")) => s,
        _ => std::borrow::Cow::Borrowed(raw),
    }
}

/// A built context: compact JSON text with `messages`, `thinkingLevel`,
/// `models`, `injectedTtsrRules`, `mode` and, when set, `modeData`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    json: String,
    leaf: Option<u32>,
    message_count: usize,
    /// Offset of the `]` that closes `messages` in `json`.
    messages_end: usize,
}

impl Context {
    /// Compact JSON text.
    pub fn as_json(&self) -> &str {
        &self.json
    }
    /// Pretty JSON (two-space indent, like `JSON.stringify(v, null, 2)`).
    pub fn to_pretty(&self) -> String {
        pretty(&self.json)
    }
    /// Writes the pretty JSON to `w` in pieces, without holding all of it.
    pub fn write_pretty(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        write_pretty(&self.json, w)
    }
    /// The index of the leaf the context was built at.
    pub fn leaf(&self) -> Option<u32> {
        self.leaf
    }
    /// Number of messages.
    pub fn message_count(&self) -> usize {
        self.message_count
    }
    /// Offset of the `]` that closes `messages` in the compact text: what
    /// comes before it is all that an extension of the context keeps.
    pub fn messages_end(&self) -> usize {
        self.messages_end
    }
}

const EMPTY_STATE: &str =
    r#""thinkingLevel":"off","models":{},"injectedTtsrRules":[],"mode":"none""#;

/// Resolves the leaf selection to an entry position.
pub(crate) fn resolve_leaf(index: &TreeIndex, leaf: LeafSel<'_>) -> Option<u32> {
    let last = || index.len().checked_sub(1).map(|i| i as u32);
    match leaf {
        LeafSel::Null => None,
        LeafSel::Id(id) => index.position(id).or_else(last),
        LeafSel::Last => last(),
        LeafSel::At(i) => index.get(i).map(|_| i).or_else(last),
    }
}

fn stale(idx: u32) -> Error {
    Error::Stale(format!(
        "the line of entry #{idx} changed on disk; reload the session"
    ))
}

/// Scratch space for parsing lines.
#[derive(Default)]
struct LineParser {
    top: Vec<Member>,
    nested: Vec<Member>,
}

impl LineParser {
    /// Parses (and validates) an entry line; a line that no longer parses
    /// means the file changed under the index.
    fn parse<'a, 's>(&'s mut self, bytes: &'a [u8], idx: u32) -> Result<Members<'a, 's>> {
        match scan_object(bytes, b"", &mut self.top, &mut self.nested) {
            ObjectScan::Valid { .. } => Ok(Members::Scanned {
                text: bytes,
                top: &self.top,
            }),
            ObjectScan::Unsure => {
                let text = std::str::from_utf8(bytes).map_err(|_| stale(idx))?;
                RawObject::parse(text)
                    .map(Members::Serde)
                    .map_err(|_| stale(idx))
            }
            ObjectScan::Invalid => Err(stale(idx)),
        }
    }
}

fn push_timestamp(out: &mut String, line: &Members<'_, '_>) {
    out.push_str(",\"timestamp\":");
    match line.get("timestamp").and_then(js_date_ms) {
        Some(ms) => {
            use std::fmt::Write;
            let _ = write!(out, "{ms}");
        }
        None => out.push_str("null"),
    }
}

fn truthy(raw: Option<&str>) -> bool {
    raw.is_some_and(|r| !matches!(r, "\"\"" | "null" | "false" | "0" | "-0"))
}

fn push_member(out: &mut String, key: &str, raw: Option<&str>) {
    if let Some(value) = raw {
        out.push(',');
        out.push('"');
        out.push_str(key);
        out.push_str("\":");
        out.push_str(value);
    }
}

/// True for entry kinds that can contribute a message.
fn emits_message(kind: EntryKind) -> bool {
    matches!(
        kind,
        EntryKind::Message | EntryKind::CustomMessage | EntryKind::BranchSummary
    )
}

/// The state context reconstruction folds over a path: thinking level,
/// models, TTSR rules, mode. The same fold serves whole builds and the
/// extension of a built context (docs/filesystem.md, "Incremental
/// contexts").
#[derive(Debug, Clone, PartialEq, Eq)]
struct FoldState {
    thinking: Option<Box<str>>,
    models: Vec<(Box<str>, Option<Box<str>>)>,
    default_from_change: bool,
    rules: Vec<Box<str>>,
    mode: Option<Box<str>>,
    mode_data: Option<Box<str>>,
}

impl FoldState {
    fn new() -> Self {
        FoldState {
            thinking: Some("\"off\"".into()),
            models: Vec::new(),
            default_from_change: false,
            rules: Vec::new(),
            mode: Some("\"none\"".into()),
            mode_data: None,
        }
    }

    fn set_model(&mut self, key: &str, v: Option<Box<str>>) {
        match self.models.iter_mut().find(|(k, _)| &**k == key) {
            Some(slot) => slot.1 = v,
            None => self.models.push((key.into(), v)),
        }
    }

    /// Folds the facts of the next entry of the path.
    fn apply(&mut self, facts: &Facts) {
        match facts {
            // `thinkingLevel ?? "off"`: absent or null is "off"
            // (docs/engine.md, "Decisions taken from the reference").
            Facts::ThinkingLevel(level) => {
                self.thinking = match level.as_deref() {
                    None | Some("null") => Some("\"off\"".into()),
                    Some(_) => level.clone(),
                }
            }
            // Only a truthy `model` counts: the older `{provider, modelId}`
            // shape, `""` and `null` change nothing.
            Facts::ModelChange { model, role } if truthy(model.as_deref()) => {
                let key = role.as_deref().unwrap_or("default");
                if key == "default" {
                    self.default_from_change = true;
                }
                self.set_model(key, model.clone());
            }
            Facts::Message {
                role: Role::Assistant,
                model: Some(m),
            } if !self.default_from_change => {
                self.set_model("default", Some(json_string(m).into()));
            }
            Facts::Ttsr(names) => {
                for name in names {
                    let key = rule_key(name);
                    if !self.rules.iter().any(|r| rule_key(r) == key) {
                        self.rules.push(name.clone());
                    }
                }
            }
            Facts::Mode { mode: m, data } => {
                self.mode = m.clone();
                self.mode_data = data.clone();
            }
            _ => {}
        }
    }

    /// The members after `messages`, closing the object:
    /// `,"thinkingLevel":…,"mode":…}`.
    fn write_tail(&self, json: &mut String) {
        push_member(json, "thinkingLevel", self.thinking.as_deref());
        json.push_str(",\"models\":{");
        let mut first = true;
        for (key, value) in &self.models {
            if let Some(v) = value {
                if !first {
                    json.push(',');
                }
                first = false;
                json.push_str(&json_string(key));
                json.push(':');
                json.push_str(v);
            }
        }
        json.push_str("},\"injectedTtsrRules\":[");
        json.push_str(&self.rules.join(","));
        json.push(']');
        push_member(json, "mode", self.mode.as_deref());
        push_member(json, "modeData", self.mode_data.as_deref());
        json.push('}');
    }
}

/// The fold at a built context's leaf: what `extend_context` continues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextFold {
    state: FoldState,
    leaf: u32,
    message_count: usize,
}

impl ContextFold {
    /// The leaf the fold stopped at.
    pub fn leaf(&self) -> u32 {
        self.leaf
    }
    /// Messages of the context at that leaf.
    pub fn message_count(&self) -> usize {
        self.message_count
    }
}

/// A context extended from one leaf to an entry below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extension {
    /// The new messages, compact, each preceded by `,`: they follow the
    /// last message of the context that was extended.
    pub messages: String,
    /// `]` and the members after `messages`, compact, closing the object.
    pub tail: String,
    /// The fold at the new leaf.
    pub fold: ContextFold,
}

/// An entry whose line context building reads: its position for the
/// [`LineSource`], its kind and the length of its line.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Read {
    pub(crate) idx: u32,
    pub(crate) kind: EntryKind,
    pub(crate) len: u32,
}

/// Emits the messages of the entries `reads` (in order) into `json`, each
/// preceded by `,` unless it is the first message; `compaction` is the
/// entry whose summary opens the context. After each message, `flush` is
/// given the text so far (it may write it out and clear it).
fn emit_messages(
    reads: &[Read],
    compaction: Option<u32>,
    src: &dyn LineSource,
    json: &mut String,
    message_count: &mut usize,
    flush: &mut dyn FnMut(&mut String) -> Result<()>,
) -> Result<()> {
    let mut parser = LineParser::default();
    let idxs: Vec<u32> = reads.iter().map(|r| r.idx).collect();
    let mut next = reads.iter();
    src.for_each_line(&idxs, &mut |i, bytes| {
        let kind = next.next().map_or(EntryKind::Unknown, |r| r.kind);
        let line = parser.parse(bytes, i)?;
        let start = json.len();
        if *message_count > 0 {
            json.push(',');
        }
        let emitted = if Some(i) == compaction {
            json.push_str("{\"role\":\"compactionSummary\"");
            push_member(json, "summary", line.get("summary"));
            push_member(json, "shortSummary", line.get("shortSummary"));
            push_member(json, "tokensBefore", line.get("tokensBefore"));
            push_member(json, "tokensAfter", line.get("tokensAfter"));
            push_member(json, "method", line.get("method"));
            push_member(json, "warning", line.get("warning"));
            push_timestamp(json, &line);
            json.push('}');
            true
        } else {
            push_message(json, kind, &line, src)
        };
        if emitted {
            *message_count += 1;
            flush(json)
        } else {
            json.truncate(start);
            Ok(())
        }
    })
}

/// True for the agent's `/clear` entries (see [`RESET_BOUNDARY`]).
fn is_reset(facts: &Facts) -> bool {
    matches!(facts, Facts::Unknown(name) if &**name == RESET_BOUNDARY)
}

/// The path from a root to a leaf as context building reads it, root
/// first: the loaded index gives it directly ([`TreeIndex::path_to`]);
/// the lean first-time path (`session::lean`) from compact records,
/// reading the lines of the few entries whose facts it did not keep.
pub(crate) trait PathView {
    /// Entries on the path.
    fn len(&self) -> usize;
    /// The kind of the entry at path position `pos`.
    fn kind(&self, pos: usize) -> EntryKind;
    /// Its facts, as far as the fold reads them (see `FoldState::apply`,
    /// the compaction's `first_kept` and reset boundaries): a view may
    /// give `Facts::None` for the facts the fold ignores.
    fn facts(&self, pos: usize) -> Result<Cow<'_, Facts>>;
    /// True when the entry at `pos` has the id `id`.
    fn has_id(&self, pos: usize, id: &str) -> Result<bool>;
    /// What the [`LineSource`] reads for the entry at `pos`.
    fn read(&self, pos: usize) -> Read;
}

/// [`PathView`] of a loaded index.
struct IndexPath<'a> {
    index: &'a TreeIndex,
    path: Vec<u32>,
}

impl PathView for IndexPath<'_> {
    fn len(&self) -> usize {
        self.path.len()
    }
    fn kind(&self, pos: usize) -> EntryKind {
        self.index.entries()[self.path[pos] as usize].entry.kind
    }
    fn facts(&self, pos: usize) -> Result<Cow<'_, Facts>> {
        Ok(Cow::Borrowed(
            &self.index.entries()[self.path[pos] as usize].entry.facts,
        ))
    }
    fn has_id(&self, pos: usize, id: &str) -> Result<bool> {
        Ok(self.index.entries()[self.path[pos] as usize].id() == id)
    }
    fn read(&self, pos: usize) -> Read {
        let i = self.path[pos];
        let meta = &self.index.entries()[i as usize];
        Read {
            idx: i,
            kind: meta.entry.kind,
            len: meta.loc.len,
        }
    }
}

/// What a context at a leaf consists of: the fold over the whole path and
/// the entries whose messages it shows.
struct Plan {
    state: FoldState,
    reads: Vec<Read>,
    /// The entry whose summary opens the context (`reads[0]`).
    compaction: Option<u32>,
}

/// Folds the path and picks the entries whose messages the context shows,
/// in output order: the latest compaction's summary, the kept entries
/// before it, then everything after it.
fn plan(path: &dyn PathView) -> Result<Plan> {
    let mut state = FoldState::new();
    let mut compaction_at: Option<usize> = None;
    let mut reset_at: Option<usize> = None;
    let mut first_kept: Option<Box<str>> = None;
    for pos in 0..path.len() {
        let facts = path.facts(pos)?;
        state.apply(&facts);
        if path.kind(pos) == EntryKind::Compaction {
            compaction_at = Some(pos);
            first_kept = match &*facts {
                Facts::Compaction { first_kept } => first_kept.clone(),
                _ => None,
            };
        }
        if is_reset(&facts) {
            reset_at = Some(pos);
        }
    }
    let mut reads: Vec<Read> = Vec::new();
    let wanted = |pos: &usize| emits_message(path.kind(*pos));
    // A reset boundary after the latest compaction (or without one) starts
    // the context after it; a later compaction wins over an earlier boundary.
    if let Some(r) = reset_at.filter(|&r| compaction_at.is_none_or(|c| r > c)) {
        compaction_at = None;
        reads.extend((r + 1..path.len()).filter(wanted).map(|p| path.read(p)));
    } else if let Some(c) = compaction_at {
        reads.push(path.read(c));
        if let Some(first_kept) = first_kept {
            let mut start = None;
            for pos in 0..c {
                if path.has_id(pos, &first_kept)? {
                    start = Some(pos);
                    break;
                }
            }
            if let Some(start) = start {
                reads.extend((start..c).filter(wanted).map(|p| path.read(p)));
            }
        }
        reads.extend((c + 1..path.len()).filter(wanted).map(|p| path.read(p)));
    } else {
        reads.extend((0..path.len()).filter(wanted).map(|p| path.read(p)));
    }
    let compaction = compaction_at.map(|_| reads[0].idx);
    Ok(Plan {
        state,
        reads,
        compaction,
    })
}

const OPEN: &str = "{\"messages\":[";

/// Builds the context at `leaf`.
pub(crate) fn build_session_context(
    index: &TreeIndex,
    leaf: LeafSel<'_>,
    src: &dyn LineSource,
) -> Result<Context> {
    build_context_fold(index, leaf, src).map(|(context, _)| context)
}

/// [`build_session_context`], also giving the fold at the leaf (none for
/// the empty context), from which [`extend_context`] continues.
pub(crate) fn build_context_fold(
    index: &TreeIndex,
    leaf: LeafSel<'_>,
    src: &dyn LineSource,
) -> Result<(Context, Option<ContextFold>)> {
    let Some(leaf_idx) = resolve_leaf(index, leaf) else {
        return Ok((
            Context {
                json: format!("{OPEN}],{EMPTY_STATE}}}"),
                leaf: None,
                message_count: 0,
                messages_end: OPEN.len(),
            },
            None,
        ));
    };
    let path = IndexPath {
        index,
        path: index.path_to(leaf_idx),
    };
    let Plan {
        state,
        reads,
        compaction,
    } = plan(&path)?;
    drop(path);

    // Messages are parts of their lines: their total length bounds the
    // text, so it is never reallocated (and copied) while it grows.
    let bound: usize = reads.iter().map(|r| r.len as usize + 96).sum();
    let mut json = String::with_capacity(bound + 512);
    json.push_str(OPEN);
    let mut message_count = 0;
    emit_messages(
        &reads,
        compaction,
        src,
        &mut json,
        &mut message_count,
        &mut |_| Ok(()),
    )?;
    let messages_end = json.len();
    json.push(']');
    state.write_tail(&mut json);
    json.shrink_to_fit();
    let fold = ContextFold {
        state,
        leaf: leaf_idx,
        message_count,
    };
    Ok((
        Context {
            json,
            leaf: Some(leaf_idx),
            message_count,
            messages_end,
        },
        Some(fold),
    ))
}

/// The compact context of the path `path` (`None`: the empty context)
/// given to `out` in pieces of about 64 KiB, each ending after a message
/// or at the end, never holding the whole text: the lean first-time path
/// (`session::lean`) prints contexts this way. The concatenated pieces
/// are the text [`build_session_context`] builds for the same path.
pub(crate) fn write_context_pieces(
    path: Option<&dyn PathView>,
    src: &dyn LineSource,
    out: &mut dyn FnMut(&str) -> Result<()>,
) -> Result<()> {
    const PIECE: usize = 64 << 10;
    let Some(path) = path else {
        return out(&format!("{OPEN}],{EMPTY_STATE}}}"));
    };
    let Plan {
        state,
        reads,
        compaction,
    } = plan(path)?;
    let mut json = String::with_capacity(PIECE + (1 << 12));
    json.push_str(OPEN);
    let mut message_count = 0;
    emit_messages(
        &reads,
        compaction,
        src,
        &mut json,
        &mut message_count,
        &mut |json| {
            if json.len() >= PIECE {
                out(json)?;
                json.clear();
            }
            Ok(())
        },
    )?;
    json.push(']');
    state.write_tail(&mut json);
    out(&json)
}

/// Extends the context of `fold`'s leaf to `new_leaf`, an entry below it,
/// folding and emitting only the entries in between (cost: those entries,
/// not the path). `None` when a whole build is needed instead: `new_leaf`
/// is not below the old leaf (or the index cannot tell, see
/// [`TreeIndex::path_below`]), an entry in between is a compaction or a
/// reset boundary (either replaces the messages), or the old context had
/// no messages. The caller
/// must know that the paths of the entries the fold covered did not
/// change since it was made: the index's `topology_changes` is checked
/// by `path_below`, a reload is the caller's to notice.
pub(crate) fn extend_context(
    fold: &ContextFold,
    index: &TreeIndex,
    new_leaf: u32,
    src: &dyn LineSource,
) -> Result<Option<Extension>> {
    if fold.message_count == 0 {
        return Ok(None);
    }
    let Some(between) = index.path_below(fold.leaf, new_leaf) else {
        return Ok(None);
    };
    let entries = index.entries();
    if between.iter().any(|&i| {
        let e = &entries[i as usize].entry;
        e.kind == EntryKind::Compaction || is_reset(&e.facts)
    }) {
        return Ok(None);
    }
    let mut state = fold.state.clone();
    for &i in &between {
        state.apply(&entries[i as usize].entry.facts);
    }
    let reads: Vec<Read> = between
        .into_iter()
        .filter(|&i| emits_message(entries[i as usize].entry.kind))
        .map(|i| Read {
            idx: i,
            kind: entries[i as usize].entry.kind,
            len: entries[i as usize].loc.len,
        })
        .collect();
    let mut messages = String::new();
    let mut message_count = fold.message_count;
    emit_messages(
        &reads,
        None,
        src,
        &mut messages,
        &mut message_count,
        &mut |_| Ok(()),
    )?;
    let mut tail = String::from("]");
    state.write_tail(&mut tail);
    Ok(Some(Extension {
        messages,
        tail,
        fold: ContextFold {
            state,
            leaf: new_leaf,
            message_count,
        },
    }))
}

/// The type of the agent's `/clear` entries: the context starts after the
/// latest one (unless a later compaction wins).
pub(crate) const RESET_BOUNDARY: &str = "reset_boundary";

/// Custom message types the agent keeps out of the model's context.
pub(crate) const HIDDEN_CUSTOM_TYPES: [&str; 2] = ["prewalk-plan", "vibe-mode-context"];

/// `text` (the JSON value of member `key` of an entry) with its blob refs
/// resolved.
fn resolved<'t>(src: &dyn LineSource, key: &str, text: &'t str) -> Cow<'t, str> {
    if crate::session::blobrefs::may_hold_ref(text) {
        src.resolve_blobs(key, text)
            .map_or(Cow::Borrowed(text), Cow::Owned)
    } else {
        Cow::Borrowed(text)
    }
}

/// Appends the message an entry contributes to the context; false when it
/// contributes none.
fn push_message(
    out: &mut String,
    kind: EntryKind,
    line: &Members<'_, '_>,
    src: &dyn LineSource,
) -> bool {
    match kind {
        EntryKind::Message => match line.get("message") {
            Some(text) => out.push_str(&resolved(src, "message", text)),
            None => out.push_str("null"),
        },
        EntryKind::CustomMessage => {
            // Normalised as the agent replays it (docs/engine.md, "Context
            // details taken from the reference").
            let content = line.get("content");
            if !content.is_some_and(|c| c.starts_with('"') || c.starts_with('[')) {
                return false;
            }
            let custom_type = line.get("customType");
            let type_name = line.get_str("customType");
            if type_name
                .as_deref()
                .is_some_and(|t| HIDDEN_CUSTOM_TYPES.contains(&t))
            {
                return false;
            }
            out.push_str("{\"role\":\"custom\"");
            let custom_type = match custom_type {
                Some(raw) if raw.starts_with('"') && raw != "\"\"" => raw,
                _ => "\"custom-message\"",
            };
            push_member(out, "customType", Some(custom_type));
            let content = content.map(|text| resolved(src, "content", text));
            push_member(out, "content", content.as_deref());
            let display = line
                .get("display")
                .filter(|raw| matches!(*raw, "true" | "false"))
                .unwrap_or("false");
            push_member(out, "display", Some(display));
            let details = line
                .get("details")
                .map(|text| resolved(src, "details", text));
            push_member(out, "details", details.as_deref());
            if line.get("attribution").is_some() {
                let user = line.get_str("attribution").as_deref() == Some("user");
                let attribution = if user { "\"user\"" } else { "\"agent\"" };
                push_member(out, "attribution", Some(attribution));
            }
            push_timestamp(out, line);
            out.push('}');
        }
        EntryKind::BranchSummary => {
            let summary = line.get("summary");
            if !truthy(summary) {
                return false;
            }
            out.push_str("{\"role\":\"branchSummary\"");
            push_member(out, "summary", summary);
            push_member(out, "fromId", line.get("fromId"));
            push_timestamp(out, line);
            out.push('}');
        }
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::format::ScannedEntry;
    use crate::session::index::Loc;
    use std::cell::Cell;

    fn index_of(locs: &[(u64, u32, bool)]) -> TreeIndex {
        let mut t = TreeIndex::new();
        for (n, &(offset, len, in_memory)) in locs.iter().enumerate() {
            t.push(
                ScannedEntry {
                    kind: EntryKind::Custom,
                    id: format!("e{n}").into(),
                    parent_id: None,
                    timestamp_ms: None,
                    facts: Facts::None,
                },
                Loc {
                    offset,
                    len,
                    in_memory,
                },
            );
        }
        t
    }

    #[test]
    fn coalesced_reads_group_neighbouring_lines() {
        let file = b"aaaa\nbbbb\ncccc\ndddd\n".to_vec();
        let far = MAX_GAP + 100;
        // e0..e2 are neighbours; e3 is in memory; e4 lies far away.
        let t = index_of(&[
            (0, 4, false),
            (5, 4, false),
            (15, 4, false),
            (0, 2, true),
            (far, 4, false),
        ]);
        let reads = Cell::new(0);
        let mut big = file.clone();
        big.resize(far as usize, b' ');
        big.extend_from_slice(b"eeee\n");
        let read_at = |offset: u64, len: usize| {
            reads.set(reads.get() + 1);
            let start = (offset as usize).min(big.len());
            Ok(big[start..(start + len).min(big.len())].to_vec())
        };
        let mut seen = Vec::new();
        for_each_line_coalesced(
            &|i| t.get(i).map(|m| m.loc),
            &[0, 1, 2, 3, 4],
            &read_at,
            &|_| Ok(Cow::Borrowed(&b"mm"[..])),
            &mut |i, bytes| {
                seen.push((i, bytes.to_vec()));
                Ok(())
            },
        )
        .unwrap();
        let expected: Vec<(u32, Vec<u8>)> = vec![
            (0, b"aaaa".to_vec()),
            (1, b"bbbb".to_vec()),
            (2, b"dddd".to_vec()),
            (3, b"mm".to_vec()),
            (4, b"eeee".to_vec()),
        ];
        assert_eq!(seen, expected);
        assert_eq!(reads.get(), 2, "one read for e0..e2, one for e4");

        // Out of file order: separate reads, same bytes.
        reads.set(0);
        let mut seen = Vec::new();
        for_each_line_coalesced(
            &|i| t.get(i).map(|m| m.loc),
            &[2, 0],
            &read_at,
            &|_| unreachable!(),
            &mut |i, b| {
                seen.push((i, b.to_vec()));
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(seen, vec![(2, b"dddd".to_vec()), (0, b"aaaa".to_vec())]);
        assert_eq!(reads.get(), 2);
    }

    #[test]
    fn coalesced_reads_detect_a_shrunken_file() {
        let t = index_of(&[(0, 4, false), (5, 4, false)]);
        let read_at = |_: u64, _: usize| Ok(b"aaaa\nbb".to_vec());
        let err = for_each_line_coalesced(
            &|i| t.get(i).map(|m| m.loc),
            &[0, 1],
            &read_at,
            &|_| unreachable!(),
            &mut |_, _| Ok(()),
        )
        .unwrap_err();
        assert!(err.to_string().contains("changed on disk"), "{err}");
    }
}
