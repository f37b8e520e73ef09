//! Every key of the proxy, the flag that sets it, its default and what it does: the one table
//! that `kquota-proxy --help`, the errors that name a flag and `docs/proxy-settings.md` agree with
//! (tests check both).
//!
//! Keys are Kafka's where Kafka has the setting (`socket.request.max.bytes`, `max.connections`,
//! `super.users`, `ssl.client.auth`, ...), `kquotad`'s where `kquotad` has it (`kquota.data.dir`,
//! `kquota.cluster.*`, ...), and `kquota.proxy.*` for what only the proxy has.

use kquota_host::settings::{Setting, Settings};

// The keys that code or messages name.
pub(crate) const UPSTREAM: &str = "kquota.proxy.upstream";
pub(crate) const LISTEN_BASE: &str = "kquota.proxy.listen.base";
pub(crate) const BROKER_MAP: &str = "kquota.proxy.broker.map";
pub(crate) const TLS_CERT: &str = "kquota.proxy.ssl.certificate.location";
pub(crate) const TLS_KEY: &str = "kquota.proxy.ssl.key.location";
pub(crate) const TLS_CLIENT_CA: &str = "ssl.truststore.location";
pub(crate) const CLIENT_AUTH: &str = "ssl.client.auth";
pub(crate) const MAPPING_RULES: &str = "ssl.principal.mapping.rules";
pub(crate) const UPSTREAM_TLS: &str = "kquota.proxy.upstream.ssl.enable";
pub(crate) const UPSTREAM_CA: &str = "kquota.proxy.upstream.ssl.truststore.location";
pub(crate) const UPSTREAM_CERT: &str = "kquota.proxy.upstream.ssl.certificate.location";
pub(crate) const UPSTREAM_KEY: &str = "kquota.proxy.upstream.ssl.key.location";

const fn s(key: &'static str, flag: &'static str, help: &'static str) -> Setting {
    Setting::key(key, help).flag(flag)
}

