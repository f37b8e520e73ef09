//! How kquota's commands end: exit status 2 for what the operator must fix (a flag, a setting,
//! a file), 1 for anything else that failed, and clap's refusals folded into one line.

use std::io::{ErrorKind, Write};
use std::process::ExitCode;

/// The exit status of a usage error: a bad flag, setting or file.
pub const USAGE: u8 = 2;

/// The exit status of a failure around correct settings: a port in use, a store that cannot be
/// opened or is held by another process, Kafka out of reach.
pub const FAILURE: u8 = 1;

/// Help and version go to stdout with status 0 (1 if stdout cannot take them, silently when its
/// reader has gone, as `| head` does); anything else clap refuses becomes one line on stderr and
/// status 2, with clap's tip (if any) on the same line.
pub fn clap_failure(e: clap::Error) -> ExitCode {
    match refusal(&e) {
        Some(line) => {
            eprintln!("{line}");
            ExitCode::from(USAGE)
        }
        None => display(&e),
    }
}

/// What clap refused, as one line with its tip; `None` for help and version, which are no refusal.
pub fn refusal(e: &clap::Error) -> Option<String> {
    (!matches!(
        e.kind(),
        clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
    ))
    .then(|| one_line(&e.render().to_string()))
}

/// Help or version on stdout, status 0 (1 if stdout cannot take them).
pub fn display(e: &clap::Error) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out
        .write_all(e.render().to_string().as_bytes())
        .and_then(|()| out.flush())
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == ErrorKind::BrokenPipe => ExitCode::from(FAILURE),
        Err(e) => {
            eprintln!("error: could not write the output: {e}");
            ExitCode::from(FAILURE)
        }
    }
}

/// The known key nearest a misspelt one, for a "did you mean" as clap gives a misspelt flag: at
/// most 3 edits away (and fewer than the key's length: `a` is not a misspelling of `b`).
pub fn nearest<'a>(key: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    known
        .into_iter()
        .map(|k| (strsim::levenshtein(key, k), k))
        .filter(|&(d, _)| d <= 3 && d < key.chars().count())
        .min_by_key(|&(d, _)| d)
        .map(|(_, k)| k)
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
    fn a_misspelt_key_is_told_the_nearest_known_one() {
        let known = ["max.connections", "max.connections.per.ip", "super.users"];
        assert_eq!(nearest("max.conections", known), Some("max.connections"));
        assert_eq!(nearest("super.user", known), Some("super.users"));
        // Nothing near: no guess.
        assert_eq!(nearest("log.retention.hours", known), None);
        assert_eq!(nearest("a", ["b"]), None);
    }

    #[test]
    fn clap_refusals_are_one_line_with_the_tip() {
        let rendered = "error: unexpected argument '--nope' found\n\n  tip: to pass '--nope' as a value, use '-- --nope'\n\nUsage: kquotad [OPTIONS]\n       kquotad <COMMAND>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line(rendered),
            "error: unexpected argument '--nope' found; to pass '--nope' as a value, use '-- --nope' (see --help)"
        );
    }
}
