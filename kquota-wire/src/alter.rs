//! AlterClientQuotas (49), versions 0–1, and the batch logic it shares with the draft AlterQuotas.

use std::collections::{HashMap, HashSet};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
use kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse};
use kafka_protocol::protocol::StrBytes;

use crate::audit::EntityOutcome;
use crate::body::{decode, read_body, respond};
use crate::frame::{fit_message, put, response_header, Header, ReadResult, Reader};
use crate::handler::Handler;
use crate::outcome::CloseReason;
use crate::security::Session;
use crate::stream::{Pieces, ResponseStream};
use kquota::QuotaKey;
use kquota::{java_entity_string, java_map_order, Alteration, EntityPart, Op};
use kquota::{ApiError, ErrorCode};

/// Walks a request (every string checked as UTF-8, as decoding it would); returns its entry count.
fn walk(r: &mut Reader<'_>, version: i16) -> ReadResult<usize> {
    let flexible = version >= 1;
    let entries = r.each(flexible, false, "entries", |r| {
        r.each(flexible, false, "entity", |r| {
            r.utf8(flexible, false, "entity_type")?;
            r.utf8(flexible, true, "entity_name")?;
            if flexible {
                r.tagged_fields("EntityData")?;
            }
            Ok(())
        })?;
        r.each(flexible, false, "ops", |r| {
            r.utf8(flexible, false, "key")?;
            r.f64("value")?;
            r.bool("remove")?;
            if flexible {
                r.tagged_fields("OpData")?;
            }
            Ok(())
        })?;
        if flexible {
            r.tagged_fields("EntryData")?;
        }
        Ok(())
    })?;
    r.bool("validate_only")?;
    if flexible {
        r.tagged_fields("AlterClientQuotasRequest")?;
    }
    Ok(entries.unwrap_or(0))
}

/// The request layouts a refused alteration is echoed from.
#[derive(Clone, Copy)]
pub(super) enum Layout {
    /// AlterClientQuotas v0 (`false`) or v1 (`true`, flexible).
    AlterClientQuotas(bool),
    /// The draft AlterQuotas (non-flexible; its ops are `Type`, `Units`, `Value`, `Remove`).
    Draft,
}

/// Kafka's `AlterClientQuotasRequest.getErrorResponse`, one entry at a time: each request entry's
/// entity, as sent, with one error. The entries are read again from the request (walked before,
/// so reading them cannot fail) and nothing of them is kept.
struct EchoEntries {
    body: Bytes,
    /// Where the next entry starts.
    pos: usize,
    /// Entries not answered yet.
    left: usize,
    layout: Layout,
    error: ApiError,
}

impl EchoEntries {
    fn entry(&self, r: &mut Reader<'_>, out: &mut Vec<u8>) -> ReadResult<()> {
        let flexible = matches!(self.layout, Layout::AlterClientQuotas(true));
        out.extend_from_slice(&self.error.code.0.to_be_bytes());
        put::string(out, flexible, Some(self.error.message.as_bytes()));
        let parts = r.array_len(flexible, false, "entity")?.unwrap_or(0);
        put::array_len(out, flexible, parts);
        for _ in 0..parts {
            put::string(out, flexible, r.string(flexible, false, "entity_type")?);
            put::string(out, flexible, r.string(flexible, true, "entity_name")?);
            if flexible {
                r.tagged_fields("EntityData")?;
                out.push(0);
            }
        }
        r.each(flexible, false, "ops", |r| {
            match self.layout {
                Layout::AlterClientQuotas(_) => {
                    r.string(flexible, false, "key")?;
                    r.f64("value")?;
                }
                Layout::Draft => {
                    r.string(false, false, "Type")?;
                    r.string(false, false, "Units")?;
                    r.i64("Value")?;
                }
            }
            r.bool("remove")?;
            if flexible {
                r.tagged_fields("OpData")?;
            }
            Ok(())
        })?;
        if flexible {
            r.tagged_fields("EntryData")?;
            out.push(0);
        }
        Ok(())
    }
}

impl Pieces for EchoEntries {
    fn next_piece(&mut self, out: &mut Vec<u8>) -> bool {
        if self.left == 0 {
            return false;
        }
        let start = out.len();
        let mut r = Reader::at(&self.body, self.pos);
        match self.entry(&mut r, out) {
            Ok(()) => {
                self.pos = r.position();
                self.left -= 1;
                true
            }
            Err(_) => {
                // Unreachable: the request was walked whole before.
                out.truncate(start);
                self.left = 0;
                false
            }
        }
    }
}

