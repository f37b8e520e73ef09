//! Java's `HashMap` iteration order and Kafka's printing of an entity: Kafka's validation reports the
//! first error in that order, and its tools print entities in it, so a host that must answer as Kafka
//! does needs both.

use std::collections::HashMap;
use std::hash::Hash;

use crate::entity::EntityPart;

/// Prints raw parts as Kafka prints a `ClientQuotaEntity`: `ClientQuotaEntity(entries={client-id=c,
/// user=u})`, in the order of a Java `HashMap` created with capacity `initial`, `null` for the default.
pub fn java_entity_string(parts: &[EntityPart], initial: usize) -> String {
    let types: Vec<&str> = parts.iter().map(|p| p.entity_type.as_str()).collect();
    let inner: Vec<String> = java_map_order(&types, initial)
        .into_iter()
        .map(|i| {
            let p = &parts[i];
            format!("{}={}", p.entity_type, p.name.as_deref().unwrap_or("null"))
        })
        .collect();
    format!("ClientQuotaEntity(entries={{{}}})", inner.join(", "))
}

/// Java's `String.hashCode`: the UTF-16 code units folded as `h * 31 + unit`, wrapping.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(unit as i32))
}

/// The order in which a Java `HashMap<String, _>` created with capacity `initial` iterates after
/// `put`ting `keys` in order. Returns, per distinct key, the index of its last `put` (later puts replace
/// the value but keep the position). Kafka's error precedence and entity printing follow this order.
pub fn java_map_order(keys: &[&str], initial: usize) -> Vec<usize> {
    java_hash_map_order(keys, |k| java_string_hash(k), initial)
}

/// [`java_map_order`] for keys of any type, given the `hashCode` Java computes for each: the order in
/// which a `HashMap` created with capacity `initial` iterates after `put`ting `keys` in order (keys
/// equal by `==` are one entry, at the index of its last `put`).
pub fn java_hash_map_order<K: Eq + Hash>(
    keys: &[K],
    hash_code: impl Fn(&K) -> i32,
    initial: usize,
) -> Vec<usize> {
    if keys.len() <= 1 {
        return (0..keys.len()).collect();
    }
    // HashMap(n) starts at the next power of two >= n and doubles whenever size > 0.75 × capacity.
    let mut capacity = initial.max(1).next_power_of_two();
    let mut distinct: Vec<(&K, usize)> = Vec::new();
    let mut position: HashMap<&K, usize> = HashMap::with_capacity(keys.len());
    for (i, key) in keys.iter().enumerate() {
        match position.get(key) {
            Some(&slot) => distinct[slot].1 = i,
            None => {
                position.insert(key, distinct.len());
                distinct.push((key, i));
                while distinct.len() > capacity * 3 / 4 {
                    capacity *= 2;
                }
            }
        }
    }
    let mask = capacity as u32 - 1;
    // HashMap spreads the hash (h ^ h >>> 16) before taking the bucket; a stable sort keeps insertion
    // order within a bucket, as Java's chained buckets do.
    let bucket = |k: &K| {
        let h = hash_code(k) as u32;
        (h ^ (h >> 16)) & mask
    };
    distinct.sort_by_key(|(k, _)| bucket(k));
    distinct.into_iter().map(|(_, i)| i).collect()
}
