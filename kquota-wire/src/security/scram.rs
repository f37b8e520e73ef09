//! SCRAM (RFC 5802, RFC 7677): the key derivation, stored credentials, and both sides of the
//! exchange as Kafka runs it (no channel binding; `SCRAM-SHA-256` and `SCRAM-SHA-512`).
//!
//! A server stores, per user and mechanism, a salt, an iteration count, `StoredKey` and `ServerKey`
//! ([`ScramCredential`]), never the password: `StoredKey` verifies a client's proof and
//! `ServerKey` signs the server's answer. A PLAIN login is checked against the same entry by
//! deriving `StoredKey` from the offered password.

use std::fmt;
use std::num::NonZeroU32;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ring::{digest, hmac, pbkdf2, rand::SecureRandom};

/// The fewest PBKDF2 iterations accepted, as Kafka (`ScramMechanism.minIterations`).
pub const MIN_ITERATIONS: u32 = 4096;
/// The most PBKDF2 iterations accepted, as Kafka (`ScramMechanism.maxIterations`).
pub const MAX_ITERATIONS: u32 = 16384;

/// A SCRAM mechanism Kafka supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScramMechanism {
    /// `SCRAM-SHA-256`.
    Sha256,
    /// `SCRAM-SHA-512`.
    Sha512,
}

/// The primitives one SCRAM variant is built from.
#[derive(Clone, Copy)]
struct Algorithm {
    pbkdf2: pbkdf2::Algorithm,
    hmac: hmac::Algorithm,
    digest: &'static digest::Algorithm,
}

impl ScramMechanism {
    /// Both mechanisms, SHA-256 first.
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// The SASL name (`SCRAM-SHA-256`).
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism with this SASL name.
    pub fn from_name(name: &str) -> Option<ScramMechanism> {
        ScramMechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    fn algorithm(self) -> Algorithm {
        match self {
            ScramMechanism::Sha256 => Algorithm {
                pbkdf2: pbkdf2::PBKDF2_HMAC_SHA256,
                hmac: hmac::HMAC_SHA256,
                digest: &digest::SHA256,
            },
            ScramMechanism::Sha512 => Algorithm {
                pbkdf2: pbkdf2::PBKDF2_HMAC_SHA512,
                hmac: hmac::HMAC_SHA512,
                digest: &digest::SHA512,
            },
        }
    }
}

impl fmt::Display for ScramMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Algorithm {
    fn salted_password(&self, password: &[u8], salt: &[u8], iterations: NonZeroU32) -> Vec<u8> {
        let mut out = vec![0u8; self.digest.output_len()];
        pbkdf2::derive(self.pbkdf2, iterations, salt, password, &mut out);
        out
    }

    fn hmac(&self, key: &[u8], data: &[u8]) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(self.hmac, key), data)
            .as_ref()
            .to_vec()
    }

    fn hash(&self, data: &[u8]) -> Vec<u8> {
        digest::digest(self.digest, data).as_ref().to_vec()
    }

    fn client_key(&self, salted: &[u8]) -> Vec<u8> {
        self.hmac(salted, b"Client Key")
    }

    fn server_key(&self, salted: &[u8]) -> Vec<u8> {
        self.hmac(salted, b"Server Key")
    }
}

/// Compares two byte strings in time that depends only on their lengths.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

/// What a server stores for one user and mechanism.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    /// The mechanism.
    pub mechanism: ScramMechanism,
    /// The salt.
    pub salt: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// `H(HMAC(SaltedPassword, "Client Key"))`.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
}

