//! The APIs the handler serves: their keys and version ranges, as ApiVersions lists them.

/// Metadata's API key.
pub const METADATA: i16 = 3;
/// ApiVersions' API key.
pub const API_VERSIONS: i16 = 18;
/// DescribeClientQuotas' API key.
pub const DESCRIBE_CLIENT_QUOTAS: i16 = 48;
/// AlterClientQuotas' API key.
pub const ALTER_CLIENT_QUOTAS: i16 = 49;
/// The seeds' draft AlterQuotas API key, served only with the draft enabled. Apache Kafka gave 50
/// to DescribeUserScramCredentials, which 50 serves otherwise (the default).
pub const ALTER_QUOTAS: i16 = 50;
/// DescribeUserScramCredentials' API key, served unless the seeds' draft AlterQuotas is enabled.
pub const DESCRIBE_USER_SCRAM_CREDENTIALS: i16 = 50;
/// DescribeCluster's API key.
pub const DESCRIBE_CLUSTER: i16 = 60;
/// SaslHandshake's API key.
pub const SASL_HANDSHAKE: i16 = 17;
/// SaslAuthenticate's API key.
pub const SASL_AUTHENTICATE: i16 = 36;

/// One API this handler serves and its version range, as ApiVersions lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiSupport {
    /// The API key.
    pub api_key: i16,
    /// The oldest version served.
    pub min_version: i16,
    /// The newest version served.
    pub max_version: i16,
}

impl ApiSupport {
    const fn new(api_key: i16, min_version: i16, max_version: i16) -> ApiSupport {
        ApiSupport {
            api_key,
            min_version,
            max_version,
        }
    }

    /// Whether `version` is in the range.
    pub fn supports(&self, version: i16) -> bool {
        (self.min_version..=self.max_version).contains(&version)
    }
}

/// ApiVersions' own range, which an UNSUPPORTED_VERSION answer lists.
pub(crate) const API_VERSIONS_SUPPORT: ApiSupport = ApiSupport::new(API_VERSIONS, 0, 4);

/// Every API the handler can serve, by key. 50 is DescribeUserScramCredentials v0, or with the draft
/// enabled the seeds' AlterQuotas v0: the same key and range, so always listed.
pub const SUPPORTED_APIS: [ApiSupport; 6] = [
    ApiSupport::new(METADATA, 0, 12),
    API_VERSIONS_SUPPORT,
    ApiSupport::new(DESCRIBE_CLIENT_QUOTAS, 0, 1),
    ApiSupport::new(ALTER_CLIENT_QUOTAS, 0, 1),
    ApiSupport::new(ALTER_QUOTAS, 0, 0),
    ApiSupport::new(DESCRIBE_CLUSTER, 0, 1),
];

/// The SASL APIs, served (and listed by ApiVersions) on SASL listeners. SaslHandshake v0, whose
/// tokens follow without Kafka framing, is not served (Kafka 4 dropped it too).
pub const SASL_APIS: [ApiSupport; 2] = [
    ApiSupport::new(SASL_HANDSHAKE, 1, 1),
    ApiSupport::new(SASL_AUTHENTICATE, 0, 2),
];
