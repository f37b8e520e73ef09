//! DescribeUserScramCredentials (50), version 0 (flexible), served when the seeds' draft AlterQuotas
//! is off (the default): Kafka's `ScramImage.describe` over the handler's SCRAM credentials
//! ([`SaslConfig::credentials`](crate::SaslConfig), none without SASL). Each user's mechanisms and
//! iterations are told; salts and keys never leave the server.

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::{Encodable, StrBytes};

use crate::body::decode;
use crate::frame::{fit_message, CodecError, Header, ReadResult, Reader};
use crate::handler::Handler;
use crate::outcome::CloseReason;
use crate::security::scram::ScramCredential;
use crate::security::{Credentials, ScramMechanism};
use crate::stream::{Pieces, ResponseStream};
use kquota::{java_map_order, ApiError, ErrorCode};

/// Kafka's `RESOURCE_NOT_FOUND`.
const RESOURCE_NOT_FOUND: i16 = ErrorCode::RESOURCE_NOT_FOUND.0;
/// Kafka's `DUPLICATE_RESOURCE`.
const DUPLICATE_RESOURCE: i16 = ErrorCode::DUPLICATE_RESOURCE.0;
/// `ScramImage.DESCRIBE_USER_THAT_DOES_NOT_EXIST`.
const NOT_FOUND_MESSAGE: &str = "Attempt to describe a user credential that does not exist: ";
/// `ScramImage.DESCRIBE_DUPLICATE_USER`.
const DUPLICATE_MESSAGE: &str =
    "Cannot describe SCRAM credentials for the same user twice in a single request: ";
/// The capacity of `ScramImage.describe`'s `new HashMap<>()`, which orders the results.
const JAVA_HASH_MAP_CAPACITY: usize = 16;

fn walk(r: &mut Reader<'_>, version: i16) -> ReadResult<()> {
    walk_users(r)?;
    walk_rest(r, version)
}

/// The users, bounded and checked; how many (`None` for a null list).
fn walk_users(r: &mut Reader<'_>) -> ReadResult<Option<usize>> {
    r.each(true, true, "users", |r| {
        r.string(true, false, "name")?;
        r.tagged_fields("UserName")
    })
}

/// What follows the users.
fn walk_rest(r: &mut Reader<'_>, _version: i16) -> ReadResult<()> {
    r.tagged_fields("DescribeUserScramCredentialsRequest")
}

/// Kafka's mechanism type (`org.apache.kafka.clients.admin.ScramMechanism.type()`).
fn mechanism_type(mechanism: ScramMechanism) -> i8 {
    match mechanism {
        ScramMechanism::Sha256 => 1,
        ScramMechanism::Sha512 => 2,
    }
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn result(user: &str, code: i16, message: String) -> DescribeUserScramCredentialsResult {
    let mut r = DescribeUserScramCredentialsResult::default();
    r.user = str_bytes(user);
    r.error_code = code;
    r.error_message = Some(StrBytes::from_string(fit_message(message)));
    r
}

/// A user's mechanisms and iterations, SHA-256 first; never the salt or the keys.
fn described(user: &str, credentials: &[&ScramCredential]) -> DescribeUserScramCredentialsResult {
    let mut r = DescribeUserScramCredentialsResult::default();
    r.user = str_bytes(user);
    // On success Kafka leaves the message at its schema default, an empty string.
    r.credential_infos = credentials
        .iter()
        .map(|c| {
            let mut info = CredentialInfo::default();
            info.mechanism = mechanism_type(c.mechanism);
            info.iterations = i32::try_from(c.iterations).unwrap_or(i32::MAX);
            info
        })
        .collect();
    r
}

/// `user`'s credentials, SHA-256 first.
fn credentials_of<'c>(
    credentials: Option<&'c Credentials>,
    user: &str,
) -> Vec<&'c ScramCredential> {
    let Some(credentials) = credentials else {
        return Vec::new();
    };
    [ScramMechanism::Sha256, ScramMechanism::Sha512]
        .into_iter()
        .filter_map(|m| credentials.get(user, m))
        .collect()
}

