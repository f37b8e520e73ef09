//! Dispatch: a request frame's header read, checked against what the session may ask, and handed
//! to its API's module.

use bytes::Bytes;

use crate::apis::{
    ApiSupport, ALTER_CLIENT_QUOTAS, ALTER_QUOTAS, API_VERSIONS, DESCRIBE_CLIENT_QUOTAS,
    DESCRIBE_CLUSTER, DESCRIBE_USER_SCRAM_CREDENTIALS, METADATA, SASL_AUTHENTICATE, SASL_HANDSHAKE,
};
use crate::frame::Reader;
use crate::handler::Handler;
use crate::outcome::{CloseReason, Outcome};
use crate::security::{SaslStage, Session};
use crate::stream::Reply;

impl Handler {
    /// Handles one request of `session`'s connection: `frame` is everything after the 4-byte size
    /// prefix (header and body). SaslHandshake and SaslAuthenticate advance the session's
    /// authentication. Never panics; only a fully decoded DescribeClientQuotas, AlterClientQuotas
    /// or AlterQuotas request from an authorized principal reaches the engine.
    pub fn handle(&self, session: &mut Session, frame: &[u8]) -> Outcome {
        match self.dispatch(session, &Bytes::copy_from_slice(frame)) {
            Ok(Reply::Outcome(outcome)) => outcome,
            Ok(Reply::Stream(stream)) => Outcome::Respond(stream.into_bytes()),
            Err(reason) => Outcome::Close(reason),
        }
    }

    /// [`Handler::handle`] for a server that writes answers as they are made: an answer that grows
    /// with its request (a refused AlterClientQuotas or AlterQuotas echoes every entry; a Metadata
    /// request answers every topic it names) comes as a [`ResponseStream`](crate::ResponseStream),
    /// made from the request's bytes as it is written, so it is never whole in memory and the
    /// request is never decoded into one. Everything else is the [`Outcome`] `handle` gives, and
    /// the bytes written are the same either way.
    pub fn handle_streaming(&self, session: &mut Session, frame: Bytes) -> Reply {
        match self.dispatch(session, &frame) {
            Ok(reply) => reply,
            Err(reason) => Reply::Outcome(Outcome::Close(reason)),
        }
    }

    /// Whether `session` may describe quotas.
    fn may_describe(&self, session: &Session) -> bool {
        self.authorizer
            .as_ref()
            .is_none_or(|a| a.may_describe(session.principal()))
    }

    /// Whether `session` may alter quotas.
    fn may_alter(&self, session: &Session) -> bool {
        self.authorizer
            .as_ref()
            .is_none_or(|a| a.may_alter(session.principal()))
    }

