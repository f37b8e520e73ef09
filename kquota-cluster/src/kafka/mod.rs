//! Everything this crate asks of Kafka, in one place: the settings every client starts from
//! ([`client`]), the topics the instances share, created when missing and checked when present
//! ([`topics`]), and the consumers and producers the three parts use ([`consumer`],
//! [`producer`]). Nothing else in the crate calls librdkafka.
//!
//! Everything here blocks (librdkafka's metadata requests do): it runs on this crate's own
//! threads, never on an async worker.

mod client;
mod consumer;
mod producer;
mod topics;
pub(crate) mod types;

pub(crate) use client::{kafka_or_timeout, remaining};
pub(crate) use consumer::{Consumer, Polled, StartAt};
pub(crate) use producer::{queue_full, LogProducer, Producer, Undelivered};
pub(crate) use topics::{ensure_topic, TopicSpec};
pub(crate) use types::KafkaError;
