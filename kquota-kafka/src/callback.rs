//! The callback's answers: who shares a bucket (`quotaMetricTags`) and a bucket's limit
//! (`quotaLimit`), from the engine, for each of Kafka's four client quota types.
//!
//! Names here are engine names ([`crate::names`]): a user is the *sanitized* name, as Kafka's
//! default callback compares users and as it tags their buckets; a client-id is the name itself.
//!
//! Under the `kafka` policy the answers are `DefaultQuotaCallback`'s to the letter, shortcuts
//! included: Kafka's `ClientQuotaManager` tags every bucket by the shapes of entity configured for
//! the type (its `quotaTypesEnabled`) when only one shape is, and otherwise by the first of six
//! exact lookups; a limit is looked up from the tags alone. Under `kip55` the tags are the bucket of
//! the engine's resolution and a user bucket's limit is the remainder of its total.
//!
//! Kafka's metadata holds only each type's native unit. A type for which kquota's configuration
//! log configures another unit anywhere (`producer_byte_rate:bps`, `:shares`) is answered from the
//! engine's resolution under either policy: Kafka meters one bucket per type for a connection, so
//! the bucket is that of the most specific level any unit of the type resolves to, and its limit
//! the smallest of the units that configure that bucket, a `bps` limit as this broker's part of it
//! ([`crate::parts`]).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use kquota::meter::BucketOwner;
use kquota::{
    BucketScope, Engine, Entity, EntityName, Level, Levels, Quota, QuotaKey, Shapes,
    SubQuotaPolicy, Unit,
};

use crate::parts::{PartView, Parts};
use crate::sources::Sources;

/// Kafka's client quota types, in the order of `ClientQuotaType`'s constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaType {
    /// `PRODUCE`: `producer_byte_rate`.
    Produce,
    /// `FETCH`: `consumer_byte_rate`.
    Fetch,
    /// `REQUEST`: `request_percentage`.
    Request,
    /// `CONTROLLER_MUTATION`: `controller_mutation_rate`.
    ControllerMutation,
}

impl QuotaType {
    /// All four, by ordinal.
    pub const ALL: [QuotaType; 4] = [
        QuotaType::Produce,
        QuotaType::Fetch,
        QuotaType::Request,
        QuotaType::ControllerMutation,
    ];

    /// The type of `ClientQuotaType.ordinal()`.
    pub fn from_ordinal(ordinal: i32) -> Option<QuotaType> {
        usize::try_from(ordinal)
            .ok()
            .and_then(|i| Self::ALL.get(i).copied())
    }

    /// The engine key Kafka's metadata sets for this type.
    pub fn key(self) -> QuotaKey {
        match self {
            QuotaType::Produce => QuotaKey::PRODUCER_BROKER_BPS,
            QuotaType::Fetch => QuotaKey::CONSUMER_BROKER_BPS,
            QuotaType::Request => QuotaKey::REQUEST_PERCENTAGE,
            QuotaType::ControllerMutation => QuotaKey::CONTROLLER_MUTATION_RATE,
        }
    }

    /// Every key of the type: the native one first, then the units only kquota's log holds.
    pub fn keys(self) -> &'static [QuotaKey] {
        match self {
            QuotaType::Produce => &[
                QuotaKey::PRODUCER_BROKER_BPS,
                QuotaKey::PRODUCER_BPS,
                QuotaKey::PRODUCER_SHARES,
            ],
            QuotaType::Fetch => &[
                QuotaKey::CONSUMER_BROKER_BPS,
                QuotaKey::CONSUMER_BPS,
                QuotaKey::CONSUMER_SHARES,
            ],
            QuotaType::Request => &[QuotaKey::REQUEST_PERCENTAGE],
            QuotaType::ControllerMutation => &[QuotaKey::CONTROLLER_MUTATION_RATE],
        }
    }

    /// The type's `bps` key, for the byte rates.
    pub fn bps_key(self) -> Option<QuotaKey> {
        match self {
            QuotaType::Produce => Some(QuotaKey::PRODUCER_BPS),
            QuotaType::Fetch => Some(QuotaKey::CONSUMER_BPS),
            _ => None,
        }
    }
}

