//! TLS: plaintext on a TLS port, bad and missing client certificates, and a TLS peer that stops
//! reading not holding up the server's shutdown.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::BytesMut;
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, ApiVersionsRequest, DescribeClientQuotasRequest, RequestHeader,
};
use kafka_protocol::protocol::{Encodable, Request, StrBytes};

use super::support::*;

#[test]
fn plaintext_on_a_tls_port_and_bad_certificates_are_refused() {
    let s = Secured::start(&["--override", "connection.failed.authentication.delay.ms=0"]);
    // A plaintext Kafka client on the SSL port.
    let mut c = Conn::open(s.ssl);
    c.send(&ApiVersionsRequest::default(), 0);
    assert!(c.closed());
    assert_refused(&list(s.ssl, None), "could not connect");
    assert_refused(&list(s.sasl_ssl, None), "could not connect");
    // TLS to the plaintext port.
    let tls_to_plain = s.ssl("tls-to-plain", Some("admin"));
    assert_refused(
        &list(s.plaintext, Some(&tls_to_plain)),
        "TLS handshake failed",
    );
    // An expired client certificate and one from an unknown CA.
    for bad in ["expired", "untrusted"] {
        let c = s.ssl(bad, Some(bad));
        let r = list(s.ssl, Some(&c));
        assert_eq!(r.code, 1, "{bad}: {r:?}");
    }
    // A server certificate the client does not trust.
    let other = s.config(
        "other-trust",
        &[
            "security.protocol=SSL".to_owned(),
            format!("ssl.truststore.location={}", s.pki.path("other-ca.pem")),
            "ssl.endpoint.identification.algorithm=".to_owned(),
        ],
    );
    assert_refused(&list(s.ssl, Some(&other)), "UnknownIssuer");
    still_serving(&s);
    let log = s.log();
    assert!(log.contains("SSL handshake failed"), "{log}");
}

#[test]
fn required_client_certificates_refuse_clients_without_one() {
    let s = Secured::start(&["--override", "ssl.client.auth=required"]);
    let no_cert = s.ssl("no-cert", None);
    assert_refused(&list(s.ssl, Some(&no_cert)), "could not connect");
    let admin = s.ssl("admin-cert", Some("admin"));
    assert_ok(&alter(s.ssl, Some(&admin), "by-cert", 7));
    let r = list(s.ssl, Some(&admin));
    assert_ok(&r);
    assert_eq!(
        r.stdout,
        "{user=by-cert}\nproducer_byte_rate broker_bps 7\n"
    );
    // SASL_SSL shares the TLS settings: a SASL client must present a certificate too.
    let sasl = s.sasl("sasl", "SASL_SSL", "SCRAM-SHA-256", "admin", ADMIN_PASSWORD);
    assert_refused(&list(s.sasl_ssl, Some(&sasl)), "could not connect");
    assert!(s.log().contains("SSL handshake failed"), "{}", s.log());
}

/// A TLS client that stops reading its answers holds neither its connection nor the server's
/// shutdown: a TLS close waits to send what is buffered, so it must not wait on this peer.
#[test]
fn sigterm_is_not_held_up_by_a_tls_peer_that_stops_reading() {
    let s = Secured::start(&[]);
    // The admin certificate's principal is a super user: it may alter and describe.
    let props = format!(
        "security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={}\n\
         ssl.keystore.type=PEM\nssl.keystore.location={}\nssl.endpoint.identification.algorithm=\n",
        s.pki.path("ca.pem"),
        s.pki.path("admin.pem"),
    );
    let (config, _) = kquota_cli::ClientConfig::from_properties(&props).unwrap();
    let tls = config.tls.expect("a TLS configuration");
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(tls, name).unwrap();
    let tcp = TcpStream::connect(s.ssl).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut stream = rustls::StreamOwned::new(connection, tcp);
    let frame = |request: &dyn Fn(&mut BytesMut), key: i16, correlation: i32| {
        let mut buf = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(key)
            .with_request_api_version(1)
            .with_correlation_id(correlation)
            .encode(&mut buf, 2)
            .unwrap();
        request(&mut buf);
        let mut out = (buf.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(&buf);
        out
    };
    // 2,000 users, so that describing them all answers about 100 KB.
    let entries: Vec<EntryData> = (0..2000)
        .map(|i| {
            EntryData::default()
                .with_entity(vec![EntityData::default()
                    .with_entity_type(StrBytes::from_static_str("user"))
                    .with_entity_name(Some(StrBytes::from_string(format!(
                        "user-{i:04}"
                    ))))])
                .with_ops(vec![OpData::default()
                    .with_key(StrBytes::from_static_str("producer_byte_rate"))
                    .with_value(1.0)])
        })
        .collect();
    let alter = AlterClientQuotasRequest::default().with_entries(entries);
    stream
        .write_all(&frame(
            &|b| alter.encode(b, 1).unwrap(),
            AlterClientQuotasRequest::KEY,
            1,
        ))
        .unwrap();
    let mut len = [0u8; 4];
    stream
        .read_exact(&mut len)
        .expect("the alteration is answered");
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut body).unwrap();

    // 400 describes of every user: about 40 MB of answers, never read, far more than the socket
    // buffers hold, so the server's writes block.
    let describe =
        DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
            .with_entity_type(StrBytes::from_static_str("user"))
            .with_match_type(2)
            .with_match(None)]);
    let mut pipelined = Vec::new();
    for i in 0..400 {
        pipelined.extend(frame(
            &|b| describe.encode(b, 1).unwrap(),
            DescribeClientQuotasRequest::KEY,
            2 + i,
        ));
    }
    stream.write_all(&pipelined).unwrap();
    stream.flush().unwrap();
    std::thread::sleep(Duration::from_secs(2));

    let mut server = s.server;
    let status = server.terminate(Duration::from_secs(30));
    assert!(status.success(), "exit status {status}");
    drop(stream);
}
