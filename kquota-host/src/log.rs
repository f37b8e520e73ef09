//! The log: what no peer can flood.
//!
//! [`PeerThrottle`] is a `tracing` layer that counts the events carrying a `peer` field by the
//! peer's address (its IP: a client that reconnects from another port is the same peer) and lets
//! through, per peer and per [`INTERVAL`], each line once (a line of the same kind, the same place
//! in the code, with the same message is held back) and at most [`LINES_PER_PEER`] lines in all.
//! What it holds back is written once the interval is over, as one line per peer:
//! `… 69995 more lines like these from 127.0.0.1 in the last 1 s (kquotad/src/connection.rs:62 ×69995)`.
//! Events without a peer (the start, the settings, the store) are never held back, nor are debug
//! and trace events: they are written only when an operator turns them on (`RUST_LOG=debug`) to
//! see every connection, as the test suites do. Nor are the audit's lines (target
//! [`AUDIT_TARGET`], `kquota::audit`) at INFO: each records one alteration an authorized principal
//! asked for, already bounded in size, and a record with holes would be no audit; a refused
//! alteration is logged there at WARN, and held back like any other warning.
//!
//! [`init_logging`] writes lines as text or, for log shippers, as one JSON object a line
//! ([`LogFormat`], the servers' `log.format` and `--log-format`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::{self, Write as _};
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

pub use kquota_wire::AUDIT_TARGET;

/// How long a peer's count runs before it starts again.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// The most lines one peer's events may write per [`INTERVAL`], not counting the summary line.
pub const LINES_PER_PEER: usize = 5;
/// The most peers counted apart; beyond them, the rest share one count (`other peers`).
const MAX_PEERS: usize = 4096;
/// The longest peer field kept as a key when it is not an address.
const MAX_KEY_LEN: usize = 64;

/// Who a line is about: an IP address, or the peer field as written when it is not one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum PeerKey {
    Ip(IpAddr),
    Other(String),
    /// Everyone beyond [`MAX_PEERS`].
    Overflow,
}

impl fmt::Display for PeerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerKey::Ip(ip) => write!(f, "{ip}"),
            PeerKey::Other(s) => f.write_str(s),
            PeerKey::Overflow => f.write_str("other peers"),
        }
    }
}

/// Reads a `peer` field as `%addr`, `?addr`, `?Some(addr)`, `%"ip:port"` or `?"ip:port"` write it.
fn peer_key(text: &str) -> Option<PeerKey> {
    let t = text.trim();
    if t == "None" || t.is_empty() {
        return None;
    }
    let t = t
        .strip_prefix("Some(")
        .and_then(|t| t.strip_suffix(')'))
        .unwrap_or(t);
    let t = t.trim_matches('"').trim_start_matches('/');
    if let Ok(addr) = t.parse::<SocketAddr>() {
        return Some(PeerKey::Ip(addr.ip().to_canonical()));
    }
    if let Ok(ip) = t.parse::<IpAddr>() {
        return Some(PeerKey::Ip(ip.to_canonical()));
    }
    let mut end = t.len().min(MAX_KEY_LEN);
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    Some(PeerKey::Other(t[..end].to_owned()))
}

/// Finds the `peer` field, and hashes the message (so that lines that say the same are known).
struct Fields {
    peer: Option<String>,
    message: MessageHash,
}

/// A hash of what is written into it.
struct MessageHash(std::hash::DefaultHasher);

impl fmt::Write for MessageHash {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "peer" => self.peer = Some(value.to_owned()),
            "message" => self.message.0.write(value.as_bytes()),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "peer" => {
                let mut s = String::new();
                let _ = write!(s, "{value:?}");
                self.peer = Some(s);
            }
            "message" => {
                let _ = write!(self.message, "{value:?}");
            }
            _ => {}
        }
    }
}

/// One peer's count in the current interval.
struct PeerCount {
    since: Instant,
    /// The lines written (each kind, by its place in the code, and message hash), at most
    /// [`LINES_PER_PEER`].
    written: HashSet<(&'static str, u64)>,
    /// How many lines of each kind were held back.
    held: BTreeMap<&'static str, u64>,
    /// The most severe level held back.
    level: Level,
}

impl PeerCount {
    fn new(now: Instant) -> PeerCount {
        PeerCount {
            since: now,
            written: HashSet::new(),
            held: BTreeMap::new(),
            level: Level::TRACE,
        }
    }

