//! Kafka's listener settings: `listeners`, `listener.security.protocol.map` and
//! `advertised.listeners`, each parsed once into a type that holds only a well-formed value, and
//! resolved into [`ListenerConfig`]s when the server starts.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU16;
use std::str::FromStr;

use kquota_wire::SecurityProtocol;

use kquota_host::settings::Problem;

use crate::error::ValueProblem;

/// One listener: its name, protocol and address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerConfig {
    /// The name (`SASL_SSL`, or a custom name from `listener.security.protocol.map`).
    pub name: String,
    /// The security protocol.
    pub protocol: SecurityProtocol,
    /// Where to listen (port 0 for any free port).
    pub addr: SocketAddr,
}

/// One `NAME://host:port` of a listener list; the name upper-cased, the host without brackets.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    name: String,
    host: String,
    port: u16,
}

/// Splits Kafka's listener list (`NAME://host:port,...`) into names, hosts and ports.
fn split(value: &str) -> Result<Vec<Entry>, Problem> {
    let mut out = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((name, addr)) = item.split_once("://") else {
            return Err(Problem::from(ValueProblem::NotNameHostPort(
                item.to_owned(),
            )));
        };
        let name = name.trim().to_ascii_uppercase();
        if name.is_empty() {
            return Err(Problem::from(ValueProblem::NoListenerName(item.to_owned())));
        }
        let Some((host, port)) = addr.rsplit_once(':') else {
            return Err(Problem::from(ValueProblem::NoPort(item.to_owned())));
        };
        let port: u16 = port
            .parse()
            .map_err(|_| Problem::from(ValueProblem::BadPort(item.to_owned())))?;
        out.push(Entry {
            name,
            host: host.trim_matches(['[', ']']).to_owned(),
            port,
        });
    }
    if out.is_empty() {
        return Err(Problem::from(ValueProblem::NoListener));
    }
    Ok(out)
}

/// The `listeners` setting (`PLAINTEXT://127.0.0.1:9092,SSL://:9093`): at least one entry, each
/// `NAME://host:port`. It keeps its text as written, which messages about it quote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listeners {
    text: String,
    entries: Vec<Entry>,
}

impl Listeners {
    /// The setting as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The listeners, with their protocols resolved through `map`, their hosts as addresses (an
    /// empty host is every address, `localhost` is 127.0.0.1), and no name or port (other than 0)
    /// used twice.
    pub(crate) fn resolve(&self, map: &ProtocolMap) -> Result<Vec<ListenerConfig>, Problem> {
        let mut out: Vec<ListenerConfig> = Vec::new();
        for Entry { name, host, port } in &self.entries {
            let (name, port) = (name.clone(), *port);
            let protocol = match map.get(&name) {
                Some(p) => p,
                None => name
                    .parse()
                    .map_err(|_| Problem::from(ValueProblem::NotAProtocol(name.clone())))?,
            };
            let host = match host.as_str() {
                "" => "0.0.0.0",
                "localhost" => "127.0.0.1",
                h => h,
            };
            let ip: IpAddr = host
                .parse()
                .map_err(|_| Problem::from(ValueProblem::NotAnIpAddress(host.to_owned())))?;
            if out.iter().any(|l| l.name == name) {
                return Err(Problem::from(ValueProblem::NameTwice(name)));
            }
            if port != 0 && out.iter().any(|l| l.addr.port() == port) {
                return Err(Problem::from(ValueProblem::PortTwice(port)));
            }
            out.push(ListenerConfig {
                name,
                protocol,
                addr: SocketAddr::new(ip, port),
            });
        }
        Ok(out)
    }
}

impl FromStr for Listeners {
    type Err = Problem;

    fn from_str(text: &str) -> Result<Self, Problem> {
        Ok(Listeners {
            entries: split(text)?,
            text: text.to_owned(),
        })
    }
}

impl fmt::Display for Listeners {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The `listener.security.protocol.map` setting (`INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL`): listener
/// names to security protocols. A listener named after a protocol needs no entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProtocolMap(BTreeMap<String, SecurityProtocol>);

impl ProtocolMap {
    /// The protocol of the listener `name` (upper-case), if the map names it.
    pub fn get(&self, name: &str) -> Option<SecurityProtocol> {
        self.0.get(name).copied()
    }
}

impl FromStr for ProtocolMap {
    type Err = Problem;

    fn from_str(value: &str) -> Result<Self, Problem> {
        let mut out = BTreeMap::new();
        for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((name, protocol)) = item.split_once(':') else {
                return Err(Problem::from(ValueProblem::NotNameProtocol(
                    item.to_owned(),
                )));
            };
            let protocol = protocol
                .parse::<SecurityProtocol>()
                .map_err(Problem::refused)?;
            out.insert(name.trim().to_ascii_uppercase(), protocol);
        }
        Ok(ProtocolMap(out))
    }
}

/// The `advertised.listeners` setting: what clients are told to connect to, per listener name
/// (`NAME://host:port`, port not 0). A listener not named is advertised at its bound address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AdvertisedListeners(Vec<(String, String, NonZeroU16)>);

impl AdvertisedListeners {
    /// The host and port advertised for the listener `name`, if any.
    pub fn get(&self, name: &str) -> Option<(&str, u16)> {
        self.0
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, host, port)| (host.as_str(), port.get()))
    }
}

impl FromStr for AdvertisedListeners {
    type Err = Problem;

    fn from_str(value: &str) -> Result<Self, Problem> {
        let mut out = Vec::new();
        for Entry { name, host, port } in split(value)? {
            let port =
                NonZeroU16::new(port).ok_or(Problem::from(ValueProblem::AdvertisedPortZero))?;
            out.push((name, host, port));
        }
        Ok(AdvertisedListeners(out))
    }
}
