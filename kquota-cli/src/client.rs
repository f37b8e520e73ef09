//! The admin client: one blocking connection to a broker, for the quota APIs.
//!
//! It speaks the Kafka protocol over one `std::net::TcpStream` (TLS for SSL and SASL_SSL) to the
//! first bootstrap server that answers: ApiVersions (18) to negotiate, SaslHandshake (17) and
//! SaslAuthenticate (36) on SASL protocols, then DescribeClientQuotas (48) and AlterClientQuotas (49)
//! at the newest version both sides support. It works against `kquotad` and against Apache Kafka, so
//! it sends only what Kafka understands: list filters with EXACT / DEFAULT / SPECIFIED components
//! (prefix matching is left to the caller) and keys spelled `type` or `type:unit`.

use std::fmt;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, ApiVersionsRequest, ApiVersionsResponse, DescribeClientQuotasRequest,
    RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

use crate::config::{ClientConfig, SaslLogin};
use kquota::ComponentMatch;
use kquota::EntityType;
use kquota::{AlterResult, Alteration, EntityPart};
use kquota::{ApiError, ErrorCode};
use kquota_wire::SaslMechanism;
use kquota_wire::ScramClient;

/// The largest response this client reads (Kafka's default `socket.request.max.bytes`).
const MAX_RESPONSE_BYTES: usize = 100 * 1024 * 1024;

/// Splits a bootstrap list (`host:port[,host:port...]`, as Kafka's `bootstrap.servers`) into its
/// servers, or says which entry is not `HOST:PORT` with a port from 1 to 65535. Blank entries are
/// skipped, as Kafka skips them; an IPv6 host is written in brackets (`[::1]:9092`).
pub fn parse_bootstrap(list: &str) -> Result<Vec<&str>, BootstrapError> {
    let servers: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if servers.is_empty() {
        return Err(BootstrapError::Empty {
            list: list.to_owned(),
        });
    }
    for server in &servers {
        let valid = server.rsplit_once(':').is_some_and(|(host, port)| {
            let host = host
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(host);
            !host.is_empty()
                && !host.contains(['[', ']'])
                && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !valid {
            return Err(BootstrapError::InvalidServer {
                server: (*server).to_owned(),
            });
        }
    }
    Ok(servers)
}

/// A bootstrap list that names no usable server.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BootstrapError {
    /// The list has no server, only blanks and commas.
    #[non_exhaustive]
    Empty {
        /// The list as given.
        list: String,
    },
    /// An entry is not `HOST:PORT` with a port from 1 to 65535.
    #[non_exhaustive]
    InvalidServer {
        /// The entry, trimmed.
        server: String,
    },
}

impl fmt::Display for BootstrapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BootstrapError::Empty { list } => write!(
                f,
                "no server in bootstrap list '{list}'; write HOST:PORT, e.g. localhost:9092"
            ),
            BootstrapError::InvalidServer { server } => write!(
                f,
                "invalid server '{server}' in bootstrap list: write HOST:PORT with a port from 1 to 65535, e.g. localhost:9092"
            ),
        }
    }
}

impl std::error::Error for BootstrapError {}

/// Whether `name` may name an ip entity in a request: an IP address, or a host name that resolves,
/// which is what Kafka's own tools accept (`DynamicConfig.Ip.isValidIpEntity`). The server decides
/// the rest: Apache Kafka takes resolvable host names, `kquotad` only addresses.
pub fn ip_or_resolvable_host(name: &str) -> bool {
    name.parse::<std::net::IpAddr>().is_ok()
        || (name, 0u16)
            .to_socket_addrs()
            .is_ok_and(|mut addrs| addrs.next().is_some())
}

/// Why an admin call failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// The bootstrap list is not a list of `HOST:PORT`.
    Bootstrap(BootstrapError),
    /// No bootstrap server could be reached; one message per server tried.
    Connect(Vec<String>),
    /// The connection failed or timed out after it was established.
    Io(std::io::Error),
    /// The server sent something this client cannot decode.
    Protocol(String),
    /// The server does not serve an API this call needs.
    Unsupported(String),
    /// The server answered the request as a whole with an error.
    Server(ApiError),
    /// The TLS handshake failed (an untrusted or expired certificate, a wrong host name, a
    /// server that does not speak TLS).
    Tls(String),
    /// SASL authentication failed.
    Authentication(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Bootstrap(e) => e.fmt(f),
            ClientError::Connect(tried) => {
                write!(f, "could not connect: {}", tried.join("; "))
            }
            ClientError::Io(e) => write!(f, "connection failed: {e}"),
            ClientError::Protocol(m) => write!(f, "protocol error: {m}"),
            ClientError::Unsupported(m) => f.write_str(m),
            ClientError::Server(e) => write!(
                f,
                "{}: {}",
                error_name(e.code),
                crate::quote::message_text(&e.message)
            ),
            ClientError::Tls(m) => write!(f, "TLS handshake failed: {m}"),
            ClientError::Authentication(m) => write!(f, "authentication failed: {m}"),
        }
    }
}

