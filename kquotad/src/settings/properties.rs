//! `kquotad`'s properties file (`--config`) and the keys it may set.

use kquota_wire::properties::Property;

use kquota_host::SettingsFileError;

use crate::error::ConfigError;

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
    kquota_host::read_settings(text).map_err(|e| match e {
        SettingsFileError::Line { line, problem } => ConfigError::Line { line, problem },
        e => ConfigError::Properties(e.into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_a_server_should_not_guess_at_are_refused_with_their_number() {
        // The reading is kquota-host's (tested there); kquotad's error keeps the line.
        assert!(matches!(
            parse_properties("listeners=PLAINTEXT://127.0.0.1:0\nthis line is wrong\n"),
            Err(ConfigError::Line { line: 2, .. })
        ));
        let e = parse_properties("a=1\nb=\\u12\n").unwrap_err();
        assert!(matches!(e, ConfigError::Properties(_)), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("line 2: malformed \\uXXXX escape"),
            "{e}"
        );
    }
}
