//! kquota inside Apache Kafka's brokers: the native half of a KIP-257 client quota callback.
//!
//! A broker loads `io.kquota.kafka.KquotaCallback` (the Java half, in `java/`) by
//! `client.quota.callback.class`. Kafka's `ClientQuotaManager` keeps metering; it asks the callback
//! who shares a bucket (`quotaMetricTags`, on every request) and what a bucket's limit is
//! (`quotaLimit`), and tells it every quota change from the metadata log (`updateQuota`,
//! `removeQuota`). The Java half passes those calls here, to a [`kquota::Engine`]:
//!
//! - [`callback`]: the answers, for each of Kafka's four client quota types, under the `kafka`
//!   policy exactly as Kafka's `DefaultQuotaCallback` gives them, under `kip55` with sub-quotas
//!   carved from their user's total;
//! - [`names`]: Java strings as engine names, one for one (lone surrogates included);
//! - [`settings`]: the `kquota.*` keys of `server.properties`;
//! - `exports`: the JNI methods, each guarded so that no panic reaches the JVM;
//! - `registry`: the open callbacks by handle;
//! - `sources`: Kafka's metadata and kquota's configuration log in one engine, Kafka's winning
//!   where both set an entity's key;
//! - [`parts`]: this broker's part of a cluster-wide `bps` limit;
//! - [`usage`]: Kafka's quota sensors' readings as the usage the brokers share;
//! - `cluster` (the `cluster` feature): the broker as one of kquota's instances, following the
//!   configuration log and sharing its usage through Kafka, and `log`, its threads' log lines
//!   handed to the broker's log.
//!
//! `docs/kafka.md` covers installing the plug-in, its settings and how it behaves on a failure.

pub mod callback;
#[cfg(feature = "cluster")]
mod cluster;
mod exports;
#[cfg(feature = "cluster")]
mod log;
pub mod names;
pub mod parts;
mod registry;
pub mod settings;
mod sources;
pub mod usage;
