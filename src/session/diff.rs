//! `diff/<a>..<b>`: a unified diff of the `branch.md` renderings of two
//! entries, with a header naming their common ancestor
//! (`docs/filesystem.md`, "`diff/<a>..<b>`").

use crate::session::error::Result;
use crate::session::render::Renderer;
use crate::session::Session;

/// Lines of context around each change.
const CONTEXT: usize = 3;

/// The last entry on both paths from the root (`None`: different roots).
pub fn common_ancestor(s: &Session, a: u32, b: u32) -> Option<u32> {
    let index = s.index();
    let pa = index.path_to(a);
    let pb = index.path_to(b);
    pa.iter()
        .zip(&pb)
        .take_while(|(x, y)| x == y)
        .last()
        .map(|(x, _)| *x)
}

/// The diff of the branches to `a` and `b`.
pub fn branch_diff(s: &Session, renderer: &Renderer<'_>, a: u32, b: u32) -> Result<String> {
    let index = s.index();
    let id = |i: u32| index.get(i).map_or("", |m| m.id()).to_string();
    let (ida, idb) = (id(a), id(b));
    let left = renderer.branch(Some(a))?;
    let right = renderer.branch(Some(b))?;
    let ancestor = match common_ancestor(s, a, b) {
        Some(c) => format!("`{}`", id(c)),
        None => "none (different roots)".to_string(),
    };
    let mut out =
        format!("# branch.md of `{ida}` against `{idb}`\n# common ancestor: {ancestor}\n");
    let diff = similar::TextDiff::from_lines(&left, &right);
    out.push_str(
        &diff
            .unified_diff()
            .context_radius(CONTEXT)
            .header(&format!("{ida}/branch.md"), &format!("{idb}/branch.md"))
            .to_string(),
    );
    Ok(out)
}