impl fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keys stay out of logs.
        f.debug_struct("ScramCredential")
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// Why a credential cannot be made or used, or a credentials file cannot be read.
#[derive(Debug)]
#[non_exhaustive]
pub enum CredentialError {
    /// An iteration count outside [`MIN_ITERATIONS`]..=[`MAX_ITERATIONS`].
    Iterations {
        /// The count given.
        iterations: u32,
    },
    /// The system random source failed (no salt).
    RandomSourceFailed,
    /// The text is not a credentials file's JSON.
    NotACredentialsFile(serde_json::Error),
    /// A user with an empty name.
    EmptyUserName,
    /// A mechanism other than SCRAM-SHA-256 and SCRAM-SHA-512.
    UnknownMechanism {
        /// The user.
        user: String,
        /// The mechanism as written.
        mechanism: String,
    },
    /// A `salt`, `stored_key` or `server_key` that is not base64.
    NotBase64 {
        /// The user.
        user: String,
        /// The mechanism.
        mechanism: ScramMechanism,
        /// The field.
        field: &'static str,
    },
    /// A `stored_key` or `server_key` not of the mechanism's length.
    KeyLength {
        /// The user.
        user: String,
        /// The mechanism.
        mechanism: ScramMechanism,
        /// The length both keys must have (32 or 64 bytes).
        expected: usize,
    },
    /// A stored iteration count outside [`MIN_ITERATIONS`]..=[`MAX_ITERATIONS`].
    StoredIterations {
        /// The user.
        user: String,
        /// The mechanism.
        mechanism: ScramMechanism,
    },
    /// An empty salt.
    EmptySalt {
        /// The user.
        user: String,
        /// The mechanism.
        mechanism: ScramMechanism,
    },
    /// The file cannot be read.
    Unreadable {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file was read but its content is refused.
    InFile {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        error: Box<CredentialError>,
    },
}

impl fmt::Display for CredentialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CredentialError::Iterations { iterations } => write!(
                f,
                "iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, not {iterations}"
            ),
            CredentialError::RandomSourceFailed => f.write_str("the system random source failed"),
            CredentialError::NotACredentialsFile(e) => write!(f, "not a credentials file: {e}"),
            CredentialError::EmptyUserName => f.write_str("an empty user name"),
            CredentialError::UnknownMechanism { user, mechanism } => write!(
                f,
                "user '{user}': unknown mechanism '{mechanism}' (SCRAM-SHA-256 or SCRAM-SHA-512)"
            ),
            CredentialError::NotBase64 {
                user,
                mechanism,
                field,
            } => write!(f, "user '{user}' {mechanism}: {field} is not base64"),
            CredentialError::KeyLength {
                user,
                mechanism,
                expected,
            } => write!(
                f,
                "user '{user}' {mechanism}: stored_key and server_key must be {expected} bytes"
            ),
            CredentialError::StoredIterations { user, mechanism } => write!(
                f,
                "user '{user}' {mechanism}: iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}"
            ),
            CredentialError::EmptySalt { user, mechanism } => {
                write!(f, "user '{user}' {mechanism}: empty salt")
            }
            CredentialError::Unreadable { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            CredentialError::InFile { path, error } => write!(f, "{}: {error}", path.display()),
        }
    }
}

impl std::error::Error for CredentialError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CredentialError::NotACredentialsFile(e) => Some(e),
            CredentialError::Unreadable { source, .. } => Some(source),
            CredentialError::InFile { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }
}

fn iterations(n: u32) -> Result<NonZeroU32, CredentialError> {
    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&n) {
        return Err(CredentialError::Iterations { iterations: n });
    }
    Ok(NonZeroU32::new(n).expect("checked above"))
}

impl ScramCredential {
    /// Derives the stored entry for `password` with a fresh random 32-byte salt.
    pub fn generate(
        mechanism: ScramMechanism,
        password: &str,
        iterations: u32,
    ) -> Result<ScramCredential, CredentialError> {
        let mut salt = vec![0u8; 32];
        ring::rand::SystemRandom::new()
            .fill(&mut salt)
            .map_err(|_| CredentialError::RandomSourceFailed)?;
        ScramCredential::derive(mechanism, password.as_bytes(), &salt, iterations)
    }

    /// Derives the stored entry for `password` with `salt`.
    pub fn derive(
        mechanism: ScramMechanism,
        password: &[u8],
        salt: &[u8],
        n: u32,
    ) -> Result<ScramCredential, CredentialError> {
        let alg = mechanism.algorithm();
        let salted = alg.salted_password(password, salt, iterations(n)?);
        Ok(ScramCredential {
            mechanism,
            salt: salt.to_vec(),
            iterations: n,
            stored_key: alg.hash(&alg.client_key(&salted)),
            server_key: alg.server_key(&salted),
        })
    }

