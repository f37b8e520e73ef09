//! The configuration topic's records: one JSON record per committed alteration batch (version
//! 1), and the records that let compaction shrink the log to the size of the state (version 2):
//! claims and snapshot chunks.
//!
//! A batch:
//!
//! ```json
//! {"v":1,"origin":"broker-1","seq":1760000000000001,"validate_only":false,
//!  "alterations":[
//!    {"entity":[{"type":"user","name":"alice"},{"type":"client-id","name":null}],
//!     "ops":[{"key":"producer_byte_rate","value":1048576.0},
//!            {"key":"consumer_byte_rate","remove":true}]}]}
//! ```
//!
//! The record's key is `"<origin>/<seq>"`. Each alteration is one entry of Kafka's
//! AlterClientQuotas request (an entity as `(type, name)` pairs, `null` naming the default, and its
//! ops); each op is shaped like Kafka's `ClientQuotaRecord` (a key, and a value or `remove`). The
//! batch is kept as the client sent it, alteration by alteration, so that every instance validates
//! exactly the same batch: a flat list of changes could not tell two alterations of one entity
//! (which the engine refuses as duplicates) from one alteration with two ops, nor keep an
//! alteration with no ops (which still has a result).
//!
//! A claim, key `"<origin>/<seq>/claim"`: the instance that wants to write the next snapshot; the
//! first claim in the log after the previous snapshot wins, so the log itself chooses the writer:
//!
//! ```json
//! {"v":2,"kind":"claim","origin":"broker-1","seq":1760000000000002}
//! ```
//!
//! A snapshot chunk, key `"<claim offset>/<index>/snapshot"`: the configuration as it was when the
//! claim at that offset was applied (every record before it), in canonical order (entities
//! sorted, each one's values by key), split into chunks of at most [`CHUNK_BYTES`] of entries;
//! every chunk says how many there are, how many entities the whole holds and the FNV-1a digest
//! of the whole's canonical entries, so that a reader knows when it has all of it and that it is
//! the state it announces:
//!
//! ```json
//! {"v":2,"kind":"snapshot","claim":1234,"origin":"broker-1","index":0,"count":1,
//!  "entities":1,"digest":"a3c2b1e0f9d8c7b6",
//!  "quotas":[{"entity":[{"type":"user","name":"alice"}],
//!             "values":[{"key":"producer_byte_rate","value":1048576.0}]}]}
//! ```
//!
//! Every key a batch, claim or chunk is written under is unique: a batch key ends in a digit, the
//! others in a word. So compaction removes a record only once its key is written again as a
//! tombstone, which only a snapshot's writer does, for what its snapshot covers.
//!
//! Decoding is strict: an unknown version, an unknown field, a missing field or an op with both or
//! neither of `value` and `remove` is an error. A reader that guessed would apply something other
//! than what the writer meant, and the instances' states would part.

use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use kquota::{Alteration, Entity, EntityName, EntityPart, EntityType, Op, QuotaKey};

use crate::error::RecordProblem;

/// The record version of batches.
pub(crate) const VERSION: u32 = 1;
/// The record version of claims and snapshot chunks. (The error that refuses any other version,
/// [`RecordProblem::Version`], names the two.)
pub(crate) const SNAPSHOT_VERSION: u32 = 2;
/// The most bytes of entries one snapshot chunk carries: with its envelope, well under Kafka's
/// default largest record (1 MB).
pub(crate) const CHUNK_BYTES: usize = 512 * 1024;

/// One entity's configured values, as a snapshot holds them.
pub(crate) type SnapshotEntry = (Entity, Vec<(QuotaKey, f64)>);

/// Any record of the configuration topic that has a value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum LogRecord {
    /// A committed batch.
    Batch(ConfigRecord),
    /// An instance's claim to write the next snapshot.
    Claim(Claim),
    /// A part of a snapshot.
    Chunk(Chunk),
}

