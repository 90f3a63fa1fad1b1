use clap::Parser;

fn main() {
    sessionfs::cli::Cli::hide_storage_password();
    let cli = sessionfs::cli::Cli::parse_from(sessionfs::cli::Cli::argv());
    let mut filter =
        std::env::var("RUST_LOG").unwrap_or_else(|_| "warn,fuser::mnt=error".to_string());
    if cli.logs_requests() {
        filter.push(',');
        filter.push_str(sessionfs::fs::REQUEST_LOG_TARGET);
        filter.push_str("=debug");
    }
    env_logger::Builder::new().parse_filters(&filter).init();
    std::process::exit(sessionfs::cli::run(cli));
}
