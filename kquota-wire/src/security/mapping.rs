//! Kafka's `ssl.principal.mapping.rules`: how a client certificate's subject (its RFC 2253 name,
//! [`subject_dn`](crate::subject_dn)) becomes the principal's name, as Kafka's
//! `SslPrincipalMapper` makes it.
//!
//! The rules' patterns are Java regular expressions, compiled by the `regex` crate once they have
//! been rewritten where Java reads the same text differently; Java syntax the crate lacks is
//! refused when the rules are read, not when a client connects.

use std::fmt;

use regex::{Regex, RegexBuilder};

use super::{AuthContext, DefaultPrincipalBuilder, Principal, PrincipalBuilder, PrincipalError};

/// Kafka's `ssl.principal.mapping.rules` (its `SslPrincipalMapper`): rules separated by commas,
/// each `DEFAULT` (the name as it is) or `RULE:pattern/replacement/[LU]`. A name is given to the
/// rules in order; the first whose pattern matches the whole name gives the principal: the name
/// with every match of the pattern replaced (Java's `String.replaceAll`), then lower-cased (`L`)
/// or upper-cased (`U`). A name no rule matches is refused; so is every name when there are no
/// rules (an empty setting), as in Kafka.
///
/// Patterns are Java regular expressions, compiled by the `regex` crate once they have been
/// rewritten where Java means something else by the same text (`\d`, `\w`, `\s` and the POSIX
/// classes are ASCII in Java; `\<` is a literal; `[:` in a class is not an ASCII class); Java
/// syntax the crate lacks (back references, lookaround, atomic groups, possessive quantifiers,
/// `\Q...\E`, octal escapes, ...) is refused when the rules are read, not when a client connects.
/// The crate still differs from Java in that `$` (without `(?m)`) is only the end, not also before
/// a final line break; `.` matches U+0085, U+2028 and U+2029; `(?i)` folds case beyond ASCII; and
/// `\b` is Unicode-aware (Java's is ASCII since JDK 19). The crate matches in linear time, so no
/// pattern makes a connection wait on backtracking.
///
/// As a [`PrincipalBuilder`] it is Kafka's `DefaultKafkaPrincipalBuilder` with these rules: a
/// client certificate's subject is mapped, and every other principal is
/// [`DefaultPrincipalBuilder`]'s.
///
/// ```
/// use kquota_wire::PrincipalMapper;
///
/// let mapper = PrincipalMapper::parse("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L, DEFAULT").unwrap();
/// assert_eq!(mapper.map("CN=Alice,OU=Eng,O=Acme").unwrap(), "alice@eng");
/// assert_eq!(mapper.map("O=Acme").unwrap(), "O=Acme");
/// assert!(PrincipalMapper::parse("RULE:(?=a)/x/").is_err());
/// ```
#[derive(Debug)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
    text: String,
}

/// `ssl.principal.mapping.rules` with a rule that cannot be used: one that does not parse, whose
/// pattern the `regex` crate cannot read as Java does, or whose replacement Kafka would refuse or
/// throw on.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MappingRuleError {
    /// The rule, as written.
    pub rule: String,
    /// What is wrong with it.
    pub why: String,
}

impl fmt::Display for MappingRuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid rule '{}': {}", self.rule, self.why)
    }
}

impl std::error::Error for MappingRuleError {}

/// A name no rule of `ssl.principal.mapping.rules` applies to: Kafka refuses the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnmappedName {
    /// The name (a certificate's subject).
    pub name: String,
    /// The rules, as given.
    pub rules: String,
}

impl fmt::Display for UnmappedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no ssl.principal.mapping.rules rule applies to '{}' (rules: {})",
            self.name, self.rules
        )
    }
}

impl std::error::Error for UnmappedName {}

/// One rule: `DEFAULT`, or a pattern, its replacement and a case.
#[derive(Debug)]
enum Rule {
    Default,
    Map {
        /// The pattern anchored at both ends: whether the rule applies (Java's `Matcher.matches`).
        whole: Regex,
        /// The pattern as written: what is replaced.
        search: Regex,
        /// The replacement, as a template for [`regex::Captures::expand`].
        replacement: String,
        case: Case,
    },
}

/// A rule's `L` (lower-case the result), `U` (upper-case it), or neither.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

