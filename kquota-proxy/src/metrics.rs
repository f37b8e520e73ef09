//! Prometheus metrics: who is throttled, by which quota, at what rate, and the proxy's own
//! counters, served at `GET /metrics` by the host layer's listener (`kquota_host::http`, with
//! `/healthz` and `/readyz`), in OpenMetrics or the classic text format as the scraper asks.
//!
//! Every metering bucket of the [`Meter`] is one set of series, labelled with who shares it
//! (`user`, `client_id`, `ip`: Kafka's quota tags, empty where not part of the bucket), its quota
//! key (`quota`) and the precedence level the quota came from (`level`). The measured rate uses
//! the name Kafka's quota metrics get from the Prometheus JMX exporter where Kafka has one:
//!
//! | quota type | measured value |
//! | --- | --- |
//! | `producer_byte_rate` | `kafka_server_produce_byte_rate` |
//! | `consumer_byte_rate` | `kafka_server_fetch_byte_rate` |
//! | `request_percentage` | `kafka_server_request_request_time` |
//! | `connection_creation_rate` | `kafka_server_socket_server_metrics_connection_accept_rate` |
//! | `controller_mutation_rate` | `kquota_proxy_controller_mutation_tokens` (a token bucket, not a rate) |
//!
//! and the rest are kquota's own: `kquota_proxy_bucket_limit`, `kquota_proxy_bucket_throttles`,
//! `kquota_proxy_bucket_throttle_time_seconds`, `kquota_proxy_bucket_recorded`, and for a bucket of
//! all of one user's client-ids, `kquota_proxy_bucket_client_rate`: which client-ids made up its
//! measured rate (at most [`MAX_CLIENTS_PER_BUCKET`], the rest `__other__`). At most `max_buckets`
//! buckets get series of their own (the most throttled, then the busiest, ties by name); the
//! others are summed per quota key into series labelled `__other__`, so that a scrape's size is
//! bounded whatever the clients call themselves. [`Stats`] are the proxy-wide counters.
//! `docs/proxy.md` has the full list.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use kquota::meter::{BucketOwner, BucketSnapshot, Meter};
use kquota::{BpsView, Level, QuotaKey, QuotaType};
use kquota_host::http::{with_host_families, ClusterState, Exporter};

use crate::reach::Reach;
use crate::settings::HostPort;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabel, EncodeLabelSet, EncodeLabelValue, EncodeMetric,
    LabelSetEncoder, LabelValueEncoder,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use tracing::warn;

/// The longest label value exported, in bytes; longer ones are cut at a character boundary.
/// User names and client-ids are the client's to choose, and each one is in every series of
/// its bucket.
pub(crate) const MAX_LABEL_BYTES: usize = 256;

/// The label value of the series that sum the buckets beyond `max_buckets`, and of a user's
/// client-ids beyond [`MAX_CLIENTS_PER_BUCKET`].
pub(crate) const OTHER: &str = "__other__";

/// The most client-ids a user's bucket names in `kquota_proxy_bucket_client_rate` (its busiest;
/// the rest are summed as `client_id="__other__"`). Of the 16 the meter keeps per bucket, so that
/// the ones named are the ones its table is surest of.
pub(crate) const MAX_CLIENTS_PER_BUCKET: usize = 5;

/// The kinds of throttle [`Stats::throttled`] counts, by their `kind` label: Kafka's quota groups
/// (Produce, Fetch, Request, ControllerMutation), lowercase.
pub(crate) const THROTTLE_KINDS: [&str; 4] = ["produce", "fetch", "request", "mutation"];

/// Proxy-wide counters, updated by connections with Relaxed atomics (cheap on the hot path).
///
/// Each counter is independent: a scrape may see one connection's bytes before its request
/// count, never a torn value.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    connections_accepted: AtomicU64,
    connections_throttled: AtomicU64,
    connections_refused: AtomicU64,
    /// Signed, so that a close counted before its open cannot wrap the gauge.
    connections_open: AtomicI64,
    protocol_errors: AtomicU64,
    bytes_from_clients: AtomicU64,
    bytes_to_clients: AtomicU64,
    requests_forwarded: AtomicU64,
    requests_local: AtomicU64,
    /// By [`THROTTLE_KINDS`].
    throttled: [AtomicU64; 4],
    throttle_ms: [AtomicU64; 4],
}

