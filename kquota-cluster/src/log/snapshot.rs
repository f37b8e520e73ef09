//! Snapshots of the configuration: the engine's state taken in canonical form and cut into
//! chunks, the chunks gathered again as they are read, and an engine made to hold a snapshot.
//! No I/O: the follower ([`super::replica`]) and the writer ([`super::writer`]) move the bytes.

use std::collections::HashMap;

use kquota::{Alteration, Engine, Entity, ListFilter, QuotaKey};

use super::record::{chunk_key, chunk_value, encode_entry, Chunk, SnapshotEntry, CHUNK_BYTES};

/// The engine's configuration in canonical form: entities in order, each one's values by the
/// key's spelling, every entry encoded once.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// How many entities it holds.
    pub(crate) entities: u64,
    /// The FNV-1a digest of its canonical entries.
    pub(crate) digest: u64,
    /// The entries, cut into chunks of at most [`CHUNK_BYTES`] (one entry larger than that is a
    /// chunk of its own).
    pub(crate) bodies: Vec<Vec<u8>>,
}

/// FNV-1a, 64 bits: cheap, and the same everywhere (a digest compares two instances' states).
#[derive(Clone, Copy, Debug)]
struct Fnv(u64);

impl Fnv {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    fn new() -> Fnv {
        Fnv(Fnv::OFFSET)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(Fnv::PRIME);
        }
    }
}

/// Sorts `entries` into canonical order (entities by their order, values by key spelling).
fn canonical(entries: &mut [SnapshotEntry]) {
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (_, values) in entries.iter_mut() {
        values.sort_by_cached_key(|(k, _)| k.to_string());
    }
}

/// Encodes `entries`, already canonical, into chunk bodies with their count and digest.
fn encode(entries: &[SnapshotEntry]) -> Snapshot {
    let mut digest = Fnv::new();
    let mut bodies: Vec<Vec<u8>> = Vec::new();
    let mut body: Vec<u8> = Vec::new();
    let mut item = Vec::with_capacity(256);
    for (entity, values) in entries {
        item.clear();
        encode_entry(entity, values, &mut item);
        digest.write(&item);
        // Entries are told apart in the digest as they are in the chunk.
        digest.write(b"\n");
        if !body.is_empty() && body.len() + 1 + item.len() > CHUNK_BYTES {
            bodies.push(std::mem::take(&mut body));
        }
        if !body.is_empty() {
            body.push(b',');
        }
        body.extend_from_slice(&item);
    }
    if !body.is_empty() || bodies.is_empty() {
        // An empty configuration is one empty chunk: a snapshot always has a part to read.
        bodies.push(body);
    }
    Snapshot {
        entities: entries.len() as u64,
        digest: digest.0,
        bodies,
    }
}

/// The engine's configuration now, as a snapshot.
pub(crate) fn take(engine: &Engine) -> Snapshot {
    let mut entries: Vec<SnapshotEntry> = engine
        .list(&ListFilter::all())
        .into_iter()
        .map(|l| (l.entity, l.quotas))
        .collect();
    canonical(&mut entries);
    encode(&entries)
}

/// The records of `snapshot`, taken at the claim at offset `claim` by `origin`: (key, value).
pub(crate) fn records(claim: i64, origin: &str, snapshot: &Snapshot) -> Vec<(String, Vec<u8>)> {
    let count = u32::try_from(snapshot.bodies.len()).unwrap_or(u32::MAX);
    snapshot
        .bodies
        .iter()
        .enumerate()
        .map(|(i, body)| {
            let index = u32::try_from(i).unwrap_or(u32::MAX);
            (
                chunk_key(claim, index),
                chunk_value(
                    claim,
                    origin,
                    index,
                    count,
                    snapshot.entities,
                    snapshot.digest,
                    body,
                ),
            )
        })
        .collect()
}

/// One snapshot's chunks, gathered as they are read.
#[derive(Debug)]
pub(crate) struct Assembly {
    origin: String,
    count: u32,
    entities: u64,
    digest: u64,
    parts: Vec<Option<Vec<SnapshotEntry>>>,
    have: u32,
}

impl Assembly {
    /// The assembly `chunk` starts.
    pub(crate) fn new(chunk: &Chunk) -> Assembly {
        Assembly {
            origin: chunk.origin.clone(),
            count: chunk.count,
            entities: chunk.entities,
            digest: chunk.digest,
            parts: vec![None; chunk.count as usize],
            have: 0,
        }
    }

    /// Whether `chunk` belongs to this assembly (the same snapshot as the chunks before it).
    pub(crate) fn fits(&self, chunk: &Chunk) -> bool {
        self.origin == chunk.origin
            && self.count == chunk.count
            && self.entities == chunk.entities
            && self.digest == chunk.digest
    }