/// The answer to an alteration the principal may not make, as Kafka gives it: every entry as
/// sent, in request order, with `CLUSTER_AUTHORIZATION_FAILED`. `body` has been walked whole (it
/// follows its schema); its `entries` entries start after `entries_at` bytes. The answer is made
/// as it is written, from the request's bytes: nothing of the request is decoded into memory.
pub(super) fn echo_refusal(
    header: Header,
    body: Bytes,
    entries_at: usize,
    entries: usize,
    layout: Layout,
) -> ResponseStream {
    let (flexible, header_version) = match layout {
        Layout::AlterClientQuotas(flexible) => (flexible, i16::from(flexible)),
        Layout::Draft => (false, 0),
    };
    let mut head: Vec<u8> = response_header(header.correlation_id, header_version).to_vec();
    head.extend_from_slice(&0i32.to_be_bytes()); // ThrottleTimeMs
    put::array_len(&mut head, flexible, entries);
    let tail = if flexible { vec![0] } else { Vec::new() };
    let pieces = || {
        Box::new(EchoEntries {
            body: body.clone(),
            pos: entries_at,
            left: entries,
            layout,
            error: ApiError::cluster_authorization_failed(),
        })
    };
    ResponseStream::new(head, pieces(), pieces(), tail)
}

/// A refused AlterClientQuotas: the request is walked (a malformed one closes the connection, as
/// Kafka's parsing would), then answered by [`echo_refusal`].
pub(super) fn refuse(header: Header, body: Bytes) -> Result<ResponseStream, CloseReason> {
    let entries = read_body(header, &body, walk)?;
    let flexible = header.api_version >= 1;
    let mut r = Reader::new(&body);
    // The entries' count, read a second time: the walk has checked it.
    let _ = r.array_len(flexible, false, "entries");
    Ok(echo_refusal(
        header,
        body.clone(),
        r.position(),
        entries,
        Layout::AlterClientQuotas(flexible),
    ))
}

/// Folds an entry's entity parts as Kafka's request parsing does (`HashMap.put` per part): a type
/// named twice keeps its first position and its last name.
pub(super) fn collapse(
    parts: impl IntoIterator<Item = (String, Option<String>)>,
) -> Vec<EntityPart> {
    let mut out: Vec<EntityPart> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (entity_type, name) in parts {
        match index.get(&entity_type) {
            Some(&i) => out[i].name = name,
            None => {
                index.insert(entity_type.clone(), out.len());
                out.push(EntityPart { entity_type, name });
            }
        }
    }
    out
}

/// One request entry on its way to the engine.
pub(super) struct WireEntry {
    /// The entity, collapsed.
    pub(super) alteration: Alteration,
    /// How many entity parts the request sent (Kafka sizes its entity map with it).
    pub(super) sent_parts: usize,
}

/// The most ops one entry may carry. The engine's per-entry checks cost the square of the op count
/// under its writer lock, so a larger entry is refused here (a Kafka client sends one op per key,
/// and there are nine keys).
pub const MAX_OPS_PER_ENTRY: usize = 64;

/// Above this many distinct entity types an entry is answered here, with the answer Kafka gives,
/// rather than by the engine (whose entity checks are quadratic too). Such an entity is never valid:
/// only `user`, `client-id` and `ip` exist.
pub const MAX_PARTS_PER_ENTRY: usize = 16;

/// Kafka's message for `UNKNOWN_SERVER_ERROR`.
const UNKNOWN_SERVER_ERROR_MESSAGE: &str =
    "The server experienced an unexpected error when processing the request.";

/// Whether two ops of an entry name the same key (the same text, or two spellings of one key).
fn has_duplicate_key(ops: &[Op]) -> bool {
    let mut texts = HashSet::with_capacity(ops.len());
    let mut keys = HashSet::with_capacity(ops.len());
    ops.iter().any(|op| {
        !texts.insert(op.key.as_str())
            || op
                .key
                .parse::<QuotaKey>()
                .is_ok_and(|key| !keys.insert(key))
    })
}