impl LogRecord {
    /// Decodes a record's value, of any version this crate reads.
    pub(crate) fn decode(value: &[u8]) -> Result<LogRecord, RecordProblem> {
        if value.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(RecordProblem::Malformed(
                "not a configuration record: not a JSON object".into(),
            ));
        }
        let head: Head = serde_json::from_slice(value)
            .map_err(|e| RecordProblem::Malformed(format!("not a configuration record: {e}")))?;
        match head.v {
            v if v == u64::from(VERSION) => ConfigRecord::decode(value).map(LogRecord::Batch),
            v if v == u64::from(SNAPSHOT_VERSION) => {
                let malformed = |e: serde_json::Error| {
                    RecordProblem::Malformed(format!(
                        "malformed version {SNAPSHOT_VERSION} record: {e}"
                    ))
                };
                match head.kind.as_deref() {
                    Some("claim") => {
                        let w: WireClaim = serde_json::from_slice(value).map_err(malformed)?;
                        Ok(LogRecord::Claim(Claim {
                            origin: w.origin,
                            seq: w.seq,
                        }))
                    }
                    Some("snapshot") => {
                        let w: WireChunk = serde_json::from_slice(value).map_err(malformed)?;
                        Chunk::try_from(w).map(LogRecord::Chunk)
                    }
                    other => Err(RecordProblem::Malformed(format!(
                        "a version {SNAPSHOT_VERSION} record of kind {other:?} (this instance \
                         reads \"claim\" and \"snapshot\")"
                    ))),
                }
            }
            v => Err(RecordProblem::Version(v)),
        }
    }

    /// The key the record must have.
    pub(crate) fn key(&self) -> String {
        match self {
            LogRecord::Batch(b) => b.key(),
            LogRecord::Claim(c) => c.key(),
            LogRecord::Chunk(c) => chunk_key(c.claim, c.index),
        }
    }
}

/// The claim and index of a snapshot chunk, read without decoding its entries (a chunk of a
/// snapshot already read, or superseded, is not decoded again); `None` for any other record.
pub(crate) fn chunk_of(value: &[u8]) -> Option<(i64, u32)> {
    #[derive(Deserialize)]
    struct ChunkHead {
        v: u64,
        #[serde(default)]
        kind: Option<String>,
        #[serde(default)]
        claim: Option<i64>,
        #[serde(default)]
        index: Option<u32>,
    }
    let head: ChunkHead = serde_json::from_slice(value).ok()?;
    match (head.v, head.kind.as_deref(), head.claim, head.index) {
        (v, Some("snapshot"), Some(claim), Some(index)) if v == u64::from(SNAPSHOT_VERSION) => {
            Some((claim, index))
        }
        _ => None,
    }
}

/// The version and kind of a record, whatever else it holds.
#[derive(Deserialize)]
struct Head {
    v: u64,
    #[serde(default)]
    kind: Option<String>,
}

/// An instance's claim to write the next snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Claim {
    /// The instance.
    pub(crate) origin: String,
    /// Its number among that instance's claims (never reused: microseconds at the claim).
    pub(crate) seq: u64,
}

impl Claim {
    /// The claim's key.
    pub(crate) fn key(&self) -> String {
        format!("{}/{}/claim", self.origin, self.seq)
    }

    /// The claim's value.
    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(&WireClaim {
            v: SNAPSHOT_VERSION,
            kind: "claim".into(),
            origin: self.origin.clone(),
            seq: self.seq,
        })
        .expect("strings and numbers always serialize")
    }
}

/// One part of a snapshot.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Chunk {
    /// The offset of the claim the snapshot was taken at.
    pub(crate) claim: i64,
    /// The instance that wrote it.
    pub(crate) origin: String,
    /// Which part this is, from 0.
    pub(crate) index: u32,
    /// How many parts the snapshot has.
    pub(crate) count: u32,
    /// How many entities the whole snapshot holds.
    pub(crate) entities: u64,
    /// The FNV-1a digest of the whole snapshot's canonical entries.
    pub(crate) digest: u64,
    /// This part's entries.
    pub(crate) quotas: Vec<SnapshotEntry>,
}

/// The key of part `index` of the snapshot taken at the claim at offset `claim`.
pub(crate) fn chunk_key(claim: i64, index: u32) -> String {
    format!("{claim}/{index}/snapshot")
}