impl Stats {
    /// Counts a client connection accepted by a listener, before its `connection_creation_rate`
    /// is checked.
    pub(crate) fn connection_accepted(&self) {
        self.connections_accepted.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a new connection over its IP's `connection_creation_rate`: held unserved for the
    /// throttle time, then closed, as Kafka's acceptor does.
    pub(crate) fn connection_throttled(&self) {
        self.connections_throttled.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a new connection refused at `max.connections` (none could give way) or
    /// `max.connections.per.ip`.
    pub(crate) fn connection_refused(&self) {
        self.connections_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a client connection open (served: TLS, if any, is done; its broker connection is
    /// opened at its first request to forward); pair each with [`Stats::connection_closed`].
    pub(crate) fn connection_opened(&self) {
        self.connections_open.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an open client connection closed.
    pub(crate) fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
    }

    /// Counts a connection closed for a protocol error (a frame too large or malformed, a
    /// response that does not decode...).
    pub(crate) fn protocol_error(&self) {
        self.protocol_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts `n` bytes read from a client.
    pub(crate) fn bytes_from_client(&self, n: usize) {
        self.bytes_from_clients
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts `n` bytes written to a client.
    pub(crate) fn bytes_to_client(&self, n: usize) {
        self.bytes_to_clients.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts a request forwarded to the cluster.
    pub(crate) fn request_forwarded(&self) {
        self.requests_forwarded.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request the proxy answered itself (the quota admin APIs, refusals...).
    pub(crate) fn answered_locally(&self) {
        self.requests_local.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a response throttled `ms` for a quota of `kind`, one of [`THROTTLE_KINDS`]
    /// (`produce`, `fetch`, `request`, `mutation`). `ms == 0` counts nothing, so callers need not
    /// check; another kind is a bug of the caller's, ignored in release builds.
    pub(crate) fn throttled(&self, kind: &str, ms: u64) {
        let Some(i) = THROTTLE_KINDS.iter().position(|k| *k == kind) else {
            debug_assert!(false, "unknown throttle kind {kind:?}");
            return;
        };
        if ms == 0 {
            return;
        }
        self.throttled[i].fetch_add(1, Ordering::Relaxed);
        self.throttle_ms[i].fetch_add(ms, Ordering::Relaxed);
    }

    /// The counters now, for one scrape.
    fn read(&self) -> StatsReading {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsReading {
            connections_accepted: load(&self.connections_accepted),
            connections_throttled: load(&self.connections_throttled),
            connections_refused: load(&self.connections_refused),
            connections_open: self.connections_open.load(Ordering::Relaxed).max(0),
            protocol_errors: load(&self.protocol_errors),
            bytes_from_clients: load(&self.bytes_from_clients),
            bytes_to_clients: load(&self.bytes_to_clients),
            requests_forwarded: load(&self.requests_forwarded),
            requests_local: load(&self.requests_local),
            throttled: self.throttled.each_ref().map(load),
            throttle_ms: self.throttle_ms.each_ref().map(load),
        }
    }
}

/// [`Stats`] as one scrape read them.
#[derive(Debug)]
struct StatsReading {
    connections_accepted: u64,
    connections_throttled: u64,
    connections_refused: u64,
    connections_open: i64,
    protocol_errors: u64,
    bytes_from_clients: u64,
    bytes_to_clients: u64,
    requests_forwarded: u64,
    requests_local: u64,
    throttled: [u64; 4],
    throttle_ms: [u64; 4],
}

impl Collector for StatsReading {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let counters = [
            (
                "kquota_proxy_connections_accepted",
                "Client connections accepted by the proxy's listeners.",
                self.connections_accepted,
            ),
            (
                "kquota_proxy_connections_throttled",
                "New connections over their IP's connection_creation_rate, held unserved for the throttle time and closed.",
                self.connections_throttled,
            ),
            (
                "kquota_proxy_connections_refused",
                "New connections refused at max.connections (none could give way) or max.connections.per.ip.",
                self.connections_refused,
            ),
            (
                "kquota_proxy_protocol_errors",
                "Connections closed for a protocol error.",
                self.protocol_errors,
            ),
            (
                "kquota_proxy_bytes_from_clients",
                "Bytes read from clients.",
                self.bytes_from_clients,
            ),
            (
                "kquota_proxy_bytes_to_clients",
                "Bytes written to clients.",
                self.bytes_to_clients,
            ),
            (
                "kquota_proxy_requests_forwarded",
                "Requests forwarded to the cluster.",
                self.requests_forwarded,
            ),
            (
                "kquota_proxy_requests_answered_locally",
                "Requests the proxy answered itself.",
                self.requests_local,
            ),
        ];
        for (name, help, value) in counters {
            let metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(value).encode(metric)?;
        }
        let metric = encoder.encode_descriptor(
            "kquota_proxy_connections_open",
            "Client connections open now (served; the broker connection is opened at the first request to forward).",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(self.connections_open).encode(metric)?;
        let kinds = THROTTLE_KINDS.map(|k| [("kind", k)]);
        family(
            &mut encoder,
            "kquota_proxy_throttled_responses",
            "Responses throttled, by the kind of quota that throttled them.",
            MetricType::Counter,
            kinds
                .iter()
                .zip(self.throttled)
                .map(|(l, v)| (l, ConstCounter::new(v))),
        )?;
        family(
            &mut encoder,
            "kquota_proxy_throttle_time_seconds",
            "Seconds of throttle handed out, by the kind of quota.",
            MetricType::Counter,
            kinds
                .iter()
                .zip(self.throttle_ms)
                .map(|(l, v)| (l, ConstCounter::new(v as f64 / 1000.0))),
        )
    }
}

/// Encodes one metric family, or nothing if it has no series (a family of no samples is noise).
fn family<'a, L, M>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    metric_type: MetricType,
    rows: impl IntoIterator<Item = (&'a L, M)>,
) -> fmt::Result
where
    L: EncodeLabelSet + 'a,
    M: EncodeMetric,
{
    let mut rows = rows.into_iter().peekable();
    if rows.peek().is_none() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, None, metric_type)?;
    for (labels, value) in rows {
        value.encode(metric.encode_family(labels)?)?;
    }
    Ok(())
}

/// The `level` label: where a bucket's quota came from, a stable spelling of [`Level`] (whose
/// `Display` is its number), or `ip` for `connection_creation_rate`.
fn level_label(level: Option<Level>) -> &'static str {
    match level {
        Some(Level::UserClient) => "user_client",
        Some(Level::UserDefaultClient) => "user_default_client",
        Some(Level::User) => "user",
        Some(Level::DefaultUserClient) => "default_user_client",
        Some(Level::DefaultUserDefaultClient) => "default_user_default_client",
        Some(Level::DefaultUser) => "default_user",
        Some(Level::ClientId) => "client_id",
        Some(Level::DefaultClientId) => "default_client_id",
        None => "ip",
    }
}

/// `s`, cut to at most [`MAX_LABEL_BYTES`] at a character boundary.
fn capped(s: &str) -> &str {
    if s.len() <= MAX_LABEL_BYTES {
        return s;
    }
    let mut end = MAX_LABEL_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.get(..end).unwrap_or_default()
}

/// A label value written with OpenMetrics' escapes (`\\`, `\"`, `\n`): prometheus-client 0.24
/// writes label values as they are, and one quote or newline in a client-id would make the whole
/// scrape unparseable.
struct Escaped<'a>(&'a str);

impl EncodeLabelValue for Escaped<'_> {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> fmt::Result {
        let mut rest = self.0;
        while let Some(i) = rest.find(['\\', '"', '\n']) {
            let (plain, special) = rest.split_at(i);
            encoder.write_str(plain)?;
            encoder.write_str(match special.as_bytes().first() {
                Some(b'\\') => "\\\\",
                Some(b'"') => "\\\"",
                _ => "\\n",
            })?;
            rest = special.get(1..).unwrap_or_default();
        }
        encoder.write_str(rest)
    }
}

/// The labels of one bucket's series. Ordered by quota key first, so that a family's series
/// come grouped by key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct BucketLabels {
    key: QuotaKey,
    user: String,
    client_id: String,
    ip: String,
    level: &'static str,
}

impl BucketLabels {
    /// The labels of `bucket`, its names capped.
    fn of(bucket: &BucketSnapshot) -> BucketLabels {
        let (user, client_id, ip) = match &bucket.owner {
            BucketOwner::UserClient(u, c) => (capped(u), capped(c), ""),
            BucketOwner::User(u) => (capped(u), "", ""),
            BucketOwner::ClientId(c) => ("", capped(c), ""),
            BucketOwner::Ip(ip) => ("", "", capped(ip)),
        };
        BucketLabels {
            key: bucket.key,
            user: user.to_owned(),
            client_id: client_id.to_owned(),
            ip: ip.to_owned(),
            level: level_label(bucket.level),
        }
    }

    /// The labels of the series that sum `key`'s folded buckets. No bucket has level
    /// `__other__`, so these never collide with a bucket's own, even a client named `__other__`.
    fn other(key: QuotaKey) -> BucketLabels {
        let (names, ip) = if key.is_ip_key() {
            ("", OTHER)
        } else {
            (OTHER, "")
        };
        BucketLabels {
            key,
            user: names.to_owned(),
            client_id: names.to_owned(),
            ip: ip.to_owned(),
            level: OTHER,
        }
    }
}

impl EncodeLabelSet for BucketLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> fmt::Result {
        let quota = self.key.to_string();
        for (name, value) in [
            ("user", self.user.as_str()),
            ("client_id", &self.client_id),
            ("ip", &self.ip),
            ("quota", &quota),
            ("level", self.level),
        ] {
            (name, Escaped(value)).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

/// A bucket's labels and the `view` its `bps` limit came from.
#[derive(Debug)]
struct ViewLabels<'a> {
    bucket: &'a BucketLabels,
    view: BpsView,
}

impl EncodeLabelSet for ViewLabels<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> fmt::Result {
        self.bucket.encode(encoder)?;
        ("view", self.view.as_str()).encode(encoder.encode_label())
    }
}

/// The values of one bucket series: one bucket's, or the sum of several (folded buckets, or
/// buckets whose capped names coincide).
#[derive(Clone, Copy, Debug, Default)]
struct BucketValues {
    measured: f64,
    limit: f64,
    recorded: f64,
    throttles: u64,
    throttle_ms: u64,
    /// Which view a `bps` limit came from: the first bucket's, for a series of several.
    view: Option<BpsView>,
}

impl BucketValues {
    fn add(&mut self, b: &BucketSnapshot) {
        self.view = self.view.or(b.bps_view);
        self.measured += finite(b.measured);
        self.limit += finite(b.limit);
        self.recorded += finite(b.recorded_total).max(0.0);
        self.throttles = self.throttles.saturating_add(b.throttle_count);
        self.throttle_ms = self.throttle_ms.saturating_add(b.throttle_ms_total);
    }
}

/// `v`, finite: the text format's float spelling for infinities is not one every parser takes.
fn finite(v: f64) -> f64 {
    if v.is_nan() {
        0.0
    } else {
        v.clamp(f64::MIN, f64::MAX)
    }
}

/// How busy a bucket is, for choosing which buckets get series of their own: its rate, or for a
/// token bucket (mutations) how far it is in debt.
fn activity(b: &BucketSnapshot) -> f64 {
    let v = finite(b.measured);
    if b.key.quota_type() == QuotaType::ControllerMutationRate {
        -v
    } else {
        v
    }
}

/// The measured-value family of each quota type: Kafka's name where Kafka has the same quantity.
const MEASURED: [(QuotaType, &str, &str); 5] = [
    (
        QuotaType::ProducerByteRate,
        "kafka_server_produce_byte_rate",
        "Bytes per second produced into the bucket over the quota window (Kafka's Produce byte-rate).",
    ),
    (
        QuotaType::ConsumerByteRate,
        "kafka_server_fetch_byte_rate",
        "Bytes per second fetched from the bucket over the quota window (Kafka's Fetch byte-rate).",
    ),
    (
        QuotaType::RequestPercentage,
        "kafka_server_request_request_time",
        "Percent of one thread's time the bucket's requests took, over the quota window (Kafka's Request request-time).",
    ),
    (
        QuotaType::ControllerMutationRate,
        "kquota_proxy_controller_mutation_tokens",
        "Partition mutations the bucket may still make now (negative: in debt).",
    ),
    (
        QuotaType::ConnectionCreationRate,
        "kafka_server_socket_server_metrics_connection_accept_rate",
        "New connections per second from the IP over the quota window (Kafka's per-IP connection-accept-rate).",
    ),
];

/// The buckets one scrape exports: at most `max_buckets` series of their own, and the rest summed
/// per quota key.
#[derive(Debug)]
struct Buckets {
    series: BTreeMap<BucketLabels, BucketValues>,
    /// Each exported user bucket's client-ids and their parts of its rate: the bucket's labels
    /// with `client_id` the contributor's.
    clients: BTreeMap<BucketLabels, f64>,
    total: usize,
    folded: usize,
}

impl Buckets {
    /// Chooses the `max_buckets` buckets that get series of their own: the most throttle time,
    /// then the most throttles, then the busiest; ties in the snapshot's order (by owner, then
    /// key). A selection, not a sort, so the cost beyond the snapshot grows with `max_buckets`.
    fn select(buckets: &[BucketSnapshot], max_buckets: usize) -> Buckets {
        let rank = |&i: &usize, &j: &usize| {
            let (a, b) = (&buckets[i], &buckets[j]);
            b.throttle_ms_total
                .cmp(&a.throttle_ms_total)
                .then(b.throttle_count.cmp(&a.throttle_count))
                .then(activity(b).total_cmp(&activity(a)))
                .then(i.cmp(&j))
        };
        let mut order: Vec<usize> = (0..buckets.len()).collect();
        let kept = max_buckets.min(order.len());
        if kept < order.len() {
            order.select_nth_unstable_by(kept, rank);
        }
        let (own, folded) = order.split_at(kept);
        let mut series = BTreeMap::new();
        let mut clients = BTreeMap::new();
        for &i in own {
            let b = &buckets[i];
            let labels = BucketLabels::of(b);
            add_clients(&mut clients, &labels, b);
            // Capped names can coincide: such buckets share one series rather than repeat it.
            series
                .entry(labels)
                .or_insert_with(BucketValues::default)
                .add(b);
        }
        let mut other: BTreeMap<QuotaKey, BucketValues> = BTreeMap::new();
        for &i in folded {
            let b = &buckets[i];
            other.entry(b.key).or_default().add(b);
        }
        // A sum of buckets has no one view.
        for v in other.values_mut() {
            v.view = None;
        }
        series.extend(other.into_iter().map(|(k, v)| (BucketLabels::other(k), v)));
        Buckets {
            series,
            clients,
            total: buckets.len(),
            folded: folded.len(),
        }
    }
}

/// Adds the client-ids of `b`, a bucket exported with `labels`, to `out`: its busiest
/// [`MAX_CLIENTS_PER_BUCKET`] by name (capped), the rest and what the meter could not name summed
/// as [`OTHER`]. Parts whose labels coincide (capped names, or a client-id that is itself
/// `__other__`) are summed.
fn add_clients(out: &mut BTreeMap<BucketLabels, f64>, labels: &BucketLabels, b: &BucketSnapshot) {
    // Only a bucket without a client-id of its own has its client-ids in that label.
    if !labels.client_id.is_empty() || (b.clients.is_empty() && b.clients_other <= 0.0) {
        return;
    }
    let mut add = |client_id: &str, rate: f64| {
        let labels = BucketLabels {
            client_id: client_id.to_owned(),
            ..labels.clone()
        };
        *out.entry(labels).or_default() += finite(rate).max(0.0);
    };
    let (named, rest) = b
        .clients
        .split_at(MAX_CLIENTS_PER_BUCKET.min(b.clients.len()));
    for (client_id, rate) in named {
        add(capped(client_id), *rate);
    }
    if !rest.is_empty() || b.clients_other > 0.0 {
        let other = rest.iter().map(|(_, r)| finite(*r).max(0.0)).sum::<f64>();
        add(OTHER, other + finite(b.clients_other));
    }
}

impl Collector for Buckets {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        for (ty, name, help) in MEASURED {
            family(
                &mut encoder,
                name,
                help,
                MetricType::Gauge,
                self.series
                    .iter()
                    .filter(|(l, _)| l.key.quota_type() == ty)
                    .map(|(l, v)| (l, ConstGauge::new(v.measured))),
            )?;
        }
        family(
            &mut encoder,
            "kquota_proxy_bucket_client_rate",
            "For a bucket of all of one user's client-ids: the part of its measured rate (in its units) each client-id made, its busiest by name and the rest summed as __other__.",
            MetricType::Gauge,
            self.clients.iter().map(|(l, v)| (l, ConstGauge::new(*v))),
        )?;
        family(
            &mut encoder,
            "kquota_proxy_bucket_limit",
            "The bucket's limit in this proxy's terms (bytes/s, percent, mutations/s, connections/s).",
            MetricType::Gauge,
            self.series
                .iter()
                .map(|(l, v)| (l, ConstGauge::new(v.limit))),
        )?;
        let views: Vec<(ViewLabels<'_>, f64)> = self
            .series
            .iter()
            .filter_map(|(l, v)| {
                let view = v.view?;
                Some((ViewLabels { bucket: l, view }, 1.0))
            })
            .collect();
        family(
            &mut encoder,
            "kquota_proxy_bucket_limit_view",
            "Where a bps bucket's limit came from (1 for its view): live_count (the cluster-wide limit divided by the live instances), shared_usage (this instance's part by the usage the instances share) or stale (shared usage too old: divided by the live instances).",
            MetricType::Gauge,
            views.iter().map(|(l, v)| (l, ConstGauge::new(*v))),
        )?;
        family(
            &mut encoder,
            "kquota_proxy_bucket_throttles",
            "Decisions that throttled the bucket.",
            MetricType::Counter,
            self.series
                .iter()
                .map(|(l, v)| (l, ConstCounter::new(v.throttles))),
        )?;
        family(
            &mut encoder,
            "kquota_proxy_bucket_throttle_time_seconds",
            "Seconds of throttle handed to the bucket.",
            MetricType::Counter,
            self.series
                .iter()
                .map(|(l, v)| (l, ConstCounter::new(v.throttle_ms as f64 / 1000.0))),
        )?;
        family(
            &mut encoder,
            "kquota_proxy_bucket_recorded",
            "Everything recorded into the bucket: bytes, hundredths of a second of thread time (request_percentage), mutations, connections.",
            MetricType::Counter,
            self.series
                .iter()
                .map(|(l, v)| (l, ConstCounter::new(v.recorded))),
        )?;
        for (name, help, value) in [
            (
                "kquota_proxy_buckets",
                "Metering buckets active now.",
                self.total,
            ),
            (
                "kquota_proxy_buckets_folded",
                "Buckets beyond --metrics-max-buckets, summed into the __other__ series.",
                self.folded,
            ),
        ] {
            let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(value).encode(metric)?;
        }
        Ok(())
    }
}

/// The text a scrape gets: the proxy-wide counters, then every bucket of `meter` (at most
/// `max_buckets` of them with series of their own), in the OpenMetrics text format.
pub(crate) fn render(meter: &Meter, stats: &Stats, max_buckets: usize) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(stats.read()));
    registry.register_collector(Box::new(Buckets::select(&meter.snapshot(), max_buckets)));
    let mut text = String::new();
    // Writing into a String cannot fail, and no collector above returns an error of its own; a
    // text cut short would lack its `# EOF` and be refused whole by the scraper.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &registry) {
        warn!("metrics: encoding a scrape failed: {e}");
    }
    text
}

