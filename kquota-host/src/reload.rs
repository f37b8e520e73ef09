//! Reloading without a restart: SIGHUP ([`reload_signal`]) asks every [`Reload`] a server holds
//! (its TLS acceptors, its SASL credentials) to read its files again. What loads replaces what
//! new connections get ([`Reloadable::current`]); connections already open keep what they started
//! with. A file that does not load changes nothing: the server keeps what it had and logs why.

use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::shutdown::Shutdown;

/// Something SIGHUP reloads.
pub trait Reload: Send + Sync {
    /// What it is, as the log names it (`TLS keystore ssl.keystore.location=...`).
    fn what(&self) -> String;

    /// Reads the files again and, if they load, serves new connections from them; logs the
    /// outcome (INFO when reloaded, WARN with the reason when kept). Whether it reloaded.
    fn reload(&self) -> bool;
}

/// The loader of a [`Reloadable`]: the value from its files, or why it cannot be had.
type Loader<T> = Box<dyn Fn() -> Result<T, String> + Send + Sync>;

/// A value loaded from files (an acceptor from PEM files, a credentials file), swapped whole
/// when it is reloaded: readers load the current one without a lock.
pub struct Reloadable<T> {
    what: String,
    current: ArcSwap<T>,
    load: Loader<T>,
}

impl<T> fmt::Debug for Reloadable<T> {
    // The value may hold a key: only what it is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reloadable")
            .field("what", &self.what)
            .finish_non_exhaustive()
    }
}

impl<T: Send + Sync> Reloadable<T> {
    /// `initial`, loaded at start (where an error stops the start, with its own type), and how
    /// to load it again. `what` names it in the log (`TLS keystore ssl.keystore.location=...`).
    pub fn new(
        what: impl Into<String>,
        initial: T,
        load: impl Fn() -> Result<T, String> + Send + Sync + 'static,
    ) -> Reloadable<T> {
        Reloadable {
            what: what.into(),
            current: ArcSwap::from_pointee(initial),
            load: Box::new(load),
        }
    }

    /// What new connections get.
    pub fn current(&self) -> Arc<T> {
        self.current.load_full()
    }

    /// What it is, as the log names it.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// Loads the value again: `Ok` once new connections get it, `Err` (and the value kept) with
    /// why it did not load. Logs neither; [`Reload::reload`] does.
    pub fn try_reload(&self) -> Result<(), String> {
        let next = (self.load)()?;
        self.current.store(Arc::new(next));
        Ok(())
    }
}

impl<T: Send + Sync> Reload for Reloadable<T> {
    fn what(&self) -> String {
        self.what.clone()
    }

    fn reload(&self) -> bool {
        match self.try_reload() {
            Ok(()) => {
                tracing::info!("reloaded {}: new connections use it", self.what);
                true
            }
            Err(why) => {
                tracing::warn!("kept the {} in use: the reload failed: {why}", self.what);
                false
            }
        }
    }
}

/// SIGHUP, as a stream of requests to reload. Made at start: from then on SIGHUP no longer ends
/// the process (its default), whether or not anything is reloaded.
#[derive(Debug)]
pub struct ReloadSignal(Option<tokio::signal::unix::Signal>);

/// Listens for SIGHUP. Must run inside a Tokio runtime. If the handler cannot be installed, the
/// reason is logged and [`ReloadSignal::recv`] never resolves.
pub fn reload_signal() -> ReloadSignal {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::hangup()) {
        Ok(s) => ReloadSignal(Some(s)),
        Err(e) => {
            tracing::warn!("cannot listen for SIGHUP; reloading needs a restart: {e}");
            ReloadSignal(None)
        }
    }
}