    fn held_back(&self) -> u64 {
        self.held.values().sum()
    }
}

/// What was held back from one peer in one interval, to be written as one line.
struct Summary {
    peer: PeerKey,
    level: Level,
    total: u64,
    seconds: u64,
    kinds: String,
}

impl Summary {
    fn of(peer: &PeerKey, count: &PeerCount, now: Instant) -> Option<Summary> {
        let total = count.held_back();
        if total == 0 {
            return None;
        }
        let mut kinds = String::new();
        for (kind, n) in &count.held {
            if !kinds.is_empty() {
                kinds.push_str(", ");
            }
            let _ = write!(kinds, "{kind} ×{n}");
        }
        Some(Summary {
            peer: peer.clone(),
            level: count.level,
            total,
            seconds: now.duration_since(count.since).as_secs().max(1),
            kinds,
        })
    }

    fn write(&self) {
        let (peer, total, seconds, kinds) = (&self.peer, self.total, self.seconds, &self.kinds);
        // No `peer` field: a summary is never held back itself.
        macro_rules! summary {
            ($level:expr) => {
                tracing::event!(
                    target: "kquota_host",
                    $level,
                    "… {total} more lines like these from {peer} in the last {seconds} s ({kinds})"
                )
            };
        }
        if self.level == Level::ERROR {
            summary!(Level::ERROR);
        } else if self.level == Level::WARN {
            summary!(Level::WARN);
        } else if self.level == Level::INFO {
            summary!(Level::INFO);
        } else if self.level == Level::DEBUG {
            summary!(Level::DEBUG);
        } else {
            summary!(Level::TRACE);
        }
    }
}

/// Every peer's count.
#[derive(Default)]
struct Counts {
    peers: HashMap<PeerKey, PeerCount>,
}

impl Counts {
    /// Whether an event of `kind` saying `message` (its hash) at `level` from `peer` is written;
    /// the summary now due.
    fn admit(
        &mut self,
        peer: PeerKey,
        line: (&'static str, u64),
        level: Level,
        now: Instant,
    ) -> (bool, Option<Summary>) {
        let peer = if self.peers.len() >= MAX_PEERS && !self.peers.contains_key(&peer) {
            PeerKey::Overflow
        } else {
            peer
        };
        let count = self
            .peers
            .entry(peer.clone())
            .or_insert_with(|| PeerCount::new(now));
        let mut summary = None;
        if now.duration_since(count.since) >= INTERVAL {
            summary = Summary::of(&peer, count, now);
            *count = PeerCount::new(now);
        }
        if count.written.len() < LINES_PER_PEER && count.written.insert(line) {
            (true, summary)
        } else {
            *count.held.entry(line.0).or_insert(0) += 1;
            // Level's order is by verbosity: ERROR is the least verbose.
            if level < count.level {
                count.level = level;
            }
            (false, summary)
        }
    }

    /// The summaries of intervals that are over; peers with nothing pending are forgotten.
    fn sweep(&mut self, now: Instant) -> Vec<Summary> {
        let mut out = Vec::new();
        self.peers.retain(|peer, count| {
            if now.duration_since(count.since) < INTERVAL {
                return true;
            }
            out.extend(Summary::of(peer, count, now));
            false
        });
        out
    }
}

/// The layer; see the module docs.
#[derive(Clone, Default)]
pub struct PeerThrottle {
    counts: Arc<Mutex<Counts>>,
    hasher: std::hash::RandomState,
}

impl PeerThrottle {
    /// A throttle, and a thread that writes what it held back once each interval is over.
    pub fn start() -> PeerThrottle {
        let throttle = PeerThrottle::default();
        let counts = Arc::downgrade(&throttle.counts);
        let spawned = std::thread::Builder::new()
            .name("kquota-log".to_owned())
            .spawn(move || loop {
                std::thread::sleep(INTERVAL);
                let Some(counts) = counts.upgrade() else {
                    return;
                };
                let due = counts.lock().sweep(Instant::now());
                drop(counts);
                for s in due {
                    s.write();
                }
            });
        // Without the thread, held-back lines are summed up when the peer next logs.
        drop(spawned);
        throttle
    }

