//! Fuzzes the proxy's request side on arbitrary client frames: the request header every request's
//! is read from, the SASL identity's watch, a Fetch request's `max_bytes` cap, and a CreateTopics,
//! CreatePartitions or DeleteTopics request decoded, counted and split with some topics refused.
//! The frames are raw, a header with a raw body, or one of the proxy's sample requests with
//! edits. Nothing may panic or abort (kafka-protocol reserves its counts: every frame it sees must
//! have been walked), and `kquota_proxy::fuzzing::request` asserts what must hold of each result.
//!
//! Run: `cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run proxy_request -- -max_total_time=60 -rss_limit_mb=4096`.

#![no_main]

use arbitrary::Arbitrary;
use kquota_proxy::fuzzing::{self, REQUESTS};
use libfuzzer_sys::fuzz_target;

mod edits;

#[derive(Arbitrary, Debug)]
enum Frame {
    /// Raw bytes, header included.
    Raw(Vec<u8>),
    /// A request header (v1, or v2 with `tagged`) for any API, then a raw body.
    Header {
        api_key: i16,
        version: i16,
        correlation_id: i32,
        client_id: Option<Vec<u8>>,
        tagged: bool,
        body: Vec<u8>,
    },
    /// One of the proxy's sample requests (by index), at a version in its range, with `elements`
    /// in every array, then edited.
    Sample {
        api: u8,
        version: u8,
        elements: u8,
        edits: Vec<edits::Edit>,
    },
}

fn frame(f: &Frame) -> Vec<u8> {
    match f {
        Frame::Raw(bytes) => bytes.clone(),
        Frame::Header {
            api_key,
            version,
            correlation_id,
            client_id,
            tagged,
            body,
        } => {
            let mut out = Vec::new();
            out.extend_from_slice(&api_key.to_be_bytes());
            out.extend_from_slice(&version.to_be_bytes());
            out.extend_from_slice(&correlation_id.to_be_bytes());
            match client_id {
                Some(id) => {
                    let id = &id[..id.len().min(64)];
                    out.extend_from_slice(&(id.len() as i16).to_be_bytes());
                    out.extend_from_slice(id);
                }
                None => out.extend_from_slice(&(-1i16).to_be_bytes()),
            }
            if *tagged {
                out.push(0);
            }
            out.extend_from_slice(body);
            out
        }
        Frame::Sample {
            api,
            version,
            elements,
            edits,
        } => {
            let (key, min, max) = REQUESTS[usize::from(*api) % REQUESTS.len()];
            let version = min + i16::from(*version) % (max - min + 1);
            let mut out = fuzzing::sample_request(key, version, usize::from(elements % 4))
                .expect("a sample of every version in REQUESTS");
            edits::apply(&mut out, edits);
            out
        }
    }
}

fuzz_target!(|input: (Frame, u64, u64, u16)| {
    let (f, fetch_cap, refuse, throttle_ms) = input;
    fuzzing::request(&frame(&f), fetch_cap, refuse, u64::from(throttle_ms));
});
