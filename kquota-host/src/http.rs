//! The metrics and health listener of both servers: `GET /metrics`, `/healthz` and `/readyz`
//! over HTTP/1, bounded as the servers' own listeners are.
//!
//! | path | answer |
//! | --- | --- |
//! | `/metrics` | the server's metric families: OpenMetrics 1.0 when the `Accept` header asks for `application/openmetrics-text` (as Prometheus does), else the classic Prometheus text format 0.0.4, which `promtool check metrics` and older scrapers read |
//! | `/healthz` | `200 ok` while the process serves HTTP at all (liveness) |
//! | `/readyz` | `200 ready` when [`Exporter::ready`] says so; else `503` with the reason as text |
//!
//! A server implements [`Exporter`] (what its metrics are, whether it is ready) and spawns
//! [`serve_metrics`] on a listener it has bound. The metric families themselves are the
//! server's: this module only serves them and translates OpenMetrics into the classic format
//! ([`to_classic_text`]), in which a counter's `# HELP` and `# TYPE` name its samples with
//! their `_total` suffix.
//!
//! What a scrape connection may cost: at most 16 are open at once (more are closed as they are
//! accepted); a request's head must arrive within 10 s, which also closes connections kept alive
//! but idle; a write that the peer takes no bytes of for 10 s closes its connection, as does a
//! connection's fifth minute (after its response); request bodies are never read; renders do
//! not overlap, and the next starts no sooner than 100 ms (or as long as the last one took)
//! after the last ended.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ACCEPT, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Mutex as AsyncMutex, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};
use tracing::{debug, warn};

/// The content type of an OpenMetrics scrape.
pub const CONTENT_TYPE_OPENMETRICS: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of a scrape in the classic Prometheus text format.
pub const CONTENT_TYPE_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What a server's metrics listener serves: its metrics and its readiness.
pub trait Exporter: Send + Sync + 'static {
    /// Every metric family now, in the OpenMetrics text format (ending with `# EOF`). Called on
    /// a blocking thread, never two at once: it may take locks the server's hot path takes.
    fn render(&self) -> String;

    /// `Ok` when the server can do its work (listeners bound, its configuration loaded and
    /// current, the cluster reachable where it has one); else why not, in a sentence.
    fn ready(&self) -> Result<(), String>;
}

/// Whether an `Accept` header prefers OpenMetrics to the classic text format: it names
/// `application/openmetrics-text` with a quality above 0 and at least that of any `text/plain`.
fn wants_openmetrics(accept: Option<&str>) -> bool {
    let Some(accept) = accept else {
        return false;
    };
    let (mut open, mut plain) = (0.0_f64, 0.0_f64);
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(|q| q.trim().parse::<f64>().ok())
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => open = open.max(q),
            "text/plain" => plain = plain.max(q),
            _ => {}
        }
    }
    open > 0.0 && open >= plain
}

/// `openmetrics` in the classic Prometheus text format (0.0.4): without `# EOF`, `# UNIT` or
/// counters' `_created` samples, each counter's `# HELP` and `# TYPE` naming it with its `_total`
/// suffix (OpenMetrics names the family without it, and the samples keep it in both), `unknown`
/// spelt `untyped`, and `\"` unescaped in help texts (the classic format escapes only `\\` and
/// `\n` there).
pub fn to_classic_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // The HELP line of the family whose TYPE line is next, kept until the type is known.
    let mut help: Option<(&str, &str)> = None;
    let mut counter: Option<&str> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name, text));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (name_out, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "unknown" => (name.to_owned(), "untyped"),
                other => (name.to_owned(), other),
            };
            counter = (kind == "counter").then_some(name);
            if let Some((_, text)) = help.take().filter(|(h, _)| *h == name) {
                out.push_str(&format!(
                    "# HELP {name_out} {}\n",
                    text.replace("\\\"", "\"")
                ));
            }
            out.push_str(&format!("# TYPE {name_out} {kind}\n"));
            continue;
        }
        if line.starts_with('#') {
            // `# UNIT` and `# EOF` have no classic form.
            continue;
        }
        if let Some(family) = counter {
            let series = line.split(['{', ' ']).next().unwrap_or_default();
            if series.strip_prefix(family) == Some("_created") {
                continue;
            }
        }
        // An exemplar (`... # {trace_id="..."} 1`) has no classic form either.
        let sample = match line.find(" # ") {
            Some(i) => &line[..i],
            None => line,
        };
        out.push_str(sample);
        out.push('\n');
    }
    out
}

