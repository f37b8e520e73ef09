//! The entity model: who a quota is configured for.
//!
//! An entity has one or two components (`{user}`, `{client-id}`, `{user, client-id}` or `{ip}`), each
//! either a name or the default. The combinations are enforced by [`Entity`]'s shape, so a value of that
//! type is always one Kafka accepts.

use smol_str::SmolStr;
use std::borrow::Borrow;
use std::fmt;

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::error::ParseError;
use crate::scope::BucketScope;

/// The kind of an entity component.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntityType {
    /// An authenticated principal's name (`user`).
    User,
    /// A client's `client.id` (`client-id`).
    ClientId,
    /// A client's IP address (`ip`); only for `connection_creation_rate`.
    Ip,
}

impl EntityType {
    /// All entity types, in printing order.
    pub const ALL: [EntityType; 3] = [EntityType::User, EntityType::ClientId, EntityType::Ip];

    /// The wire and CLI spelling: `user`, `client-id` or `ip`.
    pub fn as_str(self) -> &'static str {
        match self {
            EntityType::User => "user",
            EntityType::ClientId => "client-id",
            EntityType::Ip => "ip",
        }
    }

    /// The storage directory for this type: `users`, `clients` or `ips`.
    pub fn storage_dir(self) -> &'static str {
        match self {
            EntityType::User => "users",
            EntityType::ClientId => "clients",
            EntityType::Ip => "ips",
        }
    }
}

impl std::str::FromStr for EntityType {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "user" => Ok(EntityType::User),
            "client-id" => Ok(EntityType::ClientId),
            "ip" => Ok(EntityType::Ip),
            _ => Err(ParseError::UnknownEntityType(s.to_owned())),
        }
    }
}

impl fmt::Display for EntityType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A non-empty entity name. Names are opaque UTF-8: `<default>` spelled out is an ordinary name.
///
/// Names of up to 23 bytes are stored inline (no allocation, and a clone is a copy); longer ones are
/// shared, and cloning them is a reference-count increment.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(SmolStr);

impl Name {
    /// Wraps `name`, rejecting the empty string.
    pub fn new(name: &str) -> Result<Name, ParseError> {
        if name.is_empty() {
            Err(ParseError::EmptyName)
        } else {
            Ok(Name(SmolStr::new(name)))
        }
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The name in Kafka's sanitized form (see [`sanitize`]).
    pub fn sanitized(&self) -> String {
        sanitize(self.0.as_str())
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.0.as_str(), f)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

/// One component's name: a [`Name`] or the default (`null` on the wire, `<default>` when printed).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntityName {
    /// A specific name.
    Named(Name),
    /// The default, which applies to every name without an entry of its own.
    Default,
}

impl EntityName {
    /// A specific name; rejects the empty string.
    pub fn named(name: &str) -> Result<EntityName, ParseError> {
        Name::new(name).map(EntityName::Named)
    }

    /// The wire form: `None` for the default.
    pub fn from_wire(name: Option<&str>) -> Result<EntityName, ParseError> {
        match name {
            None => Ok(EntityName::Default),
            Some(name) => EntityName::named(name),
        }
    }

    /// The name, or `None` for the default (the wire form).
    pub fn as_option(&self) -> Option<&str> {
        match self {
            EntityName::Named(name) => Some(name.as_str()),
            EntityName::Default => None,
        }
    }

    /// Whether this is the default.
    pub fn is_default(&self) -> bool {
        matches!(self, EntityName::Default)
    }

    /// The name as printed in storage paths and notifications: sanitized, `<default>` for the default.
    pub fn path_segment(&self) -> String {
        match self {
            EntityName::Named(name) => name.sanitized(),
            EntityName::Default => DEFAULT_DISPLAY.to_owned(),
        }
    }
}

/// How the default is printed.
pub const DEFAULT_DISPLAY: &str = "<default>";

impl fmt::Display for EntityName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntityName::Named(name) => f.write_str(name.as_str()),
            EntityName::Default => f.write_str(DEFAULT_DISPLAY),
        }
    }
}

/// A quota entity: one of the four shapes Kafka allows.
///
/// Entities order by user, then client-id, then ip; for each, a name sorts before the default, and the
/// default before an absent component. That is the order listings print in.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Entity {
    /// `{user=U}`.
    User(EntityName),
    /// `{user=U, client-id=C}`.
    UserClient(EntityName, EntityName),
    /// `{client-id=C}`.
    ClientId(EntityName),
    /// `{ip=X}`.
    Ip(EntityName),
}

impl Entity {
    /// The user component, if the entity has one.
    pub fn user(&self) -> Option<&EntityName> {
        match self {
            Entity::User(u) | Entity::UserClient(u, _) => Some(u),
            _ => None,
        }
    }

