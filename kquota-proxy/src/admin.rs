//! The quota admin APIs the proxy answers itself, from its own engine and durable store:
//! DescribeClientQuotas and AlterClientQuotas (and, when enabled, the seeds' draft AlterQuotas on
//! API key 50), so that `kafka-configs --bootstrap-server <proxy>` configures the proxy. The
//! cluster never sees them; every other request is forwarded.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kquota::Engine;
use kquota_wire::{
    Authorizer, CloseReason, Handler, Outcome, Principal, SecurityProtocol, ServerInfo, Session,
    ALTER_CLIENT_QUOTAS, ALTER_QUOTAS, DESCRIBE_CLIENT_QUOTAS,
};

/// The admin APIs' handler, shared by every connection.
#[derive(Debug)]
pub(crate) struct Admin {
    handler: Handler,
    /// Who may describe and alter (the handler has its own copy).
    authorizer: Authorizer,
    draft: bool,
}

impl Admin {
    /// Answers from `engine`, persisting to `store` (if there is one). As Kafka's broker with
    /// only `super.users` configured: `super_users` may alter, every authenticated principal may
    /// describe, and ANONYMOUS may describe only if `anonymous_describe`.
    pub(crate) fn new(
        engine: Arc<Engine>,
        store: Option<Arc<dyn kquota::Persistence>>,
        super_users: Vec<Principal>,
        anonymous_describe: bool,
        draft: bool,
    ) -> Admin {
        let mut handler = Handler::new(
            engine,
            ServerInfo {
                node_id: -1,
                host: String::new(),
                port: 0,
                cluster_id: String::new(),
            },
        )
        .with_draft_alter_quotas(draft);
        let authorizer = Authorizer::new(super_users).allow_anonymous_describe(anonymous_describe);
        handler = handler.with_authorizer(authorizer.clone());
        if let Some(store) = store {
            handler = handler.with_store(store);
        }
        Admin {
            handler,
            authorizer,
            draft,
        }
    }

    /// Whether the proxy answers `api_key` itself.
    pub(crate) fn serves(&self, api_key: i16) -> bool {
        api_key == DESCRIBE_CLIENT_QUOTAS
            || api_key == ALTER_CLIENT_QUOTAS
            || (self.draft && api_key == ALTER_QUOTAS)
    }

    /// Whether `principal` may describe or alter quotas here: a connection whose quota admin
    /// request it is has proven itself, as one the broker answered has.
    pub(crate) fn authorizes(&self, principal: &Principal) -> bool {
        self.authorizer.may_describe(principal) || self.authorizer.may_alter(principal)
    }

    /// The answer to the request `frame` (bytes after the size prefix) from `principal`, with its
    /// size prefix; `Err` if the connection is to close (as Kafka closes it for a request it
    /// cannot read).
    pub(crate) fn answer(
        &self,
        principal: &Principal,
        peer: SocketAddr,
        frame: &[u8],
    ) -> Result<Bytes, CloseReason> {
        let mut session = Session::new("PROXY", SecurityProtocol::Plaintext, Some(peer))
            .with_principal(principal.clone());
        match self.handler.handle(&mut session, frame) {
            Outcome::Respond(body) => Ok(prefixed(body)),
            // A proxy session never authenticates through the handler, so it never refuses one.
            Outcome::Close(reason) | Outcome::RespondAndClose(_, reason) => Err(reason),
        }
    }
}

fn prefixed(body: BytesMut) -> Bytes {
    let mut out = BytesMut::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out.freeze()
}