// No `source`: the message already includes the cause's, and reporters that walk the chain would
// print it twice.
impl std::error::Error for ClientError {}

impl From<std::io::Error> for ClientError {
    fn from(e: std::io::Error) -> Self {
        ClientError::Io(e)
    }
}

/// Kafka's name for an error code (`POLICY_VIOLATION`, `CLUSTER_AUTHORIZATION_FAILED`), or
/// `UNKNOWN(<code>)`.
pub fn error_name(code: ErrorCode) -> String {
    match kafka_protocol::ResponseError::try_from_code(code.0) {
        None => "NONE".to_owned(),
        Some(kafka_protocol::ResponseError::Unknown(c)) => format!("UNKNOWN({c})"),
        Some(e) => {
            // The crate names variants in CamelCase; Kafka's names are SCREAMING_SNAKE_CASE.
            let camel = e.to_string();
            let mut out = String::with_capacity(camel.len() + 8);
            for (i, ch) in camel.chars().enumerate() {
                if ch.is_ascii_uppercase() && i > 0 {
                    out.push('_');
                }
                out.push(ch.to_ascii_uppercase());
            }
            out
        }
    }
}

/// One configured entity as DescribeClientQuotas returns it.
#[derive(Clone, Debug, PartialEq)]
pub struct QuotaEntry {
    /// The entity's components as sent: `(type, name)`, `None` for the default.
    pub entity: Vec<(String, Option<String>)>,
    /// Its `(key, value)` pairs in the order the server sent them.
    pub values: Vec<(String, f64)>,
}

/// The connection under the protocol: plain TCP or TLS.
enum Transport {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::Plain(_) => "Plain",
            Transport::Tls(_) => "Tls",
        })
    }
}

impl Read for Transport {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Transport::Plain(s) => s.read(buf),
            Transport::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Transport {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Transport::Plain(s) => s.write(buf),
            Transport::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Transport::Plain(s) => s.flush(),
            Transport::Tls(s) => s.flush(),
        }
    }
}

/// Runs the TLS handshake to completion, so that certificate problems surface here.
fn tls_handshake(
    server: &str,
    config: &std::sync::Arc<rustls::ClientConfig>,
    mut tcp: TcpStream,
) -> Result<Transport, ClientError> {
    let host = server
        .rsplit_once(':')
        .map_or(server, |(h, _)| h)
        .trim_matches(['[', ']']);
    let name = rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|e| ClientError::Tls(format!("'{host}' is not a valid server name: {e}")))?;
    let mut conn = rustls::ClientConnection::new(std::sync::Arc::clone(config), name)
        .map_err(|e| ClientError::Tls(e.to_string()))?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                ClientError::Tls(
                    "the server closed the connection (is it a TLS listener?)".to_owned(),
                )
            } else {
                ClientError::Tls(e.to_string())
            }
        })?;
    }
    Ok(Transport::Tls(Box::new(rustls::StreamOwned::new(
        conn, tcp,
    ))))
}

/// A connection to one broker, with the API versions negotiated on it.
#[derive(Debug)]
pub struct AdminClient {
    stream: Transport,
    server: String,
    client_id: String,
    correlation: i32,
    apis: Vec<(i16, i16, i16)>,
}

impl AdminClient {
    /// Connects to the first server of `bootstrap` (`host:port[,host:port...]`) that accepts a
    /// connection and answers ApiVersions.
    pub fn connect(bootstrap: &str, config: &ClientConfig) -> Result<AdminClient, ClientError> {
        let servers = parse_bootstrap(bootstrap).map_err(ClientError::Bootstrap)?;
        let mut tried = Vec::new();
        for server in servers {
            match AdminClient::connect_one(server, config) {
                Ok(client) => return Ok(client),
                Err(e) => tried.push(format!("{server}: {e}")),
            }
        }
        Err(ClientError::Connect(tried))
    }

