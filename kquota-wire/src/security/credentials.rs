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
    /// How many credentials have each mechanism and iteration count, and how many users' first
    /// credential (the one PLAIN checks) does: what an unknown user's stand-in looks like.
    shapes: BTreeMap<Shape, usize>,
    first_shapes: BTreeMap<Shape, usize>,
}

/// A credential's mechanism, iteration count and salt length: what server-first shows of it.
type Shape = (ScramMechanism, u32, usize);

fn shape(c: &ScramCredential) -> Shape {
    (c.mechanism, c.iterations, c.salt.len())
}

fn count(map: &mut BTreeMap<Shape, usize>, s: Option<Shape>, add: bool) {
    let Some(s) = s else { return };
    let n = map.entry(s).or_insert(0);
    if add {
        *n += 1;
    } else {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(&s);
        }
    }
}

/// The shape most counted (the lowest iteration count among equals), if any.
fn most(map: &BTreeMap<Shape, usize>, mechanism: Option<ScramMechanism>) -> Option<Shape> {
    map.iter()
        .filter(|(s, _)| mechanism.is_none_or(|m| s.0 == m))
        .max_by(|(a, x), (b, y)| x.cmp(y).then(b.cmp(a)))
        .map(|(s, _)| *s)
}

impl Credentials {
    /// No users.
    pub fn new() -> Credentials {
        Credentials::default()
    }

    /// Adds or replaces `user`'s credential for its mechanism.
    pub fn insert(&mut self, user: &str, credential: ScramCredential) {
        let list = self.users.entry(user.to_owned()).or_default();
        let old = list
            .iter()
            .find(|c| c.mechanism == credential.mechanism)
            .map(shape);
        let old_first = list.first().map(shape);
        count(&mut self.shapes, old, false);
        count(&mut self.shapes, Some(shape(&credential)), true);
        list.retain(|c| c.mechanism != credential.mechanism);
        list.push(credential);
        list.sort_by_key(|c| c.mechanism);
        count(&mut self.first_shapes, old_first, false);
        count(&mut self.first_shapes, list.first().map(shape), true);
    }

    /// The iteration count and salt length most of the users' `mechanism` credentials have
    /// (4096 and 32 bytes without any): an unknown user's stand-in gets both, so that neither the
    /// count nor the salt's length tells anything.
    pub(crate) fn usual_shape(&self, mechanism: ScramMechanism) -> (u32, usize) {
        most(&self.shapes, Some(mechanism)).map_or((MIN_ITERATIONS, 32), |s| (s.1, s.2))
    }

    /// The key an unknown user's stand-in credential is made with: derived from every user's
    /// secrets, so it is the same after a restart and on every server that reads the same file
    /// (a stand-in that changed where real credentials do not would tell them apart), and no one
    /// without the file can compute it. Without users nothing is hidden, and any key will do.
    pub(crate) fn stand_in_key(&self) -> ring::hmac::Key {
        if self.users.is_empty() {
            return random_key();
        }
        let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
        digest.update(b"kquota SCRAM stand-in key v1\0");
        for (user, credentials) in &self.users {
            for c in credentials {
                for part in [user.as_bytes(), c.mechanism.name().as_bytes(), &c.salt] {
                    digest.update(&(part.len() as u64).to_be_bytes());
                    digest.update(part);
                }
                digest.update(&c.iterations.to_be_bytes());
                digest.update(&c.stored_key);
                digest.update(&c.server_key);
            }
        }
        ring::hmac::Key::new(ring::hmac::HMAC_SHA256, digest.finish().as_ref())
    }