/// What a scrape connection may cost.
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// Scrape connections open at once; more are closed as they are accepted.
    max_connections: usize,
    /// How long a request's head may take to arrive, and so how long a kept-alive connection
    /// may sit idle (hyper starts the timer as it waits for each request).
    header_read_timeout: Duration,
    /// How long a write may wait for a peer that takes no bytes.
    write_stall: Duration,
    /// How long a connection is kept, however busy; it is then closed after its response.
    max_lifetime: Duration,
    /// How long, once told to close, a connection has to finish its response.
    shutdown_grace: Duration,
    /// The least time between two renders (a render also waits as long as the previous one
    /// took): a peer asking without pause costs the server at most half of one thread.
    render_gap: Duration,
}

/// The limits [`serve_metrics`] applies.
const LIMITS: Limits = Limits {
    max_connections: 16,
    header_read_timeout: Duration::from_secs(10),
    write_stall: Duration::from_secs(10),
    max_lifetime: Duration::from_secs(300),
    shutdown_grace: Duration::from_secs(5),
    render_gap: Duration::from_millis(100),
};

/// Renders scrapes, one at a time, and answers the health checks.
struct Site {
    exporter: Arc<dyn Exporter>,
    render_gap: Duration,
    /// When the next render may start; held while rendering, so renders never overlap.
    next_render: AsyncMutex<Option<Instant>>,
}

/// What [`Site::respond`] needs of a request: the body is never read.
struct Asked {
    method: Method,
    path: String,
    openmetrics: bool,
}

impl Site {
    /// The body of a scrape, or `None` if rendering failed.
    async fn scrape(&self, openmetrics: bool) -> Option<Bytes> {
        let mut next = self.next_render.lock().await;
        if let Some(at) = *next {
            tokio::time::sleep_until(at).await;
        }
        let started = Instant::now();
        let exporter = Arc::clone(&self.exporter);
        // Rendering may take locks the server's connections take: off the runtime's workers.
        let text = tokio::task::spawn_blocking(move || {
            let text = exporter.render();
            if openmetrics {
                text
            } else {
                to_classic_text(&text)
            }
        })
        .await;
        let took = started.elapsed();
        *next = Some(Instant::now() + took.max(self.render_gap));
        match text {
            Ok(text) => Some(Bytes::from(text)),
            Err(e) => {
                warn!("metrics: rendering a scrape failed: {e}");
                None
            }
        }
    }

    /// The answer to `asked`.
    async fn respond(&self, asked: Asked) -> Response<Full<Bytes>> {
        if !matches!(asked.path.as_str(), "/metrics" | "/healthz" | "/readyz") {
            return plain(
                StatusCode::NOT_FOUND,
                "only /metrics, /healthz and /readyz are served here\n".into(),
            );
        }
        if asked.method != Method::GET && asked.method != Method::HEAD {
            let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "use GET or HEAD\n".into());
            response
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            return response;
        }
        match asked.path.as_str() {
            "/healthz" => return plain(StatusCode::OK, "ok\n".into()),
            "/readyz" => {
                return match self.exporter.ready() {
                    Ok(()) => plain(StatusCode::OK, "ready\n".into()),
                    Err(why) => plain(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
                }
            }
            _ => {}
        }
        // HEAD renders too, so that its Content-Length is the GET's; hyper sends no body.
        let Some(body) = self.scrape(asked.openmetrics).await else {
            return plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "rendering failed\n".into(),
            );
        };
        let mut response = Response::new(Full::new(body));
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static(if asked.openmetrics {
                CONTENT_TYPE_OPENMETRICS
            } else {
                CONTENT_TYPE_TEXT
            }),
        );
        response
    }
}

