//! Java strings as engine names, one for one.
//!
//! A Java `String` is any sequence of UTF-16 code units, lone surrogates included, and Kafka's default
//! callback compares names as Java holds them. The engine keys names by Rust `str`, so each Java
//! string maps to a name by a function that no two strings share:
//!
//! - every character of a well-formed string is itself, except U+FFFF (a noncharacter), which is
//!   written twice;
//! - a lone surrogate `u` is U+FFFF followed by the private-use character `U+F0000 + (u − 0xD800)`.
//!
//! A name that never held U+FFFF or a lone surrogate (every name a client or Kafka's metadata log
//! gives) is its own UTF-8, so the names an operator reads in an explanation are the ones they set.

/// The escape: a noncharacter, which no real name holds.
const ESCAPE: char = '\u{FFFF}';
/// The first private-use character of plane 15, where lone surrogates are written.
const SURROGATES_AT: u32 = 0xF0000;

/// Appends the engine name of the Java string `units` to `out`.
pub fn push_java(units: &[u16], out: &mut String) {
    for unit in char::decode_utf16(units.iter().copied()) {
        match unit {
            Ok(ESCAPE) => {
                out.push(ESCAPE);
                out.push(ESCAPE);
            }
            Ok(c) => out.push(c),
            Err(lone) => {
                out.push(ESCAPE);
                let offset = u32::from(lone.unpaired_surrogate()) - 0xD800;
                // 0xD800..=0xDFFF maps onto U+F0000..=U+F07FF, all valid characters.
                out.push(
                    char::from_u32(SURROGATES_AT + offset).unwrap_or(char::REPLACEMENT_CHARACTER),
                );
            }
        }
    }
}

/// The engine name of a Java string given as UTF-16 code units.
pub fn from_java(units: &[u16]) -> String {
    let mut out = String::with_capacity(units.len());
    push_java(units, &mut out);
    out
}

/// The engine name of a Rust string (a Java string with no lone surrogate).
pub fn from_str(name: &str) -> String {
    let units: Vec<u16> = name.encode_utf16().collect();
    from_java(&units)
}

/// A name as an operator reads it: lone surrogates as `\uXXXX`, everything else as it is.
pub fn display(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut chars = name.chars();
    while let Some(c) = chars.next() {
        if c != ESCAPE {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(ESCAPE) => out.push(ESCAPE),
            Some(s) => {
                let unit = (u32::from(s) - SURROGATES_AT) + 0xD800;
                out.push_str(&format!("\\u{unit:04X}"));
            }
            None => out.push(ESCAPE),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(s: &str) -> Vec<u16> {
        s.encode_utf16().collect()
    }

    #[test]
    fn well_formed_names_are_their_own_utf8() {
        for name in [
            "alice",
            "",
            "é日本",
            "😀",
            "a\u{0}b",
            "<default>",
            "a+b*c d%",
        ] {
            assert_eq!(from_java(&units(name)), name);
        }
    }

    #[test]
    fn lone_surrogates_and_the_escape_are_kept_apart() {
        let lone_high = vec![u16::from(b'a'), 0xD800];
        let lone_low = vec![0xDC00, u16::from(b'b')];
        let replacement = units("a\u{FFFD}");
        let escape = units("a\u{FFFF}");
        let names = [
            from_java(&lone_high),
            from_java(&lone_low),
            from_java(&replacement),
            from_java(&escape),
            from_java(&units("a")),
            from_java(&[0xD800, 0xD800]),
            from_java(&[0xD800]),
        ];
        for (i, a) in names.iter().enumerate() {
            for b in &names[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(display(&from_java(&lone_high)), "a\\uD800");
        assert_eq!(display(&from_java(&lone_low)), "\\uDC00b");
        assert_eq!(display(&from_java(&escape)), "a\u{FFFF}");
    }

    #[test]
    fn every_short_unit_sequence_has_its_own_name() {
        // All sequences of up to two units over a set that holds each kind of unit.
        let alphabet = [0x61, 0xD800, 0xDBFF, 0xDC00, 0xDFFF, 0xFFFF, 0xF000, 0x0];
        let mut seen = std::collections::HashMap::new();
        let mut sequences: Vec<Vec<u16>> = vec![vec![]];
        for &a in &alphabet {
            sequences.push(vec![a]);
            for &b in &alphabet {
                sequences.push(vec![a, b]);
            }
        }
        for s in sequences {
            if let Some(other) = seen.insert(from_java(&s), s.clone()) {
                panic!("{s:x?} and {other:x?} share a name");
            }
        }
    }
}
