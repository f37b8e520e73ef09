//! Java's `HashMap` iteration order and Kafka's printing of an entity: Kafka's validation reports the
//! first error in that order, and its tools print entities in it, so a host that must answer as Kafka
//! does needs both.

use std::collections::HashMap;

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

/// The order in which a Java `HashMap<String, _>` created with capacity `initial` iterates after
/// `put`ting `keys` in order. Returns, per distinct key, the index of its last `put` (later puts replace
/// the value but keep the position). Kafka's error precedence and entity printing follow this order.
pub fn java_map_order(keys: &[&str], initial: usize) -> Vec<usize> {
    fn java_hash(s: &str) -> u32 {
        let h = s
            .encode_utf16()
            .fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(unit as i32))
            as u32;
        h ^ (h >> 16)
    }
    if keys.len() <= 1 {
        return (0..keys.len()).collect();
    }
    // HashMap(n) starts at the next power of two >= n and doubles whenever size > 0.75 × capacity.
    let mut capacity = initial.max(1).next_power_of_two();
    let mut distinct: Vec<(&str, usize)> = Vec::new();
    let mut position: HashMap<&str, usize> = HashMap::with_capacity(keys.len());
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
    // A stable sort keeps insertion order within a bucket, as Java's chained buckets do.
    distinct.sort_by_key(|(k, _)| java_hash(k) & mask);
    distinct.into_iter().map(|(_, i)| i).collect()
}
