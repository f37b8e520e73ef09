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
use std::fmt;

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

/// A `sasl.jaas.config` value that cannot be parsed. The messages never quote an option's value,
/// which may be a password.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum JaasError {
    /// The text does not start with a login module's class name.
    MissingLoginModule,
    /// No control flag follows the login module.
    MissingControlFlag,
    /// The word after the login module is not `required`, `requisite`, `sufficient` or
    /// `optional`.
    UnknownControlFlag(String),
    /// An option name was expected.
    MissingOptionName,
    /// An option name is not followed by `=`.
    MissingEquals {
        /// The option's name.
        option: String,
    },
    /// An option has `=` but no value.
    MissingValue {
        /// The option's name.
        option: String,
    },
    /// A quoted value has no closing `"`.
    UnterminatedQuote,
    /// The entry does not end with `;`.
    MissingSemicolon,
    /// Something follows the entry's `;`: Kafka's clients take one login module.
    MoreThanOneModule,
}

impl fmt::Display for JaasError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JaasError::MissingLoginModule => f.write_str("expected a login module class name"),
            JaasError::MissingControlFlag => {
                f.write_str("expected a control flag (required) after the login module")
            }
            JaasError::UnknownControlFlag(flag) => write!(
                f,
                "'{flag}' is not a control flag (required, requisite, sufficient or optional)"
            ),
            JaasError::MissingOptionName => f.write_str("expected an option name"),
            JaasError::MissingEquals { option } => {
                write!(f, "expected '=' after option '{option}'")
            }
            JaasError::MissingValue { option } => {
                write!(f, "expected a value for option '{option}'")
            }
            JaasError::UnterminatedQuote => f.write_str("unterminated quoted value"),
            JaasError::MissingSemicolon => f.write_str("missing ';' at the end"),
            JaasError::MoreThanOneModule => f.write_str("only one login module may be configured"),
        }
    }
}

impl std::error::Error for JaasError {}

/// Parses one `sasl.jaas.config` value.
pub fn parse_jaas(text: &str) -> Result<JaasConfig, JaasError> {
    let mut p = Parser {
        chars: text.chars().collect(),
        at: 0,
    };
    let login_module = p.word().ok_or(JaasError::MissingLoginModule)?;
    let control_flag = p.word().ok_or(JaasError::MissingControlFlag)?;
    if !["required", "requisite", "sufficient", "optional"].contains(&control_flag.as_str()) {
        return Err(JaasError::UnknownControlFlag(control_flag));
    }
    let mut options = BTreeMap::new();
    loop {
        p.skip_space();
        match p.peek() {
            Some(';') => {
                p.at += 1;
                break;
            }
            None => return Err(JaasError::MissingSemicolon),
            _ => {}
        }
        let key = p.word().ok_or(JaasError::MissingOptionName)?;
        p.skip_space();
        if p.peek() != Some('=') {
            return Err(JaasError::MissingEquals { option: key });
        }
        p.at += 1;
        p.skip_space();
        let value = if p.peek() == Some('"') {
            p.quoted()?
        } else {
            p.word().ok_or_else(|| JaasError::MissingValue {
                option: key.clone(),
            })?
        };
        options.insert(key, value);
    }
    p.skip_space();
    if p.at < p.chars.len() {
        return Err(JaasError::MoreThanOneModule);
    }
    Ok(JaasConfig {
        login_module,
        control_flag,
        options,
    })
}

/// A cursor over the value's characters.
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

    fn quoted(&mut self) -> Result<String, JaasError> {
        self.at += 1; // the opening quote
        let mut out = String::new();
        loop {
            match self.peek() {
                None => return Err(JaasError::UnterminatedQuote),
                Some('"') => {
                    self.at += 1;
                    return Ok(out);
                }
                Some('\\') => {
                    self.at += 1;
                    match self.peek() {
                        Some(c) => out.push(c),
                        None => return Err(JaasError::UnterminatedQuote),
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
            let e = parse_jaas(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        assert_eq!(
            parse_jaas("M required username=;"),
            Err(JaasError::MissingValue {
                option: "username".to_owned()
            })
        );
    }
}