/// What the proxy's metrics listener serves: its families and the host layer's, and whether it
/// is ready (its listener bound and serving, the configuration log applied and the cluster
/// reachable where it has one).
pub(crate) struct ProxyExporter {
    pub(crate) meter: Meter,
    pub(crate) stats: Arc<Stats>,
    pub(crate) max_buckets: usize,
    pub(crate) slots: Arc<kquota_host::Slots>,
    pub(crate) budget: kquota_host::Budget,
    pub(crate) cluster: ClusterState,
    /// Set once the bootstrap listener's accept loop runs.
    pub(crate) serving: Arc<AtomicBool>,
    /// Whether the cluster at `upstream` can be reached.
    pub(crate) reach: Arc<Reach>,
    pub(crate) upstream: HostPort,
}

impl Exporter for ProxyExporter {
    fn render(&self) -> String {
        with_host_families(
            render(&self.meter, &self.stats, self.max_buckets),
            &self.slots,
            &self.budget,
            &self.cluster,
        )
    }

    fn ready(&self) -> Result<(), String> {
        if !self.serving.load(Ordering::Acquire) {
            return Err("the proxy's listeners are not serving yet".to_owned());
        }
        if let Some(why) = self.reach.why_down() {
            return Err(format!(
                "the cluster at {} cannot be reached: {why}",
                self.upstream
            ));
        }
        self.cluster.ready()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kquota::meter::{ManualClock, MeterConfig};
    use kquota::{Alteration, Engine, Entity, EntityName};

    fn named(name: &str) -> EntityName {
        EntityName::named(name).unwrap()
    }

    /// A meter on a hand-moved clock over an engine with `quotas`.
    fn meter(quotas: &[Alteration]) -> (Meter, Arc<ManualClock>) {
        let engine = Arc::new(Engine::new());
        let results = engine.alter(quotas, false);
        assert!(results.iter().all(|r| r.error.is_none()), "{results:?}");
        let clock = Arc::new(ManualClock::new(1_000));
        let meter = Meter::with_clock(engine, clock.clone(), MeterConfig::default());
        (meter, clock)
    }

    /// Every sample of a scrape: `name{labels}` to its value, checking that each line is a
    /// comment or a sample of this exporter (a raw newline in a label would start another).
    fn samples(text: &str) -> BTreeMap<String, String> {
        assert!(text.ends_with("# EOF\n"), "{text}");
        let mut out = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(
                line.starts_with("kafka_server_") || line.starts_with("kquota_proxy_"),
                "not a sample: {line:?}"
            );
            let (series, value) = line.rsplit_once(' ').unwrap();
            let repeated = out.insert(series.to_owned(), value.to_owned());
            assert!(repeated.is_none(), "series twice: {series}");
        }
        out
    }

