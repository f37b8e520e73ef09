//! The seeds' draft AlterQuotas (apiKey 50, version 0, non-flexible) with a codec of its own:
//! `kafka-protocol` has no such message and keeps its primitives private.
//!
//! Request: `Entry: [] { QuotaEntity: [] { EntityType: string, EntityName: string },
//! Op: [] { Type: string, Units: string, Value: int64, Remove: bool } }, ValidateOnly: bool`.
//! Response: `ThrottleTimeMs: int32, Entry: [] { ErrorCode: int16, ErrorMessage: nullable string,
//! QuotaEntity: [] { EntityType: string, EntityName: string } }`.
//!
//! The draft types `EntityName` as a non-nullable string but has no other way to name the default
//! entity, so here a null (length −1) `EntityName` means the default, in requests and responses.
//! Both directions are strict: counts are checked against the bytes left and strings must be UTF-8.
//! [`AlterQuotasRequest::decode`] and [`AlterQuotasResponse::decode`], which take a whole body, also
//! refuse bytes after the message; the handler reads a request with [`AlterQuotasRequest::read`]
//! and ignores bytes after it, as it does for every API (see `body::read_body`).

use bytes::{BufMut, Bytes, BytesMut};

use crate::alter::{alter_by_entity, collapse, echo_refusal, Layout, WireEntry};
use crate::frame::{
    fit_message, put_array_len, put_string, CodecError, Header, ReadResult, Reader,
};
use crate::handler::Handler;
use crate::outcome::CloseReason;
use crate::stream::ResponseStream;
use kquota::Entity;
use kquota::{Alteration, Op};
use kquota::{QuotaKey, QuotaType};

/// One entity component: a type and a name (`None` for the default).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QuotaEntityData {
    /// `user`, `client-id` or `ip`.
    pub entity_type: String,
    /// The name, or `None` for the default (sent as a null string).
    pub entity_name: Option<String>,
}

impl QuotaEntityData {
    /// The components of `entity`, user before client-id.
    pub fn of(entity: &Entity) -> Vec<QuotaEntityData> {
        entity
            .components()
            .map(|(t, n)| QuotaEntityData {
                entity_type: t.as_str().to_owned(),
                entity_name: n.as_option().map(str::to_owned),
            })
            .collect()
    }
}

/// One op: set or remove the quota of a type in a unit.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QuotaOp {
    /// The quota type, e.g. `producer_byte_rate`.
    pub quota_type: String,
    /// The unit, e.g. `shares`; empty means the type's native unit.
    pub units: String,
    /// The value to set (ignored when removing).
    pub value: i64,
    /// Whether to remove the quota instead of setting it.
    pub remove: bool,
}

impl QuotaOp {
    /// An op that sets `key` to `value`.
    pub fn set(key: QuotaKey, value: i64) -> QuotaOp {
        QuotaOp {
            quota_type: key.quota_type().as_str().to_owned(),
            units: key.unit().as_str().to_owned(),
            value,
            remove: false,
        }
    }

    /// An op that removes `key`.
    pub fn remove(key: QuotaKey) -> QuotaOp {
        QuotaOp {
            remove: true,
            ..QuotaOp::set(key, 0)
        }
    }

    /// The engine key this op names: see [`draft_key`].
    pub fn key(&self) -> String {
        draft_key(&self.quota_type, &self.units)
    }
}

/// The engine key for a draft op's `Type` and `Units`: the bare type when the units are empty or the
/// type's native unit, `type:units` otherwise (the engine then checks both parts).
pub fn draft_key(quota_type: &str, units: &str) -> String {
    let native = quota_type
        .parse::<QuotaType>()
        .is_ok_and(|t| t.native_unit().as_str() == units);
    if units.is_empty() || native {
        quota_type.to_owned()
    } else {
        format!("{quota_type}:{units}")
    }
}

