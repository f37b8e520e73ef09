//! `kquotad`'s properties file (`--config`) and the keys it may set.

use kquota_wire::properties::{self, Property, Separator};

use crate::error::{ConfigError, LineProblem};

/// The property keys `kquotad` understands.
pub const KNOWN_PROPERTIES: &[&str] = &[
    "listeners",
    "listener.security.protocol.map",
    "advertised.listeners",
    "kquota.data.dir",
    "kquota.sub.quota.policy",
    "kquota.broker.count",
    "kquota.producer.capacity.bytes.per.sec",
    "kquota.consumer.capacity.bytes.per.sec",
    "socket.request.max.bytes",
    "sasl.server.max.receive.size",
    "queued.max.request.bytes",
    "max.connections",
    "max.connections.per.ip",
    "connections.max.idle.ms",
    "kquota.connections.grace.ms",
    "node.id",
    "cluster.id",
    "super.users",
    "kquota.describe.allow.anonymous",
    "kquota.draft.alter.quotas.enable",
    "sasl.enabled.mechanisms",
    "sasl.credentials.file",
    "connection.failed.authentication.delay.ms",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.client.auth",
    "ssl.principal.mapping.rules",
];

/// Reads `kquotad`'s properties file (`--config`) as Java's `Properties.load` does (escapes,
/// continuations, comments; see [`kquota_wire::properties`]). Returns the settings in file order, one per
/// key (a later line wins, as in Java), each with the line it starts on; values are trimmed, as
/// Kafka's `ConfigDef` trims them.
///
/// Refused, naming the line: a malformed `\uXXXX` escape ([`ConfigError::Properties`]), an empty
/// key (`=value`), and a key that is not followed by `=` or `:` ([`ConfigError::Line`]). Java reads
/// `key value` as a setting and `key` alone as one with the empty value, but in a server's file
/// either is far more often a slip (a line of prose, a lost `=`) than meant, so `kquotad` asks for
/// `key=value`, and `key=` for an empty value.
pub fn parse_properties(text: &str) -> Result<Vec<Property>, ConfigError> {
    let mut out = properties::parse(text).map_err(|e| ConfigError::Properties(e.into()))?;
    for p in &mut out {
        let line = p.line;
        let problem = if p.key.is_empty() {
            Some(LineProblem::EmptyKey)
        } else {
            match p.separator {
                Separator::Sign => None,
                Separator::Space => Some(LineProblem::SpaceAfterKey(p.key.clone())),
                Separator::Missing => Some(LineProblem::KeyAlone(p.key.clone())),
            }
        };
        if let Some(problem) = problem {
            return Err(ConfigError::Line { line, problem });
        }
        p.value = p.value.trim().to_owned();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(text: &str) -> Vec<(usize, String, String)> {
        parse_properties(text)
            .unwrap()
            .into_iter()
            .map(|p| (p.line, p.key, p.value))
            .collect()
    }

    fn refusal(text: &str) -> String {
        parse_properties(text).unwrap_err().to_string()
    }

    #[test]
    fn properties_are_read_as_java_reads_them() {
        let text = "# kquotad\n listeners = PLAINTEXT://127.0.0.1:0,\\\n    SSL://127.0.0.1:0  \nssl.keystore.location=C\\:\\\\ks.pem\nsuper.users:User:admin\nkquota.data.dir=/a\nkquota.data.dir=/b\nssl.key.password=\n";
        assert_eq!(
            settings(text),
            [
                (2, "listeners", "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"),
                (4, "ssl.keystore.location", "C:\\ks.pem"),
                (5, "super.users", "User:admin"),
                (7, "kquota.data.dir", "/b"),
                (8, "ssl.key.password", ""),
            ]
            .map(|(n, k, v)| (n, k.to_owned(), v.to_owned()))
        );
    }

    #[test]
    fn lines_a_server_should_not_guess_at_are_refused_with_their_number() {
        assert_eq!(
            refusal("listeners=PLAINTEXT://127.0.0.1:0\nthis line is wrong\n"),
            "line 2: expected key=value, got 'this' followed by a space; kquotad needs '=' or ':' between a key and its value"
        );
        assert_eq!(
            refusal("a=1\n\nkquota.data.dir\n"),
            "line 3: expected key=value, got 'kquota.data.dir' alone; write kquota.data.dir= for an empty value"
        );
        assert_eq!(refusal("a=1\n = x\n"), "line 2: empty key");
        let e = refusal("a=1\n# \\u is fine in a comment\nb=\\u12\n");
        assert!(e.starts_with("line 3: malformed \\uXXXX escape"), "{e}");
    }
}
