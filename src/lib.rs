//! kquota: a client-quota engine for the Kafka protocol.

mod alter;
mod describe;
mod engine;
mod entity;
mod error;
mod key;
mod notify;
mod resolve;
mod state;
mod text;

pub use alter::{AlterResult, Alteration, EntityPart, Op};
pub use describe::{
    BrokerLimit, BrokerView, ComponentMatch, DescribedQuota, ListFilter, ListedEntity, Overridden,
};
pub use engine::{Engine, EngineBuilder, SubQuotaPolicy, Subscriber};
pub use entity::{desanitize, sanitize, Entity, EntityName, EntityType, Name, DEFAULT_DISPLAY};
pub use error::{ApiError, ErrorCode, ParseError};
pub use key::{QuotaKey, QuotaType, QuotaValue, Unit, ValueKind};
pub use notify::{ChangeNotification, NotificationV1, NotificationV2};
pub use resolve::{BucketId, BucketScope, IpQuota, Level, Quota, Resolved};
pub use text::{format_describe, format_list};
