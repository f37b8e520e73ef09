//! Who is asking: security protocols, principals, per-connection sessions, SASL settings and the
//! authorizer that decides who may describe and alter quotas.
//!
//! A connection's [`Session`] starts from its listener's [`SecurityProtocol`]: PLAINTEXT and SSL
//! without a client certificate give `User:ANONYMOUS`; SSL with a client certificate gives the
//! certificate's subject (RFC 2253, as Kafka's `ssl.principal.mapping.rules=DEFAULT`); SASL
//! listeners accept only ApiVersions, SaslHandshake and SaslAuthenticate until the client has
//! authenticated (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), and then give `User:<name>`. A
//! [`PrincipalBuilder`] turns what was authenticated into the principal;
//! [`DefaultPrincipalBuilder`] is Kafka's, and (with the `tls` feature) a `PrincipalMapper` is
//! Kafka's with `ssl.principal.mapping.rules`.
//!
//! The [`Authorizer`] lets only `super.users` alter quotas, and (unless configured otherwise) only
//! authenticated principals describe them.

pub(crate) mod credentials;
pub(crate) mod dn;
#[cfg(feature = "tls")]
pub(crate) mod mapping;
pub(crate) mod scram;
#[cfg(feature = "tls")]
pub(crate) mod tls;

use std::collections::BTreeSet;
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;

pub(crate) use credentials::Credentials;
pub(crate) use scram::ScramMechanism;

/// A listener's security protocol, as Kafka names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    /// No TLS, no authentication.
    Plaintext,
    /// TLS, optionally with client certificates.
    Ssl,
    /// SASL authentication without TLS.
    SaslPlaintext,
    /// SASL authentication over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// Every protocol.
    pub const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    /// Kafka's name (`SASL_SSL`).
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Whether connections run TLS.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether connections authenticate with SASL.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SecurityProtocol {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SecurityProtocol::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| ParseError::SecurityProtocol {
                value: s.to_owned(),
            })
    }
}

/// A setting's value that names none of the values it may take: a security protocol, a SASL
/// mechanism, a principal or `ssl.client.auth`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseError {
    /// Not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
    SecurityProtocol {
        /// The value as given.
        value: String,
    },
    /// Not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    SaslMechanism {
        /// The value as given.
        value: String,
    },
    /// Not `Type:name` (a `super.users` entry).
    Principal {
        /// The value as given.
        value: String,
    },
    /// Not `required`, `requested` or `none` (`ssl.client.auth`).
    ClientAuth {
        /// The value as given.
        value: String,
    },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::SecurityProtocol { value } => write!(
                f,
                "unknown security protocol '{value}' (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)"
            ),
            ParseError::SaslMechanism { value } => write!(
                f,
                "unsupported SASL mechanism '{value}' (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"
            ),
            ParseError::Principal { value } => write!(
                f,
                "'{value}' is not a principal; write Type:name, e.g. User:alice"
            ),
            ParseError::ClientAuth { value } => write!(
                f,
                "ssl.client.auth={value}: expected required, requested or none"
            ),
        }
    }
}

impl std::error::Error for ParseError {}

/// A SASL mechanism this server can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SaslMechanism {
    /// `PLAIN` (RFC 4616): the password travels to the server; use it over TLS.
    Plain,
    /// `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    Scram(ScramMechanism),
}

impl SaslMechanism {
    /// Every mechanism served.
    pub const ALL: [SaslMechanism; 3] = [
        SaslMechanism::Plain,
        SaslMechanism::Scram(ScramMechanism::Sha256),
        SaslMechanism::Scram(ScramMechanism::Sha512),
    ];

    /// The SASL name.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::Scram(m) => m.name(),
        }
    }
}

impl fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SaslMechanism {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SaslMechanism::ALL
            .into_iter()
            .find(|m| m.name() == s.trim())
            .ok_or_else(|| ParseError::SaslMechanism {
                value: s.to_owned(),
            })
    }
}

/// A Kafka principal: a type and a name (`User:alice`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Principal {
    /// The principal type (`User`).
    pub principal_type: String,
    /// The name (`alice`); the user quotas apply to.
    pub name: String,
}

impl Principal {
    /// `User:<name>`.
    pub fn user(name: impl Into<String>) -> Principal {
        Principal {
            principal_type: "User".to_owned(),
            name: name.into(),
        }
    }

    /// `User:ANONYMOUS`, the principal of an unauthenticated connection.
    pub fn anonymous() -> Principal {
        Principal::user("ANONYMOUS")
    }

    /// Whether this is `User:ANONYMOUS`.
    pub fn is_anonymous(&self) -> bool {
        self.principal_type == "User" && self.name == "ANONYMOUS"
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.principal_type, self.name)
    }
}

impl FromStr for Principal {
    type Err = ParseError;

