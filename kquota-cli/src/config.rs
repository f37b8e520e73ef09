//! The admin client's settings, read from a Kafka admin-client properties file (`--command-config`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::jaas::{parse_jaas, JaasError, PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE};
use kquota_wire::properties::PropertiesError;
use kquota_wire::tls::{self, KeyPair, TlsError};
use kquota_wire::{SaslMechanism, SecurityProtocol};

/// Keys this client understands; any other key is reported as a warning, never silently dropped.
// A slice, not an array: a key added later does not change the type.
pub const KNOWN_KEYS: &[&str] = &[
    "bootstrap.servers",
    "client.id",
    "request.timeout.ms",
    "security.protocol",
    "sasl.mechanism",
    "sasl.jaas.config",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.endpoint.identification.algorithm",
    "ssl.protocol",
];

/// What a SASL client authenticates with (`sasl.mechanism` and `sasl.jaas.config`).
#[derive(Clone, PartialEq, Eq)]
pub struct SaslLogin {
    /// The mechanism.
    pub mechanism: SaslMechanism,
    /// The user name.
    pub username: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for SaslLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslLogin")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// Settings of an [`AdminClient`](crate::AdminClient).
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The `client.id` sent in every request header.
    pub client_id: String,
    /// How long to wait for a connection or a response (`request.timeout.ms`, default 30 s).
    pub request_timeout: Duration,
    /// `bootstrap.servers` from the file, used when no `--bootstrap-server` is given.
    pub bootstrap_servers: Option<String>,
    /// `security.protocol` (default PLAINTEXT).
    pub security_protocol: SecurityProtocol,
    /// The SASL login, for SASL_PLAINTEXT and SASL_SSL.
    pub sasl: Option<SaslLogin>,
    /// The TLS configuration, for SSL and SASL_SSL.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            client_id: "kquota-admin".to_owned(),
            request_timeout: Duration::from_millis(30_000),
            bootstrap_servers: None,
            security_protocol: SecurityProtocol::Plaintext,
            sasl: None,
            tls: None,
        }
    }
}

/// Admin-client settings that cannot be used: which key, what value and why. The message (its
/// `Display`) is one line; no variant quotes a password.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConfigError {
    /// The `--command-config` file cannot be read.
    #[non_exhaustive]
    Read {
        /// The file.
        path: PathBuf,
        /// Why it cannot be read.
        source: std::io::Error,
    },
    /// The `--command-config` file has an error.
    #[non_exhaustive]
    InFile {
        /// The file.
        path: PathBuf,
        /// The error in it.
        error: Box<ConfigError>,
    },
    /// The text is not Java properties (a malformed `\uXXXX` escape, on a line it names).
    Syntax(PropertiesError),
    /// A key has a value this client does not accept.
    #[non_exhaustive]
    InvalidValue {
        /// The key.
        key: String,
        /// Its value, trimmed.
        value: String,
        /// What is wrong with it, and what to write instead.
        reason: String,
    },
    /// `request.timeout.ms` is not a positive whole number.
    #[non_exhaustive]
    InvalidTimeout {
        /// Its value, trimmed.
        value: String,
    },
    /// The security protocol needs a key that is not set.
    #[non_exhaustive]
    Missing {
        /// `security.protocol`.
        protocol: SecurityProtocol,
        /// The key it needs.
        key: &'static str,
        /// What the key takes, or an example, as the message continues after the key.
        hint: String,
    },
    /// A key is set to something this client cannot use (its value, a password, is not quoted).
    #[non_exhaustive]
    Unsupported {
        /// The key.
        key: &'static str,
        /// Why, and what to do instead.
        reason: &'static str,
    },
    /// `sasl.jaas.config` cannot be parsed.
    Jaas(JaasError),
    /// `sasl.jaas.config` names another login module than `sasl.mechanism` needs.
    #[non_exhaustive]
    WrongLoginModule {
        /// `sasl.mechanism`.
        mechanism: SaslMechanism,
        /// The login module it needs.
        expected: &'static str,
        /// The login module configured.
        found: String,
    },
    /// `sasl.jaas.config` lacks an option (or has it empty).
    #[non_exhaustive]
    MissingJaasOption {
        /// `username` or `password`.
        option: &'static str,
    },
    /// Only one of a client certificate chain and its private key is given.
    IncompleteKeystore,
    /// A certificate or key (`ssl.truststore.*`, `ssl.keystore.*`) cannot be used; the error
    /// names the key.
    Tls(TlsError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read { path, source } => {
                write!(f, "cannot read --command-config {}: {source}", path.display())
            }
            ConfigError::InFile { path, error } => {
                write!(f, "--command-config {}: {error}", path.display())
            }
            ConfigError::Syntax(e) => e.fmt(f),
            ConfigError::Tls(e) => e.fmt(f),
            ConfigError::InvalidValue { key, value, reason } => {
                write!(f, "{key}={value}: {reason}")
            }
            ConfigError::InvalidTimeout { value } => write!(
                f,
                "request.timeout.ms={value} is not a positive whole number of milliseconds; write e.g. request.timeout.ms=30000"
            ),
            ConfigError::Missing {
                protocol,
                key,
                hint,
            } => write!(f, "security.protocol={protocol} needs {key}{hint}"),
            ConfigError::Unsupported { key, reason } => write!(f, "{key}: {reason}"),
            ConfigError::Jaas(e) => write!(f, "sasl.jaas.config: {e}"),
            ConfigError::WrongLoginModule {
                mechanism,
                expected,
                found,
            } => write!(
                f,
                "sasl.jaas.config: sasl.mechanism={mechanism} needs the login module {expected}, not {found}"
            ),
            ConfigError::MissingJaasOption { option } => {
                write!(f, "sasl.jaas.config: missing {option}=\"...\"")
            }
            ConfigError::IncompleteKeystore => {
                f.write_str("ssl.keystore.certificate.chain and ssl.keystore.key go together")
            }
        }
    }
}