    fn connect_one(server: &str, config: &ClientConfig) -> Result<AdminClient, ClientError> {
        let addrs: Vec<_> = server.to_socket_addrs()?.collect();
        let mut last = None;
        let mut stream = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, config.request_timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let stream = match (stream, last) {
            (Some(s), _) => s,
            (None, Some(e)) => return Err(e.into()),
            (None, None) => {
                return Err(ClientError::Protocol(format!(
                    "{server} resolves to no address"
                )))
            }
        };
        stream.set_read_timeout(Some(config.request_timeout))?;
        stream.set_write_timeout(Some(config.request_timeout))?;
        let _ = stream.set_nodelay(true);
        let stream = match &config.tls {
            Some(tls) => tls_handshake(server, tls, stream)?,
            None => Transport::Plain(stream),
        };
        let mut client = AdminClient {
            stream,
            server: server.to_owned(),
            client_id: config.client_id.clone(),
            correlation: 0,
            apis: Vec::new(),
        };
        client.negotiate()?;
        if let Some(login) = &config.sasl {
            client.authenticate(login)?;
        }
        Ok(client)
    }

    /// SaslHandshake v1, then SaslAuthenticate with the configured mechanism.
    fn authenticate(&mut self, login: &SaslLogin) -> Result<(), ClientError> {
        let handshake = self.version::<SaslHandshakeRequest>("SaslHandshake")?;
        let response = self.call(
            &SaslHandshakeRequest::default()
                .with_mechanism(StrBytes::from_static_str(login.mechanism.name())),
            handshake,
        )?;
        if response.error_code != 0 {
            let offered: Vec<String> = response.mechanisms.iter().map(|m| m.to_string()).collect();
            return Err(ClientError::Authentication(format!(
                "{}: {} (the server offers {})",
                error_name(ErrorCode(response.error_code)),
                login.mechanism,
                if offered.is_empty() {
                    "none".to_owned()
                } else {
                    offered.join(", ")
                }
            )));
        }
        let version = self.version::<SaslAuthenticateRequest>("SaslAuthenticate")?;
        match login.mechanism {
            SaslMechanism::Plain => {
                let token = format!("\0{}\0{}", login.username, login.password);
                self.sasl_step(version, token.into_bytes())?;
            }
            SaslMechanism::Scram(m) => {
                let fail =
                    |e: kquota_wire::ScramError| ClientError::Authentication(format!("{m}: {e}"));
                let mut scram =
                    ScramClient::new(m, &login.username, &login.password).map_err(fail)?;
                let server_first = self.sasl_step(version, scram.client_first())?;
                let client_final = scram.client_final(&server_first).map_err(fail)?;
                let server_final = self.sasl_step(version, client_final)?;
                scram.verify_server_final(&server_final).map_err(fail)?;
            }
        }
        Ok(())
    }

    /// One SaslAuthenticate round trip; an error code fails the authentication.
    fn sasl_step(&mut self, version: i16, token: Vec<u8>) -> Result<Bytes, ClientError> {
        let response = self.call(
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
            version,
        )?;
        if response.error_code != 0 {
            return Err(ClientError::Authentication(format!(
                "{}: {}",
                error_name(ErrorCode(response.error_code)),
                response
                    .error_message
                    .map(|m| m.to_string())
                    .unwrap_or_default()
            )));
        }
        Ok(response.auth_bytes)
    }

    /// The server this client is connected to, as given.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// ApiVersions v3, falling back to v0 if the server does not support it (as Kafka's clients do).
    fn negotiate(&mut self) -> Result<(), ClientError> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("kquota-admin"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let mut response: ApiVersionsResponse = self.call_lenient(&request, 3)?;
        if response.error_code == ErrorCode::UNSUPPORTED_VERSION.0 {
            response = self.call_lenient(&ApiVersionsRequest::default(), 0)?;
        }
        if response.error_code != 0 {
            return Err(ClientError::Server(ApiError::new(
                ErrorCode(response.error_code),
                "ApiVersions failed",
            )));
        }
        self.apis = response
            .api_keys
            .iter()
            .map(|a| (a.api_key, a.min_version, a.max_version))
            .collect();
        Ok(())
    }

