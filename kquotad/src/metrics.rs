//! `kquotad`'s metrics, served with `/healthz` and `/readyz` by the host layer's listener
//! (`kquota.metrics.listen`; see `docs/operations.md`, "Metrics and health"):
//!
//! | family | type | labels |
//! | --- | --- | --- |
//! | `kquotad_requests_total` | counter | `api` (Kafka's name), `error` (the answer's top-level Kafka error code by name; empty for APIs whose errors are per entry; `CLOSED` when the connection was closed instead) |
//! | `kquotad_alterations_total` | counter | `result` (each alteration's Kafka error code by name, `NONE` when applied, `COMMIT_FAILED` when the store or log refused the batch), `validate_only` |
//! | `kquotad_failed_authentications_total` | counter | — |
//! | `kquotad_store_commit_duration_seconds` | histogram | — |
//!
//! and the host layer's: connection slots (every open connection holds one), the request
//! budget, and with a cluster the configuration log's lag and the membership.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use kquota::{AlterResult, Alteration, Engine, EntityChange, ErrorCode, PersistError, Persistence};
use kquota_host::http::{with_host_families, ClusterState, Exporter};
use kquota_host::{Budget, Slots};
use kquota_wire::ApiKey;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tracing::warn;

/// Label sets: a few short pairs.
type Labels = Vec<(&'static str, String)>;

/// The server's own counters, shared by every connection.
pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
    alterations: Family<Labels, Counter>,
    failed_authentications: Counter,
    commit_seconds: Histogram,
    /// Whether apiKey 50 is the draft AlterQuotas here rather than DescribeUserScramCredentials.
    draft_alter_quotas: bool,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Every family registered, at zero. `draft_alter_quotas`: apiKey 50 is served as the draft
    /// AlterQuotas, so its requests are counted under that name and their errors per entry.
    pub(crate) fn new(draft_alter_quotas: bool) -> Metrics {
        let requests = Family::<Labels, Counter>::default();
        let alterations = Family::<Labels, Counter>::default();
        let failed_authentications = Counter::default();
        // 0.5 ms to about 4 s: an fsync on a fast disk to a configuration log's round trip.
        let commit_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 14));
        let mut registry = Registry::default();
        registry.register(
            "kquotad_requests",
            "Requests answered, by API and the answer's top-level error code (empty: the API's errors are per entry; CLOSED: the connection was closed instead)",
            requests.clone(),
        );
        registry.register(
            "kquotad_alterations",
            "Alterations committed or validated, by result (NONE: applied; COMMIT_FAILED: the store or configuration log refused the batch)",
            alterations.clone(),
        );
        registry.register(
            "kquotad_failed_authentications",
            "Connections closed for a failed authentication (SASL, TLS handshake or principal mapping)",
            failed_authentications.clone(),
        );
        registry.register(
            "kquotad_store_commit_duration_seconds",
            "Time to commit a batch of alterations to the store or the configuration log (not validate-only ones)",
            commit_seconds.clone(),
        );
        Metrics {
            registry,
            requests,
            alterations,
            failed_authentications,
            commit_seconds,
            draft_alter_quotas,
        }
    }

    /// Counts an answer `response` (header and body) to a request whose frame began with
    /// `head` (its API key and version).
    pub(crate) fn answered(&self, head: [u8; 4], response: &[u8]) {
        let (api, version) = (
            i16::from_be_bytes([head[0], head[1]]),
            i16::from_be_bytes([head[2], head[3]]),
        );
        let error = if is_draft(api, self.draft_alter_quotas) {
            // The draft's errors are per entry, as AlterClientQuotas' are.
            String::new()
        } else {
            top_level_error(api, version, response).map_or(String::new(), |c| ErrorCode(c).name())
        };
        self.count(api, error);
    }

    /// Counts an answer made as it is written (a refused alteration's, Metadata's): every
    /// entry of a refused alteration has the same code.
    pub(crate) fn streamed(&self, head: [u8; 4]) {
        let api = i16::from_be_bytes([head[0], head[1]]);
        let error = match api {
            kquota_wire::ALTER_CLIENT_QUOTAS | kquota_wire::ALTER_QUOTAS => {
                "CLUSTER_AUTHORIZATION_FAILED".to_owned()
            }
            _ => String::new(),
        };
        self.count(api, error);
    }

    /// Counts a request the connection was closed for, unanswered.
    pub(crate) fn closed(&self, head: [u8; 4]) {
        self.count(i16::from_be_bytes([head[0], head[1]]), "CLOSED".to_owned());
    }

    /// Counts a failed authentication.
    pub(crate) fn failed_authentication(&self) {
        self.failed_authentications.inc();
    }

    fn count(&self, api: i16, error: String) {
        self.requests
            .get_or_create(&vec![
                ("api", api_name(api, self.draft_alter_quotas)),
                ("error", error),
            ])
            .inc();
    }

    /// The server's families, the host layer's after them, in the OpenMetrics text format.
    fn render(&self, slots: &Slots, budget: &Budget, cluster: &ClusterState) -> String {
        let mut text = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            warn!("metrics: encoding a scrape failed: {e}");
        }
        with_host_families(text, slots, budget, cluster)
    }
}

