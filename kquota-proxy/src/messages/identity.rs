//! Who a client connection is, learnt from its SASL exchange as it passes through the proxy.
//!
//! SASL authentication is between the client and the broker: the proxy forwards SaslHandshake
//! (17) and SaslAuthenticate (36) unchanged and only watches them. It holds no passwords and
//! checks no proofs; it reads the user name the client offers and believes it only when the
//! broker answers the exchange's last step with success, as Kafka's own mechanisms decide:
//!
//! | mechanism | the user | the last step |
//! | --- | --- | --- |
//! | PLAIN | the authcid of `authzid \0 authcid \0 password` | the first SaslAuthenticate |
//! | SCRAM-SHA-256, SCRAM-SHA-512 | `n=` of the client-first message, `=2C` and `=3D` unescaped | the second (client-final) |
//! | SCRAM with `tokenauth=true` (a delegation token) | the token's owner: unknown here, so the principal is kept | — |
//! | GSSAPI, OAUTHBEARER, any other | decided by the broker's keys or token validation: the principal is kept | — |
//!
//! The principal is then `User:<name>`, which is what Kafka's `DefaultKafkaPrincipalBuilder` makes
//! of a SASL authorization id (for PLAIN and SCRAM Kafka requires the authzid to be empty or the
//! user itself, so the user is the authorization id). A failed step ends the exchange and keeps
//! the principal; a new handshake on an authenticated connection (re-authentication, KIP-368)
//! runs the same way.
//!
//! The connection reads nothing a client sends after a SaslHandshake or SaslAuthenticate until
//! the broker's answer to it has been read here, as Kafka's broker reads nothing else while it
//! authenticates: a request pipelined behind the exchange's last step is metered as the user
//! that step authenticated, never as the principal before it.
//!
//! A SASL request whose frame does not read (cut short, a length past its end, a version the
//! proxy cannot read) is an error, and the connection closes; so is SaslHandshake v0, after which
//! Kafka clients sent raw SASL tokens without Kafka framing (Kafka 4 no longer accepts them). A
//! well-framed token the proxy does not understand is forwarded: the broker refuses it, and the
//! client hears the broker's reason. Nothing here logs or keeps a password.

use std::fmt;

use kafka_protocol::messages::ApiKey;
use kquota_wire::{Principal, Reader};

const SASL_HANDSHAKE: i16 = ApiKey::SaslHandshake as i16;
const SASL_AUTHENTICATE: i16 = ApiKey::SaslAuthenticate as i16;

/// The principal of one client connection, and where its SASL exchange stands.
#[derive(Debug)]
pub(crate) struct Identity {
    principal: Principal,
    stage: Stage,
    /// Counts handshakes, so that the answer to an earlier exchange's request cannot end a newer
    /// exchange (requests and answers are pipelined).
    exchange: u64,
}

/// Where the SASL exchange stands, as the client's requests have moved it.
#[derive(Debug)]
enum Stage {
    /// No exchange under way: none has started, or the last one ended.
    Idle,
    /// A handshake named this mechanism; the next SaslAuthenticate is the exchange's first.
    First(Mechanism),
    /// A SCRAM client-first has gone; the next SaslAuthenticate is the client-final, whose
    /// success authenticates `user` (`None`: a delegation token, or a name that did not read).
    ScramFinal { user: Option<String> },
    /// A mechanism whose principal the proxy cannot tell: its steps are watched, never believed.
    Opaque,
}

/// The mechanisms the proxy tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mechanism {
    Plain,
    Scram,
    /// GSSAPI, OAUTHBEARER, or a mechanism the broker may not even offer.
    Other,
}

impl Mechanism {
    /// Kafka's mechanism names are matched exactly, as the broker matches them.
    fn from_name(name: &[u8]) -> Mechanism {
        match name {
            b"PLAIN" => Mechanism::Plain,
            b"SCRAM-SHA-256" | b"SCRAM-SHA-512" => Mechanism::Scram,
            _ => Mechanism::Other,
        }
    }
}