    /// The newest version of `R` that both the server and this client support.
    fn version<R: Request>(&self, name: &str) -> Result<i16, ClientError> {
        let (lo, hi) = (R::VERSIONS.min, R::VERSIONS.max);
        let found = self.apis.iter().find(|(key, _, _)| *key == R::KEY);
        match found {
            Some(&(_, min, max)) if max.min(hi) >= min.max(lo) => Ok(max.min(hi)),
            Some(&(_, min, max)) => Err(ClientError::Unsupported(format!(
                "{} serves {name} (API key {}) at versions {min}-{max}, this client at {lo}-{hi}",
                self.server,
                R::KEY
            ))),
            None => Err(ClientError::Unsupported(format!(
                "{} does not serve {name} (API key {})",
                self.server,
                R::KEY
            ))),
        }
    }

    /// Lists the configured entities that match `filter`: one component per entity type, `strict`
    /// to require exactly those types. [`ComponentMatch::Prefix`] is sent as "any name" (Kafka has no
    /// prefix match), so the caller filters the result.
    pub fn describe_client_quotas(
        &mut self,
        filter: &[(EntityType, ComponentMatch)],
        strict: bool,
    ) -> Result<Vec<QuotaEntry>, ClientError> {
        let version = self.version::<DescribeClientQuotasRequest>("DescribeClientQuotas")?;
        let components = filter
            .iter()
            .map(|(ty, m)| {
                let (match_type, name) = match m {
                    ComponentMatch::Exact(name) => (0, Some(StrBytes::from_string(name.clone()))),
                    ComponentMatch::Default => (1, None),
                    ComponentMatch::Prefix(_) | ComponentMatch::Any => (2, None),
                };
                ComponentData::default()
                    .with_entity_type(StrBytes::from_static_str(ty.as_str()))
                    .with_match_type(match_type)
                    .with_match(name)
            })
            .collect();
        let request = DescribeClientQuotasRequest::default()
            .with_components(components)
            .with_strict(strict);
        let response = self.call(&request, version)?;
        if response.error_code != 0 {
            return Err(ClientError::Server(ApiError::new(
                ErrorCode(response.error_code),
                response
                    .error_message
                    .map(|m| m.to_string())
                    .unwrap_or_default(),
            )));
        }
        Ok(response
            .entries
            .unwrap_or_default()
            .into_iter()
            .map(|e| QuotaEntry {
                entity: e
                    .entity
                    .into_iter()
                    .map(|c| {
                        (
                            c.entity_type.to_string(),
                            c.entity_name.map(|n| n.to_string()),
                        )
                    })
                    .collect(),
                values: e
                    .values
                    .into_iter()
                    .map(|v| (v.key.to_string(), v.value))
                    .collect(),
            })
            .collect())
    }

    /// Alters quotas: one result per entity the server answered for (Kafka answers per distinct
    /// entity; match results by entity, not by position).
    pub fn alter_client_quotas(
        &mut self,
        batch: &[Alteration],
        validate_only: bool,
    ) -> Result<Vec<AlterResult>, ClientError> {
        let version = self.version::<AlterClientQuotasRequest>("AlterClientQuotas")?;
        let entries = batch
            .iter()
            .map(|a| {
                EntryData::default()
                    .with_entity(
                        a.entity
                            .iter()
                            .map(|p| {
                                EntityData::default()
                                    .with_entity_type(StrBytes::from_string(p.entity_type.clone()))
                                    .with_entity_name(p.name.clone().map(StrBytes::from_string))
                            })
                            .collect(),
                    )
                    .with_ops(
                        a.ops
                            .iter()
                            .map(|op| {
                                OpData::default()
                                    .with_key(StrBytes::from_string(op.key.clone()))
                                    .with_value(op.value.unwrap_or(0.0))
                                    .with_remove(op.value.is_none())
                            })
                            .collect(),
                    )
            })
            .collect();
        let request = AlterClientQuotasRequest::default()
            .with_entries(entries)
            .with_validate_only(validate_only);
        let response = self.call(&request, version)?;
        Ok(response
            .entries
            .into_iter()
            .map(|e| AlterResult {
                entity: e
                    .entity
                    .into_iter()
                    .map(|c| EntityPart {
                        entity_type: c.entity_type.to_string(),
                        name: c.entity_name.map(|n| n.to_string()),
                    })
                    .collect(),
                error: (e.error_code != 0).then(|| {
                    ApiError::new(
                        ErrorCode(e.error_code),
                        e.error_message.map(|m| m.to_string()).unwrap_or_default(),
                    )
                }),
            })
            .collect())
    }