    /// A stand-in entry for `user`, who does not exist: its salt is keyed by `key` and the name, so
    /// it is the same on every attempt and unpredictable without `key`, and its `StoredKey` is all
    /// zeros, which no proof and no password can match (that would need a hash of all zeros).
    ///
    /// It costs two or three HMACs, no PBKDF2, so an unknown user costs what a known one costs; a
    /// PLAIN login checked against it ([`ScramCredential::verify_password`]) runs the same PBKDF2
    /// as a known user's. `iterations` should be the count most known users have.
    pub(crate) fn decoy(
        mechanism: ScramMechanism,
        (iterations, salt_len): (u32, usize),
        key: &hmac::Key,
        user: &str,
    ) -> ScramCredential {
        let keyed = |what: &str| {
            let mut ctx = hmac::Context::with_key(key);
            for part in [what.as_bytes(), b"\0", mechanism.name().as_bytes(), b"\0"] {
                ctx.update(part);
            }
            ctx.update(user.as_bytes());
            ctx.sign()
        };
        let len = mechanism.algorithm().digest.output_len();
        // As long as most users' salts (Kafka's own are about 26 bytes, kquotad's 32).
        let salt_len = salt_len.clamp(1, 128);
        let mut salt = Vec::with_capacity(salt_len + 32);
        for block in 0u8.. {
            if salt.len() >= salt_len {
                break;
            }
            salt.extend_from_slice(keyed(&format!("salt {block}")).as_ref());
        }
        salt.truncate(salt_len);
        let mut server_key = keyed("server key 1").as_ref().to_vec();
        server_key.extend_from_slice(keyed("server key 2").as_ref());
        server_key.resize(len, 0);
        ScramCredential {
            mechanism,
            salt,
            iterations: iterations.clamp(MIN_ITERATIONS, MAX_ITERATIONS),
            stored_key: vec![0; len],
            server_key,
        }
    }

    /// Whether `password` is the one this entry was made from (PLAIN logins): derives `StoredKey`
    /// and compares it in constant time.
    pub fn verify_password(&self, password: &[u8]) -> bool {
        let alg = self.mechanism.algorithm();
        let Ok(n) = iterations(self.iterations) else {
            return false;
        };
        let salted = alg.salted_password(password, &self.salt, n);
        constant_time_eq(&alg.hash(&alg.client_key(&salted)), &self.stored_key)
    }
}

/// A SCRAM exchange that cannot go on, and why (for the log, not the peer).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScramError {
    /// A `=` in a user name not followed by `2C` or `3D`.
    InvalidSaslnameEscape,
    /// An unescaped `,` in a user name.
    InvalidSaslnameCharacter,
    /// A message that is not UTF-8.
    NotUtf8,
    /// A client-first message without its GS2 header and bare part.
    IncompleteClientFirst,
    /// A client that asks for channel binding (`p=`), which Kafka does not offer.
    ChannelBindingUnsupported,
    /// An authorization id without `a=`.
    MalformedAuthorizationId,
    /// A client-first message whose attributes do not start with `n=` and `r=`.
    ClientFirstOrder,
    /// An empty client nonce, or one with a character outside printable ASCII or a `,`.
    InvalidClientNonce,
    /// An empty user name.
    EmptyUserName,
    /// The system random source failed (no nonce).
    RandomSourceFailed,
    /// A client-final message without `p=`.
    NoProof,
    /// A client proof that is not base64.
    ProofNotBase64,
    /// A client-final message whose attributes do not start with `c=` and `r=`.
    ClientFinalOrder,
    /// A client-final `c=` that is not the client-first GS2 header.
    ChannelBindingMismatch,
    /// A client-final nonce other than the one the server sent (a replayed message).
    NonceMismatch,
    /// A client proof of the wrong length for the mechanism.
    ProofLength,
    /// A proof that does not verify: a wrong password, or an unknown user.
    InvalidCredentials,
    /// A server-first message without `r=`, `s=` and `i=`.
    MalformedServerFirst,
    /// A server nonce that does not start with the client's.
    ServerNonceMismatch,
    /// A salt that is not base64.
    SaltNotBase64,
    /// An iteration count that is not a number.
    BadIterationCount,
    /// A server-final message with neither `v=` nor `e=`.
    MalformedServerFinal,
    /// A server signature that is not base64.
    SignatureNotBase64,
    /// A server signature that does not verify: the server does not know the credential.
    SignatureMismatch,
    /// An attribute that is not a letter, `=` and a value.
    MalformedAttribute {
        /// The attribute as sent.
        attribute: String,
    },
    /// An iteration count outside [`MIN_ITERATIONS`]..=[`MAX_ITERATIONS`].
    UnacceptableIterationCount {
        /// The count the server sent.
        iterations: u32,
    },
    /// The server ended the exchange with an error (`e=`).
    ServerRefused {
        /// The server's error value.
        error: String,
    },
}

