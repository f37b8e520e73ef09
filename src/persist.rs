//! The seam between the engine and wherever a host keeps its quotas.

use std::error::Error;
use std::fmt;

use crate::alter::{AlterResult, Alteration, EntityChange};
use crate::engine::Engine;

/// The error a [`Persistence`] reports: whatever its storage failed with.
pub type PersistError = Box<dyn Error + Send + Sync>;

/// Somewhere alterations are made durable before they become visible.
///
/// A host hands one to its admin API (the wire crate's handler takes an `Arc<dyn Persistence>`), which
/// commits each batch with [`Engine::alter_durably`](crate::Engine::alter_durably) and this as its
/// `persist` step: the changes are written first, and published only if the write succeeded. An
/// implementation must not return until the changes would survive a crash; if it fails, nothing was
/// applied and the alteration is refused as a whole.
///
/// A store that is itself the order of commits (a replicated log that several engines follow)
/// overrides [`Persistence::commit`] instead: it appends the batch to the log, and returns the
/// results the batch had when the engine applied it from there, in log order.
pub trait Persistence: Send + Sync + fmt::Debug {
    /// Makes `changes` durable: each entity's complete new set of quotas (empty when it has none
    /// left). Called under the engine's writer lock, so calls never overlap.
    fn persist(&self, changes: &[EntityChange<'_>]) -> Result<(), PersistError>;

    /// Commits `batch` to `engine` and returns each alteration's result; this is what an admin
    /// API calls. By default: validated against the engine's state, made durable with
    /// [`Persistence::persist`], then published ([`Engine::alter_durably`]). With
    /// `validate_only`, nothing is written.
    fn commit(
        &self,
        engine: &Engine,
        batch: &[Alteration],
        validate_only: bool,
    ) -> Result<Vec<AlterResult>, PersistError> {
        engine.alter_durably(batch, validate_only, |changes| self.persist(changes))
    }
}