/// The value of a snapshot chunk whose entries are already encoded (canonical entries, each a
/// JSON object, joined with commas).
pub(crate) fn chunk_value(
    claim: i64,
    origin: &str,
    index: u32,
    count: u32,
    entities: u64,
    digest: u64,
    entries: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() + 160);
    out.extend_from_slice(
        format!("{{\"v\":{SNAPSHOT_VERSION},\"kind\":\"snapshot\",\"claim\":{claim},\"origin\":")
            .as_bytes(),
    );
    serde_json::to_writer(&mut out, origin).expect("a string always encodes");
    out.extend_from_slice(
        format!(
            ",\"index\":{index},\"count\":{count},\"entities\":{entities},\"digest\":\"{digest:016x}\",\"quotas\":["
        )
        .as_bytes(),
    );
    out.extend_from_slice(entries);
    out.extend_from_slice(b"]}");
    out
}

/// Appends the canonical JSON of one entry (values in the order given) to `out`.
pub(crate) fn encode_entry(entity: &Entity, values: &[(QuotaKey, f64)], out: &mut Vec<u8>) {
    let wire = WireEntry {
        entity: entity
            .components()
            .map(|(ty, name)| WirePart {
                entity_type: ty.as_str().to_owned(),
                name: name.as_option().map(str::to_owned),
            })
            .collect(),
        values: values
            .iter()
            .map(|(key, value)| WireSet {
                key: key.to_string(),
                value: WireValue(*value),
            })
            .collect(),
    };
    serde_json::to_writer(out, &wire).expect("strings and numbers always serialize");
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireClaim {
    v: u32,
    kind: String,
    origin: String,
    seq: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireChunk {
    v: u32,
    kind: String,
    claim: i64,
    origin: String,
    index: u32,
    count: u32,
    entities: u64,
    digest: String,
    quotas: Vec<WireEntry>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireEntry {
    entity: Vec<WirePart>,
    values: Vec<WireSet>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireSet {
    key: String,
    value: WireValue,
}

impl TryFrom<WireChunk> for Chunk {
    type Error = RecordProblem;

    fn try_from(w: WireChunk) -> Result<Chunk, RecordProblem> {
        let bad = |why: String| RecordProblem::Malformed(format!("a snapshot chunk: {why}"));
        if w.v != SNAPSHOT_VERSION || w.kind != "snapshot" {
            return Err(bad(format!("version {} of kind {:?}", w.v, w.kind)));
        }
        if w.count == 0 || w.index >= w.count {
            return Err(bad(format!("part {} of {}", w.index, w.count)));
        }
        if w.claim < 0 {
            return Err(bad(format!("a claim at offset {}", w.claim)));
        }
        let digest = u64::from_str_radix(&w.digest, 16)
            .ok()
            .filter(|_| w.digest.len() == 16)
            .ok_or_else(|| bad(format!("the digest {:?} is not 16 hex digits", w.digest)))?;
        let quotas = w
            .quotas
            .into_iter()
            .map(|e| {
                let parts = e
                    .entity
                    .iter()
                    .map(|p| {
                        let ty = EntityType::from_str(&p.entity_type)
                            .map_err(|e| bad(format!("{:?}: {e}", p.entity_type)))?;
                        let name = EntityName::from_wire(p.name.as_deref())
                            .map_err(|e| bad(format!("{:?}: {e}", p.name)))?;
                        Ok((ty, name))
                    })
                    .collect::<Result<Vec<_>, RecordProblem>>()?;
                let entity = Entity::from_parts(&parts)
                    .ok_or_else(|| bad(format!("{parts:?} is not an entity")))?;
                let values = e
                    .values
                    .into_iter()
                    .map(|v| {
                        let key = QuotaKey::from_str(&v.key)
                            .map_err(|e| bad(format!("the key {:?}: {e}", v.key)))?;
                        Ok((key, v.value.0))
                    })
                    .collect::<Result<Vec<_>, RecordProblem>>()?;
                Ok((entity, values))
            })
            .collect::<Result<Vec<_>, RecordProblem>>()?;
        Ok(Chunk {
            claim: w.claim,
            origin: w.origin,
            index: w.index,
            count: w.count,
            entities: w.entities,
            digest,
            quotas,
        })
    }
}

/// One committed batch, as it travels through the topic.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ConfigRecord {
    /// The instance that committed it.
    pub(crate) origin: String,
    /// Its number among that instance's commits (never reused, even across restarts).
    pub(crate) seq: u64,
    /// Always `false` in records this crate writes (a validate-only batch never reaches the log);
    /// a reader applies such a record as validate-only, changing nothing.
    pub(crate) validate_only: bool,
    /// The batch, as the client sent it.
    pub(crate) batch: Vec<Alteration>,
}

impl ConfigRecord {
    /// The record's key: unique per batch, so that compaction never removes one.
    pub(crate) fn key(&self) -> String {
        record_key(&self.origin, self.seq)
    }

    /// The record's value.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let wire = WireRecord {
            v: VERSION,
            origin: self.origin.clone(),
            seq: self.seq,
            validate_only: self.validate_only,
            alterations: self.batch.iter().map(WireAlteration::from).collect(),
        };
        serde_json::to_vec(&wire).expect("strings, numbers and booleans always serialize")
    }

    /// Decodes a record's value; the error says what is wrong with it.
    pub(crate) fn decode(value: &[u8]) -> Result<ConfigRecord, RecordProblem> {
        // The version first: a later version may be shaped differently, and saying "version 2"
        // is more use than a complaint about its fields.
        // An object, not the array form serde would also take for a struct.
        if value.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(RecordProblem::Malformed(
                "not a configuration record: not a JSON object".into(),
            ));
        }
        let version: WireVersion = serde_json::from_slice(value)
            .map_err(|e| RecordProblem::Malformed(format!("not a configuration record: {e}")))?;
        if version.v != u64::from(VERSION) {
            return Err(RecordProblem::Version(version.v));
        }
        let wire: WireRecord = serde_json::from_slice(value).map_err(|e| {
            RecordProblem::Malformed(format!("malformed version {VERSION} record: {e}"))
        })?;
        let batch = wire
            .alterations
            .into_iter()
            .map(Alteration::try_from)
            .collect::<Result<Vec<_>, _>>()
            .map_err(RecordProblem::Malformed)?;
        Ok(ConfigRecord {
            origin: wire.origin,
            seq: wire.seq,
            validate_only: wire.validate_only,
            batch,
        })
    }
}

