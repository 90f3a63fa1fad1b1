//! `sessionfs ls`: what the mount would show at a path, without FUSE.

use std::io::Write;
use std::path::{Component, Path, PathBuf};

use clap::Args;

use crate::fs::layout::{Node, NodeType};
use crate::fs::tree::{Tree, TreeConfig};
use crate::session::paths::AgentDir;
use crate::Error;

/// Arguments of `sessionfs ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// The agent directory [default: $PI_CODING_AGENT_DIR, else ~/.xcsh/agent].
    #[arg(long, value_name = "DIR")]
    pub agent_dir: Option<PathBuf>,
    /// A path relative to the mount's root (e.g. `--work-pi--/SESSION/entries`)
    /// [default: the root].
    #[arg(value_name = "PATH", allow_hyphen_values = true)]
    pub path: Option<PathBuf>,
}

/// Resolves a path inside the mount to its node.
pub fn resolve(tree: &Tree, path: &Path) -> crate::Result<Node> {
    let mut stack = vec![Node::Root];
    for comp in path.components() {
        match comp {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                if stack.len() > 1 {
                    stack.pop();
                }
            }
            Component::Normal(name) => {
                let parent = stack.last().cloned().unwrap_or(Node::Root);
                let child = tree.lookup(&parent, name.as_encoded_bytes())?;
                stack.push(child);
            }
        }
    }
    Ok(stack.pop().unwrap_or(Node::Root))
}

/// Runs `sessionfs ls`: one name per line, directories with a trailing
/// `/`, links as `name -> target`; a file path prints its name.
pub fn run(args: LsArgs) -> crate::Result<i32> {
    let agent = AgentDir::resolve(args.agent_dir.as_deref());
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
        Error::EntryNotFound(_) => Error::Invalid(format!(
            "{}: no such file or directory in the mount",
            path.display()
        )),
        other => other,
    })?;
    let mut out = std::io::stdout().lock();
    let line = |out: &mut std::io::StdoutLock<'_>, name: &str, node: &Node| -> crate::Result<()> {
        let text = match node.node_type() {
            NodeType::Dir => format!("{name}/"),
            NodeType::Symlink => format!("{name} -> {}", tree.readlink(node)?),
            NodeType::File => name.to_string(),
        };
        writeln!(out, "{text}").map_err(|e| Error::io("stdout", e))
    };
    if node.is_dir() {
        for (name, child) in tree.list(&node)? {
            line(&mut out, &name, &child)?;
        }
    } else {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        line(&mut out, &name, &node)?;
    }
    Ok(0)
}