impl PrincipalMapper {
    /// Splits and reads the rules as Kafka's `SslPrincipalMapper.fromRules` does; `"DEFAULT"`
    /// keeps every name as it is.
    pub fn parse(text: &str) -> Result<PrincipalMapper, MappingRuleError> {
        let invalid = |rule: &str, why: String| MappingRuleError {
            rule: rule.to_owned(),
            why,
        };
        let mut rules = Vec::new();
        let mut rest = text.trim();
        loop {
            rest = rest.trim_start_matches(is_java_space);
            if rest.is_empty() {
                break;
            }
            if let Some(next) = rest.strip_prefix("DEFAULT").and_then(separator) {
                rules.push(Rule::Default);
                rest = next;
                continue;
            }
            if let Some((pattern, replacement, flag, after)) =
                rest.strip_prefix("RULE:").and_then(rule_body)
            {
                let (junk, next) = until_separator(after);
                let written = &rest[..rest.len() - after.len() + junk.len()];
                if !junk.is_empty() {
                    return Err(invalid(
                        written,
                        format!("unexpected '{junk}' after the rule"),
                    ));
                }
                let (whole, search) =
                    compile(pattern).map_err(|why| invalid(written, format!("pattern: {why}")))?;
                let replacement = replacement_template(replacement, &search)
                    .map_err(|why| invalid(written, format!("replacement: {why}")))?;
                let case = match flag {
                    Some('L') => Case::Lower,
                    Some('U') => Case::Upper,
                    _ => Case::Keep,
                };
                rules.push(Rule::Map {
                    whole,
                    search,
                    replacement,
                    case,
                });
                rest = next;
                continue;
            }
            // Neither form: Kafka's splitter takes the text up to the next comma as a rule, which
            // it then refuses (an empty one, as in `a,,b`, it skips).
            let (junk, next) = until_separator(rest);
            if !junk.is_empty() {
                return Err(invalid(
                    junk,
                    "expected DEFAULT or RULE:pattern/replacement/[LU]".to_owned(),
                ));
            }
            rest = next;
        }
        Ok(PrincipalMapper {
            rules,
            text: text.to_owned(),
        })
    }

    /// The principal's name for a certificate's subject (in RFC 2253 form), or why there is none.
    pub fn map(&self, dn: &str) -> Result<String, UnmappedName> {
        for rule in &self.rules {
            match rule {
                Rule::Default => return Ok(dn.to_owned()),
                Rule::Map {
                    whole,
                    search,
                    replacement,
                    case,
                } => {
                    if !whole.is_match(dn) {
                        continue;
                    }
                    // As Kafka does: `dn.replaceAll(pattern, replacement)`.
                    let name = replace_all(search, replacement, dn);
                    return Ok(match case {
                        Case::Keep => name,
                        Case::Lower => name.to_lowercase(),
                        Case::Upper => name.to_uppercase(),
                    });
                }
            }
        }
        Err(UnmappedName {
            name: dn.to_owned(),
            rules: self.text.clone(),
        })
    }

    /// The rules as given to [`PrincipalMapper::parse`].
    pub fn rules(&self) -> &str {
        &self.text
    }
}

impl PrincipalBuilder for PrincipalMapper {
    /// [`DefaultPrincipalBuilder`]'s principal, its name mapped when it is a client
    /// certificate's subject (Kafka maps no other name: not ANONYMOUS, not a SASL user). A
    /// subject no rule applies to is [`PrincipalError::Refused`] with the [`UnmappedName`].
    fn build(&self, context: &AuthContext<'_>) -> Result<Principal, PrincipalError> {
        let principal = DefaultPrincipalBuilder.build(context)?;
        let AuthContext::Ssl {
            peer_certificate: Some(_),
            ..
        } = context
        else {
            return Ok(principal);
        };
        let name = self.map(&principal.name).map_err(PrincipalError::refused)?;
        Ok(Principal { name, ..principal })
    }
}

/// Java's `\s`: space, tab, newline, vertical tab, form feed, carriage return.
fn is_java_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// Kafka's rule separator, `\s*(,\s*|$)`: the text after it, if `s` starts with one.
fn separator(s: &str) -> Option<&str> {
    let s = s.trim_start_matches(is_java_space);
    if s.is_empty() {
        Some(s)
    } else {
        s.strip_prefix(',')
            .map(|rest| rest.trim_start_matches(is_java_space))
    }
}

/// The shortest text before a separator, and the text after it.
fn until_separator(s: &str) -> (&str, &str) {
    for (at, _) in s.char_indices() {
        if let Some(next) = separator(&s[at..]) {
            return (&s[..at], next);
        }
    }
    (s, "")
}

