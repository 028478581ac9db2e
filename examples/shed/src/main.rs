//! `shed`: the command for a shed-server's sheds (see `shed --help`).

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = shed::cli::Args::parse();
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    let code = shed::cli::run(args, &mut out, &mut err).await;
    std::process::ExitCode::from(u8::try_from(code).unwrap_or(1))
}