/// Who shares a bucket, as Kafka's metric tags: which of the two tags carry the name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tags {
    /// `{user=U, client-id=C}`: one bucket per (user, client-id).
    UserClient = 0,
    /// `{user=U, client-id=""}`: all of a user's clients together.
    User = 1,
    /// `{user="", client-id=C}`: every user of a client-id together (and Kafka's answer when nothing
    /// applies).
    Client = 2,
}

/// `ClientQuotaManager`'s shape bits (its `quotaTypesEnabled`): which shapes of entity configure a
/// type. `CUSTOM` makes the Java half ask for every answer.
pub mod shapes {
    /// `{client-id}` entities configure the type.
    pub const CLIENT: u32 = 1;
    /// `{user}` entities.
    pub const USER: u32 = 2;
    /// `{user, client-id}` entities.
    pub const USER_CLIENT: u32 = 4;
    /// Answers come from the engine, whatever is configured.
    pub const CUSTOM: u32 = 8;
}

/// An entity component as Kafka hands it to `updateQuota`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part<'a> {
    /// The entity has no such component.
    Absent,
    /// The default (`<default>`).
    Default,
    /// A name (an engine name: a user's is sanitized).
    Named(&'a str),
}

impl Part<'_> {
    fn name(self) -> Option<Result<EntityName, String>> {
        match self {
            Part::Absent => None,
            Part::Default => Some(Ok(EntityName::Default)),
            Part::Named(n) => Some(EntityName::named(n).map_err(|e| e.to_string())),
        }
    }
}

/// The engine behind one callback.
#[derive(Debug)]
pub struct Callback {
    engine: Arc<Engine>,
    policy: SubQuotaPolicy,
    sources: Sources,
    parts: Parts,
    /// Bit `1 << ordinal` for each type with a unit of kquota's log configured anywhere, worked out
    /// after every change so that the per-request answers read one atomic, not the engine's shapes.
    units: AtomicU8,
}

/// The tags of a bucket as an owner (`None` for two empty tags).
pub fn owner_of(user_tag: &str, client_tag: &str) -> Option<BucketOwner> {
    match (user_tag.is_empty(), client_tag.is_empty()) {
        (true, true) => None,
        (false, false) => Some(BucketOwner::UserClient(
            Arc::from(user_tag),
            Arc::from(client_tag),
        )),
        (false, true) => Some(BucketOwner::User(Arc::from(user_tag))),
        (true, false) => Some(BucketOwner::ClientId(Arc::from(client_tag))),
    }
}

/// A bucket's limit and, for a part of a cluster-wide one, what it is a part of and why.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BucketLimit {
    /// The limit Kafka meters the bucket against.
    pub limit: f64,
    /// With a `bps` quota the limit comes from: the cluster-wide value and how the part was taken.
    pub part_of: Option<(f64, PartView)>,
}

/// The tags of a level's bucket.
fn tags_of(level: Level) -> Tags {
    match level.bucket_scope() {
        BucketScope::UserClient => Tags::UserClient,
        BucketScope::User => Tags::User,
        BucketScope::ClientId => Tags::Client,
    }
}

/// Kafka's shape bits of the shapes that configure a key.
fn mask_of(shapes: Shapes) -> u32 {
    (u32::from(shapes.user_client) * shapes::USER_CLIENT)
        | (u32::from(shapes.user) * shapes::USER)
        | (u32::from(shapes.client) * shapes::CLIENT)
}

impl Callback {
    /// An empty callback under `policy`.
    pub fn new(policy: SubQuotaPolicy) -> Callback {
        let engine = Engine::builder()
            .policy(policy)
            .build()
            .expect("the engine's defaults with a policy are valid");
        Callback {
            engine: Arc::new(engine),
            policy,
            sources: Sources::default(),
            parts: Parts::default(),
            units: AtomicU8::new(0),
        }
    }

    /// The engine the answers come from: Kafka's metadata and kquota's log together.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The inputs of this broker's parts of cluster-wide limits.
    pub fn parts(&self) -> &Parts {
        &self.parts
    }

    /// The broker now follows kquota's configuration log through `log`, an engine the log
    /// replays into: its entities join Kafka's, Kafka's winning where both set an entity's key.
    pub fn attach_log(&self, log: Arc<Engine>) {
        self.sources.attach(&self.engine, log);
        self.refresh_units();
    }

