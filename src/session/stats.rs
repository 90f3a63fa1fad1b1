//! Counts, tokens and cost over sets of entries (docs/filesystem.md,
//! `stats.json`): the whole session, the branch from the root to a leaf,
//! the path to an entry and the subtree below it.
//!
//! [`StatsTable::build`] reads each entry that may carry usage once
//! (assistant messages, tool results for a `task` result's usage,
//! `model_usage` entries: what the agent's session usage counts); roles,
//! models and times come from the index. Sums along paths and over
//! subtrees of every entry are computed together on first use (linear in
//! the session), so a walk that reads every entry's `stats.json` costs a
//! constant per entry.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, OnceLock};

use crate::session::error::Result;
use crate::session::format::{EntryKind, Facts, Role};
use crate::session::json::Json;
use crate::session::render::lenient_value;
use crate::session::time::format_iso_ms;
use crate::session::Session;

/// What one entry contributes.
#[derive(Debug, Clone, Default)]
struct Own {
    message: bool,
    role: u8,
    /// Index into the table's model names (assistant messages with a model).
    model: Option<u32>,
    tokens: [f64; 5],
    cost: f64,
    time: Option<i64>,
}

const USER: u8 = 1;
const ASSISTANT: u8 = 2;
const TOOL_RESULT: u8 = 3;

/// Sums over a set of entries (the `T` of `stats.json`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    /// Entries counted.
    pub entries: u64,
    /// `message` entries.
    pub messages: u64,
    /// Messages with role `user`.
    pub user_messages: u64,
    /// Messages with role `assistant`.
    pub assistant_messages: u64,
    /// Messages with role `toolResult`.
    pub tool_results: u64,
    /// `input`, `output`, `cacheRead`, `cacheWrite`, `totalTokens`: the
    /// sums of the usage of assistant messages, `task` tool results and
    /// `model_usage` entries.
    pub tokens: [f64; 5],
    /// The sum of their `usage.cost.total`.
    pub cost: f64,
    /// Assistant messages per model index.
    models: Vec<u64>,
    /// The earliest entry timestamp, in ms since the epoch.
    pub first_ms: Option<i64>,
    /// The latest entry timestamp, in ms since the epoch.
    pub last_ms: Option<i64>,
}

const TOKEN_KEYS: [&str; 5] = ["input", "output", "cacheRead", "cacheWrite", "totalTokens"];

impl Totals {
    fn add(&mut self, o: &Own) {
        self.entries += 1;
        if o.message {
            self.messages += 1;
            match o.role {
                USER => self.user_messages += 1,
                ASSISTANT => self.assistant_messages += 1,
                TOOL_RESULT => self.tool_results += 1,
                _ => {}
            }
        }
        for (t, v) in self.tokens.iter_mut().zip(o.tokens) {
            *t = saturating_add(*t, v);
        }
        self.cost = saturating_add(self.cost, o.cost);
        if let Some(m) = o.model {
            let m = m as usize;
            if self.models.len() <= m {
                self.models.resize(m + 1, 0);
            }
            self.models[m] += 1;
        }
        self.note_time(o.time);
    }

    fn note_time(&mut self, t: Option<i64>) {
        if let Some(t) = t {
            self.first_ms = Some(self.first_ms.map_or(t, |f| f.min(t)));
            self.last_ms = Some(self.last_ms.map_or(t, |l| l.max(t)));
        }
    }

    fn merge(&mut self, o: &Totals) {
        self.entries += o.entries;
        self.messages += o.messages;
        self.user_messages += o.user_messages;
        self.assistant_messages += o.assistant_messages;
        self.tool_results += o.tool_results;
        for (t, v) in self.tokens.iter_mut().zip(o.tokens) {
            *t = saturating_add(*t, v);
        }
        self.cost = saturating_add(self.cost, o.cost);
        if self.models.len() < o.models.len() {
            self.models.resize(o.models.len(), 0);
        }
        for (a, b) in self.models.iter_mut().zip(&o.models) {
            *a += b;
        }
        self.note_time(o.first_ms);
        self.note_time(o.last_ms);
    }

    /// Total tokens (`totalTokens`).
    pub fn total_tokens(&self) -> f64 {
        self.tokens[4]
    }
}

/// `a + b`, held at the largest finite double (either sign) instead of
/// overflowing to an infinity, which JSON cannot write: a sum of token
/// counts or costs saturates (docs/filesystem.md, `stats.json`).
fn saturating_add(a: f64, b: f64) -> f64 {
    finite(a + b)
}

