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

use kquota::{
    Alteration, Engine, Entity, EntityName, Level, Levels, QuotaKey, Shapes, SubQuotaPolicy,
};

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
    engine: Engine,
    policy: SubQuotaPolicy,
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
        Callback { engine, policy }
    }

    /// The engine (for explanations and counts).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The policy.
    pub fn policy(&self) -> SubQuotaPolicy {
        self.policy
    }

    /// The shape bits of `ty` ([`shapes`]): the Java half's shortcut, which needs no call here.
    pub fn mask(&self, ty: QuotaType) -> u32 {
        match self.policy {
            SubQuotaPolicy::Kafka => mask_of(self.engine.shapes(ty.key())),
            SubQuotaPolicy::Kip55 => shapes::CUSTOM,
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
        let alteration = Alteration::new(&entity);
        let alteration = match value {
            Some(v) => alteration.set(ty.key(), v),
            None => alteration.remove(ty.key()),
        };
        let results = self.engine.mirror(std::slice::from_ref(&alteration));
        if let Some(error) = results.into_iter().find_map(|r| r.error) {
            return Err(format!("{entity}: {}", error.message));
        }
        Ok(self.mask(ty))
    }

    /// `quotaMetricTags` for (sanitized user, client-id).
    #[inline]
    pub fn tags(&self, ty: QuotaType, user: &str, client_id: &str) -> Tags {
        let key = ty.key();
        if self.policy == SubQuotaPolicy::Kip55 {
            return match self.engine.resolve(user, client_id).get(key) {
                Some(q) => match q.level {
                    Level::UserClient
                    | Level::UserDefaultClient
                    | Level::DefaultUserClient
                    | Level::DefaultUserDefaultClient => Tags::UserClient,
                    Level::User | Level::DefaultUser => Tags::User,
                    _ => Tags::Client,
                },
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
                None => {
                    let _ = writeln!(out, "  no entry configures it");
                }
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
}