/// After `RULE:`, `pattern/replacement/[LU]` with `\` escaping any character in either part
/// (Kafka's `((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?)`): the parts as written, the flag, and the
/// text after.
fn rule_body(s: &str) -> Option<(&str, &str, Option<char>, &str)> {
    fn part(s: &str) -> Option<(&str, &str)> {
        let mut chars = s.char_indices();
        while let Some((at, c)) = chars.next() {
            match c {
                '\\' => {
                    chars.next()?;
                }
                '/' => return Some((&s[..at], &s[at + 1..])),
                _ => {}
            }
        }
        None
    }
    let (pattern, rest) = part(s)?;
    let (replacement, rest) = part(rest)?;
    let flag = rest.chars().next().filter(|c| matches!(c, 'L' | 'U'));
    let rest = &rest[flag.map_or(0, char::len_utf8)..];
    Some((pattern, replacement, flag, rest))
}

/// The most memory one compiled pattern may take (the program, and the lazy DFA's cache), so
/// that a rule cannot exhaust the server's memory.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// A rule's pattern compiled twice: anchored at both ends (does the rule apply?) and as written
/// (what is replaced).
fn compile(pattern: &str) -> Result<(Regex, Regex), String> {
    let pattern = java_pattern(pattern)?;
    let build = |pattern: &str| {
        RegexBuilder::new(pattern)
            // `.` matches neither `\r` nor `\n`, nearer Java's `.` than the crate's default.
            .crlf(true)
            .size_limit(PATTERN_SIZE_LIMIT)
            .dfa_size_limit(PATTERN_SIZE_LIMIT)
            .build()
            .map_err(|e| e.to_string())
    };
    // Alone first, so that a pattern that is not whole (`a)|(b`) cannot pair with the wrapping.
    let search = build(&pattern)?;
    // `(?x)` and the line break end a `(?x)` comment the pattern may end in, and match nothing.
    let whole = build(&format!("\\A(?:{pattern}(?x)\n)\\z"))?;
    Ok((whole, search))
}

/// Java's `\s`, `\h` and `\v` (without UNICODE_CHARACTER_CLASS), and their complements, as
/// classes that stand alone and inside a class (where the crate reads them as a union).
const JAVA_SPACE: [&str; 2] = [r"[\t\n\x0B\f\r\x20]", r"[^\t\n\x0B\f\r\x20]"];
const JAVA_HORIZONTAL: [&str; 2] = [
    r"[\t\x20\xA0\x{1680}\x{180E}\x{2000}-\x{200A}\x{202F}\x{205F}\x{3000}]",
    r"[^\t\x20\xA0\x{1680}\x{180E}\x{2000}-\x{200A}\x{202F}\x{205F}\x{3000}]",
];
const JAVA_VERTICAL: [&str; 2] = [
    r"[\n\x0B\f\r\x{85}\x{2028}\x{2029}]",
    r"[^\n\x0B\f\r\x{85}\x{2028}\x{2029}]",
];

/// Java's POSIX classes (`\p{Alpha}`), ASCII in Java; the crate's ASCII classes have the same
/// members under the lower-cased names.
const JAVA_POSIX: [&str; 13] = [
    "Lower", "Upper", "ASCII", "Alpha", "Digit", "Alnum", "Punct", "Graph", "Print", "Blank",
    "Cntrl", "XDigit", "Space",
];

