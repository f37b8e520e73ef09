//! Change notifications: one per changed entity, after the change is visible, outside any lock.

use std::sync::{Arc, Mutex, Weak};

use kquota::{Alteration, ChangeNotification, Engine, Entity, QuotaKey};

use kquota_testkit::{alter_ok, d, n, uc};

fn recorder(engine: &Engine) -> Arc<Mutex<Vec<ChangeNotification>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    engine.subscribe(move |notes| sink.lock().unwrap().extend_from_slice(notes));
    seen
}

#[test]
fn one_notification_per_changed_entity() {
    let engine = Engine::new();
    let seen = recorder(&engine);
    alter_ok(
        &engine,
        &[
            Alteration::new(&uc("user2", "clientA")).set("producer_byte_rate", 10.0),
            Alteration::new(&Entity::User(n("user1"))).set("producer_byte_rate", 20.0),
            Alteration::new(&Entity::User(n("nobody"))).remove("producer_byte_rate"),
        ],
    );
    let notes = seen.lock().unwrap().clone();
    assert_eq!(notes.len(), 2);
    assert!(notes.iter().all(|n| n.seq == 1));
    assert_eq!(
        (
            notes[0].v1().entity_type.as_str(),
            notes[0].v1().entity_name.as_str()
        ),
        ("users", "user2/clients/clientA")
    );
    assert_eq!(notes[0].v2().entity_path, "users/user2/clients/clientA");
    assert_eq!(notes[1].v2().entity_path, "users/user1");
    #[cfg(feature = "serde")]
    {
        assert_eq!(
            notes[0].v1_json(),
            r#"{"version":1,"entity_type":"users","entity_name":"user2/clients/clientA"}"#
        );
        assert_eq!(
            notes[0].v2_json(),
            r#"{"version":2,"entity_path":"users/user2/clients/clientA"}"#
        );
        assert_eq!(
            notes[1].v1_json(),
            r#"{"version":1,"entity_type":"users","entity_name":"user1"}"#
        );
    }
}

#[test]
fn unchanged_values_and_validate_only_notify_no_one() {
    let engine = Engine::new();
    let set = Alteration::new(&Entity::ClientId(d())).set("request_percentage", 50.0);
    alter_ok(&engine, std::slice::from_ref(&set));
    let seen = recorder(&engine);
    alter_ok(&engine, &[set]);
    let results = engine.alter(
        &[Alteration::new(&Entity::ClientId(d())).set("request_percentage", 60.0)],
        true,
    );
    assert!(results[0].error.is_none());
    assert!(seen.lock().unwrap().is_empty());
}

#[test]
fn delivered_after_visible_and_outside_the_writer_lock() {
    let engine = Arc::new(Engine::new());
    let weak: Weak<Engine> = Arc::downgrade(&engine);
    let observed = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&observed);
    engine.subscribe(move |notes| {
        let engine = weak.upgrade().expect("engine alive");
        // The change is already visible to readers.
        let limit = engine
            .resolve("u", "c")
            .get(QuotaKey::PRODUCER_BROKER_BPS)
            .map(|q| q.limit);
        sink.lock().unwrap().push((notes[0].seq, limit));
        // A nested alteration would deadlock if delivery held the writer lock.
        if notes[0].seq == 1 {
            let r = engine.alter(
                &[Alteration::new(&Entity::User(n("nested"))).set("producer_byte_rate", 1.0)],
                false,
            );
            assert!(r[0].error.is_none());
        }
    });
    alter_ok(
        &engine,
        &[Alteration::new(&uc("u", "c")).set("producer_byte_rate", 42.0)],
    );
    let observed = observed.lock().unwrap().clone();
    assert_eq!(observed, vec![(1, Some(42.0)), (2, Some(42.0))]);
}

#[test]
fn sanitized_names_in_both_forms() {
    let engine = Engine::new();
    let seen = recorder(&engine);
    alter_ok(
        &engine,
        &[Alteration::new(&Entity::UserClient(d(), n("a b*"))).set("producer_byte_rate", 1.0)],
    );
    let notes = seen.lock().unwrap().clone();
    assert_eq!(
        notes[0].v2().entity_path,
        "users/<default>/clients/a%20b%2A"
    );
    assert_eq!(notes[0].v1().entity_name, "<default>/clients/a%20b%2A");
}
