//! The Kafka wire protocol: quota admin API handlers any broker can link.