/// An API's name as Kafka spells it (key 50 is the draft AlterQuotas where `draft_alter_quotas`
/// serves it, Kafka's DescribeUserScramCredentials otherwise); only APIs the server serves get one
/// of their own, so the label's values are bounded whatever a peer sends.
fn api_name(api: i16, draft_alter_quotas: bool) -> String {
    if is_draft(api, draft_alter_quotas) {
        return "AlterQuotas".to_owned();
    }
    let served = kquota_wire::SUPPORTED_APIS
        .iter()
        .chain(kquota_wire::SASL_APIS.iter())
        .any(|a| a.api_key == api);
    match ApiKey::try_from(api) {
        Ok(key) if served => format!("{key:?}"),
        _ => "other".to_owned(),
    }
}

/// Whether `api` is the draft AlterQuotas on a server where `draft_alter_quotas` serves it.
fn is_draft(api: i16, draft_alter_quotas: bool) -> bool {
    draft_alter_quotas && api == kquota_wire::ALTER_QUOTAS
}

/// The top-level error code of `response` to API `api` at `version`, for the APIs that have
/// one; `None` for the others (Metadata, and the alterations, whose errors are per entry) and
/// for an answer too short to hold it.
fn top_level_error(api: i16, version: i16, response: &[u8]) -> Option<i16> {
    use kquota_wire::*;
    // After the throttle time (4 bytes) or first.
    let offset = match api {
        API_VERSIONS | SASL_HANDSHAKE | SASL_AUTHENTICATE => 0,
        DESCRIBE_CLIENT_QUOTAS | DESCRIBE_CLUSTER | DESCRIBE_USER_SCRAM_CREDENTIALS => 4,
        _ => return None,
    };
    // The header: a correlation id, and in header v1 the tagged fields (none: one byte).
    let header = match ApiKey::try_from(api) {
        Ok(key) if key.response_header_version(version) >= 1 => 5,
        _ => 4,
    };
    let at = header + offset;
    let bytes = response.get(at..at + 2)?;
    Some(i16::from_be_bytes([bytes[0], bytes[1]]))
}

/// The store or configuration log, timed, with each alteration's result counted.
#[derive(Debug)]
pub(crate) struct Timed {
    pub(crate) inner: Arc<dyn Persistence>,
    pub(crate) metrics: Arc<Metrics>,
}

