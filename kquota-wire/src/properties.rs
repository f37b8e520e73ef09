//! Kafka reads these files with `java.util.Properties.load`; so does kquota, through
//! [`parse`] (used by `kquotad --config`, the tools' `--command-config`
//! and `kafka-configs --add-config-file`). The syntax is Java's, parsed by the `java-properties`
//! crate:
//!
//! * `key=value`, `key: value` and `key value` lines; a key alone has the empty value. White space
//!   around the separator and before the key is dropped; white space at the end of the value is kept
//!   (callers that follow Kafka's `ConfigDef` trim it).
//! * `#` and `!` start a comment line; nothing in a comment is read, not even its escapes.
//! * A line ending in an odd number of backslashes continues on the next line, whose leading white
//!   space is dropped; an even number is backslashes escaped in pairs (`\\` is one backslash) and
//!   does not continue.
//! * Escapes: `\uXXXX`, `\t`, `\n`, `\r`, `\f`, and a backslash before any other character stands
//!   for that character (`\:`, `\=`, `\ `, `\#`, `\\`). So a Windows path is `C\:\\ca.pem` or
//!   `C:\\ca.pem` (a `:` in a value needs no escape).
//! * Lines end at `\n`, `\r\n` or `\r`.
//!
//! Differences from Java:
//!
//! * The text is UTF-8, where `Properties.load(InputStream)` reads ISO-8859-1. User names,
//!   passwords and paths written in a UTF-8 editor (the usual case) must reach the server as typed;
//!   read as ISO-8859-1, `ü` would become `Ã¼` and the login would fail. ASCII files and `\uXXXX`
//!   escapes read the same either way. A leading byte-order mark is dropped.
//! * A `\uXXXX` escape must name a character by itself: a UTF-16 surrogate pair
//!   (`\uD83D\uDE00`) is refused; write the character itself instead.
//! * A last line that is only a continuation backslash is nothing; Java reads it as an empty key
//!   with the empty value.
//!
//! A malformed `\u` escape is an error naming its line, never a panic.

use std::collections::HashSet;
use std::fmt;

use java_properties::{LineContent, PropertiesIter};

/// One entry of a properties file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Property {
    /// The 1-based number of the line the entry starts on.
    pub line: usize,
    /// The key, unescaped.
    pub key: String,
    /// The value, unescaped and joined across continuation lines; trailing white space is kept.
    pub value: String,
    /// What stands between the key and the value.
    pub separator: Separator,
}

/// What separates a key from its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Separator {
    /// `=` or `:`, with or without white space around it: `key=value`, `key : value`, `key=`.
    Sign,
    /// White space alone: `key value`.
    Space,
    /// Nothing: the line is a key alone, and the value is empty (`key`).
    Missing,
}

/// Properties text that cannot be read: a malformed `\uXXXX` escape, and on which line.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PropertiesError {
    /// The 1-based number of the line the bad entry starts on.
    pub line: usize,
    /// What is wrong.
    pub kind: PropertiesErrorKind,
}

/// What is wrong with properties text.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PropertiesErrorKind {
    /// A `\uXXXX` escape names half of a UTF-16 surrogate pair, which is not read (see the
    /// module docs).
    SurrogateEscape,
    /// A `\u` not followed by four hex digits.
    MalformedEscape {
        /// The parser's reason (`not enough digits`, `not hex`).
        reason: String,
    },
    /// Anything else the underlying `java-properties` parser refuses: its description.
    Other(String),
}

impl fmt::Display for PropertiesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: ", self.line)?;
        match &self.kind {
            PropertiesErrorKind::SurrogateEscape => f.write_str(
                "a \\uXXXX escape names half of a UTF-16 surrogate pair, which is not read; write the character itself (the file is UTF-8)",
            ),
            PropertiesErrorKind::MalformedEscape { reason } => write!(
                f,
                "malformed \\uXXXX escape ({reason}): \\u must be followed by four hex digits; write \\\\ for a backslash"
            ),
            PropertiesErrorKind::Other(description) => f.write_str(description),
        }
    }
}

impl std::error::Error for PropertiesError {}

/// White space as `Properties.load` knows it (around keys and separators).
const WHITE: [char; 3] = [' ', '\t', '\x0c'];