    fn admit(&self, meta: &'static Metadata<'static>, peer: PeerKey, message: u64) -> bool {
        let line = (kind(meta), message);
        let (admit, summary) = self
            .counts
            .lock()
            .admit(peer, line, *meta.level(), Instant::now());
        // Written after the lock is released: the summary passes through this layer too.
        if let Some(s) = summary {
            s.write();
        }
        admit
    }
}

/// An event's kind: the place in the code that logs it (`kquotad/src/peer.rs:79`).
fn kind(meta: &'static Metadata<'static>) -> &'static str {
    meta.name()
        .strip_prefix("event ")
        .unwrap_or_else(|| meta.name())
}

impl<S: Subscriber> Layer<S> for PeerThrottle {
    fn event_enabled(&self, event: &Event<'_>, _ctx: Context<'_, S>) -> bool {
        let meta = event.metadata();
        // Debug and trace lines are written only when an operator asks for them (`RUST_LOG`),
        // to see every connection: those are not held back.
        if meta.fields().field("peer").is_none() || *meta.level() > Level::INFO {
            return true;
        }
        // An authorized alteration's record is never held back (see the module docs).
        if *meta.level() == Level::INFO && meta.target() == AUDIT_TARGET {
            return true;
        }
        let mut fields = Fields {
            peer: None,
            message: MessageHash(self.hasher.build_hasher()),
        };
        event.record(&mut fields);
        match fields.peer.as_deref().and_then(peer_key) {
            Some(peer) => self.admit(meta, peer, fields.message.0.finish()),
            None => true,
        }
    }
}

/// How log lines are written: `log.format` in a server's properties, `--log-format` on its
/// command line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One line of text per event (`2024-05-01T10:00:00Z  INFO kquotad: kquotad listening
    /// listeners=...`), coloured on a terminal. The default.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `fields` with `message`, and the
    /// spans), for log shippers; never coloured.
    Json,
}

impl LogFormat {
    /// The values the setting takes, as `--help` and errors name them.
    pub const CHOICES: &'static str = "text or json";

    /// The setting's value for this format.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `log.format` value that is neither `text` nor `json`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownLogFormat(pub String);

impl fmt::Display for UnknownLogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown log format '{}' (expected {})",
            self.0,
            LogFormat::CHOICES
        )
    }
}

impl std::error::Error for UnknownLogFormat {}

impl FromStr for LogFormat {
    type Err = UnknownLogFormat;

    fn from_str(s: &str) -> Result<LogFormat, UnknownLogFormat> {
        match s.trim() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(UnknownLogFormat(other.to_owned())),
        }
    }
}

/// Installs a server's log: lines to stderr in `format`, filtered by `RUST_LOG` (`info` when
/// unset; the audit, [`AUDIT_TARGET`], at INFO whatever the level unless `RUST_LOG` names it), coloured only on a terminal (text only), and no peer able to flood it
/// ([`PeerThrottle`], in front of either format). A second call (a test that runs two servers)
/// keeps the first.
pub fn init_logging(format: LogFormat) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // The audit is written whatever the level, unless RUST_LOG names it (`kquota::audit=off`).
    let names_audit = std::env::var("RUST_LOG").is_ok_and(|v| v.contains(AUDIT_TARGET));
    let filter = match format!("{AUDIT_TARGET}=info").parse() {
        Ok(audit) if !names_audit => filter.add_directive(audit),
        _ => filter,
    };
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(PeerThrottle::start());
    let _ = match format {
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(colour()),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
}

