//! One peer, start to end: TLS on SSL and SASL_SSL listeners, the session's principal, then its
//! requests answered strictly in order (Kafka's pipelining guarantee) until it leaves, idles out,
//! a request calls for closing, or the server stops.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

use kquota_wire::{AuthContext, Handler, Outcome, Reply, Session};

use crate::connection::Connection;
use crate::metrics::Metrics;
use crate::settings::{ListenerConfig, ServerConfig};
use kquota_host::{Budget, Shutdown, Slot};

/// What a connection needs from the listener that accepted it.
pub(crate) struct Endpoint {
    /// The listener's name, protocol and bound address.
    pub(crate) config: ListenerConfig,
    /// On SSL and SASL_SSL listeners.
    /// Reloaded on SIGHUP; each connection takes the one current when it is accepted.
    pub(crate) tls: Option<Arc<kquota_host::Reloadable<TlsAcceptor>>>,
    /// The handler, with this listener's advertised address.
    /// Replaced on SIGHUP when the SASL users are reloaded; each connection keeps the one it
    /// started with.
    pub(crate) handler: arc_swap::ArcSwap<Handler>,
    /// The server's counters.
    pub(crate) metrics: Arc<Metrics>,
}

/// Runs TLS (on SSL and SASL_SSL listeners), makes the connection's session, and serves it.
pub(crate) async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    listener: &Endpoint,
    config: &ServerConfig,
    budget: Budget,
    mut shutdown: Shutdown,
    slot: &Slot,
) {
    let _ = stream.set_nodelay(true);
    let name = listener.config.name.as_str();
    let protocol = listener.config.protocol;
    debug!(%peer, listener = name, "connection opened");
    let session = Session::new(name, protocol, Some(peer));
    let Some(acceptor) = listener.tls.as_ref().map(|t| t.current()) else {
        serve_requests(stream, session, listener, config, budget, shutdown, slot).await;
        return;
    };
    let handshake = tokio::select! {
        r = tokio::time::timeout(config.idle_timeout, acceptor.accept(stream)) => r,
        () = shutdown.stopping() => return,
        _ = slot.closing() => return,
    };
    let tls = match handshake {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            listener.metrics.failed_authentication();
            failed_authentication(peer, name, &format!("SSL handshake failed: {e}"), config).await;
            return;
        }
        Err(_) => {
            debug!(%peer, listener = name, "closing connection: TLS handshake timed out");
            return;
        }
    };
    let session = if protocol.uses_sasl() {
        session
    } else {
        // SSL: the principal comes from the client certificate, if any.
        let certificate = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.as_ref().to_vec());
        let context = AuthContext::Ssl {
            peer: Some(peer),
            peer_certificate: certificate.as_deref(),
        };
        match listener.handler.load().principal_builder().build(&context) {
            Ok(principal) => session.with_principal(principal),
            Err(e) => {
                listener.metrics.failed_authentication();
                failed_authentication(peer, name, &e.to_string(), config).await;
                return;
            }
        }
    };
    serve_requests(tls, session, listener, config, budget, shutdown, slot).await;
}

/// Logs a failed authentication as Kafka does and waits `connection.failed.authentication.delay.ms`
/// before the caller closes the connection (only this connection's task waits).
async fn failed_authentication(peer: SocketAddr, listener: &str, why: &str, config: &ServerConfig) {
    warn!(%peer, listener, "Failed authentication with /{} ({why})", peer.ip());
    tokio::time::sleep(config.failed_authentication_delay).await;
}

/// Answers the requests of one connection in order until it is to close.
async fn serve_requests<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    mut session: Session,
    listener: &Endpoint,
    config: &ServerConfig,
    budget: Budget,
    mut shutdown: Shutdown,
    slot: &Slot,
) {
    let (handler, metrics) = (&listener.handler.load_full(), &listener.metrics);
    let peer = session.peer().map(|p| p.to_string()).unwrap_or_default();
    let mut connection = Connection::new(stream, peer.clone(), config.idle_timeout, budget);
    loop {
        // Before a SASL client has authenticated, Kafka reads at most sasl.server.max.receive.size.
        let max_bytes = if session.is_authenticated() {
            config.max_request_bytes
        } else {
            config.sasl_max_receive_bytes.min(config.max_request_bytes)
        };
        // Until it has authenticated, a connection may be told to make room, or run out of time.
        // Once a request's size has arrived the connection is in use, and no longer gives way.
        let frame = tokio::select! {
            frame = connection.read_frame(max_bytes.get(), &mut shutdown, || slot.busy()) => frame,
            _ = slot.closing() => None,
        };
        let Some(frame) = frame else {
            break;
        };
        // The API key and version, for the metrics (a frame too short has none: zeros).
        let head: [u8; 4] = frame
            .get(..4)
            .and_then(|h| h.try_into().ok())
            .unwrap_or([0; 4]);
        // Alterations fsync and PBKDF2 is slow on purpose; keep both off the async workers.
        let h = Arc::clone(handler);
        let outcome = match tokio::task::spawn_blocking(move || {
            // Answers that grow with the request come as streams, written as they are made.
            let outcome = h.handle_streaming(&mut session, frame);
            (outcome, session)
        })
        .await
        {
            Ok((outcome, s)) => {
                session = s;
                outcome
            }
            Err(e) => {
                warn!(%peer, "closing connection: request handler failed: {e}");
                break;
            }
        };
        let outcome = match outcome {
            Reply::Outcome(outcome) => outcome,
            Reply::Stream(body) => {
                metrics.streamed(head);
                let written = connection.write_stream(body, &mut shutdown).await;
                slot.answered(session.is_authenticated());
                if !written {
                    debug!(%peer, "closing connection: the response was not taken");
                    return;
                }
                continue;
            }
        };
        match outcome {
            Outcome::Respond(body) => {
                metrics.answered(head, &body);
                let written = connection.write_frame(&body, &mut shutdown).await;
                // A request answered on an authenticated session proves the connection.
                slot.answered(session.is_authenticated());
                if !written {
                    // A peer that does not read would not take a TLS close_notify either, and a
                    // TLS shutdown waits to send it: drop the connection without one.
                    debug!(%peer, "closing connection: the response was not taken");
                    return;
                }
            }
            Outcome::RespondAndClose(body, reason) => {
                metrics.answered(head, &body);
                metrics.failed_authentication();
                if let Some(addr) = session.peer() {
                    failed_authentication(addr, session.listener(), &reason.to_string(), config)
                        .await;
                }
                if !connection.write_frame(&body, &mut shutdown).await {
                    return;
                }
                break;
            }
            Outcome::Close(reason) => {
                metrics.closed(head);
                warn!(%peer, listener = session.listener(), "closing connection: {reason}");
                break;
            }
        }
    }
    connection.close().await;
}