// No `source`: every message already includes its cause's, which a reporter walking the chain
// would print twice.
impl std::error::Error for ConfigError {}

/// An invalid value of `key`.
fn invalid(key: &str, value: &str, reason: impl fmt::Display) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.to_owned(),
        value: value.to_owned(),
        reason: reason.to_string(),
    }
}

impl ClientConfig {
    /// Reads a `--command-config` file. Returns the settings and one warning per key that is not
    /// understood (each naming the file), or an error naming the file.
    pub fn from_file(path: &Path) -> Result<(ClientConfig, Vec<String>), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let (config, warnings) =
            ClientConfig::from_properties(&text).map_err(|e| ConfigError::InFile {
                path: path.to_owned(),
                error: Box::new(e),
            })?;
        let warnings = warnings
            .into_iter()
            .map(|w| format!("--command-config {}: {w}", path.display()))
            .collect();
        Ok((config, warnings))
    }

    /// Reads settings from properties text, as Kafka's admin client reads them: Java's syntax (see
    /// [`kquota_wire::properties`]; a key alone has the empty value, a later line wins) and values trimmed,
    /// as Kafka's `ConfigDef` trims them. Returns the settings and one warning per key that is not
    /// understood; a malformed `\uXXXX` escape (naming its line), an unsupported
    /// `security.protocol` or `ssl.protocol`, or a bad number is an error.
    pub fn from_properties(text: &str) -> Result<(ClientConfig, Vec<String>), ConfigError> {
        let mut config = ClientConfig::default();
        let mut warnings = Vec::new();
        // Security keys depend on each other; they are read first and checked together below.
        let mut security: BTreeMap<String, String> = BTreeMap::new();
        let properties = kquota_wire::properties::parse(text).map_err(ConfigError::Syntax)?;
        for property in properties {
            let (key, value) = (property.key, property.value.trim().to_owned());
            match key.as_str() {
                "security.protocol" => {
                    config.security_protocol = value
                        .parse::<SecurityProtocol>()
                        .map_err(|e| invalid("security.protocol", &value, e))?;
                }
                k if k.starts_with("sasl.") || k.starts_with("ssl.") => {
                    if KNOWN_KEYS.contains(&k) {
                        security.insert(key, value);
                    } else {
                        warnings.push(format!(
                            "ignoring unknown key '{key}' (understood: {})",
                            KNOWN_KEYS.join(", ")
                        ));
                    }
                }
                "client.id" => config.client_id = value,
                "request.timeout.ms" => match value.parse::<u64>() {
                    Ok(ms) if ms > 0 => config.request_timeout = Duration::from_millis(ms),
                    _ => return Err(ConfigError::InvalidTimeout { value }),
                },
                "bootstrap.servers" => config.bootstrap_servers = Some(value),
                _ => warnings.push(format!(
                    "ignoring unknown key '{key}' (understood: {})",
                    KNOWN_KEYS.join(", ")
                )),
            }
        }
        config.apply_security(&security, &mut warnings)?;
        Ok((config, warnings))
    }

    /// Checks and applies the `sasl.*` and `ssl.*` keys for the configured protocol.
    fn apply_security(
        &mut self,
        keys: &BTreeMap<String, String>,
        warnings: &mut Vec<String>,
    ) -> Result<(), ConfigError> {
        let protocol = self.security_protocol;
        let get = |k: &str| keys.get(k).map(String::as_str);
        for k in keys.keys() {
            let applies = if k.starts_with("sasl.") {
                protocol.uses_sasl()
            } else {
                protocol.uses_tls()
            };
            if !applies {
                warnings.push(format!(
                    "'{k}' has no effect with security.protocol={protocol}"
                ));
            }
        }
        if protocol.uses_sasl() {
            let mechanism: SaslMechanism = match get("sasl.mechanism") {
                None => {
                    return Err(ConfigError::Missing {
                        protocol,
                        key: "sasl.mechanism",
                        hint: " (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)".to_owned(),
                    })
                }
                Some(m) => m
                    .parse::<SaslMechanism>()
                    .map_err(|e| invalid("sasl.mechanism", m, e))?,
            };
            let module = match mechanism {
                SaslMechanism::Plain => PLAIN_LOGIN_MODULE,
                SaslMechanism::Scram(_) => SCRAM_LOGIN_MODULE,
            };
            let Some(text) = get("sasl.jaas.config") else {
                return Err(ConfigError::Missing {
                    protocol,
                    key: "sasl.jaas.config",
                    hint: format!(
                        ", e.g. sasl.jaas.config={module} required username=\"alice\" password=\"...\";"
                    ),
                });
            };
            let jaas = parse_jaas(text).map_err(ConfigError::Jaas)?;
            if jaas.login_module != module {
                return Err(ConfigError::WrongLoginModule {
                    mechanism,
                    expected: module,
                    found: jaas.login_module,
                });
            }
            let option = |name: &'static str| {
                jaas.options
                    .get(name)
                    .filter(|v| !v.is_empty())
                    .cloned()
                    .ok_or(ConfigError::MissingJaasOption { option: name })
            };
            self.sasl = Some(SaslLogin {
                mechanism,
                username: option("username")?,
                password: option("password")?,
            });
        }
        if protocol.uses_tls() {
            for k in ["ssl.truststore.type", "ssl.keystore.type"] {
                if let Some(t) = get(k) {
                    if !t.eq_ignore_ascii_case("PEM") {
                        return Err(invalid(k, t, "only PEM is supported"));
                    }
                }
            }
            for k in ["ssl.key.password", "ssl.keystore.password"] {
                if get(k).is_some_and(|v| !v.is_empty()) {
                    return Err(ConfigError::Unsupported {
                        key: k,
                        reason: "encrypted PEM keys are not supported; use an unencrypted key file",
                    });
                }
            }
            let tls_err = ConfigError::Tls;
            let mut trust = Vec::new();
            if let Some(path) = get("ssl.truststore.location") {
                let pem = tls::read_pem_file(path, "ssl.truststore.location").map_err(tls_err)?;
                trust.extend(tls::certificates(&pem, "ssl.truststore.location").map_err(tls_err)?);
            }
            if let Some(pem) = get("ssl.truststore.certificates") {
                trust.extend(
                    tls::certificates(pem, "ssl.truststore.certificates").map_err(tls_err)?,
                );
            }
            if trust.is_empty() {
                return Err(ConfigError::Missing {
                    protocol,
                    key: "ssl.truststore.location",
                    hint: " (a PEM file of the CA certificates to trust; the system store is not read)"
                        .to_owned(),
                });
            }
            let keystore_file = match get("ssl.keystore.location") {
                Some(path) => {
                    Some(tls::read_pem_file(path, "ssl.keystore.location").map_err(tls_err)?)
                }
                None => None,
            };
            let chain = get("ssl.keystore.certificate.chain")
                .map(str::to_owned)
                .or_else(|| keystore_file.clone());
            let key = get("ssl.keystore.key").map(str::to_owned).or(keystore_file);
            let identity = match (chain, key) {
                (Some(chain), Some(key)) => Some(KeyPair {
                    chain: tls::certificates(&chain, "ssl.keystore").map_err(tls_err)?,
                    key: tls::private_key(&key, "ssl.keystore").map_err(tls_err)?,
                }),
                (None, None) => None,
                _ => return Err(ConfigError::IncompleteKeystore),
            };
            let verify_hostname = match get("ssl.endpoint.identification.algorithm") {
                None => true,
                Some(a) if a.eq_ignore_ascii_case("https") => true,
                Some("") => false,
                Some(a) => {
                    return Err(invalid(
                        "ssl.endpoint.identification.algorithm",
                        a,
                        "expected https, or nothing to turn host name checks off",
                    ))
                }
            };
            let versions = tls_versions(get("ssl.protocol"))?;
            self.tls = Some(
                tls::client_config(&trust, identity.as_ref(), verify_hostname, versions)
                    .map_err(tls_err)?,
            );
        }
        Ok(())
    }
}