/// Parses properties text. Each key is returned once, from the last line that sets it (a later
/// line wins, as in Java), in the order of those lines; comments and blank lines are skipped.
pub fn parse(text: &str) -> Result<Vec<Property>, PropertiesError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lines = physical_lines(text);
    // What the parser is given: the same lines, each ended by '\n', with comment lines blanked.
    // Three things the crate does not do as Java does are settled here: it reads escapes inside
    // comments (so `# C:\users` would be a malformed `\u`); it drops a last line that ends in a
    // continuation backslash when no line break follows (Java keeps it, without the backslash); and
    // after a line that is only a continuation backslash it joins a `#` line to it, where Java,
    // whose logical line is still empty, reads a comment.
    let mut input = String::with_capacity(text.len() + 1);
    // Whether the logical line has no content yet: a `#` or `!` here starts a comment.
    let mut empty = true;
    for line in &lines {
        let body = line.trim_start_matches(WHITE);
        if empty && body.starts_with(['#', '!']) {
            input.push('\n');
            continue;
        }
        input.push_str(line);
        input.push('\n');
        empty = !ends_in_odd_backslashes(body) || (empty && body == "\\");
    }
    let mut out = Vec::new();
    for line in PropertiesIter::new_with_encoding(input.as_bytes(), encoding_rs::UTF_8) {
        let line = line.map_err(|e| error(&e))?;
        let number = line.line_number();
        if let LineContent::KVPair(key, value) = line.consume_content() {
            out.push(Property {
                line: number,
                separator: separator(&lines, number - 1),
                key,
                value,
            });
        }
    }
    // A later line wins: keep each key's last entry only.
    let mut seen = HashSet::new();
    let mut kept: Vec<Property> = out
        .into_iter()
        .rev()
        .filter(|p| seen.insert(p.key.clone()))
        .collect();
    kept.reverse();
    Ok(kept)
}

/// The crate's error as ours. Its line number is always known for text (only reading from an
/// I/O stream can fail without one); its message says what is wrong with a `\u` escape.
fn error(e: &java_properties::PropertiesError) -> PropertiesError {
    // The message without the crate's " (line_number = N)" suffix, which Display adds.
    #[allow(deprecated)]
    let description = std::error::Error::description(e);
    let kind = match description
        .strip_prefix("Malformed \\uxxxx encoding: ")
        .map(|reason| reason.trim_end_matches('.'))
    {
        Some("invalid character") => PropertiesErrorKind::SurrogateEscape,
        Some(reason) => PropertiesErrorKind::MalformedEscape {
            reason: reason.to_owned(),
        },
        None => PropertiesErrorKind::Other(description.to_owned()),
    };
    PropertiesError {
        line: e.line_number().unwrap_or(0),
        kind,
    }
}

/// Splits text into lines at `\n`, `\r\n` or `\r`, as Java does; a final line break ends the last
/// line rather than starting an empty one.
fn physical_lines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        match rest.find(['\r', '\n']) {
            Some(at) => {
                out.push(&rest[..at]);
                let skip = if rest[at..].starts_with("\r\n") { 2 } else { 1 };
                rest = &rest[at + skip..];
            }
            None => {
                out.push(rest);
                break;
            }
        }
    }
    out
}

/// Whether a line continues on the next: it ends in an odd number of backslashes.
fn ends_in_odd_backslashes(line: &str) -> bool {
    (line.len() - line.trim_end_matches('\\').len()) % 2 == 1
}