/// A short plain-text answer.
fn plain(status: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Serves `/metrics`, `/healthz` and `/readyz` from `exporter` on `listener` until `stopping`
/// resolves; then accepts nothing more, lets each answer in flight finish (for up to 5 s) and
/// closes every connection. The module's documentation has the limits.
pub async fn serve_metrics(
    listener: TcpListener,
    exporter: Arc<dyn Exporter>,
    stopping: impl Future<Output = ()> + Send + 'static,
) {
    serve_with(listener, exporter, LIMITS, stopping).await;
}

/// [`serve_metrics`] with explicit limits (tests shorten them).
async fn serve_with(
    listener: TcpListener,
    exporter: Arc<dyn Exporter>,
    limits: Limits,
    stopping: impl Future<Output = ()> + Send + 'static,
) {
    let site = Arc::new(Site {
        exporter,
        render_gap: limits.render_gap,
        next_render: AsyncMutex::new(None),
    });
    let (stop, stopped) = watch::channel(false);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut connections = JoinSet::new();
    tokio::pin!(stopping);
    loop {
        let accepted = tokio::select! {
            () = &mut stopping => break,
            accepted = listener.accept() => accepted,
        };
        // Reaped as connections end, so the set holds at most the open ones.
        while connections.try_join_next().is_some() {}
        match accepted {
            Ok((stream, peer)) => {
                let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                    debug!(%peer, "metrics: closing a scrape connection: {} open already", limits.max_connections);
                    continue;
                };
                connections.spawn(connection(
                    stream,
                    Arc::clone(&site),
                    limits,
                    stopped.clone(),
                    slot,
                ));
            }
            Err(e) => {
                // Out of descriptors, most likely: wait rather than spin.
                warn!("metrics: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    drop(listener);
    let _ = stop.send(true);
    // Each connection ends within the grace once told; this bound only backs that up.
    let drained = tokio::time::timeout(limits.shutdown_grace + Duration::from_secs(1), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        connections.abort_all();
    }
}

/// Serves one scrape connection until the peer leaves, a limit closes it, or the server stops.
async fn connection(
    stream: TcpStream,
    site: Arc<Site>,
    limits: Limits,
    mut stopping: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    let _ = stream.set_nodelay(true);
    let io = TokioIo::new(Stalled::new(stream, limits.write_stall));
    let service = service_fn(move |request: Request<Incoming>| {
        let site = Arc::clone(&site);
        let asked = Asked {
            method: request.method().clone(),
            path: request.uri().path().to_owned(),
            openmetrics: wants_openmetrics(
                request.headers().get(ACCEPT).and_then(|v| v.to_str().ok()),
            ),
        };
        drop(request);
        async move { Ok::<_, Infallible>(site.respond(asked).await) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let lifetime = tokio::time::sleep(limits.max_lifetime);
    tokio::pin!(lifetime);
    let ended = tokio::select! {
        ended = conn.as_mut() => Some(ended),
        _ = stopping.wait_for(|s| *s) => None,
        () = &mut lifetime => None,
    };
    let ended = match ended {
        Some(ended) => ended,
        None => {
            // Finish the response being written, if any, then close.
            conn.as_mut().graceful_shutdown();
            match tokio::time::timeout(limits.shutdown_grace, conn.as_mut()).await {
                Ok(ended) => ended,
                Err(_) => {
                    debug!("metrics: closing a scrape connection still busy after the grace");
                    return;
                }
            }
        }
    };
    if let Err(e) = ended {
        debug!("metrics: scrape connection closed: {e}");
    }
}

/// What a server's readiness and cluster families read beyond its listeners: the configuration
/// log it follows and its membership, where it has joined a cluster.
#[derive(Clone, Default)]
pub struct ClusterState {
    /// The configuration log (`None`: the configuration is in a store, or in memory).
    #[cfg(feature = "cluster")]
    pub log: Option<Arc<kquota_cluster::ConfigLog>>,
    /// This instance's membership.
    #[cfg(feature = "cluster")]
    pub members: Option<Arc<kquota_cluster::Membership>>,
}

impl std::fmt::Debug for ClusterState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterState").finish_non_exhaustive()
    }
}

impl ClusterState {
    /// `Ok` unless the configuration log stopped applying records or Kafka stopped returning
    /// this instance's heartbeats.
    pub fn ready(&self) -> Result<(), String> {
        #[cfg(feature = "cluster")]
        {
            if let Some(failure) = self.log.as_ref().and_then(|l| l.failure()) {
                return Err(format!(
                    "the configuration log is no longer applied: {failure}"
                ));
            }
            if let Some(members) = &self.members {
                if !members.is_connected() {
                    return Err(
                        "the cluster is not reachable: this instance's heartbeats are not coming back from Kafka"
                            .to_owned(),
                    );
                }
            }
        }
        Ok(())
    }
}

/// Appends one gauge family of one unlabelled sample to an OpenMetrics text.
fn gauge(out: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    use std::fmt::Write as _;
    let _ = write!(
        out,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}\n"
    );
}

/// The host layer's families, in the OpenMetrics text format, for a server to append to its own
/// (before `# EOF`; see [`with_host_families`]): connection slots and the request budget, and
/// with a cluster the configuration log's progress and the membership. Their names are the same
/// on both servers (`kquota_`), so that one alert covers either.
pub fn host_families(
    out: &mut String,
    slots: &crate::Slots,
    budget: &crate::Budget,
    cluster: &ClusterState,
) {
    gauge(
        out,
        "kquota_connection_slots_in_use",
        "Connections holding one of the max.connections places.",
        slots.in_use(),
    );
    gauge(
        out,
        "kquota_connection_slots_max",
        "max.connections: the places there are (after the descriptor limit).",
        slots.max(),
    );
    gauge(out, "kquota_request_budget_in_use_bytes", "Request bytes read or queued now, out of queued.max.request.bytes (buffer.memory on the proxy).", budget.in_use());
    if budget.limit() != usize::MAX {
        gauge(
            out,
            "kquota_request_budget_limit_bytes",
            "queued.max.request.bytes: the request bytes that may be held at once.",
            budget.limit(),
        );
    }
    #[cfg(feature = "cluster")]
    {
        if let Some(log) = &cluster.log {
            let p = log.progress();
            gauge(
                out,
                "kquota_config_log_applied_offset",
                "The configuration log's offset after the last record this instance applied.",
                p.applied_offset,
            );
            gauge(
                out,
                "kquota_config_log_end_offset",
                "The configuration log's end, as Kafka last told this instance.",
                p.end_offset,
            );
            gauge(
                out,
                "kquota_config_log_lag_records",
                "Records in the configuration log this instance has not applied yet.",
                p.lag(),
            );
            gauge(out, "kquota_config_log_failed", "1 once this instance has stopped applying the configuration log (it then refuses alterations).", u8::from(log.failure().is_some()));
        }
        if let Some(members) = &cluster.members {
            let live = members.live();
            gauge(
                out,
                "kquota_cluster_members",
                "Live instances in the membership, this one included.",
                live.len(),
            );
            gauge(
                out,
                "kquota_cluster_connected",
                "1 while this instance's heartbeats come back from Kafka.",
                u8::from(members.is_connected()),
            );
            out.push_str("# HELP kquota_cluster_member Each live instance this instance sees (1), by instance id.\n# TYPE kquota_cluster_member gauge\n");
            for id in live {
                use std::fmt::Write as _;
                let _ = writeln!(
                    out,
                    "kquota_cluster_member{{instance_id=\"{}\"}} 1",
                    escape_label(&id)
                );
            }
        }
    }
    #[cfg(not(feature = "cluster"))]
    let _ = cluster;
}

/// A label value with the text formats' escapes (`\\`, `\"`, `\n`).
pub fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `openmetrics` (a whole text, ending `# EOF`) with the host layer's families added before its
/// end.
pub fn with_host_families(
    mut openmetrics: String,
    slots: &crate::Slots,
    budget: &crate::Budget,
    cluster: &ClusterState,
) -> String {
    if openmetrics.ends_with("# EOF\n") {
        openmetrics.truncate(openmetrics.len() - "# EOF\n".len());
    }
    host_families(&mut openmetrics, slots, budget, cluster);
    openmetrics.push_str("# EOF\n");
    openmetrics
}

/// A stream whose writes fail once the peer has taken no bytes for a while: hyper waits on a
/// write for as long as the peer lets it, and a peer that never reads would hold its connection
/// (and its place among the 16) for good.
struct Stalled<S> {
    io: S,
    limit: Duration,
    /// Running while a write waits; reset by any progress.
    since: Option<Pin<Box<Sleep>>>,
}

impl<S> Stalled<S> {
    fn new(io: S, limit: Duration) -> Stalled<S> {
        Stalled {
            io,
            limit,
            since: None,
        }
    }

    /// What a write that made no progress answers: wait, or fail once waiting took too long.
    fn waiting<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let timer = self
            .since
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.since = None;
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the peer took no bytes",
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// Passes a write's outcome on, noting progress.
    fn progress<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match poll {
            Poll::Pending => self.waiting(cx),
            ready => {
                self.since = None;
                ready
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Stalled<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Stalled<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.io).poll_write(cx, buf);
        this.progress(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.progress(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.io).poll_flush(cx);
        this.progress(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.io).poll_shutdown(cx);
        this.progress(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A counter, a gauge with a unit and a histogram, as prometheus-client writes them.
    const OPENMETRICS: &str = "# HELP demo_requests Requests \\\"served\\\".\n\
# TYPE demo_requests counter\n\
demo_requests_total{api=\"a\"} 3\n\
demo_requests_created{api=\"a\"} 1.5\n\
# HELP demo_open Connections open.\n\
# TYPE demo_open gauge\n\
demo_open 2\n\
# HELP demo_latency_seconds Commit latency.\n\
# TYPE demo_latency_seconds histogram\n\
# UNIT demo_latency_seconds seconds\n\
demo_latency_seconds_sum 0.5\n\
demo_latency_seconds_count 1\n\
demo_latency_seconds_bucket{le=\"0.001\"} 0 # {trace=\"x\"} 0.0001\n\
demo_latency_seconds_bucket{le=\"+Inf\"} 1\n\
# TYPE demo_other unknown\n\
demo_other 1\n\
# EOF\n";

    #[test]
    fn the_classic_format_names_counters_with_their_suffix() {
        assert_eq!(
            to_classic_text(OPENMETRICS),
            "# HELP demo_requests_total Requests \"served\".\n\
# TYPE demo_requests_total counter\n\
demo_requests_total{api=\"a\"} 3\n\
# HELP demo_open Connections open.\n\
# TYPE demo_open gauge\n\
demo_open 2\n\
# HELP demo_latency_seconds Commit latency.\n\
# TYPE demo_latency_seconds histogram\n\
demo_latency_seconds_sum 0.5\n\
demo_latency_seconds_count 1\n\
demo_latency_seconds_bucket{le=\"0.001\"} 0\n\
demo_latency_seconds_bucket{le=\"+Inf\"} 1\n\
# TYPE demo_other untyped\n\
demo_other 1\n"
        );
    }

    #[test]
    fn accept_headers_choose_the_format() {
        // Prometheus 2.x's default scrape header.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(wants_openmetrics(Some(prometheus)));
        assert!(wants_openmetrics(Some("application/openmetrics-text")));
        for classic in [
            None,
            Some("text/plain"),
            Some("*/*"),
            Some("text/plain;version=0.0.4"),
            Some("application/openmetrics-text;q=0"),
            Some("application/openmetrics-text;q=0.2, text/plain"),
        ] {
            assert!(!wants_openmetrics(classic), "{classic:?}");
        }
    }

    /// Serves [`OPENMETRICS`], ready or not as told.
    struct Fixed {
        not_ready: Mutex<Option<String>>,
    }

    impl Exporter for Fixed {
        fn render(&self) -> String {
            OPENMETRICS.to_owned()
        }

        fn ready(&self) -> Result<(), String> {
            match &*self.not_ready.lock() {
                Some(why) => Err(why.clone()),
                None => Ok(()),
            }
        }
    }

    /// One HTTP/1.1 answer: status, headers (names lowercased), body.
    struct Answer {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    }

    impl Answer {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        }
    }

    /// Reads one answer to a request for which `head` says whether a body follows.
    async fn read_answer(stream: &mut TcpStream, head: bool) -> Answer {
        let mut buf = Vec::new();
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed before the answer's head");
            buf.extend_from_slice(&chunk[..n]);
        };
        let text = String::from_utf8(buf[..end].to_vec()).unwrap();
        let mut lines = text.split("\r\n");
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let mut answer = Answer {
            status,
            headers,
            body: String::new(),
        };
        let length: usize = answer
            .header("content-length")
            .map_or(0, |l| l.parse().unwrap());
        let mut body = buf[end..].to_vec();
        if !head {
            while body.len() < length {
                let mut chunk = vec![0u8; 64 * 1024];
                let n = stream.read(&mut chunk).await.unwrap();
                assert!(n > 0, "closed before the answer's body");
                body.extend_from_slice(&chunk[..n]);
            }
        }
        answer.body = String::from_utf8(body).unwrap();
        answer
    }

    async fn ask(addr: std::net::SocketAddr, method: &str, path: &str) -> Answer {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request =
            format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        read_answer(&mut stream, method == "HEAD").await
    }

    /// What the peer sends on `stream` before closing it, if it closes it within `within`.
    async fn closed(stream: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
        let mut rest = Vec::new();
        // A reset counts as closed, as does the end of the stream.
        let read = tokio::time::timeout(within, stream.read_to_end(&mut rest)).await;
        read.is_ok().then_some(rest)
    }

    async fn ask_accepting(addr: std::net::SocketAddr, path: &str, accept: &str) -> Answer {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: test\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        read_answer(&mut stream, false).await
    }

    /// An exporter of [`OPENMETRICS`] on loopback, served until the sender is used or dropped.
    async fn exporter(
        limits: Limits,
    ) -> (
        std::net::SocketAddr,
        Arc<Fixed>,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopping) = tokio::sync::oneshot::channel::<()>();
        let fixed = Arc::new(Fixed {
            not_ready: Mutex::new(None),
        });
        let served = tokio::spawn(serve_with(
            listener,
            Arc::clone(&fixed) as Arc<dyn Exporter>,
            limits,
            async {
                let _ = stopping.await;
            },
        ));
        (addr, fixed, stop, served)
    }

    #[tokio::test]
    async fn health_and_readiness() {
        let (addr, fixed, _stop, _served) = exporter(LIMITS).await;
        let alive = ask(addr, "GET", "/healthz").await;
        assert_eq!((alive.status, alive.body.as_str()), (200, "ok\n"));
        let ready = ask(addr, "GET", "/readyz").await;
        assert_eq!((ready.status, ready.body.as_str()), (200, "ready\n"));
        *fixed.not_ready.lock() = Some("the configuration log stopped at offset 7".into());
        let not = ask(addr, "GET", "/readyz").await;
        assert_eq!(
            (not.status, not.body.as_str()),
            (503, "the configuration log stopped at offset 7\n")
        );
        assert_eq!(ask(addr, "GET", "/healthz").await.status, 200);
        assert_eq!(ask(addr, "POST", "/readyz").await.status, 405);
    }

    #[tokio::test]
    async fn scrapes_over_http() {
        let (addr, _fixed, stop, served) = exporter(LIMITS).await;

        let answer = ask(addr, "GET", "/metrics").await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.header("content-type"), Some(CONTENT_TYPE_TEXT));
        assert_eq!(answer.body, to_classic_text(OPENMETRICS));
        let open = ask_accepting(addr, "/metrics", "application/openmetrics-text").await;
        assert_eq!(open.header("content-type"), Some(CONTENT_TYPE_OPENMETRICS));
        assert_eq!(open.body, OPENMETRICS);
        let plain = ask_accepting(addr, "/metrics", "text/plain").await;
        assert_eq!(plain.header("content-type"), Some(CONTENT_TYPE_TEXT));

        let head = ask(addr, "HEAD", "/metrics").await;
        assert_eq!(head.status, 200);
        assert_eq!(head.body, "");
        let length: usize = head.header("content-length").unwrap().parse().unwrap();
        assert_eq!(length, answer.body.len());

        let query = ask(addr, "GET", "/metrics?x=1").await;
        assert_eq!(query.status, 200);

        let missing = ask(addr, "GET", "/").await;
        assert_eq!(missing.status, 404);
        let missing = ask(addr, "GET", "/metrics/x").await;
        assert_eq!(missing.status, 404);
        let post = ask(addr, "POST", "/metrics").await;
        assert_eq!(post.status, 405);
        assert_eq!(post.header("allow"), Some("GET, HEAD"));

        // Not HTTP at all: an error answer or a close, and the exporter carries on.
        let mut junk = TcpStream::connect(addr).await.unwrap();
        junk.write_all(b"\x00\x01\x02 nonsense\r\n\r\n")
            .await
            .unwrap();
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), junk.read_to_end(&mut rest)).await;
        assert!(rest.is_empty() || rest.starts_with(b"HTTP/1.1 4"));
        // A body, which is never read.
        let mut body = TcpStream::connect(addr).await.unwrap();
        body.write_all(
            b"GET /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
        )
        .await
        .unwrap();
        assert_eq!(read_answer(&mut body, false).await.status, 200);
        assert_eq!(ask(addr, "GET", "/metrics").await.status, 200);

        // Two requests on one kept-alive connection, then the stop closes it at once.
        let mut kept = TcpStream::connect(addr).await.unwrap();
        for _ in 0..2 {
            kept.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
                .await
                .unwrap();
            assert_eq!(read_answer(&mut kept, false).await.status, 200);
        }
        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(2), served)
            .await
            .expect("the stop waits for no idle connection")
            .unwrap();
        assert_eq!(
            closed(&mut kept, Duration::from_secs(1)).await,
            Some(Vec::new())
        );
        assert!(TcpStream::connect(addr).await.is_err());
    }

    #[tokio::test]
    async fn the_seventeenth_connection_is_refused() {
        let (addr, _fixed, _stop, _served) = exporter(LIMITS).await;
        let mut open = Vec::new();
        for _ in 0..16 {
            open.push(TcpStream::connect(addr).await.unwrap());
        }
        // Accepted in order: by the time this one is, the 16 hold every place.
        let mut extra = TcpStream::connect(addr).await.unwrap();
        assert_eq!(
            closed(&mut extra, Duration::from_secs(5)).await,
            Some(Vec::new())
        );

        // The 16 are served.
        let first = &mut open[0];
        first
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(read_answer(first, false).await.status, 200);

        // Their places come back as they close.
        drop(open);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream
                .write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
            let mut answer = Vec::new();
            let _ = stream.read_to_end(&mut answer).await;
            if answer.starts_with(b"HTTP/1.1 200") {
                break;
            }
            assert!(Instant::now() < deadline, "no place came back");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn slow_and_idle_peers_are_closed() {
        let limits = Limits {
            header_read_timeout: Duration::from_millis(200),
            ..LIMITS
        };
        let (addr, _fixed, stop, served) = exporter(limits).await;
        let mut idle = TcpStream::connect(addr).await.unwrap();
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET /metr").await.unwrap();
        let mut kept = TcpStream::connect(addr).await.unwrap();
        kept.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(read_answer(&mut kept, false).await.status, 200);
        for stream in [&mut idle, &mut slow, &mut kept] {
            assert!(closed(stream, Duration::from_secs(3)).await.is_some());
        }
        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(2), served)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_peer_that_reads_nothing_is_cut_off() {
        let (ours, mut theirs) = tokio::io::duplex(64);
        let mut stalled = Stalled::new(ours, Duration::from_millis(100));
        let started = Instant::now();
        let error = stalled.write_all(&[0u8; 4096]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(2));
        // Progress resets the wait: a reader taking bytes keeps the writer going.
        let reader = tokio::spawn(async move {
            let mut sink = Vec::new();
            theirs.read_to_end(&mut sink).await.map(|_| sink.len())
        });
        let mut stalled = stalled;
        stalled.write_all(&[1u8; 4096]).await.unwrap();
        stalled.shutdown().await.unwrap();
        drop(stalled);
        assert!(reader.await.unwrap().unwrap() >= 4096);
    }
}
