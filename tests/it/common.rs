//! Helpers shared by the integration tests.

#![allow(dead_code)]

use kquota::{Alteration, Engine, Entity, EntityName};

/// A named entity component.
pub(crate) fn n(s: &str) -> EntityName {
    EntityName::named(s).expect("non-empty name")
}

/// The default entity component.
pub(crate) fn d() -> EntityName {
    EntityName::Default
}

/// Applies a batch and panics with the first error.
pub(crate) fn alter_ok(engine: &Engine, batch: &[Alteration]) {
    for r in engine.alter(batch, false) {
        if let Some(e) = r.error {
            panic!("alteration of {:?} failed: {e}", r.entity);
        }
    }
}

/// `{user=u, client-id=c}` with named components.
pub(crate) fn uc(u: &str, c: &str) -> Entity {
    Entity::UserClient(n(u), n(c))
}
