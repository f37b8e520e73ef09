//! What the committing threads, the producer's delivery reports and the follower share: the
//! follower's progress, and where each commit of this process stands.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use kquota::{AlterResult, Engine};
use parking_lot::{Condvar, Mutex};

use crate::error::{ClusterError, LogFailure};
use crate::kafka::{KafkaError, Undelivered};

/// What the committing threads, the producer's delivery reports and the follower share.
pub(super) struct Shared {
    /// The engine the log is applied to.
    pub(super) engine: Arc<Engine>,
    /// This instance's id.
    pub(super) instance_id: String,
    /// The follower's progress and the commits waiting for it.
    pub(super) state: Mutex<Follow>,
    /// Signalled whenever `state` changes.
    pub(super) changed: Condvar,
    /// The first sequence number this process issues (0 until the follower has caught up).
    pub(super) first_seq: AtomicU64,
}

impl Shared {
    /// The shared state of instance `instance_id` applying the log to `engine`.
    pub(super) fn new(engine: Arc<Engine>, instance_id: &str) -> Shared {
        Shared {
            engine,
            instance_id: instance_id.to_owned(),
            state: Mutex::new(Follow::default()),
            changed: Condvar::new(),
            first_seq: AtomicU64::new(0),
        }
    }

    /// The producer's word on batch `seq`, which was not delivered: a commit still waiting for
    /// it is answered as refused, or keeps waiting with the doubt noted (the follower will tell,
    /// if the batch comes).
    pub(super) fn undelivered(&self, seq: u64, why: Undelivered) {
        let mut state = self.state.lock();
        if let Some(p @ Pending::Waiting { .. }) = state.pending.get_mut(&seq) {
            *p = match why {
                Undelivered::Refused(e) => Pending::Refused(e),
                Undelivered::Doubt(e) => Pending::Waiting { doubt: Some(e) },
            };
            self.changed.notify_all();
        }
    }
}

/// The follower's progress, and the commits waiting for it.
#[derive(Default)]
pub(super) struct Follow {
    /// The offset after the last record applied.
    pub(super) next_offset: i64,
    /// The records read so far (a record read again after a snapshot counts again).
    pub(super) records_read: u64,
    /// The claim offset of the latest complete snapshot read.
    pub(super) snapshot: Option<i64>,
    /// The log's end (its high watermark) as the consumer last heard it from Kafka; 0 until then.
    pub(super) end_offset: i64,
    /// Why this instance stopped applying the log, once it has.
    pub(super) failure: Option<LogFailure>,
    /// This process's commits still waiting, by sequence number.
    pub(super) pending: HashMap<u64, Pending>,
    /// The highest sequence number of this instance id seen in the log.
    pub(super) max_own_seq: Option<u64>,
}

/// Where a commit stands.
pub(super) enum Pending {
    /// Produced; `doubt` holds a delivery error after which the record may or may not be in the
    /// log (the follower will tell, if it comes).
    Waiting { doubt: Option<KafkaError> },
    /// Applied from the log, with these results.
    Applied(Vec<AlterResult>),
    /// Applied while this instance could not yet trust its state (records had gone missing):
    /// these results hold once it does, or the batch is read again.
    Provisional(Vec<AlterResult>),
    /// Kafka refused the record: it is not in the log.
    Refused(KafkaError),
}

/// Batch `seq`'s answer, taken out of `state`, once it has one.
pub(super) fn outcome(
    state: &mut Follow,
    seq: u64,
) -> Option<Result<Vec<AlterResult>, ClusterError>> {
    match state.pending.get(&seq) {
        Some(Pending::Applied(_) | Pending::Refused(_)) => {}
        _ => return None,
    }
    match state.pending.remove(&seq) {
        Some(Pending::Applied(results)) => Some(Ok(results)),
        Some(Pending::Refused(source)) => Some(Err(ClusterError::Refused { source })),
        _ => None,
    }
}