impl ReloadSignal {
    /// Resolves at the next SIGHUP (signals that arrive together count once).
    pub async fn recv(&mut self) {
        match &mut self.0 {
            Some(s) => {
                if s.recv().await.is_none() {
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending::<()>().await,
        }
    }
}

/// Reloads every one of `targets` at each SIGHUP until the server stops. Reloads read files on a
/// blocking thread, so that a slow disk holds up no connection.
pub async fn reload_on_signal(
    mut signal: ReloadSignal,
    targets: Vec<Arc<dyn Reload>>,
    mut shutdown: Shutdown,
) {
    loop {
        tokio::select! {
            () = shutdown.stopping() => return,
            () = signal.recv() => {}
        }
        tracing::info!("SIGHUP received: {}", reloading(&targets));
        let targets = targets.clone();
        let _ = tokio::task::spawn_blocking(move || reload_all(&targets)).await;
    }
}

/// What a SIGHUP is about to read again, or that there is nothing to.
fn reloading(targets: &[Arc<dyn Reload>]) -> String {
    if targets.is_empty() {
        return "nothing to reload: SIGHUP reads TLS key and trust stores and the SASL \
                credentials file again, and none is configured"
            .to_owned();
    }
    let what: Vec<String> = targets.iter().map(|t| t.what()).collect();
    format!("reading again {}", what.join("; "))
}

/// Reloads each of `targets` (what SIGHUP does); how many reloaded.
pub fn reload_all(targets: &[Arc<dyn Reload>]) -> usize {
    targets.iter().filter(|t| t.reload()).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn a_sighup_says_what_it_reads_again() {
        assert!(reloading(&[]).starts_with("nothing to reload: "));
        let keystore: Arc<dyn Reload> = Arc::new(Reloadable::new(
            "TLS keystore ssl.keystore.location=/etc/k.pem",
            0u32,
            || Ok(1),
        ));
        let users: Arc<dyn Reload> = Arc::new(Reloadable::new(
            "SASL users sasl.credentials.file=/etc/u.json",
            0u32,
            || Ok(1),
        ));
        assert_eq!(
            reloading(&[keystore, users]),
            "reading again TLS keystore ssl.keystore.location=/etc/k.pem; SASL users \
             sasl.credentials.file=/etc/u.json"
        );
    }

    #[test]
    fn a_value_that_loads_replaces_one_that_does_not_is_kept() {
        let next = Arc::new(AtomicU32::new(1));
        let source = Arc::clone(&next);
        let r = Reloadable::new("the number", 0u32, move || {
            match source.load(Ordering::SeqCst) {
                0 => Err("zero is not a number here".to_owned()),
                n => Ok(n),
            }
        });
        assert_eq!(*r.current(), 0);
        let held = r.current();
        assert!(r.reload());
        assert_eq!(*r.current(), 1);
        // What was taken before stays as it was.
        assert_eq!(*held, 0);
        next.store(0, Ordering::SeqCst);
        assert_eq!(r.try_reload().unwrap_err(), "zero is not a number here");
        assert!(!r.reload());
        assert_eq!(*r.current(), 1);
        let targets: Vec<Arc<dyn Reload>> = vec![Arc::new(r)];
        next.store(7, Ordering::SeqCst);
        assert_eq!(reload_all(&targets), 1);
    }

    #[tokio::test]
    async fn sighup_no_longer_ends_the_process_and_reloads() {
        let next = Arc::new(AtomicU32::new(5));
        let source = Arc::clone(&next);
        let r = Arc::new(Reloadable::new("the number", 0u32, move || {
            Ok(source.load(Ordering::SeqCst))
        }));
        let (stop, shutdown) = crate::shutdown::channel();
        let signal = reload_signal();
        let task = tokio::spawn(reload_on_signal(
            signal,
            vec![Arc::clone(&r) as Arc<dyn Reload>],
            shutdown,
        ));
        let pid = std::process::id().to_string();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        // The first signal may arrive before the loop waits for it; it counts all the same.
        while *r.current() != 5 {
            assert!(std::time::Instant::now() < deadline, "no reload");
            let status = std::process::Command::new("kill")
                .args(["-HUP", &pid])
                .status()
                .unwrap();
            assert!(status.success());
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        stop.stop();
        task.await.unwrap();
    }
}
