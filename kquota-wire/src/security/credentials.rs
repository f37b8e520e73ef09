//! The SASL credentials file (`sasl.credentials.file`): SCRAM salted hashes per user and
//! mechanism, never passwords.
//!
//! ```json
//! {
//!   "alice": {
//!     "SCRAM-SHA-256": {
//!       "salt": "<base64>", "iterations": 4096,
//!       "stored_key": "<base64>", "server_key": "<base64>"
//!     },
//!     "SCRAM-SHA-512": { "...": "..." }
//!   }
//! }
//! ```
//!
//! `kquotad scram-credential` makes entries from a password read on stdin.

use std::collections::BTreeMap;
use std::path::Path;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::scram::{
    CredentialError, ScramCredential, ScramMechanism, MAX_ITERATIONS, MIN_ITERATIONS,
};

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    salt: String,
    iterations: u32,
    stored_key: String,
    server_key: String,
}

/// The users a SASL listener knows, by name, with their SCRAM credentials.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    users: BTreeMap<String, Vec<ScramCredential>>,
}

impl Credentials {
    /// No users.
    pub fn new() -> Credentials {
        Credentials::default()
    }

    /// Adds or replaces `user`'s credential for its mechanism.
    pub fn insert(&mut self, user: &str, credential: ScramCredential) {
        let list = self.users.entry(user.to_owned()).or_default();
        list.retain(|c| c.mechanism != credential.mechanism);
        list.push(credential);
        list.sort_by_key(|c| c.mechanism);
    }

    /// `user`'s credential for `mechanism`.
    pub fn get(&self, user: &str, mechanism: ScramMechanism) -> Option<&ScramCredential> {
        self.users
            .get(user)?
            .iter()
            .find(|c| c.mechanism == mechanism)
    }

    /// Any credential of `user` (SHA-256 first), for PLAIN.
    pub fn any(&self, user: &str) -> Option<&ScramCredential> {
        self.users.get(user)?.first()
    }

    /// How many users there are.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Parses the JSON form; every field is checked.
    pub fn from_json(text: &str) -> Result<Credentials, CredentialError> {
        let raw: BTreeMap<String, BTreeMap<String, Entry>> =
            serde_json::from_str(text).map_err(CredentialError::NotACredentialsFile)?;
        let mut out = Credentials::new();
        for (user, mechanisms) in raw {
            if user.is_empty() {
                return Err(CredentialError::EmptyUserName);
            }
            for (name, e) in mechanisms {
                let mechanism = ScramMechanism::from_name(&name).ok_or_else(|| {
                    CredentialError::UnknownMechanism {
                        user: user.clone(),
                        mechanism: name.clone(),
                    }
                })?;
                let field = |field: &'static str, v: &str| {
                    B64.decode(v).map_err(|_| CredentialError::NotBase64 {
                        user: user.clone(),
                        mechanism,
                        field,
                    })
                };
                let len = match mechanism {
                    ScramMechanism::Sha256 => 32,
                    ScramMechanism::Sha512 => 64,
                };
                let stored_key = field("stored_key", &e.stored_key)?;
                let server_key = field("server_key", &e.server_key)?;
                if stored_key.len() != len || server_key.len() != len {
                    return Err(CredentialError::KeyLength {
                        user,
                        mechanism,
                        expected: len,
                    });
                }
                if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&e.iterations) {
                    return Err(CredentialError::StoredIterations { user, mechanism });
                }
                let salt = field("salt", &e.salt)?;
                if salt.is_empty() {
                    return Err(CredentialError::EmptySalt { user, mechanism });
                }
                out.insert(
                    &user,
                    ScramCredential {
                        mechanism,
                        salt,
                        iterations: e.iterations,
                        stored_key,
                        server_key,
                    },
                );
            }
        }
        Ok(out)
    }

    /// Reads a credentials file.
    pub fn load(path: &Path) -> Result<Credentials, CredentialError> {
        let text = std::fs::read_to_string(path).map_err(|source| CredentialError::Unreadable {
            path: path.to_owned(),
            source,
        })?;
        Credentials::from_json(&text).map_err(|error| CredentialError::InFile {
            path: path.to_owned(),
            error: Box::new(error),
        })
    }

    /// The JSON form, pretty-printed.
    pub fn to_json(&self) -> String {
        let raw: BTreeMap<&str, BTreeMap<&str, Entry>> = self
            .users
            .iter()
            .map(|(user, creds)| {
                (
                    user.as_str(),
                    creds
                        .iter()
                        .map(|c| {
                            (
                                c.mechanism.name(),
                                Entry {
                                    salt: B64.encode(&c.salt),
                                    iterations: c.iterations,
                                    stored_key: B64.encode(&c.stored_key),
                                    server_key: B64.encode(&c.server_key),
                                },
                            )
                        })
                        .collect(),
                )
            })
            .collect();
        let mut s = serde_json::to_string_pretty(&raw).expect("plain maps serialize");
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trip_and_checks() {
        let mut c = Credentials::new();
        c.insert(
            "alice",
            ScramCredential::generate(ScramMechanism::Sha512, "a", 4096).unwrap(),
        );
        c.insert(
            "alice",
            ScramCredential::generate(ScramMechanism::Sha256, "a", 4096).unwrap(),
        );
        let text = c.to_json();
        assert!(!text.contains("\"a\""), "no password in the file");
        let back = Credentials::from_json(&text).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.any("alice").unwrap().mechanism, ScramMechanism::Sha256);
        assert!(back
            .get("alice", ScramMechanism::Sha512)
            .unwrap()
            .verify_password(b"a"));
        assert!(back.get("bob", ScramMechanism::Sha256).is_none());
        for bad in [
            "[]",
            r#"{"a":{"SCRAM-SHA-1":{"salt":"AA==","iterations":4096,"stored_key":"","server_key":""}}}"#,
            r#"{"a":{"SCRAM-SHA-256":{"salt":"AA==","iterations":4096,"stored_key":"AA==","server_key":"AA=="}}}"#,
            r#"{"a":{"SCRAM-SHA-256":{"salt":"AA==","iterations":4096,"password":"x"}}}"#,
        ] {
            assert!(Credentials::from_json(bad).is_err(), "{bad}");
        }
    }
}