    fn value(samples: &BTreeMap<String, String>, series: &str) -> f64 {
        let v = samples
            .get(series)
            .unwrap_or_else(|| panic!("no {series} in {samples:#?}"));
        v.parse().unwrap()
    }

    fn labels(user: &str, client_id: &str, ip: &str, quota: &str, level: &str) -> String {
        format!(
            "{{user=\"{user}\",client_id=\"{client_id}\",ip=\"{ip}\",quota=\"{quota}\",level=\"{level}\"}}"
        )
    }

    fn bucket(meter: &Meter, owner: &BucketOwner, key: QuotaKey) -> BucketSnapshot {
        meter
            .snapshot()
            .into_iter()
            .find(|b| &b.owner == owner && b.key == key)
            .unwrap()
    }

    /// Produces `bytes` every 100 ms for `user`'s `client` until the meter throttles it.
    fn produce_until_throttled(meter: &Meter, clock: &ManualClock, user: &str, client: &str) {
        let mut client = meter.client(user, client);
        for _ in 0..1_000 {
            if client.produce(2_000).is_throttled() {
                return;
            }
            clock.advance(100);
        }
        panic!("{user} was never throttled");
    }

    /// Gives bob's bucket half of every `bps` limit, and declines for everyone else.
    #[derive(Debug)]
    struct HalfForBob;

