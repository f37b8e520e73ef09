//! The callback's two sources of one configuration: Kafka's metadata (`updateQuota`,
//! `removeQuota`) and, with `kquota.cluster.bootstrap.servers`, kquota's configuration log.
//!
//! The engine the callback answers from holds both. **Where both set the same entity and key,
//! Kafka's metadata wins**; the log's value applies again once Kafka's is removed. So what Kafka's
//! own tools set and show is what the broker enforces, whether or not the log can be reached, and
//! the log adds what Kafka cannot hold: the seeds' units (`bps`, `shares`) and entries Kafka's
//! metadata does not set.
//!
//! Both sources change the served engine only here, under one lock, each change as one mirrored
//! alteration of one (entity, key); the log's engine is read, never written.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kquota::{Alteration, Engine, Entity, ListFilter, QuotaKey};
use parking_lot::Mutex;

/// What the served engine holds, and from where.
#[derive(Debug, Default)]
pub(crate) struct Sources {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Every (entity, key) Kafka's metadata sets, with its value.
    kafka: HashMap<(Entity, QuotaKey), f64>,
    /// The log's engine, once the broker follows the log.
    log: Option<Arc<Engine>>,
    /// Every (entity, key) the served engine holds from the log.
    from_log: HashSet<(Entity, QuotaKey)>,
}

impl Sources {
    /// Kafka's metadata now sets `key` of `entity` to `value` (`None`: removed). Mirrors into
    /// `served` what then applies; refused (and nothing changed) if the engine refuses it.
    pub(crate) fn kafka(
        &self,
        served: &Engine,
        entity: &Entity,
        key: QuotaKey,
        value: Option<f64>,
    ) -> Result<(), String> {
        let mut inner = self.inner.lock();
        let id = (entity.clone(), key);
        let from_log = match value {
            Some(_) => None,
            None => inner.log.as_ref().and_then(|log| log.value(entity, key)),
        };
        mirror(served, entity, key, value.or(from_log))?;
        match value {
            Some(v) => {
                inner.kafka.insert(id.clone(), v);
                inner.from_log.remove(&id);
            }
            None => {
                inner.kafka.remove(&id);
                if from_log.is_some() {
                    inner.from_log.insert(id);
                }
            }
        }
        Ok(())
    }

    /// The log's engine changed `entity`: mirrors each of its keys that Kafka's metadata does
    /// not set.
    pub(crate) fn log_changed(&self, served: &Engine, entity: &Entity) {
        let mut inner = self.inner.lock();
        inner.sync(served, entity);
    }

    /// The broker now follows the log through `log` (a fresh engine each time it joins): whatever
    /// the served engine holds from an earlier log engine and this one lacks goes, and every
    /// entity of this one is mirrored.
    pub(crate) fn attach(&self, served: &Engine, log: Arc<Engine>) {
        let mut inner = self.inner.lock();
        inner.log = Some(Arc::clone(&log));
        let stale: Vec<Entity> = inner
            .from_log
            .iter()
            .filter(|(e, k)| log.value(e, *k).is_none())
            .map(|(e, _)| e.clone())
            .collect();
        for entity in stale {
            inner.sync(served, &entity);
        }
        for listed in log.list(&ListFilter::all()) {
            inner.sync(served, &listed.entity);
        }
    }

    /// How many (entity, key) pairs come from each source: (Kafka's, the log's).
    pub(crate) fn counts(&self) -> (usize, usize) {
        let inner = self.inner.lock();
        (inner.kafka.len(), inner.from_log.len())
    }
}

impl Inner {
    fn sync(&mut self, served: &Engine, entity: &Entity) {
        if matches!(entity, Entity::Ip(_)) {
            // Connection rates are the broker's own (`ConnectionQuotas`), not the callback's.
            return;
        }
        for key in QuotaKey::client_keys() {
            let id = (entity.clone(), key);
            if self.kafka.contains_key(&id) {
                continue;
            }
            let wanted = self.log.as_ref().and_then(|log| log.value(entity, key));
            if served.value(entity, key) != wanted {
                // The log's engine validated it already: a refusal here would be a state only a
                // mirror can reach, and the served engine keeps what it had.
                let _ = mirror(served, entity, key, wanted);
            }
            if wanted.is_some() {
                self.from_log.insert(id);
            } else {
                self.from_log.remove(&id);
            }
        }
    }
}