/// Kafka's answer for an entity with more than [`MAX_PARTS_PER_ENTRY`] types, computed in
/// `O(n log n)`: a duplicate key or a repeated entity first, then the first unknown type or empty
/// name in `HashMap` order.
fn answer_oversized_entity(entry: &WireEntry, repeated: bool) -> ApiError {
    let a = &entry.alteration;
    if repeated || has_duplicate_key(&a.ops) {
        return ApiError::invalid_request(format!(
            "Ignoring duplicate entity {}",
            java_entity_string(&a.entity, entry.sent_parts)
        ));
    }
    let types: Vec<&str> = a.entity.iter().map(|p| p.entity_type.as_str()).collect();
    for i in java_map_order(&types, entry.sent_parts) {
        let part = &a.entity[i];
        let ty = part.entity_type.as_str();
        if !matches!(ty, "user" | "client-id" | "ip") {
            return ApiError::invalid_request(format!("Unhandled client quota entity type: {ty}"));
        }
        if part.name.as_deref() == Some("") {
            return ApiError::invalid_request(format!("Empty {ty} not supported"));
        }
    }
    // Unreachable with more than three distinct types; refuse all the same.
    ApiError::invalid_request(format!(
        "Invalid client quota entity {}",
        java_entity_string(&a.entity, entry.sent_parts)
    ))
}

/// Runs a batch (through the handler's store, if it has one) and answers once per distinct entity,
/// in order of first appearance (Kafka keys its results by entity, so repeats of an entity share one
/// answer). If the store fails, nothing is applied and the error for the whole request is returned.
pub(super) fn alter_by_entity(
    h: &Handler,
    authorized: bool,
    entries: &[WireEntry],
    validate_only: bool,
) -> Result<Vec<EntityOutcome>, ApiError> {
    if !authorized {
        // Kafka checks ALTER_CONFIGS on the cluster first and answers every entry as sent, also
        // for validate_only; the engine is not reached.
        return Err(ApiError::cluster_authorization_failed());
    }
    // Group the copies of each entity.
    let mut index: HashMap<Vec<EntityPart>, usize> = HashMap::with_capacity(entries.len());
    let mut group_of: Vec<usize> = Vec::with_capacity(entries.len());
    let mut copies: Vec<usize> = Vec::new();
    for entry in entries {
        let mut key = entry.alteration.entity.clone();
        key.sort();
        let next = copies.len();
        let g = *index.entry(key).or_insert(next);
        if g == next {
            copies.push(0);
        }
        copies[g] += 1;
        group_of.push(g);
    }
    // What the engine sees: oversized entries are answered here or replaced by a stand-in that fails
    // cheaply (two removes of one key), which keeps Kafka's repeated-entity answer for their copies.
    let mut answers: Vec<Option<ApiError>> = vec![None; entries.len()];
    let mut batch: Vec<Alteration> = Vec::with_capacity(entries.len());
    let mut batch_index: Vec<Option<usize>> = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let repeated = copies[group_of[i]] > 1;
        let a = &entry.alteration;
        if a.entity.len() > MAX_PARTS_PER_ENTRY {
            answers[i] = Some(answer_oversized_entity(entry, repeated));
            batch_index.push(None);
            continue;
        }
        if a.ops.len() > MAX_OPS_PER_ENTRY {
            if !repeated {
                answers[i] = Some(ApiError::invalid_request(format!(
                    "Too many quota ops for entity {}: {} (at most {MAX_OPS_PER_ENTRY})",
                    java_entity_string(&a.entity, entry.sent_parts),
                    a.ops.len()
                )));
            }
            let stand_in = Op {
                key: String::new(),
                value: None,
            };
            batch_index.push(Some(batch.len()));
            batch.push(Alteration {
                entity: a.entity.clone(),
                ops: vec![stand_in.clone(), stand_in],
            });
            continue;
        }
        batch_index.push(Some(batch.len()));
        batch.push(a.clone());
    }
    let results = match &h.store {
        None => h.engine.alter(&batch, validate_only),
        Some(store) => store
            .commit(&h.engine, &batch, validate_only)
            .map_err(|e| {
                ApiError::new(
                    ErrorCode::UNKNOWN_SERVER_ERROR,
                    format!("{UNKNOWN_SERVER_ERROR_MESSAGE} Store error: {e}"),
                )
            })?,
    };
    let mut out: Vec<Option<EntityOutcome>> = (0..copies.len()).map(|_| None).collect();
    for (i, entry) in entries.iter().enumerate() {
        let error = match (&answers[i], batch_index[i]) {
            (Some(answer), _) => Some(answer.clone()),
            (None, Some(b)) => results.get(b).and_then(|r| r.error.clone()),
            (None, None) => None,
        };
        match &mut out[group_of[i]] {
            Some(existing) => {
                if existing.error.is_none() {
                    existing.error = error;
                }
            }
            slot @ None => {
                *slot = Some(EntityOutcome {
                    entity: entry.alteration.entity.clone(),
                    sent_parts: entry.sent_parts,
                    error,
                })
            }
        }
    }
    Ok(out.into_iter().flatten().collect())
}

