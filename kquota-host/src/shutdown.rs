//! The server's stop, as every task sees it: [`Shutdown`] resolves once the server is stopping, and
//! [`SHUTDOWN_GRACE`] bounds how long an answer may still take after that.

use std::time::Duration;

use tokio::sync::watch;

/// How long, once the server is stopping, a connection has to take the answer to a request that
/// was already handled before it is closed without it.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Tells every [`Shutdown`] made from it that the server is stopping.
#[derive(Debug)]
pub struct Stop(watch::Sender<bool>);

/// A task's view of the server's stop; cloned into every accept loop and connection.
#[derive(Clone, Debug)]
pub struct Shutdown(watch::Receiver<bool>);

/// A stop and the shutdown it signals.
pub fn channel() -> (Stop, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Stop(tx), Shutdown(rx))
}

impl Stop {
    /// The server is stopping, from now on.
    pub fn stop(&self) {
        // No receiver left means every task has ended: nothing to tell.
        let _ = self.0.send(true);
    }
}

impl Shutdown {
    /// Resolves once the server is stopping (at once if it already is).
    pub async fn stopping(&mut self) {
        // An error means the server dropped its sender: it has stopped.
        let _ = self.0.wait_for(|stopping| *stopping).await;
    }

    /// Resolves [`SHUTDOWN_GRACE`] after the server started stopping.
    pub async fn grace_over(&mut self) {
        self.stopping().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    }
}

/// Resolves when the process is asked to stop: SIGINT (Ctrl-C) or SIGTERM (a service manager),
/// logged as it arrives. If a handler cannot be installed, only the other one stops the server.
pub async fn signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = async {
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(e) => {
                tracing::warn!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    let int = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!("cannot listen for SIGINT: {e}");
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = int => tracing::info!("SIGINT received"),
        () = term => tracing::info!("SIGTERM received"),
    }
}
