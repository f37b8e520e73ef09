//! Text from a server, printed so that it cannot be misread: quoted and escaped where it holds what
//! does not show on a terminal (a name, or a message, could carry escape sequences).

use std::fmt::Write as _;

/// Characters that do not show on a terminal: control characters and Unicode's invisible
/// formatting characters (soft hyphen, zero-width and bidirectional marks, byte-order mark).
pub(crate) fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{AD}' | '\u{61C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}')
}

/// `"text"` with `"`, `\`, newline, carriage return and tab escaped as `\"`, `\\`, `\n`, `\r`, `\t`,
/// and every other hidden character as `\u{HEX}`. Every other character is kept as it is.
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_hidden(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub(crate) fn quote_if_needed(text: &str, plain: fn(&str) -> bool) -> String {
    if plain(text) {
        text.to_owned()
    } else {
        quote(text)
    }
}

/// A message from a server as printed: as it is, unless it holds a character that does not show
/// (a server could send escape sequences to the terminal), then quoted ([`quote`]).
pub fn message_text(text: &str) -> String {
    quote_if_needed(text, |t| !t.chars().any(is_hidden))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_messages_print_as_sent_unless_they_hide_characters() {
        assert_eq!(
            message_text("Cluster authorization failed."),
            "Cluster authorization failed."
        );
        // A message that would move the terminal's cursor, or colour it, is quoted and escaped.
        assert_eq!(message_text("ok\u{1b}[2Jwiped"), "\"ok\\u{1b}[2Jwiped\"");
        assert_eq!(message_text("two\nlines"), "\"two\\nlines\"");
    }
}