/// Ends a server's start that failed: one line on stderr, and `status`. As text, `program:
/// message`, the line a bad flag gets; under `--log-format json`, one JSON object like every
/// other line, from the same formatter (set up here when the failure came before the settings).
pub fn fatal(
    program: &str,
    format: LogFormat,
    message: &str,
    status: u8,
) -> std::process::ExitCode {
    match format {
        LogFormat::Text => eprintln!("{program}: {message}"),
        LogFormat::Json => {
            // Does nothing when the server already set it up.
            init_logging(LogFormat::Json);
            tracing::error!(target: "kquota::start", program, "{message}");
        }
    }
    std::process::ExitCode::from(status)
}

/// Ends a start whose flags clap refused, as [`fatal`] ends the others: under `--log-format
/// json` one JSON line; otherwise clap's own line (help and version still go to stdout).
pub fn refused_flags(program: &str, format: LogFormat, e: clap::Error) -> std::process::ExitCode {
    match (format, crate::exit::refusal(&e)) {
        (LogFormat::Json, Some(line)) => fatal(program, format, &line, crate::exit::USAGE),
        _ => crate::exit::clap_failure(e),
    }
}

/// The log format a command line asks for (`--log-format json`, `--log-format=json`; the last
/// wins), for what is written before its settings are read: a refused flag or setting. Text when
/// it asks for none or for something else.
pub fn log_format_in_args(args: impl IntoIterator<Item = std::ffi::OsString>) -> LogFormat {
    let mut format = LogFormat::Text;
    let mut next_is_value = false;
    for arg in args {
        let arg = arg.to_string_lossy();
        let value = if next_is_value {
            next_is_value = false;
            Some(&*arg)
        } else if arg == "--log-format" {
            next_is_value = true;
            None
        } else {
            arg.strip_prefix("--log-format=")
        };
        if let Some(v) = value {
            format = if v.eq_ignore_ascii_case("json") {
                LogFormat::Json
            } else {
                LogFormat::Text
            };
        }
    }
    format
}

