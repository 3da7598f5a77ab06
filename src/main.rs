//! The `bosun` binary: parses the command line and runs it. This is the
//! edge: errors become `anyhow` reports printed with their whole chain.

mod cli;

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    match cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // The reader went away (`bosun ... | head`): it has what it wanted.
        Err(err) if cli::output::is_closed_pipe(&err) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