/// The key of instance `origin`'s batch number `seq`.
pub(crate) fn record_key(origin: &str, seq: u64) -> String {
    format!("{origin}/{seq}")
}

/// Only the version, whatever else the record holds.
#[derive(Deserialize)]
struct WireVersion {
    v: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireRecord {
    v: u32,
    origin: String,
    seq: u64,
    validate_only: bool,
    alterations: Vec<WireAlteration>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireAlteration {
    entity: Vec<WirePart>,
    ops: Vec<WireOp>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WirePart {
    #[serde(rename = "type")]
    entity_type: String,
    /// `null` for the default; required (a missing name is not taken to mean the default).
    #[serde(deserialize_with = "required_option")]
    name: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireOp {
    key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<WireValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    remove: Option<bool>,
}

/// A quota value: a JSON number, or for what JSON has no number for (NaN, the infinities, which
/// the engine refuses but must refuse at every instance alike) Java's spelling as a string.
#[derive(Clone, Copy, Debug, PartialEq)]
struct WireValue(f64);

impl Serialize for WireValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if v.is_nan() {
            s.serialize_str("NaN")
        } else if v == f64::INFINITY {
            s.serialize_str("Infinity")
        } else if v == f64::NEG_INFINITY {
            s.serialize_str("-Infinity")
        } else {
            s.serialize_f64(v)
        }
    }
}

impl<'de> Deserialize<'de> for WireValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(v) => Ok(WireValue(v)),
            Raw::Text(t) => match t.as_str() {
                "NaN" => Ok(WireValue(f64::NAN)),
                "Infinity" => Ok(WireValue(f64::INFINITY)),
                "-Infinity" => Ok(WireValue(f64::NEG_INFINITY)),
                _ => Err(serde::de::Error::custom(format!(
                    "a value is a number, \"NaN\", \"Infinity\" or \"-Infinity\", not {t:?}"
                ))),
            },
        }
    }
}