    impl kquota::meter::BpsSplit for HalfForBob {
        fn local_limit(&self, _: QuotaKey, owner: &BucketOwner, limit: f64, _: u64) -> Option<f64> {
            (*owner == BucketOwner::User("bob".into())).then_some(limit / 2.0)
        }
    }

    #[test]
    fn bps_buckets_say_which_view_their_limit_came_from() {
        let (meter, _) = meter(&[
            Alteration::new(&Entity::User(named("alice"))).set("producer_byte_rate:bps", 8_000.0),
            Alteration::new(&Entity::User(named("bob"))).set("producer_byte_rate:bps", 8_000.0),
            Alteration::new(&Entity::User(named("carol"))).set("producer_byte_rate", 8_000.0),
        ]);
        let view = |user: &str, view: &str| {
            format!(
                "kquota_proxy_bucket_limit_view{{user=\"{user}\",client_id=\"\",ip=\"\",quota=\"producer_byte_rate:bps\",level=\"user\",view=\"{view}\"}}"
            )
        };
        let stats = Stats::default();
        let _ = meter.client("alice", "app").produce(10);
        let s = samples(&render(&meter, &stats, 100));
        assert_eq!(value(&s, &view("alice", "live_count")), 1.0);
        assert_eq!(
            s.keys().filter(|k| k.contains("limit_view")).count(),
            1,
            "one view series per bps bucket, none for other units"
        );
        assert!(meter.set_bps_split(Arc::new(HalfForBob)));
        for user in ["alice", "bob", "carol"] {
            let _ = meter.client(user, "app").produce(10);
        }
        let s = samples(&render(&meter, &stats, 100));
        assert_eq!(value(&s, &view("bob", "shared_usage")), 1.0);
        assert_eq!(value(&s, &view("alice", "stale")), 1.0);
        assert!(!s.contains_key(&view("alice", "live_count")), "{s:#?}");
        assert_eq!(s.keys().filter(|k| k.contains("limit_view")).count(), 2);
        let bob = labels("bob", "", "", "producer_byte_rate:bps", "user");
        assert_eq!(
            value(&s, &format!("kquota_proxy_bucket_limit{bob}")),
            4_000.0
        );
        // A sum of folded buckets has no one view.
        let s = samples(&render(&meter, &stats, 0));
        assert_eq!(s.keys().filter(|k| k.contains("limit_view")).count(), 0);
    }

