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
    "kquota.metrics.listen",
    "kquota.sub.quota.policy",
    "kquota.broker.count",
    "kquota.producer.capacity.bytes.per.sec",
    "kquota.consumer.capacity.bytes.per.sec",
    "socket.request.max.bytes",
    "sasl.server.max.receive.size",
    "queued.max.request.bytes",
    "max.connections",
    "max.connections.per.ip",
    "num.network.threads",
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
    "log.format",
];

/// Every key `kquotad` takes, with what it sets, as `--help` lists them: [`KNOWN_PROPERTIES`]
/// and the `kquota.cluster.*` keys of many instances.
pub const SETTINGS: &[(&str, &str)] = &[
    (
        "listeners",
        "where to listen: NAME://host:port[,...] (PLAINTEXT://127.0.0.1:9092)",
    ),
    (
        "listener.security.protocol.map",
        "NAME:PROTOCOL[,...] for listener names that are not a protocol",
    ),
    (
        "advertised.listeners",
        "what Metadata names, per listener: NAME://host:port[,...]",
    ),
    (
        "kquota.data.dir",
        "the durable store's directory (kquota-data)",
    ),
    (
        "kquota.metrics.listen",
        "IP:PORT to serve /metrics, /healthz and /readyz on over HTTP (off)",
    ),
    (
        "kquota.sub.quota.policy",
        "kip55 (remainders) or kafka: how a user's client sub-quotas share its total",
    ),
    (
        "kquota.broker.count",
        "the instances :bps quotas are divided by (1)",
    ),
    (
        "kquota.producer.capacity.bytes.per.sec",
        "what producer_byte_rate:shares divides",
    ),
    (
        "kquota.consumer.capacity.bytes.per.sec",
        "what consumer_byte_rate:shares divides",
    ),
    (
        "socket.request.max.bytes",
        "the largest request frame (104857600)",
    ),
    (
        "sasl.server.max.receive.size",
        "the largest frame before a SASL client has authenticated (524288)",
    ),
    (
        "queued.max.request.bytes",
        "request bytes read or queued at once over every connection (268435456; <= 0: unbounded)",
    ),
    (
        "max.connections",
        "connections open at once (1024); the unauthenticated, then the idle, give way",
    ),
    (
        "max.connections.per.ip",
        "connections open at once from one address (no limit)",
    ),
    (
        "num.network.threads",
        "threads serving the connections, each one's for its life; 1-256 (one per CPU)",
    ),
    (
        "connections.max.idle.ms",
        "idle time before a connection is closed (600000)",
    ),
    (
        "kquota.connections.grace.ms",
        "time a new connection has to authenticate or send a valid request (10000)",
    ),
    (
        "node.id",
        "the node id Metadata and DescribeCluster name (1)",
    ),
    (
        "cluster.id",
        "the cluster id Metadata and DescribeCluster name (kquota-cluster)",
    ),
    ("super.users", "User:NAME[;...]: who may alter quotas"),
    (
        "kquota.describe.allow.anonymous",
        "true: User:ANONYMOUS may describe quotas (false)",
    ),
    (
        "kquota.draft.alter.quotas.enable",
        "true: serve the seeds' draft AlterQuotas on apiKey 50 (false)",
    ),
    (
        "sasl.enabled.mechanisms",
        "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (SCRAM-SHA-256,SCRAM-SHA-512)",
    ),
    (
        "sasl.credentials.file",
        "the SASL users' salted SCRAM credentials (JSON; kquotad scram-credential makes it)",
    ),
    (
        "connection.failed.authentication.delay.ms",
        "how long a failed authentication waits before the close (100)",
    ),
    ("ssl.keystore.type", "PEM (the only type)"),
    (
        "ssl.keystore.location",
        "a PEM file with the listeners' certificate chain and key",
    ),
    (
        "ssl.keystore.certificate.chain",
        "the certificate chain, inline PEM",
    ),
    (
        "ssl.keystore.key",
        "the private key, inline PEM (unencrypted)",
    ),
    (
        "ssl.key.password",
        "refused: encrypted keys are not supported",
    ),
    ("ssl.keystore.password", "refused: a PEM keystore has none"),
    ("ssl.truststore.type", "PEM (the only type)"),
    (
        "ssl.truststore.location",
        "a PEM file of the CAs client certificates are checked against",
    ),
    ("ssl.truststore.certificates", "those CAs, inline PEM"),
    ("ssl.client.auth", "none, requested or required (none)"),
    (
        "ssl.principal.mapping.rules",
        "DEFAULT (the only rule kquotad applies)",
    ),
    (
        "kquota.cluster.bootstrap.servers",
        "share one configuration with other instances through this Kafka cluster",
    ),
    (
        "kquota.cluster.instance.id",
        "this instance's id among the others (kquotad-<node.id>)",
    ),
    (
        "kquota.cluster.config.topic",
        "the configuration topic (_kquota_config)",
    ),
    (
        "kquota.cluster.replication.factor",
        "the replication factor of the topics created (-1: the cluster's default)",
    ),
    (
        "kquota.cluster.alter.timeout.ms",
        "how long an alteration may wait for the configuration log (10000)",
    ),
    (
        "kquota.cluster.client.<key>",
        "a librdkafka property for kquotad's own Kafka clients",
    ),
    (
        "log.format",
        "how log lines are written: text, or json (one object a line) for log shippers (text)",
    ),
];

/// `--help`'s list of every setting, from [`SETTINGS`].
pub fn settings_help() -> String {
    let width = SETTINGS.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::from("Every setting (a properties-file key; flags set the same):\n\n");
    for (key, what) in SETTINGS {
        out.push_str(&format!("  {key:width$}  {what}\n"));
    }
    out
}

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
    fn help_lists_every_key() {
        for key in KNOWN_PROPERTIES {
            assert!(
                SETTINGS.iter().any(|(k, _)| k == key),
                "{key} is not in SETTINGS"
            );
        }
        for (key, _) in SETTINGS {
            assert!(
                KNOWN_PROPERTIES.contains(key) || key.starts_with("kquota.cluster."),
                "{key} is in SETTINGS but not read"
            );
        }
    }

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