    /// The mechanism and iteration count most users' PLAIN check runs with (SCRAM-SHA-256 and
    /// 4096 without users): an unknown user's PLAIN login costs the same PBKDF2.
    pub(crate) fn usual_plain(&self) -> (ScramMechanism, u32) {
        most(&self.first_shapes, None)
            .map_or((ScramMechanism::Sha256, MIN_ITERATIONS), |s| (s.0, s.1))
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

    /// Every user by name, in name order, with their credentials (SHA-256 first).
    pub fn users(&self) -> impl Iterator<Item = (&str, &[ScramCredential])> {
        self.users.iter().map(|(u, c)| (u.as_str(), c.as_slice()))
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

/// A random HMAC key (if the system's random source fails, stand-ins are merely predictable, and
/// there is no user for them to hide).
pub(crate) fn random_key() -> ring::hmac::Key {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    let _ = ring::rand::SystemRandom::new().fill(&mut bytes);
    ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes)
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
        assert_eq!(back.usual_shape(ScramMechanism::Sha512).0, 4096);
        assert_eq!(back.usual_plain(), (ScramMechanism::Sha256, 4096));
        // Stand-ins look like most users: the commonest mechanism and iteration count.
        let mut many = Credentials::new();
        assert_eq!(many.usual_plain(), (ScramMechanism::Sha256, 4096));
        for (user, m, n) in [
            ("a", ScramMechanism::Sha512, 8192),
            ("b", ScramMechanism::Sha512, 8192),
            ("c", ScramMechanism::Sha256, 4096),
            ("c", ScramMechanism::Sha256, 16384),
        ] {
            many.insert(user, ScramCredential::generate(m, "p", n).unwrap());
        }
        assert_eq!(many.usual_plain(), (ScramMechanism::Sha512, 8192));
        assert_eq!(many.usual_shape(ScramMechanism::Sha256).0, 16384);
        assert_eq!(many.usual_shape(ScramMechanism::Sha512).0, 8192);
        for bad in [
            "[]",
            r#"{"a":{"SCRAM-SHA-1":{"salt":"AA==","iterations":4096,"stored_key":"","server_key":""}}}"#,
            r#"{"a":{"SCRAM-SHA-256":{"salt":"AA==","iterations":4096,"stored_key":"AA==","server_key":"AA=="}}}"#,
            r#"{"a":{"SCRAM-SHA-256":{"salt":"AA==","iterations":4096,"password":"x"}}}"#,
        ] {
            assert!(Credentials::from_json(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn stand_ins_are_the_same_on_every_server_reading_one_file() {
        let mut c = Credentials::new();
        c.insert(
            "alice",
            ScramCredential::generate(ScramMechanism::Sha256, "a", 4096).unwrap(),
        );
        let text = c.to_json();
        let stand_in = |c: &Credentials| {
            ScramCredential::decoy(
                ScramMechanism::Sha256,
                (4096, 32),
                &c.stand_in_key(),
                "mallory",
            )
        };
        // A restart, or another server, reads the same file: the same stand-in, as real users'
        // credentials are the same.
        let again = Credentials::from_json(&text).unwrap();
        assert_eq!(stand_in(&c), stand_in(&again));
        // Another file's secrets give another key.
        let mut other = Credentials::new();
        other.insert(
            "alice",
            ScramCredential::generate(ScramMechanism::Sha256, "a", 4096).unwrap(),
        );
        assert_ne!(stand_in(&c).salt, stand_in(&other).salt);
        // The stand-in's salt is as long as most users' (Kafka's own salts are shorter than 32).
        let mut kafka_like = Credentials::new();
        for user in ["a", "b"] {
            let mut credential =
                ScramCredential::generate(ScramMechanism::Sha256, "p", 4096).unwrap();
            credential.salt.truncate(26);
            kafka_like.insert(user, credential);
        }
        let shape = kafka_like.usual_shape(ScramMechanism::Sha256);
        assert_eq!(shape, (4096, 26));
        let key = kafka_like.stand_in_key();
        assert_eq!(
            ScramCredential::decoy(ScramMechanism::Sha256, shape, &key, "mallory")
                .salt
                .len(),
            26
        );
    }
}
