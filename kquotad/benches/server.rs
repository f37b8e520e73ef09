//! `kquotad` through loopback: DescribeClientQuotas and AlterClientQuotas requests per second with 1, 8
//! and 64 concurrent clients, and the time to start over a store of 1,000,000 entities.
//!
//! Run: `cargo bench --bench server` (plain harness: throughput with concurrency is not a criterion
//! measurement). Each client is a thread with its own connection sending one request at a time.
//! The server is configured as `kquotad`'s defaults: its connections on one network thread per CPU
//! (`num.network.threads`). docs/benchmarks.md has the figures, before and after that change.

// A bench binary, not a library.
#![allow(missing_docs)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, DescribeClientQuotasRequest, RequestHeader,
};
use kafka_protocol::protocol::{Encodable, Request, StrBytes};
use kquota::{Alteration, Engine, Entity, EntityName};
use kquota_store::Store;
use kquota_wire::Principal;
use kquotad::{Server, ServerSettings};

// The server runs in this process: give it the allocator `kquotad` ships with.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RUN: Duration = Duration::from_secs(3);

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kquota-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn frame<R: Request>(req: &R, version: i16, correlation: i32) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation)
        .with_client_id(Some(StrBytes::from_static_str("bench")));
    let mut buf = BytesMut::new();
    header.encode(&mut buf, R::header_version(version)).unwrap();
    req.encode(&mut buf, version).unwrap();
    let mut out = (buf.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&buf);
    out
}

fn round_trip(stream: &mut TcpStream, request: &[u8]) {
    stream.write_all(request).unwrap();
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut body).unwrap();
}

fn describe_request() -> Vec<u8> {
    let req =
        DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
            .with_entity_type(StrBytes::from_static_str("user"))
            .with_match_type(0)
            .with_match(Some(StrBytes::from_static_str("user-42")))]);
    frame(&req, 1, 1)
}

fn alter_request(client: usize, n: u64) -> Vec<u8> {
    let req = AlterClientQuotasRequest::default().with_entries(vec![EntryData::default()
        .with_entity(vec![EntityData::default()
            .with_entity_type(StrBytes::from_static_str("user"))
            .with_entity_name(Some(StrBytes::from_string(format!(
                "bench-{client}"
            ))))])
        .with_ops(vec![OpData::default()
            .with_key(StrBytes::from_static_str("producer_byte_rate"))
            .with_value((n % 1000 + 1) as f64)])]);
    frame(&req, 1, 1)
}

/// Requests per second from `clients` threads, each sending `make(client, n)` in a loop for `RUN`.
fn throughput(addr: SocketAddr, clients: usize, make: fn(usize, u64) -> Vec<u8>) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let stop = Arc::clone(&stop);
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(addr).unwrap();
                stream.set_nodelay(true).unwrap();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    round_trip(&mut stream, &make(c, n));
                    n += 1;
                }
                done.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    let start = Instant::now();
    std::thread::sleep(RUN);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    // Criterion passes `--bench`; nothing else is expected.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = temp_dir("rps");
    let mut config = ServerSettings::default();
    config.listeners = "PLAINTEXT://127.0.0.1:0".parse().unwrap();
    config.data_dir = dir.clone();
    // The bench's clients are anonymous and alter.
    config.super_users = vec![Principal::anonymous()];
    let server = runtime
        .block_on(Server::bind(config.build().unwrap()))
        .unwrap();
    let addr = server.local_addr();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = runtime.spawn(server.serve(async {
        let _ = stop_rx.await;
    }));
    // Some state to describe.
    let mut conn = TcpStream::connect(addr).unwrap();
    for i in 0..100 {
        round_trip(&mut conn, &alter_request(i, 7));
    }
    println!("| requests | clients | requests/s |");
    println!("| --- | --- | --- |");
    for clients in [1, 8, 64] {
        let rps = throughput(addr, clients, |_, _| describe_request());
        println!("| DescribeClientQuotas v1 | {clients} | {rps:.0} |");
    }
    for clients in [1, 8, 64] {
        let rps = throughput(addr, clients, alter_request);
        println!("| AlterClientQuotas v1 (fsync per request) | {clients} | {rps:.0} |");
    }
    let _ = stop_tx.send(());
    runtime.block_on(serving).unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    // Start-up over a store of 1,000,000 entities.
    let dir = temp_dir("startup");
    {
        let store = Store::open(&dir).unwrap();
        let engine = Engine::new();
        let build = Instant::now();
        for chunk in 0..100 {
            let batch: Vec<Alteration> = (0..10_000)
                .map(|i| {
                    let name = format!("user-{}", chunk * 10_000 + i);
                    Alteration::new(&Entity::User(EntityName::named(&name).unwrap()))
                        .set("producer_byte_rate", 1_000_000.0)
                })
                .collect();
            engine
                .alter_durably(&batch, false, |changes| store.persist(changes))
                .unwrap();
        }
        eprintln!(
            "built a 1M-entity store in {:.1} s",
            build.elapsed().as_secs_f64()
        );
    }
    let mut config = ServerSettings::default();
    config.listeners = "PLAINTEXT://127.0.0.1:0".parse().unwrap();
    config.data_dir = dir.clone();
    // The bench's clients are anonymous and alter.
    config.super_users = vec![Principal::anonymous()];
    let mut best = Duration::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        let server = runtime
            .block_on(Server::bind(config.build().unwrap()))
            .unwrap();
        let took = start.elapsed();
        assert_eq!(server.loaded(), 1_000_000);
        best = best.min(took);
        drop(server);
    }
    println!(
        "\nstart-up with 1,000,000 stored entities (open + load + bind, best of 3): {:.2} s",
        best.as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
