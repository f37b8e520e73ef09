//! TLS towards clients (the proxy's listeners) and towards the cluster, from PEM files.
//!
//! Towards clients, a connection's principal is what Kafka makes of its client certificate: the
//! subject's distinguished name in RFC 2253 form (`CN=alice,OU=eng,O=acme`), mapped by Kafka's
//! `ssl.principal.mapping.rules`, or `User:ANONYMOUS` without a certificate. Towards the cluster,
//! each broker's certificate is checked against the given CAs and against the broker's name as
//! the cluster gives it (Kafka's `ssl.endpoint.identification.algorithm=https`).
//!
//! SIGHUP reads the files again ([`kquota_host::Reload`]): connections made from then on get what
//! loaded, those open keep theirs, and files that do not load change nothing (the log says why).
//! The principal mapping rules are settings, not files, and stay as they were.
//!
//! Errors name the file by the proxy's setting and its flag
//! (`kquota.proxy.ssl.certificate.location (--tls-cert)=/etc/proxy/cert.pem: cannot read: ...`), so
//! that they read the same whether it came from a properties file or the command line.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use kquota_host::tls::{self as host_tls, Pem};
use kquota_host::{Reload, Reloadable};
use kquota_wire::tls::{self, ClientAuth, KeyPair, TlsError};
use kquota_wire::{AuthContext, DefaultPrincipalBuilder, Principal, PrincipalBuilder};
use regex::{Regex, RegexBuilder};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// TLS on the proxy's listeners.
pub struct ClientTls {
    /// Reloaded on SIGHUP; each handshake takes the current one.
    acceptor: Reloadable<TlsAcceptor>,
    client_auth: ClientAuth,
    rules: PrincipalMapper,
}

impl fmt::Debug for ClientTls {
    // The key stays out of logs: only the settings that shape a connection's principal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls")
            .field("client_auth", &self.client_auth)
            .field("principal_mapping_rules", &self.rules.text)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// The listeners' certificate chain (`cert`, leaf first) and its unencrypted key (`key`), the
    /// CAs that verify client certificates (`client_ca`), Kafka's `ssl.client.auth`
    /// (`client_auth`: `"none"`, `"requested"` or `"required"` parse into it) and Kafka's
    /// `ssl.principal.mapping.rules` (`principal_mapping_rules`; `"DEFAULT"` keeps the subject as
    /// it is).
    pub fn from_files(
        cert: &Path,
        key: &Path,
        client_ca: Option<&Path>,
        client_auth: ClientAuth,
        principal_mapping_rules: &str,
    ) -> Result<ClientTls, TlsConfigError> {
        let rules = PrincipalMapper::parse(principal_mapping_rules)?;
        let initial = client_acceptor(cert, key, client_ca, client_auth)?;
        let (cert, key, ca) = (
            cert.to_owned(),
            key.to_owned(),
            client_ca.map(Path::to_owned),
        );
        let what = format!(
            "TLS certificate {TLS_CERT}={}{}",
            cert.display(),
            ca.as_ref()
                .map(|ca| format!(" and client CAs {TLS_CLIENT_CA}={}", ca.display()))
                .unwrap_or_default()
        );
        let acceptor = Reloadable::new(what, initial, move || {
            client_acceptor(&cert, &key, ca.as_deref(), client_auth).map_err(|e| e.to_string())
        });
        Ok(ClientTls {
            acceptor,
            client_auth,
            rules,
        })
    }