    /// The client-id component, if the entity has one.
    pub fn client_id(&self) -> Option<&EntityName> {
        match self {
            Entity::ClientId(c) | Entity::UserClient(_, c) => Some(c),
            _ => None,
        }
    }

    /// The ip component, if the entity has one.
    pub fn ip(&self) -> Option<&EntityName> {
        match self {
            Entity::Ip(ip) => Some(ip),
            _ => None,
        }
    }

    /// The components in printing order (user before client-id).
    pub fn components(&self) -> impl Iterator<Item = (EntityType, &EntityName)> {
        let user = self.user().map(|u| (EntityType::User, u));
        let client = self.client_id().map(|c| (EntityType::ClientId, c));
        let ip = self.ip().map(|ip| (EntityType::Ip, ip));
        user.into_iter().chain(client).chain(ip)
    }

    /// Whether this is an `{ip}` entity.
    pub fn is_ip(&self) -> bool {
        matches!(self, Entity::Ip(_))
    }

    /// The precedence level this entity occupies for (user, client-id) resolution; `None` for ip entities.
    pub fn level(&self) -> Option<Level> {
        use EntityName::{Default as D, Named as N};
        Some(match self {
            Entity::UserClient(N(_), N(_)) => Level::UserClient,
            Entity::UserClient(N(_), D) => Level::UserDefaultClient,
            Entity::User(N(_)) => Level::User,
            Entity::UserClient(D, N(_)) => Level::DefaultUserClient,
            Entity::UserClient(D, D) => Level::DefaultUserDefaultClient,
            Entity::User(D) => Level::DefaultUser,
            Entity::ClientId(N(_)) => Level::ClientId,
            Entity::ClientId(D) => Level::DefaultClientId,
            Entity::Ip(_) => return None,
        })
    }

    /// The storage path: `users/<u>`, `users/<u>/clients/<c>`, `clients/<c>` or `ips/<ip>`, names
    /// sanitized and `<default>` for defaults.
    pub fn storage_path(&self) -> String {
        let mut path = String::new();
        for (ty, name) in self.components() {
            if !path.is_empty() {
                path.push('/');
            }
            path.push_str(ty.storage_dir());
            path.push('/');
            path.push_str(&name.path_segment());
        }
        path
    }

    /// Parses a storage path (see [`Entity::storage_path`]): the inverse of that function.
    pub fn from_storage_path(path: &str) -> Result<Entity, ParseError> {
        let bad = || ParseError::MalformedEscape(path.to_owned());
        let name = |segment: &str| -> Result<EntityName, ParseError> {
            if segment == DEFAULT_DISPLAY {
                Ok(EntityName::Default)
            } else if segment.contains(['%', '+']) {
                EntityName::named(&desanitize(segment)?)
            } else {
                // Nothing escaped: the common case, without an intermediate copy.
                EntityName::named(segment)
            }
        };
        let parts: Vec<&str> = path.split('/').collect();
        match parts.as_slice() {
            ["users", u] => Ok(Entity::User(name(u)?)),
            ["users", u, "clients", c] => Ok(Entity::UserClient(name(u)?, name(c)?)),
            ["clients", c] => Ok(Entity::ClientId(name(c)?)),
            ["ips", ip] => Ok(Entity::Ip(name(ip)?)),
            _ => Err(bad()),
        }
    }

    /// Builds an entity from `(type, name)` pairs as they arrive on the wire (`None` is the default).
    ///
    /// Only checks the shape; the messages Kafka gives for bad shapes are produced by alteration
    /// validation, which calls this after its own checks.
    pub fn from_parts(parts: &[(EntityType, EntityName)]) -> Option<Entity> {
        let mut user = None;
        let mut client = None;
        let mut ip = None;
        for (ty, name) in parts {
            let slot = match ty {
                EntityType::User => &mut user,
                EntityType::ClientId => &mut client,
                EntityType::Ip => &mut ip,
            };
            if slot.replace(name.clone()).is_some() {
                return None;
            }
        }
        match (user, client, ip) {
            (Some(u), None, None) => Some(Entity::User(u)),
            (Some(u), Some(c), None) => Some(Entity::UserClient(u, c)),
            (None, Some(c), None) => Some(Entity::ClientId(c)),
            (None, None, Some(ip)) => Some(Entity::Ip(ip)),
            _ => None,
        }
    }
}

impl Entity {
    fn sort_key(&self) -> [(u8, &str); 3] {
        fn key(name: Option<&EntityName>) -> (u8, &str) {
            match name {
                Some(EntityName::Named(n)) => (0, n.as_str()),
                Some(EntityName::Default) => (1, ""),
                None => (2, ""),
            }
        }
        [key(self.user()), key(self.client_id()), key(self.ip())]
    }
}

impl Ord for Entity {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.sort_key().cmp(&other.sort_key())
    }
}

