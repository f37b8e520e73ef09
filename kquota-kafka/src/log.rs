//! The plug-in's own threads log through `tracing` (kquota-cluster does); the broker logs through
//! slf4j. Events at INFO and above are formatted here into a bounded queue, which the Java half
//! drains at every tick into the broker's log at the same level. What a flood (a broker's clients
//! reconnecting to a cluster in a rolling restart) costs the broker's log is bounded: a burst of
//! [`BURST`] lines, then [`PER_SECOND`] a second, and at most [`MAX_LINES`] waiting; the lines
//! beyond are counted, not kept, and the count is said.

use std::time::Instant;

use std::collections::VecDeque;
use std::io::Write;
use std::sync::Once;

use parking_lot::Mutex;

/// The most lines kept between two drains.
pub(crate) const MAX_LINES: usize = 1_000;
/// Lines let through at once after a quiet spell.
pub(crate) const BURST: f64 = 100.0;
/// Lines let through a second, sustained.
pub(crate) const PER_SECOND: f64 = 10.0;
/// The longest line kept, in bytes (a longer one is cut).
const MAX_LINE: usize = 8_192;

struct Queue {
    lines: VecDeque<(Level, String)>,
    dropped: u64,
    /// Lines that may still go through now, and when that was worked out.
    tokens: f64,
    at: Option<Instant>,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    lines: VecDeque::new(),
    dropped: 0,
    tokens: BURST,
    at: None,
});

/// A line's level, as the Java half maps it to slf4j's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    Error,
    Warn,
    Info,
}

impl Level {
    /// The level's name, as the Java half reads it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Level::Error => "ERROR",
            Level::Warn => "WARN",
            Level::Info => "INFO",
        }
    }
}

/// Routes this library's `tracing` events to the queue, once per process.
pub(crate) fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(|| Line(Vec::new()))
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        // A library loaded into a JVM is the only one to set it; if not, its events go elsewhere.
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
}

/// One event's text, queued when the formatter is done with it.
struct Line(Vec<u8>);

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = MAX_LINE.saturating_sub(self.0.len());
        self.0.extend_from_slice(&buf[..buf.len().min(room)]);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.0);
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        let (level, message) = split_level(text);
        push(level, message.to_owned());
    }
}

/// The formatter's line starts with the level, padded.
fn split_level(text: &str) -> (Level, &str) {
    for (name, level) in [
        ("ERROR", Level::Error),
        ("WARN", Level::Warn),
        ("INFO", Level::Info),
    ] {
        if let Some(rest) = text.strip_prefix(name) {
            return (level, rest.trim_start());
        }
    }
    (Level::Info, text)
}

fn push(level: Level, message: String) {
    let mut queue = QUEUE.lock();
    let now = Instant::now();
    if let Some(at) = queue.at {
        let refill = now.duration_since(at).as_secs_f64() * PER_SECOND;
        queue.tokens = (queue.tokens + refill).min(BURST);
    }
    queue.at = Some(now);
    if queue.lines.len() >= MAX_LINES || queue.tokens < 1.0 {
        queue.dropped += 1;
    } else {
        queue.tokens -= 1.0;
        queue.lines.push_back((level, message));
    }
}

/// Everything queued since the last drain, oldest first, with a line saying how many were
/// dropped if any were.
pub(crate) fn drain() -> Vec<(Level, String)> {
    let mut queue = QUEUE.lock();
    let mut out: Vec<_> = queue.lines.drain(..).collect();
    if queue.dropped > 0 {
        out.push((
            Level::Warn,
            format!(
                "kquota: {} log lines of the plug-in's threads were dropped (more than {BURST} at \
                 once or {PER_SECOND} a second)",
                queue.dropped
            ),
        ));
        queue.dropped = 0;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_reach_the_queue_with_their_level_and_a_flood_is_counted() {
        install();
        drain();
        tracing::warn!("kquota: the configuration log is not reachable");
        tracing::debug!("not kept");
        let lines = drain();
        assert!(
            lines.contains(&(
                Level::Warn,
                "kquota: the configuration log is not reachable".to_owned()
            )),
            "{lines:?}"
        );
        assert!(!lines.iter().any(|(_, m)| m.contains("not kept")));
        for i in 0..BURST as usize + 5 {
            tracing::info!("line {i}");
        }
        let lines = drain();
        // The burst (less what the first lines took), then the count of the rest.
        assert!(lines.len() <= BURST as usize + 1, "{}", lines.len());
        assert!(
            lines.last().unwrap().1.contains("log lines of the plug-in"),
            "{lines:?}"
        );
    }
}