/// `x` held within the finite doubles (a NaN, which no sum of finite
/// numbers gives, as 0).
fn finite(x: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(-f64::MAX, f64::MAX)
    }
}

/// A number as JSON: integers below 9e15 without a fraction, others
/// rounded to 10 decimals (sums of floating-point costs differ in the last
/// bits with the order of addition); from 9e15 on, where a double has no
/// fraction left to round, the shortest text of the double (`1e+308`). An
/// infinity is written as the largest finite double of its sign.
pub fn number(x: f64) -> String {
    let x = finite(x);
    if x.fract() == 0.0 && x.abs() < 9.0e15 {
        return format!("{}", x as i64);
    }
    let rounded = if x.abs() < 9.0e15 {
        (x * 1e10).round() / 1e10
    } else {
        x
    };
    if rounded.fract() == 0.0 && rounded.abs() < 9.0e15 {
        return format!("{}", rounded as i64);
    }
    serde_json::Number::from_f64(rounded).map_or_else(|| "0".into(), |n| n.to_string())
}

/// An entry whose `usage` counts, as the agent's session usage
/// (`getUsageStatistics`) counts it.
#[derive(Debug, Clone, Copy)]
enum Counted {
    /// An assistant message: `message.usage`.
    Assistant,
    /// A tool result: `message.details.usage` when `message.toolName` is
    /// `"task"` (what the subagents of the task tool spent).
    TaskResult,
    /// A `model_usage` entry (a call made for the session outside the
    /// conversation, such as a title): its `usage`.
    ModelUsage,
}

impl Counted {
    /// The usage object of the entry `v`, if it has one.
    fn usage(self, v: &Json) -> Option<&Json> {
        let usage = match self {
            Counted::Assistant => v.get("message")?.get("usage")?,
            Counted::TaskResult => {
                let m = v.get("message")?;
                if m.get("toolName")?.as_str()? != "task" {
                    return None;
                }
                m.get("details")?.get("usage")?
            }
            Counted::ModelUsage => v.get("usage")?,
        };
        usage.as_object().map(|_| usage)
    }
}

/// Per-entry sums along paths and over subtrees.
#[derive(Debug)]
struct Accumulated {
    path: Vec<Totals>,
    subtree: Vec<Totals>,
}

/// The contributions of every entry of a session.
#[derive(Debug)]
pub struct StatsTable {
    own: Vec<Own>,
    models: Vec<Arc<str>>,
    acc: OnceLock<Accumulated>,
}

/// What entry `i` contributes (its line read when it may carry usage);
/// a model name seen first is added to `models`.
fn own_at(s: &Session, i: u32, models: &mut Vec<Arc<str>>) -> Result<Own> {
    let Some(meta) = s.index().get(i) else {
        return Ok(Own::default());
    };
    let mut o = Own {
        time: meta.entry.timestamp_ms,
        ..Own::default()
    };
    if let (EntryKind::Message, Facts::Message { role, model }) = (meta.kind(), &meta.entry.facts) {
        o.message = true;
        o.role = match role {
            Role::User => USER,
            Role::Assistant => ASSISTANT,
            Role::ToolResult => TOOL_RESULT,
            _ => 0,
        };
        if o.role == ASSISTANT {
            if let Some(m) = model {
                let pos = match models.iter().position(|x| x == m) {
                    Some(p) => p,
                    None => {
                        models.push(m.clone());
                        models.len() - 1
                    }
                };
                o.model = Some(pos as u32);
            }
        }
    }
    let counted = match (&meta.entry.facts, o.role) {
        (Facts::Message { .. }, ASSISTANT) => Some(Counted::Assistant),
        (Facts::Message { .. }, TOOL_RESULT) => Some(Counted::TaskResult),
        (Facts::Unknown(t), _) if &**t == "model_usage" => Some(Counted::ModelUsage),
        _ => None,
    };
    if let Some(counted) = counted {
        let line = s.raw_line(i)?;
        let text = String::from_utf8_lossy(&line);
        if let Ok(v) = lenient_value(&text) {
            if let Some(usage) = counted.usage(&v) {
                for (k, key) in TOKEN_KEYS.iter().enumerate() {
                    o.tokens[k] = finite(usage.get(key).and_then(Json::as_f64).unwrap_or(0.0));
                }
                o.cost = finite(
                    usage
                        .get("cost")
                        .and_then(|c| c.get("total"))
                        .and_then(Json::as_f64)
                        .unwrap_or(0.0),
                );
            }
        }
    }
    Ok(o)
}

