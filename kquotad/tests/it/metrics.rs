//! The metrics listener (`kquota.metrics.listen`): `/healthz`, `/readyz` and the server's metric
//! families after real requests, in the classic text format a `text/plain` scraper gets.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::{AlterClientQuotasRequest, ApiVersionsRequest, RequestHeader};
use kafka_protocol::protocol::{Encodable, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use kquota_testkit::temp_dir;

/// One HTTP GET; the status and the body.
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: t\r\nAccept: text/plain\r\nConnection: close\r\n\r\n"
    );
    s.write_all(request.as_bytes()).await.unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    let status = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").unwrap().1.to_owned();
    (status, body)
}

/// Sends `req` and reads its answer's frame.
async fn call<R: Request>(s: &mut TcpStream, req: &R, version: i16) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("it")));
    let mut buf = BytesMut::new();
    header.encode(&mut buf, R::header_version(version)).unwrap();
    req.encode(&mut buf, version).unwrap();
    s.write_all(&(buf.len() as u32).to_be_bytes())
        .await
        .unwrap();
    s.write_all(&buf).await.unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await.unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).await.unwrap();
    body
}

/// The value of the sample `series` (a whole series name with its labels).
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_the_server_families() {
    let dir = temp_dir("metrics");
    let mut config = kquotad::ServerSettings::default();
    config.set("listeners", "PLAINTEXT://127.0.0.1:0").unwrap();
    config
        .set("kquota.data.dir", dir.to_str().unwrap())
        .unwrap();
    config.set("kquota.metrics.listen", "127.0.0.1:0").unwrap();
    config.set("super.users", "User:ANONYMOUS").unwrap();
    assert!(kquotad::ServerSettings::default()
        .set("kquota.metrics.listen", "localhost:9405")
        .is_err());
    let server = kquotad::Server::bind(config.build().unwrap())
        .await
        .unwrap();
    let (addr, metrics) = (server.local_addr(), server.metrics_addr().unwrap());
    let (stop, stopping) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(server.serve(async {
        let _ = stopping.await;
    }));

    assert_eq!(get(metrics, "/healthz").await, (200, "ok\n".to_owned()));
    assert_eq!(get(metrics, "/readyz").await, (200, "ready\n".to_owned()));

    let mut s = TcpStream::connect(addr).await.unwrap();
    let versions = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("it"))
        .with_client_software_version(StrBytes::from_static_str("1"));
    call(&mut s, &versions, 3).await;
    let alter = AlterClientQuotasRequest::default().with_entries(vec![EntryData::default()
        .with_entity(vec![EntityData::default()
            .with_entity_type(StrBytes::from_static_str("user"))
            .with_entity_name(Some(StrBytes::from_static_str("alice")))])
        .with_ops(vec![OpData::default()
            .with_key(StrBytes::from_static_str("producer_byte_rate"))
            .with_value(1024.0)])]);
    call(&mut s, &alter, 1).await;
    call(&mut s, &alter.clone().with_validate_only(true), 1).await;

    let (status, text) = get(metrics, "/metrics").await;
    assert_eq!(status, 200);
    for (series, value) in [
        (
            "kquotad_requests_total{api=\"ApiVersions\",error=\"NONE\"}",
            1.0,
        ),
        (
            "kquotad_requests_total{api=\"AlterClientQuotas\",error=\"\"}",
            2.0,
        ),
        (
            "kquotad_alterations_total{result=\"NONE\",validate_only=\"false\"}",
            1.0,
        ),
        (
            "kquotad_alterations_total{result=\"NONE\",validate_only=\"true\"}",
            1.0,
        ),
        ("kquotad_store_commit_duration_seconds_count", 1.0),
        ("kquotad_failed_authentications_total", 0.0),
        ("kquota_connection_slots_in_use", 1.0),
        ("kquota_connection_slots_max", 1024.0),
        ("kquota_request_budget_limit_bytes", 268_435_456.0),
    ] {
        assert_eq!(sample(&text, series), value, "{series}");
    }
    // The classic format: a counter's HELP and TYPE name its samples, and there is no # EOF.
    assert!(text.contains("# TYPE kquotad_requests_total counter\n"));
    assert!(text.contains("# HELP kquotad_requests_total "));
    assert!(!text.contains("# EOF"));

    drop(s);
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .unwrap()
        .unwrap();
}