/// What a SASL request leaves for its answer: which exchange it belongs to, how to read the
/// answer, and what a success means.
#[derive(Debug)]
pub(crate) struct SaslNote {
    api_key: i16,
    version: i16,
    exchange: u64,
    /// On success, the exchange is complete and this user authenticated.
    authenticates: Option<String>,
}

// What a step says of itself, for the fuzz target's invariants and the tests.
#[cfg(any(test, feature = "fuzzing"))]
impl SaslNote {
    /// The request's API (SaslHandshake or SaslAuthenticate).
    pub(crate) fn api_key(&self) -> i16 {
        self.api_key
    }

    /// The request's version.
    pub(crate) fn version(&self) -> i16 {
        self.version
    }

    /// The user a success of this step authenticates.
    pub(crate) fn user(&self) -> Option<&str> {
        self.authenticates.as_deref()
    }
}

/// A SASL request the proxy cannot read: the connection must close.
#[derive(Debug)]
pub(crate) struct IdentityError(String);

impl fmt::Display for IdentityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for IdentityError {}

impl IdentityError {
    fn new(why: impl Into<String>) -> IdentityError {
        IdentityError(why.into())
    }
}

impl Identity {
    /// A new connection's identity. `initial`: the TLS client certificate's principal, or
    /// ANONYMOUS.
    pub(crate) fn new(initial: Principal) -> Identity {
        Identity {
            principal: initial,
            stage: Stage::Idle,
            exchange: 0,
        }
    }

    /// Watches one request, `frame` being its bytes after the 4-byte size prefix (header
    /// included). Gives a note for SaslHandshake and SaslAuthenticate, to be handed to
    /// [`Identity::on_response`] with the broker's answer, and `None` for every other API (which
    /// is not read at all). An error means the request cannot be read and the connection must
    /// close.
    pub(crate) fn on_request(
        &mut self,
        api_key: i16,
        version: i16,
        frame: &[u8],
    ) -> Result<Option<SaslNote>, IdentityError> {
        match api_key {
            SASL_HANDSHAKE => self.handshake(version, frame).map(Some),
            SASL_AUTHENTICATE => self.authenticate(version, frame).map(Some),
            _ => Ok(None),
        }
    }

    /// Takes the broker's answer (its bytes after the size prefix, header included) to a request
    /// that gave `note`. Returns true when the principal changed.
    pub(crate) fn on_response(&mut self, note: SaslNote, frame: &[u8]) -> bool {
        let success = response_error_code(note.api_key, note.version, frame) == Some(0);
        if !success {
            // A refused handshake or step ends the exchange (the broker closes the connection, or
            // the client starts again with a handshake); the principal stays. An answer to an
            // earlier exchange does not end a newer one.
            if note.exchange == self.exchange {
                self.stage = Stage::Idle;
            }
            return false;
        }
        match note.authenticates {
            Some(user) => {
                if note.exchange == self.exchange {
                    self.stage = Stage::Idle;
                }
                let principal = Principal::user(user);
                let changed = principal != self.principal;
                self.principal = principal;
                changed
            }
            None => false,
        }
    }

    /// The connection's principal: the last user the broker authenticated, else the initial one.
    pub(crate) fn principal(&self) -> &Principal {
        &self.principal
    }

    fn handshake(&mut self, version: i16, frame: &[u8]) -> Result<SaslNote, IdentityError> {
        match version {
            1 => {}
            0 => {
                return Err(IdentityError::new(
                    "SaslHandshake v0 (raw SASL tokens without Kafka framing) is not supported; \
                     the client must use SaslHandshake v1 and SaslAuthenticate",
                ))
            }
            v => {
                return Err(IdentityError::new(format!(
                    "SaslHandshake v{v} is not supported"
                )))
            }
        }
        let mut r = body(frame, SASL_HANDSHAKE, version)?;
        let mechanism = r
            .string(false, true, "mechanism")
            .map_err(|_| IdentityError::new("a SaslHandshake request cut short"))?
            .unwrap_or_default();
        // A new exchange, whatever the old one's state: re-authentication starts here too.
        self.exchange += 1;
        self.stage = Stage::First(Mechanism::from_name(mechanism));
        Ok(self.note(SASL_HANDSHAKE, version, None))
    }

