//! Fuzzes the wire handler: arbitrary request frames, mostly with a well-formed header for an API the
//! handler serves, so that the bodies' decoders are reached. The handler must never panic, and a frame
//! that closes the connection must never change the engine.
//!
//! Run: `cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run wire_frame -- -max_total_time=30`.

#![no_main]

use std::sync::{Arc, OnceLock};

use arbitrary::Arbitrary;
use kquota_wire::{Principal, SecurityProtocol, Session};
use kquota_wire::{Handler, Outcome, ServerInfo, SASL_APIS, SUPPORTED_APIS};
use kquota::Engine;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Frame {
    /// Raw bytes, header included.
    Raw(Vec<u8>),
    /// A header for a served API (by index) at a version near its range, then a raw body.
    Api {
        api: u8,
        version_offset: i8,
        correlation_id: i32,
        client_id: Option<String>,
        flexible_tags: bool,
        body: Vec<u8>,
    },
}

fn handler() -> &'static Handler {
    static HANDLER: OnceLock<Handler> = OnceLock::new();
    HANDLER.get_or_init(|| {
        Handler::new(
            Arc::new(Engine::new()),
            ServerInfo {
                node_id: 1,
                host: "127.0.0.1".into(),
                port: 9092,
                cluster_id: "fuzz".into(),
            },
        )
    })
}

fn encode(frame: &Frame) -> Vec<u8> {
    match frame {
        Frame::Raw(bytes) => bytes.clone(),
        Frame::Api {
            api,
            version_offset,
            correlation_id,
            client_id,
            flexible_tags,
            body,
        } => {
            let all: Vec<_> = SUPPORTED_APIS.iter().chain(SASL_APIS.iter()).collect();
            let support = *all[*api as usize % all.len()];
            let version = support
                .max_version
                .saturating_add(i16::from(*version_offset % 3));
            let mut out = Vec::new();
            out.extend_from_slice(&support.api_key.to_be_bytes());
            out.extend_from_slice(&version.to_be_bytes());
            out.extend_from_slice(&correlation_id.to_be_bytes());
            match client_id {
                Some(id) => {
                    let id = &id.as_bytes()[..id.len().min(100)];
                    out.extend_from_slice(&(id.len() as i16).to_be_bytes());
                    out.extend_from_slice(id);
                }
                None => out.extend_from_slice(&(-1i16).to_be_bytes()),
            }
            if *flexible_tags {
                out.push(0); // an empty tagged-field section (header v2)
            }
            out.extend_from_slice(body);
            out
        }
    }
}

fuzz_target!(|input: (bool, Vec<Frame>)| {
    let (sasl, frames) = input;
    let handler = handler();
    // Either a SASL connection that has not authenticated (nothing may reach the engine) or an
    // anonymous PLAINTEXT one (the handler has no authorizer, so everything is allowed).
    let mut session = if sasl {
        Session::new("SASL_PLAINTEXT", SecurityProtocol::SaslPlaintext, None)
    } else {
        Session::plaintext().with_principal(Principal::anonymous())
    };
    for frame in frames.iter().take(16) {
        let bytes = encode(frame);
        let before = handler.engine().generation();
        match handler.handle(&mut session, &bytes) {
            Outcome::Respond(response) | Outcome::RespondAndClose(response, _) => {
                // Every response starts with the request's correlation id.
                assert!(response.len() >= 4, "a response without a header");
                assert_eq!(&response[..4], &bytes[4..8], "correlation id not echoed");
            }
            Outcome::Close(_) => {
                assert_eq!(
                    handler.engine().generation(),
                    before,
                    "a refused frame changed the engine"
                );
            }
        }
        if sasl {
            // No credentials are configured: a SASL session never authenticates.
            assert!(!session.is_authenticated(), "authenticated without credentials");
            assert_eq!(handler.engine().generation(), before, "an unauthenticated request changed the engine");
        }
    }
});