    /// Sends `request` and decodes the answer at `version`.
    fn call<R: Request>(&mut self, request: &R, version: i16) -> Result<R::Response, ClientError> {
        let mut body = self.round_trip(request, version)?;
        R::Response::decode(&mut body, version).map_err(|e| {
            ClientError::Protocol(format!(
                "cannot decode the response to API key {} v{version}: {e}",
                R::KEY
            ))
        })
    }

    /// Like [`AdminClient::call`] for ApiVersions, whose error answer uses the v0 layout.
    fn call_lenient(
        &mut self,
        request: &ApiVersionsRequest,
        version: i16,
    ) -> Result<ApiVersionsResponse, ClientError> {
        let body = self.round_trip(request, version)?;
        match ApiVersionsResponse::decode(&mut body.clone(), version) {
            Ok(r) => Ok(r),
            Err(e) => ApiVersionsResponse::decode(&mut body.clone(), 0).map_err(|_| {
                ClientError::Protocol(format!("cannot decode the ApiVersions response: {e}"))
            }),
        }
    }

    /// Writes one request frame and reads its response, returning the body after the header.
    fn round_trip<R: Request>(&mut self, request: &R, version: i16) -> Result<Bytes, ClientError> {
        self.correlation = self.correlation.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_string(self.client_id.clone())));
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[0; 4]);
        header
            .encode(&mut buf, R::header_version(version))
            .map_err(|e| ClientError::Protocol(format!("cannot encode the header: {e}")))?;
        request
            .encode(&mut buf, version)
            .map_err(|e| ClientError::Protocol(format!("cannot encode the request: {e}")))?;
        let len = (buf.len() - 4) as u32;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        self.stream.write_all(&buf)?;

        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).map_err(closed)?;
        let size = u32::from_be_bytes(size) as usize;
        if size > MAX_RESPONSE_BYTES {
            return Err(ClientError::Protocol(format!(
                "response of {size} bytes is over the {MAX_RESPONSE_BYTES}-byte limit"
            )));
        }
        let mut body = vec![0u8; size];
        self.stream.read_exact(&mut body).map_err(closed)?;
        let mut body = Bytes::from(body);
        let header = ResponseHeader::decode(&mut body, R::Response::header_version(version))
            .map_err(|e| ClientError::Protocol(format!("bad response header: {e}")))?;
        if header.correlation_id != self.correlation {
            return Err(ClientError::Protocol(format!(
                "response correlation id {} does not match request {}",
                header.correlation_id, self.correlation
            )));
        }
        Ok(body)
    }
}

/// A closed connection reads as "the server closed the connection", which is how Kafka refuses a
/// request it cannot parse.
fn closed(e: std::io::Error) -> ClientError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        ClientError::Io(std::io::Error::new(
            e.kind(),
            "the server closed the connection",
        ))
    } else {
        ClientError::Io(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_names_are_kafkas() {
        assert_eq!(error_name(ErrorCode(44)), "POLICY_VIOLATION");
        assert_eq!(error_name(ErrorCode(42)), "INVALID_REQUEST");
        assert_eq!(error_name(ErrorCode(-1)), "UNKNOWN_SERVER_ERROR");
        assert_eq!(error_name(ErrorCode(31)), "CLUSTER_AUTHORIZATION_FAILED");
        assert_eq!(error_name(ErrorCode(0)), "NONE");
        assert_eq!(error_name(ErrorCode(9999)), "UNKNOWN(9999)");
    }

    #[test]
    fn bootstrap_lists_are_host_port_pairs() {
        assert_eq!(
            parse_bootstrap(" a:9092, ,[::1]:19092,10.0.0.1:1 ,").unwrap(),
            ["a:9092", "[::1]:19092", "10.0.0.1:1"]
        );
        for bad in [
            "localhost",
            "127.0.0.1:99999",
            "h:0",
            ":9092",
            "h:",
            "h:x",
            "[]:9092",
            "a]:1",
        ] {
            let e = parse_bootstrap(bad).unwrap_err();
            assert_eq!(
                e,
                BootstrapError::InvalidServer {
                    server: bad.to_owned()
                }
            );
            let e = e.to_string();
            assert!(
                e.starts_with(&format!("invalid server '{bad}'")),
                "{bad}: {e}"
            );
        }
        for empty in ["", " , ,"] {
            assert!(parse_bootstrap(empty)
                .unwrap_err()
                .to_string()
                .starts_with("no server"));
        }
    }
}