    /// `Type:name`, as `super.users` lists them.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().split_once(':') {
            Some((t, n)) if !t.is_empty() && !n.is_empty() => Ok(Principal {
                principal_type: t.to_owned(),
                name: n.to_owned(),
            }),
            _ => Err(ParseError::Principal {
                value: s.to_owned(),
            }),
        }
    }
}

/// What a connection authenticated with, for a [`PrincipalBuilder`] (Kafka's
/// `AuthenticationContext`).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum AuthContext<'a> {
    /// A PLAINTEXT connection.
    Plaintext {
        /// The peer's address, when known.
        peer: Option<SocketAddr>,
    },
    /// A TLS connection on an SSL listener.
    Ssl {
        /// The peer's address, when known.
        peer: Option<SocketAddr>,
        /// The client's certificate (DER), if it presented one that verified.
        peer_certificate: Option<&'a [u8]>,
    },
    /// A completed SASL authentication.
    Sasl {
        /// The peer's address, when known.
        peer: Option<SocketAddr>,
        /// The listener's protocol (SASL_PLAINTEXT or SASL_SSL).
        protocol: SecurityProtocol,
        /// The mechanism used.
        mechanism: SaslMechanism,
        /// The authenticated (authorization) id.
        authorization_id: &'a str,
    },
}

/// Turns what a connection authenticated with into its principal. Brokers plug their own in with
/// [`Handler::with_principal_builder`](crate::Handler::with_principal_builder).
pub trait PrincipalBuilder: fmt::Debug + Send + Sync {
    /// The principal for `context`, or why there is none (the connection is then refused).
    fn build(&self, context: &AuthContext<'_>) -> Result<Principal, PrincipalError>;
}

/// Why a [`PrincipalBuilder`] gives a connection no principal.
#[derive(Debug)]
#[non_exhaustive]
pub enum PrincipalError {
    /// The client certificate's subject cannot be read.
    Certificate(dn::DnError),
    /// A broker's own builder refuses the connection, for its own reason.
    Refused(Box<dyn std::error::Error + Send + Sync>),
}

impl PrincipalError {
    /// A refusal by a broker's own builder: `why` is a message or an error of its own.
    pub fn refused(why: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> PrincipalError {
        PrincipalError::Refused(why.into())
    }
}

impl fmt::Display for PrincipalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrincipalError::Certificate(e) => e.fmt(f),
            PrincipalError::Refused(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for PrincipalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PrincipalError::Certificate(e) => Some(e),
            PrincipalError::Refused(e) => Some(e.as_ref()),
        }
    }
}

/// Kafka's `DefaultKafkaPrincipalBuilder` with `ssl.principal.mapping.rules=DEFAULT`:
/// `User:ANONYMOUS` without authentication, `User:<RFC 2253 subject>` for a client certificate,
/// `User:<authorization id>` for SASL.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultPrincipalBuilder;

impl PrincipalBuilder for DefaultPrincipalBuilder {
    fn build(&self, context: &AuthContext<'_>) -> Result<Principal, PrincipalError> {
        match context {
            AuthContext::Plaintext { .. }
            | AuthContext::Ssl {
                peer_certificate: None,
                ..
            } => Ok(Principal::anonymous()),
            AuthContext::Ssl {
                peer_certificate: Some(der),
                ..
            } => dn::subject_dn(der)
                .map(Principal::user)
                .map_err(PrincipalError::Certificate),
            AuthContext::Sasl {
                authorization_id, ..
            } => Ok(Principal::user(*authorization_id)),
        }
    }
}

/// The SASL side of a handler: the mechanisms a SASL listener offers and the users it knows.
#[derive(Clone, Debug)]
pub struct SaslConfig {
    /// `sasl.enabled.mechanisms`, in the order offered.
    pub mechanisms: Vec<SaslMechanism>,
    /// The users (`sasl.credentials.file`).
    pub credentials: Arc<Credentials>,
}

impl SaslConfig {
    /// Whether `mechanism` is enabled.
    pub fn enabled(&self, mechanism: SaslMechanism) -> bool {
        self.mechanisms.contains(&mechanism)
    }
}

/// Who may do what: `super.users` may alter; describing needs an authenticated principal unless
/// `kquota.describe.allow.anonymous=true`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Authorizer {
    super_users: BTreeSet<Principal>,
    allow_anonymous_describe: bool,
}

impl Authorizer {
    /// An authorizer with these super users.
    pub fn new(super_users: impl IntoIterator<Item = Principal>) -> Authorizer {
        Authorizer {
            super_users: super_users.into_iter().collect(),
            allow_anonymous_describe: false,
        }
    }

    /// Lets `User:ANONYMOUS` describe quotas.
    pub fn allow_anonymous_describe(mut self, allow: bool) -> Authorizer {
        self.allow_anonymous_describe = allow;
        self
    }

    /// The super users.
    pub fn super_users(&self) -> impl Iterator<Item = &Principal> {
        self.super_users.iter()
    }

    /// Whether `principal` may alter quotas (AlterClientQuotas, AlterQuotas).
    pub fn may_alter(&self, principal: &Principal) -> bool {
        self.super_users.contains(principal)
    }