/// A Java pattern in the `regex` crate's syntax, where the two read the same text differently:
/// `\d \w \s \h \v` (and their complements) and `\p{Alpha}`-style classes are ASCII in Java,
/// `\<` and `\>` are literals, `[:` in a class is not an ASCII class; Java's possessive
/// quantifiers (`a*+`), its `U` flag (UNICODE_CHARACTER_CLASS, the crate's swap-greed), `\0`
/// octal escapes, `\Q...\E`, and `--` or `~~` in a class (set operations to the crate) are
/// refused. The rest is the crate's to read or refuse.
fn java_pattern(pattern: &str) -> Result<String, String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len());
    let mut at = 0;
    // How deeply classes are open where `at` is.
    let mut class = 0usize;
    // What the last item was, for what may follow a quantifier: Java makes it lazy with `?` and
    // possessive with `+`, and refuses any other quantifier after it.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Last {
        Other,
        Quantifier,
        Lazy,
    }
    let mut last = Last::Other;
    while let Some(&c) = chars.get(at) {
        at += 1;
        let after = std::mem::replace(&mut last, Last::Other);
        match c {
            '\\' => {
                let Some(&e) = chars.get(at) else {
                    out.push('\\'); // the crate refuses a trailing '\'
                    break;
                };
                at += 1;
                let pick = |set: [&'static str; 2]| set[usize::from(e.is_ascii_uppercase())];
                match e {
                    'd' | 'D' => out.push_str(pick([r"[0-9]", r"[^0-9]"])),
                    'w' | 'W' => out.push_str(pick([r"[0-9A-Za-z_]", r"[^0-9A-Za-z_]"])),
                    's' | 'S' => out.push_str(pick(JAVA_SPACE)),
                    'h' | 'H' => out.push_str(pick(JAVA_HORIZONTAL)),
                    'v' | 'V' => out.push_str(pick(JAVA_VERTICAL)),
                    '<' | '>' => out.push(e),
                    '0' => {
                        return Err(
                            "octal escapes (\\0...) are not supported: write \\x{...}".to_owned()
                        )
                    }
                    'Q' => {
                        return Err("\\Q...\\E is not supported: escape each character".to_owned())
                    }
                    'p' | 'P' | 'x' => {
                        // The braces, if any, are the escape's (`\x{41}+` is not possessive).
                        let braced = match chars.get(at) {
                            Some('{') => chars[at..].iter().position(|&c| c == '}'),
                            _ => None,
                        };
                        let Some(len) = braced else {
                            out.push('\\');
                            out.push(e);
                            continue;
                        };
                        let inner: String = chars[at + 1..at + len].iter().collect();
                        at += len + 1;
                        if e != 'x' && JAVA_POSIX.contains(&inner.as_str()) {
                            let not = if e == 'P' { "^" } else { "" };
                            out.push_str(&format!("[[:{not}{}:]]", inner.to_ascii_lowercase()));
                        } else {
                            out.push_str(&format!("\\{e}{{{inner}}}"));
                        }
                    }
                    e => {
                        out.push('\\');
                        out.push(e);
                    }
                }
            }
            '[' => {
                class += 1;
                out.push('[');
                if class > 1 && chars.get(at) == Some(&':') {
                    // Java reads `[[:alpha:]]` as a class of ':', 'a', 'l', 'p' and 'h'.
                    out.push_str("\\:");
                    at += 1;
                    continue;
                }
                if chars.get(at) == Some(&'^') {
                    out.push('^');
                    at += 1;
                }
                if chars.get(at) == Some(&']') {
                    // A ']' first in a class is one of its members.
                    out.push(']');
                    at += 1;
                }
            }
            ']' => {
                class = class.saturating_sub(1);
                out.push(']');
            }
            '-' | '~' if class > 0 && chars.get(at) == Some(&c) => {
                return Err(format!(
                    "'{c}{c}' in a class is not supported (the regex crate reads a set operation there): escape one"
                ));
            }
            '(' if class == 0 => {
                out.push('(');
                if chars.get(at) == Some(&'?') {
                    let flags = chars[at + 1..]
                        .iter()
                        .take_while(|c| c.is_ascii_alphabetic() || **c == '-');
                    if flags.clone().any(|&c| c == 'U') {
                        return Err(
                            "the flag U (UNICODE_CHARACTER_CLASS) is not supported".to_owned()
                        );
                    }
                    // The '?' is not a quantifier.
                    out.push('?');
                    at += 1;
                }
            }
            '*' | '+' | '?' if class == 0 => {
                last = match (after, c) {
                    (Last::Other, _) => Last::Quantifier,
                    (Last::Quantifier, '?') => Last::Lazy,
                    (Last::Quantifier, '+') => {
                        return Err(
                            "possessive quantifiers (such as a*+) are not supported".to_owned()
                        )
                    }
                    _ => return Err(format!("'{c}' cannot follow a quantifier")),
                };
                out.push(c);
            }
            '{' if class == 0 => {
                // `{n}`, `{n,}` or `{n,m}`: a quantifier.
                let counts = chars[at..]
                    .iter()
                    .take_while(|c| c.is_ascii_digit() || **c == ',')
                    .count();
                out.push('{');
                if counts > 0 && chars.get(at + counts) == Some(&'}') {
                    if after != Last::Other {
                        return Err("'{' cannot follow a quantifier".to_owned());
                    }
                    out.extend(&chars[at..=at + counts]);
                    at += counts + 1;
                    last = Last::Quantifier;
                }
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// A rule's replacement as Kafka applies it, as a template for [`regex::Captures::expand`]:
/// first Kafka's `escapeLiteralBackReferences`, then Java's `Matcher.appendReplacement` reading
/// of the result (`\c` is `c`; `$n` the group of the longest number the pattern has, whose first
/// digit is always taken; `${name}` a named group). What Java would throw on, at every name the
/// rule applies to, is refused here.
fn replacement_template(replacement: &str, pattern: &Regex) -> Result<String, String> {
    use std::fmt::Write as _;
    let groups = pattern.captures_len() - 1;
    let java = escape_literal_back_references(replacement, groups)?;
    let mut template = String::with_capacity(java.len());
    let mut chars = java.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => template.push_str("$$"),
                Some(c) => template.push(c),
                None => return Err("a trailing '\\'".to_owned()),
            },
            '$' => {
                let group = match chars.next() {
                    Some(d @ '0'..='9') => {
                        let mut group = d as usize - '0' as usize;
                        while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                            let longer = group * 10 + d as usize;
                            if longer > groups {
                                break;
                            }
                            group = longer;
                            chars.next();
                        }
                        if group > groups {
                            return Err(format!(
                                "${group} names a group the pattern does not have ({groups})"
                            ));
                        }
                        group
                    }
                    Some('{') => {
                        let mut name = String::new();
                        while let Some(c) = chars.next_if(char::is_ascii_alphanumeric) {
                            name.push(c);
                        }
                        if chars.next() != Some('}') || name.is_empty() {
                            return Err(
                                "'${' must be followed by a group's name and '}'".to_owned()
                            );
                        }
                        if name.starts_with(|c: char| c.is_ascii_digit()) {
                            return Err(format!(
                                "'${{{name}}}': a group's name starts with a letter"
                            ));
                        }
                        pattern
                            .capture_names()
                            .position(|n| n == Some(name.as_str()))
                            .ok_or_else(|| format!("the pattern has no group named '{name}'"))?
                    }
                    _ => return Err(
                        "'$' must be followed by a group number or {name} (write \\$ for a '$')"
                            .to_owned(),
                    ),
                };
                write!(template, "${{{group}}}").expect("a String takes any text");
            }
            c => template.push(c),
        }
    }
    Ok(template)
}