    /// Runs the TLS handshake with a client. The principal is `User:<mapped subject>` when the
    /// client presented a certificate that verified, else `User:ANONYMOUS` (Kafka's SSL principal
    /// rules). A failed handshake, a subject that cannot be read, or one no mapping rule applies
    /// to is an error: the connection is refused, as Kafka refuses it.
    pub(crate) async fn accept(
        &self,
        tcp: TcpStream,
    ) -> io::Result<(tokio_rustls::server::TlsStream<TcpStream>, Principal)> {
        let peer = tcp.peer_addr().ok();
        let acceptor = self.acceptor.current();
        let stream = acceptor.accept(tcp).await?;
        // rustls has verified any certificate presented (or refused the handshake).
        let certificate = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first());
        let principal = self.principal(peer, certificate)?;
        Ok((stream, principal))
    }

    /// The principal of a client that presented `certificate` (the leaf, verified), as kquotad's
    /// SSL listeners make it, then mapped by the rules.
    fn principal(
        &self,
        peer: Option<SocketAddr>,
        certificate: Option<&CertificateDer<'_>>,
    ) -> io::Result<Principal> {
        let context = AuthContext::Ssl {
            peer,
            peer_certificate: certificate.map(|c| c.as_ref()),
        };
        let principal = DefaultPrincipalBuilder
            .build(&context)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        if certificate.is_none() {
            // ANONYMOUS is not a subject: Kafka maps only a certificate's name.
            return Ok(principal);
        }
        let name = self
            .rules
            .map(&principal.name)
            .map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, e))?;
        Ok(Principal {
            principal_type: principal.principal_type,
            name,
        })
    }
}

impl Reload for ClientTls {
    fn what(&self) -> String {
        self.acceptor.what().to_owned()
    }

    fn reload(&self) -> bool {
        self.acceptor.reload()
    }
}

/// The listeners' acceptor from the files (see [`ClientTls::from_files`]).
fn client_acceptor(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
    client_auth: ClientAuth,
) -> Result<TlsAcceptor, TlsConfigError> {
    let identity = key_pair(TLS_CERT, cert, TLS_KEY, key)?;
    let trust = match client_ca {
        Some(path) => trust_anchors(TLS_CLIENT_CA, path)?,
        None => Vec::new(),
    };
    if client_auth != ClientAuth::None && trust.is_empty() {
        return Err(TlsConfigError::NoClientCa);
    }
    host_tls::acceptor(&identity, &trust, client_auth).map_err(|e| {
        TlsConfigError::config(
            "kquota.proxy.ssl.certificate.location and kquota.proxy.ssl.key.location \
                 (--tls-cert and --tls-key)",
            e,
        )
    })
}

/// TLS towards the cluster.
pub struct UpstreamTls {
    /// Reloaded on SIGHUP; each broker connection takes the current one.
    connector: Reloadable<TlsConnector>,
}

impl fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamTls").finish_non_exhaustive()
    }
}

impl UpstreamTls {
    /// The CAs the brokers' certificates are checked against (`ca`), and a client certificate
    /// chain and its unencrypted key to present to them (`client_cert`: the chain's file, then
    /// the key's), for a cluster that asks for one.
    pub fn from_files(
        ca: &Path,
        client_cert: Option<(&Path, &Path)>,
    ) -> Result<UpstreamTls, TlsConfigError> {
        let initial = upstream_connector(ca, client_cert)?;
        let ca: PathBuf = ca.to_owned();
        let client: Option<(PathBuf, PathBuf)> =
            client_cert.map(|(c, k)| (c.to_owned(), k.to_owned()));
        let what = format!(
            "upstream TLS CAs {UPSTREAM_CA}={}{}",
            ca.display(),
            client
                .as_ref()
                .map(|(c, _)| format!(" and client certificate {UPSTREAM_CERT}={}", c.display()))
                .unwrap_or_default()
        );
        let connector = Reloadable::new(what, initial, move || {
            let client = client.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
            upstream_connector(&ca, client).map_err(|e| e.to_string())
        });
        Ok(UpstreamTls { connector })
    }

    /// Runs the TLS handshake with a broker. `server_name`: the broker's host as the cluster
    /// names it (a DNS name or an IP literal, IPv6 with or without brackets), checked against
    /// its certificate.
    pub(crate) async fn connect(
        &self,
        tcp: TcpStream,
        server_name: &str,
    ) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let host = server_name
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(server_name);
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("'{server_name}' cannot be checked against a certificate: {e}"),
            )
        })?;
        self.connector.current().connect(name, tcp).await
    }
}

