//! DescribeClientQuotas (48), versions 0–1: Kafka's `ClientQuotasImage.describe` over the engine's
//! list.

use bytes::BytesMut;
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{DescribeClientQuotasRequest, DescribeClientQuotasResponse};
use kafka_protocol::protocol::StrBytes;

use crate::body::encode;
use crate::frame::{fit_message, Header, ReadResult, Reader, MAX_STRING_BYTES};
use crate::handler::Handler;
use crate::outcome::CloseReason;
use kquota::{ApiError, ErrorCode};
use kquota::{ComponentMatch, ListFilter, ListedEntity};
use kquota::{EntityName, EntityType};

const MATCH_TYPE_EXACT: i8 = 0;
const MATCH_TYPE_DEFAULT: i8 = 1;
const MATCH_TYPE_SPECIFIED: i8 = 2;

/// The most components [`filter`] can look at: it checks them in order, and with three entity
/// types, each allowed once, a fifth can never be reached (one of the first four is repeated or
/// unsupported, and refused).
const FILTER_COMPONENTS_READ: usize = 4;

/// Walks a request, every string checked as UTF-8 (as decoding it would).
fn walk(r: &mut Reader<'_>, version: i16) -> ReadResult<()> {
    read(r, version).map(drop)
}

/// Reads a request, keeping only the components [`filter`] can reach: a filter of millions of
/// components is walked (and checked) whole, but costs no more memory than one of four.
fn read(r: &mut Reader<'_>, version: i16) -> ReadResult<DescribeClientQuotasRequest> {
    let flexible = version >= 1;
    let mut request = DescribeClientQuotasRequest::default();
    r.each(flexible, false, "components", |r| {
        let entity_type = r.utf8(flexible, false, "entity_type")?.unwrap_or_default();
        let match_type = r.i8("match_type")?;
        let matched = r.utf8(flexible, true, "match")?;
        if flexible {
            r.tagged_fields("ComponentData")?;
        }
        if request.components.len() < FILTER_COMPONENTS_READ {
            let mut c = ComponentData::default();
            c.entity_type = StrBytes::from_string(entity_type.to_owned());
            c.match_type = match_type;
            c._match = matched.map(|m| StrBytes::from_string(m.to_owned()));
            request.components.push(c);
        }
        Ok(())
    })?;
    request.strict = r.bool("strict")?;
    if flexible {
        r.tagged_fields("DescribeClientQuotasRequest")?;
    }
    Ok(request)
}

/// Turns the request's components into a list filter with Kafka's checks, in Kafka's order: per
/// component, an empty type, a repeated type, an unsupported type (`UNSUPPORTED_VERSION`), then the
/// match string against the match type; then ip combined with user or client-id.
pub(super) fn filter(request: &DescribeClientQuotasRequest) -> Result<ListFilter, ApiError> {
    let mut components: Vec<(EntityType, ComponentMatch)> = Vec::new();
    for c in &request.components {
        let name = c.entity_type.as_str();
        if name.is_empty() {
            return Err(ApiError::invalid_request("Invalid empty entity type."));
        }
        let ty = match name {
            "user" => EntityType::User,
            "client-id" => EntityType::ClientId,
            "ip" => EntityType::Ip,
            // Unknown types are never kept, so they cannot be repeats.
            _ => {
                return Err(ApiError::new(
                    ErrorCode::UNSUPPORTED_VERSION,
                    format!("Unsupported entity type {name}"),
                ))
            }
        };
        if components.iter().any(|(t, _)| *t == ty) {
            return Err(ApiError::invalid_request(format!(
                "Entity type {name} cannot appear more than once in the filter."
            )));
        }
        let m =
            match (c.match_type, c._match.as_ref()) {
                (MATCH_TYPE_EXACT, None) => {
                    return Err(ApiError::invalid_request(
                        "Request specified MATCH_TYPE_EXACT, but set match string to null.",
                    ))
                }
                (MATCH_TYPE_EXACT, Some(s)) => ComponentMatch::Exact(s.to_string()),
                (MATCH_TYPE_DEFAULT, None) => ComponentMatch::Default,
                (MATCH_TYPE_DEFAULT, Some(_)) => {
                    return Err(ApiError::invalid_request(
                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
                    ))
                }
                (MATCH_TYPE_SPECIFIED, None) => ComponentMatch::Any,
                (MATCH_TYPE_SPECIFIED, Some(_)) => return Err(ApiError::invalid_request(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
                )),
                (other, _) => {
                    return Err(ApiError::invalid_request(format!(
                        "Unknown match type {other}"
                    )))
                }
            };
        components.push((ty, m));
    }
    let has = |t: EntityType| components.iter().any(|(c, _)| *c == t);
    if has(EntityType::Ip) && (has(EntityType::User) || has(EntityType::ClientId)) {
        return Err(ApiError::invalid_request(
            "Invalid entity filter component combination. IP filter component should not be used \
             with user or clientId filter component.",
        ));
    }
    Ok(ListFilter {
        components,
        strict: request.strict,
    })
}