    /// Adds `chunk` (which [`fits`](Assembly::fits)); once every part is in, the whole snapshot,
    /// checked against what its chunks announce.
    pub(crate) fn add(&mut self, chunk: Chunk) -> Option<Result<Vec<SnapshotEntry>, String>> {
        let slot = &mut self.parts[chunk.index as usize];
        if slot.is_none() {
            self.have += 1;
        }
        *slot = Some(chunk.quotas);
        if self.have < self.count {
            return None;
        }
        let entries: Vec<SnapshotEntry> = self
            .parts
            .iter_mut()
            .flat_map(|p| p.take())
            .flatten()
            .collect();
        // Read back exactly as written: in canonical order, and with the digest announced.
        let mut sorted = entries.clone();
        canonical(&mut sorted);
        let again = encode(&sorted);
        Some(if sorted != entries {
            Err("its entries are not in canonical order".to_owned())
        } else if again.entities != self.entities || again.digest != self.digest {
            Err(format!(
                "its chunks hold {} entities of digest {:016x}, and announce {} of digest {:016x}",
                again.entities, again.digest, self.entities, self.digest
            ))
        } else {
            Ok(entries)
        })
    }
}

/// Makes `engine` hold exactly `entries`, a snapshot: loaded in one pass into an empty engine;
/// otherwise as one batch from its configuration to the snapshot's (subscribers hear of every
/// entity that changes). The error says what the engine refused.
pub(crate) fn restore(engine: &Engine, entries: Vec<SnapshotEntry>) -> Result<(), String> {
    if engine.entity_count() == 0 {
        return engine
            .load(entries)
            .map(|_| ())
            .map_err(|(entity, e)| format!("the engine refuses {entity}: {e:?}"));
    }
    let bits = |values: &[(QuotaKey, f64)]| {
        let mut v: Vec<(QuotaKey, u64)> = values.iter().map(|(k, x)| (*k, x.to_bits())).collect();
        v.sort();
        v
    };
    let mut current: HashMap<Entity, Vec<(QuotaKey, f64)>> = engine
        .list(&ListFilter::all())
        .into_iter()
        .map(|l| (l.entity, l.quotas))
        .collect();
    let mut batch = Vec::new();
    for (entity, values) in &entries {
        let now = current.remove(entity);
        if now.as_deref().map(bits) == Some(bits(values)) {
            continue;
        }
        let mut alteration = Alteration::new(entity);
        for (key, value) in values {
            alteration = alteration.set(key, *value);
        }
        for (key, _) in now.iter().flatten() {
            if !values.iter().any(|(k, _)| k == key) {
                alteration = alteration.remove(key);
            }
        }
        batch.push(alteration);
    }
    // What the snapshot does not hold is removed.
    for (entity, values) in current {
        let mut alteration = Alteration::new(&entity);
        for (key, _) in values {
            alteration = alteration.remove(key);
        }
        batch.push(alteration);
    }
    if batch.is_empty() {
        return Ok(());
    }
    // A batch commits its valid alterations and refuses the others: validated first, so that a
    // snapshot is restored whole or not at all (nothing else alters the engine meanwhile).
    let refused = |results: Vec<kquota::AlterResult>| {
        results
            .into_iter()
            .find_map(|r| r.error.map(|e| (r.entity, e)))
            .map(|(entity, e)| format!("the engine refuses the change to {entity:?}: {e:?}"))
    };
    if let Some(why) = refused(engine.alter(&batch, true)) {
        return Err(why);
    }
    match refused(engine.alter(&batch, false)) {
        None => Ok(()),
        Some(why) => Err(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::record::LogRecord;
    use kquota::{EntityName, SubQuotaPolicy};

    fn n(s: &str) -> EntityName {
        EntityName::named(s).unwrap()
    }

    fn all(engine: &Engine) -> Vec<kquota::ListedEntity> {
        let mut l = engine.list(&ListFilter::all());
        l.sort_by(|a, b| a.entity.cmp(&b.entity));
        l
    }

    fn read_back(records: &[(String, Vec<u8>)]) -> Vec<SnapshotEntry> {
        let mut assembly: Option<Assembly> = None;
        let mut done = None;
        // In reverse: the parts may arrive in any order.
        for (key, value) in records.iter().rev() {
            let LogRecord::Chunk(chunk) = LogRecord::decode(value).unwrap() else {
                panic!("not a chunk: {key}");
            };
            assert_eq!(LogRecord::Chunk(chunk.clone()).key(), *key);
            let a = assembly.get_or_insert_with(|| Assembly::new(&chunk));
            assert!(a.fits(&chunk));
            if let Some(whole) = a.add(chunk) {
                done = Some(whole.unwrap());
            }
        }
        done.expect("never complete")
    }

    #[test]
    fn a_snapshot_read_back_restores_the_same_configuration() {
        let engine = Engine::new();
        let mut batch = vec![
            Alteration::new(&Entity::User(n("alice"))).set("producer_byte_rate", 10e6),
            Alteration::new(&Entity::UserClient(n("alice"), n("a"))).set("producer_byte_rate", 6e6),
            Alteration::new(&Entity::UserClient(
                EntityName::Default,
                EntityName::Default,
            ))
            .set("consumer_byte_rate:bps", 1e6)
            .set("request_percentage", 12.5),
            Alteration::new(&Entity::Ip(n("10.0.0.1"))).set("connection_creation_rate", 3.0),
            Alteration::new(&Entity::ClientId(n("<default>")))
                .set("producer_byte_rate:shares", 2.0),
        ];
        // Enough entities with long names for several chunks.
        for i in 0..6_000 {
            batch.push(
                Alteration::new(&Entity::User(n(&format!("user-{i:06}-{}", "x".repeat(80)))))
                    .set("consumer_byte_rate", 1000.0 + f64::from(i)),
            );
        }
        let results = engine.alter(&batch, false);
        assert!(
            results.iter().all(|r| r.error.is_none()),
            "{:?}",
            results.iter().find(|r| r.error.is_some())
        );
        let snapshot = take(&engine);
        assert_eq!(snapshot.entities, 6_005);
        let records = records(42, "a", &snapshot);
        assert!(records.len() > 1, "{} chunks", records.len());
        assert!(records.iter().all(|(_, v)| v.len() < CHUNK_BYTES + 1_000));
        let entries = read_back(&records);
        // Into an empty engine, and into one holding something else.
        let fresh = Engine::new();
        restore(&fresh, entries.clone()).unwrap();
        assert_eq!(all(&fresh), all(&engine));
        let other = Engine::new();
        let stale = [
            Alteration::new(&Entity::User(n("alice"))).set("producer_byte_rate", 11e6),
            Alteration::new(&Entity::User(n("zed"))).set("producer_byte_rate", 1.0),
            Alteration::new(&Entity::UserClient(
                EntityName::Default,
                EntityName::Default,
            ))
            .set("producer_byte_rate", 5.0),
        ];
        assert!(other.alter(&stale, false).iter().all(|r| r.error.is_none()));
        restore(&other, entries).unwrap();
        assert_eq!(all(&other), all(&engine));
        // The same state taken again is the same snapshot, whatever the order it was built in.
        assert_eq!(take(&other).digest, snapshot.digest);
        assert_eq!(take(&fresh).bodies, snapshot.bodies);
    }

    #[test]
    fn an_empty_configuration_is_one_empty_chunk() {
        let snapshot = take(&Engine::new());
        assert_eq!((snapshot.entities, snapshot.bodies.len()), (0, 1));
        let records = records(0, "a", &snapshot);
        assert!(read_back(&records).is_empty());
    }

    #[test]
    fn a_chunk_that_does_not_add_up_is_refused() {
        let engine = Engine::new();
        let batch = [Alteration::new(&Entity::User(n("u"))).set("producer_byte_rate", 5.0)];
        assert!(engine
            .alter(&batch, false)
            .iter()
            .all(|r| r.error.is_none()));
        let snapshot = take(&engine);
        let (_, value) = &records(7, "a", &snapshot)[0];
        let text = String::from_utf8(value.clone())
            .unwrap()
            .replace("5.0", "6.0");
        let LogRecord::Chunk(chunk) = LogRecord::decode(text.as_bytes()).unwrap() else {
            panic!()
        };
        let e = Assembly::new(&chunk).add(chunk).unwrap().unwrap_err();
        assert!(e.contains("announce 1 of digest"), "{e}");
    }

    #[test]
    fn a_snapshot_the_engine_refuses_is_an_error() {
        // Taken under the kafka policy, where sub-quotas may exceed the user's total; a kip55
        // engine refuses that state.
        let lax = Engine::builder()
            .policy(SubQuotaPolicy::Kafka)
            .build()
            .unwrap();
        let batch = [
            Alteration::new(&Entity::User(n("u"))).set("producer_byte_rate", 10.0),
            Alteration::new(&Entity::UserClient(n("u"), n("c"))).set("producer_byte_rate", 20.0),
        ];
        assert!(lax.alter(&batch, false).iter().all(|r| r.error.is_none()));
        let entries = read_back(&records(1, "a", &take(&lax)));
        let strict = Engine::new();
        assert!(restore(&strict, entries.clone()).is_err());
        assert_eq!(strict.entity_count(), 0);
        let busy = Engine::new();
        let one = [Alteration::new(&Entity::User(n("x"))).set("producer_byte_rate", 1.0)];
        assert!(busy.alter(&one, false).iter().all(|r| r.error.is_none()));
        assert!(restore(&busy, entries).is_err());
        assert_eq!(busy.entity_count(), 1);
    }
}