impl Persistence for Timed {
    fn persist(&self, changes: &[EntityChange<'_>]) -> Result<(), PersistError> {
        self.inner.persist(changes)
    }

    fn commit(
        &self,
        engine: &Engine,
        batch: &[Alteration],
        validate_only: bool,
    ) -> Result<Vec<AlterResult>, PersistError> {
        let started = Instant::now();
        let results = self.inner.commit(engine, batch, validate_only);
        if !validate_only {
            self.metrics
                .commit_seconds
                .observe(started.elapsed().as_secs_f64());
        }
        let validate_only = validate_only.to_string();
        let count = |result: String, n: usize| {
            self.metrics
                .alterations
                .get_or_create(&vec![
                    ("result", result),
                    ("validate_only", validate_only.clone()),
                ])
                .inc_by(n as u64);
        };
        match &results {
            Ok(results) => {
                for r in results {
                    count(
                        r.error
                            .as_ref()
                            .map_or("NONE".to_owned(), |e| e.code.name()),
                        1,
                    );
                }
            }
            Err(_) => count("COMMIT_FAILED".to_owned(), batch.len()),
        }
        results
    }
}

/// What `kquotad`'s metrics listener serves.
pub(crate) struct ServerExporter {
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) slots: Arc<Slots>,
    pub(crate) budget: Budget,
    pub(crate) cluster: ClusterState,
    /// Set once every listener's accept loop runs.
    pub(crate) serving: Arc<AtomicBool>,
}

impl Exporter for ServerExporter {
    fn render(&self) -> String {
        self.metrics
            .render(&self.slots, &self.budget, &self.cluster)
    }

    fn ready(&self) -> Result<(), String> {
        if !self.serving.load(Ordering::Acquire) {
            return Err("the listeners are not serving yet".to_owned());
        }
        self.cluster.ready()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_level_errors_are_read_where_each_api_has_them() {
        // ApiVersions v3: header v0 whatever the version, the code first.
        assert_eq!(top_level_error(18, 3, &[0, 0, 0, 7, 0, 35]), Some(35));
        // DescribeClientQuotas v1: header v1 (one byte of tagged fields), the throttle, the code.
        assert_eq!(
            top_level_error(48, 1, &[0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 31]),
            Some(31)
        );
        assert_eq!(
            top_level_error(48, 0, &[0, 0, 0, 7, 0, 0, 0, 0, 0, 0]),
            Some(0)
        );
        assert_eq!(top_level_error(49, 1, &[0; 32]), None);
        assert_eq!(top_level_error(18, 3, &[0, 0, 0, 7, 0]), None, "too short");
    }

    #[test]
    fn api_names_are_bounded() {
        assert_eq!(api_name(48, false), "DescribeClientQuotas");
        assert_eq!(api_name(18, false), "ApiVersions");
        assert_eq!(api_name(0, false), "other", "Produce is not served");
        assert_eq!(api_name(-3, true), "other");
    }

    #[test]
    fn key_50_is_named_for_what_it_serves() {
        assert_eq!(api_name(50, false), "DescribeUserScramCredentials");
        assert_eq!(api_name(50, true), "AlterQuotas");
    }

    #[test]
    fn a_draft_alter_quotas_answer_is_counted_under_its_name_with_errors_per_entry() {
        let counted = |draft: bool| {
            let metrics = Metrics::new(draft);
            // The draft's v0 answer as it begins: the correlation id, throttle 0, one entry.
            let response = [0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0];
            metrics.answered([0, 50, 0, 0], &response);
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &metrics.registry).unwrap();
            text.lines()
                .find(|l| l.starts_with("kquotad_requests_total{"))
                .map(str::to_owned)
                .unwrap()
        };
        assert_eq!(
            counted(true),
            r#"kquotad_requests_total{api="AlterQuotas",error=""} 1"#
        );
        // Read as Kafka's DescribeUserScramCredentials, the same bytes give a top-level code.
        let scram = counted(false);
        assert!(
            scram.starts_with(
                r#"kquotad_requests_total{api="DescribeUserScramCredentials",error=""#
            ) && !scram.contains(r#"error="""#),
            "{scram}"
        );
    }
}
