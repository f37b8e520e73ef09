//! ApiVersions (18): what this handler serves.

use bytes::BytesMut;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use kquota::ErrorCode;

use crate::apis::{API_VERSIONS, API_VERSIONS_SUPPORT};
use crate::body::{decode, encode, respond};
use crate::frame::{Header, ReadResult, Reader};
use crate::handler::Handler;
use crate::outcome::CloseReason;
use crate::security::Session;

const UNSUPPORTED_VERSION: i16 = ErrorCode::UNSUPPORTED_VERSION.0;
const INVALID_REQUEST: i16 = ErrorCode::INVALID_REQUEST.0;

fn walk(r: &mut Reader<'_>, version: i16) -> ReadResult<()> {
    if version >= 3 {
        r.string(true, false, "client_software_name")?;
        r.string(true, false, "client_software_version")?;
        r.tagged_fields("ApiVersionsRequest")?;
    }
    Ok(())
}

/// Kafka's check for client software names and versions: `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`.
fn valid_software_field(s: &str) -> bool {
    let b = s.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'.';
    match b {
        [] => false,
        [only] => only.is_ascii_alphanumeric(),
        [first, middle @ .., last] => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && middle.iter().all(inner)
        }
    }
}

fn api_version(api_key: i16, min_version: i16, max_version: i16) -> ApiVersion {
    let mut v = ApiVersion::default();
    v.api_key = api_key;
    v.min_version = min_version;
    v.max_version = max_version;
    v
}

pub(super) fn handle(
    h: &Handler,
    session: &Session,
    header: Header,
    body: &[u8],
) -> Result<BytesMut, CloseReason> {
    let own = API_VERSIONS_SUPPORT;
    if !own.supports(header.api_version) {
        // KIP-511: the body is not read; the answer uses the v0 layout and lists ApiVersions' own
        // versions so the client can retry with one of them.
        let mut response = ApiVersionsResponse::default();
        response.error_code = UNSUPPORTED_VERSION;
        response.api_keys = vec![api_version(API_VERSIONS, own.min_version, own.max_version)];
        return encode(header, 0, &response).map_err(|error| CloseReason::Unencodable {
            api_key: header.api_key,
            api_version: header.api_version,
            error,
        });
    }
    let request: ApiVersionsRequest = decode(header, body, walk)?;
    let mut response = ApiVersionsResponse::default();
    if header.api_version >= 3
        && !(valid_software_field(&request.client_software_name)
            && valid_software_field(&request.client_software_version))
    {
        response.error_code = INVALID_REQUEST;
    } else {
        response.api_keys = h
            .supported_apis(session)
            .into_iter()
            .map(|a| api_version(a.api_key, a.min_version, a.max_version))
            .collect();
    }
    respond(header, &response)
}

#[cfg(test)]
mod tests {
    use super::valid_software_field;

    #[test]
    fn software_fields() {
        for ok in ["a", "apache-kafka-java", "4.3.1", "kafka-python", "x1.2-rc"] {
            assert!(valid_software_field(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", ".", "a b", "a_b", "é"] {
            assert!(!valid_software_field(bad), "{bad}");
        }
    }
}
