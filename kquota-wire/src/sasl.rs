//! SaslHandshake (17, version 1) and SaslAuthenticate (36, versions 0–2): PLAIN and SCRAM on a
//! SASL listener, as Kafka's `SaslServerAuthenticator` runs them.
//!
//! Until authentication completes only ApiVersions, SaslHandshake and SaslAuthenticate are served
//! (anything else closes the connection, as Kafka does). A failed authentication is answered with
//! `SASL_AUTHENTICATION_FAILED` (58) and the connection closes after the server's delay.

use bytes::Bytes;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use kquota::ErrorCode;

use crate::body::{decode, respond};
use crate::frame::{Header, ReadResult, Reader};
use crate::handler::Handler;
use crate::outcome::{CloseReason, Outcome};
use crate::security::scram::{
    ClientFirst, ScramCredential, ScramMechanism, ScramServer, MIN_ITERATIONS,
};
use crate::security::{AuthContext, Credentials, Principal, SaslMechanism, SaslStage, Session};

const UNSUPPORTED_SASL_MECHANISM: i16 = ErrorCode::UNSUPPORTED_SASL_MECHANISM.0;
const ILLEGAL_SASL_STATE: i16 = ErrorCode::ILLEGAL_SASL_STATE.0;
const SASL_AUTHENTICATION_FAILED: i16 = ErrorCode::SASL_AUTHENTICATION_FAILED.0;

fn walk_handshake(r: &mut Reader<'_>, _version: i16) -> ReadResult<()> {
    r.string(false, false, "mechanism")?;
    Ok(())
}

fn walk_authenticate(r: &mut Reader<'_>, version: i16) -> ReadResult<()> {
    let flexible = version >= 2;
    r.bytes(flexible, "auth_bytes")?;
    if flexible {
        r.tagged_fields("SaslAuthenticateRequest")?;
    }
    Ok(())
}

pub(super) fn handshake(
    h: &Handler,
    session: &mut Session,
    header: Header,
    body: &[u8],
) -> Result<Outcome, CloseReason> {
    let request: SaslHandshakeRequest = decode(header, body, walk_handshake)?;
    let enabled: Vec<StrBytes> = h
        .sasl
        .as_ref()
        .map(|s| {
            s.mechanisms
                .iter()
                .map(|m| StrBytes::from_static_str(m.name()))
                .collect()
        })
        .unwrap_or_default();
    let mut response = SaslHandshakeResponse::default();
    response.mechanisms = enabled;
    if !matches!(session.sasl, SaslStage::Handshake) {
        // Kafka answers a handshake on an authenticated (or non-SASL) connection this way.
        response.error_code = ILLEGAL_SASL_STATE;
        return respond(header, &response).map(Outcome::Respond);
    }
    let chosen = request
        .mechanism
        .parse::<SaslMechanism>()
        .ok()
        .filter(|m| h.sasl.as_ref().is_some_and(|s| s.enabled(*m)));
    match chosen {
        Some(m) => {
            session.sasl = SaslStage::Authenticate(m);
            respond(header, &response).map(Outcome::Respond)
        }
        None => {
            response.error_code = UNSUPPORTED_SASL_MECHANISM;
            let body = respond(header, &response)?;
            Ok(Outcome::RespondAndClose(
                body,
                CloseReason::AuthenticationFailed(format!(
                    "unsupported SASL mechanism '{}'",
                    request.mechanism.as_str()
                )),
            ))
        }
    }
}

pub(super) fn authenticate(
    h: &Handler,
    session: &mut Session,
    header: Header,
    body: &[u8],
) -> Result<Outcome, CloseReason> {
    let request: SaslAuthenticateRequest = decode(header, body, walk_authenticate)?;
    let stage = std::mem::replace(&mut session.sasl, SaslStage::Done);
    let step = match stage {
        SaslStage::Done | SaslStage::Handshake | SaslStage::Failed => {
            session.sasl = stage;
            let mut response = SaslAuthenticateResponse::default();
            response.error_code = ILLEGAL_SASL_STATE;
            response.error_message = Some(StrBytes::from_static_str(
                "SaslAuthenticate is only valid after a SaslHandshake on a SASL listener",
            ));
            return respond(header, &response).map(Outcome::Respond);
        }
        SaslStage::Authenticate(SaslMechanism::Plain) => plain(h, session, &request.auth_bytes),
        SaslStage::Authenticate(SaslMechanism::Scram(m)) => {
            scram_first(h, session, m, &request.auth_bytes)
        }
        SaslStage::ScramFinal(server) => scram_final(h, session, &server, &request.auth_bytes),
    };
    let mut response = SaslAuthenticateResponse::default();
    match step {
        Ok(bytes) => {
            response.auth_bytes = bytes;
            respond(header, &response).map(Outcome::Respond)
        }
        Err(Failure { client, log }) => {
            session.sasl = SaslStage::Failed;
            response.error_code = SASL_AUTHENTICATION_FAILED;
            response.error_message = Some(StrBytes::from_string(client));
            let body = respond(header, &response)?;
            Ok(Outcome::RespondAndClose(
                body,
                CloseReason::AuthenticationFailed(log),
            ))
        }
    }
}

/// A failed authentication: what the client is told, and what the log says.
struct Failure {
    client: String,
    log: String,
}

