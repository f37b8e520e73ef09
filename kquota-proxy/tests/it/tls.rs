//! TLS towards clients, through the proxy in front of the fake cluster: a client certificate's
//! subject, mapped by the principal rules, is the user quotas apply to; a client without the
//! TLS handshake gets nothing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ProduceRequest, ProduceResponse, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use kquota::{Alteration, Entity, EntityName};
use kquota_proxy::{HostPort, Proxy, ProxySettings};
use kquota_wire::tls::ClientAuth;
use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

use crate::client::request;
use crate::fake::Cluster;

/// Files of a test PKI: a CA, the proxy's certificate for 127.0.0.1, and alice's client
/// certificate, removed at the end.
struct Pki {
    dir: PathBuf,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

impl Pki {
    fn new() -> Pki {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir =
            std::env::temp_dir().join(format!("kquota-proxy-tls-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "kquota test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca = params.self_signed(&ca_key).unwrap();
        Pki { dir, ca, ca_key }
    }

    fn write(&self, name: &str, pem: &str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, pem).unwrap();
        path
    }

    /// A certificate for `names` with `subject`, as (certificate PEM, key PEM).
    fn leaf(&self, names: &[&str], subject: &[(DnType, &str)]) -> (String, String) {
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name = DistinguishedName::new();
        for (t, v) in subject {
            params.distinguished_name.push(t.clone(), *v);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A rustls client trusting `ca`, presenting `identity` (certificate and key PEM) if given.
fn connector(ca: &Path, identity: Option<(&str, &str)>) -> tokio_rustls::TlsConnector {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    let ca_pem = std::fs::read_to_string(ca).unwrap();
    for cert in kquota_wire::tls::certificates(&ca_pem, "ca").unwrap() {
        roots.add(cert).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                kquota_wire::tls::certificates(cert, "client").unwrap(),
                kquota_wire::tls::private_key(key, "client").unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

async fn send_frame<S: AsyncWrite + Unpin>(s: &mut S, frame: &[u8]) {
    s.write_all(&(frame.len() as u32).to_be_bytes())
        .await
        .unwrap();
    s.write_all(frame).await.unwrap();
    s.flush().await.unwrap();
}

async fn recv_frame<S: AsyncRead + Unpin>(s: &mut S) -> Option<Bytes> {
    let mut prefix = [0u8; 4];
    s.read_exact(&mut prefix).await.ok()?;
    let mut frame = vec![0u8; u32::from_be_bytes(prefix) as usize];
    s.read_exact(&mut frame).await.ok()?;
    Some(Bytes::from(frame))
}

fn produce(bytes: usize) -> ProduceRequest {
    let partition = PartitionProduceData::default()
        .with_index(0)
        .with_records(Some(Bytes::from(vec![7u8; bytes])));
    ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(1000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_data(vec![partition])])
}

#[tokio::test]
async fn a_client_certificate_names_the_user_whose_quota_applies() {
    tokio::time::timeout(Duration::from_secs(9), async {
        let pki = Pki::new();
        let ca = pki.write("ca.pem", &pki.ca.pem());
        let (cert, key) = pki.leaf(&["127.0.0.1"], &[(DnType::CommonName, "kquota-proxy")]);
        let (server_cert, server_key) =
            (pki.write("proxy.pem", &cert), pki.write("proxy.key", &key));
        let (alice_cert, alice_key) = pki.leaf(
            &[],
            &[
                (DnType::OrganizationName, "acme"),
                (DnType::CommonName, "alice"),
            ],
        );

        let cluster = Cluster::start(1).await;
        let upstream: HostPort = cluster.bootstrap().to_string().parse().unwrap();
        let mut config = ProxySettings::new("127.0.0.1:0".parse().unwrap(), upstream);
        config.listen_base = Some("127.0.0.1:0".parse().unwrap());
        config.tls_cert = Some(server_cert);
        config.tls_key = Some(server_key);
        config.tls_client_ca = Some(ca.clone());
        config.client_auth = ClientAuth::Required;
        config
            .set(
                "ssl.principal.mapping.rules",
                "RULE:^.*CN=([^,]*).*$/$1/,DEFAULT",
            )
            .unwrap();
        let proxy = Proxy::bind(config.build().unwrap()).await.unwrap();
        let addr = proxy.local_addr();
        proxy
            .engine()
            .alter(
                &[
                    Alteration::new(&Entity::User(EntityName::named("alice").unwrap()))
                        .set("producer_byte_rate", 1_000.0),
                ],
                false,
            )
            .iter()
            .for_each(|r| assert!(r.error.is_none()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(proxy.serve(async {
            let _ = stopped.await;
        }));

        // alice's certificate: her quota throttles a produce well over it.
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let mut tls = connector(&ca, Some((&alice_cert, &alice_key)))
            .connect(name.clone(), tcp)
            .await
            .unwrap();
        send_frame(
            &mut tls,
            &request(ApiKey::Produce, 9, 1, "app", &produce(30_000)),
        )
        .await;
        let mut answer = recv_frame(&mut tls).await.expect("an answer over TLS");
        ResponseHeader::decode(&mut answer, ApiKey::Produce.response_header_version(9)).unwrap();
        let r = ProduceResponse::decode(&mut answer, 9).unwrap();
        assert!(
            r.throttle_time_ms > 1_000,
            "User:alice (from CN=alice) is over 1,000 bytes/s: throttled {} ms",
            r.throttle_time_ms
        );

        // Frames over 32 KiB each way pass on as they come through TLS too (copied: no pipe
        // between a TLS stream and a socket). A connection of its own: the one above is muted
        // for its throttle.
        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut large = connector(&ca, Some((&alice_cert, &alice_key)))
            .connect(name.clone(), tcp)
            .await
            .unwrap();
        for (id, size) in [(10, 300_000), (11, 1_000_000)] {
            let frame = crate::proxy::unknown_api_frame(id, size);
            send_frame(&mut large, &frame).await;
            let answer = recv_frame(&mut large).await.expect("an answer over TLS");
            assert!(
                answer[..] == crate::fake::echo(1, &frame)[..],
                "frame {id} of {size} bytes changed on the way"
            );
        }

        // Without a client certificate (ssl.client.auth=required) or without TLS at all, the
        // proxy serves nothing.
        let tcp = TcpStream::connect(addr).await.unwrap();
        let refused = async {
            let mut tls = connector(&ca, None).connect(name, tcp).await.ok()?;
            // Under TLS 1.3 the client's handshake ends before the proxy has refused it: the
            // refusal may reach the client as a failed write as well as a closed read.
            let frame = request(ApiKey::Produce, 9, 2, "app", &produce(10));
            tls.write_all(&(frame.len() as u32).to_be_bytes())
                .await
                .ok()?;
            tls.write_all(&frame).await.ok()?;
            tls.flush().await.ok()?;
            recv_frame(&mut tls).await
        };
        assert!(refused.await.is_none(), "no certificate, no answer");
        let mut plain = TcpStream::connect(addr).await.unwrap();
        let _ = plain
            .write_all(&request(ApiKey::Produce, 9, 3, "app", &produce(10)))
            .await;
        assert!(recv_frame(&mut plain).await.is_none(), "no TLS, no answer");

        let _ = stop.send(());
        served.await.unwrap();
    })
    .await
    .expect("the test finishes within 9 s");
}
