//! Fuzzes the proxy's SASL identity (kquota-proxy's `identity`) with arbitrary sequences of client
//! SASL requests and broker answers, pipelined as a client may send them: handshakes naming PLAIN,
//! SCRAM or other mechanisms, PLAIN and SCRAM tokens (escaped names, extensions, delegation
//! tokens), raw frames, and answers whole, cut short, with bytes after them, or raw.
//!
//! What must hold: no request moves the principal; an answer moves it only when it answers a
//! step that named a user, reads to its end (as Kafka's readers read it, with kquota-wire's
//! bounded reader here) and carries error code 0, and then the principal is that user; such an
//! answer always moves it there; a PLAIN step right after its handshake names the token's
//! authcid, and a SCRAM client-final right after its client-first names the client-first's user
//! (none for a delegation token).
//!
//! Run: `cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run proxy_sasl -- -max_total_time=60 -rss_limit_mb=4096`.

#![no_main]

use std::collections::VecDeque;

use arbitrary::Arbitrary;
use kquota_proxy::fuzzing::{Sasl, Step};
use kquota_wire::{ReadResult, Reader};
use libfuzzer_sys::fuzz_target;

const HANDSHAKE: i16 = 17;
const AUTHENTICATE: i16 = 36;

#[derive(Arbitrary, Debug)]
enum Mechanism {
    Plain,
    Scram256,
    Scram512,
    Gssapi,
    Other(String),
}

#[derive(Arbitrary, Debug)]
enum Gs2 {
    /// `n,,`: no channel binding, no authzid (what Kafka's clients send).
    Plain,
    /// `y,,`.
    Yes,
    /// `p=tls-unique,,`.
    Binding,
    /// `n,a=<user>,`.
    Authzid,
    /// Anything.
    Raw(String),
}

#[derive(Arbitrary, Debug)]
enum Token {
    /// `authzid \0 user \0 password`.
    Plain {
        authzid: String,
        user: String,
        password: String,
    },
    /// A SCRAM client-first, `<gs2>[m=x,]n=<user>,r=<nonce>[,<key>=<value>...]`.
    ScramFirst {
        gs2: Gs2,
        reserved: bool,
        user: String,
        nonce: String,
        extensions: Vec<(u8, u8)>,
    },
    /// Anything (a client-final, a GSSAPI token, garbage).
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
enum Shape {
    /// As the broker sends it.
    Whole,
    /// Cut short.
    Cut(u16),
    /// With bytes after it.
    Trailing(Vec<u8>),
    /// Raw bytes.
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
enum Op {
    /// A SaslHandshake at version 0..=2 (only v1 is read).
    Handshake { version: u8, mechanism: Mechanism },
    /// A SaslAuthenticate at version 0..=3 (v0-2 are read).
    Authenticate { version: u8, token: Token },
    /// Any request frame.
    Request(Vec<u8>),
    /// The broker's answer to the oldest step not yet answered.
    Answer {
        error_code: i16,
        mechanisms: Vec<String>,
        shape: Shape,
    },
}

fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as i16).to_be_bytes());
    out.extend_from_slice(s);
}

fn put_uvarint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A request header: SaslAuthenticate v2 has header v2 (tagged fields), every other SASL
/// request header v1.
fn request_head(api_key: i16, version: i16) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&api_key.to_be_bytes());
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&7i32.to_be_bytes());
    put_string(&mut out, b"fuzz");
    if api_key == AUTHENTICATE && version >= 2 {
        out.push(0);
    }
    out
}