impl Reload for UpstreamTls {
    fn what(&self) -> String {
        self.connector.what().to_owned()
    }

    fn reload(&self) -> bool {
        self.connector.reload()
    }
}

/// The connector towards the cluster from the files (see [`UpstreamTls::from_files`]).
fn upstream_connector(
    ca: &Path,
    client_cert: Option<(&Path, &Path)>,
) -> Result<TlsConnector, TlsConfigError> {
    let trust = trust_anchors(UPSTREAM_CA, ca)?;
    let identity = client_cert
        .map(|(cert, key)| key_pair(UPSTREAM_CERT, cert, UPSTREAM_KEY, key))
        .transpose()?;
    let config = tls::client_config(&trust, identity.as_ref(), true, rustls::DEFAULT_VERSIONS)
        .map_err(|e| {
            TlsConfigError::config(
                "kquota.proxy.upstream.ssl.certificate.location and \
                 kquota.proxy.upstream.ssl.key.location (--upstream-cert and --upstream-key)",
                e,
            )
        })?;
    Ok(TlsConnector::from(config))
}

/// Why TLS settings cannot be used.
#[derive(Debug)]
#[non_exhaustive]
pub enum TlsConfigError {
    /// A PEM file that cannot be read, or that holds no usable certificate, key or CA; the
    /// message names the file and its flag.
    File(TlsError),
    /// Client certificates are requested or required, but no CA verifies them.
    NoClientCa,
    /// A certificate and a key that do not belong together.
    KeyMismatch {
        /// The two flags.
        what: &'static str,
        /// Why.
        source: rustls::Error,
    },
    /// rustls refuses the configuration for another reason.
    Config(TlsError),
    /// `ssl.principal.mapping.rules` that do not parse.
    PrincipalMappingRules {
        /// The rule, as written.
        rule: String,
        /// What is wrong with it.
        why: String,
    },
}

impl TlsConfigError {
    fn config(what: &'static str, e: TlsError) -> TlsConfigError {
        match e {
            TlsError::KeyMismatch { source, .. } => TlsConfigError::KeyMismatch { what, source },
            other => TlsConfigError::Config(other),
        }
    }
}

impl fmt::Display for TlsConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsConfigError::File(e) | TlsConfigError::Config(e) => e.fmt(f),
            TlsConfigError::NoClientCa => f.write_str(
                "ssl.client.auth (--tls-client-auth) requested or required needs ssl.truststore.location (--tls-client-ca), the CAs that verify client certificates",
            ),
            TlsConfigError::KeyMismatch { what, source } => {
                write!(f, "{what}: the certificate and the key do not belong together: {source}")
            }
            TlsConfigError::PrincipalMappingRules { rule, why } => {
                write!(f, "ssl.principal.mapping.rules: invalid rule '{rule}': {why}")
            }
        }
    }
}

impl std::error::Error for TlsConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TlsConfigError::File(e) | TlsConfigError::Config(e) => Some(e),
            TlsConfigError::KeyMismatch { source, .. } => Some(source),
            TlsConfigError::NoClientCa | TlsConfigError::PrincipalMappingRules { .. } => None,
        }
    }
}

// How errors name each file: by its setting and the binary's flag for it.
const TLS_CERT: &str = "kquota.proxy.ssl.certificate.location (--tls-cert)";
const TLS_KEY: &str = "kquota.proxy.ssl.key.location (--tls-key)";
const TLS_CLIENT_CA: &str = "ssl.truststore.location (--tls-client-ca)";
const UPSTREAM_CA: &str = "kquota.proxy.upstream.ssl.truststore.location (--upstream-ca)";
const UPSTREAM_CERT: &str = "kquota.proxy.upstream.ssl.certificate.location (--upstream-cert)";
const UPSTREAM_KEY: &str = "kquota.proxy.upstream.ssl.key.location (--upstream-key)";

