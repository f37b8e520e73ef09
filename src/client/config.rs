//! The admin client's settings, read from a Kafka admin-client properties file (`--command-config`).

use std::time::Duration;

/// Keys this client understands; any other key is reported as a warning, never silently dropped.
pub const KNOWN_KEYS: [&str; 4] = [
    "bootstrap.servers",
    "client.id",
    "request.timeout.ms",
    "security.protocol",
];

/// Settings of an [`AdminClient`](super::AdminClient).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// The `client.id` sent in every request header.
    pub client_id: String,
    /// How long to wait for a connection or a response (`request.timeout.ms`, default 30 s).
    pub request_timeout: Duration,
    /// `bootstrap.servers` from the file, used when no `--bootstrap-server` is given.
    pub bootstrap_servers: Option<String>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            client_id: "kquota-admin".to_owned(),
            request_timeout: Duration::from_millis(30_000),
            bootstrap_servers: None,
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
        for (key, value) in parse_properties(text) {
            match key.as_str() {
                "security.protocol" => {
                    if !value.eq_ignore_ascii_case("PLAINTEXT") {
                        return Err(ConfigError(format!(
                            "security.protocol={value} is not supported yet; use security.protocol=PLAINTEXT"
                        )));
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
        Ok((config, warnings))
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
            "security.protocol=PLAINTEXT\nclient.id=ops\nrequest.timeout.ms=500\nsasl.mechanism=PLAIN\n",
        )
        .unwrap();
        assert_eq!(c.client_id, "ops");
        assert_eq!(c.request_timeout, Duration::from_millis(500));
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with("ignoring unknown key 'sasl.mechanism'"));
        assert!(ClientConfig::from_properties("security.protocol=SSL").is_err());
        assert!(ClientConfig::from_properties("request.timeout.ms=soon").is_err());
    }
}
