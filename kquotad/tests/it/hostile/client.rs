//! What the attack tests share: a blocking Kafka connection, the requests they send, a server with
//! SASL users, and the server process's CPU time and open files.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, DescribeClientQuotasRequest, ResponseHeader, SaslAuthenticateRequest,
    SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, HeaderVersion, Request, StrBytes};
use kquota_testkit::{temp_dir, Kquotad, TempDir};
use kquota_wire::{Credentials, ScramClient, ScramCredential, ScramMechanism};

pub(super) const ADMIN_PASSWORD: &str = "admin-secret";

/// One connection, requests sent and answers read in order.
pub(super) struct Conn {
    pub(super) stream: TcpStream,
    correlation: i32,
}

impl Conn {
    pub(super) fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Conn {
            stream,
            correlation: 0,
        }
    }

    /// The request as a frame (size prefix included).
    pub(super) fn frame<R: Request>(&mut self, req: &R, version: i16) -> Vec<u8> {
        self.correlation += 1;
        crate::frames::request(self.correlation, "hostile-test", req, version)
    }

    /// Sends the request; false if the server has closed the connection.
    pub(super) fn send<R: Request>(&mut self, req: &R, version: i16) -> bool {
        let frame = self.frame(req, version);
        self.stream.write_all(&frame).is_ok()
    }

    /// The answer, or `None` if the connection closed.
    pub(super) fn recv<R: Request>(&mut self, version: i16) -> Option<R::Response> {
        let mut body = crate::frames::response(&mut self.stream)?;
        ResponseHeader::decode(&mut body, R::Response::header_version(version)).ok()?;
        R::Response::decode(&mut body, version).ok()
    }

    pub(super) fn call<R: Request>(&mut self, req: &R, version: i16) -> Option<R::Response> {
        if !self.send(req, version) {
            return None;
        }
        self.recv::<R>(version)
    }

    /// SaslHandshake for `mechanism`: whether it was accepted.
    pub(super) fn handshake(&mut self, mechanism: &str) -> bool {
        let req = SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_string(mechanism.to_owned()));
        self.call(&req, 1).is_some_and(|r| r.error_code == 0)
    }

    /// One SaslAuthenticate: the error code and the server's bytes.
    pub(super) fn authenticate(&mut self, token: Vec<u8>) -> Option<(i16, Bytes)> {
        let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
        self.call(&req, 2).map(|r| (r.error_code, r.auth_bytes))
    }

    /// A full SCRAM login: whether it succeeded.
    pub(super) fn scram_login(&mut self, m: ScramMechanism, user: &str, password: &str) -> bool {
        if !self.handshake(m.name()) {
            return false;
        }
        let mut client = ScramClient::new(m, user, password).unwrap();
        let Some((0, server_first)) = self.authenticate(client.client_first()) else {
            return false;
        };
        let Ok(fin) = client.client_final(&server_first) else {
            return false;
        };
        match self.authenticate(fin) {
            Some((0, server_final)) => client.verify_server_final(&server_final).is_ok(),
            _ => false,
        }
    }

    /// Sets `{user=name}`'s producer_byte_rate: the entry's error code.
    pub(super) fn alter(&mut self, name: &str, rate: f64) -> Option<i16> {
        let entry = EntryData::default()
            .with_entity(vec![EntityData::default()
                .with_entity_type(StrBytes::from_static_str("user"))
                .with_entity_name(Some(StrBytes::from_string(name.to_owned())))])
            .with_ops(vec![OpData::default()
                .with_key(StrBytes::from_static_str("producer_byte_rate"))
                .with_value(rate)]);
        let req = AlterClientQuotasRequest::default().with_entries(vec![entry]);
        let resp = self.call(&req, 1)?;
        resp.entries.first().map(|e| e.error_code)
    }
}

/// DescribeClientQuotas of every user entity.
pub(super) fn describe_users() -> DescribeClientQuotasRequest {
    DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
        .with_entity_type(StrBytes::from_static_str("user"))
        .with_match_type(2)
        .with_match(None)])
}

/// A server with users `admin` and `alice` (both SCRAM mechanisms, 4096 iterations) on a
/// PLAINTEXT and a SASL_PLAINTEXT listener, PLAIN and both SCRAM mechanisms enabled, `admin` a
/// super user, and `extra` flags. Returns it, its log's path, and the two addresses.
pub(super) fn sasl_server(extra: &[&str]) -> (Kquotad, PathBuf, SocketAddr, SocketAddr) {
    let dir = temp_dir("hostile");
    std::fs::create_dir_all(&dir).unwrap();
    let creds = dir.join("users.json");
    write_users(&creds);
    let mut args = vec![
        "--sasl-credentials-file",
        creds.to_str().unwrap(),
        "--sasl-enabled-mechanisms",
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "--super-users",
        "User:admin",
    ];
    args.extend_from_slice(extra);
    let data = dir.join("data");
    let (server, bound) = Kquotad::start_with(
        &data,
        "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        &args,
    );
    let server = server.owning(dir);
    (server, data.with_extension("log"), bound[0].1, bound[1].1)
}

fn write_users(path: &Path) {
    let mut c = Credentials::new();
    for (user, password) in [("admin", ADMIN_PASSWORD), ("alice", "alice-secret")] {
        for m in ScramMechanism::ALL {
            c.insert(user, ScramCredential::generate(m, password, 4096).unwrap());
        }
    }
    std::fs::write(path, c.to_json()).unwrap();
}

/// The server process's CPU time so far (user and system, every thread, in clock ticks of 10 ms).
pub(super) fn cpu_ticks(server: &Kquotad) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", server.child.id())).unwrap();
    // After the command name in parentheses: state is field 3, utime 14 and stime 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// How many files (sockets included) the server process has open.
pub(super) fn open_files(server: &Kquotad) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", server.child.id()))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// A data directory that is removed after the test.
pub(super) fn data_dir() -> TempDir {
    temp_dir("hostile")
}
