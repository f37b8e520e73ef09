//! `sasl.jaas.config` as Kafka clients write it:
//!
//! ```text
//! org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="s3cret";
//! org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="s3cret";
//! ```
//!
//! One login module, a control flag, `key=value` options (values quoted with `"`, where `\"` and
//! `\\` escape, or bare words), and a closing `;`.

use std::collections::BTreeMap;

/// Kafka's PLAIN login module.
pub const PLAIN_LOGIN_MODULE: &str = "org.apache.kafka.common.security.plain.PlainLoginModule";
/// Kafka's SCRAM login module.
pub const SCRAM_LOGIN_MODULE: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";

/// One parsed JAAS entry.
#[derive(Clone, PartialEq, Eq)]
pub struct JaasConfig {
    /// The login module's class name.
    pub login_module: String,
    /// `required`, `requisite`, `sufficient` or `optional`.
    pub control_flag: String,
    /// The options, by name.
    pub options: BTreeMap<String, String>,
}

impl std::fmt::Debug for JaasConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password stays out of logs.
        f.debug_struct("JaasConfig")
            .field("login_module", &self.login_module)
            .field("control_flag", &self.control_flag)
            .field("options", &self.options.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Parses one `sasl.jaas.config` value.
pub fn parse_jaas(text: &str) -> Result<JaasConfig, String> {
    let mut p = Parser {
        chars: text.chars().collect(),
        at: 0,
    };
    let login_module = p.word().ok_or("expected a login module class name")?;
    let control_flag = p
        .word()
        .ok_or("expected a control flag (required) after the login module")?;
    if !["required", "requisite", "sufficient", "optional"].contains(&control_flag.as_str()) {
        return Err(format!(
            "'{control_flag}' is not a control flag (required, requisite, sufficient or optional)"
        ));
    }
    let mut options = BTreeMap::new();
    loop {
        p.skip_space();
        match p.peek() {
            Some(';') => {
                p.at += 1;
                break;
            }
            None => return Err("missing ';' at the end".to_owned()),
            _ => {}
        }
        let key = p.word().ok_or("expected an option name")?;
        p.skip_space();
        if p.peek() != Some('=') {
            return Err(format!("expected '=' after option '{key}'"));
        }
        p.at += 1;
        p.skip_space();
        let value = if p.peek() == Some('"') {
            p.quoted()?
        } else {
            p.word()
                .ok_or_else(|| format!("expected a value for option '{key}'"))?
        };
        options.insert(key, value);
    }
    p.skip_space();
    if p.at < p.chars.len() {
        return Err("only one login module may be configured".to_owned());
    }
    Ok(JaasConfig {
        login_module,
        control_flag,
        options,
    })
}

struct Parser {
    chars: Vec<char>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.at += 1;
        }
    }

    fn word(&mut self) -> Option<String> {
        self.skip_space();
        let start = self.at;
        while self
            .peek()
            .is_some_and(|c| !c.is_whitespace() && !matches!(c, '=' | ';' | '"'))
        {
            self.at += 1;
        }
        (self.at > start).then(|| self.chars[start..self.at].iter().collect())
    }

    fn quoted(&mut self) -> Result<String, String> {
        self.at += 1; // the opening quote
        let mut out = String::new();
        loop {
            match self.peek() {
                None => return Err("unterminated quoted value".to_owned()),
                Some('"') => {
                    self.at += 1;
                    return Ok(out);
                }
                Some('\\') => {
                    self.at += 1;
                    match self.peek() {
                        Some(c) => out.push(c),
                        None => return Err("unterminated quoted value".to_owned()),
                    }
                    self.at += 1;
                }
                Some(c) => {
                    out.push(c);
                    self.at += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_examples() {
        let j = parse_jaas(
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="s3 \"cr\\et";"#,
        )
        .unwrap();
        assert_eq!(j.login_module, PLAIN_LOGIN_MODULE);
        assert_eq!(j.control_flag, "required");
        assert_eq!(j.options["username"], "alice");
        assert_eq!(j.options["password"], r#"s3 "cr\et"#);
        let j = parse_jaas(
            "  org.apache.kafka.common.security.scram.ScramLoginModule required\n  username=bob\n  password = \"pw\" ;  ",
        )
        .unwrap();
        assert_eq!(j.login_module, SCRAM_LOGIN_MODULE);
        assert_eq!(j.options["username"], "bob");
        assert_eq!(j.options["password"], "pw");
        assert!(!format!("{j:?}").contains("pw"));
    }

    #[test]
    fn refusals() {
        for (bad, why) in [
            ("", "login module"),
            ("M", "control flag"),
            ("M always;", "not a control flag"),
            ("M required username=\"a\"", "missing ';'"),
            ("M required username \"a\";", "expected '='"),
            ("M required username=\"a;", "unterminated"),
            ("M required username=;", "expected a value"),
            ("M required; N required;", "only one"),
        ] {
            let e = parse_jaas(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }
}