impl PartialOrd for Entity {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Entity {
    /// `{user=user-one, client-id=my-client}`, `{user=<default>}`, `{ip=10.0.0.1}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (ty, name)) in self.components().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{ty}={name}")?;
        }
        f.write_str("}")
    }
}

/// Kafka's `Sanitizer` keeps only these bytes as they are: `A-Z a-z 0-9 . - _`.
const SANITIZE_SET: &AsciiSet = &NON_ALPHANUMERIC.remove(b'.').remove(b'-').remove(b'_');

/// Encodes a name exactly as Kafka's `Sanitizer.sanitize` does, for storage paths, notifications and
/// metric tags.
///
/// Kafka URL-encodes the UTF-8 bytes and then rewrites `*` to `%2A` and `+` (an encoded space) to `%20`;
/// the net effect is that every byte outside `A-Z a-z 0-9 . - _` becomes `%XX` in upper-case hex.
pub fn sanitize(name: &str) -> String {
    utf8_percent_encode(name, SANITIZE_SET).to_string()
}

/// Decodes a sanitized name exactly as Kafka's `Sanitizer.desanitize` (Java's `URLDecoder`) does: `+` is
/// a space and `%XX` a byte. Malformed `%` sequences and bytes that are not UTF-8 are errors.
pub fn desanitize(sanitized: &str) -> Result<String, ParseError> {
    let bytes = sanitized.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let well_formed = bytes.len() >= i + 3
                && bytes[i + 1].is_ascii_hexdigit()
                && bytes[i + 2].is_ascii_hexdigit();
            if !well_formed {
                return Err(ParseError::MalformedEscape(sanitized.to_owned()));
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    let spaced = sanitized.replace('+', " ");
    percent_decode_str(&spaced)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| ParseError::MalformedEscape(sanitized.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(s: &str) -> EntityName {
        EntityName::named(s).unwrap()
    }

    #[test]
    fn sanitize_matches_kafka() {
        assert_eq!(sanitize("user-one_2.x"), "user-one_2.x");
        assert_eq!(sanitize("a b"), "a%20b");
        assert_eq!(sanitize("a+b"), "a%2Bb");
        assert_eq!(sanitize("a*b"), "a%2Ab");
        assert_eq!(sanitize("a~b"), "a%7Eb");
        assert_eq!(sanitize("<default>"), "%3Cdefault%3E");
        assert_eq!(sanitize("CN=alice,O=org"), "CN%3Dalice%2CO%3Dorg");
        assert_eq!(sanitize("é"), "%C3%A9");
        assert_eq!(sanitize("a/b"), "a%2Fb");
    }

    #[test]
    fn desanitize_inverts_sanitize() {
        for s in ["plain", "a b", "a+b*c~", "<default>", "ünï cødé/☃", "%25"] {
            assert_eq!(desanitize(&sanitize(s)).unwrap(), s);
        }
        // Java's URLDecoder turns '+' into a space.
        assert_eq!(desanitize("a+b").unwrap(), "a b");
    }

    #[test]
    fn desanitize_rejects_malformed_escapes() {
        for bad in ["%", "%2", "%zz", "abc%4", "%C3"] {
            assert!(
                matches!(desanitize(bad), Err(ParseError::MalformedEscape(_))),
                "{bad} should be rejected"
            );
        }
    }

    #[test]
    fn printed_form() {
        let e = Entity::UserClient(EntityName::Default, named("my-client"));
        assert_eq!(e.to_string(), "{user=<default>, client-id=my-client}");
        assert_eq!(
            Entity::User(named("user-one")).to_string(),
            "{user=user-one}"
        );
        assert_eq!(
            Entity::ClientId(EntityName::Default).to_string(),
            "{client-id=<default>}"
        );
        assert_eq!(Entity::Ip(named("10.0.0.1")).to_string(), "{ip=10.0.0.1}");
    }

    #[test]
    fn storage_paths_are_sanitized() {
        let e = Entity::UserClient(named("user 2"), named("<default>"));
        assert_eq!(e.storage_path(), "users/user%202/clients/%3Cdefault%3E");
        let e = Entity::UserClient(EntityName::Default, EntityName::Default);
        assert_eq!(e.storage_path(), "users/<default>/clients/<default>");
        assert_eq!(Entity::Ip(named("::1")).storage_path(), "ips/%3A%3A1");
    }

    #[test]
    fn storage_paths_round_trip() {
        let entities = [
            Entity::UserClient(named("user 2"), named("<default>")),
            Entity::UserClient(EntityName::Default, EntityName::Default),
            Entity::User(named("ü/x")),
            Entity::ClientId(EntityName::Default),
            Entity::Ip(named("::1")),
        ];
        for e in entities {
            assert_eq!(Entity::from_storage_path(&e.storage_path()).unwrap(), e);
        }
        for bad in [
            "",
            "users",
            "users/a/b",
            "groups/a",
            "users/%zz",
            "clients/",
        ] {
            assert!(Entity::from_storage_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn shapes_from_parts() {
        use EntityType::*;
        let u = (User, named("u"));
        let c = (ClientId, EntityName::Default);
        let ip = (Ip, named("1.2.3.4"));
        assert_eq!(
            Entity::from_parts(&[c.clone(), u.clone()]),
            Some(Entity::UserClient(named("u"), EntityName::Default))
        );
        assert_eq!(Entity::from_parts(&[ip.clone(), u.clone()]), None);
        assert_eq!(Entity::from_parts(&[u.clone(), u.clone()]), None);
        assert_eq!(Entity::from_parts(&[]), None);
        assert!(Entity::from_parts(&[ip]).unwrap().is_ip());
    }

    #[test]
    fn levels_follow_the_precedence_table() {
        let d = EntityName::Default;
        let n = named("x");
        let cases = [
            (Entity::UserClient(n.clone(), n.clone()), 1),
            (Entity::UserClient(n.clone(), d.clone()), 2),
            (Entity::User(n.clone()), 3),
            (Entity::UserClient(d.clone(), n.clone()), 4),
            (Entity::UserClient(d.clone(), d.clone()), 5),
            (Entity::User(d.clone()), 6),
            (Entity::ClientId(n.clone()), 7),
            (Entity::ClientId(d.clone()), 8),
        ];
        for (entity, level) in cases {
            assert_eq!(entity.level().unwrap().number(), level, "{entity}");
        }
        assert_eq!(Entity::Ip(d).level(), None);
    }

    #[test]
    fn literal_default_is_a_name() {
        assert_ne!(named("<default>"), EntityName::Default);
        assert!(EntityName::named("").is_err());
    }
}

/// One component of an entity as a request names it: a type and a name (`None` for the default).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntityPart {
    /// `user`, `client-id` or `ip` (anything else is rejected by validation).
    pub entity_type: String,
    /// The name, or `None` for the default.
    pub name: Option<String>,
}

/// A precedence level of (user, client-id) resolution; level 1 is the most specific.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Level {
    /// 1: `{user=u, client-id=c}`.
    UserClient = 1,
    /// 2: `{user=u, client-id=<default>}`.
    UserDefaultClient = 2,
    /// 3: `{user=u}`.
    User = 3,
    /// 4: `{user=<default>, client-id=c}`.
    DefaultUserClient = 4,
    /// 5: `{user=<default>, client-id=<default>}`.
    DefaultUserDefaultClient = 5,
    /// 6: `{user=<default>}`.
    DefaultUser = 6,
    /// 7: `{client-id=c}`.
    ClientId = 7,
    /// 8: `{client-id=<default>}`.
    DefaultClientId = 8,
}

impl Level {
    /// All levels, most specific first.
    pub const ALL: [Level; 8] = [
        Level::UserClient,
        Level::UserDefaultClient,
        Level::User,
        Level::DefaultUserClient,
        Level::DefaultUserDefaultClient,
        Level::DefaultUser,
        Level::ClientId,
        Level::DefaultClientId,
    ];

    /// The level's number, 1 to 8.
    pub fn number(self) -> u8 {
        self as u8
    }

    /// Who shares one rate when a quota comes from this level.
    pub fn bucket_scope(self) -> BucketScope {
        match self {
            Level::UserClient
            | Level::UserDefaultClient
            | Level::DefaultUserClient
            | Level::DefaultUserDefaultClient => BucketScope::UserClient,
            Level::User | Level::DefaultUser => BucketScope::User,
            Level::ClientId | Level::DefaultClientId => BucketScope::ClientId,
        }
    }

    /// The entity this level stands for, for a connection with the given names (`None`: a name with no
    /// entry of its own). Returns `None` where the level needs a name the connection does not have.
    pub fn entity(self, user: Option<&str>, client_id: Option<&str>) -> Option<Entity> {
        let name = |n: Option<&str>| n.and_then(|n| Name::new(n).ok()).map(EntityName::Named);
        let d = || EntityName::Default;
        Some(match self {
            Level::UserClient => Entity::UserClient(name(user)?, name(client_id)?),
            Level::UserDefaultClient => Entity::UserClient(name(user)?, d()),
            Level::User => Entity::User(name(user)?),
            Level::DefaultUserClient => Entity::UserClient(d(), name(client_id)?),
            Level::DefaultUserDefaultClient => Entity::UserClient(d(), d()),
            Level::DefaultUser => Entity::User(d()),
            Level::ClientId => Entity::ClientId(name(client_id)?),
            Level::DefaultClientId => Entity::ClientId(d()),
        })
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.number())
    }
}