impl StatsTable {
    /// Reads what each entry contributes (the line of each entry that may
    /// carry usage, once).
    pub fn build(s: &Session) -> Result<StatsTable> {
        let mut models: Vec<Arc<str>> = Vec::new();
        let mut own = Vec::with_capacity(s.index().len());
        for i in 0..s.index().len() as u32 {
            own.push(own_at(s, i, &mut models)?);
        }
        Ok(StatsTable {
            own,
            models,
            acc: OnceLock::new(),
        })
    }

    /// The table of `s` after entries were appended to the file this
    /// table was built from (the same load: older entries unchanged):
    /// this table's contributions and those of the new entries only.
    /// `None` when `s` has fewer entries than the table covers.
    pub fn grown(&self, s: &Session) -> Result<Option<StatsTable>> {
        let n = s.index().len();
        if n < self.own.len() {
            return Ok(None);
        }
        let mut models = self.models.clone();
        let mut own = Vec::with_capacity(n);
        own.extend_from_slice(&self.own);
        for i in self.own.len()..n {
            own.push(own_at(s, i as u32, &mut models)?);
        }
        Ok(Some(StatsTable {
            own,
            models,
            acc: OnceLock::new(),
        }))
    }

    /// Number of entries covered.
    pub fn len(&self) -> usize {
        self.own.len()
    }

    /// True when no entry is covered.
    pub fn is_empty(&self) -> bool {
        self.own.is_empty()
    }

    /// Estimated memory in bytes.
    pub fn estimated_bytes(&self) -> usize {
        let per = std::mem::size_of::<Own>();
        let acc = self.acc.get().map_or(0, |a| {
            (a.path.len() + a.subtree.len())
                * (std::mem::size_of::<Totals>() + 8 * self.models.len())
        });
        self.own.len() * per + acc
    }

    /// Sums over the given positions.
    pub fn sum(&self, positions: impl IntoIterator<Item = u32>) -> Totals {
        let mut t = Totals::default();
        for p in positions {
            if let Some(o) = self.own.get(p as usize) {
                t.add(o);
            }
        }
        t
    }

    /// Every entry of the file.
    pub fn session(&self) -> Totals {
        self.sum(0..self.own.len() as u32)
    }

    /// The path from the root to `idx`: from the sums of every entry
    /// when they were computed (for entries' `stats.json`), else summed
    /// along the path alone (the session's `stats.json`, which then costs
    /// the path, not the sums of every entry).
    pub fn path(&self, s: &Session, idx: u32) -> Totals {
        match self.acc.get().and_then(|a| a.path.get(idx as usize)) {
            Some(t) => t.clone(),
            None => self.sum(s.index().path_to(idx)),
        }
    }

    /// `idx` and everything below it.
    pub fn subtree(&self, s: &Session, idx: u32) -> Totals {
        self.accumulated(s)
            .subtree
            .get(idx as usize)
            .cloned()
            .unwrap_or_default()
    }

    fn accumulated(&self, s: &Session) -> &Accumulated {
        self.acc.get_or_init(|| {
            let index = s.index();
            let n = self.own.len().min(index.len());
            let mut path = vec![Totals::default(); n];
            let mut subtree = vec![Totals::default(); n];
            // Pre-order from the roots: a parent's path sum is ready before
            // its children's; the reverse order finishes subtrees bottom-up.
            let mut order = Vec::with_capacity(n);
            let mut stack: Vec<u32> = index.roots();
            stack.reverse();
            let mut seen = vec![false; n];
            while let Some(i) = stack.pop() {
                let iu = i as usize;
                if iu >= n || seen[iu] {
                    continue;
                }
                seen[iu] = true;
                order.push(i);
                let mut kids = index.children(i);
                kids.reverse();
                stack.extend(kids);
            }
            for &i in &order {
                let mut t = match index.tree_parent(i) {
                    Some(p) if (p as usize) < n => path[p as usize].clone(),
                    _ => Totals::default(),
                };
                t.add(&self.own[i as usize]);
                path[i as usize] = t;
            }
            for &i in order.iter().rev() {
                let iu = i as usize;
                let mut t = subtree[iu].clone();
                t.add(&self.own[iu]);
                subtree[iu] = t.clone();
                if let Some(p) = index.tree_parent(i) {
                    if let Some(slot) = subtree.get_mut(p as usize) {
                        slot.merge(&t);
                    }
                }
            }
            Accumulated { path, subtree }
        })
    }