fn scram_refusal(m: ScramMechanism, log: String) -> Failure {
    // Kafka does not tell the client why (it may reveal whether the user exists).
    Failure {
        client: format!(
            "Authentication failed during authentication due to invalid credentials with SASL mechanism {m}"
        ),
        log,
    }
}

fn principal_for(
    h: &Handler,
    session: &Session,
    mechanism: SaslMechanism,
    user: &str,
) -> Result<Principal, Failure> {
    h.principal_builder
        .build(&AuthContext::Sasl {
            peer: session.peer(),
            protocol: session.protocol(),
            mechanism,
            authorization_id: user,
        })
        .map_err(|e| Failure {
            client: "Authentication failed: no principal for the authenticated user".to_owned(),
            log: format!("{mechanism} user '{user}': {e}"),
        })
}

fn plain(h: &Handler, session: &mut Session, token: &[u8]) -> Result<Bytes, Failure> {
    let fail = |client: &str, log: String| Failure {
        client: client.to_owned(),
        log,
    };
    let parts: Vec<&[u8]> = token.split(|b| *b == 0).collect();
    let [authzid, user, password] = parts[..] else {
        return Err(fail(
            &format!(
                "Invalid SASL/PLAIN response: expected 3 tokens, got {}",
                parts.len()
            ),
            "PLAIN: malformed token".to_owned(),
        ));
    };
    let (Ok(authzid), Ok(user)) = (std::str::from_utf8(authzid), std::str::from_utf8(user)) else {
        return Err(fail(
            "Authentication failed: Invalid username or password",
            "PLAIN: user name is not UTF-8".to_owned(),
        ));
    };
    if user.is_empty() {
        return Err(fail(
            "Authentication failed: username not specified",
            "PLAIN: no user name".to_owned(),
        ));
    }
    if password.is_empty() {
        return Err(fail(
            "Authentication failed: password not specified",
            format!("PLAIN user '{user}': no password"),
        ));
    }
    // A user that does not exist is checked against a stand-in with the same PBKDF2 as most
    // users', so a wrong name costs, and takes, what a wrong password does.
    let credentials = h.sasl.as_ref().map(|s| &*s.credentials);
    let found = credentials.and_then(|c| c.any(user));
    let (mechanism, iterations) = credentials.map_or(
        (ScramMechanism::Sha256, MIN_ITERATIONS),
        Credentials::usual_plain,
    );
    let stand_in = ScramCredential::decoy(mechanism, (iterations, 32), &h.decoy_key, user);
    let matches = found.unwrap_or(&stand_in).verify_password(password);
    if !(found.is_some() & matches) {
        return Err(fail(
            "Authentication failed: Invalid username or password",
            format!("PLAIN user '{user}': invalid username or password"),
        ));
    }
    if !authzid.is_empty() && authzid != user {
        return Err(fail(
            "Authentication failed: Client requested an authorization id that is different from username",
            format!("PLAIN user '{user}': authorization id '{authzid}' differs"),
        ));
    }
    let principal = principal_for(h, session, SaslMechanism::Plain, user)?;
    session.authenticated(principal);
    Ok(Bytes::new())
}

/// `user`'s credential for `m`, or a stand-in if there is none: stable per user, unpredictable,
/// with the iteration count most users have, made with the same few HMACs whether the user exists
/// or not, so that the exchange fails only at the final step, in the same time, and does not
/// reveal which users exist.
fn credential_or_decoy(h: &Handler, m: ScramMechanism, user: &str) -> ScramCredential {
    let credentials = h.sasl.as_ref().map(|s| &*s.credentials);
    let shape = credentials.map_or((MIN_ITERATIONS, 32), |c| c.usual_shape(m));
    let stand_in = ScramCredential::decoy(m, shape, &h.decoy_key, user);
    // One clone either way: a known user's entry is copied out of the table, so the stand-in is
    // copied too, and neither path does less.
    credentials
        .and_then(|c| c.get(user, m))
        .unwrap_or(&stand_in)
        .clone()
}

fn scram_first(
    h: &Handler,
    session: &mut Session,
    m: ScramMechanism,
    token: &[u8],
) -> Result<Bytes, Failure> {
    let first = ClientFirst::parse(token)
        .map_err(|e| scram_refusal(m, format!("{m}: bad client-first message: {e}")))?;
    if first.authzid.as_ref().is_some_and(|a| *a != first.username) {
        return Err(Failure {
            client: "Authentication failed: Client requested an authorization id that is different from username".to_owned(),
            log: format!("{m} user '{}': authorization id differs", first.username),
        });
    }
    let credential = credential_or_decoy(h, m, &first.username);
    let (server, out) =
        ScramServer::start(first, credential).map_err(|e| scram_refusal(m, format!("{m}: {e}")))?;
    session.sasl = SaslStage::ScramFinal(Box::new(server));
    Ok(Bytes::from(out))
}

fn scram_final(
    h: &Handler,
    session: &mut Session,
    server: &ScramServer,
    token: &[u8],
) -> Result<Bytes, Failure> {
    let m = server.mechanism();
    let out = server
        .finish(token)
        .map_err(|e| scram_refusal(m, format!("{m} user '{}': {e}", server.username())))?;
    let principal = principal_for(h, session, SaslMechanism::Scram(m), server.username())?;
    session.authenticated(principal);
    Ok(Bytes::from(out))
}