/// A certificate chain and its key, each from its file (which may be the same file).
fn key_pair(
    cert_flag: &str,
    cert: &Path,
    key_flag: &str,
    key: &Path,
) -> Result<KeyPair, TlsConfigError> {
    host_tls::key_pair(
        Pem::File {
            setting: cert_flag,
            path: cert,
        },
        Pem::File {
            setting: key_flag,
            path: key,
        },
    )
    .map_err(TlsConfigError::File)
}

/// The CAs in a file, each checked as a trust anchor so that a bad one is named by its file.
fn trust_anchors(flag: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    host_tls::trust_anchors(&[Pem::File {
        setting: flag,
        path,
    }])
    .map_err(TlsConfigError::File)
}

/// Kafka's `ssl.principal.mapping.rules` (its `SslPrincipalMapper`): rules separated by commas,
/// each `DEFAULT` (the name as it is) or `RULE:pattern/replacement/[LU]`. A name is given to the
/// rules in order; the first whose pattern matches the whole name gives the principal: the name
/// with every match of the pattern replaced (Java's `String.replaceAll`), then lower-cased (`L`)
/// or upper-cased (`U`). A name no rule matches is refused.
///
/// Patterns are Java regular expressions, compiled by the `regex` crate once [`java_pattern`] has
/// rewritten what Java means differently; Java syntax the crate lacks (back references,
/// lookaround, atomic groups, possessive quantifiers, ...) is refused when the rules are read,
/// not when a client connects. The crate still differs from Java in that `$` (without `(?m)`)
/// is only the end, not also before a final line break; `.` matches U+0085, U+2028 and U+2029;
/// `(?i)` folds case beyond ASCII; and `\b` is Unicode-aware (Java's is ASCII since JDK 19).
#[derive(Debug)]
struct PrincipalMapper {
    rules: Vec<Rule>,
    text: String,
}

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
    /// Splits and reads the rules as Kafka's `SslPrincipalMapper.fromRules` does.
    fn parse(text: &str) -> Result<PrincipalMapper, TlsConfigError> {
        let invalid = |rule: &str, why: String| TlsConfigError::PrincipalMappingRules {
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

    /// The principal name for a certificate's subject, or why there is none.
    fn map(&self, dn: &str) -> Result<String, String> {
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
        Err(format!(
            "no ssl.principal.mapping.rules rule applies to '{dn}' (rules: {})",
            self.text
        ))
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
/// that a rule cannot exhaust the proxy's memory.
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
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A directory of PEM files for one test, removed when dropped.
    struct Dir(PathBuf);

    impl Dir {
        fn new() -> Dir {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let path = std::env::temp_dir().join(format!(
                "kquota-proxy-tls-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&path).unwrap();
            Dir(path)
        }

        fn write(&self, name: &str, text: &str) -> PathBuf {
            let path = self.0.join(name);
            std::fs::write(&path, text).unwrap();
            path
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A test CA's certificate and key.
    struct Ca {
        cert: rcgen::Certificate,
        key: KeyPair,
    }

    fn ca(name: &str) -> Ca {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        Ca {
            cert: params.self_signed(&key).unwrap(),
            key,
        }
    }

    /// A certificate signed by `ca`, as (chain PEM, key PEM).
    fn leaf(ca: &Ca, names: &[&str], subject: &[(DnType, &str)]) -> (String, String) {
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name = DistinguishedName::new();
        for (t, v) in subject {
            params.distinguished_name.push(t.clone(), *v);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca.cert, &ca.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate for
    /// `CN=alice,OU=eng,O=acme`, written to files.
    struct Pki {
        dir: Dir,
        ca: PathBuf,
        server_cert: PathBuf,
        server_key: PathBuf,
        client_cert: PathBuf,
        client_key: PathBuf,
        other_ca: PathBuf,
    }

    fn pki() -> Pki {
        let dir = Dir::new();
        let authority = ca("kquota test CA");
        let (server_cert, server_key) = leaf(
            &authority,
            &["localhost", "127.0.0.1"],
            &[(DnType::CommonName, "kquota-proxy")],
        );
        let (client_cert, client_key) = leaf(
            &authority,
            &[],
            &[
                (DnType::OrganizationName, "acme"),
                (DnType::OrganizationalUnitName, "eng"),
                (DnType::CommonName, "alice"),
            ],
        );
        Pki {
            ca: dir.write("ca.pem", &authority.cert.pem()),
            other_ca: dir.write("other-ca.pem", &ca("someone else").cert.pem()),
            server_cert: dir.write("server.pem", &server_cert),
            server_key: dir.write("server.key", &server_key),
            client_cert: dir.write("client.pem", &client_cert),
            client_key: dir.write("client.key", &client_key),
            dir,
        }
    }

    impl Pki {
        fn server(&self, auth: ClientAuth, rules: &str) -> ClientTls {
            ClientTls::from_files(
                &self.server_cert,
                &self.server_key,
                Some(&self.ca),
                auth,
                rules,
            )
            .unwrap()
        }

        fn client(&self, ca: &Path, with_cert: bool) -> UpstreamTls {
            let cert = with_cert.then_some((self.client_cert.as_path(), self.client_key.as_path()));
            UpstreamTls::from_files(ca, cert).unwrap()
        }
    }

    /// Accepts one connection with `server` and connects to it with `client` as `name`; the
    /// server's outcome, and whether the client's side carried bytes both ways.
    async fn handshake(
        server: impl Into<Arc<ClientTls>>,
        client: impl Into<Arc<UpstreamTls>>,
        name: &str,
    ) -> (io::Result<Principal>, io::Result<()>) {
        let (server, client) = (server.into(), client.into());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepting = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let (mut stream, principal) = server.accept(tcp).await?;
            let mut buf = [0; 4];
            stream.read_exact(&mut buf).await?;
            stream.write_all(&buf).await?;
            stream.flush().await?;
            Ok(principal)
        });
        let tcp = TcpStream::connect(addr).await.unwrap();
        let connected = async {
            let mut stream = client.connect(tcp, name).await?;
            stream.write_all(b"ping").await?;
            stream.flush().await?;
            let mut buf = [0; 4];
            stream.read_exact(&mut buf).await?;
            assert_eq!(&buf, b"ping");
            Ok(())
        }
        .await;
        (accepting.await.unwrap(), connected)
    }

    #[tokio::test]
    async fn a_reload_serves_new_files_to_new_connections_and_a_bad_file_keeps_the_old() {
        let pki = pki();
        let server = Arc::new(pki.server(ClientAuth::None, "DEFAULT"));
        let trusting = |ca: &Path| Arc::new(UpstreamTls::from_files(ca, None).unwrap());
        let (old, new) = (trusting(&pki.ca), {
            let next = ca("the next CA");
            let (cert, key) = leaf(&next, &["localhost"], &[(DnType::CommonName, "next")]);
            let next_ca = pki.dir.write("next-ca.pem", &next.cert.pem());
            let trust = trusting(&next_ca);
            // The listener's files replaced: not served until reloaded.
            pki.dir.write("server.pem", &cert);
            pki.dir.write("server.key", &key);
            trust
        });
        let connects = |client: &Arc<UpstreamTls>| {
            let (server, client) = (Arc::clone(&server), Arc::clone(client));
            async move { handshake(server, client, "localhost").await.1.is_ok() }
        };
        assert!(connects(&old).await && !connects(&new).await);
        assert!(server.reload());
        assert!(connects(&new).await && !connects(&old).await);
        // A key that does not load: the reload fails and the certificate in use stays.
        pki.dir.write("server.key", "not a key");
        assert!(!server.reload());
        assert!(connects(&new).await);

        // Towards the cluster: the CA file read again.
        let upstream_ca = pki.dir.write(
            "upstream-ca.pem",
            &std::fs::read_to_string(&pki.ca).unwrap(),
        );
        let upstream = trusting(&upstream_ca);
        assert!(!connects(&upstream).await);
        std::fs::copy(pki.dir.0.join("next-ca.pem"), &upstream_ca).unwrap();
        assert!(upstream.reload());
        assert!(connects(&upstream).await);
        std::fs::write(&upstream_ca, "garbage").unwrap();
        assert!(!upstream.reload());
        assert!(connects(&upstream).await);
    }

    #[tokio::test]
    async fn client_certificate_gives_the_mapped_principal() {
        let pki = pki();
        for (rules, name) in [
            ("DEFAULT", "CN=alice,OU=eng,O=acme"),
            ("RULE:^CN=(.*?),.*$/$1/", "alice"),
            (
                "RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$3/U, DEFAULT",
                "ALICE@ACME",
            ),
            ("RULE:^CN=bob,.*$/bob/, DEFAULT", "CN=alice,OU=eng,O=acme"),
        ] {
            let (principal, client) = handshake(
                pki.server(ClientAuth::Required, rules),
                pki.client(&pki.ca, true),
                "localhost",
            )
            .await;
            client.unwrap();
            assert_eq!(principal.unwrap(), Principal::user(name), "{rules}");
        }
    }

    #[tokio::test]
    async fn without_a_certificate_the_principal_is_anonymous() {
        let pki = pki();
        for auth in [ClientAuth::None, ClientAuth::Requested] {
            // The rule would refuse any certificate's name: ANONYMOUS is not mapped.
            let (principal, client) = handshake(
                pki.server(auth, "RULE:^nothing$/x/"),
                pki.client(&pki.ca, false),
                "127.0.0.1",
            )
            .await;
            client.unwrap();
            assert!(principal.unwrap().is_anonymous(), "{auth:?}");
        }
        // With ssl.client.auth=none a certificate is not even asked for.
        let (principal, _) = handshake(
            pki.server(ClientAuth::None, "DEFAULT"),
            pki.client(&pki.ca, true),
            "localhost",
        )
        .await;
        assert!(principal.unwrap().is_anonymous());
    }

    #[tokio::test]
    async fn required_auth_without_a_certificate_fails() {
        let pki = pki();
        let (principal, client) = handshake(
            pki.server(ClientAuth::Required, "DEFAULT"),
            pki.client(&pki.ca, false),
            "localhost",
        )
        .await;
        assert!(principal.is_err());
        assert!(client.is_err());
    }

    #[tokio::test]
    async fn a_name_no_rule_maps_is_refused() {
        let pki = pki();
        let (principal, _) = handshake(
            pki.server(ClientAuth::Required, "RULE:^CN=bob,.*$/bob/"),
            pki.client(&pki.ca, true),
            "localhost",
        )
        .await;
        let e = principal.unwrap_err();
        assert!(e.to_string().contains("CN=alice,OU=eng,O=acme"), "{e}");
    }

    #[tokio::test]
    async fn wrong_ca_or_wrong_name_fails() {
        let pki = pki();
        // The client does not trust the server's CA.
        let (server, client) = handshake(
            pki.server(ClientAuth::None, "DEFAULT"),
            pki.client(&pki.other_ca, false),
            "localhost",
        )
        .await;
        assert!(server.is_err());
        assert!(client.is_err());
        // The server does not trust the client's CA.
        let server_tls = ClientTls::from_files(
            &pki.server_cert,
            &pki.server_key,
            Some(&pki.other_ca),
            ClientAuth::Required,
            "DEFAULT",
        )
        .unwrap();
        let (server, _) = handshake(server_tls, pki.client(&pki.ca, true), "localhost").await;
        assert!(server.is_err());
        // A name the server's certificate does not carry.
        let (_, client) = handshake(
            pki.server(ClientAuth::None, "DEFAULT"),
            pki.client(&pki.ca, false),
            "kafka-1.example.com",
        )
        .await;
        let e = client.unwrap_err();
        assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
    }

    #[tokio::test]
    async fn server_names_are_checked_as_given() {
        let pki = pki();
        let tcp = || async {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            TcpStream::connect(l.local_addr().unwrap()).await.unwrap()
        };
        let client = pki.client(&pki.ca, false);
        let e = client
            .connect(tcp().await, "not a name!")
            .await
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("not a name!"), "{e}");
    }

    #[test]
    fn bad_files_name_the_file() {
        let pki = pki();
        let missing = pki.dir.0.join("missing.pem");
        let junk = pki.dir.write("junk.pem", "not PEM at all");
        let encrypted = pki.dir.write(
            "encrypted.key",
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
        );
        let server = |cert: &Path, key: &Path, ca: Option<&Path>, auth| {
            ClientTls::from_files(cert, key, ca, auth, "DEFAULT")
                .unwrap_err()
                .to_string()
        };
        let e = server(&missing, &pki.server_key, None, ClientAuth::None);
        assert!(
            e.starts_with(&format!(
                "kquota.proxy.ssl.certificate.location (--tls-cert)={}: cannot read",
                missing.display()
            )),
            "{e}"
        );
        let e = server(&junk, &pki.server_key, None, ClientAuth::None);
        assert!(
            e.starts_with(&format!(
                "kquota.proxy.ssl.certificate.location (--tls-cert)={}: no PEM certificate",
                junk.display()
            )),
            "{e}"
        );
        let e = server(&pki.server_cert, &junk, None, ClientAuth::None);
        assert!(
            e.starts_with(&format!(
                "kquota.proxy.ssl.key.location (--tls-key)={}: no usable",
                junk.display()
            )),
            "{e}"
        );
        let e = server(&pki.server_cert, &encrypted, None, ClientAuth::None);
        assert!(
            e.contains("encrypted private keys are not supported"),
            "{e}"
        );
        let e = server(
            &pki.server_cert,
            &pki.server_key,
            Some(&junk),
            ClientAuth::Required,
        );
        assert!(
            e.starts_with(&format!(
                "ssl.truststore.location (--tls-client-ca)={}",
                junk.display()
            )),
            "{e}"
        );
        let e = server(
            &pki.server_cert,
            &pki.server_key,
            None,
            ClientAuth::Requested,
        );
        assert!(e.contains("--tls-client-ca"), "{e}");
        // A key that is not the certificate's.
        let e = server(&pki.server_cert, &pki.client_key, None, ClientAuth::None);
        assert!(e.contains("do not belong together"), "{e}");

        let e = UpstreamTls::from_files(&missing, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "kquota.proxy.upstream.ssl.truststore.location (--upstream-ca)={}: cannot read",
                missing.display()
            )),
            "{e}"
        );
        let e = UpstreamTls::from_files(&pki.ca, Some((pki.client_cert.as_path(), junk.as_path())))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "kquota.proxy.upstream.ssl.key.location (--upstream-key)={}",
                junk.display()
            )),
            "{e}"
        );
        // A certificate and key in one file serve as both.
        let both = pki.dir.write(
            "both.pem",
            &format!(
                "{}{}",
                std::fs::read_to_string(&pki.client_cert).unwrap(),
                std::fs::read_to_string(&pki.client_key).unwrap()
            ),
        );
        UpstreamTls::from_files(&pki.ca, Some((both.as_path(), both.as_path()))).unwrap();
    }

    #[test]
    fn debug_shows_no_key() {
        let pki = pki();
        let tls = pki.server(ClientAuth::Requested, "DEFAULT");
        let shown = format!("{tls:?}");
        assert!(
            shown.contains("Requested") && shown.contains("DEFAULT"),
            "{shown}"
        );
        assert!(!shown.contains("PRIVATE"), "{shown}");
    }

    fn map(rules: &str, dn: &str) -> Result<String, String> {
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
        assert_eq!(
            map("RULE:^CN=(.*?),.*$/$1/", "OU=x").unwrap_err(),
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
                e.starts_with(&format!(
                    "ssl.principal.mapping.rules: invalid rule '{rule}': pattern: "
                )),
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
            assert!(
                e.starts_with("ssl.principal.mapping.rules: invalid rule"),
                "{rules}: {e}"
            );
        }
        // An empty setting has no rules: every certificate is refused, as in Kafka.
        assert!(map("", "CN=a").is_err());
    }
}