    #[test]
    fn buckets_say_who_is_throttled_by_which_quota_at_what_rate() {
        let (meter, clock) = meter(&[
            Alteration::new(&Entity::User(named("alice"))).set("producer_byte_rate", 10_000.0),
            Alteration::new(&Entity::ClientId(EntityName::Default))
                .set("consumer_byte_rate", 5_000.0),
            Alteration::new(&Entity::Ip(EntityName::Default)).set("connection_creation_rate", 2.0),
        ]);
        produce_until_throttled(&meter, &clock, "alice", "app");
        let mut alice = meter.client("alice", "app");
        let _ = alice.produce(2_000);
        let _ = alice.fetch(700);
        for _ in 0..3 {
            let _ = meter.connection("10.0.0.1");
        }
        let stats = Arc::new(Stats::default());
        let text = render(&meter, &stats, 100);
        let s = samples(&text);

        let produce = bucket(
            &meter,
            &BucketOwner::User("alice".into()),
            QuotaKey::PRODUCER_BROKER_BPS,
        );
        assert!(produce.throttle_count >= 2 && produce.throttle_ms_total > 0);
        let who = labels("alice", "", "", "producer_byte_rate", "user");
        assert_eq!(
            value(&s, &format!("kafka_server_produce_byte_rate{who}")),
            produce.measured
        );
        assert!(produce.measured > 10_000.0);
        assert_eq!(
            value(&s, &format!("kquota_proxy_bucket_limit{who}")),
            10_000.0
        );
        assert_eq!(
            value(&s, &format!("kquota_proxy_bucket_throttles_total{who}")),
            produce.throttle_count as f64
        );
        assert_eq!(
            value(
                &s,
                &format!("kquota_proxy_bucket_throttle_time_seconds_total{who}")
            ),
            produce.throttle_ms_total as f64 / 1000.0
        );
        assert_eq!(
            value(&s, &format!("kquota_proxy_bucket_recorded_total{who}")),
            produce.recorded_total
        );

        // The client-id default: one bucket per client-id, whoever the user.
        let fetch = bucket(
            &meter,
            &BucketOwner::ClientId("app".into()),
            QuotaKey::CONSUMER_BROKER_BPS,
        );
        let who = labels("", "app", "", "consumer_byte_rate", "default_client_id");
        assert_eq!(
            value(&s, &format!("kafka_server_fetch_byte_rate{who}")),
            fetch.measured
        );
        assert_eq!(
            value(&s, &format!("kquota_proxy_bucket_recorded_total{who}")),
            700.0
        );
        assert_eq!(
            value(&s, &format!("kquota_proxy_bucket_throttles_total{who}")),
            0.0
        );

        let connections = bucket(
            &meter,
            &BucketOwner::Ip("10.0.0.1".into()),
            QuotaKey::CONNECTION_CREATION_RATE,
        );
        let who = labels("", "", "10.0.0.1", "connection_creation_rate", "ip");
        assert_eq!(
            value(
                &s,
                &format!("kafka_server_socket_server_metrics_connection_accept_rate{who}")
            ),
            connections.measured
        );
        assert_eq!(value(&s, &format!("kquota_proxy_bucket_limit{who}")), 2.0);

        assert_eq!(value(&s, "kquota_proxy_buckets"), 3.0);
        assert_eq!(value(&s, "kquota_proxy_buckets_folded"), 0.0);
        assert!(text.contains("# TYPE kafka_server_produce_byte_rate gauge\n"));
        assert!(text.contains("# TYPE kquota_proxy_bucket_throttles counter\n"));
        // No request_percentage or mutation quota: no empty families.
        assert!(!text.contains("kafka_server_request_request_time"));
        assert!(!text.contains("kquota_proxy_controller_mutation_tokens"));
    }

