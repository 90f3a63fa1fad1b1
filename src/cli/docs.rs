//! `sessionfs completions SHELL` and `sessionfs man`: generated from the
//! clap definitions (`clap_complete`, `clap_mangen`), so they never drift
//! from the command line; `man --dir DIR` writes one page per subcommand
//! (README, "Install").

use std::path::PathBuf;

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use crate::cli::common::print_out;
use crate::cli::Cli;

/// Arguments of `sessionfs completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Arguments of `sessionfs man`.
#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// Write `sessionfs.1` and one `sessionfs-COMMAND.1` per subcommand to
    /// DIR instead of printing `sessionfs.1`.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Prints the completion script of a shell.
pub(crate) fn completions(args: &CompletionsArgs) -> crate::Result<i32> {
    let mut cmd = Cli::command();
    // Generated in memory: `generate` panics when its writer fails (a
    // closed pipe, a full disk), and output errors are `print_out`'s.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "sessionfs", &mut script);
    print_out(&String::from_utf8_lossy(&script))?;
    Ok(0)
}

/// Prints the man page, or writes all pages to a directory.
pub(crate) fn man(args: &ManArgs) -> crate::Result<i32> {
    let cmd = Cli::command();
    match &args.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| crate::Error::io(dir, e))?;
            clap_mangen::generate_to(cmd, dir).map_err(|e| crate::Error::io(dir, e))?;
        }
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut page)
                .map_err(|e| crate::Error::Internal(format!("rendering the man page: {e}")))?;
            print_out(&String::from_utf8_lossy(&page))?;
        }
    }
    Ok(0)
}