    /// The log's engine changed `entity`.
    pub fn log_changed(&self, entity: &Entity) {
        self.sources.log_changed(&self.engine, entity);
        self.refresh_units();
    }

    /// Works out again which types have units of kquota's log (after a change).
    fn refresh_units(&self) {
        let mut bits = 0u8;
        for (i, ty) in QuotaType::ALL.iter().enumerate() {
            let configured = ty.keys()[1..].iter().any(|&k| self.configures(k));
            bits |= u8::from(configured) << i;
        }
        self.units.store(bits, Ordering::Release);
    }

    /// Whether some entity configures `key`.
    pub fn configures(&self, key: QuotaKey) -> bool {
        let s = self.engine.shapes(key);
        s.user_client || s.user || s.client
    }

    /// How many (entity, key) pairs the engine holds from each source: (Kafka's metadata,
    /// kquota's log).
    pub fn source_counts(&self) -> (usize, usize) {
        self.sources.counts()
    }

    /// Whether kquota's log configures a unit of `ty` other than Kafka's anywhere: the type is
    /// then answered by the engine's resolution ([`Callback::unit_tags`]).
    #[inline]
    fn has_units(&self, ty: QuotaType) -> bool {
        self.units.load(Ordering::Acquire) & (1 << ty as u8) != 0
    }

    /// The policy.
    pub fn policy(&self) -> SubQuotaPolicy {
        self.policy
    }

    /// The shape bits of `ty` ([`shapes`]): the Java half's shortcut, which needs no call here.
    pub fn mask(&self, ty: QuotaType) -> u32 {
        match self.policy {
            SubQuotaPolicy::Kafka if !self.has_units(ty) => mask_of(self.engine.shapes(ty.key())),
            _ => shapes::CUSTOM,
        }
    }

    /// `updateQuota`: `entity` now has `value` for `ty`. Returns the type's new shape bits, or why
    /// the change was refused (the configuration is then unchanged).
    pub fn update(
        &self,
        ty: QuotaType,
        user: Part<'_>,
        client: Part<'_>,
        value: f64,
    ) -> Result<u32, String> {
        self.change(ty, user, client, Some(value))
    }

    /// `removeQuota`: `entity` no longer has a quota of type `ty`. Returns the new shape bits.
    pub fn remove(&self, ty: QuotaType, user: Part<'_>, client: Part<'_>) -> Result<u32, String> {
        self.change(ty, user, client, None)
    }

    fn change(
        &self,
        ty: QuotaType,
        user: Part<'_>,
        client: Part<'_>,
        value: Option<f64>,
    ) -> Result<u32, String> {
        let entity = match (user.name().transpose()?, client.name().transpose()?) {
            (Some(u), Some(c)) => Entity::UserClient(u, c),
            (Some(u), None) => Entity::User(u),
            (None, Some(c)) => Entity::ClientId(c),
            (None, None) => return Err("an entity with neither a user nor a client-id".into()),
        };
        self.sources.kafka(&self.engine, &entity, ty.key(), value)?;
        self.refresh_units();
        Ok(self.mask(ty))
    }

    /// `quotaMetricTags` for (sanitized user, client-id).
    #[inline]
    pub fn tags(&self, ty: QuotaType, user: &str, client_id: &str) -> Tags {
        let key = ty.key();
        if self.has_units(ty) {
            return self.unit_tags(ty, user, client_id);
        }
        if self.policy == SubQuotaPolicy::Kip55 {
            return match self.engine.resolve(user, client_id).get(key) {
                Some(q) => tags_of(q.level),
                None => Tags::Client,
            };
        }
        // The shapes and the lookups from one snapshot, so that a change between them cannot mix
        // two configurations into an answer neither gives.
        let levels = self.engine.levels(user, client_id, key);
        match mask_of(levels.shapes) {
            0 | shapes::CLIENT => Tags::Client,
            shapes::USER => Tags::User,
            shapes::USER_CLIENT => Tags::UserClient,
            _ => {
                // DefaultQuotaCallback's walk: the first level configured, each by exact lookup.
                match levels.values.iter().position(Option::is_some) {
                    Some(0 | 1 | 3 | 4) => Tags::UserClient,
                    Some(2 | 5) => Tags::User,
                    _ => Tags::Client,
                }
            }
        }
    }

