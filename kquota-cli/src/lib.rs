//! The quota admin tools' library: `kafka-quotas` and `kafka-configs` are built on it, and anyone
//! scripting Kafka quota administration from Rust can use it too.
//!
//! * [`AdminClient`]: a small blocking Kafka admin client for DescribeClientQuotas and
//!   AlterClientQuotas, against `kquotad` or Apache Kafka, over PLAINTEXT, SSL, SASL_PLAINTEXT or
//!   SASL_SSL.
//! * [`ClientConfig`]: its settings, read from a Kafka admin-client properties file
//!   (`--command-config`; [`KNOWN_KEYS`] lists the keys it understands).
//! * How the tools show what a server returns, whatever it is ([`list_text`], [`list_json`],
//!   [`resolve`], [`describe_text`], [`entity_text`]): no entry is refused or changed.
//! * The conventions every kquota command shares ([`Failure`], [`exit_status`], [`clap_failure`],
//!   [`write_out`], [`usage`]): one `error: …` line on stderr, exit status 2 for a wrong command
//!   line or `--command-config`, 1 when the server refused or could not be reached.
//!
//! ```no_run
//! use kquota_cli::{AdminClient, ClientConfig};
//! use kquota::{ComponentMatch, EntityType};
//!
//! let mut admin = AdminClient::connect("localhost:9092", &ClientConfig::default())?;
//! let entries = admin.describe_client_quotas(
//!     &[(EntityType::ClientId, ComponentMatch::Exact("my-client".into()))],
//!     false,
//! )?;
//! for entry in entries {
//!     println!("{:?}: {:?}", entry.entity, entry.values);
//! }
//! # Ok::<(), kquota_cli::ClientError>(())
//! ```

mod client;
mod config;
mod exit;
mod jaas;
mod quote;
mod show;

// The public API, all of it here; the modules stay private so that items can move between them.
//
// The admin client and what its calls return or fail with.
pub use crate::client::{
    error_name, ip_or_resolvable_host, parse_bootstrap, AdminClient, BootstrapError, ClientError,
    QuotaEntry,
};
// Its settings: `--command-config`, including `sasl.jaas.config`.
pub use crate::config::{ClientConfig, ConfigError, SaslLogin, KNOWN_KEYS};
pub use crate::jaas::{parse_jaas, JaasConfig, JaasError, PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE};
// How the tools show what a server returns: every entity, name, key and value (docs/cli.md,
// "Entries as the server stores them").
pub use crate::quote::{message_text, quote};
pub use crate::show::{
    describe_quotas_json, describe_text, entity_json, entity_text, entries_json_in_order,
    list_json, list_text, matches, name_text, resolve, sort_entries, value_json, value_text,
    Candidate, Condition, Described, ShownKey, Source, WireEntity,
};
// How every kquota command ends: exit statuses, usage errors, output.
pub use crate::exit::{
    bootstrap_servers, exit_status, load_command_config, refusal, usage, write_out, Failure,
};
pub use kquota_host::exit::clap_failure;