    #[test]
    fn stats_are_counted_and_rendered() {
        let (meter, _) = meter(&[]);
        let stats = Stats::default();
        for _ in 0..3 {
            stats.connection_accepted();
        }
        stats.connection_throttled();
        stats.connection_refused();
        stats.connection_refused();
        stats.connection_opened();
        stats.connection_opened();
        stats.connection_closed();
        stats.protocol_error();
        stats.bytes_from_client(100);
        stats.bytes_to_client(4_000);
        stats.request_forwarded();
        stats.request_forwarded();
        stats.answered_locally();
        stats.throttled("produce", 120);
        stats.throttled("produce", 30);
        stats.throttled("fetch", 0);
        stats.throttled("mutation", 1_000);
        let s = samples(&render(&meter, &stats, 10));
        for (series, v) in [
            ("kquota_proxy_connections_accepted_total", 3.0),
            ("kquota_proxy_connections_throttled_total", 1.0),
            ("kquota_proxy_connections_open", 1.0),
            ("kquota_proxy_connections_refused_total", 2.0),
            ("kquota_proxy_protocol_errors_total", 1.0),
            ("kquota_proxy_bytes_from_clients_total", 100.0),
            ("kquota_proxy_bytes_to_clients_total", 4_000.0),
            ("kquota_proxy_requests_forwarded_total", 2.0),
            ("kquota_proxy_requests_answered_locally_total", 1.0),
            (
                "kquota_proxy_throttled_responses_total{kind=\"produce\"}",
                2.0,
            ),
            (
                "kquota_proxy_throttle_time_seconds_total{kind=\"produce\"}",
                0.15,
            ),
            (
                "kquota_proxy_throttled_responses_total{kind=\"fetch\"}",
                0.0,
            ),
            (
                "kquota_proxy_throttle_time_seconds_total{kind=\"fetch\"}",
                0.0,
            ),
            (
                "kquota_proxy_throttled_responses_total{kind=\"request\"}",
                0.0,
            ),
            (
                "kquota_proxy_throttled_responses_total{kind=\"mutation\"}",
                1.0,
            ),
            (
                "kquota_proxy_throttle_time_seconds_total{kind=\"mutation\"}",
                1.0,
            ),
            ("kquota_proxy_buckets", 0.0),
            ("kquota_proxy_buckets_folded", 0.0),
        ] {
            assert_eq!(value(&s, series), v, "{series}");
        }
        assert_eq!(s.len(), 8 + 1 + 8 + 2);
        stats.connection_closed();
        stats.connection_closed();
        let s = samples(&render(&meter, &stats, 10));
        assert_eq!(
            value(&s, "kquota_proxy_connections_open"),
            0.0,
            "never below 0"
        );
    }

    #[test]
    fn buckets_beyond_the_maximum_are_folded() {
        let (meter, clock) =
            meter(&[Alteration::new(&Entity::User(EntityName::Default))
                .set("producer_byte_rate", 10_000.0)]);
        // u1 throttled most, u2 once; u3 to u5 unthrottled, u5 the busiest of them.
        produce_until_throttled(&meter, &clock, "u1", "app");
        produce_until_throttled(&meter, &clock, "u1", "app");
        produce_until_throttled(&meter, &clock, "u2", "app");
        for (user, bytes) in [("u3", 100), ("u4", 200), ("u5", 900)] {
            let _ = meter.client(user, "app").produce(bytes);
        }
        let snap = |user: &str| {
            bucket(
                &meter,
                &BucketOwner::User(user.into()),
                QuotaKey::PRODUCER_BROKER_BPS,
            )
        };
        let (u1, u2) = (snap("u1"), snap("u2"));
        assert!(u1.throttle_ms_total > u2.throttle_ms_total && u2.throttle_ms_total > 0);
        assert_eq!(snap("u5").throttle_count, 0);

        let stats = Stats::default();
        let text = render(&meter, &stats, 3);
        assert_eq!(
            text,
            render(&meter, &stats, 3),
            "the same meter, the same text"
        );
        let s = samples(&text);
        let rate = |user: &str, level: &str| {
            format!(
                "kafka_server_produce_byte_rate{}",
                labels(user, "", "", "producer_byte_rate", level)
            )
        };
        for user in ["u1", "u2", "u5"] {
            assert_eq!(value(&s, &rate(user, "default_user")), snap(user).measured);
        }
        assert!(!s.contains_key(&rate("u3", "default_user")));
        assert!(!s.contains_key(&rate("u4", "default_user")));
        let other = labels(OTHER, OTHER, "", "producer_byte_rate", OTHER);
        assert_eq!(
            value(&s, &format!("kafka_server_produce_byte_rate{other}")),
            snap("u3").measured + snap("u4").measured
        );
        assert_eq!(
            value(&s, &format!("kquota_proxy_bucket_recorded_total{other}")),
            300.0
        );
        assert_eq!(
            value(&s, &format!("kquota_proxy_bucket_limit{other}")),
            20_000.0
        );
        assert_eq!(value(&s, "kquota_proxy_buckets"), 5.0);
        assert_eq!(value(&s, "kquota_proxy_buckets_folded"), 2.0);
        // Three series of their own and one __other__, in each of the five bucket families; the
        // three own buckets' one client-id each, and none for the folded.
        assert_eq!(s.len(), 5 * 4 + 3 + 2 + 8 + 1 + 8);
        let client = |user: &str| {
            format!(
                "kquota_proxy_bucket_client_rate{}",
                labels(user, "app", "", "producer_byte_rate", "default_user")
            )
        };
        assert_eq!(value(&s, &client("u5")), snap("u5").measured);
        assert!(!s.contains_key(&client("u3")));

        // Nothing of its own: one __other__ series with everything.
        let s = samples(&render(&meter, &stats, 0));
        assert_eq!(value(&s, "kquota_proxy_buckets_folded"), 5.0);
        assert!(!s.contains_key(&rate("u1", "default_user")));
        assert_eq!(
            value(&s, &format!("kquota_proxy_bucket_throttles_total{other}")),
            ["u1", "u2", "u3", "u4", "u5"]
                .map(|u| snap(u).throttle_count as f64)
                .iter()
                .sum::<f64>()
        );
    }