    fn authenticate(&mut self, version: i16, frame: &[u8]) -> Result<SaslNote, IdentityError> {
        if !(0..=2).contains(&version) {
            return Err(IdentityError::new(format!(
                "SaslAuthenticate v{version} is not supported"
            )));
        }
        let mut r = body(frame, SASL_AUTHENTICATE, version)?;
        let token = r
            .bytes(version >= 2, "auth_bytes")
            .map_err(|_| IdentityError::new("a SaslAuthenticate request cut short"))?;
        if version >= 2 && r.tagged_fields("tagged fields").is_err() {
            return Err(IdentityError::new("a SaslAuthenticate request cut short"));
        }
        let (next, authenticates) = match std::mem::replace(&mut self.stage, Stage::Idle) {
            Stage::First(Mechanism::Plain) => (Stage::Idle, plain_user(token)),
            Stage::First(Mechanism::Scram) => (
                Stage::ScramFinal {
                    user: scram_user(token),
                },
                None,
            ),
            Stage::ScramFinal { user } => (Stage::Idle, user),
            Stage::First(Mechanism::Other) | Stage::Opaque => (Stage::Opaque, None),
            // Without a handshake the broker refuses the step (ILLEGAL_SASL_STATE).
            Stage::Idle => (Stage::Idle, None),
        };
        self.stage = next;
        Ok(self.note(SASL_AUTHENTICATE, version, authenticates))
    }

    fn note(&self, api_key: i16, version: i16, authenticates: Option<String>) -> SaslNote {
        SaslNote {
            api_key,
            version,
            exchange: self.exchange,
            authenticates,
        }
    }
}

