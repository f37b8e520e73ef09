//! kquota-proxy: client quotas enforced on Kafka traffic, in front of a Kafka cluster.
//!
//! The proxy forwards Kafka clients to a cluster and meters every request with the kquota engine,
//! as Kafka's broker meters its own quotas: Produce request bytes against `producer_byte_rate`,
//! Fetch answer bytes against `consumer_byte_rate` (a throttled Fetch answered empty, KIP-219, and
//! `max_bytes` capped to the quota window), the proxy's own time against `request_percentage`,
//! created and deleted partitions against `controller_mutation_rate` (strict versions refused with
//! THROTTLING_QUOTA_EXCEEDED), and new connections per IP against `connection_creation_rate`. A
//! throttled answer carries the longer of the proxy's and the broker's `throttle_time_ms`, and the
//! connection is not read again until the throttle is over. The quota admin APIs
//! (DescribeClientQuotas, AlterClientQuotas) are answered by the proxy from its own engine and
//! durable store. A connection's user is the principal its SASL exchange with the broker
//! authenticated, or its TLS client certificate's; its client-id comes from every request header.
//!
//! The proxy listens on a bootstrap address and on one address per broker of the cluster. Each
//! client connection gets its own connection to the broker its listener stands for (the bootstrap
//! listener's: the cluster's bootstrap address), and every request and every response crosses it
//! unchanged, as its bytes, in order, pipelined (up to [`ProxySettings::max_in_flight`] requests
//! unanswered per connection) — except the responses that name brokers, in which each broker's
//! host and port are replaced by the proxy's listener for that broker, so that clients stay on
//! the proxy:
//!
//! | response | versions | what is rewritten |
//! | --- | --- | --- |
//! | Metadata (3) | 0–13 | `brokers` |
//! | FindCoordinator (10) | 0–6 | the coordinator (v0–3), `coordinators` (v4+) |
//! | DescribeCluster (60) | 0–2 | `brokers` (endpoint type 1) |
//! | Produce (0) | 10–13 | `node_endpoints` (KIP-951), when not empty |
//! | Fetch (1) | 16–18 | `node_endpoints` (KIP-951), when not empty |
//! | ApiVersions (18) | 0–4 | the max version of each API above capped to the table's |
//!
//! The versions are those `kafka-protocol` 0.18 decodes; ApiVersions never offers a client more,
//! and a request above them closes its connection. Broker N's listener is the broker map's entry
//! for N, else the listen base's IP at its port plus N, bound the first time a response names
//! broker N. Frames are bounded ([`ProxySettings::max_request_bytes`],
//! [`ProxySettings::max_response_bytes`]), as is a connection's idle time; a frame too large, a
//! request too short for its header, or a response that does not decode, or answers the wrong
//! correlation id, closes that connection with a log line. `docs/proxy.md` has the rest.
//!
//! Operators see who is throttled, by which rule, in Prometheus metrics
//! ([`ProxySettings::metrics_listen`]).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use kquota_proxy::{Proxy, ProxySettings};
//! let mut settings = ProxySettings::new("127.0.0.1:9092".parse()?, "kafka-1:9092".parse()?);
//! settings.listen_base = Some("127.0.0.1:19000".parse()?);
//! let proxy = Proxy::bind(settings.build()?).await?;
//! proxy.serve(async { /* until the host stops */ }).await;
//! # Ok(())
//! # }
//! ```

// One concern each: the settings, the start's errors, the listeners and the stop, one
// connection (its sockets, frames and loops), Kafka's messages as the proxy reads and writes them
// (no I/O), who a connection is by TLS, the quota state (engine, meter, store), the quota admin
// APIs, and the metrics.
mod admin;
mod connection;
mod error;
// Only the fuzz crate turns it on (and the unit tests, which sample messages with it).
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod messages;
mod metrics;
mod quotas;
mod reach;
mod server;
mod settings;
mod shared;
mod tls;

// The public interface: what the `kquota-proxy` binary, or a host embedding the proxy, needs.
//
// The proxy: bind it with its settings, then serve until a future resolves.
pub use crate::server::{BrokerListeners, Proxy};
pub use kquota_host::SHUTDOWN_GRACE;
// Its settings as given (by key, as a properties file names them, or by field), checked
// together into the configuration it binds with; their defaults, and the table of keys.
pub use crate::settings::{
    parse_properties, HostPort, InFlight, NotHostPort, ProxyConfig, ProxySettings,
    DEFAULT_BUFFER_MEMORY, DEFAULT_CONNECTION_GRACE, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DATA_DIR,
    DEFAULT_IDLE_TIMEOUT, DEFAULT_LISTEN, DEFAULT_MAX_BROKERS, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_IN_FLIGHT, DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_METRICS_MAX_BUCKETS, MAX_IN_FLIGHT, SETTINGS,
};
pub use kquota_host::settings::values::{Capacity, FrameSize, Timeout};
pub use kquota_host::settings::{Setting, Settings};
pub use kquota_host::{ThreadCount, MAX_NETWORK_THREADS};
// TLS towards clients and towards the cluster.
pub use crate::tls::{ClientTls, TlsConfigError, UpstreamTls};
// What can stop it from starting: a setting, or the start itself.
pub use crate::error::ProxyError;
pub use crate::settings::{ConfigError, ValueProblem};
pub use kquota_host::settings::{LineProblem, Problem, SettingError, Source};
