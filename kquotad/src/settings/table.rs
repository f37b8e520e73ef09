//! Every key `kquotad` takes, the flag that sets it (where it has one), its default and what it
//! does: the one table that `kquotad --help`, the "did you mean" of a misspelt key and
//! `docs/kquotad-settings.md` agree with (a test checks the doc).
//!
//! Keys are Kafka's `server.properties` keys where Kafka has the setting, and `kquota.*` for what
//! only kquota has.

use kquota_host::settings::{Setting, Settings};

const fn s(key: &'static str, help: &'static str) -> Setting {
    Setting::key(key, help)
}

/// Every setting of `kquotad`, in the order `kquotad --help` lists them.
pub const SETTINGS: Settings = Settings(&[
    s("listeners", "where to listen: NAME://host:port[,...]")
        .flag("--listeners")
        .default("PLAINTEXT://127.0.0.1:9092"),
    s(
        "listener.security.protocol.map",
        "NAME:PROTOCOL[,...] for listener names that are not a protocol",
    )
    .flag("--listener-security-protocol-map"),
    s(
        "advertised.listeners",
        "what Metadata names, per listener: NAME://host:port[,...]",
    )
    .flag("--advertised-listeners"),
    s("kquota.data.dir", "the durable store's directory")
        .flag("--data-dir")
        .default("kquota-data"),
    s(
        "kquota.metrics.listen",
        "IP:PORT to serve /metrics, /healthz and /readyz on over HTTP (off)",
    )
    .flag("--metrics-listen"),
    s(
        "kquota.sub.quota.policy",
        "kip55 (remainders) or kafka: how a user's client sub-quotas share its total",
    )
    .flag("--sub-quota-policy")
    .default("kip55"),
    s(
        "kquota.broker.count",
        "the instances :bps quotas are divided by",
    )
    .flag("--broker-count")
    .default("1"),
    s(
        "kquota.producer.capacity.bytes.per.sec",
        "what producer_byte_rate:shares divides",
    )
    .flag("--producer-capacity"),
    s(
        "kquota.consumer.capacity.bytes.per.sec",
        "what consumer_byte_rate:shares divides",
    )
    .flag("--consumer-capacity"),
    s("socket.request.max.bytes", "the largest request frame")
        .flag("--max-request-bytes")
        .default("104857600"),
    s(
        "sasl.server.max.receive.size",
        "the largest frame before a SASL client has authenticated",
    )
    .default("524288"),
    s(
        "queued.max.request.bytes",
        "request bytes read or queued at once over every connection (<= 0: unbounded)",
    )
    .flag("--queued-max-request-bytes")
    .default("268435456"),
    s(
        "max.connections",
        "connections open at once; the unauthenticated, then the idle, give way",
    )
    .flag("--max-connections")
    .default("1024"),
    s(
        "max.connections.per.ip",
        "connections open at once from one address (no limit)",
    ),
    s(
        "num.network.threads",
        "threads serving the connections, each staying on one; 1-256 (one per CPU)",
    )
    .flag("--num-network-threads"),
    s(
        "connections.max.idle.ms",
        "idle time before a connection is closed",
    )
    .flag("--idle-timeout-ms")
    .default("600000"),
    s(
        "kquota.connections.grace.ms",
        "time a new connection has to authenticate or send a valid request",
    )
    .default("10000"),
    s("node.id", "the node id Metadata and DescribeCluster name")
        .flag("--node-id")
        .default("1"),
    s(
        "cluster.id",
        "the cluster id Metadata and DescribeCluster name",
    )
    .default("kquota-cluster"),
    s("super.users", "User:NAME[;...]: who may alter quotas").flag("--super-users"),
    s(
        "kquota.describe.allow.anonymous",
        "true: User:ANONYMOUS may describe quotas",
    )
    .default("false"),
    s(
        "kquota.draft.alter.quotas.enable",
        "true: serve the seeds' draft AlterQuotas on apiKey 50",
    )
    .flag("--draft-alter-quotas")
    .default("false"),
    s(
        "sasl.enabled.mechanisms",
        "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
    )
    .flag("--sasl-enabled-mechanisms")
    .default("SCRAM-SHA-256,SCRAM-SHA-512"),
    s(
        "sasl.credentials.file",
        "the SASL users' salted SCRAM credentials (JSON; kquotad scram-credential makes it)",
    )
    .flag("--sasl-credentials-file"),
    s(
        "connection.failed.authentication.delay.ms",
        "how long a failed authentication waits before the close",
    )
    .default("100"),
    s("ssl.keystore.type", "PEM (the only type)").default("PEM"),
    s(
        "ssl.keystore.location",
        "a PEM file with the listeners' certificate chain and key",
    ),
    s(
        "ssl.keystore.certificate.chain",
        "the certificate chain, inline PEM",
    ),
    s(
        "ssl.keystore.key",
        "the private key, inline PEM (unencrypted)",
    ),
    s(
        "ssl.key.password",
        "refused: encrypted keys are not supported",
    ),
    s("ssl.keystore.password", "refused: a PEM keystore has none"),
    s("ssl.truststore.type", "PEM (the only type)").default("PEM"),
    s(
        "ssl.truststore.location",
        "a PEM file of the CAs client certificates are checked against",
    ),
    s("ssl.truststore.certificates", "those CAs, inline PEM"),
    s("ssl.client.auth", "none, requested or required").default("none"),
    s(
        "ssl.principal.mapping.rules",
        "how a client certificate's subject becomes its user (Kafka's rules)",
    )
    .default("DEFAULT"),
    s(
        "kquota.cluster.bootstrap.servers",
        "share one configuration with other instances through this Kafka cluster",
    )
    .flag("--cluster-bootstrap"),
    s(
        "kquota.cluster.instance.id",
        "this instance's id among the others (kquotad-<node.id>)",
    ),
    s("kquota.cluster.config.topic", "the configuration topic").default("_kquota_config"),
    s(
        "kquota.cluster.replication.factor",
        "the replication factor of the topics created (-1: the cluster's default)",
    )
    .default("-1"),
    s(
        "kquota.cluster.alter.timeout.ms",
        "how long an alteration may wait for the configuration log",
    )
    .default("10000"),
    s(
        "kquota.cluster.client.*",
        "a librdkafka property for kquotad's own Kafka clients",
    ),
    s(
        "log.format",
        "how log lines are written: text, or json (one object a line) for log shippers",
    )
    .flag("--log-format")
    .default("text"),
]);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_has_help_and_documentation_and_the_doc_agrees() {
        SETTINGS
            .check_doc_table(include_str!("../../../docs/kquotad-settings.md"))
            .unwrap();
    }
}
