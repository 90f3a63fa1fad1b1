use clap::Parser;

fn main() {
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or("warn,fuser::mnt=error"),
    )
    .init();
    let cli = sessionfs::cli::Cli::parse();
    std::process::exit(sessionfs::cli::run(cli));
}
