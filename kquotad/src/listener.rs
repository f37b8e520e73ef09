//! One bound listener and its accept loop: each connection within the limits gets its own task;
//! when the server is full, a connection that has not authenticated (or one idle long) gives way
//! (see [`crate::limits`]).

use std::sync::Arc;

use tokio::net::TcpListener;
use tracing::warn;

use kquota_host::{AcceptErrors, Budget, Shutdown, Slots};

use crate::peer::{self, Endpoint};
use crate::settings::ServerConfig;

/// One bound listener: its socket, and what its connections need.
pub(crate) struct Listener {
    pub(crate) tcp: TcpListener,
    pub(crate) endpoint: Arc<Endpoint>,
}

/// Accepts connections on one listener until the server stops, then waits for them.
pub(crate) async fn accept_loop(
    listener: Listener,
    config: Arc<ServerConfig>,
    slots: Arc<Slots>,
    budget: Budget,
    mut shutdown: Shutdown,
) {
    let mut tasks = tokio::task::JoinSet::new();
    let mut accept_errors = AcceptErrors::default();
    let name = listener.endpoint.config.name.clone();
    loop {
        tokio::select! {
            () = shutdown.stopping() => break,
            accepted = listener.tcp.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors: a connection that has not authenticated gives
                        // way, so that one that will can be accepted.
                        if accept_errors.failed(&e, &name) {
                            slots.make_room();
                        }
                        tokio::time::sleep(AcceptErrors::backoff()).await;
                        continue;
                    }
                };
                let permit = match slots.take(peer) {
                    Ok(slot) => slot,
                    Err(why) => {
                        warn!(%peer, "closing connection: {why}");
                        continue;
                    }
                };
                let endpoint = Arc::clone(&listener.endpoint);
                let config = Arc::clone(&config);
                let budget = budget.clone();
                let shutdown = shutdown.clone();
                tasks.spawn(async move {
                    peer::serve(stream, peer, &endpoint, &config, budget, shutdown, &permit).await;
                    drop(permit);
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    while tasks.join_next().await.is_some() {}
}