/// Kafka's `ScramImage.describe`: no users (null or empty) means every user with a credential; a
/// named user without one gets `RESOURCE_NOT_FOUND`, a user named more than once one
/// `DUPLICATE_RESOURCE` result. Results come in the iteration order of Kafka's `HashMap` of names.
pub(crate) fn describe(
    credentials: Option<&Credentials>,
    users: Option<&[&str]>,
) -> Vec<DescribeUserScramCredentialsResult> {
    let names: Vec<&str> = match users {
        Some(users) if !users.is_empty() => users.to_vec(),
        _ => credentials
            .map(|c| c.users().map(|(name, _)| name).collect())
            .unwrap_or_default(),
    };
    // Counted once, so that a request naming many users costs O(n), not O(n²).
    let mut times: HashMap<&str, usize> = HashMap::with_capacity(names.len());
    for name in &names {
        *times.entry(name).or_default() += 1;
    }
    java_map_order(&names, JAVA_HASH_MAP_CAPACITY)
        .into_iter()
        .map(|i| {
            let name = names[i];
            if times.get(name).copied().unwrap_or(0) > 1 {
                return result(
                    name,
                    DUPLICATE_RESOURCE,
                    format!("{DUPLICATE_MESSAGE}{name}"),
                );
            }
            let found = credentials_of(credentials, name);
            if found.is_empty() {
                result(
                    name,
                    RESOURCE_NOT_FOUND,
                    format!("{NOT_FOUND_MESSAGE}{name}"),
                )
            } else {
                described(name, &found)
            }
        })
        .collect()
}

/// Kafka's `DescribeUserScramCredentialsRequest.getErrorResponse`: the error at the top level and
/// once per requested user (with an empty user name). For a null list Kafka's own loop throws and
/// the request is never answered; here the answer has the top-level error and no results.
fn error_response(
    error: ApiError,
    requested: Option<usize>,
) -> DescribeUserScramCredentialsResponse {
    let message = fit_message(error.message);
    let mut response = DescribeUserScramCredentialsResponse::default();
    response.error_code = error.code.0;
    response.error_message = Some(StrBytes::from_string(message.clone()));
    response.results = (0..requested.unwrap_or(0))
        .map(|_| result("", error.code.0, message.clone()))
        .collect();
    response
}

/// Encodes the response with response header v1 (the API is flexible from v0).
fn encode(
    header: Header,
    body: &DescribeUserScramCredentialsResponse,
) -> Result<BytesMut, CodecError> {
    let mut buf = crate::frame::response_header(header.correlation_id, 1);
    body.encode(&mut buf, header.api_version)
        .map_err(|e| CodecError::Encoder(e.to_string()))?;
    Ok(buf)
}

/// A refused request, answered as Kafka's `getErrorResponse` answers it (the error at the top level
/// and once per requested user) from a walk of the request, which is never decoded: the answer is
/// made as it is written, so a request naming millions of users costs its own bytes, not a decoded
/// copy and a whole answer.
pub(super) fn refuse(header: Header, body: Bytes) -> Result<ResponseStream, CloseReason> {
    let requested = crate::body::read_body(header, &body, |r, v| {
        let users = walk_users(r)?;
        walk_rest(r, v)?;
        Ok(users)
    })?;
    let error = ApiError::cluster_authorization_failed();
    let message = fit_message(error.message);
    // The answer's fixed part is kafka-protocol's own encoding of an answer without results, less
    // its last two bytes (an empty compact array and the tagged fields): the count and the results
    // go in between.
    let mut empty = DescribeUserScramCredentialsResponse::default();
    empty.error_code = error.code.0;
    empty.error_message = Some(StrBytes::from_string(message.clone()));
    let mut head = encode(header, &empty).map_err(|error| CloseReason::Unencodable {
        api_key: header.api_key,
        api_version: header.api_version,
        error,
    })?;
    head.truncate(head.len() - 2);
    let count = requested.unwrap_or(0);
    let mut head = head.to_vec();
    crate::frame::put::array_len(&mut head, true, count);
    let mut piece = BytesMut::new();
    result("", error.code.0, message)
        .encode(&mut piece, header.api_version)
        .map_err(|e| CloseReason::Unencodable {
            api_key: header.api_key,
            api_version: header.api_version,
            error: CodecError::Encoder(e.to_string()),
        })?;
    let piece = piece.to_vec();
    let repeat = |left: usize| -> Box<dyn Pieces> {
        Box::new(Repeat {
            piece: piece.clone(),
            left,
        })
    };
    Ok(ResponseStream::new(
        head,
        repeat(count),
        repeat(count),
        vec![0],
    ))
}