    /// `quotaLimit` for a bucket's tags (the user tag sanitized, `""` for a tag that is not set), or
    /// `None` where Kafka's default has no quota.
    #[inline]
    pub fn limit(&self, ty: QuotaType, user_tag: &str, client_tag: &str) -> Option<f64> {
        if self.has_units(ty) {
            return self.bucket_limit(ty, user_tag, client_tag).map(|b| b.limit);
        }
        let key = ty.key();
        let first = |levels: Levels, of: &[usize]| of.iter().find_map(|&i| levels.values[i]);
        match (user_tag.is_empty(), client_tag.is_empty()) {
            (true, true) => None,
            (false, false) => {
                if self.policy == SubQuotaPolicy::Kip55 {
                    // A sub-quota, held to its total where a mirrored state breaks the rule.
                    if let Some(q) = self.engine.resolve(user_tag, client_tag).get(key) {
                        if q.level.bucket_scope() == Level::UserClient.bucket_scope() {
                            return Some(q.limit);
                        }
                    }
                }
                first(self.engine.levels(user_tag, client_tag, key), &[0, 1, 3, 4])
            }
            (false, true) => match self.policy {
                // The engine resolves an empty client-id to levels 3 and 6 only, with the remainder.
                SubQuotaPolicy::Kip55 => {
                    self.engine.resolve(user_tag, "").get(key).map(|q| q.limit)
                }
                SubQuotaPolicy::Kafka => first(self.engine.levels(user_tag, "", key), &[2, 5]),
            },
            (true, false) => first(self.engine.levels("", client_tag, key), &[6, 7]),
        }
    }

    /// The tags of a type with units: the bucket of the most specific level any of its units
    /// resolves to (Kafka's "nothing applies" when none does).
    fn unit_tags(&self, ty: QuotaType, user: &str, client_id: &str) -> Tags {
        let resolved = self.engine.resolve(user, client_id);
        ty.keys()
            .iter()
            .filter_map(|&k| resolved.get(k))
            .map(|q| q.level)
            .min()
            .map_or(Tags::Client, tags_of)
    }

    /// The quotas of `ty` that configure the bucket of these tags: of each key, the effective
    /// quota whose level gives this bucket.
    fn bucket_quotas(&self, ty: QuotaType, user_tag: &str, client_tag: &str) -> Vec<Quota> {
        let keys = ty.keys().iter().copied();
        match (user_tag.is_empty(), client_tag.is_empty()) {
            (true, true) => Vec::new(),
            (false, client_empty) => {
                // An empty client-id resolves to the user levels only (3 and 6), as in Kafka.
                let resolved = self.engine.resolve(user_tag, client_tag);
                let want = if client_empty {
                    Tags::User
                } else {
                    Tags::UserClient
                };
                keys.filter_map(|k| resolved.get(k))
                    .filter(|q| tags_of(q.level) == want)
                    .collect()
            }
            (true, false) => keys
                .filter_map(|k| {
                    let levels = self.engine.levels("", client_tag, k);
                    let (i, v) = (6..8).find_map(|i| levels.values[i].map(|v| (i, v)))?;
                    let level = if i == 6 {
                        Level::ClientId
                    } else {
                        Level::DefaultClientId
                    };
                    Some(Quota {
                        key: k,
                        limit: v,
                        level,
                    })
                })
                .collect(),
        }
    }

    /// The limit of a bucket of a type with units: the smallest of its units' limits, a `bps`
    /// one as this broker's part; `None` if no unit this broker enforces configures it (`shares`
    /// are recorded and described, not enforced inside a broker).
    pub fn bucket_limit(
        &self,
        ty: QuotaType,
        user_tag: &str,
        client_tag: &str,
    ) -> Option<BucketLimit> {
        let mut best: Option<BucketLimit> = None;
        for q in self.bucket_quotas(ty, user_tag, client_tag) {
            let candidate = match q.key.unit() {
                Unit::Shares => continue,
                Unit::Bps => {
                    let owner = owner_of(user_tag, client_tag)?;
                    let live = self.engine.broker_view().broker_count;
                    let (part, view) = self.parts.part(q.key, &owner, q.limit, live);
                    BucketLimit {
                        limit: part,
                        part_of: Some((q.limit, view)),
                    }
                }
                _ => BucketLimit {
                    limit: q.limit,
                    part_of: None,
                },
            };
            if best.is_none_or(|b| candidate.limit < b.limit) {
                best = Some(candidate);
            }
        }
        best
    }