fn entity_data(ty: EntityType, name: &EntityName) -> EntityData {
    let mut e = EntityData::default();
    e.entity_type = StrBytes::from_static_str(ty.as_str());
    e.entity_name = name
        .as_option()
        .map(|n| StrBytes::from_string(n.to_owned()));
    e
}

/// One response entry. Components go in the order Kafka's `HashMap` gives them (client-id before
/// user); values in the engine's key order.
fn entry(listed: &ListedEntity) -> EntryData {
    let mut out = EntryData::default();
    let mut parts: Vec<(EntityType, &EntityName)> = listed.entity.components().collect();
    parts.sort_by_key(|(t, _)| match t {
        EntityType::Ip => 0,
        EntityType::ClientId => 1,
        EntityType::User => 2,
    });
    out.entity = parts.into_iter().map(|(t, n)| entity_data(t, n)).collect();
    out.values = listed
        .quotas
        .iter()
        .map(|(key, value)| {
            let mut v = ValueData::default();
            v.key = StrBytes::from_string(key.to_string());
            v.value = *value;
            v
        })
        .collect();
    out
}

/// Kafka's `getErrorResponse`: the error at the top level, entries null.
fn error_response(error: ApiError) -> DescribeClientQuotasResponse {
    let mut response = DescribeClientQuotasResponse::default();
    response.error_code = error.code.0;
    response.error_message = Some(StrBytes::from_string(fit_message(error.message)));
    response.entries = None;
    response
}

pub(super) fn handle(
    h: &Handler,
    authorized: bool,
    header: Header,
    body: &[u8],
) -> Result<BytesMut, CloseReason> {
    if !authorized {
        // Kafka checks DESCRIBE_CONFIGS on the cluster before reading the filter. The request is
        // walked (a malformed one closes the connection, as its parsing would) but not decoded:
        // a refused describe costs its bytes, however many components it holds.
        crate::body::read_body(header, body, walk)?;
        let response = error_response(ApiError::cluster_authorization_failed());
        return encode(header, header.api_version, &response).map_err(|error| {
            CloseReason::Unencodable {
                api_key: header.api_key,
                api_version: header.api_version,
                error,
            }
        });
    }
    let request = crate::body::read_body(header, body, read)?;
    let response = match filter(&request) {
        Err(error) => error_response(error),
        Ok(filter) => {
            let listed = h.engine.list(&filter);
            let too_long = listed
                .iter()
                .flat_map(|l| l.entity.components())
                .filter_map(|(_, name)| name.as_option())
                .find(|name| name.len() > MAX_STRING_BYTES);
            if let Some(name) = too_long {
                // Kafka's readers refuse strings over 0x7fff bytes at every version; only a name
                // stored through the library (never through the wire) can be that long.
                error_response(ApiError::new(
                    ErrorCode::UNKNOWN_SERVER_ERROR,
                    format!(
                        "The response cannot be encoded: an entity name of {} bytes (at most {MAX_STRING_BYTES})",
                        name.len()
                    ),
                ))
            } else {
                let mut response = DescribeClientQuotasResponse::default();
                // Kafka leaves the message at its schema default on success: an empty string, not
                // null.
                response.error_message = Some(StrBytes::default());
                response.entries = Some(listed.iter().map(entry).collect());
                response
            }
        }
    };
    let version = header.api_version;
    encode(header, version, &response)
        .or_else(|e| {
            // Only a stored name longer than Kafka's strings can make this fail.
            let fallback = error_response(ApiError::new(
                ErrorCode::UNKNOWN_SERVER_ERROR,
                format!("The response cannot be encoded: {e}"),
            ));
            encode(header, version, &fallback)
        })
        .map_err(|error| CloseReason::Unencodable {
            api_key: header.api_key,
            api_version: header.api_version,
            error,
        })
}
