//! Fuzzes the proxy's answer side on arbitrary broker frames: the rewrite of the answers that name
//! brokers (Metadata, FindCoordinator, DescribeCluster, Produce and Fetch `node_endpoints`) and of
//! ApiVersions, the throttle read and raised, the proxy's refusals merged into a CreateTopics,
//! CreatePartitions or DeleteTopics answer, and the proxy's own throttled Fetch answer. The frames
//! are raw, or one of the proxy's sample answers with edits. Nothing may panic or abort, and
//! `kquota_proxy::fuzzing::answer` asserts what must hold: where the bounded walk and
//! kafka-protocol both read a frame they read the same bytes, a rewritten answer walks and
//! rewrites to itself, a raised throttle is the proxy's, every refused topic comes back.
//!
//! Run: `cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run proxy_answer -- -max_total_time=60 -rss_limit_mb=4096`.

#![no_main]

use arbitrary::Arbitrary;
use kquota_proxy::fuzzing::{self, RESPONSES};
use libfuzzer_sys::fuzz_target;

mod edits;

#[derive(Arbitrary, Debug)]
enum Frame {
    /// Raw bytes (header included) as the answer to `api_key` at `version`.
    Raw {
        api_key: i16,
        version: i16,
        bytes: Vec<u8>,
    },
    /// Raw bytes as the answer to one of the APIs the proxy decodes (by index), at a version
    /// in its range or just outside it.
    Api {
        api: u8,
        version: u8,
        bytes: Vec<u8>,
    },
    /// One of the proxy's sample answers (by index), at a version in its range, with
    /// `elements` in every array, then edited.
    Sample {
        api: u8,
        version: u8,
        elements: u8,
        edits: Vec<edits::Edit>,
    },
}

fn frame(f: &Frame) -> (i16, i16, Vec<u8>) {
    match f {
        Frame::Raw {
            api_key,
            version,
            bytes,
        } => (*api_key, *version, bytes.clone()),
        Frame::Api {
            api,
            version,
            bytes,
        } => {
            let (key, min, max) = RESPONSES[usize::from(*api) % RESPONSES.len()];
            // One below the range to one above it.
            let version = min - 1 + i16::from(*version) % (max - min + 3);
            (key, version, bytes.clone())
        }
        Frame::Sample {
            api,
            version,
            elements,
            edits,
        } => {
            let (key, min, max) = RESPONSES[usize::from(*api) % RESPONSES.len()];
            let version = min + i16::from(*version) % (max - min + 1);
            let mut out = fuzzing::sample_response(key, version, usize::from(elements % 4))
                .expect("a sample of every version in RESPONSES");
            edits::apply(&mut out, edits);
            (key, version, out)
        }
    }
}

fuzz_target!(|input: (Frame, u32, u8, (i32, i32))| {
    let (f, throttle_ms, refuse, session) = input;
    let (api_key, version, bytes) = frame(&f);
    fuzzing::answer(
        api_key,
        version,
        &bytes,
        u64::from(throttle_ms),
        refuse,
        session,
    );
});
