//! What the meter answers: throttles, their causes, mutation decisions and bucket snapshots.

use std::sync::Arc;

use crate::describe::BpsView;
use crate::entity::Level;
use crate::key::QuotaKey;
use crate::scope::BucketScope;

/// Who a bucket belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum BucketOwner {
    /// One (user, client-id).
    UserClient(Arc<str>, Arc<str>),
    /// All clients of one user.
    User(Arc<str>),
    /// Every user of one client-id.
    ClientId(Arc<str>),
    /// One IP address.
    Ip(Arc<str>),
}

impl BucketOwner {
    /// The bucket of `(user, client_id)` for a quota shared as `scope` says.
    pub(crate) fn of(scope: BucketScope, user: &Arc<str>, client_id: &Arc<str>) -> BucketOwner {
        match scope {
            BucketScope::UserClient => {
                BucketOwner::UserClient(Arc::clone(user), Arc::clone(client_id))
            }
            BucketScope::User => BucketOwner::User(Arc::clone(user)),
            BucketScope::ClientId => BucketOwner::ClientId(Arc::clone(client_id)),
        }
    }
}

impl std::fmt::Display for BucketOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BucketOwner::UserClient(u, c) => write!(f, "(user={u}, client-id={c})"),
            BucketOwner::User(u) => write!(f, "(user={u})"),
            BucketOwner::ClientId(c) => write!(f, "(client-id={c})"),
            BucketOwner::Ip(ip) => write!(f, "(ip={ip})"),
        }
    }
}

/// Why a request is throttled: the key and bucket with the longest throttle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThrottleCause {
    /// The quota key that was exceeded.
    pub key: QuotaKey,
    /// The bucket that exceeded it.
    pub owner: BucketOwner,
    /// The precedence level the quota came from (`None` for ip quotas).
    pub level: Option<Level>,
}

/// A throttle decision: how long the client must wait, and why. `ms == 0` means no throttle.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Throttle {
    /// Milliseconds to throttle the client (Kafka's `throttle_time_ms`).
    pub ms: u64,
    /// The key and bucket behind the longest throttle, when `ms > 0`.
    pub cause: Option<ThrottleCause>,
}

impl Throttle {
    /// Whether the client must be throttled.
    pub fn is_throttled(&self) -> bool {
        self.ms > 0
    }
}

/// The outcome of recording controller mutations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MutationDecision {
    /// Whether the request may proceed. In strict mode a request from a bucket in debt is refused
    /// (Kafka answers THROTTLING_QUOTA_EXCEEDED) and nothing is recorded.
    pub accepted: bool,
    /// The throttle to return to the client.
    pub throttle: Throttle,
}

/// A snapshot of one active bucket, for operators.
#[derive(Clone, Debug, PartialEq)]
pub struct BucketSnapshot {
    /// The quota key metered.
    pub key: QuotaKey,
    /// Who shares the bucket.
    pub owner: BucketOwner,
    /// The level the quota came from (`None` for ip quotas).
    pub level: Option<Level>,
    /// The limit last applied, in this broker's terms (bytes/s, percent, mutations/s, connections/s).
    pub limit: f64,
    /// The measured rate now (for mutations: the tokens left).
    pub measured: f64,
    /// Everything recorded into the bucket.
    pub recorded_total: f64,
    /// Sum of the throttles handed out.
    pub throttle_ms_total: u64,
    /// How many decisions throttled.
    pub throttle_count: u64,
    /// For a `bps` key, which view `limit` came from; `None` for the other units, or before the
    /// first request.
    pub bps_view: Option<BpsView>,
    /// For a bucket every client-id of one user records into ([`BucketOwner::User`], a windowed
    /// rate): the client-ids that made up `measured`, each with its part of it (in `measured`'s
    /// units), busiest first. At most 16, chosen by what they recorded over about the quota
    /// window; a connection's bytes are attributed at most once per sample window and when it
    /// closes, so a part trails the bucket's rate by up to a sample. Empty for other buckets.
    pub clients: Vec<(Arc<str>, f64)>,
    /// The part of `measured` that no client-id in `clients` accounts for: what client-ids
    /// beyond the 16 recorded (0 until there have been more than 16).
    pub clients_other: f64,
}