/// An `Option` that must be present (as `null` or a value).
fn required_option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Option::<String>::deserialize(d)
}

impl From<&Alteration> for WireAlteration {
    fn from(a: &Alteration) -> Self {
        WireAlteration {
            entity: a
                .entity
                .iter()
                .map(|p| WirePart {
                    entity_type: p.entity_type.clone(),
                    name: p.name.clone(),
                })
                .collect(),
            ops: a
                .ops
                .iter()
                .map(|op| WireOp {
                    key: op.key.clone(),
                    value: op.value.map(WireValue),
                    remove: op.value.is_none().then_some(true),
                })
                .collect(),
        }
    }
}

impl TryFrom<WireAlteration> for Alteration {
    type Error = String;

    fn try_from(a: WireAlteration) -> Result<Self, String> {
        let ops = a
            .ops
            .into_iter()
            .map(|op| match (op.value, op.remove) {
                (Some(v), None | Some(false)) => Ok(Op {
                    key: op.key,
                    value: Some(v.0),
                }),
                (None, Some(true)) => Ok(Op {
                    key: op.key,
                    value: None,
                }),
                (Some(_), Some(true)) => Err(format!(
                    "the op on {:?} has both a value and \"remove\":true",
                    op.key
                )),
                (None, _) => Err(format!(
                    "the op on {:?} has neither a value nor \"remove\":true",
                    op.key
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Alteration {
            entity: a
                .entity
                .into_iter()
                .map(|p| EntityPart {
                    entity_type: p.entity_type,
                    name: p.name,
                })
                .collect(),
            ops,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kquota::{Entity, EntityName};

    fn n(s: &str) -> EntityName {
        EntityName::named(s).unwrap()
    }

    fn record(batch: Vec<Alteration>) -> ConfigRecord {
        ConfigRecord {
            origin: "broker-1".into(),
            seq: 1_760_000_000_000_001,
            validate_only: false,
            batch,
        }
    }

    fn round_trip(r: &ConfigRecord) -> ConfigRecord {
        let bytes = r.encode();
        let back = ConfigRecord::decode(&bytes).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&bytes));
        });
        assert_eq!(&back, r, "{}", String::from_utf8_lossy(&bytes));
        back
    }

    #[test]
    fn the_documented_form() {
        let r = record(vec![Alteration::new(&Entity::UserClient(
            n("alice"),
            EntityName::Default,
        ))
        .set("producer_byte_rate", 1_048_576.0)
        .remove("consumer_byte_rate")]);
        assert_eq!(
            String::from_utf8(r.encode()).unwrap(),
            r#"{"v":1,"origin":"broker-1","seq":1760000000000001,"validate_only":false,"alterations":[{"entity":[{"type":"user","name":"alice"},{"type":"client-id","name":null}],"ops":[{"key":"producer_byte_rate","value":1048576.0},{"key":"consumer_byte_rate","remove":true}]}]}"#
        );
        assert_eq!(r.key(), "broker-1/1760000000000001");
        round_trip(&r);
    }

    #[test]
    fn every_entity_shape_round_trips() {
        let d = || EntityName::Default;
        let entities = [
            Entity::User(n("alice")),
            Entity::User(d()),
            Entity::UserClient(n("alice"), n("batch")),
            Entity::UserClient(n("alice"), d()),
            Entity::UserClient(d(), n("batch")),
            Entity::UserClient(d(), d()),
            Entity::ClientId(n("batch")),
            Entity::ClientId(d()),
            Entity::Ip(n("10.0.0.1")),
            Entity::Ip(n("::1")),
            Entity::Ip(d()),
            // Names that need escaping in JSON, and one that only looks like the default.
            Entity::User(n("a \"quoted\"\\ name/\u{e9}\u{1F600}\n")),
            Entity::ClientId(n("<default>")),
        ];
        let batch: Vec<Alteration> = entities
            .iter()
            .map(|e| {
                Alteration::new(e)
                    .set("producer_byte_rate:bps", 1e6)
                    .set("consumer_byte_rate:shares", 3.0)
                    .set("request_percentage", 12.5)
                    .set("connection_creation_rate", 0.1)
                    .remove("controller_mutation_rate")
            })
            .collect();
        for a in &batch {
            round_trip(&record(vec![a.clone()]));
        }
        round_trip(&record(batch));
    }

    #[test]
    fn what_the_engine_refuses_round_trips_too() {
        // Every instance must refuse these alike, so they travel exactly as sent.
        let raw = vec![
            // Unknown types, an empty name, repeated types, no parts at all.
            Alteration::raw([("users", Some("x"))]).set("producer_byte_rate", 1.0),
            Alteration::raw([("user", Some(""))]).set("producer_byte_rate", 1.0),
            Alteration::raw([("user", Some("a")), ("user", None::<&str>)]).remove("x"),
            Alteration::raw(Vec::<(String, Option<String>)>::new()).set("k", 1.0),
            // The same entity twice (refused as duplicates), and an alteration with no ops.
            Alteration::raw([("user", Some("a"))]).set("producer_byte_rate", 1.0),
            Alteration::raw([("user", Some("a"))]).set("consumer_byte_rate", 1.0),
            Alteration::raw([("client-id", None::<&str>)]),
            // Keys unknown or empty, values out of range or not numbers at all.
            Alteration::raw([("client-id", Some("c"))])
                .set("", 1.0)
                .set("nonsense:unit", 1.0)
                .set("producer_byte_rate", f64::NAN)
                .set("consumer_byte_rate", f64::INFINITY)
                .set("request_percentage", f64::NEG_INFINITY)
                .set("controller_mutation_rate", -0.0)
                .set("producer_byte_rate:bps", f64::MAX)
                .set("consumer_byte_rate:bps", f64::MIN_POSITIVE)
                .set("x", 5e-324),
        ];
        let r = record(raw);
        let back = ConfigRecord::decode(&r.encode()).unwrap();
        // NaN is not equal to itself: compare bit patterns.
        type Bits = Vec<(Vec<EntityPart>, Vec<(String, Option<u64>)>)>;
        let bits = |r: &ConfigRecord| -> Bits {
            r.batch
                .iter()
                .map(|a| {
                    let ops = a
                        .ops
                        .iter()
                        .map(|o| (o.key.clone(), o.value.map(f64::to_bits)));
                    (a.entity.clone(), ops.collect())
                })
                .collect()
        };
        assert_eq!(bits(&back), bits(&r));
    }

    #[test]
    fn a_decoded_batch_does_what_the_original_does() {
        // Applied to engines in the same state, the batch as sent and the batch as read back give
        // the same results and the same configuration.
        let batch = vec![
            Alteration::new(&Entity::User(n("alice"))).set("producer_byte_rate", 10e6),
            Alteration::new(&Entity::UserClient(n("alice"), n("a"))).set("producer_byte_rate", 6e6),
            Alteration::new(&Entity::UserClient(n("alice"), n("b"))).set("producer_byte_rate", 6e6),
            Alteration::new(&Entity::ClientId(EntityName::Default))
                .set("consumer_byte_rate:bps", 1e6)
                .remove("producer_byte_rate"),
            Alteration::raw([("user", Some("alice"))]).set("request_percentage", 5.0),
            Alteration::raw([("ip", None::<&str>)]).set("connection_creation_rate", 3.0),
        ];
        let back = ConfigRecord::decode(&record(batch.clone()).encode())
            .unwrap()
            .batch;
        let (one, two) = (kquota::Engine::new(), kquota::Engine::new());
        assert_eq!(one.alter(&batch, false), two.alter(&back, false));
        let all = |e: &kquota::Engine| e.list(&kquota::ListFilter::default());
        assert_eq!(all(&one), all(&two));
        assert!(!all(&one).is_empty());
    }

    #[test]
    fn values_round_trip_bit_for_bit() {
        // A simple generator (no dependency): every kind of double, as bit patterns.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for i in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = match i % 4 {
                0 => f64::from_bits(x),
                1 => (x >> 11) as f64,
                2 => (x % 1_000_000_000) as f64 / 1000.0,
                _ => f64::from_bits(x) % 1e9,
            };
            let r = record(vec![
                Alteration::new(&Entity::User(n("u"))).set("producer_byte_rate", v)
            ]);
            let back = ConfigRecord::decode(&r.encode()).unwrap();
            let got = back.batch[0].ops[0].value.unwrap();
            if v.is_nan() {
                // One NaN for all: the engine refuses every NaN alike.
                assert!(got.is_nan());
            } else {
                assert_eq!(got.to_bits(), v.to_bits(), "{v:e} came back as {got:e}");
            }
        }
    }

