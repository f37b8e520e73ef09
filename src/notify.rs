//! Change notifications: what a subscriber is told after a change becomes visible.

use crate::entity::Entity;

/// One changed entity, emitted after the change is visible to readers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeNotification {
    /// The commit this change belongs to; commits are numbered from 1 in the order they became visible.
    pub seq: u64,
    /// The entity whose configuration changed.
    pub entity: Entity,
}

/// The seeds' form: `{"version":1,"entity_type":"users","entity_name":"user2/clients/clientA"}`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct NotificationV1 {
    /// Always 1.
    pub version: u8,
    /// The first component's storage directory: `users`, `clients` or `ips`.
    pub entity_type: String,
    /// The rest of the storage path.
    pub entity_name: String,
}

/// Kafka's later form: `{"version":2,"entity_path":"users/user2/clients/clientA"}`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct NotificationV2 {
    /// Always 2.
    pub version: u8,
    /// The entity's storage path.
    pub entity_path: String,
}

impl ChangeNotification {
    /// The version-1 form.
    pub fn v1(&self) -> NotificationV1 {
        let path = self.entity.storage_path();
        let (entity_type, entity_name) = path.split_once('/').unwrap_or((path.as_str(), ""));
        NotificationV1 {
            version: 1,
            entity_type: entity_type.to_owned(),
            entity_name: entity_name.to_owned(),
        }
    }

    /// The version-2 form.
    pub fn v2(&self) -> NotificationV2 {
        NotificationV2 {
            version: 2,
            entity_path: self.entity.storage_path(),
        }
    }

    /// The version-1 form as JSON.
    #[cfg(feature = "serde")]
    pub fn v1_json(&self) -> String {
        serde_json::to_string(&self.v1()).expect("plain strings always serialize")
    }

    /// The version-2 form as JSON.
    #[cfg(feature = "serde")]
    pub fn v2_json(&self) -> String {
        serde_json::to_string(&self.v2()).expect("plain strings always serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::EntityName;

    fn n(s: &str) -> EntityName {
        EntityName::named(s).unwrap()
    }

    #[cfg(feature = "serde")]
    #[test]
    fn seed_forms() {
        let sub = ChangeNotification {
            seq: 1,
            entity: Entity::UserClient(n("user2"), n("clientA")),
        };
        assert_eq!(
            sub.v1_json(),
            r#"{"version":1,"entity_type":"users","entity_name":"user2/clients/clientA"}"#
        );
        assert_eq!(
            sub.v2_json(),
            r#"{"version":2,"entity_path":"users/user2/clients/clientA"}"#
        );
        let user = ChangeNotification {
            seq: 2,
            entity: Entity::User(n("user1")),
        };
        assert_eq!(
            user.v1_json(),
            r#"{"version":1,"entity_type":"users","entity_name":"user1"}"#
        );
    }

    #[test]
    fn names_are_sanitized_and_defaults_spelled() {
        let e = ChangeNotification {
            seq: 1,
            entity: Entity::UserClient(EntityName::Default, n("a b*")),
        };
        assert_eq!(e.v2().entity_path, "users/<default>/clients/a%20b%2A");
        let c = ChangeNotification {
            seq: 1,
            entity: Entity::ClientId(EntityName::Default),
        };
        assert_eq!(c.v1().entity_type, "clients");
        assert_eq!(c.v1().entity_name, "<default>");
    }
}
