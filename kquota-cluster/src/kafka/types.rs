//! librdkafka's types that this crate's errors carry: named here, so that the rest of the crate
//! (its errors included) names librdkafka only through `kafka/`.

/// Kafka's error, as the clients give it (and as [`ClusterError`](crate::ClusterError) carries it).
pub(crate) use rdkafka::error::KafkaError;
/// librdkafka's error codes.
#[cfg(test)]
pub(crate) use rdkafka::types::RDKafkaErrorCode;
