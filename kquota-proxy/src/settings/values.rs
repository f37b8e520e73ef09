//! The value parsers of the proxy's own settings (the shared ones are `kquota_host`'s): the
//! broker map and PEM files. Their refusals are [`ValueProblem`]s, kept as the
//! source of [`Problem::Refused`].

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use kquota_host::settings::values::non_empty;
use kquota_host::settings::Problem;

/// Why a value of one of the proxy's own settings is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValueProblem {
    /// A broker map entry that is not `NODE=IP:PORT`.
    NotNodeAddress(String),
    /// A broker map entry whose node is not a whole number ≥ 0.
    NotNodeId(String),
    /// A node mapped twice.
    NodeTwice(i32),
    /// A listener (other than port 0) mapped to two nodes.
    AddressTwice(SocketAddr),
}

impl fmt::Display for ValueProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueProblem::NotNodeAddress(item) => write!(f, "'{item}' is not NODE=IP:PORT"),
            ValueProblem::NotNodeId(item) => {
                write!(f, "'{item}': the node must be a whole number ≥ 0")
            }
            ValueProblem::NodeTwice(node) => write!(f, "node {node} is mapped twice"),
            ValueProblem::AddressTwice(addr) => write!(f, "{addr} is mapped to two nodes"),
        }
    }
}

impl std::error::Error for ValueProblem {}

/// The broker map: `NODE=IP:PORT` entries separated by commas, no node twice, no listener (other
/// than port 0) for two nodes. Empty: no entries.
pub(crate) fn broker_map(value: &str) -> Result<BTreeMap<i32, SocketAddr>, Problem> {
    let mut map = BTreeMap::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let refused = |p| Problem::refused(p);
        let (node, addr) = item
            .split_once('=')
            .ok_or_else(|| refused(ValueProblem::NotNodeAddress(item.to_owned())))?;
        let node: i32 = node
            .trim()
            .parse()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| refused(ValueProblem::NotNodeId(item.to_owned())))?;
        let addr: SocketAddr = addr
            .trim()
            .parse()
            .map_err(|_| refused(ValueProblem::NotNodeAddress(item.to_owned())))?;
        if addr.port() != 0 && map.values().any(|a| *a == addr) {
            return Err(refused(ValueProblem::AddressTwice(addr)));
        }
        if map.insert(node, addr).is_some() {
            return Err(refused(ValueProblem::NodeTwice(node)));
        }
    }
    Ok(map)
}

/// A PEM file's path: it must open now, so that a missing file is named by the line or flag that
/// gave it; what is in it is read when the settings are built.
pub(crate) fn pem_file(value: &str) -> Result<PathBuf, Problem> {
    let path = PathBuf::from(non_empty(value)?);
    std::fs::File::open(&path).map_err(Problem::Unreadable)?;
    Ok(path)
}
