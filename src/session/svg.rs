//! `tree.svg`: a session's entry tree as a picture (docs/filesystem.md,
//! "tree.svg").
//!
//! The tree is drawn like a file tree: one row per node in pre-order, a
//! child indented one step when its parent has several children (so a
//! linear conversation stays in one column), connectors along the parent's
//! column. Runs of entries without branches are collapsed into one node
//! that says how many entries it holds; the root, branch points, tips, the
//! leaf, labelled entries, compactions and branch summaries always get a
//! node of their own, so a 100,000-entry session stays a handful of rows
//! per branch. Each tip is annotated with the cost and tokens of its branch
//! (the path from the root).
//!
//! Every node is a `<g>` with `class="entry"` (one entry, `data-id`) or
//! `class="run"` (`data-first`, `data-last`), and `data-count` (entries it
//! stands for), so tools can read the picture too.

use std::fmt::Write;

use crate::session::format::{EntryKind, Facts, Role};
use crate::session::stats::{number, StatsTable};
use crate::session::Session;

const ROW: u32 = 22;
const INDENT: u32 = 18;
const LEFT: u32 = 16;
const TOP: u32 = 40;
const TEXT_WIDTH: u32 = 720;

/// One drawn node.
struct Item {
    /// First and last entry position, and how many entries it stands for.
    first: u32,
    last: u32,
    count: usize,
    level: u32,
    /// Row of the drawn parent, if any.
    parent_row: Option<usize>,
    tip: bool,
}

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Characters XML 1.0 does not allow.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('\u{fffd}'),
            '\u{fffe}' | '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// A short name for what an entry is.
fn kind_name(s: &Session, idx: u32) -> String {
    let Some(meta) = s.index().get(idx) else {
        return String::new();
    };
    match &meta.entry.facts {
        Facts::Message { role, model } => match (role, model) {
            (Role::Assistant, Some(m)) => format!("assistant ({m})"),
            (r, _) => r.as_str().to_string(),
        },
        _ => meta.type_name().to_string(),
    }
}

fn colour(s: &Session, idx: u32) -> &'static str {
    let Some(meta) = s.index().get(idx) else {
        return "#999999";
    };
    match (&meta.entry.facts, meta.kind()) {
        (_, EntryKind::Compaction) => "#e67e22",
        (_, EntryKind::BranchSummary) => "#8e44ad",
        (
            Facts::Message {
                role: Role::User, ..
            },
            _,
        ) => "#2e86de",
        (
            Facts::Message {
                role: Role::Assistant,
                ..
            },
            _,
        ) => "#27ae60",
        (
            Facts::Message {
                role: Role::ToolResult,
                ..
            },
            _,
        ) => "#7f8c8d",
        _ => "#b2bec3",
    }
}

