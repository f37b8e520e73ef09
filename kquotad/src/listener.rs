//! One bound listener and its accept loop: each connection within the limits gets its own task,
//! on one of the network threads, given out in turn; when the server is full, a connection that
//! has not authenticated (or one idle long) gives way (see [`kquota_host::Slots`]).

use std::sync::Arc;

use tokio::net::TcpListener;
use tracing::warn;

use kquota_host::{accept, AcceptErrors, Accepted, Budget, NetworkThreads, Shutdown, Slots};

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
    threads: Arc<NetworkThreads>,
    mut shutdown: Shutdown,
) {
    // The connections run on the network threads, and are waited for here all the same.
    let mut tasks = tokio::task::JoinSet::new();
    let mut errors = AcceptErrors::default();
    let name = listener.endpoint.config.name.clone();
    loop {
        tokio::select! {
            () = shutdown.stopping() => break,
            accepted = accept(&listener.tcp, &slots, &mut errors, &name) => {
                let Accepted::Connection(stream, peer, slot) = accepted else {
                    continue;
                };
                // The socket moves to its network thread's I/O driver: deregistered from this
                // one here, registered with that one there.
                let stream = match stream.into_std() {
                    Ok(s) => s,
                    Err(e) => {
                        warn!(%peer, "closing connection: cannot hand it to a network thread: {e}");
                        continue;
                    }
                };
                let endpoint = Arc::clone(&listener.endpoint);
                let config = Arc::clone(&config);
                let budget = budget.clone();
                let shutdown = shutdown.clone();
                let serve = async move {
                    match tokio::net::TcpStream::from_std(stream) {
                        Ok(stream) => {
                            peer::serve(stream, peer, &endpoint, &config, budget, shutdown, &slot)
                                .await
                        }
                        Err(e) => {
                            warn!(%peer, "closing connection: its network thread cannot take it: {e}")
                        }
                    }
                    drop(slot);
                };
                tasks.spawn_on(serve, threads.next_thread());
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    while tasks.join_next().await.is_some() {}
}