    #[test]
    fn malformed_records_are_errors() {
        let bad: [(&str, &str); 14] = [
            ("", "not a configuration record"),
            ("not json", "not a configuration record"),
            ("[1]", "not a JSON object"),
            (r#"{"origin":"a"}"#, "not a configuration record"),
            (r#"{"v":"1"}"#, "not a configuration record"),
            (r#"{"v":1}"#, "missing field"),
            (
                r#"{"v":1,"origin":"a","seq":1,"validate_only":false,"alterations":[],"extra":1}"#,
                "unknown field",
            ),
            (
                r#"{"v":1,"origin":"a","seq":-1,"validate_only":false,"alterations":[]}"#,
                "malformed",
            ),
            (
                r#"{"v":1,"origin":"a","seq":1,"validate_only":false,"alterations":[{"entity":[{"type":"user"}],"ops":[]}]}"#,
                "missing field `name`",
            ),
            (
                r#"{"v":1,"origin":"a","seq":1,"validate_only":false,"alterations":[{"entity":[],"ops":[{"key":"k"}]}]}"#,
                "neither a value nor",
            ),
            (
                r#"{"v":1,"origin":"a","seq":1,"validate_only":false,"alterations":[{"entity":[],"ops":[{"key":"k","remove":false}]}]}"#,
                "neither a value nor",
            ),
            (
                r#"{"v":1,"origin":"a","seq":1,"validate_only":false,"alterations":[{"entity":[],"ops":[{"key":"k","value":1.0,"remove":true}]}]}"#,
                "both a value and",
            ),
            (
                r#"{"v":1,"origin":"a","seq":1,"validate_only":false,"alterations":[{"entity":[],"ops":[{"key":"k","value":"1.0"}]}]}"#,
                "malformed",
            ),
            (
                r#"{"v":1,"origin":"a","seq":1,"validate_only":false,"alterations":[{"entity":[],"ops":[{"key":"k","value":null}]}]}"#,
                "neither a value nor",
            ),
        ];
        for (text, why) in bad {
            let e = ConfigRecord::decode(text.as_bytes())
                .expect_err(text)
                .to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
        // Not UTF-8.
        assert!(ConfigRecord::decode(&[0xff, 0xfe]).is_err());
    }

    #[test]
    fn unknown_versions_are_errors() {
        for v in [0, 2, 99] {
            let text = format!(
                r#"{{"v":{v},"origin":"a","seq":1,"validate_only":false,"alterations":[]}}"#
            );
            let e = ConfigRecord::decode(text.as_bytes()).unwrap_err();
            assert_eq!(e, RecordProblem::Version(v));
            assert!(
                e.to_string().contains(&format!("record version {v}")),
                "{e}"
            );
        }
        // A later version's shape is not read as version 1's.
        let e = ConfigRecord::decode(br#"{"v":2,"snapshot":{}}"#).unwrap_err();
        assert_eq!(e, RecordProblem::Version(2));
    }

    #[test]
    fn a_written_integer_and_a_removal_with_remove_false_value() {
        // A hand-written record may spell 1048576.0 as 1048576; "remove":false beside a value is a set.
        let text = r#"{"v":1,"origin":"a","seq":1,"validate_only":false,"alterations":[{"entity":[{"type":"client-id","name":"c"}],"ops":[{"key":"producer_byte_rate","value":1048576,"remove":false}]}]}"#;
        let r = ConfigRecord::decode(text.as_bytes()).unwrap();
        assert_eq!(
            r.batch,
            vec![Alteration::new(&Entity::ClientId(n("c"))).set("producer_byte_rate", 1_048_576.0)]
        );
    }
}
