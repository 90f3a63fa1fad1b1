//! Context reconstruction (`docs/format.md`, "Entries"): what the model sees at a leaf.
//!
//! The walk and the state (thinking level, models, TTSR rules, mode) use only
//! the index; entry lines are read just for the messages that are emitted.
//! Messages are assembled from raw JSON slices of those lines, so values the
//! engine does not interpret (and lone-surrogate escapes) pass through
//! unchanged.

use std::borrow::Cow;

use crate::session::error::Result;
use crate::session::format::{EntryKind, Facts, Role};
use crate::session::index::TreeIndex;
use crate::session::json::{json_string, pretty, write_pretty};

mod lines;
mod locate;
mod messages;
mod split;

#[cfg(test)]
use lines::MAX_GAP;
pub(crate) use lines::{for_each_line_coalesced, line_run, LineSource};
#[cfg(any(test, feature = "testing"))]
pub(crate) use locate::locator_agrees;
use messages::{emit_messages, push_member, truthy};
#[cfg(test)]
pub(crate) use split::HELPER_CHUNKS;
pub(crate) use split::{write_context_rendered, CONTEXT_CHUNK};
pub use split::{TextSink, WriteSink};

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
    last_model: LastModel,
}

/// The model of the last assistant message the fold applied, as shared
/// by the entries naming it (`Facts::Message`): the next message naming
/// the same one changes nothing. A cache, so any two are equal.
#[derive(Debug, Clone, Default)]
struct LastModel(Option<std::sync::Arc<str>>);

impl PartialEq for LastModel {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for LastModel {}

impl FoldState {
    fn new() -> Self {
        FoldState {
            thinking: Some("\"off\"".into()),
            models: Vec::new(),
            default_from_change: false,
            rules: Vec::new(),
            mode: Some("\"none\"".into()),
            mode_data: None,
            last_model: LastModel::default(),
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
                // Only a model change (which ends this rule) sets the
                // default model otherwise: the model applied last is
                // still the default.
                if self
                    .last_model
                    .0
                    .as_ref()
                    .is_some_and(|last| std::sync::Arc::ptr_eq(last, m))
                {
                    return;
                }
                self.last_model.0 = Some(m.clone());
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

/// What a [`ContextFold`] holds, for storing it beside a stored
/// rendering (`index_store`'s growth files): every field but the fold's
/// cache of the last model applied (restored empty; the next message
/// naming a model applies it again, to the same effect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FoldParts {
    pub(crate) thinking: Option<Box<str>>,
    pub(crate) models: Vec<(Box<str>, Option<Box<str>>)>,
    pub(crate) default_from_change: bool,
    pub(crate) rules: Vec<Box<str>>,
    pub(crate) mode: Option<Box<str>>,
    pub(crate) mode_data: Option<Box<str>>,
    pub(crate) leaf: u32,
    pub(crate) message_count: usize,
}

impl ContextFold {
    /// Its contents ([`FoldParts`]).
    pub(crate) fn to_parts(&self) -> FoldParts {
        let s = &self.state;
        FoldParts {
            thinking: s.thinking.clone(),
            models: s.models.clone(),
            default_from_change: s.default_from_change,
            rules: s.rules.clone(),
            mode: s.mode.clone(),
            mode_data: s.mode_data.clone(),
            leaf: self.leaf,
            message_count: self.message_count,
        }
    }

    /// The fold [`ContextFold::to_parts`] gave `parts` of.
    pub(crate) fn from_parts(parts: FoldParts) -> ContextFold {
        ContextFold {
            state: FoldState {
                thinking: parts.thinking,
                models: parts.models,
                default_from_change: parts.default_from_change,
                rules: parts.rules,
                mode: parts.mode,
                mode_data: parts.mode_data,
                last_model: LastModel::default(),
            },
            leaf: parts.leaf,
            message_count: parts.message_count,
        }
    }

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
    /// The first position before `end` whose entry has the id `id`.
    fn find_id(&self, id: &str, end: usize) -> Result<Option<usize>>;
    /// The positions, in order, whose facts the fold must see, when the
    /// view can tell them cheaply (`None`: all of them). The others are
    /// entries whose facts the fold ignores, and assistant messages that
    /// name the model the assistant message before them on the path named
    /// (applying it again changes nothing, see `FoldState::apply`).
    fn fold_positions(&self) -> Option<Vec<usize>> {
        None
    }
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
    fn find_id(&self, id: &str, end: usize) -> Result<Option<usize>> {
        let entries = self.index.entries();
        Ok(self.path[..end]
            .iter()
            .position(|&i| entries[i as usize].id() == id))
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
pub(crate) struct Plan {
    state: FoldState,
    /// The entries whose messages the context shows, in output order.
    pub(crate) reads: Vec<Read>,
    /// The entry whose summary opens the context (`reads[0]`).
    compaction: Option<u32>,
    /// The path's last entry.
    leaf: u32,
}

/// Folds the path and picks the entries whose messages the context shows,
/// in output order: the latest compaction's summary, the kept entries
/// before it, then everything after it.
pub(crate) fn plan(path: &dyn PathView) -> Result<Plan> {
    let mut state = FoldState::new();
    let mut compaction_at: Option<usize> = None;
    let mut reset_at: Option<usize> = None;
    let mut first_kept: Option<Box<str>> = None;
    let positions = path.fold_positions();
    let positions: &mut dyn Iterator<Item = usize> = match &positions {
        Some(p) => &mut p.iter().copied(),
        None => &mut (0..path.len()),
    };
    for pos in positions {
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
            if let Some(start) = path.find_id(&first_kept, c)? {
                reads.extend((start..c).filter(wanted).map(|p| path.read(p)));
            }
        }
        reads.extend((c + 1..path.len()).filter(wanted).map(|p| path.read(p)));
    } else {
        reads.extend((0..path.len()).filter(wanted).map(|p| path.read(p)));
    }
    let compaction = compaction_at.map(|_| reads[0].idx);
    let leaf = path
        .len()
        .checked_sub(1)
        .map(|last| path.read(last).idx)
        .ok_or_else(|| crate::session::error::Error::Internal("the context of no path".into()))?;
    Ok(Plan {
        state,
        reads,
        compaction,
        leaf,
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
        ..
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
    let between = IndexPath {
        index,
        path: between,
    };
    extend_path(fold, &between, new_leaf, src)
}

/// [`extend_context`] over the entries `between` the fold's leaf
/// (excluded) and `new_leaf` (included), in path order, however the
/// caller found them (the lean path's growth, `session::lean::grow`,
/// walks appended lines). `None` when a whole build is needed: the old
/// context had no messages, or an entry in between is a compaction or a
/// reset boundary.
pub(crate) fn extend_path(
    fold: &ContextFold,
    between: &dyn PathView,
    new_leaf: u32,
    src: &dyn LineSource,
) -> Result<Option<Extension>> {
    if fold.message_count == 0 {
        return Ok(None);
    }
    let mut state = fold.state.clone();
    for pos in 0..between.len() {
        let facts = between.facts(pos)?;
        if between.kind(pos) == EntryKind::Compaction || is_reset(&facts) {
            return Ok(None);
        }
        state.apply(&facts);
    }
    let reads: Vec<Read> = (0..between.len())
        .filter(|&pos| emits_message(between.kind(pos)))
        .map(|pos| between.read(pos))
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
