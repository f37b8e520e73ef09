//! Apache Kafka's `DefaultQuotaCallback` with its manager's shortcuts, written plainly from its
//! rules, one quota type at a time: the model the callback's `kafka` policy is checked against here
//! and in the fuzz target `kafka_callback`.
//!
//! Kafka keeps a map from entity to quota and counts, per shape of entity, how many configure the
//! type (`quotaTypesEnabled`). When only one shape does, every connection is tagged by that shape;
//! otherwise the tags come from the first of six exact lookups. A limit is found from the tags alone.

#![allow(unreachable_pub, dead_code)]

use std::collections::HashMap;

/// An entity component as Kafka holds it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Comp {
    /// The entity has no such component.
    Absent,
    /// `<default>`.
    Default,
    /// A name.
    Named(String),
}

/// One quota type's view.
#[derive(Default, Debug)]
pub struct KafkaDefault {
    quotas: HashMap<(Comp, Comp), f64>,
    /// {user, client-id}, {user}, {client-id}.
    counts: [u64; 3],
}

fn shape(user: &Comp, client: &Comp) -> usize {
    match (user, client) {
        (Comp::Absent, _) => 2,
        (_, Comp::Absent) => 1,
        _ => 0,
    }
}

impl KafkaDefault {
    /// `updateQuota`.
    pub fn update(&mut self, user: Comp, client: Comp, value: f64) {
        let s = shape(&user, &client);
        if self.quotas.insert((user, client), value).is_none() {
            self.counts[s] += 1;
        }
    }

    /// `removeQuota`.
    pub fn remove(&mut self, user: Comp, client: Comp) {
        let s = shape(&user, &client);
        if self.quotas.remove(&(user, client)).is_some() {
            self.counts[s] -= 1;
        }
    }

    fn has(&self, user: Comp, client: Comp) -> bool {
        self.quotas.contains_key(&(user, client))
    }

    fn get(&self, user: Comp, client: Comp) -> Option<f64> {
        self.quotas.get(&(user, client)).copied()
    }

    /// The tags `(user tag, client-id tag)` of a connection.
    pub fn tags(&self, user: &str, client: &str) -> (String, String) {
        let (u, c) = (user.to_owned(), client.to_owned());
        let mask = (self.counts[0] > 0) as u32 * 4
            + (self.counts[1] > 0) as u32 * 2
            + (self.counts[2] > 0) as u32;
        let named = |s: &str| Comp::Named(s.to_owned());
        match mask {
            0 | 1 => (String::new(), c),
            2 => (u, String::new()),
            4 => (u, c),
            _ => {
                if self.has(named(user), named(client)) || self.has(named(user), Comp::Default) {
                    (u, c)
                } else if self.has(named(user), Comp::Absent) {
                    (u, String::new())
                } else if self.has(Comp::Default, named(client))
                    || self.has(Comp::Default, Comp::Default)
                {
                    (u, c)
                } else if self.has(Comp::Default, Comp::Absent) {
                    (u, String::new())
                } else {
                    (String::new(), c)
                }
            }
        }
    }

    /// The limit of a bucket's tags.
    pub fn limit(&self, user: &str, client: &str) -> Option<f64> {
        let named = |s: &str| Comp::Named(s.to_owned());
        match (user.is_empty(), client.is_empty()) {
            (false, false) => self
                .get(named(user), named(client))
                .or_else(|| self.get(named(user), Comp::Default))
                .or_else(|| self.get(Comp::Default, named(client)))
                .or_else(|| self.get(Comp::Default, Comp::Default)),
            (false, true) => self
                .get(named(user), Comp::Absent)
                .or_else(|| self.get(Comp::Default, Comp::Absent)),
            (true, false) => self
                .get(Comp::Absent, named(client))
                .or_else(|| self.get(Comp::Absent, Comp::Default)),
            (true, true) => None,
        }
    }
}
