//! `sessionfs ls`: what the mount would show at a path, without FUSE.

use std::path::{Component, Path, PathBuf};

use clap::Args;

use crate::fs::{Node, NodeType};
use crate::fs::{Tree, TreeConfig};
use crate::session::AgentDir;
use crate::Error;

/// Arguments of `sessionfs ls`.
#[derive(Debug, Args)]
pub(crate) struct LsArgs {
    /// The agent directory [default: where the agent keeps it: $PI_CODING_AGENT_DIR, else ~/.omp/agent; README].
    #[arg(long, value_name = "DIR")]
    pub agent_dir: Option<PathBuf>,
    /// A path relative to the mount's root (e.g. `--work-pi--/SESSION/entries`)
    /// [default: the root].
    #[arg(value_name = "PATH", allow_hyphen_values = true)]
    pub path: Option<PathBuf>,
    /// Print a JSON array of {name, type ("dir", "file" or "symlink"),
    /// target (symlinks)}.
    #[arg(long)]
    pub json: bool,
}

/// How many symbolic links one path may pass through (the kernel's limit).
const MAX_FOLLOWS: usize = 40;

/// Resolves a path inside the mount to its node, following the mount's
/// symbolic links as the kernel does (`by-id/`, `by-cwd/`, `HEAD`,
/// `refs/`, `branches/`: all of them name directories, and `ls` lists a
/// directory a link names), relative to the link's own directory.
fn resolve(tree: &Tree, path: &Path) -> crate::Result<Node> {
    let names = |p: &Path| -> Vec<Vec<u8>> {
        p.components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.as_encoded_bytes().to_vec()),
                Component::ParentDir => Some(b"..".to_vec()),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
            })
            .collect()
    };
    let mut stack = vec![Node::Root];
    let mut pending: std::collections::VecDeque<Vec<u8>> = names(path).into();
    let mut follows = 0;
    while let Some(name) = pending.pop_front() {
        if name == b".." {
            if stack.len() > 1 {
                stack.pop();
            }
            continue;
        }
        let parent = stack.last().cloned().unwrap_or(Node::Root);
        let child = tree.lookup(&parent, &name)?;
        if child.node_type() != NodeType::Symlink {
            stack.push(child);
            continue;
        }
        follows += 1;
        if follows > MAX_FOLLOWS {
            return Err(Error::Invalid(format!(
                "{}: too many levels of symbolic links",
                path.display()
            )));
        }
        let target = tree.readlink(&child)?;
        for n in names(Path::new(&target)).into_iter().rev() {
            pending.push_front(n);
        }
    }
    Ok(stack.pop().unwrap_or(Node::Root))
}

/// Runs `sessionfs ls`: one name per line, directories with a trailing
/// `/`, links as `name -> target`; a file path prints its name.
pub(crate) fn run(args: LsArgs) -> crate::Result<i32> {
    let agent = AgentDir::resolve(args.agent_dir.as_deref());
    crate::cli::common::check_agent_dir(&agent)?;
    let storage = crate::cli::common::storage(&agent)?;
    let tree = Tree::with_storage(
        TreeConfig {
            agent,
            // Listing never writes (no migration on disk).
            read_only: true,
            index: None,
            cache_bytes: 64 << 20,
        },
        storage,
    );
    let path = args.path.unwrap_or_default();
    let node = resolve(&tree, &path).map_err(|e| match e {
        Error::EntryNotFound(_) => Error::io(
            &path,
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no such file or directory in the mount",
            ),
        ),
        other => other,
    })?;
    let items: Vec<(String, Node)> = if node.is_dir() {
        tree.list(&node)?
    } else {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        vec![(name, node)]
    };
    if args.json {
        let rows = items
            .iter()
            .map(|(name, node)| {
                let (kind, target) = match node.node_type() {
                    NodeType::Dir => ("dir", None),
                    NodeType::File => ("file", None),
                    NodeType::Symlink => ("symlink", Some(tree.readlink(node)?)),
                };
                let mut v = serde_json::json!({ "name": name, "type": kind });
                if let (Some(t), Some(obj)) = (target, v.as_object_mut()) {
                    obj.insert("target".into(), t.into());
                }
                Ok(v)
            })
            .collect::<crate::Result<Vec<_>>>()?;
        crate::cli::common::print_json(&serde_json::Value::Array(rows))?;
        return Ok(0);
    }
    let mut text = String::new();
    for (name, node) in &items {
        match node.node_type() {
            NodeType::Dir => text.push_str(&format!("{name}/\n")),
            NodeType::Symlink => text.push_str(&format!("{name} -> {}\n", tree.readlink(node)?)),
            NodeType::File => text.push_str(&format!("{name}\n")),
        }
    }
    crate::cli::common::print_out(&text)?;
    Ok(0)
}