/// Kafka's `escapeLiteralBackReferences`, quirks and all: with capturing groups, a `$n` that names
/// no group even with its last digits dropped gets a `\` (so Java reads it as text). Kafka finds
/// the `$n`s in the replacement as written but inserts each `\` at that offset (in UTF-16 units)
/// into the text as already changed, so that each later such `$n` is escaped a place early per
/// `\` before it (`$8-$9` becomes `\$8\-$9`, and Java then throws on `$9`).
fn escape_literal_back_references(text: &str, groups: usize) -> Result<String, String> {
    if groups == 0 {
        return Ok(text.to_owned());
    }
    let is_digit = |u: &u16| (u16::from(b'0')..=u16::from(b'9')).contains(u);
    let original: Vec<u16> = text.encode_utf16().collect();
    let mut value = original.clone();
    let mut at = 0;
    while at < original.len() {
        if original[at] != u16::from(b'$') {
            at += 1;
            continue;
        }
        let digits = original[at + 1..]
            .iter()
            .take_while(|u| is_digit(u))
            .count();
        if digits == 0 {
            at += 1;
            continue;
        }
        let dollar = at;
        at += 1 + digits;
        if original[dollar + 1] == u16::from(b'0') {
            continue;
        }
        let number = String::from_utf16_lossy(&original[dollar + 1..at]);
        // Java's Integer.parseInt, which throws past i32::MAX.
        let mut index = number
            .parse::<u32>()
            .ok()
            .filter(|&n| n <= i32::MAX as u32)
            .ok_or_else(|| format!("${number}: Kafka cannot read a group number this large"))?
            as usize;
        while index > groups && index >= 10 {
            index /= 10;
        }
        if index > groups {
            value.insert(dollar, u16::from(b'\\'));
        }
    }
    String::from_utf16(&value).map_err(|_| {
        "Kafka would split a character escaping its '$'s: write \\$ where a '$' is text".to_owned()
    })
}

