//! `sessionfs completions SHELL` and `sessionfs man`: generated from the
//! clap definitions (`clap_complete`, `clap_mangen`), so they never drift
//! from the command line. `docs/man/` holds the pages as generated; a test
//! checks that they are current (README, "Install").

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, CommandFactory};
use clap_complete::Shell;

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
    let mut out = std::io::stdout().lock();
    clap_complete::generate(args.shell, &mut cmd, "sessionfs", &mut out);
    out.flush()
        .map_err(|e| crate::Error::io(PathBuf::from("<stdout>"), e))?;
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
            let mut out = std::io::stdout().lock();
            clap_mangen::Man::new(cmd)
                .render(&mut out)
                .and_then(|()| out.flush())
                .map_err(|e| crate::Error::io(PathBuf::from("<stdout>"), e))?;
        }
    }
    Ok(0)
}