    /// Why (sanitized user, client-id) gets each of its limits: per type, the bucket and limit the
    /// callback answers, the entry that matched and the entries it overrode.
    pub fn explain(&self, user: &str, client_id: &str) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "policy {}; {} configured entities; user {:?} (sanitized, as Kafka tags it), client-id {:?}",
            self.policy,
            self.engine.entity_count(),
            crate::names::display(user),
            crate::names::display(client_id),
        );
        let described = self.engine.describe(Some(user), Some(client_id), true);
        for ty in QuotaType::ALL {
            let key = ty.key();
            let tags = self.tags(ty, user, client_id);
            let (user_tag, client_tag) = match tags {
                Tags::UserClient => (user, client_id),
                Tags::User => (user, ""),
                Tags::Client => ("", client_id),
            };
            let limit = self.limit(ty, user_tag, client_tag);
            let _ = writeln!(
                out,
                "{key}: bucket {{user={:?}, client-id={:?}}}, limit {}",
                crate::names::display(user_tag),
                crate::names::display(client_tag),
                limit.map_or(
                    "none (Kafka meters against Long.MAX_VALUE)".to_owned(),
                    |l| l.to_string()
                ),
            );
            if let Some((whole, view)) = self
                .has_units(ty)
                .then(|| self.bucket_limit(ty, user_tag, client_tag))
                .flatten()
                .and_then(|b| b.part_of)
            {
                let _ = writeln!(
                    out,
                    "  this broker's part of the cluster-wide {whole} bytes/s, {}",
                    match view {
                        PartView::SharedUsage => "by what each broker serves".to_owned(),
                        PartView::Leadership { led, total } =>
                            format!("by partition leadership ({led} of {total} partitions)"),
                        PartView::LiveCount { brokers } =>
                            format!("divided by the {brokers} live brokers"),
                    }
                );
            }
            for d in described
                .iter()
                .filter(|d| d.key != key && d.key.quota_type() == key.quota_type())
            {
                let _ = writeln!(
                    out,
                    "  {} matched {} = {} (level {}){}",
                    d.key,
                    show(&d.entity),
                    d.value,
                    d.level.number(),
                    if d.key.unit() == Unit::Shares {
                        ": shares are not enforced inside a broker"
                    } else {
                        ""
                    }
                );
            }
            match described.iter().find(|d| d.key == key) {
                Some(d) => {
                    let _ = writeln!(
                        out,
                        "  matched {} = {} (level {})",
                        show(&d.entity),
                        d.value,
                        d.level.number()
                    );
                    for o in &d.overridden {
                        let _ = writeln!(
                            out,
                            "  overrides {} = {} (level {})",
                            show(&o.entity),
                            o.value,
                            o.level.number()
                        );
                    }
                }
                None if !described
                    .iter()
                    .any(|d| d.key.quota_type() == key.quota_type()) =>
                {
                    let _ = writeln!(out, "  no entry configures it");
                }
                None => {}
            }
        }
        out
    }
}