/// The same result, `left` more times.
struct Repeat {
    piece: Vec<u8>,
    left: usize,
}

impl Pieces for Repeat {
    fn next_piece(&mut self, out: &mut Vec<u8>) -> bool {
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        out.extend_from_slice(&self.piece);
        true
    }
}

/// An authorized request (a super user's): every user asked for, or every user.
pub(super) fn handle(h: &Handler, header: Header, body: &[u8]) -> Result<BytesMut, CloseReason> {
    let request: DescribeUserScramCredentialsRequest = decode(header, body, walk)?;
    let response = {
        let names: Option<Vec<&str>> = request
            .users
            .as_ref()
            .map(|users| users.iter().map(|u| u.name.as_str()).collect());
        let credentials = h.sasl.as_ref().map(|s| s.credentials.as_ref());
        let mut response = DescribeUserScramCredentialsResponse::default();
        response.results = describe(credentials, names.as_deref());
        response
    };
    encode(header, &response)
        .or_else(|e| {
            // Only a configured user name longer than Kafka's strings can make this fail.
            let fallback = error_response(
                ApiError::new(
                    ErrorCode::UNKNOWN_SERVER_ERROR,
                    format!("The response cannot be encoded: {e}"),
                ),
                None,
            );
            encode(header, &fallback)
        })
        .map_err(|error| CloseReason::Unencodable {
            api_key: header.api_key,
            api_version: header.api_version,
            error,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds() -> Credentials {
        let mut c = Credentials::new();
        for (user, mechanism, iterations) in [
            ("alice", ScramMechanism::Sha512, 8192),
            ("alice", ScramMechanism::Sha256, 4096),
            ("bob", ScramMechanism::Sha256, 4096),
        ] {
            c.insert(
                user,
                ScramCredential::generate(mechanism, "pw", iterations).unwrap(),
            );
        }
        c
    }

    fn summary(results: &[DescribeUserScramCredentialsResult]) -> Vec<String> {
        results
            .iter()
            .map(|r| {
                let infos: Vec<String> = r
                    .credential_infos
                    .iter()
                    .map(|i| format!("{}:{}", i.mechanism, i.iterations))
                    .collect();
                format!(
                    "{} {} {} [{}]",
                    r.user.as_str(),
                    r.error_code,
                    r.error_message.as_deref().unwrap_or("null"),
                    infos.join(",")
                )
            })
            .collect()
    }

    #[test]
    fn every_user_named_unknown_and_repeated() {
        let c = creds();
        assert_eq!(
            summary(&describe(Some(&c), None)),
            ["bob 0  [1:4096]", "alice 0  [1:4096,2:8192]"],
            "every user, in the order of a Java HashMap (checked with jshell)"
        );
        assert_eq!(
            summary(&describe(Some(&c), Some(&[]))),
            summary(&describe(Some(&c), None))
        );
        assert_eq!(
            summary(&describe(Some(&c), Some(&["alice", "zed", "bob", "alice"]))),
            [
                "bob 0  [1:4096]",
                "zed 91 Attempt to describe a user credential that does not exist: zed []",
                "alice 92 Cannot describe SCRAM credentials for the same user twice in a single \
                 request: alice []",
            ]
        );
        assert!(describe(None, None).is_empty());
        assert_eq!(
            summary(&describe(None, Some(&["alice"]))),
            ["alice 91 Attempt to describe a user credential that does not exist: alice []"]
        );
    }
}