/// Every setting of the proxy, in the order `kquota-proxy --help` lists them.
pub const SETTINGS: Settings = Settings(&[
    s(
        UPSTREAM,
        "--upstream",
        "the cluster's bootstrap address, HOST:PORT (required)",
    ),
    s(
        "kquota.proxy.listen",
        "--listen",
        "the bootstrap listener, IP:PORT",
    )
    .default("127.0.0.1:9092"),
    s(
        LISTEN_BASE,
        "--listen-base",
        "broker N listens on this IP at PORT+N",
    ),
    s(
        BROKER_MAP,
        "--broker-map",
        "NODE=IP:PORT[,...]: broker listeners, before the listen base",
    ),
    s(
        "kquota.proxy.advertised.host",
        "--advertised-host",
        "the host rewritten answers name",
    ),
    // Limits.
    s(
        "socket.request.max.bytes",
        "--max-request-bytes",
        "the largest request frame",
    )
    .default("104857600"),
    s(
        "kquota.proxy.max.response.bytes",
        "--max-response-bytes",
        "the largest answer frame",
    )
    .default("104857600"),
    s(
        "kquota.proxy.max.in.flight.requests",
        "--max-in-flight",
        "requests a connection may have unanswered",
    )
    .default("32"),
    s(
        "connections.max.idle.ms",
        "--idle-timeout-ms",
        "how long a silent peer is waited for",
    )
    .default("600000"),
    s(
        "kquota.proxy.connect.timeout.ms",
        "--connect-timeout-ms",
        "connecting to a broker, and a client's TLS handshake",
    )
    .default("10000"),
    s(
        "kquota.proxy.max.brokers",
        "--max-brokers",
        "brokers the proxy will listen for",
    )
    .default("1024"),
    s(
        "max.connections",
        "--max-connections",
        "client connections open at once",
    )
    .default("10000"),
    s(
        "max.connections.per.ip",
        "--max-connections-per-ip",
        "client connections open at once from one address (no limit)",
    ),
    s(
        "num.network.threads",
        "--num-network-threads",
        "the threads that serve client connections (one per CPU)",
    ),
    s(
        "kquota.connections.grace.ms",
        "--connection-grace-ms",
        "how long a new connection has to prove itself",
    )
    .default("10000"),
    s(
        "kquota.proxy.buffer.memory.bytes",
        "--buffer-memory-bytes",
        "bytes held at once for requests and answers in flight",
    )
    .default("268435456"),
    // Quotas.
    s(
        "kquota.data.dir",
        "--data-dir",
        "where quotas altered at the proxy are kept",
    )
    .default(super::config::DEFAULT_DATA_DIR),
    s(
        "kquota.proxy.store.enable",
        "--no-store",
        "false: keep quotas in memory only",
    )
    .default("true"),
    s(
        "super.users",
        "--super-users",
        "User:NAME[;...]: who may alter quotas",
    ),
    s(
        "kquota.describe.allow.anonymous",
        "--describe-allow-anonymous",
        "true: User:ANONYMOUS may describe quotas",
    )
    .default("false"),
    s(
        "kquota.draft.alter.quotas.enable",
        "--draft-alter-quotas",
        "true: serve the seeds' draft AlterQuotas on API key 50",
    )
    .default("false"),
    s(
        "kquota.sub.quota.policy",
        "--sub-quota-policy",
        "kip55 or kafka: how sub-quotas share",
    )
    .default("kip55"),
    s(
        "kquota.broker.count",
        "--instance-count",
        "the proxies :bps quotas are divided by",
    )
    .default("1"),
    s(
        "kquota.producer.capacity.bytes.per.sec",
        "--producer-capacity",
        "what producer_byte_rate:shares divides",
    ),
    s(
        "kquota.consumer.capacity.bytes.per.sec",
        "--consumer-capacity",
        "what consumer_byte_rate:shares divides",
    ),
    s(
        "quota.window.num",
        "--quota-window-num",
        "the samples a rate is measured over",
    )
    .default("11"),
    s(
        "quota.window.size.seconds",
        "--quota-window-size-seconds",
        "each sample's length",
    )
    .default("1"),
    // Many proxies.
    s(
        "kquota.cluster.bootstrap.servers",
        "--cluster-bootstrap",
        "share the configuration and bps usage through this Kafka cluster",
    ),
    s(
        "kquota.cluster.instance.id",
        "--instance-id",
        "this proxy's id among the others",
    ),
    s(
        "kquota.cluster.client.*",
        "--cluster-property",
        "a librdkafka property of the proxy's own Kafka clients",
    ),
    s(
        "kquota.cluster.config.topic",
        "--cluster-config-topic",
        "the configuration topic",
    )
    .default("_kquota_config"),
    s(
        "kquota.cluster.replication.factor",
        "--cluster-replication-factor",
        "the replication factor of the topics created",
    )
    .default("-1"),
    s(
        "kquota.cluster.alter.timeout.ms",
        "--cluster-alter-timeout-ms",
        "how long an alteration may wait for the configuration log",
    )
    .default("10000"),
    // Metrics.
    s(
        "kquota.proxy.metrics.listen",
        "--metrics-listen",
        "IP:PORT to serve /metrics on",
    ),
    s(
        "kquota.proxy.metrics.max.buckets",
        "--metrics-max-buckets",
        "buckets with series of their own",
    )
    .default("1000"),
    // The log.
    s(
        "log.format",
        "--log-format",
        "text, or json (one object a line)",
    )
    .default("text"),
    // TLS.
    s(
        TLS_CERT,
        "--tls-cert",
        "TLS towards clients: the certificate chain (PEM)",
    ),
    s(TLS_KEY, "--tls-key", "its private key (PEM)"),
    s(
        TLS_CLIENT_CA,
        "--tls-client-ca",
        "the CAs client certificates are checked against",
    ),
    s(
        CLIENT_AUTH,
        "--tls-client-auth",
        "none, requested or required",
    )
    .default("none"),
    s(
        MAPPING_RULES,
        "--ssl-principal-mapping-rules",
        "how a certificate's subject becomes a user",
    )
    .default("DEFAULT"),
    s(UPSTREAM_TLS, "--upstream-tls", "TLS towards the cluster").default("false"),
    s(
        UPSTREAM_CA,
        "--upstream-ca",
        "the CAs the cluster's certificates are checked against",
    ),
    s(
        UPSTREAM_CERT,
        "--upstream-cert",
        "a client certificate towards the cluster",
    ),
    s(UPSTREAM_KEY, "--upstream-key", "its private key"),
]);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_has_help_and_documentation_and_the_doc_agrees() {
        SETTINGS
            .check_doc_table(include_str!("../../../docs/proxy-settings.md"))
            .unwrap();
    }
}