impl fmt::Display for ScramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message = match self {
            ScramError::InvalidSaslnameEscape => "invalid escape in the user name",
            ScramError::InvalidSaslnameCharacter => "invalid character in the user name",
            ScramError::NotUtf8 => "not UTF-8",
            ScramError::IncompleteClientFirst => "the client-first message is incomplete",
            ScramError::ChannelBindingUnsupported => "channel binding is not supported",
            ScramError::MalformedAuthorizationId => "malformed authorization id",
            ScramError::ClientFirstOrder => "the client-first message must start with n= and r=",
            ScramError::InvalidClientNonce => "invalid client nonce",
            ScramError::EmptyUserName => "empty user name",
            ScramError::RandomSourceFailed => "the system random source failed",
            ScramError::NoProof => "the client-final message has no proof",
            ScramError::ProofNotBase64 => "the proof is not base64",
            ScramError::ClientFinalOrder => "the client-final message must start with c= and r=",
            ScramError::ChannelBindingMismatch => {
                "the channel binding does not match the client-first message"
            }
            ScramError::NonceMismatch => "the nonce does not match the server's",
            ScramError::ProofLength => "the proof has the wrong length",
            ScramError::InvalidCredentials => "invalid credentials",
            ScramError::MalformedServerFirst => "malformed server-first message",
            ScramError::ServerNonceMismatch => "the server nonce does not extend the client's",
            ScramError::SaltNotBase64 => "the salt is not base64",
            ScramError::BadIterationCount => "bad iteration count",
            ScramError::MalformedServerFinal => "malformed server-final message",
            ScramError::SignatureNotBase64 => "the server signature is not base64",
            ScramError::SignatureMismatch => "the server signature does not verify",
            ScramError::MalformedAttribute { attribute } => {
                return write!(f, "malformed attribute '{attribute}'")
            }
            ScramError::UnacceptableIterationCount { iterations } => {
                return write!(f, "unacceptable iteration count {iterations}")
            }
            ScramError::ServerRefused { error } => return write!(f, "the server refused: {error}"),
        };
        f.write_str(message)
    }
}

impl std::error::Error for ScramError {}

/// Decodes a SCRAM `saslname` (`=2C` is `,`, `=3D` is `=`).
pub(crate) fn decode_saslname(s: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(ScramError::InvalidSaslnameEscape),
        }
        rest = &rest[at + 3..];
    }
    if rest.contains(',') {
        return Err(ScramError::InvalidSaslnameCharacter);
    }
    out.push_str(rest);
    Ok(out)
}

/// Encodes a user name as a SCRAM `saslname`.
pub(crate) fn encode_saslname(s: &str) -> String {
    s.replace('=', "=3D").replace(',', "=2C")
}

