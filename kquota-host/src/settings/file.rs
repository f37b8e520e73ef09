//! A server's settings file (`--config`): a Java properties file read as `Properties.load` reads
//! it (escapes, continuations, comments; see [`kquota_wire::properties`]), with the lines a
//! server should not guess at refused, naming the line.

use std::fmt;

use kquota_wire::properties::{self, PropertiesError, Property, Separator};

/// Why a line of a settings file is refused. Java reads `key value` as a setting and `key` alone
/// as one with the empty value, but in a server's file either is far more often a slip (a line of
/// prose, a lost `=`) than meant, so a server asks for `key=value`, and `key=` for an empty value.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LineProblem {
    /// `=value`: no key.
    EmptyKey,
    /// `key value`: the key is followed by a space, not `=` or `:`.
    SpaceAfterKey(String),
    /// `key` alone.
    KeyAlone(String),
}

impl fmt::Display for LineProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LineProblem::EmptyKey => f.write_str("empty key"),
            LineProblem::SpaceAfterKey(key) => write!(
                f,
                "expected key=value, got '{key}' followed by a space; a setting needs '=' or ':' between its key and its value"
            ),
            LineProblem::KeyAlone(key) => write!(
                f,
                "expected key=value, got '{key}' alone; write {key}= for an empty value"
            ),
        }
    }
}

/// Why a settings file is refused.
#[derive(Debug)]
#[non_exhaustive]
pub enum SettingsFileError {
    /// A line a server should not guess at, and its number.
    Line {
        /// The line's number (from 1).
        line: usize,
        /// What is wrong with it.
        problem: LineProblem,
    },
    /// A line Java's reader refuses (a malformed `\uXXXX` escape), and why.
    Properties(PropertiesError),
}

impl fmt::Display for SettingsFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingsFileError::Line { line, problem } => write!(f, "line {line}: {problem}"),
            SettingsFileError::Properties(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for SettingsFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SettingsFileError::Properties(e) => Some(e),
            SettingsFileError::Line { .. } => None,
        }
    }
}

/// The settings of `text` in file order, one per key (a later line wins, as in Java), each with
/// the line it starts on; values are trimmed, as Kafka's `ConfigDef` trims them. Keys are the
/// caller's to check.
pub fn read_settings(text: &str) -> Result<Vec<Property>, SettingsFileError> {
    let mut out = properties::parse(text).map_err(SettingsFileError::Properties)?;
    for p in &mut out {
        let line = p.line;
        let problem = if p.key.is_empty() {
            Some(LineProblem::EmptyKey)
        } else {
            match p.separator {
                Separator::Sign => None,
                Separator::Space => Some(LineProblem::SpaceAfterKey(p.key.clone())),
                Separator::Missing => Some(LineProblem::KeyAlone(p.key.clone())),
            }
        };
        if let Some(problem) = problem {
            return Err(SettingsFileError::Line { line, problem });
        }
        p.value = p.value.trim().to_owned();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(text: &str) -> Vec<(usize, String, String)> {
        read_settings(text)
            .unwrap()
            .into_iter()
            .map(|p| (p.line, p.key, p.value))
            .collect()
    }

    fn refusal(text: &str) -> String {
        read_settings(text).unwrap_err().to_string()
    }

    #[test]
    fn settings_are_read_as_java_reads_them() {
        let text = "# a server\n listeners = PLAINTEXT://127.0.0.1:0,\\\n    SSL://127.0.0.1:0  \nssl.keystore.location=C\\:\\\\ks.pem\nsuper.users:User:admin\nkquota.data.dir=/a\nkquota.data.dir=/b\nssl.key.password=\n";
        assert_eq!(
            settings(text),
            [
                (2, "listeners", "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"),
                (4, "ssl.keystore.location", "C:\\ks.pem"),
                (5, "super.users", "User:admin"),
                (7, "kquota.data.dir", "/b"),
                (8, "ssl.key.password", ""),
            ]
            .map(|(n, k, v)| (n, k.to_owned(), v.to_owned()))
        );
    }

    #[test]
    fn lines_a_server_should_not_guess_at_are_refused_with_their_number() {
        assert_eq!(
            refusal("listeners=PLAINTEXT://127.0.0.1:0\nthis line is wrong\n"),
            "line 2: expected key=value, got 'this' followed by a space; a setting needs '=' or ':' between its key and its value"
        );
        assert_eq!(
            refusal("a=1\n\nkquota.data.dir\n"),
            "line 3: expected key=value, got 'kquota.data.dir' alone; write kquota.data.dir= for an empty value"
        );
        assert_eq!(refusal("a=1\n = x\n"), "line 2: empty key");
        let e = refusal("a=1\n# \\u is fine in a comment\nb=\\u12\n");
        assert!(e.starts_with("line 3: malformed \\uXXXX escape"), "{e}");
    }
}
