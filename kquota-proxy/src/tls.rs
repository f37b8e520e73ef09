//! TLS towards clients (the proxy's listeners) and towards the cluster, from PEM files.
//!
//! Towards clients, a connection's principal is what Kafka makes of its client certificate: the
//! subject's distinguished name in RFC 2253 form (`CN=alice,OU=eng,O=acme`), mapped by Kafka's
//! `ssl.principal.mapping.rules`, or `User:ANONYMOUS` without a certificate. Towards the cluster,
//! each broker's certificate is checked against the given CAs and against the broker's name as
//! the cluster gives it (Kafka's `ssl.endpoint.identification.algorithm=https`).
//!
//! Errors name the file by the proxy's flag (`--tls-cert=/etc/proxy/cert.pem: cannot read: ...`).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::Path;

use kquota_wire::tls::{self, ClientAuth, KeyPair, TlsError};
use kquota_wire::{AuthContext, DefaultPrincipalBuilder, Principal, PrincipalBuilder};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// TLS on the proxy's listeners.
pub struct ClientTls {
    acceptor: TlsAcceptor,
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
        let identity = key_pair("--tls-cert", cert, "--tls-key", key)?;
        let trust = match client_ca {
            Some(path) => trust_anchors("--tls-client-ca", path)?,
            None => Vec::new(),
        };
        if client_auth != ClientAuth::None && trust.is_empty() {
            return Err(TlsConfigError::NoClientCa);
        }
        let config = tls::server_config(&identity, &trust, client_auth)
            .map_err(|e| TlsConfigError::config("--tls-cert and --tls-key", e))?;
        Ok(ClientTls {
            acceptor: TlsAcceptor::from(config),
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
        let stream = self.acceptor.accept(tcp).await?;
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

/// TLS towards the cluster.
pub struct UpstreamTls {
    connector: TlsConnector,
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
        let trust = trust_anchors("--upstream-ca", ca)?;
        let identity = client_cert
            .map(|(cert, key)| key_pair("--upstream-cert", cert, "--upstream-key", key))
            .transpose()?;
        let config = tls::client_config(&trust, identity.as_ref(), true, rustls::DEFAULT_VERSIONS)
            .map_err(|e| TlsConfigError::config("--upstream-cert and --upstream-key", e))?;
        Ok(UpstreamTls {
            connector: TlsConnector::from(config),
        })
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
        self.connector.connect(name, tcp).await
    }
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
                "--tls-client-auth=requested or required needs --tls-client-ca, the CAs that verify client certificates",
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

/// A PEM file's text. Read here rather than with `tls::read_pem_file`, which takes the path as
/// UTF-8; a `Path` need not be.
fn read(flag: &str, path: &Path) -> Result<String, TlsConfigError> {
    std::fs::read_to_string(path).map_err(|source| {
        TlsConfigError::File(TlsError::Unreadable {
            setting: flag.to_owned(),
            path: path.display().to_string(),
            source,
        })
    })
}

/// `flag=path`, how errors about a file's content name it.
fn setting(flag: &str, path: &Path) -> String {
    format!("{flag}={}", path.display())
}

/// A certificate chain and its key, each from its file (which may be the same file).
fn key_pair(
    cert_flag: &str,
    cert: &Path,
    key_flag: &str,
    key: &Path,
) -> Result<KeyPair, TlsConfigError> {
    let chain = tls::certificates(&read(cert_flag, cert)?, &setting(cert_flag, cert))
        .map_err(TlsConfigError::File)?;
    let key = tls::private_key(&read(key_flag, key)?, &setting(key_flag, key))
        .map_err(TlsConfigError::File)?;
    Ok(KeyPair { chain, key })
}

/// The CAs in a file, each checked here as a trust anchor so that a bad one is named by its file
/// (the configuration builders would name it by a Kafka setting).
fn trust_anchors(flag: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let what = setting(flag, path);
    let certs = tls::certificates(&read(flag, path)?, &what).map_err(TlsConfigError::File)?;
    let mut store = rustls::RootCertStore::empty();
    for cert in &certs {
        store.add(cert.clone()).map_err(|source| {
            TlsConfigError::File(TlsError::TrustAnchor {
                setting: what.clone(),
                source,
            })
        })?;
    }
    Ok(certs)
}

/// Kafka's `ssl.principal.mapping.rules` (its `SslPrincipalMapper`): rules separated by commas,
/// each `DEFAULT` (the name as it is) or `RULE:pattern/replacement/[LU]`. A name is given to the
/// rules in order; the first whose pattern matches the whole name gives the principal: the name
/// with every match of the pattern replaced (Java's `String.replaceAll`), then lower-cased (`L`)
/// or upper-cased (`U`). A name no rule matches is refused.
///
/// Patterns are Java regular expressions, of which [`java_regex`] reads the common part;
/// patterns using the rest are refused when the rules are read, not when a client connects.
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
        pattern: java_regex::Regex,
        replacement: java_regex::Replacement,
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
                let pattern = java_regex::Regex::new(pattern)
                    .map_err(|why| invalid(written, format!("pattern: {why}")))?;
                let replacement = java_regex::Replacement::new(replacement, pattern.groups())
                    .map_err(|why| invalid(written, format!("replacement: {why}")))?;
                let case = match flag {
                    Some('L') => Case::Lower,
                    Some('U') => Case::Upper,
                    _ => Case::Keep,
                };
                rules.push(Rule::Map {
                    pattern,
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
                    pattern,
                    replacement,
                    case,
                } => {
                    let text: Vec<char> = dn.chars().collect();
                    if !pattern.matches(&text)? {
                        continue;
                    }
                    let name = pattern.replace_all(&text, replacement)?;
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

/// The part of Java's regular expressions (`java.util.regex.Pattern`) that principal mapping rules
/// use, matched by backtracking in Java's order (so groups capture what Java's capture), with
/// each (instruction, position) tried at most once per search: time and memory are bounded by the
/// pattern's size times the name's length, whatever the pattern.
///
/// Read: literals, `.`, `^`, `$`, classes (`[a-z_]`, `[^,]`, with `\d \w \s` and their negations
/// inside or out), capturing and `(?:...)` groups, `|`, the quantifiers `* + ? {n} {n,} {n,m}`
/// greedy or lazy (`*?`), and the escapes `\t \n \r \f \a \e \xhh \uhhhh \0ooo \Q...\E` and `\`
/// before any other non-alphanumeric character. Refused: back references, lookaround, named
/// groups, inline flags, possessive quantifiers, class unions and intersections, `\b` and the
/// other boundary and property escapes.
mod java_regex {
    /// The largest program a pattern may compile to (counted repetitions are copies).
    const MAX_PROGRAM: usize = 20_000;
    /// The largest count in `{n,m}`.
    const MAX_REPEAT: u32 = 1_000;
    /// How deeply groups may nest.
    const MAX_DEPTH: usize = 100;
    /// The most (instruction, position) pairs one name's mapping may visit, over all its
    /// searches: 32 MiB of bits at most, cleared as they are used.
    const MAX_STATES: usize = 256 << 20;

    const DIGIT: &[(char, char)] = &[('0', '9')];
    const WORD: &[(char, char)] = &[('0', '9'), ('A', 'Z'), ('_', '_'), ('a', 'z')];
    const SPACE: &[(char, char)] = &[('\t', '\r'), (' ', ' ')];

    /// A compiled pattern.
    #[derive(Debug)]
    pub(super) struct Regex {
        program: Vec<Inst>,
        classes: Vec<Class>,
        groups: usize,
    }

    /// One instruction of a compiled pattern.
    #[derive(Clone, Copy, Debug)]
    enum Inst {
        Char(char),
        Any,
        Class(usize),
        Start,
        End,
        Save(usize),
        /// Try the first, then the second.
        Split(usize, usize),
        Jmp(usize),
        Match,
    }

    /// A character class: its items, or (negated) all but them.
    #[derive(Clone, Debug)]
    struct Class {
        negated: bool,
        items: Vec<Item>,
    }

    /// One member of a class.
    #[derive(Clone, Debug)]
    enum Item {
        Range(char, char),
        /// A predefined class, or (true) its complement.
        Set(&'static [(char, char)], bool),
    }

    impl Class {
        fn contains(&self, c: char) -> bool {
            let hit = self.items.iter().any(|item| match *item {
                Item::Range(lo, hi) => (lo..=hi).contains(&c),
                Item::Set(ranges, negated) => {
                    ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&c)) != negated
                }
            });
            hit != self.negated
        }
    }

    /// A parsed pattern, before compiling.
    #[derive(Debug)]
    enum Node {
        Char(char),
        Any,
        Class(Class),
        Start,
        End,
        Group(Box<Node>, Option<usize>),
        Concat(Vec<Node>),
        Alt(Vec<Node>),
        Repeat {
            node: Box<Node>,
            min: u32,
            max: Option<u32>,
            greedy: bool,
        },
    }

    /// What an escape stands for.
    enum Escaped {
        Char(char),
        Set(&'static [(char, char)], bool),
        Quoted(Vec<char>),
    }

    /// Reads a pattern into [`Node`]s, numbering capturing groups as Java does (by their `(`).
    struct Parser {
        chars: Vec<char>,
        at: usize,
        groups: usize,
    }

    impl Parser {
        fn peek(&self) -> Option<char> {
            self.chars.get(self.at).copied()
        }

        fn next(&mut self) -> Option<char> {
            let c = self.peek()?;
            self.at += 1;
            Some(c)
        }

        fn eat(&mut self, c: char) -> bool {
            let hit = self.peek() == Some(c);
            if hit {
                self.at += 1;
            }
            hit
        }

        fn alternation(&mut self, depth: usize) -> Result<Node, String> {
            if depth > MAX_DEPTH {
                return Err("groups nested too deeply".to_owned());
            }
            let mut alternatives = vec![self.concatenation(depth)?];
            while self.eat('|') {
                alternatives.push(self.concatenation(depth)?);
            }
            Ok(if alternatives.len() == 1 {
                alternatives.remove(0)
            } else {
                Node::Alt(alternatives)
            })
        }

        fn concatenation(&mut self, depth: usize) -> Result<Node, String> {
            let mut items = Vec::new();
            while let Some(c) = self.peek() {
                if c == '|' || c == ')' {
                    break;
                }
                let atom = self.atom(depth)?;
                items.push(self.quantified(atom)?);
            }
            Ok(Node::Concat(items))
        }

        fn atom(&mut self, depth: usize) -> Result<Node, String> {
            let Some(c) = self.next() else {
                return Err("unexpected end".to_owned());
            };
            Ok(match c {
                '(' => {
                    let capture = if self.eat('?') {
                        if !self.eat(':') {
                            return Err("(?...) groups other than (?:...) (lookaround, named groups, flags) are not supported".to_owned());
                        }
                        None
                    } else {
                        self.groups += 1;
                        Some(self.groups)
                    };
                    let inner = self.alternation(depth + 1)?;
                    if !self.eat(')') {
                        return Err("unclosed group".to_owned());
                    }
                    Node::Group(Box::new(inner), capture)
                }
                '[' => Node::Class(self.class()?),
                '.' => Node::Any,
                '^' => Node::Start,
                '$' => Node::End,
                '\\' => match self.escape(false)? {
                    Escaped::Char(c) => Node::Char(c),
                    Escaped::Set(ranges, negated) => Node::Class(Class {
                        negated: false,
                        items: vec![Item::Set(ranges, negated)],
                    }),
                    Escaped::Quoted(chars) => {
                        Node::Concat(chars.into_iter().map(Node::Char).collect())
                    }
                },
                '*' | '+' | '?' | '{' => return Err(format!("'{c}' with nothing to repeat")),
                c => Node::Char(c),
            })
        }

        fn quantified(&mut self, node: Node) -> Result<Node, String> {
            let (min, max) = match self.peek() {
                Some('*') => (0, None),
                Some('+') => (1, None),
                Some('?') => (0, Some(1)),
                Some('{') => {
                    self.at += 1;
                    let min = self.number()?;
                    let max = if self.eat(',') {
                        if self.peek() == Some('}') {
                            None
                        } else {
                            Some(self.number()?)
                        }
                    } else {
                        Some(min)
                    };
                    if self.peek() != Some('}') {
                        return Err("malformed {n,m}".to_owned());
                    }
                    if max.is_some_and(|max| max < min) {
                        return Err(format!("{{{min},..}}: the maximum is below the minimum"));
                    }
                    (min, max)
                }
                _ => return Ok(node),
            };
            self.at += 1;
            let greedy = !self.eat('?');
            if self.peek() == Some('+') {
                return Err("possessive quantifiers are not supported".to_owned());
            }
            Ok(Node::Repeat {
                node: Box::new(node),
                min,
                max,
                greedy,
            })
        }

        fn number(&mut self) -> Result<u32, String> {
            let start = self.at;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.at += 1;
            }
            if start == self.at {
                return Err("malformed {n,m}".to_owned());
            }
            let digits: String = self.chars[start..self.at].iter().collect();
            match digits.parse::<u32>() {
                Ok(n) if n <= MAX_REPEAT => Ok(n),
                _ => Err(format!(
                    "repetition counts above {MAX_REPEAT} are not supported"
                )),
            }
        }

        fn class(&mut self) -> Result<Class, String> {
            let negated = self.eat('^');
            let mut items = Vec::new();
            loop {
                let Some(c) = self.next() else {
                    return Err("unclosed character class".to_owned());
                };
                let lo = match c {
                    ']' if items.is_empty() => return Err("empty character class".to_owned()),
                    ']' => return Ok(Class { negated, items }),
                    '[' => return Err("nested classes and unions are not supported".to_owned()),
                    '&' if self.peek() == Some('&') => {
                        return Err("class intersections are not supported".to_owned())
                    }
                    '\\' => match self.escape(true)? {
                        Escaped::Char(c) => c,
                        Escaped::Set(ranges, negated) => {
                            items.push(Item::Set(ranges, negated));
                            continue;
                        }
                        Escaped::Quoted(_) => {
                            return Err("\\Q inside a class is not supported".to_owned())
                        }
                    },
                    c => c,
                };
                // A range, unless the '-' is the class's last character.
                if self.peek() == Some('-')
                    && self.chars.get(self.at + 1).is_some_and(|&c| c != ']')
                {
                    self.at += 1;
                    let hi = match self.next() {
                        Some('\\') => match self.escape(true)? {
                            Escaped::Char(c) => c,
                            _ => return Err("a class cannot end a range".to_owned()),
                        },
                        Some('[') => {
                            return Err("nested classes and unions are not supported".to_owned())
                        }
                        Some(c) => c,
                        None => return Err("unclosed character class".to_owned()),
                    };
                    if hi < lo {
                        return Err(format!("illegal character range {lo}-{hi}"));
                    }
                    items.push(Item::Range(lo, hi));
                } else {
                    items.push(Item::Range(lo, lo));
                }
            }
        }

        /// After a `\`.
        fn escape(&mut self, in_class: bool) -> Result<Escaped, String> {
            let Some(c) = self.next() else {
                return Err("a trailing '\\'".to_owned());
            };
            Ok(Escaped::Char(match c {
                'd' => return Ok(Escaped::Set(DIGIT, false)),
                'D' => return Ok(Escaped::Set(DIGIT, true)),
                'w' => return Ok(Escaped::Set(WORD, false)),
                'W' => return Ok(Escaped::Set(WORD, true)),
                's' => return Ok(Escaped::Set(SPACE, false)),
                'S' => return Ok(Escaped::Set(SPACE, true)),
                't' => '\t',
                'n' => '\n',
                'r' => '\r',
                'f' => '\x0c',
                'a' => '\x07',
                'e' => '\x1b',
                'x' => self.hex(2)?,
                'u' => self.hex(4)?,
                '0' => self.octal()?,
                'Q' if !in_class => {
                    let mut quoted = Vec::new();
                    while let Some(c) = self.next() {
                        if c == '\\' && self.peek() == Some('E') {
                            self.at += 1;
                            break;
                        }
                        quoted.push(c);
                    }
                    return Ok(Escaped::Quoted(quoted));
                }
                '1'..='9' => return Err("back references are not supported".to_owned()),
                c if c.is_ascii_alphanumeric() => {
                    return Err(format!("the escape \\{c} is not supported"))
                }
                c => c,
            }))
        }

        fn hex(&mut self, digits: usize) -> Result<char, String> {
            let mut value = 0u32;
            for _ in 0..digits {
                let d = self
                    .next()
                    .and_then(|c| c.to_digit(16))
                    .ok_or_else(|| "malformed hexadecimal escape".to_owned())?;
                value = value * 16 + d;
            }
            char::from_u32(value).ok_or_else(|| "an escape of a surrogate".to_owned())
        }

        /// `\0n`, `\0nn` or `\0mnn` (m at most 3), as Java reads them.
        fn octal(&mut self) -> Result<char, String> {
            let mut value = 0u32;
            let mut count = 0;
            while let Some(d) = self.peek().and_then(|c| c.to_digit(8)) {
                if count == 3 || (count == 2 && value > 0o37) {
                    break;
                }
                value = value * 8 + d;
                count += 1;
                self.at += 1;
            }
            if count == 0 {
                return Err("malformed octal escape".to_owned());
            }
            char::from_u32(value).ok_or_else(|| "malformed octal escape".to_owned())
        }
    }

    /// Turns [`Node`]s into instructions.
    struct Compiler {
        program: Vec<Inst>,
        classes: Vec<Class>,
    }

    impl Compiler {
        fn push(&mut self, inst: Inst) -> Result<usize, String> {
            if self.program.len() >= MAX_PROGRAM {
                return Err("the pattern is too large".to_owned());
            }
            self.program.push(inst);
            Ok(self.program.len() - 1)
        }

        fn emit(&mut self, node: &Node) -> Result<(), String> {
            match node {
                Node::Char(c) => {
                    self.push(Inst::Char(*c))?;
                }
                Node::Any => {
                    self.push(Inst::Any)?;
                }
                Node::Class(class) => {
                    self.classes.push(class.clone());
                    self.push(Inst::Class(self.classes.len() - 1))?;
                }
                Node::Start => {
                    self.push(Inst::Start)?;
                }
                Node::End => {
                    self.push(Inst::End)?;
                }
                Node::Group(inner, capture) => {
                    if let Some(n) = capture {
                        self.push(Inst::Save(2 * n))?;
                    }
                    self.emit(inner)?;
                    if let Some(n) = capture {
                        self.push(Inst::Save(2 * n + 1))?;
                    }
                }
                Node::Concat(items) => {
                    for item in items {
                        self.emit(item)?;
                    }
                }
                Node::Alt(alternatives) => {
                    let mut ends = Vec::new();
                    let (last, rest) = alternatives
                        .split_last()
                        .ok_or_else(|| "an empty alternation".to_owned())?;
                    for alternative in rest {
                        let split = self.push(Inst::Split(0, 0))?;
                        self.emit(alternative)?;
                        ends.push(self.push(Inst::Jmp(0))?);
                        self.program[split] = Inst::Split(split + 1, self.program.len());
                    }
                    self.emit(last)?;
                    let end = self.program.len();
                    for jmp in ends {
                        self.program[jmp] = Inst::Jmp(end);
                    }
                }
                Node::Repeat {
                    node,
                    min,
                    max,
                    greedy,
                } => {
                    for _ in 0..*min {
                        self.emit(node)?;
                    }
                    let split = |body: usize, out: usize| {
                        if *greedy {
                            Inst::Split(body, out)
                        } else {
                            Inst::Split(out, body)
                        }
                    };
                    match max {
                        None => {
                            let head = self.push(Inst::Split(0, 0))?;
                            self.emit(node)?;
                            self.push(Inst::Jmp(head))?;
                            self.program[head] = split(head + 1, self.program.len());
                        }
                        Some(max) => {
                            let mut heads = Vec::new();
                            for _ in *min..*max {
                                heads.push(self.push(Inst::Split(0, 0))?);
                                self.emit(node)?;
                            }
                            let end = self.program.len();
                            for head in heads {
                                self.program[head] = split(head + 1, end);
                            }
                        }
                    }
                }
            }
            Ok(())
        }
    }

    /// Java's line terminators, which `.` does not match and `$` may precede.
    fn is_line_terminator(c: char) -> bool {
        matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}')
    }

    /// Java's `$` without MULTILINE: at the end, or before a line terminator that ends the text.
    fn at_end(text: &[char], at: usize) -> bool {
        match &text[at.min(text.len())..] {
            [] => true,
            ['\r', '\n'] => true,
            [c] => is_line_terminator(*c),
            _ => false,
        }
    }

    /// What backtracking returns to: a thread to run, or a capture to restore.
    enum Job {
        Run(usize, usize),
        Restore(usize, Option<usize>),
    }

    /// Capture positions: group n's start and end at 2n and 2n+1.
    type Slots = Vec<Option<usize>>;

    impl Regex {
        /// Compiles `pattern`, or says why it cannot be.
        pub(super) fn new(pattern: &str) -> Result<Regex, String> {
            let mut parser = Parser {
                chars: pattern.chars().collect(),
                at: 0,
                groups: 0,
            };
            let node = parser.alternation(0)?;
            if parser.at < parser.chars.len() {
                return Err("unmatched ')'".to_owned());
            }
            let mut compiler = Compiler {
                program: Vec::new(),
                classes: Vec::new(),
            };
            compiler.push(Inst::Save(0))?;
            compiler.emit(&node)?;
            compiler.push(Inst::Save(1))?;
            compiler.push(Inst::Match)?;
            Ok(Regex {
                program: compiler.program,
                classes: compiler.classes,
                groups: parser.groups,
            })
        }

        /// The number of capturing groups.
        pub(super) fn groups(&self) -> usize {
            self.groups
        }

        /// Whether the pattern matches the whole of `text` (Java's `Matcher.matches`).
        pub(super) fn matches(&self, text: &[char]) -> Result<bool, String> {
            let mut budget = MAX_STATES;
            let mut visited = self.visited(text, 0, &mut budget)?;
            let mut slots = Vec::new();
            Ok(self.run(text, 0, 0, true, &mut visited, &mut slots))
        }

        /// `text` with every match replaced (Java's `String.replaceAll`).
        pub(super) fn replace_all(
            &self,
            text: &[char],
            replacement: &Replacement,
        ) -> Result<String, String> {
            let mut out = String::new();
            let mut copied = 0;
            let mut from = 0;
            let mut budget = MAX_STATES;
            while from <= text.len() {
                let Some(slots) = self.find(text, from, &mut budget)? else {
                    break;
                };
                let (Some(start), Some(end)) = (slots[0], slots[1]) else {
                    break;
                };
                out.extend(&text[copied..start]);
                replacement.append(text, &slots, &mut out);
                copied = end;
                // After an empty match the next search starts one further on, as Java's does.
                from = if end == start { end + 1 } else { end };
            }
            out.extend(&text[copied.min(text.len())..]);
            Ok(out)
        }

        /// The leftmost match starting at or after `from`.
        fn find(
            &self,
            text: &[char],
            from: usize,
            budget: &mut usize,
        ) -> Result<Option<Slots>, String> {
            let mut visited = self.visited(text, from, budget)?;
            let mut slots = Vec::new();
            for start in from..=text.len() {
                // What failed from an earlier start fails from this one too: `visited` is kept.
                if self.run(text, from, start, false, &mut visited, &mut slots) {
                    return Ok(Some(slots));
                }
            }
            Ok(None)
        }

        /// A clear set of the (instruction, position) pairs of a search from `from`, taken from
        /// `budget`.
        fn visited(
            &self,
            text: &[char],
            from: usize,
            budget: &mut usize,
        ) -> Result<Vec<u64>, String> {
            let states = self
                .program
                .len()
                .saturating_mul(text.len().saturating_sub(from) + 1);
            *budget = budget.checked_sub(states).ok_or_else(|| {
                format!(
                    "the rule is too costly for a name of {} characters",
                    text.len()
                )
            })?;
            Ok(vec![0; states.div_ceil(64)])
        }

        /// Backtracks from `start` (at or after `from`, where `visited` begins); on success
        /// `slots` holds the captures.
        fn run(
            &self,
            text: &[char],
            from: usize,
            start: usize,
            whole: bool,
            visited: &mut [u64],
            slots: &mut Slots,
        ) -> bool {
            slots.clear();
            slots.resize(2 * (self.groups + 1), None);
            let width = text.len() - from + 1;
            let mut jobs = vec![Job::Run(0, start)];
            while let Some(job) = jobs.pop() {
                let (mut pc, mut at) = match job {
                    Job::Run(pc, at) => (pc, at),
                    Job::Restore(slot, old) => {
                        slots[slot] = old;
                        continue;
                    }
                };
                loop {
                    let state = pc * width + (at - from);
                    let (word, bit) = (state / 64, 1u64 << (state % 64));
                    if visited[word] & bit != 0 {
                        break;
                    }
                    visited[word] |= bit;
                    match self.program[pc] {
                        Inst::Char(c) if text.get(at) == Some(&c) => {
                            pc += 1;
                            at += 1;
                        }
                        Inst::Any if text.get(at).is_some_and(|&c| !is_line_terminator(c)) => {
                            pc += 1;
                            at += 1;
                        }
                        Inst::Class(i)
                            if text.get(at).is_some_and(|&c| self.classes[i].contains(c)) =>
                        {
                            pc += 1;
                            at += 1;
                        }
                        Inst::Start if at == 0 => pc += 1,
                        Inst::End if at_end(text, at) => pc += 1,
                        Inst::Save(slot) => {
                            jobs.push(Job::Restore(slot, slots[slot]));
                            slots[slot] = Some(at);
                            pc += 1;
                        }
                        Inst::Split(first, second) => {
                            jobs.push(Job::Run(second, at));
                            pc = first;
                        }
                        Inst::Jmp(to) => pc = to,
                        Inst::Match if !whole || at == text.len() => return true,
                        _ => break,
                    }
                }
            }
            false
        }
    }

    /// A replacement as Java's `Matcher.appendReplacement` reads it: `$n` is group n, `\c` is
    /// `c`; then as Kafka's rules write it: a `$n` whose first digit names no group is literal
    /// text (Kafka escapes those before Java sees them).
    #[derive(Debug)]
    pub(super) struct Replacement(Vec<Piece>);

    /// Text, or a group's capture.
    #[derive(Debug)]
    enum Piece {
        Text(String),
        Group(usize),
    }

    impl Replacement {
        /// Reads `text` for a pattern with `groups` capturing groups.
        pub(super) fn new(text: &str, groups: usize) -> Result<Replacement, String> {
            let mut pieces = Vec::new();
            let mut literal = String::new();
            let mut chars = text.chars().peekable();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => literal.push(chars.next().ok_or_else(|| "a trailing '\\'".to_owned())?),
                    '$' => {
                        let Some(first) = chars.peek().and_then(|c| c.to_digit(10)) else {
                            return Err(match chars.peek() {
                                Some('{') => "named groups (${name}) are not supported".to_owned(),
                                _ => "'$' must be followed by a group number (write \\$ for a '$')"
                                    .to_owned(),
                            });
                        };
                        let first = first as usize;
                        if first > groups && first != 0 && groups > 0 {
                            // Kafka's escapeLiteralBackReferences: the `$` is text.
                            literal.push('$');
                            continue;
                        }
                        if first > groups {
                            return Err(format!(
                                "${first} names a group the pattern does not have ({groups})"
                            ));
                        }
                        chars.next();
                        // Java takes further digits while they still name a group.
                        let mut group = first;
                        while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                            let longer = group * 10 + d as usize;
                            if longer > groups {
                                break;
                            }
                            group = longer;
                            chars.next();
                        }
                        if !literal.is_empty() {
                            pieces.push(Piece::Text(std::mem::take(&mut literal)));
                        }
                        pieces.push(Piece::Group(group));
                    }
                    c => literal.push(c),
                }
            }
            if !literal.is_empty() {
                pieces.push(Piece::Text(literal));
            }
            Ok(Replacement(pieces))
        }

        fn append(&self, text: &[char], slots: &[Option<usize>], out: &mut String) {
            for piece in &self.0 {
                match piece {
                    Piece::Text(s) => out.push_str(s),
                    Piece::Group(n) => {
                        // A group that took no part in the match adds nothing, as in Java.
                        if let (Some(Some(start)), Some(Some(end))) =
                            (slots.get(2 * n), slots.get(2 * n + 1))
                        {
                            out.extend(&text[*start..*end]);
                        }
                    }
                }
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn matches(pattern: &str, text: &str) -> bool {
            let chars: Vec<char> = text.chars().collect();
            Regex::new(pattern).unwrap().matches(&chars).unwrap()
        }

        fn replace(pattern: &str, replacement: &str, text: &str) -> String {
            let regex = Regex::new(pattern).unwrap();
            let replacement = Replacement::new(replacement, regex.groups()).unwrap();
            let chars: Vec<char> = text.chars().collect();
            regex.replace_all(&chars, &replacement).unwrap()
        }

        #[test]
        fn matching_as_java_does() {
            assert!(matches("abc", "abc"));
            assert!(!matches("abc", "abcd"));
            assert!(matches("a|ab", "ab"));
            assert!(matches("^CN=(.*?),OU=(.*?)$", "CN=a,OU=b"));
            assert!(matches("[^,]+,[a-z0-9_-]{2,3}", "x y,a-1"));
            assert!(!matches("[^,]+,[a-z]{2,3}", "x,abcd"));
            assert!(matches("\\d+\\s\\w*\\W", "42 abc!"));
            assert!(matches("[\\d.]+", "1.2.3"));
            assert!(matches("(?:ab)*c?", "abab"));
            assert!(matches("a.c", "a\u{e9}c"));
            assert!(!matches("a.c", "a\nc"));
            // `$` may precede a final line terminator, but `matches` needs all of the text.
            assert!(!matches("abc$", "abc\n"));
            assert!(matches("\\Q.*\\E", ".*"));
            assert!(!matches("\\Q.*\\E", "ab"));
            assert!(matches("\\x41\\u0042\\0103\\.", "ABC."));
            assert!(matches("(a*)*b", "aaab"));
            // Catastrophic patterns for a plain backtracker end at once here.
            let long = "a".repeat(5000);
            assert!(!matches("(a*)*b", &long));
            assert!(!matches("(a|aa)*c", &long));
        }

        #[test]
        fn replacing_as_java_does() {
            assert_eq!(replace("^CN=(.*?),.*$", "$1", "CN=alice,OU=eng"), "alice");
            assert_eq!(replace("a", "b", "banana"), "bbnbnb");
            assert_eq!(replace("x*", "-", "abc"), "-a-b-c-");
            assert_eq!(replace("(a)(b)?", "[$2$1]", "ac"), "[a]c");
            assert_eq!(replace("(.)", "$11", "x"), "x1");
            assert_eq!(replace("(.)", "\\$1", "x"), "$1");
            // Kafka leaves `$n` naming no group as it is.
            assert_eq!(replace("(.)", "$2", "x"), "$2");
            assert_eq!(replace("ab", "$0$0", "ab"), "abab");
            assert_eq!(replace("c$", "X", "abc\n"), "abX\n");
        }

        #[test]
        fn unsupported_or_malformed_patterns_are_refused() {
            for bad in [
                "(a", "a)", "[a", "[]", "[b-a]", "*a", "a**", "a{2", "a{x}", "a{3,2}", "a{5000}",
                "(?=a)", "(?<n>a)", "(?i)a", "a*+", "\\1", "\\b", "\\p{L}", "[a[b]]", "[a&&b]",
                "\\", "\\x4", "\\uD800",
            ] {
                assert!(Regex::new(bad).is_err(), "{bad}");
            }
            assert!(Regex::new(&"(".repeat(200)).is_err());
            assert!(Regex::new("(a{1000}){1000}").is_err());
            for bad in ["$", "$x", "${name}", "\\", "$1"] {
                assert!(Replacement::new(bad, 0).is_err(), "{bad}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

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
        server: ClientTls,
        client: UpstreamTls,
        name: &str,
    ) -> (io::Result<Principal>, io::Result<()>) {
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
            e.starts_with(&format!("--tls-cert={}: cannot read", missing.display())),
            "{e}"
        );
        let e = server(&junk, &pki.server_key, None, ClientAuth::None);
        assert!(
            e.starts_with(&format!(
                "--tls-cert={}: no PEM certificate",
                junk.display()
            )),
            "{e}"
        );
        let e = server(&pki.server_cert, &junk, None, ClientAuth::None);
        assert!(
            e.starts_with(&format!("--tls-key={}: no usable", junk.display())),
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
            e.starts_with(&format!("--tls-client-ca={}", junk.display())),
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
            e.starts_with(&format!("--upstream-ca={}: cannot read", missing.display())),
            "{e}"
        );
        let e = UpstreamTls::from_files(&pki.ca, Some((pki.client_cert.as_path(), junk.as_path())))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("--upstream-key={}", junk.display())),
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