/// Splits `a=1,b=2` into attributes, each a single letter and a value.
fn attributes(message: &str) -> Result<Vec<(char, &str)>, ScramError> {
    message
        .split(',')
        .map(|part| {
            let mut chars = part.chars();
            match (chars.next(), chars.next()) {
                (Some(k), Some('=')) if k.is_ascii_alphabetic() => Ok((k, &part[2..])),
                _ => Err(ScramError::MalformedAttribute {
                    attribute: part.to_owned(),
                }),
            }
        })
        .collect()
}

fn printable_nonce(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// The client's first message, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClientFirst {
    /// The user name (decoded).
    pub(crate) username: String,
    /// The authorization id, if one was sent (Kafka requires it to equal the user name).
    pub(crate) authzid: Option<String>,
    /// The client's nonce.
    pub(crate) nonce: String,
    /// The GS2 header (`n,,` or `n,a=...,`), which the final message echoes in base64.
    gs2_header: String,
    /// The message after the GS2 header.
    bare: String,
}

impl ClientFirst {
    /// Parses `n,[a=authzid],n=user,r=nonce[,extensions]`. Channel binding (`p=`) is refused, as
    /// Kafka does.
    pub(crate) fn parse(message: &[u8]) -> Result<ClientFirst, ScramError> {
        let text = std::str::from_utf8(message).map_err(|_| ScramError::NotUtf8)?;
        let mut parts = text.splitn(3, ',');
        let (Some(cbind), Some(authz), Some(bare)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(ScramError::IncompleteClientFirst);
        };
        if cbind != "n" && cbind != "y" {
            return Err(ScramError::ChannelBindingUnsupported);
        }
        let authzid = match authz {
            "" => None,
            a => Some(decode_saslname(
                a.strip_prefix("a=")
                    .ok_or(ScramError::MalformedAuthorizationId)?,
            )?),
        };
        let attrs = attributes(bare)?;
        let (Some(('n', user)), Some(('r', nonce))) = (attrs.first(), attrs.get(1)) else {
            return Err(ScramError::ClientFirstOrder);
        };
        if !printable_nonce(nonce) {
            return Err(ScramError::InvalidClientNonce);
        }
        let username = decode_saslname(user)?;
        if username.is_empty() {
            return Err(ScramError::EmptyUserName);
        }
        Ok(ClientFirst {
            username,
            authzid,
            nonce: (*nonce).to_owned(),
            gs2_header: format!("{cbind},{authz},"),
            bare: bare.to_owned(),
        })
    }
}

/// A server-side SCRAM exchange after the client's first message: holds what the final message is
/// checked against.
#[derive(Clone)]
pub(crate) struct ScramServer {
    credential: ScramCredential,
    client_first: ClientFirst,
    server_first: String,
    nonce: String,
}

impl fmt::Debug for ScramServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramServer")
            .field("user", &self.client_first.username)
            .finish_non_exhaustive()
    }
}