/// The ops for one entity.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AlterQuotasEntry {
    /// The entity's components.
    pub entity: Vec<QuotaEntityData>,
    /// The ops.
    pub ops: Vec<QuotaOp>,
}

impl AlterQuotasEntry {
    /// An entry for `entity` with the given ops.
    pub fn new(entity: &Entity, ops: Vec<QuotaOp>) -> AlterQuotasEntry {
        AlterQuotasEntry {
            entity: QuotaEntityData::of(entity),
            ops,
        }
    }
}

/// The draft AlterQuotas request (apiKey 50, version 0).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AlterQuotasRequest {
    /// The entries to alter.
    pub entries: Vec<AlterQuotasEntry>,
    /// Validate without applying.
    pub validate_only: bool,
}

/// The outcome for one entity.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AlterQuotasResult {
    /// 0 on success, otherwise a Kafka error code.
    pub error_code: i16,
    /// `None` on success.
    pub error_message: Option<String>,
    /// The entity the outcome is for.
    pub entity: Vec<QuotaEntityData>,
}

/// The draft AlterQuotas response (apiKey 50, version 0).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AlterQuotasResponse {
    /// Always 0 from this handler.
    pub throttle_time_ms: i32,
    /// One outcome per distinct entity of the request, in order of first appearance.
    pub entries: Vec<AlterQuotasResult>,
}

fn owned(s: Option<&str>) -> Option<String> {
    s.map(str::to_owned)
}

fn required(r: &mut Reader<'_>, what: &'static str) -> ReadResult<String> {
    Ok(r.utf8(false, false, what)?.unwrap_or_default().to_owned())
}

fn read_entities(r: &mut Reader<'_>) -> ReadResult<Vec<QuotaEntityData>> {
    let mut out = Vec::new();
    r.each(false, false, "QuotaEntity", |r| {
        let entity_type = required(r, "EntityType")?;
        let entity_name = owned(r.utf8(false, true, "EntityName")?);
        out.push(QuotaEntityData {
            entity_type,
            entity_name,
        });
        Ok(())
    })?;
    Ok(out)
}

fn write_entities(buf: &mut BytesMut, entity: &[QuotaEntityData]) -> Result<(), CodecError> {
    put_array_len(buf, entity.len(), "QuotaEntity")?;
    for e in entity {
        put_string(buf, Some(&e.entity_type), "EntityType")?;
        put_string(buf, e.entity_name.as_deref(), "EntityName")?;
    }
    Ok(())
}

fn finish<T>(r: &Reader<'_>, value: T) -> ReadResult<T> {
    if r.remaining() > 0 {
        return Err(CodecError::TrailingBytes {
            count: r.remaining(),
        });
    }
    Ok(value)
}

impl AlterQuotasRequest {
    /// Decodes a whole request body (the bytes after the request header): bytes after the message
    /// are [`CodecError::TrailingBytes`].
    pub fn decode(body: &[u8]) -> Result<AlterQuotasRequest, CodecError> {
        let mut r = Reader::new(body);
        let request = AlterQuotasRequest::read(&mut r)?;
        finish(&r, request)
    }

    /// Reads the message from `r`, leaving any bytes after it.
    pub(crate) fn read(r: &mut Reader<'_>) -> ReadResult<AlterQuotasRequest> {
        let mut entries = Vec::new();
        r.each(false, false, "Entry", |r| {
            let entity = read_entities(r)?;
            let mut ops = Vec::new();
            r.each(false, false, "Op", |r| {
                ops.push(QuotaOp {
                    quota_type: required(r, "Type")?,
                    units: required(r, "Units")?,
                    value: r.i64("Value")?,
                    remove: r.bool("Remove")?,
                });
                Ok(())
            })?;
            entries.push(AlterQuotasEntry { entity, ops });
            Ok(())
        })?;
        let validate_only = r.bool("ValidateOnly")?;
        Ok(AlterQuotasRequest {
            entries,
            validate_only,
        })
    }