/// An entity as an operator reads it.
fn show(entity: &Entity) -> String {
    crate::names::display(&entity.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use Part::{Absent, Default as D, Named as N};
    use QuotaType::*;

    fn kafka() -> Callback {
        Callback::new(SubQuotaPolicy::Kafka)
    }

    #[test]
    fn one_shape_takes_kafkas_shortcut_tags_whatever_matches() {
        let cb = kafka();
        assert_eq!(cb.tags(Produce, "u", "c"), Tags::Client);
        assert_eq!(cb.update(Produce, N("u"), Absent, 100.0), Ok(shapes::USER));
        // Even a user with no quota of its own is tagged by user: Kafka's shortcut.
        assert_eq!(cb.tags(Produce, "other", "c"), Tags::User);
        assert_eq!(cb.limit(Produce, "other", ""), None);
        assert_eq!(cb.limit(Produce, "u", ""), Some(100.0));
        // Other types are untouched.
        assert_eq!(cb.mask(Fetch), 0);
        assert_eq!(cb.remove(Produce, N("u"), Absent), Ok(0));
        assert_eq!(cb.tags(Produce, "u", "c"), Tags::Client);
    }

    #[test]
    fn counts_move_only_when_an_entity_starts_or_stops() {
        let cb = kafka();
        cb.update(Fetch, Absent, N("c"), 1.0).unwrap();
        cb.update(Fetch, Absent, N("c"), 2.0).unwrap();
        assert_eq!(cb.remove(Fetch, Absent, N("x")), Ok(shapes::CLIENT));
        assert_eq!(cb.remove(Fetch, Absent, N("c")), Ok(0));
    }

    #[test]
    fn several_shapes_walk_the_six_lookups() {
        let cb = kafka();
        cb.update(Produce, D, Absent, 600.0).unwrap();
        cb.update(Produce, Absent, N("c"), 700.0).unwrap();
        assert_eq!(cb.mask(Produce), shapes::USER | shapes::CLIENT);
        assert_eq!(cb.tags(Produce, "u", "c"), Tags::User);
        assert_eq!(cb.limit(Produce, "u", ""), Some(600.0));
        cb.update(Produce, D, N("c"), 400.0).unwrap();
        assert_eq!(cb.tags(Produce, "u", "c"), Tags::UserClient);
        assert_eq!(cb.limit(Produce, "u", "c"), Some(400.0));
        // Kafka's quirk: an empty user still finds {user=<default>}, and its tags find no quota.
        cb.remove(Produce, D, N("c")).unwrap();
        assert_eq!(cb.tags(Produce, "", "c"), Tags::User);
        assert_eq!(cb.limit(Produce, "", ""), None);
    }

    #[test]
    fn kafka_accepts_what_the_engine_alone_would_refuse() {
        let cb = kafka();
        cb.update(Produce, N("u"), Absent, 5.000_000_1).unwrap();
        assert_eq!(cb.limit(Produce, "u", ""), Some(5.000_000_1));
        cb.update(Request, N("u"), Absent, f64::NAN).unwrap();
        assert!(cb.limit(Request, "u", "").unwrap().is_nan());
        assert!(cb.update(Produce, N("u"), Absent, 0.0).is_err());
        assert!(cb.update(Produce, N(""), Absent, 1.0).is_err());
        assert_eq!(cb.limit(Produce, "u", ""), Some(5.000_000_1));
    }

    #[test]
    fn kip55_carves_sub_quotas_from_the_total() {
        let cb = Callback::new(SubQuotaPolicy::Kip55);
        cb.update(Produce, N("u"), Absent, 1_500.0).unwrap();
        cb.update(Produce, N("u"), N("a"), 500.0).unwrap();
        assert_eq!(cb.mask(Produce), shapes::CUSTOM);
        assert_eq!(cb.tags(Produce, "u", "a"), Tags::UserClient);
        assert_eq!(cb.limit(Produce, "u", "a"), Some(500.0));
        assert_eq!(cb.tags(Produce, "u", "b"), Tags::User);
        assert_eq!(cb.limit(Produce, "u", ""), Some(1_000.0));
        // Kafka's controller lets a sub-quota above the total through: held to the total, and the
        // others get nothing.
        cb.update(Produce, N("u"), N("a"), 2_000.0).unwrap();
        assert_eq!(cb.limit(Produce, "u", "a"), Some(1_500.0));
        assert_eq!(cb.limit(Produce, "u", ""), Some(0.0));
    }

    #[test]
    fn explain_names_the_match_and_what_it_overrides() {
        let cb = kafka();
        cb.update(Produce, N("u"), Absent, 100.0).unwrap();
        cb.update(Produce, D, Absent, 200.0).unwrap();
        let text = cb.explain("u", "c");
        assert!(text.contains("matched {user=u} = 100 (level 3)"), "{text}");
        assert!(
            text.contains("overrides {user=<default>} = 200 (level 6)"),
            "{text}"
        );
        assert!(text.contains("limit 100"), "{text}");
    }

    /// A callback whose configuration log sets `entries`.
    fn with_log(policy: SubQuotaPolicy, entries: &[(Entity, QuotaKey, f64)]) -> Callback {
        let cb = Callback::new(policy);
        let log = Arc::new(Engine::builder().policy(policy).build().unwrap());
        for (e, k, v) in entries {
            let results = log.mirror(&[kquota::Alteration::new(e).set(*k, *v)]);
            assert!(results.iter().all(|r| r.error.is_none()));
        }
        cb.attach_log(log);
        cb
    }

    fn client(name: &str) -> Entity {
        Entity::ClientId(EntityName::named(name).unwrap())
    }

    #[test]
    fn a_bps_limit_from_the_log_is_this_brokers_part() {
        let cb = with_log(
            SubQuotaPolicy::Kafka,
            &[(client("c"), QuotaKey::PRODUCER_BPS, 3_000_000.0)],
        );
        assert_eq!(cb.mask(Produce), shapes::CUSTOM);
        // The other types keep Kafka's shortcut.
        assert_eq!(cb.mask(Fetch), 0);
        assert_eq!(cb.tags(Produce, "u", "c"), Tags::Client);
        assert_eq!(cb.limit(Produce, "", "c"), Some(3_000_000.0));
        cb.parts().set_leadership(1, 3);
        assert_eq!(cb.limit(Produce, "", "c"), Some(1_000_000.0));
        let text = cb.explain("u", "c");
        assert!(text.contains("limit 1000000"), "{text}");
        assert!(
            text.contains(
                "part of the cluster-wide 3000000 bytes/s, by partition leadership (1 of 3"
            ),
            "{text}"
        );
        assert!(
            text.contains("producer_byte_rate:bps matched {client-id=c}"),
            "{text}"
        );
        // Nobody else is limited.
        assert_eq!(cb.tags(Produce, "u", "other"), Tags::Client);
        assert_eq!(cb.limit(Produce, "", "other"), None);
    }

    #[test]
    fn units_of_one_type_meter_the_most_specific_bucket_against_the_smallest_limit() {
        let cb = with_log(
            SubQuotaPolicy::Kafka,
            &[
                (client("c"), QuotaKey::PRODUCER_BPS, 3_000_000.0),
                (
                    Entity::User(EntityName::named("u").unwrap()),
                    QuotaKey::PRODUCER_BPS,
                    2_000_000.0,
                ),
            ],
        );
        // {user=u} (level 3) comes before {client-id=c} (level 7).
        assert_eq!(cb.tags(Produce, "u", "c"), Tags::User);
        assert_eq!(cb.limit(Produce, "u", ""), Some(2_000_000.0));
        // Kafka's own quota for the same bucket, smaller: it binds.
        cb.update(Produce, N("u"), Absent, 500_000.0).unwrap();
        assert_eq!(cb.limit(Produce, "u", ""), Some(500_000.0));
        cb.update(Produce, N("u"), Absent, 5_000_000.0).unwrap();
        assert_eq!(cb.limit(Produce, "u", ""), Some(2_000_000.0));
    }

    #[test]
    fn shares_are_described_but_not_enforced_inside_a_broker() {
        let cb = with_log(
            SubQuotaPolicy::Kip55,
            &[(client("s"), QuotaKey::PRODUCER_SHARES, 3.0)],
        );
        assert_eq!(cb.tags(Produce, "u", "s"), Tags::Client);
        assert_eq!(cb.limit(Produce, "", "s"), None);
        let text = cb.explain("u", "s");
        assert!(
            text.contains("shares are not enforced inside a broker"),
            "{text}"
        );
    }

    #[test]
    fn kafkas_value_wins_over_the_logs_for_the_same_entity_and_key() {
        let cb = with_log(
            SubQuotaPolicy::Kafka,
            &[(client("c"), QuotaKey::PRODUCER_BROKER_BPS, 2_000.0)],
        );
        assert_eq!(cb.limit(Produce, "", "c"), Some(2_000.0));
        cb.update(Produce, Absent, N("c"), 1_000.0).unwrap();
        assert_eq!(cb.limit(Produce, "", "c"), Some(1_000.0));
        cb.remove(Produce, Absent, N("c")).unwrap();
        assert_eq!(cb.limit(Produce, "", "c"), Some(2_000.0));
    }
}