    #[test]
    fn a_users_bucket_names_its_busiest_client_ids_and_sums_the_rest() {
        let (meter, clock) = meter(&[
            Alteration::new(&Entity::User(named("alice"))).set("producer_byte_rate", 1e9),
            Alteration::new(&Entity::UserClient(named("bob"), EntityName::Default))
                .set("producer_byte_rate", 1e9),
        ]);
        let evil = format!("ev\"il\n{}", "x".repeat(300));
        // Seven client-ids, the busiest the hostile one; bob's buckets are his client-ids' own.
        let clients = [evil.as_str(), "c1", "c2", "c3", "c4", "c5", "c6"];
        let mut meters: Vec<_> = clients.iter().map(|c| meter.client("alice", c)).collect();
        for _ in 0..5 {
            for (i, m) in meters.iter_mut().enumerate() {
                let _ = m.produce(7_000 - 1_000 * i as u64);
            }
            let _ = meter.client("bob", "b1").produce(100);
            clock.advance(1_000);
        }
        drop(meters);
        let snap = bucket(
            &meter,
            &BucketOwner::User("alice".into()),
            QuotaKey::PRODUCER_BROKER_BPS,
        );
        assert_eq!(snap.clients.len(), 7);
        let text = render(&meter, &Stats::default(), 100);
        let s = samples(&text);
        let series = |client: &str| {
            format!(
                "kquota_proxy_bucket_client_rate{}",
                labels("alice", client, "", "producer_byte_rate", "user")
            )
        };
        let kept = format!("ev\\\"il\\n{}", "x".repeat(256 - 6));
        assert_eq!(value(&s, &series(&kept)), snap.clients[0].1);
        for (i, client) in ["c1", "c2", "c3", "c4"].iter().enumerate() {
            assert_eq!(
                value(&s, &series(client)),
                snap.clients[i + 1].1,
                "{client}"
            );
        }
        assert!(!s.contains_key(&series("c5")) && !s.contains_key(&series("c6")));
        let other = value(&s, &series(OTHER));
        assert_eq!(other, snap.clients[5].1 + snap.clients[6].1);
        // The parts add up to the bucket's rate.
        let parts: f64 = s
            .iter()
            .filter(|(k, _)| k.starts_with("kquota_proxy_bucket_client_rate{user=\"alice\""))
            .map(|(_, v)| v.parse::<f64>().unwrap())
            .sum();
        let rate = value(
            &s,
            &format!(
                "kafka_server_produce_byte_rate{}",
                labels("alice", "", "", "producer_byte_rate", "user")
            ),
        );
        assert!((parts - rate).abs() < 1e-9 * rate, "{parts} against {rate}");
        assert_eq!(
            s.keys()
                .filter(|k| k.starts_with("kquota_proxy_bucket_client_rate"))
                .count(),
            MAX_CLIENTS_PER_BUCKET + 1,
            "none for bob's own bucket"
        );
        assert!(text.contains("# TYPE kquota_proxy_bucket_client_rate gauge\n"));
        // A folded bucket names no client-id.
        let s = samples(&render(&meter, &Stats::default(), 0));
        assert!(!s.keys().any(|k| k.contains("client_rate")), "{s:#?}");
    }

    #[test]
    fn ties_go_to_the_first_by_name() {
        let (meter, _) =
            meter(&[Alteration::new(&Entity::User(EntityName::Default))
                .set("producer_byte_rate", 10_000.0)]);
        for user in ["carol", "alice", "bob"] {
            let _ = meter.client(user, "app").produce(500);
        }
        let s = samples(&render(&meter, &Stats::default(), 1));
        let rate = |user: &str| {
            format!(
                "kafka_server_produce_byte_rate{}",
                labels(user, "", "", "producer_byte_rate", "default_user")
            )
        };
        assert!(s.contains_key(&rate("alice")));
        assert!(!s.contains_key(&rate("bob")) && !s.contains_key(&rate("carol")));
    }

    #[test]
    fn hostile_names_are_escaped_and_capped() {
        let (meter, _) = meter(&[Alteration::new(&Entity::UserClient(
            EntityName::Default,
            EntityName::Default,
        ))
        .set("producer_byte_rate", 10_000.0)]);
        let evil = format!("ev\"il\nname\\{}", "é".repeat(300));
        let _ = meter.client("bob", &evil).produce(10);
        // Two client-ids alike in their first 256 bytes share one series.
        let long = "x".repeat(300);
        let _ = meter.client("bob", &format!("{long}1")).produce(10);
        let _ = meter.client("bob", &format!("{long}2")).produce(20);
        let text = render(&meter, &Stats::default(), 100);
        let s = samples(&text);

        // 11 bytes, then as many two-byte characters as fit in 256: 122.
        let kept = format!("ev\\\"il\\nname\\\\{}", "é".repeat(122));
        assert_eq!(capped(&evil).len(), 255);
        let who = labels(
            "bob",
            &kept,
            "",
            "producer_byte_rate",
            "default_user_default_client",
        );
        assert_eq!(
            value(&s, &format!("kquota_proxy_bucket_recorded_total{who}")),
            10.0
        );
        let who = labels(
            "bob",
            &"x".repeat(256),
            "",
            "producer_byte_rate",
            "default_user_default_client",
        );
        assert_eq!(
            value(&s, &format!("kquota_proxy_bucket_recorded_total{who}")),
            30.0
        );
        assert_eq!(
            value(&s, &format!("kquota_proxy_bucket_limit{who}")),
            20_000.0
        );
        assert_eq!(value(&s, "kquota_proxy_buckets"), 3.0);
        assert!(!text.contains(&"é".repeat(123)));
        assert!(!text.contains(&"x".repeat(257)));
    }

    #[test]
    fn escaping_and_capping_by_themselves() {
        let escape = |s: &str| {
            let mut registry = Registry::default();
            #[derive(Debug)]
            struct One(String);
            impl Collector for One {
                fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
                    let labels = [("v", Escaped(&self.0))];
                    family(
                        &mut encoder,
                        "t",
                        "t",
                        MetricType::Gauge,
                        [(&labels, ConstGauge::new(1))],
                    )
                }
            }
            registry.register_collector(Box::new(One(s.to_owned())));
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
            text.lines()
                .find(|l| l.starts_with("t{"))
                .unwrap()
                .to_owned()
        };
        assert_eq!(escape("plain"), "t{v=\"plain\"} 1");
        assert_eq!(escape("a\"b\\c\nd"), "t{v=\"a\\\"b\\\\c\\nd\"} 1");
        assert_eq!(escape("\n\n"), "t{v=\"\\n\\n\"} 1");
        assert_eq!(escape(""), "t{v=\"\"} 1");
        assert_eq!(capped("short"), "short");
        let four = "𝄞".repeat(100);
        assert_eq!(capped(&four).len(), 256);
        assert_eq!(capped(&format!("a{four}")).len(), 253);
    }
}
