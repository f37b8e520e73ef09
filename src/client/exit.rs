//! How the command line tools end: the exit statuses they document, and clap's refusals as one line.

use std::path::Path;
use std::process::ExitCode;

use super::ClientConfig;

/// Why a tool failed.
#[derive(Debug)]
pub enum Failure {
    /// The command line or `--command-config` is wrong: exit status 2.
    Usage(String),
    /// The server refused or could not be reached: exit status 1.
    Server(String),
}

/// A usage failure, as a `Result`.
pub fn usage<T>(message: impl Into<String>) -> Result<T, Failure> {
    Err(Failure::Usage(message.into()))
}

/// Reads `--command-config` if given (defaults otherwise), printing a `warning:` line per key not
/// understood; an unreadable or invalid file is a usage failure.
pub fn load_command_config(path: Option<&Path>) -> Result<ClientConfig, Failure> {
    let Some(path) = path else {
        return Ok(ClientConfig::default());
    };
    let (config, warnings) = ClientConfig::from_file(path).or_else(usage)?;
    for w in warnings {
        eprintln!("warning: {w}");
    }
    Ok(config)
}

/// Prints a failure as `error: …` on stderr and returns the documented exit status.
pub fn exit_status(result: Result<(), Failure>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(m)) => {
            eprintln!("error: {m}");
            ExitCode::from(2)
        }
        Err(Failure::Server(m)) => {
            eprintln!("error: {m}");
            ExitCode::from(1)
        }
    }
}

/// Help and version go to stdout with status 0; anything else clap refuses becomes one line and
/// status 2, with clap's tip (if any) on the same line.
pub fn clap_failure(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    eprintln!("{}", one_line(&e.render().to_string()));
    ExitCode::from(2)
}

/// Folds clap's multi-line rendering into one line.
fn one_line(rendered: &str) -> String {
    let mut lines = rendered.lines();
    let mut out = lines
        .next()
        .unwrap_or("error: invalid arguments")
        .to_owned();
    for line in lines {
        let line = line.trim();
        if line.is_empty() || line.starts_with("Usage:") || line.starts_with("For more information")
        {
            continue;
        }
        out.push_str("; ");
        out.push_str(line.strip_prefix("tip: ").unwrap_or(line));
    }
    out.push_str(" (see --help)");
    out
}
