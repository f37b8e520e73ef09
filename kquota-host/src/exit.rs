//! How kquota's commands end: exit status 2 for what the operator must fix (a flag, a setting,
//! a file), 1 for anything else that failed, and clap's refusals folded into one line.

use std::io::{ErrorKind, Write};
use std::process::ExitCode;

/// The exit status of a usage error: a bad flag, setting or file.
pub const USAGE: u8 = 2;

/// `program: message` on stderr, and [`USAGE`].
pub fn usage(program: &str, message: &str) -> ExitCode {
    eprintln!("{program}: {message}");
    ExitCode::from(USAGE)
}

/// Help and version go to stdout with status 0 (1 if stdout cannot take them, silently when its
/// reader has gone, as `| head` does); anything else clap refuses becomes one line on stderr and
/// status 2, with clap's tip (if any) on the same line.
pub fn clap_failure(e: clap::Error) -> ExitCode {
    if matches!(
        e.kind(),
        clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
    ) {
        let mut out = std::io::stdout().lock();
        return match out
            .write_all(e.render().to_string().as_bytes())
            .and_then(|()| out.flush())
        {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) if e.kind() == ErrorKind::BrokenPipe => ExitCode::from(1),
            Err(e) => {
                eprintln!("error: could not write the output: {e}");
                ExitCode::from(1)
            }
        };
    }
    eprintln!("{}", one_line(&e.render().to_string()));
    ExitCode::from(USAGE)
}

/// Folds clap's multi-line rendering into one line.
fn one_line(rendered: &str) -> String {
    let mut lines = rendered.lines();
    let mut out = lines
        .next()
        .unwrap_or("error: invalid arguments")
        .to_owned();
    // A usage block may go on over indented lines (one per form of the command).
    let mut in_usage = false;
    for raw in lines {
        let line = raw.trim();
        in_usage =
            line.starts_with("Usage:") || (in_usage && raw.starts_with(' ') && !line.is_empty());
        if in_usage || line.is_empty() || line.starts_with("For more information") {
            continue;
        }
        out.push_str("; ");
        out.push_str(line.strip_prefix("tip: ").unwrap_or(line));
    }
    out.push_str(" (see --help)");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_refusals_are_one_line_with_the_tip() {
        let rendered = "error: unexpected argument '--nope' found\n\n  tip: to pass '--nope' as a value, use '-- --nope'\n\nUsage: kquotad [OPTIONS]\n       kquotad <COMMAND>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line(rendered),
            "error: unexpected argument '--nope' found; to pass '--nope' as a value, use '-- --nope' (see --help)"
        );
    }
}