/// What separates the key from the value in the entry that starts on `lines[first]`. The crate does
/// not say, so the logical line is rebuilt as it builds it and scanned for the end of the key: the
/// first `=`, `:` or white space that is not escaped.
fn separator(lines: &[&str], first: usize) -> Separator {
    let mut logical = String::new();
    for (i, line) in lines[first..].iter().enumerate() {
        let line = if i == 0 { line } else { line.trim_start() };
        if !ends_in_odd_backslashes(line) {
            logical.push_str(line);
            break;
        }
        logical.push_str(&line[..line.len() - 1]);
    }
    let mut chars = logical.trim_start_matches(WHITE).chars();
    loop {
        match chars.next() {
            None => return Separator::Missing,
            Some('\\') => {
                chars.next();
            }
            Some('=' | ':') => return Separator::Sign,
            Some(c) if WHITE.contains(&c) => break,
            Some(_) => {}
        }
    }
    match chars.as_str().trim_start_matches(WHITE).chars().next() {
        None => Separator::Missing,
        Some('=' | ':') => Separator::Sign,
        Some(_) => Separator::Space,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The (key, value) pairs of `text`.
    fn pairs(text: &str) -> Vec<(String, String)> {
        parse(text)
            .unwrap()
            .into_iter()
            .map(|p| (p.key, p.value))
            .collect()
    }

    fn one(text: &str) -> Property {
        let mut all = parse(text).unwrap();
        assert_eq!(all.len(), 1, "{all:?}");
        all.remove(0)
    }

    fn owned(want: &[(&str, &str)]) -> Vec<(String, String)> {
        want.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn escapes() {
        assert_eq!(
            pairs("k\\u0041\\:\\=\\\\\\t\\ x = \\u0041\\:\\=\\\\\\t\\n\\r\\f\\b\n"),
            owned(&[("kA:=\\\t x", "A:=\\\t\n\r\x0cb")])
        );
        assert_eq!(pairs("\\#k=\\!v\n"), owned(&[("#k", "!v")]));
        // A value's leading space survives only escaped.
        assert_eq!(pairs("k = \\  v\n"), owned(&[("k", "  v")]));
    }

    #[test]
    fn windows_paths() {
        assert_eq!(
            pairs("ssl.truststore.location=C\\:\\\\ca.pem\nb=C:\\\\certs\\\\ca.pem\n"),
            owned(&[
                ("ssl.truststore.location", "C:\\ca.pem"),
                ("b", "C:\\certs\\ca.pem")
            ])
        );
        // An unescaped backslash before an ordinary letter just drops out, as in Java.
        assert_eq!(pairs("p=C:\\certs\n"), owned(&[("p", "C:certs")]));
    }

    #[test]
    fn continuation_needs_an_odd_number_of_backslashes() {
        // One: continues, and the next line's leading white space is dropped.
        assert_eq!(
            pairs("a=x\\\n   y\nb=1\n"),
            owned(&[("a", "xy"), ("b", "1")])
        );
        // Two: an escaped backslash, the line ends there.
        assert_eq!(pairs("a=x\\\\\n   y\n"), owned(&[("a", "x\\"), ("y", "")]));
        // Three: an escaped backslash, then a continuation.
        assert_eq!(pairs("a=x\\\\\\\n\ty\n"), owned(&[("a", "x\\y")]));
        // Continuations chain; a continued line that starts with '#' is not a comment.
        assert_eq!(
            pairs("a=1\\\n  2\\\n  #3\n#b=4\\\nc=5\n"),
            owned(&[("a", "12#3"), ("c", "5")])
        );
        // The last line may end in a continuation with no line after it (Java drops the backslash).
        assert_eq!(pairs("a=x\\"), owned(&[("a", "x")]));
        assert_eq!(pairs("a=x\\\n"), owned(&[("a", "x")]));
        // A key may be continued too.
        let p = one("lis\\\n  teners \\\n  = x\n");
        assert_eq!((p.key.as_str(), p.value.as_str()), ("listeners", "x"));
        assert_eq!((p.line, p.separator), (1, Separator::Sign));
    }

    #[test]
    fn comments_and_blank_lines() {
        let text = "# comment\n  ! also a comment\n\n   \na=1\n# C:\\users\\u12 is never read\n";
        assert_eq!(pairs(text), owned(&[("a", "1")]));
        // A line that is only a continuation leaves the logical line empty: '#' still starts a
        // comment after it, as in Java.
        assert_eq!(pairs("\\\n#c\\\n 1:4\n"), owned(&[("1", "4")]));
        assert_eq!(pairs(" \\\r\\\n  !c\n:a\n"), owned(&[("", "a")]));
        // A comment does not continue, whatever it ends with.
        assert_eq!(pairs("# ends in \\\nb=2\n"), owned(&[("b", "2")]));
        // '#' after a key is part of the value.
        assert_eq!(
            pairs("a=1 # not a comment\n"),
            owned(&[("a", "1 # not a comment")])
        );
    }

    #[test]
    fn separators() {
        let got = parse("a=1\nb:2\nc 3\nd = 4\ne\t:\t5\nf\ng   \nh=\ni \\=6\n").unwrap();
        let got: Vec<(&str, &str, Separator)> = got
            .iter()
            .map(|p| (p.key.as_str(), p.value.as_str(), p.separator))
            .collect();
        use Separator::*;
        assert_eq!(
            got,
            [
                ("a", "1", Sign),
                ("b", "2", Sign),
                ("c", "3", Space),
                ("d", "4", Sign),
                ("e", "5", Sign),
                ("f", "", Missing),
                ("g", "", Missing),
                ("h", "", Sign),
                ("i", "=6", Space),
            ]
        );
        // Only the first separator counts; the rest is value.
        assert_eq!(pairs("a=b=c:d e\n"), owned(&[("a", "b=c:d e")]));
        // An escaped separator is part of the key.
        let p = one("a\\=b\\:c\\ d=e\n");
        assert_eq!((p.key.as_str(), p.separator), ("a=b:c d", Sign));
        // Trailing white space of a value is kept, as Java keeps it.
        assert_eq!(pairs("a = 1  \n"), owned(&[("a", "1  ")]));
    }

    #[test]
    fn a_key_alone_has_the_empty_value() {
        let p = one("  ssl.endpoint.identification.algorithm\n");
        assert_eq!(p.key, "ssl.endpoint.identification.algorithm");
        assert_eq!((p.value.as_str(), p.separator), ("", Separator::Missing));
    }

    #[test]
    fn an_empty_key_is_returned_for_the_caller_to_judge() {
        let p = one("\n=x\n");
        assert_eq!((p.key.as_str(), p.value.as_str(), p.line), ("", "x", 2));
    }

    #[test]
    fn malformed_unicode_escapes_name_the_line() {
        for (text, reason) in [
            ("a=1\nb=\\u12\n", "not enough digits"),
            ("a=1\nb=\\u12", "not enough digits"),
            ("a=1\nb=\\u12zz\n", "not hex"),
            ("a=1\n\\u12=b\n", "not enough digits"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, 2, "{text:?}");
            assert!(
                matches!(&e.kind, PropertiesErrorKind::MalformedEscape { reason: r } if r == reason),
                "{e}"
            );
            assert!(
                e.to_string()
                    .starts_with("line 2: malformed \\uXXXX escape"),
                "{e}"
            );
        }
        // On a continued entry, the line it starts on.
        let e = parse("a=1\nb=x\\\n  \\u00\n").unwrap_err();
        assert_eq!(e.line, 2);
        let e = parse("a=\\uD83D\\uDE00\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("line 1: a \\uXXXX escape names half of a UTF-16 surrogate pair"),
            "{e}"
        );
    }

    #[test]
    fn utf8_survives() {
        assert_eq!(
            pairs(
                "sasl.jaas.config=... username=\"jürgen\" password=\"pässwörd☃\";\nclient.id=☃\n"
            ),
            owned(&[
                (
                    "sasl.jaas.config",
                    "... username=\"jürgen\" password=\"pässwörd☃\";"
                ),
                ("client.id", "☃")
            ])
        );
        assert_eq!(pairs("k=\\u00fc\\u2603\n"), owned(&[("k", "ü☃")]));
        // A byte-order mark is not part of the first key.
        assert_eq!(pairs("\u{feff}a=1\n"), owned(&[("a", "1")]));
    }

    #[test]
    fn line_endings_and_line_numbers() {
        let got = parse("a=1\r\n# c\r\nb=2\\\r\n  3\r\n\r\nc=4\rd=5\r").unwrap();
        let got: Vec<(usize, &str, &str)> = got
            .iter()
            .map(|p| (p.line, p.key.as_str(), p.value.as_str()))
            .collect();
        assert_eq!(
            got,
            [(1, "a", "1"), (3, "b", "23"), (6, "c", "4"), (7, "d", "5")]
        );
        assert_eq!(pairs(""), owned(&[]));
        assert_eq!(pairs("\n\r\n"), owned(&[]));
    }

    #[test]
    fn a_later_line_wins() {
        let got = parse("a=1\nb=2\na=3\n").unwrap();
        let got: Vec<(usize, &str, &str)> = got
            .iter()
            .map(|p| (p.line, p.key.as_str(), p.value.as_str()))
            .collect();
        assert_eq!(got, [(2, "b", "2"), (3, "a", "3")]);
    }

    proptest! {
        /// Any text parses or fails with a line number; it never panics.
        #[test]
        fn never_panics(text in "([a-z=: \\t\\\\#!u0-9\u{feff}ü\\r\\n]){0,60}") {
            let lines = physical_lines(&text).len().max(1);
            match parse(&text) {
                Ok(all) => prop_assert!(all.iter().all(|p| (1..=lines).contains(&p.line))),
                Err(e) => prop_assert!((1..=lines).contains(&e.line), "{e}"),
            }
        }
    }
}