fn entity_data(part: &EntityPart) -> EntityData {
    let mut e = EntityData::default();
    e.entity_type = StrBytes::from_string(part.entity_type.clone());
    e.entity_name = part.name.clone().map(StrBytes::from_string);
    e
}

pub(super) fn handle(
    h: &Handler,
    session: &Session,
    authorized: bool,
    header: Header,
    body: &[u8],
) -> Result<BytesMut, CloseReason> {
    let request: AlterClientQuotasRequest = decode(header, body, |r, v| walk(r, v).map(drop))?;
    let entries: Vec<WireEntry> = request
        .entries
        .iter()
        .map(|entry| WireEntry {
            alteration: Alteration {
                entity: collapse(entry.entity.iter().map(|e| {
                    (
                        e.entity_type.to_string(),
                        e.entity_name.as_ref().map(|n| n.to_string()),
                    )
                })),
                ops: entry
                    .ops
                    .iter()
                    .map(|op| Op {
                        key: op.key.to_string(),
                        value: (!op.remove).then_some(op.value),
                    })
                    .collect(),
            },
            sent_parts: entry.entity.len(),
        })
        .collect();
    let mut response = AlterClientQuotasResponse::default();
    let outcome = alter_by_entity(h, authorized, &entries, request.validate_only);
    crate::audit::alteration(
        session,
        "AlterClientQuotas",
        &entries.iter().map(|e| &e.alteration).collect::<Vec<_>>(),
        request.validate_only,
        &outcome,
    );
    let outcomes = match outcome {
        Ok(outcomes) => outcomes,
        Err(error) => {
            // Kafka's `getErrorResponse`: every entry as sent, in request order, with one error.
            response.entries = request
                .entries
                .iter()
                .map(|entry| {
                    let mut out = EntryData::default();
                    out.error_code = error.code.0;
                    out.error_message =
                        Some(StrBytes::from_string(fit_message(error.message.clone())));
                    out.entity = entry
                        .entity
                        .iter()
                        .map(|e| {
                            let mut d = EntityData::default();
                            d.entity_type = e.entity_type.clone();
                            d.entity_name = e.entity_name.clone();
                            d
                        })
                        .collect();
                    out
                })
                .collect();
            return respond(header, &response);
        }
    };
    response.entries = outcomes
        .into_iter()
        .map(|o| {
            let mut entry = EntryData::default();
            let types: Vec<&str> = o.entity.iter().map(|p| p.entity_type.as_str()).collect();
            // Kafka's entity map was built with the capacity of the part count as sent.
            entry.entity = java_map_order(&types, o.sent_parts)
                .into_iter()
                .map(|i| entity_data(&o.entity[i]))
                .collect();
            if let Some(e) = o.error {
                entry.error_code = e.code.0;
                entry.error_message = Some(StrBytes::from_string(fit_message(e.message)));
            } else {
                // Kafka's ApiError.NONE: code 0, a null message.
                entry.error_code = 0;
                entry.error_message = None;
            }
            entry
        })
        .collect();
    respond(header, &response)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::alter_client_quotas_request::{
        EntityData as RequestEntity, EntryData as RequestEntry, OpData,
    };
    use kafka_protocol::protocol::Encodable;

    use super::*;
    use crate::alter_quotas::{AlterQuotasEntry, AlterQuotasRequest, AlterQuotasResponse};
    use crate::alter_quotas::{AlterQuotasResult, QuotaEntityData, QuotaOp};

    /// The refusal as it was built before: the request decoded, every entry as sent.
    fn decoded_refusal(header: Header, request: &AlterClientQuotasRequest) -> BytesMut {
        let error = ApiError::cluster_authorization_failed();
        let mut response = AlterClientQuotasResponse::default();
        response.entries = request
            .entries
            .iter()
            .map(|entry| {
                let mut out = EntryData::default();
                out.error_code = error.code.0;
                out.error_message = Some(StrBytes::from_string(error.message.clone()));
                out.entity = entry
                    .entity
                    .iter()
                    .map(|e| {
                        let mut d = EntityData::default();
                        d.entity_type = e.entity_type.clone();
                        d.entity_name = e.entity_name.clone();
                        d
                    })
                    .collect();
                out
            })
            .collect();
        respond(header, &response).unwrap()
    }

    #[test]
    fn refusals_are_answered_from_the_bytes_as_kafka_answers_them() {
        let part = |t: &str, n: Option<&str>, tagged: bool| {
            let mut e = RequestEntity::default();
            e.entity_type = StrBytes::from_string(t.to_owned());
            e.entity_name = n.map(|n| StrBytes::from_string(n.to_owned()));
            if tagged {
                e.unknown_tagged_fields
                    .insert(7, Bytes::from_static(b"xyz"));
            }
            e
        };
        for version in 0..=1i16 {
            let mut op = OpData::default();
            op.key = StrBytes::from_static_str("producer_byte_rate");
            op.value = 5.0;
            let mut request = AlterClientQuotasRequest::default();
            let tagged = version >= 1;
            request.entries = vec![
                RequestEntry::default(),
                {
                    let mut e = RequestEntry::default();
                    e.entity = vec![
                        part("user", Some("a"), tagged),
                        part("client-id", None, false),
                        part("user", Some("b"), false),
                    ];
                    e.ops = vec![op.clone(), op];
                    e
                },
                {
                    let mut e = RequestEntry::default();
                    e.entity = vec![part("ip", Some("é"), false)];
                    e
                },
            ];
            let mut body = BytesMut::new();
            request.encode(&mut body, version).unwrap();
            // Bytes after the message are ignored.
            body.extend_from_slice(b"tail");
            let header = Header {
                api_key: 49,
                api_version: version,
                correlation_id: 11,
            };
            let streamed = refuse(header, body.freeze()).unwrap();
            let len = streamed.len();
            let bytes = streamed.into_bytes();
            assert_eq!(bytes.len(), len);
            assert_eq!(bytes, decoded_refusal(header, &request), "v{version}");
        }
        let request = AlterQuotasRequest {
            entries: vec![
                AlterQuotasEntry {
                    entity: vec![
                        QuotaEntityData {
                            entity_type: "user".into(),
                            entity_name: None,
                        },
                        QuotaEntityData {
                            entity_type: "user".into(),
                            entity_name: Some("x".into()),
                        },
                    ],
                    ops: vec![QuotaOp::set(QuotaKey::PRODUCER_SHARES, 3)],
                },
                AlterQuotasEntry {
                    entity: Vec::new(),
                    ops: Vec::new(),
                },
            ],
            validate_only: true,
        };
        let mut body = BytesMut::new();
        request.encode(&mut body).unwrap();
        let header = Header {
            api_key: 50,
            api_version: 0,
            correlation_id: 12,
        };
        let bytes = crate::alter_quotas::refuse(header, body.freeze())
            .unwrap()
            .into_bytes();
        let error = ApiError::cluster_authorization_failed();
        let expected = AlterQuotasResponse {
            throttle_time_ms: 0,
            entries: request
                .entries
                .iter()
                .map(|e| AlterQuotasResult {
                    error_code: error.code.0,
                    error_message: Some(error.message.clone()),
                    entity: e.entity.clone(),
                })
                .collect(),
        };
        assert_eq!(&bytes[..4], &12i32.to_be_bytes());
        assert_eq!(AlterQuotasResponse::decode(&bytes[4..]).unwrap(), expected);
    }

    #[test]
    fn kafka_puts_client_id_before_user() {
        assert_eq!(java_map_order(&["user", "client-id"], 2), vec![1, 0]);
        assert_eq!(java_map_order(&["client-id", "user"], 2), vec![0, 1]);
        assert_eq!(java_map_order(&["user", "client-id"], 16), vec![1, 0]);
        assert_eq!(java_map_order(&["user"], 1), vec![0]);
    }

    #[test]
    fn repeated_types_collapse_last_name_wins() {
        let parts = collapse([
            ("user".to_owned(), Some("a".to_owned())),
            ("client-id".to_owned(), None),
            ("user".to_owned(), Some("b".to_owned())),
        ]);
        assert_eq!(
            parts,
            vec![
                EntityPart {
                    entity_type: "user".into(),
                    name: Some("b".into())
                },
                EntityPart {
                    entity_type: "client-id".into(),
                    name: None
                },
            ]
        );
    }
}
