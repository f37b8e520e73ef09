//! Kafka error codes and the typed errors of the library.

use std::fmt;

/// A Kafka protocol error code.
///
/// Open by design: any `i16` round-trips, and the codes kquota produces have names. `Debug` shows
/// both: `ErrorCode(42: INVALID_REQUEST)`, or `ErrorCode(7)` for a code kquota has no name for.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ErrorCode(pub i16);

impl fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.known_name() {
            Some(name) => write!(f, "ErrorCode({}: {name})", self.0),
            None => write!(f, "ErrorCode({})", self.0),
        }
    }
}

impl ErrorCode {
    /// No error.
    pub const NONE: ErrorCode = ErrorCode(0);
    /// The server experienced an unexpected error.
    pub const UNKNOWN_SERVER_ERROR: ErrorCode = ErrorCode(-1);
    /// The principal may not perform a cluster-level operation.
    pub const CLUSTER_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(31);
    /// The version of the API is not supported.
    pub const UNSUPPORTED_VERSION: ErrorCode = ErrorCode(35);
    /// The request is malformed or names something that cannot exist.
    pub const INVALID_REQUEST: ErrorCode = ErrorCode(42);
    /// The request is well formed but breaks a policy (here: the sub-quota rules).
    pub const POLICY_VIOLATION: ErrorCode = ErrorCode(44);
    /// The topic or partition does not exist.
    pub const UNKNOWN_TOPIC_OR_PARTITION: ErrorCode = ErrorCode(3);
    /// The SASL mechanism asked for is not enabled.
    pub const UNSUPPORTED_SASL_MECHANISM: ErrorCode = ErrorCode(33);
    /// A SASL request out of the exchange's order.
    pub const ILLEGAL_SASL_STATE: ErrorCode = ErrorCode(34);
    /// SASL authentication failed (bad credentials).
    pub const SASL_AUTHENTICATION_FAILED: ErrorCode = ErrorCode(58);
    /// A strict controller mutation refused while the client's `controller_mutation_rate` is in
    /// debt.
    pub const THROTTLING_QUOTA_EXCEEDED: ErrorCode = ErrorCode(89);
    /// The resource (a SCRAM credential) does not exist.
    pub const RESOURCE_NOT_FOUND: ErrorCode = ErrorCode(91);
    /// The resource (a SCRAM credential) is named twice in one request.
    pub const DUPLICATE_RESOURCE: ErrorCode = ErrorCode(92);
    /// The topic id does not exist.
    pub const UNKNOWN_TOPIC_ID: ErrorCode = ErrorCode(100);
    /// DescribeCluster asked for an endpoint type the listener is not.
    pub const MISMATCHED_ENDPOINT_TYPE: ErrorCode = ErrorCode(114);
    /// DescribeCluster asked for an endpoint type the server does not serve.
    pub const UNSUPPORTED_ENDPOINT_TYPE: ErrorCode = ErrorCode(115);

    /// Kafka's name for the code (`INVALID_REQUEST`), or `UNKNOWN(<code>)` for codes kquota does not know.
    pub fn name(self) -> String {
        match self.known_name() {
            Some(name) => name.to_owned(),
            None => format!("UNKNOWN({})", self.0),
        }
    }

    fn known_name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "NONE",
            -1 => "UNKNOWN_SERVER_ERROR",
            31 => "CLUSTER_AUTHORIZATION_FAILED",
            35 => "UNSUPPORTED_VERSION",
            42 => "INVALID_REQUEST",
            44 => "POLICY_VIOLATION",
            3 => "UNKNOWN_TOPIC_OR_PARTITION",
            33 => "UNSUPPORTED_SASL_MECHANISM",
            34 => "ILLEGAL_SASL_STATE",
            58 => "SASL_AUTHENTICATION_FAILED",
            89 => "THROTTLING_QUOTA_EXCEEDED",
            91 => "RESOURCE_NOT_FOUND",
            92 => "DUPLICATE_RESOURCE",
            100 => "UNKNOWN_TOPIC_ID",
            114 => "MISMATCHED_ENDPOINT_TYPE",
            115 => "UNSUPPORTED_ENDPOINT_TYPE",
            _ => return None,
        })
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.known_name() {
            Some(name) => f.write_str(name),
            None => write!(f, "UNKNOWN({})", self.0),
        }
    }
}

/// An error as Kafka reports it: a code and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// The Kafka error code.
    pub code: ErrorCode,
    /// What went wrong, in words.
    pub message: String,
}

impl ApiError {
    /// An error with the given code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
        }
    }

    /// An `INVALID_REQUEST` error.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::INVALID_REQUEST, message)
    }

    /// A `POLICY_VIOLATION` error.
    pub fn policy_violation(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::POLICY_VIOLATION, message)
    }

    /// `CLUSTER_AUTHORIZATION_FAILED` with Kafka's default message.
    pub fn cluster_authorization_failed() -> Self {
        ApiError::new(
            ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
            "Cluster authorization failed.",
        )
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

/// Text that could not be parsed into one of the library's types.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseError {
    /// An entity type other than `user`, `client-id` or `ip`.
    UnknownEntityType(String),
    /// A quota type kquota does not know.
    UnknownQuotaType(String),
    /// A unit that does not exist, or does not apply to the quota type.
    UnknownUnit {
        /// The quota type the unit was given for.
        quota_type: String,
        /// The unit as written.
        unit: String,
    },
    /// An empty entity name.
    EmptyName,
    /// A sanitized name with a malformed `%` sequence or bytes that are not UTF-8.
    MalformedEscape(String),
    /// A quota value that is not finite and greater than zero.
    InvalidValue(String),
    /// A sub-quota policy other than `kip55` or `kafka`.
    UnknownSubQuotaPolicy(String),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::UnknownEntityType(t) => {
                write!(
                    f,
                    "unknown entity type '{t}' (expected user, client-id or ip)"
                )
            }
            ParseError::UnknownQuotaType(t) => write!(f, "unknown quota type '{t}'"),
            ParseError::UnknownUnit { quota_type, unit } => {
                write!(f, "unknown unit '{unit}' for quota type {quota_type}")
            }
            ParseError::EmptyName => f.write_str("entity names must not be empty"),
            ParseError::MalformedEscape(s) => write!(f, "malformed sanitized name '{s}'"),
            ParseError::InvalidValue(v) => {
                write!(
                    f,
                    "invalid quota value {v}: must be finite and greater than 0"
                )
            }
            ParseError::UnknownSubQuotaPolicy(p) => {
                write!(
                    f,
                    "unknown sub-quota policy '{p}' (expected kip55 or kafka)"
                )
            }
        }
    }
}

impl std::error::Error for ParseError {}