impl ScramServer {
    /// Starts an exchange for `client_first` against `credential`, returning the state and the
    /// server-first message (`r=<client nonce><server nonce>,s=<salt>,i=<iterations>`).
    pub(crate) fn start(
        client_first: ClientFirst,
        credential: ScramCredential,
    ) -> Result<(ScramServer, Vec<u8>), ScramError> {
        let mut random = [0u8; 18];
        ring::rand::SystemRandom::new()
            .fill(&mut random)
            .map_err(|_| ScramError::RandomSourceFailed)?;
        // Base64 of random bytes is printable and has no comma.
        let nonce = format!("{}{}", client_first.nonce, B64.encode(random));
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&credential.salt),
            credential.iterations
        );
        let out = server_first.clone().into_bytes();
        Ok((
            ScramServer {
                credential,
                client_first,
                server_first,
                nonce,
            },
            out,
        ))
    }

    /// The mechanism.
    pub(crate) fn mechanism(&self) -> ScramMechanism {
        self.credential.mechanism
    }

    /// The user this exchange authenticates.
    pub(crate) fn username(&self) -> &str {
        &self.client_first.username
    }

    /// Checks the client's final message (`c=...,r=...,p=...`); on success returns the
    /// server-final message (`v=<signature>`).
    pub(crate) fn finish(&self, client_final: &[u8]) -> Result<Vec<u8>, ScramError> {
        let text = std::str::from_utf8(client_final).map_err(|_| ScramError::NotUtf8)?;
        let Some(at) = text.rfind(",p=") else {
            return Err(ScramError::NoProof);
        };
        let without_proof = &text[..at];
        let proof = B64
            .decode(&text[at + 3..])
            .map_err(|_| ScramError::ProofNotBase64)?;
        let attrs = attributes(without_proof)?;
        let (Some(('c', cbind)), Some(('r', nonce))) = (attrs.first(), attrs.get(1)) else {
            return Err(ScramError::ClientFinalOrder);
        };
        if B64.decode(cbind).ok().as_deref() != Some(self.client_first.gs2_header.as_bytes()) {
            return Err(ScramError::ChannelBindingMismatch);
        }
        if !constant_time_eq(nonce.as_bytes(), self.nonce.as_bytes()) {
            return Err(ScramError::NonceMismatch);
        }
        let auth_message = format!(
            "{},{},{}",
            self.client_first.bare, self.server_first, without_proof
        );
        let alg = self.credential.mechanism.algorithm();
        let signature = alg.hmac(&self.credential.stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return Err(ScramError::ProofLength);
        }
        let client_key = xor(&proof, &signature);
        if !constant_time_eq(&alg.hash(&client_key), &self.credential.stored_key) {
            return Err(ScramError::InvalidCredentials);
        }
        let server_signature = alg.hmac(&self.credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)).into_bytes())
    }
}

/// The client side of a SCRAM exchange, for the admin client and tests.
#[derive(Clone)]
pub struct ScramClient {
    mechanism: ScramMechanism,
    password: Vec<u8>,
    nonce: String,
    client_first_bare: String,
    server_signature: Option<Vec<u8>>,
}

impl fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramClient")
            .field("mechanism", &self.mechanism)
            .finish_non_exhaustive()
    }
}

impl ScramClient {
    /// A client for `username` and `password` with a fresh random nonce.
    pub fn new(
        mechanism: ScramMechanism,
        username: &str,
        password: &str,
    ) -> Result<ScramClient, ScramError> {
        let mut random = [0u8; 18];
        ring::rand::SystemRandom::new()
            .fill(&mut random)
            .map_err(|_| ScramError::RandomSourceFailed)?;
        Ok(ScramClient::with_nonce(
            mechanism,
            username,
            password,
            &B64.encode(random),
        ))
    }

    /// A client with a given nonce (for test vectors).
    pub fn with_nonce(
        mechanism: ScramMechanism,
        username: &str,
        password: &str,
        nonce: &str,
    ) -> ScramClient {
        ScramClient {
            mechanism,
            password: password.as_bytes().to_vec(),
            nonce: nonce.to_owned(),
            client_first_bare: format!("n={},r={nonce}", encode_saslname(username)),
            server_signature: None,
        }
    }

