//! Who shares a metered rate: the bucket column of the precedence table. A leaf module, so that both
//! the entity model (a level's scope) and resolution can use it.

/// Who shares one metered rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BucketScope {
    /// One bucket per (user, client-id).
    UserClient,
    /// One bucket per user, shared by all of its clients.
    User,
    /// One bucket per client-id, shared by every user with that client-id.
    ClientId,
}

/// The identity of a bucket: the names that select it (`None` where the scope leaves a name out).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BucketId<'a> {
    /// The user, unless the bucket is shared across users.
    pub user: Option<&'a str>,
    /// The client-id, unless the bucket is shared by all of a user's clients.
    pub client_id: Option<&'a str>,
}

impl BucketScope {
    /// The bucket of the connection `(user, client_id)` under this scope.
    pub fn bucket<'a>(self, user: &'a str, client_id: &'a str) -> BucketId<'a> {
        match self {
            BucketScope::UserClient => BucketId {
                user: Some(user),
                client_id: Some(client_id),
            },
            BucketScope::User => BucketId {
                user: Some(user),
                client_id: None,
            },
            BucketScope::ClientId => BucketId {
                user: None,
                client_id: Some(client_id),
            },
        }
    }
}