/// Whether log lines may carry colour: stderr is a terminal and `NO_COLOR` is not set.
pub fn colour() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_format_is_read_off_the_command_line_as_clap_reads_it() {
        let format = |args: &[&str]| log_format_in_args(args.iter().map(Into::into));
        assert_eq!(format(&["kquotad"]), LogFormat::Text);
        assert_eq!(
            format(&["kquotad", "--log-format", "json"]),
            LogFormat::Json
        );
        assert_eq!(
            format(&["kquotad", "--log-format=json", "--bogus"]),
            LogFormat::Json
        );
        // The last wins; a value that is no format is text (the settings refuse it themselves).
        assert_eq!(
            format(&["x", "--log-format", "json", "--log-format=text"]),
            LogFormat::Text
        );
        assert_eq!(format(&["x", "--log-format", "yaml"]), LogFormat::Text);
    }

    #[test]
    fn peers_are_their_addresses() {
        let ip = |s: &str| PeerKey::Ip(s.parse().unwrap());
        assert_eq!(peer_key("127.0.0.1:5000"), Some(ip("127.0.0.1")));
        assert_eq!(peer_key("Some(127.0.0.1:5001)"), Some(ip("127.0.0.1")));
        assert_eq!(peer_key("\"[::ffff:10.0.0.7]:9\""), Some(ip("10.0.0.7")));
        assert_eq!(peer_key("/10.0.0.7"), Some(ip("10.0.0.7")));
        assert_eq!(peer_key("None"), None);
        assert_eq!(peer_key(""), None);
        let long = "x".repeat(200);
        assert_eq!(
            peer_key(&long),
            Some(PeerKey::Other("x".repeat(MAX_KEY_LEN)))
        );
    }

    #[test]
    fn each_line_once_a_few_per_peer_then_a_count() {
        let mut c = Counts::default();
        let t0 = Instant::now();
        let a = PeerKey::Ip("10.0.0.1".parse().unwrap());
        let b = PeerKey::Ip("10.0.0.2".parse().unwrap());
        let admit = |c: &mut Counts, p: &PeerKey, kind, message, at| {
            c.admit(p.clone(), (kind, message), Level::WARN, at).0
        };
        assert!(admit(&mut c, &a, "x.rs:1", 1, t0));
        for _ in 0..1000 {
            assert!(!admit(&mut c, &a, "x.rs:1", 1, t0));
        }
        // Another peer is counted apart; another message of the same kind is another line.
        assert!(admit(&mut c, &b, "x.rs:1", 1, t0));
        assert!(admit(&mut c, &a, "x.rs:1", 2, t0));
        // At most LINES_PER_PEER lines from one peer.
        let written = (3..10)
            .filter(|m| admit(&mut c, &a, "x.rs:2", *m, t0))
            .count();
        assert_eq!(written, LINES_PER_PEER - 2);
        // The next interval starts with the count of the last.
        let (ok, summary) = c.admit(a.clone(), ("x.rs:1", 1), Level::WARN, t0 + INTERVAL);
        assert!(ok);
        let s = summary.unwrap();
        assert_eq!((s.total, s.level), (1004, Level::WARN));
        assert_eq!(s.kinds, "x.rs:1 ×1000, x.rs:2 ×4");
        // A sweep writes what is due and forgets quiet peers.
        assert!(!admit(&mut c, &a, "x.rs:1", 1, t0 + INTERVAL));
        let due = c.sweep(t0 + INTERVAL * 2);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].total, 1);
        assert!(c.peers.is_empty());
    }

    #[test]
    fn debug_lines_are_never_held_back() {
        use tracing_subscriber::layer::SubscriberExt as _;
        let written = Arc::new(Mutex::new(0usize));
        struct Count(Arc<Mutex<usize>>);
        impl<S: Subscriber> Layer<S> for Count {
            fn on_event(&self, _: &Event<'_>, _: Context<'_, S>) {
                *self.0.lock() += 1;
            }
        }
        let subscriber = tracing_subscriber::registry()
            .with(PeerThrottle::default())
            .with(Count(Arc::clone(&written)));
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..100 {
                tracing::debug!(peer = "10.0.0.1:5000", "connection opened");
            }
            for _ in 0..100 {
                tracing::warn!(peer = "10.0.0.1:5000", "closing connection: a bad frame");
            }
        });
        // Every debug line, and the warning once.
        assert_eq!(*written.lock(), 101);
    }

    #[test]
    fn authorized_alterations_are_never_held_back_refusals_are() {
        use tracing_subscriber::layer::SubscriberExt as _;
        let written = Arc::new(Mutex::new(0usize));
        struct Count(Arc<Mutex<usize>>);
        impl<S: Subscriber> Layer<S> for Count {
            fn on_event(&self, _: &Event<'_>, _: Context<'_, S>) {
                *self.0.lock() += 1;
            }
        }
        let subscriber = tracing_subscriber::registry()
            .with(PeerThrottle::default())
            .with(Count(Arc::clone(&written)));
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..100 {
                tracing::info!(target: "kquota::audit", peer = "10.0.0.1:5000", "AlterClientQuotas");
            }
            for _ in 0..100 {
                tracing::warn!(target: "kquota::audit", peer = "10.0.0.1:5000", "refused");
            }
        });
        // Every authorized record; the refusal once.
        assert_eq!(*written.lock(), 101);
    }

    #[test]
    fn log_formats_parse_and_print_as_the_setting() {
        assert_eq!("text".parse(), Ok(LogFormat::Text));
        assert_eq!(" json".parse(), Ok(LogFormat::Json));
        assert_eq!(LogFormat::default(), LogFormat::Text);
        let e = "xml".parse::<LogFormat>().unwrap_err().to_string();
        assert_eq!(e, "unknown log format 'xml' (expected text or json)");
        for f in [LogFormat::Text, LogFormat::Json] {
            assert_eq!(f.to_string().parse(), Ok(f));
        }
    }

    #[test]
    fn peers_beyond_the_bound_share_a_count() {
        let mut c = Counts::default();
        let t0 = Instant::now();
        for i in 0..MAX_PEERS as u32 + 10 {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(i));
            c.admit(PeerKey::Ip(ip), ("x.rs:1", 1), Level::WARN, t0);
        }
        assert_eq!(c.peers.len(), MAX_PEERS + 1);
        assert_eq!(c.peers[&PeerKey::Overflow].held_back(), 9);
    }
}