    /// Appends the request body (without a header) to `buf`.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), CodecError> {
        put_array_len(buf, self.entries.len(), "Entry")?;
        for entry in &self.entries {
            write_entities(buf, &entry.entity)?;
            put_array_len(buf, entry.ops.len(), "Op")?;
            for op in &entry.ops {
                put_string(buf, Some(&op.quota_type), "Type")?;
                put_string(buf, Some(&op.units), "Units")?;
                buf.put_i64(op.value);
                buf.put_u8(u8::from(op.remove));
            }
        }
        buf.put_u8(u8::from(self.validate_only));
        Ok(())
    }
}

impl AlterQuotasResponse {
    /// Decodes a whole response body (the bytes after the 4-byte correlation id): bytes after the
    /// message are [`CodecError::TrailingBytes`].
    pub fn decode(body: &[u8]) -> Result<AlterQuotasResponse, CodecError> {
        let mut r = Reader::new(body);
        let throttle_time_ms = r.i32("ThrottleTimeMs")?;
        let mut entries = Vec::new();
        r.each(false, false, "Entry", |r| {
            let error_code = r.i16("ErrorCode")?;
            let error_message = owned(r.utf8(false, true, "ErrorMessage")?);
            let entity = read_entities(r)?;
            entries.push(AlterQuotasResult {
                error_code,
                error_message,
                entity,
            });
            Ok(())
        })?;
        finish(
            &r,
            AlterQuotasResponse {
                throttle_time_ms,
                entries,
            },
        )
    }

    /// Appends the response body (without a header) to `buf`.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), CodecError> {
        buf.put_i32(self.throttle_time_ms);
        put_array_len(buf, self.entries.len(), "Entry")?;
        for entry in &self.entries {
            buf.put_i16(entry.error_code);
            put_string(buf, entry.error_message.as_deref(), "ErrorMessage")?;
            write_entities(buf, &entry.entity)?;
        }
        Ok(())
    }
}

/// Walks a request as [`AlterQuotasRequest::read`] reads it, keeping nothing; returns its entry
/// count.
fn walk(r: &mut Reader<'_>) -> ReadResult<usize> {
    let entries = r.each(false, false, "Entry", |r| {
        r.each(false, false, "QuotaEntity", |r| {
            r.utf8(false, false, "EntityType")?;
            r.utf8(false, true, "EntityName")?;
            Ok(())
        })?;
        r.each(false, false, "Op", |r| {
            r.utf8(false, false, "Type")?;
            r.utf8(false, false, "Units")?;
            r.i64("Value")?;
            r.bool("Remove")?;
            Ok(())
        })?;
        Ok(())
    })?;
    r.bool("ValidateOnly")?;
    Ok(entries.unwrap_or(0))
}

/// A refused AlterQuotas: walked (a malformed one closes the connection), then every entry as
/// sent answered with `CLUSTER_AUTHORIZATION_FAILED`, made as it is written (see
/// [`echo_refusal`]).
pub(super) fn refuse(header: Header, body: Bytes) -> Result<ResponseStream, CloseReason> {
    let entries = crate::body::read_body(header, &body, |r, _| walk(r))?;
    // The entries start after their 4-byte count.
    Ok(echo_refusal(
        header,
        body.clone(),
        4,
        entries,
        Layout::Draft,
    ))
}