    /// The client-first message.
    pub fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// Answers the server-first message with the client-final message.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, ScramError> {
        self.client_final_with(server_first, self.mechanism.algorithm())
    }

    fn client_final_with(
        &mut self,
        server_first: &[u8],
        alg: Algorithm,
    ) -> Result<Vec<u8>, ScramError> {
        let text = std::str::from_utf8(server_first).map_err(|_| ScramError::NotUtf8)?;
        let attrs = attributes(text)?;
        let (Some(('r', nonce)), Some(('s', salt)), Some(('i', n))) =
            (attrs.first(), attrs.get(1), attrs.get(2))
        else {
            return Err(ScramError::MalformedServerFirst);
        };
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(ScramError::ServerNonceMismatch);
        }
        let salt = B64.decode(salt).map_err(|_| ScramError::SaltNotBase64)?;
        let n: u32 = n.parse().map_err(|_| ScramError::BadIterationCount)?;
        // A client accepts what the server stores, within PBKDF2's limits.
        let n = NonZeroU32::new(n)
            .filter(|n| n.get() <= 1_000_000)
            .ok_or(ScramError::UnacceptableIterationCount { iterations: n })?;
        let salted = alg.salted_password(&self.password, &salt, n);
        let client_key = alg.client_key(&salted);
        let stored_key = alg.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", self.client_first_bare);
        let proof = xor(&client_key, &alg.hmac(&stored_key, auth_message.as_bytes()));
        self.server_signature = Some(alg.hmac(&alg.server_key(&salted), auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Checks the server-final message: the server proves it knows the credential.
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let text = std::str::from_utf8(server_final).map_err(|_| ScramError::NotUtf8)?;
        if let Some(e) = text.strip_prefix("e=") {
            return Err(ScramError::ServerRefused {
                error: e.to_owned(),
            });
        }
        let Some(v) = text.strip_prefix("v=") else {
            return Err(ScramError::MalformedServerFinal);
        };
        let v = B64
            .decode(v.split(',').next().unwrap_or(""))
            .map_err(|_| ScramError::SignatureNotBase64)?;
        match &self.server_signature {
            Some(expected) if constant_time_eq(expected, &v) => Ok(()),
            _ => Err(ScramError::SignatureMismatch),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA1: Algorithm = Algorithm {
        pbkdf2: pbkdf2::PBKDF2_HMAC_SHA1,
        hmac: hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
        digest: &digest::SHA1_FOR_LEGACY_USE_ONLY,
    };

    /// RFC 5802 section 5 (SCRAM-SHA-1): the client's messages and the server's signature.
    #[test]
    fn rfc5802_sha1_vector() {
        let mut c = ScramClient::with_nonce(
            ScramMechanism::Sha256,
            "user",
            "pencil",
            "fyko+d2lbbFgONRv9qkxdawL",
        );
        assert_eq!(c.client_first(), b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL");
        let server_first =
            b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096";
        let fin = c.client_final_with(server_first, SHA1).unwrap();
        assert_eq!(
            String::from_utf8(fin).unwrap(),
            "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
        );
        c.verify_server_final(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=")
            .unwrap();
        assert!(c
            .verify_server_final(b"v=AAAApqV8S7suAoZWja4dJRkFsKQ=")
            .is_err());
    }

    const RFC7677_FIRST: &[u8] =
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const RFC7677_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";

    /// RFC 7677 section 3 (SCRAM-SHA-256), client side.
    #[test]
    fn rfc7677_sha256_client() {
        let mut c = ScramClient::with_nonce(
            ScramMechanism::Sha256,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO",
        );
        let fin = c.client_final(RFC7677_FIRST).unwrap();
        assert_eq!(String::from_utf8(fin).unwrap(), RFC7677_FINAL);
        c.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
    }

    /// RFC 7677 section 3, server side: a credential derived from the password verifies the
    /// client's proof and signs with the RFC's signature.
    #[test]
    fn rfc7677_sha256_server() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let cred = ScramCredential::derive(ScramMechanism::Sha256, b"pencil", &salt, 4096).unwrap();
        let first = ClientFirst::parse(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap();
        let server = ScramServer {
            credential: cred.clone(),
            client_first: first,
            server_first: String::from_utf8(RFC7677_FIRST.to_vec()).unwrap(),
            nonce: "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".to_owned(),
        };
        let v = server.finish(RFC7677_FINAL.as_bytes()).unwrap();
        assert_eq!(v, b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
        // A flipped proof bit fails.
        let bad = RFC7677_FINAL.replace("p=dHz", "p=eHz");
        assert!(server.finish(bad.as_bytes()).is_err());
        assert!(cred.verify_password(b"pencil"));
        assert!(!cred.verify_password(b"pencil "));
    }

    #[test]
    fn sha512_round_trip_and_replay() {
        let cred = ScramCredential::generate(ScramMechanism::Sha512, "s3cret", 4096).unwrap();
        let mut client = ScramClient::new(ScramMechanism::Sha512, "al,ice=", "s3cret").unwrap();
        let first = ClientFirst::parse(&client.client_first()).unwrap();
        assert_eq!(first.username, "al,ice=");
        let (server, server_first) = ScramServer::start(first.clone(), cred.clone()).unwrap();
        let fin = client.client_final(&server_first).unwrap();
        let server_final = server.finish(&fin).unwrap();
        client.verify_server_final(&server_final).unwrap();
        // The same final message against a new exchange (a new server nonce) is refused.
        let (again, _) = ScramServer::start(first, cred.clone()).unwrap();
        assert_eq!(
            again.finish(&fin).unwrap_err().to_string(),
            "the nonce does not match the server's"
        );
        // A wrong password is refused.
        let mut wrong = ScramClient::new(ScramMechanism::Sha512, "al,ice=", "guess").unwrap();
        let (server, sf) =
            ScramServer::start(ClientFirst::parse(&wrong.client_first()).unwrap(), cred).unwrap();
        let fin = wrong.client_final(&sf).unwrap();
        assert_eq!(server.finish(&fin), Err(ScramError::InvalidCredentials));
    }

    #[test]
    fn malformed_client_messages() {
        for bad in [
            &b""[..],
            b"n,,",
            b"n,,n=user",
            b"p=tls-unique,,n=user,r=abc",
            b"n,,r=abc,n=user",
            b"n,,n=us=41r,r=abc",
            b"n,,n=,r=abc",
            b"\xff\xfe",
        ] {
            assert!(ClientFirst::parse(bad).is_err(), "{bad:?}");
        }
        let first = ClientFirst::parse(b"n,a=bob,n=alice,r=abc").unwrap();
        assert_eq!(first.authzid.as_deref(), Some("bob"));
        let cred = ScramCredential::generate(ScramMechanism::Sha256, "pw", 4096).unwrap();
        let (server, _) = ScramServer::start(first, cred).unwrap();
        for bad in [
            &b""[..],
            b"c=biws",
            b"c=biws,r=abc,p=!!",
            b"r=abc,c=biws,p=AAAA",
        ] {
            assert!(server.finish(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn decoys_are_stable_keyed_and_match_nothing() {
        let key = hmac::Key::new(hmac::HMAC_SHA256, b"decoy key");
        let other = hmac::Key::new(hmac::HMAC_SHA256, b"another key");
        for m in ScramMechanism::ALL {
            let a = ScramCredential::decoy(m, (8192, 32), &key, "mallory");
            assert_eq!(a, ScramCredential::decoy(m, (8192, 32), &key, "mallory"));
            assert_ne!(
                a.salt,
                ScramCredential::decoy(m, (8192, 32), &key, "trent").salt
            );
            assert_ne!(
                a.salt,
                ScramCredential::decoy(m, (8192, 32), &other, "mallory").salt
            );
            let real = ScramCredential::generate(m, "pw", 8192).unwrap();
            assert_eq!(
                (
                    a.salt.len(),
                    a.iterations,
                    a.stored_key.len(),
                    a.server_key.len()
                ),
                (
                    real.salt.len(),
                    real.iterations,
                    real.stored_key.len(),
                    real.server_key.len()
                )
            );
            assert!(!a.verify_password(b""));
            assert!(!a.verify_password(b"pw"));
            let mut client = ScramClient::new(m, "mallory", "").unwrap();
            let first = ClientFirst::parse(&client.client_first()).unwrap();
            let (server, server_first) = ScramServer::start(first, a).unwrap();
            let fin = client.client_final(&server_first).unwrap();
            assert_eq!(server.finish(&fin), Err(ScramError::InvalidCredentials));
        }
        let n = ScramCredential::decoy(ScramMechanism::Sha256, (1, 32), &key, "x").iterations;
        assert_eq!(n, MIN_ITERATIONS);
    }

    #[test]
    fn iteration_bounds() {
        assert!(ScramCredential::derive(ScramMechanism::Sha256, b"p", b"s", 4095).is_err());
        assert!(ScramCredential::derive(ScramMechanism::Sha256, b"p", b"s", 16385).is_err());
    }
}