/// TLS 1.2 alone, for `ssl.protocol=TLSv1.2`.
static TLS12_ONLY: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];

/// The TLS versions the client offers for `ssl.protocol`, as Kafka's admin client on Java 11 or newer
/// with the default `ssl.enabled.protocols=TLSv1.2,TLSv1.3` offers them (this client does not read
/// that key): `ssl.protocol` names the `SSLContext`, and `ssl.enabled.protocols` picks from what
/// that context supports. rustls's defaults are TLS 1.3 and 1.2.
///
/// * `TLSv1.3` (Kafka's default) supports 1.3 and 1.2: 1.3 is preferred and a server without it
///   gets 1.2 (Kafka: "clients will downgrade to 'TLSv1.2' if the server does not support
///   'TLSv1.3'").
/// * `TLS` is Java's generic context, which on Java 11 or newer supports the same.
/// * `TLSv1.2` supports 1.2 alone (Kafka: "clients will not use 'TLSv1.3' even if ... the server
///   only supports 'TLSv1.3'").
///
/// Names are matched ignoring case, as Java matches algorithm names. `TLSv1.1` and older (and
/// `SSL`, `SSLv3`) are refused: rustls speaks none of them, and Kafka discourages them.
fn tls_versions(
    value: Option<&str>,
) -> Result<&'static [&'static rustls::SupportedProtocolVersion], ConfigError> {
    match value {
        None => Ok(rustls::DEFAULT_VERSIONS),
        Some(v) if v.eq_ignore_ascii_case("TLSv1.3") || v.eq_ignore_ascii_case("TLS") => {
            Ok(rustls::DEFAULT_VERSIONS)
        }
        Some(v) if v.eq_ignore_ascii_case("TLSv1.2") => Ok(TLS12_ONLY),
        Some(v) => Err(invalid(
            "ssl.protocol",
            v,
            "expected TLSv1.3 (the default: TLS 1.3, or 1.2 with a server without 1.3), TLS (the same) or TLSv1.2 (TLS 1.2 only); TLSv1.1 and older are not supported",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_are_read_as_java_reads_them() {
        // Comments, the three separators, escapes, continuations (odd backslashes), a later line
        // winning, values trimmed as Kafka's ConfigDef trims them, UTF-8 kept.
        let text = "# comment \\u12\n! also\n client.id = caf\\u00e9\\\n    -\\\\\\\n   ☃  \nrequest.timeout.ms:1\nrequest.timeout.ms:500\nbootstrap.servers localhost\\:9092\n";
        let (c, w) = ClientConfig::from_properties(text).unwrap();
        assert_eq!(c.client_id, "café-\\☃");
        assert_eq!(c.request_timeout, Duration::from_millis(500));
        assert_eq!(c.bootstrap_servers.as_deref(), Some("localhost:9092"));
        assert!(w.is_empty(), "{w:?}");
        // A key alone is the empty value, as in Java.
        let (c, _) = ClientConfig::from_properties("bootstrap.servers\n").unwrap();
        assert_eq!(c.bootstrap_servers.as_deref(), Some(""));
        // Passwords keep their UTF-8.
        let (c, _) = ClientConfig::from_properties(
            "security.protocol=SASL_PLAINTEXT\r\nsasl.mechanism=PLAIN\r\nsasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"jürgen\" password=\"pässwörd☃\";\r\n",
        )
        .unwrap();
        let login = c.sasl.unwrap();
        assert_eq!(
            (login.username.as_str(), login.password.as_str()),
            ("jürgen", "pässwörd☃")
        );
    }

    #[test]
    fn a_malformed_escape_is_an_error_naming_the_file_and_line() {
        assert_eq!(
            error("client.id=a\nsasl.jaas.config=x \\u12\n"),
            "line 2: malformed \\uXXXX escape (not enough digits): \\u must be followed by four hex digits; write \\\\ for a backslash"
        );
        let path =
            std::env::temp_dir().join(format!("kquota-config-{}.properties", std::process::id()));
        std::fs::write(
            &path,
            "client.id=a\n\nssl.truststore.location=C:\\users\\ca.pem\n",
        )
        .unwrap();
        let e = ClientConfig::from_file(&path).unwrap_err().to_string();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            e,
            format!("--command-config {}: line 3: malformed \\uXXXX escape (not hex): \\u must be followed by four hex digits; write \\\\ for a backslash", path.display())
        );
    }

    #[test]
    fn known_keys_apply_and_unknown_keys_warn() {
        let (c, w) = ClientConfig::from_properties(
            "security.protocol=PLAINTEXT\nclient.id=ops\nrequest.timeout.ms=500\nsasl.mechanism=PLAIN\nsasl.kerberos.service.name=kafka\n",
        )
        .unwrap();
        assert_eq!(c.client_id, "ops");
        assert_eq!(c.request_timeout, Duration::from_millis(500));
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].starts_with("ignoring unknown key 'sasl.kerberos.service.name'"));
        assert_eq!(
            w[1],
            "'sasl.mechanism' has no effect with security.protocol=PLAINTEXT"
        );
        assert!(ClientConfig::from_properties("request.timeout.ms=soon").is_err());
    }

    fn error(text: &str) -> String {
        ClientConfig::from_properties(text).unwrap_err().to_string()
    }

    #[test]
    fn errors_say_which_key_and_value() {
        let e = |text: &str| ClientConfig::from_properties(text).unwrap_err();
        assert!(matches!(
            e("request.timeout.ms= soon \n"),
            ConfigError::InvalidTimeout { value } if value == "soon"
        ));
        assert!(matches!(
            e("security.protocol=TLS"),
            ConfigError::InvalidValue { key, value, .. } if key == "security.protocol" && value == "TLS"
        ));
        assert!(matches!(
            e("security.protocol=SASL_SSL"),
            ConfigError::Missing {
                key: "sasl.mechanism",
                protocol: SecurityProtocol::SaslSsl,
                ..
            }
        ));
        assert!(matches!(
            e("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=M required"),
            ConfigError::Jaas(JaasError::MissingSemicolon)
        ));
        assert!(matches!(
            e("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"a\" password=\"\";"),
            ConfigError::MissingJaasOption { option: "password" }
        ));
        assert!(matches!(
            e("client.id=\\u00"),
            ConfigError::Syntax(p) if p.line == 1
        ));
    }

    #[test]
    fn sasl_settings() {
        let (c, _) = ClientConfig::from_properties(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n  username=\"alice\" password=\"pw\";\n",
        )
        .unwrap();
        let login = c.sasl.unwrap();
        assert_eq!(login.mechanism.name(), "SCRAM-SHA-512");
        assert_eq!(
            (login.username.as_str(), login.password.as_str()),
            ("alice", "pw")
        );
        assert!(error("security.protocol=TLS").contains("unknown security protocol"));
        assert!(error("security.protocol=SASL_PLAINTEXT").contains("needs sasl.mechanism"));
        assert!(
            error("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI")
                .contains("unsupported SASL mechanism")
        );
        assert!(
            error("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN")
                .contains("needs sasl.jaas.config")
        );
        assert!(error(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"a\" password=\"b\";"
        )
        .contains("needs the login module org.apache.kafka.common.security.plain.PlainLoginModule"));
        assert!(error(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"a\";"
        )
        .contains("missing password"));
    }

    #[test]
    fn ssl_settings() {
        assert!(error("security.protocol=SSL").contains("needs ssl.truststore.location"));
        assert!(error("security.protocol=SSL\nssl.truststore.type=JKS").contains("only PEM"));
        assert!(
            error("security.protocol=SSL\nssl.truststore.location=/nonexistent/ca.pem")
                .contains("cannot read")
        );
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let pem = cert.cert.pem().replace('\n', "\\\n");
        let (c, _) = ClientConfig::from_properties(&format!(
            "security.protocol=SSL\nssl.truststore.certificates={pem}\nssl.endpoint.identification.algorithm=\n"
        ))
        .unwrap();
        assert!(c.tls.is_some());
        assert!(error(&format!(
            "security.protocol=SSL\nssl.truststore.certificates={pem}\nssl.endpoint.identification.algorithm=none"
        ))
        .contains("expected https"));
    }

    /// A server certificate for `localhost` and the client settings that trust it, inline.
    struct Server {
        identity: KeyPair,
        trust: String,
    }

    fn tls_server() -> Server {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let identity = KeyPair {
            chain: tls::certificates(&cert.cert.pem(), "chain").unwrap(),
            key: tls::private_key(&cert.key_pair.serialize_pem(), "key").unwrap(),
        };
        let trust = format!(
            "security.protocol=SSL\nssl.truststore.certificates={}\n",
            cert.cert.pem().replace('\n', "\\\n")
        );
        Server { identity, trust }
    }

    /// A server configuration offering `versions`.
    fn server_config(
        identity: &KeyPair,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Arc<rustls::ServerConfig> {
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(versions)
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(identity.chain.clone(), identity.key.clone_key())
        .unwrap();
        Arc::new(config)
    }

    /// Runs a TLS handshake in memory and returns the version it agreed on.
    fn handshake(
        client: &ClientConfig,
        server: Arc<rustls::ServerConfig>,
        name: &str,
    ) -> Result<rustls::ProtocolVersion, rustls::Error> {
        let name = rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap();
        let mut c: rustls::Connection =
            rustls::ClientConnection::new(client.tls.clone().unwrap(), name)?.into();
        let mut s: rustls::Connection = rustls::ServerConnection::new(server)?.into();
        fn pump(
            from: &mut rustls::Connection,
            to: &mut rustls::Connection,
        ) -> Result<(), rustls::Error> {
            let mut bytes = Vec::new();
            while from.wants_write() {
                from.write_tls(&mut bytes).unwrap();
            }
            let mut rest = &bytes[..];
            while !rest.is_empty() {
                to.read_tls(&mut rest).unwrap();
                to.process_new_packets()?;
            }
            Ok(())
        }
        for _ in 0..8 {
            pump(&mut c, &mut s)?;
            pump(&mut s, &mut c)?;
            if !c.is_handshaking() && !s.is_handshaking() {
                return Ok(c.protocol_version().unwrap());
            }
        }
        panic!("the handshake did not finish");
    }

    #[test]
    fn ssl_protocol_picks_the_tls_versions() {
        use rustls::version::{TLS12, TLS13};
        use rustls::ProtocolVersion::{TLSv1_2, TLSv1_3};
        let server = tls_server();
        let client = |extra: &str| {
            ClientConfig::from_properties(&format!("{}{extra}", server.trust))
                .unwrap()
                .0
        };
        let both = server_config(&server.identity, &[&TLS13, &TLS12]);
        let only_12 = server_config(&server.identity, &[&TLS12]);
        let only_13 = server_config(&server.identity, &[&TLS13]);
        // Unset, TLSv1.3 (Kafka's default) and TLS: 1.3, or 1.2 with a server without 1.3.
        for extra in [
            "",
            "ssl.protocol=TLSv1.3\n",
            "ssl.protocol=TLS\n",
            "ssl.protocol = tlsv1.3 \n",
        ] {
            let c = client(extra);
            assert_eq!(
                handshake(&c, both.clone(), "localhost"),
                Ok(TLSv1_3),
                "{extra}"
            );
            assert_eq!(
                handshake(&c, only_12.clone(), "localhost"),
                Ok(TLSv1_2),
                "{extra}"
            );
            assert_eq!(
                handshake(&c, only_13.clone(), "localhost"),
                Ok(TLSv1_3),
                "{extra}"
            );
        }
        // TLSv1.2: 1.2 alone, even with a server that prefers 1.3; a 1.3-only server is refused.
        let c = client("ssl.protocol=TLSv1.2\n");
        assert_eq!(handshake(&c, both.clone(), "localhost"), Ok(TLSv1_2));
        assert_eq!(handshake(&c, only_12.clone(), "localhost"), Ok(TLSv1_2));
        assert!(handshake(&c, only_13.clone(), "localhost").is_err());
        // Its host name check, and turning that off, work as with the other values.
        assert!(matches!(
            handshake(&c, both.clone(), "kafka.example"),
            Err(rustls::Error::InvalidCertificate(_))
        ));
        let c = client("ssl.protocol=TLSv1.2\nssl.endpoint.identification.algorithm=\n");
        assert_eq!(handshake(&c, both.clone(), "kafka.example"), Ok(TLSv1_2));
        // A server certificate from another CA is still refused.
        let other = tls_server();
        assert!(matches!(
            handshake(&c, server_config(&other.identity, &[&TLS12]), "localhost"),
            Err(rustls::Error::InvalidCertificate(_))
        ));
    }

    #[test]
    fn ssl_protocol_tls12_presents_the_client_certificate() {
        use rustls::version::TLS12;
        let server = tls_server();
        let client = rcgen::generate_simple_self_signed(vec!["client".to_owned()]).unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new({
                let mut roots = rustls::RootCertStore::empty();
                roots.add(client.cert.der().clone()).unwrap();
                roots
            }),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let requires = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_protocol_versions(&[&TLS12])
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                server.identity.chain.clone(),
                server.identity.key.clone_key(),
            )
            .unwrap(),
        );
        let without =
            ClientConfig::from_properties(&format!("{}ssl.protocol=TLSv1.2\n", server.trust))
                .unwrap()
                .0;
        assert!(handshake(&without, requires.clone(), "localhost").is_err());
        let with = ClientConfig::from_properties(&format!(
            "{}ssl.protocol=TLSv1.2\nssl.keystore.certificate.chain={}\nssl.keystore.key={}\n",
            server.trust,
            client.cert.pem().replace('\n', "\\\n"),
            client.key_pair.serialize_pem().replace('\n', "\\\n"),
        ))
        .unwrap()
        .0;
        assert_eq!(
            handshake(&with, requires, "localhost"),
            Ok(rustls::ProtocolVersion::TLSv1_2)
        );
    }

    #[test]
    fn other_ssl_protocols_are_refused() {
        let server = tls_server();
        for value in ["TLSv1.1", "TLSv1", "SSLv3", "SSL", "", "TLSv1.4", "garbage"] {
            let e = error(&format!("{}ssl.protocol={value}\n", server.trust));
            assert_eq!(
                e,
                format!("ssl.protocol={value}: expected TLSv1.3 (the default: TLS 1.3, or 1.2 with a server without 1.3), TLS (the same) or TLSv1.2 (TLS 1.2 only); TLSv1.1 and older are not supported")
            );
        }
        // Without TLS the key has no effect, as every ssl.* key.
        let (_, w) = ClientConfig::from_properties("ssl.protocol=TLSv1.2\n").unwrap();
        assert_eq!(
            w,
            ["'ssl.protocol' has no effect with security.protocol=PLAINTEXT"]
        );
    }
}