    fn dispatch(&self, session: &mut Session, frame: &Bytes) -> Result<Reply, CloseReason> {
        let mut r = Reader::new(frame);
        let api_key = r
            .i16("request_api_key")
            .map_err(CloseReason::MalformedHeader)?;
        let api_version = r
            .i16("request_api_version")
            .map_err(CloseReason::MalformedHeader)?;
        let Some(support) = self.support(session, api_key) else {
            return Err(CloseReason::UnsupportedApi {
                api_key,
                api_version,
            });
        };
        // Kafka answers ApiVersions at any version (KIP-511); every other API must be in range.
        if api_key != API_VERSIONS && !support.supports(api_version) {
            return Err(CloseReason::UnsupportedVersion {
                api_key,
                api_version,
            });
        }
        let header = crate::frame::read_header_rest(
            &mut r,
            api_key,
            api_version,
            if api_key == DESCRIBE_USER_SCRAM_CREDENTIALS && !self.draft_alter_quotas {
                2
            } else {
                request_header_version(api_key, api_version)
            },
        )
        .map_err(CloseReason::MalformedHeader)?;
        let body = &frame[r.position()..];
        // Kafka's SaslServerAuthenticator: before authentication only these are read.
        let allowed = match &session.sasl {
            SaslStage::Done => true,
            SaslStage::Handshake => matches!(api_key, API_VERSIONS | SASL_HANDSHAKE),
            SaslStage::Authenticate(_) | SaslStage::ScramFinal(_) => api_key == SASL_AUTHENTICATE,
            SaslStage::Failed => false,
        };
        if !allowed {
            return Err(CloseReason::Unauthenticated {
                api_key,
                api_version,
            });
        }
        let ok = |body| Reply::Outcome(Outcome::Respond(body));
        match api_key {
            API_VERSIONS => crate::api_versions::handle(self, session, header, body).map(ok),
            METADATA => crate::cluster::metadata(self, header, frame.slice_ref(body)),
            DESCRIBE_CLUSTER => crate::cluster::describe_cluster(self, header, body).map(ok),
            DESCRIBE_CLIENT_QUOTAS => {
                let allowed = self.may_describe(session);
                log_denial(session, allowed, "DescribeClientQuotas");
                crate::describe::handle(self, allowed, header, body).map(ok)
            }
            ALTER_CLIENT_QUOTAS => {
                let allowed = self.may_alter(session);
                if !allowed {
                    // The audit's refusal, in the authorizer log's words.
                    crate::audit::refusal(session, "AlterClientQuotas");
                    // Answered from the request's bytes, without decoding its entries.
                    return crate::alter::refuse(header, frame.slice_ref(body)).map(Reply::Stream);
                }
                crate::alter::handle(self, session, allowed, header, body).map(ok)
            }
            ALTER_QUOTAS if self.draft_alter_quotas => {
                let allowed = self.may_alter(session);
                if !allowed {
                    crate::audit::refusal(session, "AlterQuotas");
                    return crate::alter_quotas::refuse(header, frame.slice_ref(body))
                        .map(Reply::Stream);
                }
                crate::alter_quotas::handle(self, session, allowed, header, body).map(ok)
            }
            DESCRIBE_USER_SCRAM_CREDENTIALS => {
                // Kafka: DESCRIBE on the cluster, which without ACLs only super users have. The
                // answer names every SASL user, so describing quotas is not enough.
                let allowed = self.may_alter(session);
                log_denial(session, allowed, "DescribeUserScramCredentials");
                if !allowed {
                    return crate::scram_credentials::refuse(header, frame.slice_ref(body))
                        .map(Reply::Stream);
                }
                crate::scram_credentials::handle(self, header, body).map(ok)
            }
            SASL_HANDSHAKE => {
                crate::sasl::handshake(self, session, header, body).map(Reply::Outcome)
            }
            SASL_AUTHENTICATE => {
                crate::sasl::authenticate(self, session, header, body).map(Reply::Outcome)
            }
            _ => Err(CloseReason::UnsupportedApi {
                api_key,
                api_version,
            }),
        }
    }

    fn support(&self, session: &Session, api_key: i16) -> Option<ApiSupport> {
        self.supported_apis(session)
            .into_iter()
            .find(|a| a.api_key == api_key)
    }
}

/// Logs a refused request with its principal, as Kafka's authorizer log does.
fn log_denial(session: &Session, allowed: bool, api: &str) {
    if !allowed {
        tracing::warn!(
            peer = ?session.peer(),
            listener = session.listener(),
            "Principal = {} is Denied operation {api} on the cluster (CLUSTER_AUTHORIZATION_FAILED)",
            session.principal()
        );
    }
}

/// The request header version Kafka uses for an API version (1: client id; 2: flexible).
fn request_header_version(api_key: i16, version: i16) -> i16 {
    let flexible = match api_key {
        METADATA => version >= 9,
        API_VERSIONS => version >= 3,
        DESCRIBE_CLIENT_QUOTAS | ALTER_CLIENT_QUOTAS => version >= 1,
        DESCRIBE_CLUSTER => true,
        SASL_AUTHENTICATE => version >= 2,
        _ => false,
    };
    if flexible {
        2
    } else {
        1
    }
}
