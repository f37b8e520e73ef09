//! How the command line tools end: the exit statuses they document, and clap's refusals as one line.

use std::io::{ErrorKind, Write};
use std::path::Path;
use std::process::ExitCode;

use kquota::{ApiError, Entity, ErrorCode};

use crate::client::{error_name, parse_bootstrap};
use crate::config::ClientConfig;
use crate::quote::message_text;
use crate::show::entity_text;

/// Why a tool failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Failure {
    /// The command line or `--command-config` is wrong: exit status 2.
    Usage(String),
    /// The server refused or could not be reached: exit status 1.
    Server(String),
    /// Standard output could not be written (a full disk, a closed pipe): exit status 1. The text
    /// says what had already happened, such as an alteration that was applied.
    Output(String, std::io::Error),
}

/// Writes `text` to standard output and flushes it. A failure is [`Failure::Output`], with
/// `done` saying what had already happened before the output was lost (empty if nothing had).
pub fn write_out(text: &str, done: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Failure::Output(done.to_owned(), e))
}

/// The servers to bootstrap from: `--bootstrap-server`, else `bootstrap.servers` from
/// `--command-config`. A missing or malformed list is a usage failure.
pub fn bootstrap_servers(flag: Option<&str>, config: &ClientConfig) -> Result<String, Failure> {
    let (list, source) = match (flag, &config.bootstrap_servers) {
        (Some(list), _) => (list, "--bootstrap-server"),
        (None, Some(list)) => (list.as_str(), "bootstrap.servers in --command-config"),
        (None, None) => {
            return usage("--bootstrap-server is required, e.g. --bootstrap-server localhost:9092")
        }
    };
    match parse_bootstrap(list) {
        Ok(_) => Ok(list.to_owned()),
        Err(e) => usage(format!("{source}: {e}")),
    }
}

/// One entity a server refused, as both tools print it: `ENTITY: KAFKA_ERROR_NAME: message`.
///
/// A host name refused for an ip entity gets the real reason after the server's words, which are
/// Kafka's ("… is not a valid IP or resolvable host.") and so wrong about a name that resolves:
/// kquotad keeps ip quotas for IP literals only (docs/semantics.md, D7 "ip names"), where Apache
/// Kafka resolves host names.
pub fn refusal(entity: &Entity, error: &ApiError) -> String {
    let parts: Vec<(String, Option<String>)> = entity
        .components()
        .map(|(ty, name)| (ty.as_str().to_owned(), name.as_option().map(str::to_owned)))
        .collect();
    let mut line = format!(
        "{}: {}: {}",
        entity_text(&parts),
        error_name(error.code),
        message_text(&error.message)
    );
    let host_name = entity
        .ip()
        .and_then(|name| name.as_option())
        .filter(|name| name.parse::<std::net::IpAddr>().is_err());
    if let (Some(name), ErrorCode::INVALID_REQUEST) = (host_name, error.code) {
        line.push_str(&format!(
            " (this server names ip entities by IP address only, such as 127.0.0.1 or ::1, and \
             '{name}' is a host name: docs/semantics.md, D7 \"ip names\")"
        ));
    }
    line
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
    let (config, warnings) =
        ClientConfig::from_file(path).map_err(|e| Failure::Usage(e.to_string()))?;
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
        // The reader went away (`| head`): nothing to tell it, and nobody to tell but stderr.
        Err(Failure::Output(done, e)) if e.kind() == ErrorKind::BrokenPipe && done.is_empty() => {
            ExitCode::from(1)
        }
        Err(Failure::Output(done, e)) => {
            let done = if done.is_empty() {
                String::new()
            } else {
                format!(" ({done})")
            };
            eprintln!("error: could not write the output: {e}{done}");
            ExitCode::from(1)
        }
    }
}