/// Sets (or with `None` removes) one key of one entity in `served`, as it is.
fn mirror(
    served: &Engine,
    entity: &Entity,
    key: QuotaKey,
    value: Option<f64>,
) -> Result<(), String> {
    let alteration = Alteration::new(entity);
    let alteration = match value {
        Some(v) => alteration.set(key, v),
        None => alteration.remove(key),
    };
    let results = served.mirror(std::slice::from_ref(&alteration));
    match results.into_iter().find_map(|r| r.error) {
        Some(error) => Err(format!("{entity}: {}", error.message)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kquota::{EntityName, SubQuotaPolicy};

    fn client(name: &str) -> Entity {
        Entity::ClientId(EntityName::named(name).unwrap())
    }

    fn engine() -> Engine {
        Engine::builder()
            .policy(SubQuotaPolicy::Kafka)
            .build()
            .unwrap()
    }

    fn log_set(log: &Engine, entity: &Entity, key: QuotaKey, value: Option<f64>) {
        mirror(log, entity, key, value).unwrap();
    }

    const KEY: QuotaKey = QuotaKey::PRODUCER_BROKER_BPS;

    #[test]
    fn kafka_wins_when_it_was_first() {
        let (served, log, sources) = (engine(), Arc::new(engine()), Sources::default());
        let a = client("a");
        sources.kafka(&served, &a, KEY, Some(1_000.0)).unwrap();
        sources.attach(&served, Arc::clone(&log));
        log_set(&log, &a, KEY, Some(2_000.0));
        sources.log_changed(&served, &a);
        assert_eq!(served.value(&a, KEY), Some(1_000.0));
        // Kafka's removed: the log's applies.
        sources.kafka(&served, &a, KEY, None).unwrap();
        assert_eq!(served.value(&a, KEY), Some(2_000.0));
        // And the log's removal then removes it.
        log_set(&log, &a, KEY, None);
        sources.log_changed(&served, &a);
        assert_eq!(served.value(&a, KEY), None);
        assert_eq!(sources.counts(), (0, 0));
    }

    #[test]
    fn kafka_wins_when_it_comes_second() {
        let (served, log, sources) = (engine(), Arc::new(engine()), Sources::default());
        let b = client("b");
        sources.attach(&served, Arc::clone(&log));
        log_set(&log, &b, KEY, Some(2_000.0));
        sources.log_changed(&served, &b);
        assert_eq!(served.value(&b, KEY), Some(2_000.0));
        sources.kafka(&served, &b, KEY, Some(1_000.0)).unwrap();
        assert_eq!(served.value(&b, KEY), Some(1_000.0));
        // A later change in the log does not override Kafka's value.
        log_set(&log, &b, KEY, Some(3_000.0));
        sources.log_changed(&served, &b);
        assert_eq!(served.value(&b, KEY), Some(1_000.0));
        sources.kafka(&served, &b, KEY, None).unwrap();
        assert_eq!(served.value(&b, KEY), Some(3_000.0));
    }

    #[test]
    fn other_keys_of_the_same_entity_come_from_both() {
        let (served, log, sources) = (engine(), Arc::new(engine()), Sources::default());
        let c = client("c");
        sources.kafka(&served, &c, KEY, Some(1_000.0)).unwrap();
        log_set(&log, &c, QuotaKey::PRODUCER_BPS, Some(3_000_000.0));
        sources.attach(&served, Arc::clone(&log));
        assert_eq!(served.value(&c, KEY), Some(1_000.0));
        assert_eq!(served.value(&c, QuotaKey::PRODUCER_BPS), Some(3_000_000.0));
        assert_eq!(sources.counts(), (1, 1));
    }

    #[test]
    fn a_new_log_engine_replaces_what_the_last_one_gave() {
        let (served, sources) = (engine(), Sources::default());
        let (old, new) = (Arc::new(engine()), Arc::new(engine()));
        let (d, e) = (client("d"), client("e"));
        log_set(&old, &d, KEY, Some(1.0));
        sources.attach(&served, old);
        assert_eq!(served.value(&d, KEY), Some(1.0));
        log_set(&new, &e, KEY, Some(2.0));
        sources.attach(&served, new);
        assert_eq!(served.value(&d, KEY), None);
        assert_eq!(served.value(&e, KEY), Some(2.0));
    }

    #[test]
    fn a_refused_kafka_change_changes_nothing() {
        let (served, sources) = (engine(), Sources::default());
        let a = client("a");
        sources.kafka(&served, &a, KEY, Some(5.0)).unwrap();
        assert!(sources.kafka(&served, &a, KEY, Some(0.0)).is_err());
        assert_eq!(served.value(&a, KEY), Some(5.0));
        assert_eq!(sources.counts(), (1, 0));
    }
}
