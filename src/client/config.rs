//! The admin client's settings, read from a Kafka admin-client properties file (`--command-config`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::jaas::{parse_jaas, PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE};
use crate::security::tls::{self, KeyPair};
use crate::security::{SaslMechanism, SecurityProtocol};

/// Keys this client understands; any other key is reported as a warning, never silently dropped.
pub const KNOWN_KEYS: [&str; 17] = [
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

/// Settings of an [`AdminClient`](super::AdminClient).
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

/// A properties file that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Splits Java properties text into `(key, value)` pairs: `#` and `!` comment lines, `=`, `:` or
/// whitespace as the separator, a trailing backslash continues a line.
pub fn parse_properties(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut logical = String::new();
    for raw in text.lines() {
        let line = raw.trim_start();
        if logical.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with('!'))
        {
            continue;
        }
        let continued = line.ends_with('\\') && !line.ends_with("\\\\");
        logical.push_str(if continued {
            &line[..line.len() - 1]
        } else {
            line
        });
        if continued {
            continue;
        }
        let entry = std::mem::take(&mut logical);
        let sep = entry.find(['=', ':', ' ', '\t']).unwrap_or(entry.len());
        let key = entry[..sep].trim().to_owned();
        let mut value = entry[sep..].trim_start();
        if let Some(rest) = value.strip_prefix(['=', ':']) {
            value = rest.trim_start();
        }
        out.push((key, value.trim_end().to_owned()));
    }
    out
}

impl ClientConfig {
    /// Reads a `--command-config` file. Returns the settings and one warning per key that is not
    /// understood (each naming the file), or a one-line error naming the file.
    pub fn from_file(path: &std::path::Path) -> Result<(ClientConfig, Vec<String>), String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read --command-config {}: {e}", path.display()))?;
        let (config, warnings) = ClientConfig::from_properties(&text)
            .map_err(|e| format!("--command-config {}: {e}", path.display()))?;
        let warnings = warnings
            .into_iter()
            .map(|w| format!("--command-config {}: {w}", path.display()))
            .collect();
        Ok((config, warnings))
    }

    /// Reads settings from properties text. Returns the settings and one warning per key that is not
    /// understood; an unsupported `security.protocol` or a bad number is an error.
    pub fn from_properties(text: &str) -> Result<(ClientConfig, Vec<String>), ConfigError> {
        let mut config = ClientConfig::default();
        let mut warnings = Vec::new();
        // Security keys depend on each other; they are read first and checked together below.
        let mut security: BTreeMap<String, String> = BTreeMap::new();
        for (key, value) in parse_properties(text) {
            match key.as_str() {
                "security.protocol" => {
                    config.security_protocol = value
                        .parse()
                        .map_err(|e: String| ConfigError(format!("security.protocol={value}: {e}")))?;
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
                    _ => {
                        return Err(ConfigError(format!(
                            "request.timeout.ms={value} is not a positive whole number of milliseconds; write e.g. request.timeout.ms=30000"
                        )))
                    }
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
                    return Err(ConfigError(format!(
                        "security.protocol={protocol} needs sasl.mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"
                    )))
                }
                Some(m) => m
                    .parse()
                    .map_err(|e: String| ConfigError(format!("sasl.mechanism={m}: {e}")))?,
            };
            let module = match mechanism {
                SaslMechanism::Plain => PLAIN_LOGIN_MODULE,
                SaslMechanism::Scram(_) => SCRAM_LOGIN_MODULE,
            };
            let Some(text) = get("sasl.jaas.config") else {
                return Err(ConfigError(format!(
                    "security.protocol={protocol} needs sasl.jaas.config, e.g. sasl.jaas.config={module} required username=\"alice\" password=\"...\";"
                )));
            };
            let jaas =
                parse_jaas(text).map_err(|e| ConfigError(format!("sasl.jaas.config: {e}")))?;
            if jaas.login_module != module {
                return Err(ConfigError(format!(
                    "sasl.jaas.config: sasl.mechanism={mechanism} needs the login module {module}, not {}",
                    jaas.login_module
                )));
            }
            let option = |name: &str| {
                jaas.options
                    .get(name)
                    .filter(|v| !v.is_empty())
                    .cloned()
                    .ok_or_else(|| ConfigError(format!("sasl.jaas.config: missing {name}=\"...\"")))
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
                        return Err(ConfigError(format!("{k}={t}: only PEM is supported")));
                    }
                }
            }
            for k in ["ssl.key.password", "ssl.keystore.password"] {
                if get(k).is_some_and(|v| !v.is_empty()) {
                    return Err(ConfigError(format!(
                        "{k}: encrypted PEM keys are not supported; use an unencrypted key file"
                    )));
                }
            }
            let tls_err = |e: tls::TlsError| ConfigError(e.0);
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
                return Err(ConfigError(format!(
                    "security.protocol={protocol} needs ssl.truststore.location (a PEM file of the CA certificates to trust; the system store is not read)"
                )));
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
                _ => {
                    return Err(ConfigError(
                        "ssl.keystore.certificate.chain and ssl.keystore.key go together"
                            .to_owned(),
                    ))
                }
            };
            let verify_hostname = match get("ssl.endpoint.identification.algorithm") {
                None => true,
                Some(a) if a.eq_ignore_ascii_case("https") => true,
                Some("") => false,
                Some(a) => {
                    return Err(ConfigError(format!(
                        "ssl.endpoint.identification.algorithm={a}: expected https, or nothing to turn host name checks off"
                    )))
                }
            };
            self.tls = Some(
                tls::client_config(&trust, identity.as_ref(), verify_hostname).map_err(tls_err)?,
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_parse_like_java() {
        let text = "# comment\n! also\n a = 1\nb:2\nc 3\nd=x\\\n  y\n\ne=\n";
        let got = parse_properties(text);
        let want: Vec<(String, String)> =
            [("a", "1"), ("b", "2"), ("c", "3"), ("d", "xy"), ("e", "")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        assert_eq!(got, want);
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
        ClientConfig::from_properties(text).unwrap_err().0
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
}