pub(super) fn handle(
    h: &Handler,
    session: &crate::security::Session,
    authorized: bool,
    header: Header,
    body: &[u8],
) -> Result<BytesMut, CloseReason> {
    let request = crate::body::read_body(header, body, |r, _| AlterQuotasRequest::read(r))?;
    let raw_entities: Vec<Vec<QuotaEntityData>> =
        request.entries.iter().map(|e| e.entity.clone()).collect();
    let batch: Vec<WireEntry> = request
        .entries
        .into_iter()
        .map(|entry| WireEntry {
            sent_parts: entry.entity.len(),
            alteration: Alteration {
                entity: collapse(
                    entry
                        .entity
                        .into_iter()
                        .map(|e| (e.entity_type, e.entity_name)),
                ),
                ops: entry
                    .ops
                    .iter()
                    .map(|op| Op {
                        key: op.key(),
                        value: (!op.remove).then_some(op.value as f64),
                    })
                    .collect(),
            },
        })
        .collect();
    let outcome = alter_by_entity(h, authorized, &batch, request.validate_only);
    crate::audit::alteration(
        session,
        "AlterQuotas",
        &batch.iter().map(|e| &e.alteration).collect::<Vec<_>>(),
        request.validate_only,
        &outcome,
    );
    let entries = match outcome {
        Ok(outcomes) => outcomes
            .into_iter()
            .map(|o| AlterQuotasResult {
                error_code: o.error.as_ref().map_or(0, |e| e.code.0),
                error_message: o.error.map(|e| fit_message(e.message)),
                entity: o
                    .entity
                    .into_iter()
                    .map(|p| QuotaEntityData {
                        entity_type: p.entity_type,
                        entity_name: p.name,
                    })
                    .collect(),
            })
            .collect(),
        // The whole request failed (the store): every entry as sent, in request order.
        Err(error) => raw_entities
            .into_iter()
            .map(|entity| AlterQuotasResult {
                error_code: error.code.0,
                error_message: Some(fit_message(error.message.clone())),
                entity,
            })
            .collect(),
    };
    let response = AlterQuotasResponse {
        throttle_time_ms: 0,
        entries,
    };
    // The draft is not flexible: a v0 response header (the correlation id alone).
    let mut buf = crate::frame::response_header(header.correlation_id, 0);
    response
        .encode(&mut buf)
        .map_err(|error| CloseReason::Unencodable {
            api_key: header.api_key,
            api_version: header.api_version,
            error,
        })?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert_eq!(draft_key("producer_byte_rate", ""), "producer_byte_rate");
        assert_eq!(
            draft_key("producer_byte_rate", "broker_bps"),
            "producer_byte_rate"
        );
        assert_eq!(
            draft_key("producer_byte_rate", "shares"),
            "producer_byte_rate:shares"
        );
        assert_eq!(
            draft_key("request_percentage", "percent"),
            "request_percentage"
        );
        assert_eq!(draft_key("nope", "x"), "nope:x");
        assert_eq!(
            QuotaOp::set(QuotaKey::CONSUMER_SHARES, 5).key(),
            "consumer_byte_rate:shares"
        );
        assert_eq!(
            QuotaOp::set(QuotaKey::PRODUCER_BROKER_BPS, 5).key(),
            "producer_byte_rate"
        );
    }

    #[test]
    fn round_trip() {
        let request = AlterQuotasRequest {
            entries: vec![AlterQuotasEntry {
                entity: vec![
                    QuotaEntityData {
                        entity_type: "user".into(),
                        entity_name: None,
                    },
                    QuotaEntityData {
                        entity_type: "client-id".into(),
                        entity_name: Some("c".into()),
                    },
                ],
                ops: vec![
                    QuotaOp::set(QuotaKey::PRODUCER_SHARES, 100),
                    QuotaOp::remove(QuotaKey::PRODUCER_BROKER_BPS),
                ],
            }],
            validate_only: true,
        };
        let mut buf = BytesMut::new();
        request.encode(&mut buf).unwrap();
        assert_eq!(AlterQuotasRequest::decode(&buf).unwrap(), request);
        buf.put_u8(0);
        assert_eq!(
            AlterQuotasRequest::decode(&buf),
            Err(CodecError::TrailingBytes { count: 1 })
        );
        for cut in 0..buf.len() - 1 {
            assert!(AlterQuotasRequest::decode(&buf[..cut]).is_err());
        }
    }
}