    /// Whether `principal` may describe quotas (DescribeClientQuotas).
    pub fn may_describe(&self, principal: &Principal) -> bool {
        self.may_alter(principal) || self.allow_anonymous_describe || !principal.is_anonymous()
    }
}

/// Parses `super.users`: principals separated by `;` (`User:alice;User:bob`).
pub fn parse_super_users(value: &str) -> Result<Vec<Principal>, ParseError> {
    value
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::parse)
        .collect()
}

/// Where a SASL exchange stands on one connection.
#[derive(Clone, Debug)]
pub(crate) enum SaslStage {
    /// Not a SASL connection, or authentication is complete.
    Done,
    /// Waiting for SaslHandshake (ApiVersions is allowed too).
    Handshake,
    /// The mechanism is chosen; waiting for the first SaslAuthenticate.
    Authenticate(SaslMechanism),
    /// A SCRAM exchange waits for the client's final message.
    ScramFinal(Box<scram::ScramServer>),
    /// Authentication failed: nothing more is served on this connection (a server closes it;
    /// a host that goes on calling the handler gets every request refused, never an anonymous
    /// session).
    Failed,
}

/// One connection's security state, threaded through [`Handler::handle`](crate::Handler::handle):
/// its listener, its principal, and where its authentication stands.
#[derive(Clone, Debug)]
pub struct Session {
    listener: String,
    protocol: SecurityProtocol,
    peer: Option<SocketAddr>,
    principal: Principal,
    pub(crate) sasl: SaslStage,
}

impl Session {
    /// A new connection on `listener` (its name, e.g. `SASL_SSL`) speaking `protocol` from `peer`.
    /// Its principal is `User:ANONYMOUS` until authentication sets another; on a SASL listener it
    /// must authenticate before any request other than ApiVersions, SaslHandshake and
    /// SaslAuthenticate.
    pub fn new(
        listener: impl Into<String>,
        protocol: SecurityProtocol,
        peer: Option<SocketAddr>,
    ) -> Session {
        Session {
            listener: listener.into(),
            protocol,
            peer,
            principal: Principal::anonymous(),
            sasl: if protocol.uses_sasl() {
                SaslStage::Handshake
            } else {
                SaslStage::Done
            },
        }
    }

    /// An anonymous PLAINTEXT session with no peer, for tests and embedding.
    pub fn plaintext() -> Session {
        Session::new("PLAINTEXT", SecurityProtocol::Plaintext, None)
    }

    /// Sets the principal (an SSL listener does, from the client certificate).
    pub fn with_principal(mut self, principal: Principal) -> Session {
        self.principal = principal;
        self
    }

    /// The listener's name.
    pub fn listener(&self) -> &str {
        &self.listener
    }

    /// The listener's protocol.
    pub fn protocol(&self) -> SecurityProtocol {
        self.protocol
    }

    /// The peer's address.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// The principal (`User:ANONYMOUS` until authenticated).
    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// The user name quotas apply to (the principal's name: `alice` for `User:alice`).
    pub fn quota_user(&self) -> &str {
        &self.principal.name
    }

    /// Whether the connection may send requests other than the SASL ones.
    pub fn is_authenticated(&self) -> bool {
        matches!(self.sasl, SaslStage::Done)
    }

    pub(crate) fn authenticated(&mut self, principal: Principal) {
        tracing::info!(peer = ?self.peer, listener = %self.listener, "authenticated as {principal}");
        self.principal = principal;
        self.sasl = SaslStage::Done;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn super_users_parse_like_kafka() {
        assert_eq!(
            parse_super_users("User:alice; User:CN=bob,O=acme;").unwrap(),
            vec![Principal::user("alice"), Principal::user("CN=bob,O=acme")]
        );
        assert!(parse_super_users("alice").is_err());
        assert!(parse_super_users("User:").is_err());
        assert!(parse_super_users("").unwrap().is_empty());
    }

    #[test]
    fn authorizer_rules() {
        let a = Authorizer::new([Principal::user("admin")]);
        assert!(a.may_alter(&Principal::user("admin")));
        assert!(!a.may_alter(&Principal::user("alice")));
        assert!(!a.may_alter(&Principal::anonymous()));
        assert!(a.may_describe(&Principal::user("alice")));
        assert!(!a.may_describe(&Principal::anonymous()));
        assert!(a
            .allow_anonymous_describe(true)
            .may_describe(&Principal::anonymous()));
    }

    #[test]
    fn names_round_trip() {
        for p in SecurityProtocol::ALL {
            assert_eq!(p.name().parse::<SecurityProtocol>().unwrap(), p);
        }
        for m in SaslMechanism::ALL {
            assert_eq!(m.name().parse::<SaslMechanism>().unwrap(), m);
        }
        assert!("GSSAPI".parse::<SaslMechanism>().is_err());
        assert_eq!(Principal::user("alice").to_string(), "User:alice");
    }
}