/// `dn` with every match of `search` replaced by `template`, as Java's `String.replaceAll`
/// finds them: a match may start where the one before it ended, even empty (the crate's own
/// `replace_all` skips an empty match there), and after an empty match the next search starts
/// one character on.
fn replace_all(search: &Regex, template: &str, dn: &str) -> String {
    let mut out = String::with_capacity(dn.len());
    let mut copied = 0;
    let mut from = 0;
    while let Some(captures) = search.captures_at(dn, from) {
        let found = captures.get(0).expect("group 0 is the match");
        out.push_str(&dn[copied..found.start()]);
        captures.expand(template, &mut out);
        copied = found.end();
        from = copied;
        if found.is_empty() {
            match dn[copied..].chars().next() {
                Some(c) => from += c.len_utf8(),
                None => break,
            }
        }
    }
    out.push_str(&dn[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(rules: &str, dn: &str) -> Result<String, UnmappedName> {
        PrincipalMapper::parse(rules).unwrap().map(dn)
    }

    #[test]
    fn mapping_rules_as_kafka_reads_them() {
        let dn = "CN=Alice,OU=Eng,O=Acme\\, Inc,C=US";
        assert_eq!(map("DEFAULT", dn).unwrap(), dn);
        assert_eq!(map("RULE:^CN=(.*?),.*$/$1/", dn).unwrap(), "Alice");
        assert_eq!(map("RULE:^CN=(.*?),.*$/$1/L", dn).unwrap(), "alice");
        assert_eq!(
            map("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/U", dn).unwrap(),
            "ALICE@ENG"
        );
        // Rules in order, the first that matches the whole name wins; none matching is an error.
        let rules = "RULE:^CN=bob,.*$/bob/, RULE:^CN=(.*?),.*$/user-$1/ ,DEFAULT";
        assert_eq!(map(rules, dn).unwrap(), "user-Alice");
        assert_eq!(map(rules, "OU=x").unwrap(), "OU=x");
        let unmapped = map("RULE:^CN=(.*?),.*$/$1/", "OU=x").unwrap_err();
        assert_eq!(
            (unmapped.name.as_str(), unmapped.rules.as_str()),
            ("OU=x", "RULE:^CN=(.*?),.*$/$1/")
        );
        assert_eq!(
            unmapped.to_string(),
            "no ssl.principal.mapping.rules rule applies to 'OU=x' (rules: RULE:^CN=(.*?),.*$/$1/)"
        );
        // Escaped slashes, in the pattern and in the replacement.
        assert_eq!(
            map("RULE:^CN=(.*?)\\/(.*)$/$1\\/$2/", "CN=a/b").unwrap(),
            "a/b"
        );
        // Commas inside a rule's pattern are the pattern's; whitespace and empty rules between.
        assert_eq!(
            map("  RULE:^CN=([^,]*),OU=.*$/$1/ , , DEFAULT  ", "CN=x,OU=y").unwrap(),
            "x"
        );
        // Every match is replaced, as Java's replaceAll does.
        assert!(map("RULE:[A-Z]+=/-/", "CN=a").is_err());
        assert_eq!(
            map("RULE:(?:[A-Z]+=[a-z]+,?)+/x/", "CN=a,OU=b").unwrap(),
            "x"
        );
        assert_eq!(map("RULE:.*/$0!/", "ab").unwrap(), "ab!!");
    }

    /// Whether a rule with `pattern` applies to `dn`.
    fn applies(pattern: &str, dn: &str) -> bool {
        map(&format!("RULE:{pattern}/x/"), dn).is_ok()
    }

    #[test]
    fn patterns_match_as_java_does() {
        assert!(applies("abc", "abc"));
        // The whole name, by whichever alternative gets there (Java's `matches`).
        assert!(!applies("abc", "abcd"));
        assert!(!applies("bc", "abc"));
        assert!(applies("a|ab", "ab"));
        assert!(applies("a|b", "b"));
        assert!(applies("^CN=(.*?),OU=(.*?)$", "CN=a,OU=b"));
        assert!(applies("[^,]+,[a-z0-9_-]{2,3}", "x y,a-1"));
        assert!(!applies("[^,]+,[a-z]{2,3}", "x,abcd"));
        assert!(applies("\\d+\\s\\w*\\W", "42 abc!"));
        assert!(applies("[\\d.]+", "1.2.3"));
        assert!(applies("[\\w.-]+@[^\\s,]+", "a.b-c@x\u{a0}y"));
        assert!(applies("(?:ab)*c?", "abab"));
        assert!(applies("a.c", "a\u{e9}c"));
        assert!(!applies("a.c", "a\nc"));
        assert!(!applies("a.c", "a\rc"));
        assert!(!applies("abc$", "abc\n"));
        assert!(applies("\\x41\\u0042\\x{43}\\.", "ABC."));
        assert!(applies("(?i)cn=(?<name>.*)", "CN=a"));
        assert!(applies("(a*)*b", "aaab"));
        assert!(applies("[a-z&&[^aeiou]]+[a[0-9]]", "xyz7"));
        assert!(!applies("[a-z&&[^aeiou]]+", "xa"));
        assert!(applies("CN=\\b.*", "CN=x"));
        // Java's \d, \w, \s and POSIX classes are ASCII; Unicode categories are Unicode.
        assert!(!applies("CN=\\w+", "CN=Jos\u{e9}"));
        assert!(applies("CN=\\W", "CN=\u{e9}"));
        assert!(!applies("\\d", "\u{663}"));
        assert!(!applies("\\s", "\u{a0}"));
        assert!(applies("[^\\S]", " "));
        assert!(!applies("\\p{Alpha}+", "Jos\u{e9}"));
        assert!(applies("\\P{Alpha}", "\u{e9}"));
        assert!(applies("[\\p{Alnum}.-]+", "a-1.b"));
        assert!(applies("\\pL+", "Jos\u{e9}"));
        assert!(applies("\\h\\v", "\u{a0}\u{2028}"));
        // Java reads `[:` in a class, and `\<`, as literals.
        assert!(applies("[[:alpha:]]+", "pha:"));
        assert!(!applies("[[:alpha:]]", "b"));
        assert!(applies("\\<CN=(.*)\\>", "<CN=a>"));
        // Not quantifiers, so not possessive: escaped, braced, in a class, a lone '}'.
        assert!(applies("a\\++", "a++"));
        assert!(applies("\\x{41}+", "AA"));
        assert!(applies("[a+]+", "a+"));
        assert!(applies("x}+", "x}}"));
        assert!(applies("[]a]+", "]a"));
        assert!(applies("[(?U)]+", "(?U)"));
        assert!(applies("a{2}?b??", "aa"));
        // A pattern may end in a (?x) comment.
        assert!(applies("(?x) CN = (.*) # the name", "CN=a"));
        // Catastrophic patterns for a backtracker end at once.
        let long = "a".repeat(5000);
        assert!(!applies("(a*)*b", &long));
        assert!(!applies("(a|aa)*c", &long));
    }

    #[test]
    fn replacing_as_kafka_does() {
        let apply = |rules: &str, dn: &str| map(rules, dn).unwrap();
        // Every match of the pattern, as Java's replaceAll finds them (an empty one too, right
        // after another).
        assert_eq!(apply("RULE:[a-c]*/-/", "abc"), "--");
        assert_eq!(apply("RULE:a*|.*/-/", "baaac"), "-b--c-");
        assert_eq!(apply("RULE:.*/$0!/", "ab"), "ab!!");
        assert_eq!(apply("RULE:(?s).*/[$0]/", "a\u{e9}\n"), "[a\u{e9}\n][]");
        // A group that took no part adds nothing.
        assert_eq!(apply("RULE:(a)(b)?(c)/[$2$1$3]/", "ac"), "[ac]");
        // Java takes the longest group number the pattern has; `\` makes text.
        assert_eq!(apply("RULE:(.)/$11/", "x"), "x1");
        assert_eq!(apply("RULE:(a)(b)/$01/", "ab"), "a");
        assert_eq!(apply("RULE:(.)/\\$1/", "x"), "$1");
        assert_eq!(apply("RULE:CN=(.*)/\\\\$1\\//", "CN=a"), "\\a/");
        assert_eq!(apply("RULE:ab/$0$0/", "ab"), "abab");
        // Kafka leaves a `$n` that names no group (even shortened) as it is.
        assert_eq!(apply("RULE:(.)/$2/", "x"), "$2");
        assert_eq!(apply("RULE:(a)(b)/$23/", "ab"), "b3");
        assert_eq!(apply("RULE:(a)(b)/$31/", "ab"), "$31");
        assert_eq!(
            apply("RULE:(\u{e9})/\u{1f600}$8 $1/", "\u{e9}"),
            "\u{1f600}$8 \u{e9}"
        );
        // Named groups, as Java names them.
        assert_eq!(
            apply("RULE:CN=(?<user>[^,]+),.*/${user}/U", "CN=bob,O=x"),
            "BOB"
        );
    }

    #[test]
    fn unsupported_patterns_are_refused() {
        let deep = "(".repeat(300) + &")".repeat(300);
        for pattern in [
            "(a",
            "a)",
            "a)|(b",
            "[a",
            "[]",
            "[b-a]",
            "*a",
            "a**",
            "a{2",
            "a{x}",
            "a{3,2}",
            "a?{2}",
            // Java syntax the regex crate does not have, or reads otherwise.
            "(?=a)",
            "(?!a)",
            "(?<=a)",
            "(?<!a)",
            "(?>a)",
            "a*+",
            "a++",
            "a?+",
            "a{2}+",
            "(?:ab)++",
            "a*?+",
            "(a)\\1",
            "(?<n>a)\\k<n>",
            "\\Q.*\\E",
            "\\0101",
            "\\x4",
            "\\uD800",
            "(?U)\\w",
            "(?iU:a)",
            "[a-z--b]",
            "[a~~b]",
            "\\Ga",
            "a\\Z",
            "\\R",
            "(?d)a",
            "\\p{javaLowerCase}",
            // Too large to compile, or too deep.
            "(a{1000}){1000}",
            &deep,
        ] {
            let rule = format!("RULE:{pattern}/x/");
            let e = PrincipalMapper::parse(&rule).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("invalid rule '{rule}': pattern: ")),
                "{pattern}: {e}"
            );
        }
    }

    #[test]
    fn malformed_rules_are_refused() {
        for rules in [
            "RULE:^CN=(.*?)$/$1/X",
            "RULE:^CN=(.*?)$/$1",
            "RULE:^CN=(.*?)$",
            "DEFAULTS",
            "alice",
            "RULE:(/x/",
            "RULE:(a)/$2x$/",
            "RULE:\\1/x/",
            // Replacements Java's replaceAll would throw on.
            "RULE:a/x$/",
            "RULE:a/$x/",
            "RULE:a/$1/",
            "RULE:(a)/${name}/",
            "RULE:(?<n>a)/${n/",
            "RULE:(?<n>a)/${1}/",
            "RULE:(a)/$99999999999/",
            // Kafka's escaping misplaces the second `\`, leaving `$9` a group reference.
            "RULE:(a)/$8-$9/",
        ] {
            let e = PrincipalMapper::parse(rules).unwrap_err().to_string();
            assert!(e.starts_with("invalid rule"), "{rules}: {e}");
        }
        // An empty setting has no rules: every certificate is refused, as in Kafka.
        assert!(map("", "CN=a").is_err());
    }

    /// A self-signed certificate's DER, its subject's attributes in the order given.
    fn certificate(subject: &[(rcgen::DnType, &str)]) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (t, v) in subject {
            params.distinguished_name.push(t.clone(), *v);
        }
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn as_a_builder_only_a_certificate_subject_is_mapped() {
        use crate::security::{SaslMechanism, SecurityProtocol};
        use rcgen::DnType::{CommonName, OrganizationName};

        let mapper = PrincipalMapper::parse("RULE:^CN=(.*?),O=(.*)$/$1@$2/U").unwrap();
        fn ssl(der: Option<&[u8]>) -> AuthContext<'_> {
            AuthContext::Ssl {
                peer: None,
                peer_certificate: der,
            }
        }
        let alice = certificate(&[(OrganizationName, "acme"), (CommonName, "alice")]);
        assert_eq!(
            mapper.build(&ssl(Some(&alice))).unwrap(),
            Principal::user("ALICE@ACME")
        );
        // No rule applies to these names, but Kafka maps only a certificate's subject.
        assert!(mapper.build(&ssl(None)).unwrap().is_anonymous());
        assert!(mapper
            .build(&AuthContext::Plaintext { peer: None })
            .unwrap()
            .is_anonymous());
        let sasl = AuthContext::Sasl {
            peer: None,
            protocol: SecurityProtocol::SaslSsl,
            mechanism: SaslMechanism::Plain,
            authorization_id: "bob",
        };
        assert_eq!(mapper.build(&sasl).unwrap(), Principal::user("bob"));
        // A subject no rule applies to is refused, and the refusal names it.
        let bob = certificate(&[(CommonName, "bob")]);
        let e = mapper.build(&ssl(Some(&bob))).unwrap_err();
        assert!(matches!(e, PrincipalError::Refused(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "no ssl.principal.mapping.rules rule applies to 'CN=bob' (rules: RULE:^CN=(.*?),O=(.*)$/$1@$2/U)"
        );
        // A certificate whose subject cannot be read is the certificate's error, as without rules.
        assert!(matches!(
            mapper.build(&ssl(Some(&[0x30, 0x03, 0x30, 0x01]))),
            Err(PrincipalError::Certificate(_))
        ));
    }
}