/// Renders the tree of `s` with `leaf` marked; `stats` gives the cost and
/// tokens of each branch.
pub fn render_tree(s: &Session, leaf: Option<u32>, stats: &StatsTable) -> String {
    let index = s.index();
    let labels: std::collections::HashMap<u32, String> = index
        .labels()
        .into_iter()
        .map(|(i, l)| (i, l.to_string()))
        .collect();
    let shown = |i: u32| index.is_shown(i);
    let kids = |i: u32| -> Vec<u32> {
        index
            .children(i)
            .into_iter()
            .filter(|&c| shown(c))
            .collect()
    };
    let special = |i: u32, n_kids: usize| {
        n_kids != 1
            || Some(i) == leaf
            || labels.contains_key(&i)
            || index.get(i).is_some_and(|m| {
                matches!(m.kind(), EntryKind::Compaction | EntryKind::BranchSummary)
            })
    };

    let mut items: Vec<Item> = Vec::new();
    let roots: Vec<u32> = index.roots().into_iter().filter(|&r| shown(r)).collect();
    let several = roots.len() > 1;
    // (entry, level, drawn parent row, is a root)
    let mut stack: Vec<(u32, u32, Option<usize>, bool)> = roots
        .iter()
        .rev()
        .map(|&r| (r, u32::from(several), None, true))
        .collect();
    let mut visited = vec![false; index.len()];
    while let Some((start, level, parent_row, is_root)) = stack.pop() {
        if visited.get(start as usize).copied().unwrap_or(true) {
            continue;
        }
        // Extend a run from `start` while entries are plain and linear.
        let mut last = start;
        let mut count = 1;
        visited[start as usize] = true;
        let mut children = kids(start);
        let start_special = is_root || special(start, children.len());
        if !start_special {
            while children.len() == 1 {
                let next = children[0];
                let next_kids = kids(next);
                if visited.get(next as usize).copied().unwrap_or(true)
                    || special(next, next_kids.len())
                {
                    break;
                }
                visited[next as usize] = true;
                last = next;
                count += 1;
                children = next_kids;
            }
        }
        let row = items.len();
        items.push(Item {
            first: start,
            last,
            count,
            level,
            parent_row,
            tip: children.is_empty(),
        });
        let branches = children.len() > 1;
        let child_level = level + u32::from(branches);
        for &c in children.iter().rev() {
            stack.push((c, child_level, Some(row), false));
        }
    }

    let max_level = items.iter().map(|i| i.level).max().unwrap_or(0);
    let width = LEFT * 2 + (max_level + 1) * INDENT + TEXT_WIDTH;
    let height = TOP + (items.len().max(1) as u32) * ROW + 16;
    let x_of = |level: u32| LEFT + level * INDENT + 6;
    let y_of = |row: usize| TOP + row as u32 * ROW;
    let session_total = stats.session();

    let mut out = String::with_capacity(256 + items.len() * 400);
    let _ = writeln!(
        out,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" font-family=\"monospace\" font-size=\"12\">"
    );
    let _ = writeln!(
        out,
        "<rect x=\"0\" y=\"0\" width=\"{width}\" height=\"{height}\" fill=\"#ffffff\"/>"
    );
    let _ = writeln!(
        out,
        "<text x=\"{LEFT}\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{} · {} entries · {} nodes · cost {} · {} tokens</text>",
        xml_escape(&s.header().id),
        index.len(),
        items.len(),
        number(session_total.cost),
        number(session_total.total_tokens())
    );
    // Connectors first, so nodes are drawn over them.
    out.push_str("<g class=\"edges\" stroke=\"#95a5a6\" stroke-width=\"1.5\" fill=\"none\">\n");
    for (row, item) in items.iter().enumerate() {
        if let Some(p) = item.parent_row {
            let px = x_of(items[p].level);
            let (x, y, py) = (x_of(item.level), y_of(row), y_of(p));
            let _ = writeln!(out, "<path d=\"M{px} {py} L{px} {y} L{x} {y}\"/>");
        }
    }
    out.push_str("</g>\n");
    for (row, item) in items.iter().enumerate() {
        let (x, y) = (x_of(item.level), y_of(row));
        let first_id = index.get(item.first).map_or("", |m| m.id());
        let last_id = index.get(item.last).map_or("", |m| m.id());
        let is_leaf = leaf == Some(item.first) || leaf == Some(item.last);
        let mut text = String::new();
        if item.count == 1 {
            let _ = write!(
                out,
                "<g class=\"entry\" data-id=\"{}\" data-count=\"1\">",
                xml_escape(first_id)
            );
            let stroke = if is_leaf { "#c0392b" } else { "#2d3436" };
            let sw = if is_leaf { 3 } else { 1 };
            let fill = colour(s, item.first);
            match index.get(item.first).map(|m| m.kind()) {
                Some(EntryKind::Compaction) => {
                    let _ = write!(
                        out,
                        "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" transform=\"rotate(45 {x} {y})\" fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"{sw}\"/>",
                        x - 5,
                        y - 5
                    );
                }
                _ => {
                    let _ = write!(
                        out,
                        "<circle cx=\"{x}\" cy=\"{y}\" r=\"6\" fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"{sw}\"/>"
                    );
                }
            }
            let _ = write!(text, "{} {}", first_id, kind_name(s, item.first));
        } else {
            let _ = write!(
                out,
                "<g class=\"run\" data-first=\"{}\" data-last=\"{}\" data-count=\"{}\">",
                xml_escape(first_id),
                xml_escape(last_id),
                item.count
            );
            let _ = write!(
                out,
                "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"16\" rx=\"3\" fill=\"#dfe6e9\" stroke=\"#636e72\"/>",
                x - 6,
                y - 8
            );
            let _ = write!(text, "⋯ {} entries {first_id} … {last_id}", item.count);
        }
        if is_leaf {
            text.push_str("  ◀ leaf");
        }
        for i in [item.first, item.last] {
            if let Some(l) = labels.get(&i) {
                let _ = write!(text, "  [{l}]");
                if item.first == item.last {
                    break;
                }
            }
        }
        if item.tip {
            let t = stats.path(s, item.last);
            let _ = write!(
                text,
                "  — branch: cost {} · {} tokens",
                number(t.cost),
                number(t.total_tokens())
            );
        }
        let _ = writeln!(
            out,
            "<title>{}</title><text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text></g>",
            xml_escape(&text),
            x + 12,
            y + 4,
            if is_leaf { "#c0392b" } else { "#2d3436" },
            xml_escape(&text)
        );
    }
    out.push_str("</svg>\n");
    out
}