    /// `T` as pretty JSON (two-space indent), indented by `indent` levels.
    pub fn totals_json(&self, t: &Totals, indent: usize) -> String {
        let pad = "  ".repeat(indent + 1);
        let end = "  ".repeat(indent);
        let mut out = String::from("{\n");
        let counts = [
            ("entries", t.entries),
            ("messages", t.messages),
            ("userMessages", t.user_messages),
            ("assistantMessages", t.assistant_messages),
            ("toolResults", t.tool_results),
        ];
        for (k, v) in counts {
            let _ = writeln!(out, "{pad}\"{k}\": {v},");
        }
        for (k, v) in TOKEN_KEYS.iter().zip(t.tokens) {
            let _ = writeln!(out, "{pad}\"{k}\": {},", number(v));
        }
        let _ = writeln!(out, "{pad}\"cost\": {},", number(t.cost));
        let models: BTreeMap<&str, u64> = t
            .models
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .filter_map(|(i, &n)| Some((&**self.models.get(i)?, n)))
            .collect();
        if models.is_empty() {
            let _ = writeln!(out, "{pad}\"models\": {{}},");
        } else {
            let _ = writeln!(out, "{pad}\"models\": {{");
            let last = models.len() - 1;
            for (n, (k, v)) in models.iter().enumerate() {
                let comma = if n == last { "" } else { "," };
                let _ = writeln!(
                    out,
                    "{pad}  {}: {v}{comma}",
                    crate::session::json::json_string(k)
                );
            }
            let _ = writeln!(out, "{pad}}},");
        }
        let time = |ms: Option<i64>| {
            ms.map_or_else(
                || "null".to_string(),
                |m| format!("\"{}\"", format_iso_ms(m)),
            )
        };
        let _ = writeln!(out, "{pad}\"firstTimestamp\": {},", time(t.first_ms));
        let _ = writeln!(out, "{pad}\"lastTimestamp\": {}", time(t.last_ms));
        out.push_str(&end);
        out.push('}');
        out
    }

    /// `{"a": T, "b": T}` as pretty JSON with a final newline.
    pub fn pair_json(&self, a: (&str, &Totals), b: (&str, &Totals)) -> String {
        format!(
            "{{\n  \"{}\": {},\n  \"{}\": {}\n}}\n",
            a.0,
            self.totals_json(a.1, 1),
            b.0,
            self.totals_json(b.1, 1)
        )
    }

    /// The session's `stats.json`: `{"session": T, "branch": T}` with the
    /// branch from the root to `leaf` (empty for a null leaf).
    pub fn session_json(&self, s: &Session, leaf: Option<u32>) -> String {
        let branch = leaf.map_or_else(Totals::default, |l| self.path(s, l));
        self.pair_json(("session", &self.session()), ("branch", &branch))
    }

    /// An entry's `stats.json`: `{"path": T, "subtree": T}`.
    pub fn entry_json(&self, s: &Session, idx: u32) -> String {
        self.pair_json(
            ("path", &self.path(s, idx)),
            ("subtree", &self.subtree(s, idx)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_like_json_integers_or_rounded_decimals() {
        assert_eq!(number(120.0), "120");
        assert_eq!(number(0.1 + 0.2), "0.3");
        assert_eq!(number(0.0015), "0.0015");
        assert_eq!(number(f64::NAN), "0");
    }

    /// Huge usages: printed as JSON floats, and sums saturate at the
    /// largest finite double. Before, `1e308` printed as 0 (its scaling for
    /// the rounding overflowed), and so did any sum that overflowed.
    #[test]
    fn huge_numbers_print_as_floats_and_sums_saturate() {
        assert_eq!(number(1e308), "1e+308");
        assert_eq!(number(-1e300), "-1e+300");
        assert_eq!(number(1.5e20), "1.5e+20");
        assert_eq!(number(f64::INFINITY), "1.7976931348623157e+308");
        assert_eq!(number(f64::NEG_INFINITY), "-1.7976931348623157e+308");
        let own = Own {
            tokens: [1e308; 5],
            cost: 1e308,
            ..Own::default()
        };
        let mut t = Totals::default();
        t.add(&own);
        t.add(&own);
        assert_eq!(t.cost, f64::MAX);
        let mut u = t.clone();
        u.merge(&t);
        assert_eq!(u.tokens, [f64::MAX; 5]);
        assert_eq!(number(u.total_tokens()), "1.7976931348623157e+308");
    }
}
