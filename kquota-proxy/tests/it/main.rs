//! kquota-proxy against an in-process fake cluster: endpoints rewritten to the proxy's listeners,
//! everything else forwarded byte for byte, pipelining, ApiVersions capped, and bad frames closing
//! only their own connection; and quotas enforced as Kafka's broker enforces them.

mod client;
mod enforce;
mod fake;
mod hostile;
mod proxy;
mod settings;
mod tls;