/// The SCRAM `saslname` of `user` (`=` as `=3D`, `,` as `=2C`).
fn escape(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

const EXTENSION_KEYS: [&str; 4] = ["tokenauth", "tokenAuth", "ext", "tokenauth "];
const EXTENSION_VALUES: [&str; 5] = ["true", "TRUE", "false", "x", "true "];

/// The token's bytes, and the user the step that carries it names (for PLAIN) or that the next
/// step names (for a SCRAM client-first), if the token is one the proxy must read a user from.
fn token(t: &Token) -> (Vec<u8>, Option<Option<String>>) {
    match t {
        Token::Plain {
            authzid,
            user,
            password,
        } => {
            let bytes = [authzid.as_bytes(), user.as_bytes(), password.as_bytes()].join(&0u8);
            let readable = ![authzid, user, password].iter().any(|p| p.contains('\0'));
            let expect = readable.then(|| (!user.is_empty()).then(|| user.clone()));
            (bytes, expect)
        }
        Token::ScramFirst {
            gs2,
            reserved,
            user,
            nonce,
            extensions,
        } => {
            let (header, standard) = match gs2 {
                Gs2::Plain => ("n,,".to_owned(), true),
                Gs2::Yes => ("y,,".to_owned(), true),
                Gs2::Binding => ("p=tls-unique,,".to_owned(), true),
                Gs2::Authzid => (format!("n,a={},", escape(user)), true),
                Gs2::Raw(h) => (h.clone(), false),
            };
            let nonce: String = nonce.chars().filter(|c| *c != ',').collect();
            let mut text = header;
            if *reserved {
                text.push_str("m=x,");
            }
            text.push_str(&format!("n={},r={nonce}", escape(user)));
            let mut token_auth = false;
            for (k, v) in extensions.iter().take(4) {
                let key = EXTENSION_KEYS[usize::from(*k) % EXTENSION_KEYS.len()];
                let value = EXTENSION_VALUES[usize::from(*v) % EXTENSION_VALUES.len()];
                text.push_str(&format!(",{key}={value}"));
                if key == "tokenauth" {
                    token_auth = value.eq_ignore_ascii_case("true");
                }
            }
            let expect = standard.then(|| (!token_auth && !user.is_empty()).then(|| user.clone()));
            (text.into_bytes(), expect)
        }
        Token::Raw(bytes) => (bytes.clone(), None),
    }
}

/// The broker's answer to `step`, as Kafka encodes it.
fn answer(step: &Step, error_code: i16, mechanisms: &[String]) -> Vec<u8> {
    let mut out = 7i32.to_be_bytes().to_vec();
    let flexible = step.api_key == AUTHENTICATE && step.version >= 2;
    if flexible {
        out.push(0); // response header v1: tagged fields
    }
    out.extend_from_slice(&error_code.to_be_bytes());
    if step.api_key == HANDSHAKE {
        let mechanisms = &mechanisms[..mechanisms.len().min(4)];
        out.extend_from_slice(&(mechanisms.len() as i32).to_be_bytes());
        for m in mechanisms {
            put_string(&mut out, &m.as_bytes()[..m.len().min(64)]);
        }
    } else if flexible {
        out.push(0); // error_message: null
        put_uvarint(&mut out, 1 + 3);
        out.extend_from_slice(b"v=x"); // auth_bytes
        out.extend_from_slice(&3_600_000i64.to_be_bytes());
        out.push(0);
    } else {
        out.extend_from_slice(&(-1i16).to_be_bytes());
        out.extend_from_slice(&3i32.to_be_bytes());
        out.extend_from_slice(b"v=x");
        if step.version >= 1 {
            out.extend_from_slice(&3_600_000i64.to_be_bytes());
        }
    }
    out
}

/// The error code of an answer to `step` that reads to its end as Kafka's readers read it (an
/// array count or length beyond the bytes is an error, a null where none is allowed too); bytes
/// after it are not read, as Kafka does not read them.
fn reads(step: &Step, frame: &[u8]) -> Option<i16> {
    fn read(step: &Step, r: &mut Reader<'_>) -> ReadResult<i16> {
        let flexible = step.api_key == AUTHENTICATE && step.version >= 2;
        r.i32("correlation_id")?;
        if flexible {
            r.tagged_fields("header")?;
        }
        let error_code = r.i16("error_code")?;
        if step.api_key == HANDSHAKE {
            r.each(false, false, "mechanisms", |r| {
                r.string(false, true, "mechanism").map(drop)
            })?;
        } else {
            r.string(flexible, true, "error_message")?;
            r.bytes(flexible, "auth_bytes")?;
            if step.version >= 1 {
                r.i64("session_lifetime_ms")?;
            }
            if flexible {
                r.tagged_fields("body")?;
            }
        }
        Ok(error_code)
    }
    read(step, &mut Reader::new(frame)).ok()
}

fuzz_target!(|input: (Option<String>, Vec<Op>)| {
    let (tls, ops) = input;
    let mut sasl = Sasl::new(tls.as_deref());
    // The steps not yet answered, as the identity's queue holds them.
    let mut pending: VecDeque<Step> = VecDeque::new();
    // What the previous op leaves for the next one, when nothing came between.
    enum Known {
        Plain,
        Scram,
        Other,
    }
    enum Last {
        Handshake(Known),
        ScramFirst(Option<String>),
    }
    let mut last: Option<Last> = None;
    for op in ops.iter().take(24) {
        let before = sasl.principal();
        let previous = last.take();
        match op {
            Op::Handshake { version, mechanism } => {
                let version = i16::from(version % 3);
                let name: &[u8] = match mechanism {
                    Mechanism::Plain => b"PLAIN",
                    Mechanism::Scram256 => b"SCRAM-SHA-256",
                    Mechanism::Scram512 => b"SCRAM-SHA-512",
                    Mechanism::Gssapi => b"GSSAPI",
                    Mechanism::Other(m) => &m.as_bytes()[..m.len().min(32)],
                };
                let mut frame = request_head(HANDSHAKE, version);
                put_string(&mut frame, name);
                let result = sasl.request(&frame);
                assert_eq!(result.is_ok(), version == 1, "SaslHandshake v{version}");
                if let Ok(step) = result {
                    let step = step.expect("a handshake leaves a step");
                    assert_eq!(step.user, None, "a handshake names no user");
                    pending.push_back(step);
                    last = Some(Last::Handshake(match mechanism {
                        Mechanism::Plain => Known::Plain,
                        Mechanism::Scram256 | Mechanism::Scram512 => Known::Scram,
                        _ => Known::Other,
                    }));
                }
            }
            Op::Authenticate { version, token: t } => {
                let version = i16::from(version % 4);
                let (bytes, expect) = token(t);
                let mut frame = request_head(AUTHENTICATE, version);
                if version >= 2 {
                    put_uvarint(&mut frame, bytes.len() as u32 + 1);
                    frame.extend_from_slice(&bytes);
                    frame.push(0);
                } else {
                    frame.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
                    frame.extend_from_slice(&bytes);
                }
                let result = sasl.request(&frame);
                assert_eq!(result.is_ok(), version <= 2, "SaslAuthenticate v{version}");
                if let Ok(step) = result {
                    let step = step.expect("an authenticate leaves a step");
                    match (previous, t, expect) {
                        // PLAIN's one step, right after its handshake.
                        (Some(Last::Handshake(Known::Plain)), Token::Plain { .. }, Some(user)) => {
                            assert_eq!(step.user, user, "the PLAIN authcid");
                        }
                        // SCRAM's client-first names no one yet; its client-final does.
                        (Some(Last::Handshake(Known::Scram)), Token::ScramFirst { .. }, expect) => {
                            assert_eq!(step.user, None, "a client-first names no user");
                            if let Some(user) = expect {
                                last = Some(Last::ScramFirst(user));
                            }
                        }
                        (Some(Last::ScramFirst(user)), _, _) => {
                            assert_eq!(step.user, user, "the client-first's user");
                        }
                        _ => {}
                    }
                    pending.push_back(step);
                }
            }
            Op::Request(frame) => {
                if let Ok(Some(step)) = sasl.request(frame) {
                    pending.push_back(step);
                }
            }
            Op::Answer {
                error_code,
                mechanisms,
                shape,
            } => {
                let Some(step) = pending.front().cloned() else {
                    assert!(sasl.answer(&[]).is_none());
                    continue;
                };
                let mut frame = answer(&step, *error_code, mechanisms);
                match shape {
                    Shape::Whole => {}
                    Shape::Cut(n) => frame.truncate(usize::from(*n) % (frame.len() + 1)),
                    Shape::Trailing(bytes) => frame.extend_from_slice(bytes),
                    Shape::Raw(bytes) => frame = bytes.clone(),
                }
                let answered = sasl.answer(&frame).expect("a step was pending");
                pending.pop_front();
                assert_eq!(answered.step, step, "answers go in the steps' order");
                let after = sasl.principal();
                assert_eq!(answered.changed, before != after);
                let success = reads(&step, &frame) == Some(0);
                match (&step.user, success) {
                    (Some(user), true) => assert_eq!(after, format!("User:{user}")),
                    _ => assert_eq!(after, before, "moved by {step:?}: {frame:?}"),
                }
            }
        }
        if !matches!(op, Op::Answer { .. }) {
            assert_eq!(sasl.principal(), before, "a request moved the principal");
        }
        assert_eq!(sasl.pending(), pending.len());
    }
});