/// The user of a PLAIN token (`authzid \0 authcid \0 password`), read as Kafka's `PlainSaslServer`
/// reads it: exactly three parts, decoded as Java decodes UTF-8 (a bad sequence becomes U+FFFD),
/// an empty user is none. The authzid is not checked: Kafka refuses one that is neither empty nor
/// the user, and nothing is believed before the broker's success.
fn plain_user(token: &[u8]) -> Option<String> {
    let mut parts = token.splitn(4, |b| *b == 0);
    let (Some(_authzid), Some(user), Some(_password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    (!user.is_empty()).then(|| String::from_utf8_lossy(user).into_owned())
}

/// The user of a SCRAM client-first message, `gs2-header n=user,r=nonce[,extensions]`.
///
/// The gs2 header is a channel-binding flag (`n`, `y` or `p=...`) and an optional `a=authzid`;
/// Kafka accepts only `n` and an authzid equal to the user, but the broker decides that. A
/// reserved `m=` may come before `n=`. `None` when the message does not read, or when it carries
/// `tokenauth=true`: a delegation token, whose principal is the token's owner, which only the
/// broker knows (the principal is then kept).
fn scram_user(token: &[u8]) -> Option<String> {
    // Kafka's SCRAM messages are ASCII; anything else the broker refuses.
    let text = std::str::from_utf8(token).ok()?;
    let mut gs2 = text.splitn(3, ',');
    let (Some(flag), Some(authzid), Some(bare)) = (gs2.next(), gs2.next(), gs2.next()) else {
        return None;
    };
    if !(flag == "n" || flag == "y" || flag.starts_with("p=")) {
        return None;
    }
    if !(authzid.is_empty() || authzid.starts_with("a=")) {
        return None;
    }
    let mut attributes = bare.split(',').peekable();
    if attributes.peek().is_some_and(|a| a.starts_with("m=")) {
        attributes.next();
    }
    let user = attributes.next()?.strip_prefix("n=")?;
    attributes.next()?.strip_prefix("r=")?;
    // Kafka reads the extensions into a map (`Utils.parseMap`), so a repeated key takes its last
    // value, and `tokenauth` is true as Java's `Boolean.parseBoolean` reads it.
    let token_auth = attributes
        .filter_map(|extension| extension.split_once('='))
        .rfind(|(k, _)| *k == "tokenauth")
        .is_some_and(|(_, v)| v.eq_ignore_ascii_case("true"));
    if token_auth {
        return None;
    }
    scram_username(user)
}

/// A SCRAM `saslname` as Kafka's `ScramFormatter.username` decodes it: `=2C` is `,`, then any `=`
/// other than in `=3D` is an error, then `=3D` is `=`. An empty name is none.
fn scram_username(saslname: &str) -> Option<String> {
    let commas = saslname.replace("=2C", ",");
    if commas.replace("=3D", "").contains('=') {
        return None;
    }
    let name = commas.replace("=3D", "=");
    (!name.is_empty()).then_some(name)
}

/// A reader over the body of the SASL request `frame`, after its header.
fn body(frame: &[u8], api_key: i16, version: i16) -> Result<Reader<'_>, IdentityError> {
    let cut = |_| IdentityError::new("a SASL request shorter than its header");
    let mut r = Reader::new(frame);
    // api key, version and correlation id: the caller has read them already.
    r.take(8, "request header").map_err(cut)?;
    // Request headers v1 and v2: a nullable client id (never compact); v2 adds tagged fields.
    r.string(false, true, "client_id").map_err(cut)?;
    if header_version(api_key, version, true) >= 2 {
        r.tagged_fields("request header tagged fields")
            .map_err(cut)?;
    }
    Ok(r)
}

/// The error code of the broker's answer to a SASL request, `None` when the answer does not read
/// to its end (a success is believed only from a whole answer).
fn response_error_code(api_key: i16, version: i16, frame: &[u8]) -> Option<i16> {
    let mut r = Reader::new(frame);
    r.take(4, "correlation_id").ok()?;
    if header_version(api_key, version, false) >= 1 {
        r.tagged_fields("response header tagged fields").ok()?;
    }
    let error_code = r.i16("error_code").ok()?;
    if api_key == SASL_HANDSHAKE {
        // v1: the mechanisms the broker offers, an array of strings (never flexible).
        r.each(false, false, "mechanisms", |r| {
            r.string(false, true, "mechanism").map(drop)
        })
        .ok()?;
    } else {
        let flexible = version >= 2;
        r.string(flexible, true, "error_message").ok()?;
        r.bytes(flexible, "auth_bytes").ok()?;
        if version >= 1 {
            r.i64("session_lifetime_ms").ok()?;
        }
        if flexible {
            r.tagged_fields("tagged fields").ok()?;
        }
    }
    Some(error_code)
}

/// The header version of a SASL request or response.
fn header_version(api_key: i16, version: i16, request: bool) -> i16 {
    let key = if api_key == SASL_HANDSHAKE {
        ApiKey::SaslHandshake
    } else {
        ApiKey::SaslAuthenticate
    };
    if request {
        key.request_header_version(version)
    } else {
        key.response_header_version(version)
    }
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::{
        ApiVersionsRequest, RequestHeader, ResponseHeader, SaslAuthenticateRequest,
        SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
    };
    use kafka_protocol::protocol::{Encodable, StrBytes};

    use super::*;

    fn request<M: Encodable>(key: ApiKey, version: i16, body: &M) -> Vec<u8> {
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(7)
            .with_client_id(Some(StrBytes::from_static_str("client-1")));
        let mut out = BytesMut::new();
        header
            .encode(&mut out, key.request_header_version(version))
            .unwrap();
        body.encode(&mut out, version).unwrap();
        out.to_vec()
    }

    fn response<M: Encodable>(key: ApiKey, version: i16, body: &M) -> Vec<u8> {
        let mut out = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(7)
            .encode(&mut out, key.response_header_version(version))
            .unwrap();
        body.encode(&mut out, version).unwrap();
        out.to_vec()
    }

    /// A connection whose client and broker exchange SASL messages at `version` of
    /// SaslAuthenticate.
    struct Conn {
        identity: Identity,
        version: i16,
    }

    impl Conn {
        fn new(version: i16) -> Conn {
            Conn {
                identity: Identity::new(Principal::anonymous()),
                version,
            }
        }

        /// A handshake for `mechanism`, answered with `error`; whether the principal changed.
        fn handshake(&mut self, mechanism: &'static str, error: i16) -> bool {
            let req = request(
                ApiKey::SaslHandshake,
                1,
                &SaslHandshakeRequest::default()
                    .with_mechanism(StrBytes::from_static_str(mechanism)),
            );
            let note = self
                .identity
                .on_request(SASL_HANDSHAKE, 1, &req)
                .unwrap()
                .unwrap();
            let resp = response(
                ApiKey::SaslHandshake,
                1,
                &SaslHandshakeResponse::default().with_error_code(error),
            );
            self.identity.on_response(note, &resp)
        }

        /// A SaslAuthenticate with `token`, answered with `error`; whether the principal changed.
        fn step(&mut self, token: &[u8], error: i16) -> bool {
            let note = self.send(token);
            self.answer(note, error)
        }

        fn send(&mut self, token: &[u8]) -> SaslNote {
            let req = request(
                ApiKey::SaslAuthenticate,
                self.version,
                &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(token)),
            );
            self.identity
                .on_request(SASL_AUTHENTICATE, self.version, &req)
                .unwrap()
                .unwrap()
        }

        fn answer(&mut self, note: SaslNote, error: i16) -> bool {
            let resp = response(
                ApiKey::SaslAuthenticate,
                self.version,
                &SaslAuthenticateResponse::default()
                    .with_error_code(error)
                    .with_auth_bytes(Bytes::from_static(b"server-message")),
            );
            self.identity.on_response(note, &resp)
        }

        fn user(&self) -> &str {
            assert_eq!(self.identity.principal().principal_type, "User");
            &self.identity.principal().name
        }
    }

    const FAILED: i16 = 58; // SASL_AUTHENTICATION_FAILED

    fn scram_first(user: &str) -> Vec<u8> {
        format!("n,,n={user},r=fyko+d2lbbFgONRv9qkxdawL").into_bytes()
    }

    const SCRAM_FINAL: &[u8] = b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";

    #[test]
    fn plain_success_at_every_version() {
        for version in 0..=2 {
            let mut c = Conn::new(version);
            assert!(!c.handshake("PLAIN", 0));
            assert_eq!(c.user(), "ANONYMOUS");
            assert!(c.step(b"\0alice\0secret", 0), "v{version}");
            assert_eq!(c.user(), "alice");
        }
    }

    #[test]
    fn plain_failure_keeps_the_principal() {
        let mut c = Conn::new(2);
        c.handshake("PLAIN", 0);
        assert!(!c.step(b"\0alice\0wrong", FAILED));
        assert_eq!(c.user(), "ANONYMOUS");
        // The exchange is over: a further step, even answered with success, names no one.
        assert!(!c.step(b"\0alice\0wrong", 0));
        assert_eq!(c.user(), "ANONYMOUS");
    }

    #[test]
    fn plain_authzid_and_malformed_tokens() {
        // An authzid equal to the user (Kafka accepts it) or another (Kafka refuses it): the user
        // is the authcid either way, believed only on success.
        let mut c = Conn::new(1);
        c.handshake("PLAIN", 0);
        assert!(c.step(b"alice\0alice\0secret", 0));
        assert_eq!(c.user(), "alice");
        let mut c = Conn::new(1);
        c.handshake("PLAIN", 0);
        assert!(!c.step(b"admin\0alice\0secret", FAILED));
        assert_eq!(c.user(), "ANONYMOUS");
        // Tokens Kafka refuses name no one, whatever the answer; the frame itself is fine, so the
        // request passes (the broker tells the client why).
        for token in [
            &b"alice"[..],
            b"\0alice",
            b"\0alice\0secret\0more",
            b"\0\0secret",
        ] {
            let mut c = Conn::new(1);
            c.handshake("PLAIN", 0);
            assert!(!c.step(token, 0), "{token:?}");
            assert_eq!(c.user(), "ANONYMOUS");
        }
    }

    #[test]
    fn scram_success_after_two_steps() {
        for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
            for version in 0..=2 {
                let mut c = Conn::new(version);
                c.handshake(mechanism, 0);
                // The server-first answer is not yet a success.
                assert!(!c.step(&scram_first("bob"), 0));
                assert_eq!(c.user(), "ANONYMOUS");
                assert!(c.step(SCRAM_FINAL, 0));
                assert_eq!(c.user(), "bob");
            }
        }
    }

    #[test]
    fn scram_failure_at_either_step() {
        let mut c = Conn::new(2);
        c.handshake("SCRAM-SHA-256", 0);
        assert!(!c.step(&scram_first("bob"), 0));
        assert!(!c.step(SCRAM_FINAL, FAILED));
        assert_eq!(c.user(), "ANONYMOUS");

        let mut c = Conn::new(2);
        c.handshake("SCRAM-SHA-256", 0);
        assert!(!c.step(&scram_first("nobody"), FAILED));
        // The exchange ended at the first step: a final message now authenticates no one.
        assert!(!c.step(SCRAM_FINAL, 0));
        assert_eq!(c.user(), "ANONYMOUS");
    }

    #[test]
    fn scram_names_are_unescaped() {
        for (sent, user) in [
            ("a=2Cb", "a,b"),
            ("a=3Db", "a=b"),
            ("=3D=2C=3D", "=,="),
            ("x=2C=3Dy", "x,=y"),
        ] {
            let mut c = Conn::new(1);
            c.handshake("SCRAM-SHA-512", 0);
            c.step(&scram_first(sent), 0);
            assert!(c.step(SCRAM_FINAL, 0));
            assert_eq!(c.user(), user);
        }
        // Escapes Kafka refuses: no user.
        for bad in ["a=b", "a=2", "=", "a=3"] {
            assert_eq!(scram_username(bad), None, "{bad}");
        }
    }

    #[test]
    fn scram_gs2_headers_and_extensions() {
        for (message, user) in [
            ("n,a=carol,n=carol,r=abc", Some("carol")),
            ("y,,n=carol,r=abc", Some("carol")),
            ("p=tls-unique,,n=carol,r=abc", Some("carol")),
            ("n,,m=reserved,n=carol,r=abc", Some("carol")),
            ("n,,n=carol,r=abc,ext=1", Some("carol")),
            // A delegation token: its owner is unknown to the proxy.
            ("n,,n=tokenid,r=abc,tokenauth=true", None),
            ("n,,n=tokenid,r=abc,tokenauth=TRUE", None),
            ("n,,n=carol,r=abc,tokenauth=false", Some("carol")),
            // A repeated extension takes its last value, as Kafka's map of them does.
            (
                "n,,n=carol,r=abc,tokenauth=true,tokenauth=false",
                Some("carol"),
            ),
            (
                "n,,n=carol,r=abc,tokenauth=false,x=1,tokenauth=yes",
                Some("carol"),
            ),
            ("n,,n=tokenid,r=abc,tokenauth=false,tokenauth=true", None),
            ("q,,n=carol,r=abc", None),
            ("n,carol,n=carol,r=abc", None),
            ("n,,r=abc,n=carol", None),
            ("n,,n=carol", None),
            ("n,,n=,r=abc", None),
            ("n,n=carol,r=abc", None),
        ] {
            assert_eq!(scram_user(message.as_bytes()).as_deref(), user, "{message}");
        }
        assert_eq!(scram_user(&[b'n', b',', b',', 0xff]), None);
    }

    #[test]
    fn delegation_tokens_keep_the_principal() {
        let mut c = Conn::new(2);
        c.handshake("SCRAM-SHA-256", 0);
        c.step(b"n,,n=tokenid,r=abc,tokenauth=true", 0);
        assert!(!c.step(SCRAM_FINAL, 0));
        assert_eq!(c.user(), "ANONYMOUS");
    }

    #[test]
    fn other_mechanisms_keep_the_principal() {
        for mechanism in ["GSSAPI", "OAUTHBEARER", "plain", "WHATEVER"] {
            let mut c = Conn::new(2);
            c.identity = Identity::new(Principal::user("CN=client"));
            c.handshake(mechanism, 0);
            for _ in 0..3 {
                assert!(!c.step(b"\0alice\0secret", 0));
            }
            assert_eq!(c.user(), "CN=client", "{mechanism}");
        }
    }

    #[test]
    fn a_refused_handshake_starts_nothing() {
        let mut c = Conn::new(2);
        c.handshake("PLAIN", 33); // UNSUPPORTED_SASL_MECHANISM
        assert!(!c.step(b"\0alice\0secret", 0));
        assert_eq!(c.user(), "ANONYMOUS");
        // Nor does a step without any handshake.
        let mut c = Conn::new(2);
        assert!(!c.step(b"\0alice\0secret", 0));
        assert_eq!(c.user(), "ANONYMOUS");
    }

    #[test]
    fn reauthentication_changes_the_user() {
        let mut c = Conn::new(2);
        c.handshake("SCRAM-SHA-256", 0);
        c.step(&scram_first("alice"), 0);
        assert!(c.step(SCRAM_FINAL, 0));
        assert_eq!(c.user(), "alice");
        // KIP-368: a new handshake on the authenticated connection.
        c.handshake("PLAIN", 0);
        assert!(c.step(b"\0bob\0secret", 0));
        assert_eq!(c.user(), "bob");
        // The same user again is no change; a failed re-authentication keeps the last one.
        c.handshake("PLAIN", 0);
        assert!(!c.step(b"\0bob\0secret", 0));
        c.handshake("PLAIN", 0);
        assert!(!c.step(b"\0carol\0wrong", FAILED));
        assert_eq!(c.user(), "bob");
    }

    #[test]
    fn an_answer_to_an_old_exchange_does_not_end_a_new_one() {
        let mut c = Conn::new(2);
        c.handshake("PLAIN", 0);
        let old = c.send(b"\0alice\0wrong");
        // The client re-handshakes before the refusal arrives (pipelined).
        let req = request(
            ApiKey::SaslHandshake,
            1,
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
        );
        let hs = c
            .identity
            .on_request(SASL_HANDSHAKE, 1, &req)
            .unwrap()
            .unwrap();
        assert!(!c.answer(old, FAILED));
        let resp = response(ApiKey::SaslHandshake, 1, &SaslHandshakeResponse::default());
        c.identity.on_response(hs, &resp);
        assert!(c.step(b"\0bob\0secret", 0));
        assert_eq!(c.user(), "bob");
    }

    #[test]
    fn handshake_v0_is_refused() {
        let req = request(
            ApiKey::SaslHandshake,
            0,
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
        );
        let mut identity = Identity::new(Principal::anonymous());
        let e = identity.on_request(SASL_HANDSHAKE, 0, &req).unwrap_err();
        assert!(e.to_string().contains("v0"), "{e}");
        assert!(identity.on_request(SASL_HANDSHAKE, 2, &req).is_err());
        assert!(identity.on_request(SASL_AUTHENTICATE, 3, &req).is_err());
    }

    #[test]
    fn truncated_frames_are_errors_and_never_panic() {
        let handshake = request(
            ApiKey::SaslHandshake,
            1,
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
        );
        for cut in 0..handshake.len() {
            let mut identity = Identity::new(Principal::anonymous());
            assert!(identity
                .on_request(SASL_HANDSHAKE, 1, &handshake[..cut])
                .is_err());
        }
        for version in 0..=2 {
            let auth = request(
                ApiKey::SaslAuthenticate,
                version,
                &SaslAuthenticateRequest::default()
                    .with_auth_bytes(Bytes::from_static(b"\0alice\0secret")),
            );
            for cut in 0..auth.len() {
                let mut identity = Identity::new(Principal::anonymous());
                let result = identity.on_request(SASL_AUTHENTICATE, version, &auth[..cut]);
                // v2's tagged fields (an empty count) are its last byte: all before it is needed.
                assert!(result.is_err(), "v{version} cut at {cut}");
            }
        }
        // Lengths past the end, negative lengths, a null compact token, a runaway varint.
        let mut identity = Identity::new(Principal::anonymous());
        let head = [0, 36, 0, 1, 0, 0, 0, 7, 0xff, 0xff];
        for tail in [&[0x7f, 0xff, 0xff, 0xff][..], &[0x80, 0, 0, 0], &[0, 0, 0]] {
            let frame = [&head[..], tail].concat();
            assert!(identity.on_request(SASL_AUTHENTICATE, 1, &frame).is_err());
        }
        let head2 = [0, 36, 0, 2, 0, 0, 0, 7, 0xff, 0xff, 0];
        for tail in [&[0][..], &[0xff, 0xff, 0xff, 0xff, 0xff, 0x01], &[0x7f]] {
            let frame = [&head2[..], tail].concat();
            assert!(identity.on_request(SASL_AUTHENTICATE, 2, &frame).is_err());
        }
    }

    #[test]
    fn truncated_answers_change_nothing() {
        let mut c = Conn::new(2);
        c.handshake("PLAIN", 0);
        let note = c.send(b"\0alice\0secret");
        let full = response(
            ApiKey::SaslAuthenticate,
            2,
            &SaslAuthenticateResponse::default(),
        );
        // An error code of 0 and then nothing: not a whole answer, so not a success.
        assert!(!c.identity.on_response(note, &full[..7]));
        assert_eq!(c.user(), "ANONYMOUS");
        for version in 0..=2 {
            let full = response(
                ApiKey::SaslAuthenticate,
                version,
                &SaslAuthenticateResponse::default()
                    .with_error_message(Some(StrBytes::from_static_str("")))
                    .with_auth_bytes(Bytes::from_static(b"v=abc")),
            );
            for cut in 0..=full.len() {
                let mut c = Conn::new(version);
                c.handshake("PLAIN", 0);
                let note = c.send(b"\0alice\0secret");
                let changed = c.identity.on_response(note, &full[..cut]);
                assert_eq!(changed, cut == full.len(), "v{version} cut at {cut}");
            }
        }
        // A handshake answer cut short starts nothing.
        let mut c = Conn::new(2);
        let req = request(
            ApiKey::SaslHandshake,
            1,
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
        );
        let note = c
            .identity
            .on_request(SASL_HANDSHAKE, 1, &req)
            .unwrap()
            .unwrap();
        let resp = response(
            ApiKey::SaslHandshake,
            1,
            &SaslHandshakeResponse::default()
                .with_mechanisms(vec![StrBytes::from_static_str("PLAIN")]),
        );
        c.identity.on_response(note, &resp[..resp.len() - 1]);
        assert!(!c.step(b"\0alice\0secret", 0));
        assert_eq!(c.user(), "ANONYMOUS");
    }

    #[test]
    fn other_requests_give_no_note() {
        let mut identity = Identity::new(Principal::anonymous());
        let req = request(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
        assert!(identity.on_request(18, 3, &req).unwrap().is_none());
        // Not even read: garbage passes.
        assert!(identity.on_request(0, 9, &[1, 2, 3]).unwrap().is_none());
        assert!(identity.principal().is_anonymous());
    }

    #[test]
    fn notes_carry_no_password() {
        let mut c = Conn::new(2);
        c.handshake("PLAIN", 0);
        let note = c.send(b"\0alice\0hunter2");
        let shown = format!("{note:?} {:?}", c.identity);
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
