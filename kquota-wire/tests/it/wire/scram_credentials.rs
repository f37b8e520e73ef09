//! DescribeUserScramCredentials (50 by default): golden bytes, Kafka's per-user errors, null and
//! empty lists, authorization, the draft setting switching 50, ApiVersions, and bad input.

use super::*;

use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    DescribeUserScramCredentialsRequest as ScramRequest,
    DescribeUserScramCredentialsResponse as ScramResponse,
};
use kafka_protocol::protocol::Message;
use kquota_wire::{
    Authorizer, Credentials, Principal, SaslConfig, SaslMechanism, ScramCredential, ScramMechanism,
    SecurityProtocol, DESCRIBE_USER_SCRAM_CREDENTIALS,
};

/// A salt and keys that must never appear in an answer.
const SECRET: u8 = 0xA5;

fn credential(mechanism: ScramMechanism, iterations: u32) -> ScramCredential {
    let len = match mechanism {
        ScramMechanism::Sha256 => 32,
        ScramMechanism::Sha512 => 64,
    };
    ScramCredential {
        mechanism,
        salt: vec![SECRET; 24],
        iterations,
        stored_key: vec![SECRET; len],
        server_key: vec![SECRET; len],
    }
}

/// alice: SHA-512 (8192) and SHA-256 (4096); bob: SHA-256 (4096).
fn users() -> Credentials {
    let mut c = Credentials::new();
    c.insert("alice", credential(ScramMechanism::Sha512, 8192));
    c.insert("alice", credential(ScramMechanism::Sha256, 4096));
    c.insert("bob", credential(ScramMechanism::Sha256, 4096));
    c
}

fn sasl_handler() -> Handler {
    Handler::new(Arc::new(Engine::new()), info()).with_sasl(SaslConfig {
        mechanisms: SaslMechanism::ALL.to_vec(),
        credentials: Arc::new(users()),
    })
}

fn plain_handler() -> Handler {
    Handler::new(Arc::new(Engine::new()), info())
}

fn request(users: Option<&[&str]>) -> ScramRequest {
    ScramRequest::default().with_users(users.map(|u| {
        u.iter()
            .map(|n| UserName::default().with_name(StrBytes::from_string((*n).to_owned())))
            .collect()
    }))
}

fn scram_frame(correlation_id: i32, req: &ScramRequest) -> Vec<u8> {
    frame(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, correlation_id, req)
}

fn ask(h: &Handler, session: &mut Session, req: &ScramRequest) -> ScramResponse {
    match h.handle(session, &scram_frame(3, req)) {
        Outcome::Respond(b) => decode(&b, 0, 3),
        other => panic!("not answered: {other:?}"),
    }
}

/// One line per result: user, code, message, mechanism:iterations.
fn lines(r: &ScramResponse) -> Vec<String> {
    r.results
        .iter()
        .map(|u| {
            let infos: Vec<String> = u
                .credential_infos
                .iter()
                .map(|i| format!("{}:{}", i.mechanism, i.iterations))
                .collect();
            format!(
                "{}|{}|{}|{}",
                u.user.as_str(),
                u.error_code,
                u.error_message.as_deref().unwrap_or("<null>"),
                infos.join(",")
            )
        })
        .collect()
}

/// Header v2 (key 50, v0, correlation 11, client "kq", no tags); Users: 4 (compact 5) names, each
/// with no tags; no tags.
const NAMED_REQUEST: &str = "\
    0032 0000 0000000b 0002 6b71 00
    05 06 616c696365 00 07 6e6f626f6479 00 04 626f62 00 04 626f62 00 00";
/// Header v1 (correlation 11, no tags); throttle 0, error 0, message "" (compact 1); 3 results
/// (compact 4): bob 92 and its 82-byte message, no infos; alice 0 "", infos 1:4096 and 2:8192;
/// nobody 91 and its 65-byte message; no tags.
const NAMED_RESPONSE: &str = "\
    0000000b 00 00000000 0000 01 04
    04 626f62 005c 53 43616e6e6f7420646573637269626520534352414d2063726564656e7469616c7320666f72
    207468652073616d65207573657220747769636520696e20612073696e676c6520726571756573743a20626f62 01 00
    06 616c696365 0000 01 03 01 00001000 00 02 00002000 00 00
    07 6e6f626f6479 005b 42 417474656d707420746f206465736372696265206120757365722063726564656e7469
    616c207468617420646f6573206e6f742065786973743a206e6f626f6479 01 00
    00";

#[test]
fn golden_named_users() {
    let h = sasl_handler();
    let req = request(Some(&["alice", "nobody", "bob", "bob"]));
    let f = scram_frame(11, &req);
    assert_hex("scram request", &f, NAMED_REQUEST);
    let b = respond(&h, &f);
    assert_hex("scram response", &b, NAMED_RESPONSE);
    let r: ScramResponse = decode(&b, 0, 11);
    assert_eq!((r.throttle_time_ms, r.error_code), (0, 0));
    // Kafka leaves the top-level message at its schema default on success.
    assert_eq!(r.error_message.as_deref(), Some(""));
    assert_eq!(
        lines(&r),
        [
            "bob|92|Cannot describe SCRAM credentials for the same user twice in a single \
             request: bob|",
            "alice|0||1:4096,2:8192",
            "nobody|91|Attempt to describe a user credential that does not exist: nobody|",
        ],
        "Kafka's ScramImage.describe, in its HashMap's order (checked with jshell)"
    );
}

#[test]
fn null_and_empty_lists_mean_every_user_and_nothing_secret_leaves() {
    let h = sasl_handler();
    for users in [None, Some(&[][..])] {
        let f = scram_frame(4, &request(users));
        let b = respond(&h, &f);
        assert!(
            !b.windows(8).any(|w| w.iter().all(|x| *x == SECRET)),
            "a salt or key in {}",
            hex(&b)
        );
        let r: ScramResponse = decode(&b, 0, 4);
        assert_eq!(r.error_code, 0);
        assert_eq!(
            lines(&r),
            ["bob|0||1:4096", "alice|0||1:4096,2:8192"],
            "{users:?}: every user, in Java HashMap order"
        );
    }
}

#[test]
fn without_sasl_there_are_no_users() {
    let h = plain_handler();
    let mut session = Session::plaintext();
    assert!(ask(&h, &mut session, &request(None)).results.is_empty());
    assert!(ask(&h, &mut session, &request(Some(&[])))
        .results
        .is_empty());
    assert_eq!(
        lines(&ask(&h, &mut session, &request(Some(&["alice"])))),
        ["alice|91|Attempt to describe a user credential that does not exist: alice|"]
    );
    // A SASL listener's users are the handler's, whichever listener asks.
    let h = sasl_handler();
    assert_eq!(ask(&h, &mut session, &request(None)).results.len(), 2);
}

#[test]
fn only_super_users_may_describe_credentials() {
    let h = sasl_handler().with_authorizer(Authorizer::new([Principal::user("admin")]));
    // Kafka's DESCRIBE on the cluster, which without ACLs only super users have: the answer names
    // every SASL user, so an authenticated principal that may describe quotas may not list them.
    // A refusal is Kafka's getErrorResponse: the error at the top level and once per requested
    // user, with an empty name.
    let mut anonymous = Session::plaintext();
    let alice = || {
        Session::new("SSL", SecurityProtocol::Ssl, None).with_principal(Principal::user("alice"))
    };
    for session in [&mut anonymous, &mut alice()] {
        let r = ask(&h, session, &request(Some(&["alice", "zed"])));
        assert_eq!(r.error_code, 31);
        assert_eq!(
            r.error_message.as_deref(),
            Some("Cluster authorization failed.")
        );
        assert_eq!(
            lines(&r),
            [
                "|31|Cluster authorization failed.|",
                "|31|Cluster authorization failed.|"
            ]
        );
        // A null list: the top-level error and no results (Kafka's own loop throws on it).
        let r = ask(&h, session, &request(None));
        assert_eq!((r.error_code, r.results.len()), (31, 0));
    }
    // A super user may.
    let mut admin =
        Session::new("SSL", SecurityProtocol::Ssl, None).with_principal(Principal::user("admin"));
    let r = ask(&h, &mut admin, &request(None));
    assert_eq!((r.error_code, r.results.len()), (0, 2));
    // Letting anonymous describe quotas does not let it list SASL users.
    let h = sasl_handler().with_authorizer(
        Authorizer::new([Principal::user("admin")]).allow_anonymous_describe(true),
    );
    assert_eq!(ask(&h, &mut anonymous, &request(None)).error_code, 31);
}

#[test]
fn a_refusal_of_many_users_is_streamed_not_decoded() {
    // 400,000 users in one refused request: the answer is one result per user, made as it is
    // written (Handler::handle_streaming returns a stream, never a whole decoded request).
    let h = sasl_handler().with_authorizer(Authorizer::new([Principal::user("admin")]));
    let names: Vec<String> = (0..400_000).map(|i| format!("u{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let frame = scram_frame(3, &request(Some(&names)));
    let mut session = Session::plaintext();
    let reply = h.handle_streaming(&mut session, bytes::Bytes::from(frame.clone()));
    let kquota_wire::Reply::Stream(stream) = reply else {
        panic!("a refusal of many users must be streamed");
    };
    let streamed = stream.into_bytes();
    // The same bytes Handler::handle gives, and Kafka's answer: 400,000 empty-named refusals.
    let kquota_wire::Outcome::Respond(whole) = h.handle(&mut session, &frame) else {
        panic!("a refusal is answered");
    };
    assert_eq!(streamed, whole);
    let r = ask(&h, &mut session, &request(Some(&names)));
    assert_eq!((r.error_code, r.results.len()), (31, 400_000));
}

#[test]
fn the_draft_setting_switches_50() {
    let scram = scram_frame(2, &request(Some(&["alice"])));
    let draft = draft_frame(1, &golden_draft_request());

    // Default: DescribeUserScramCredentials. The draft's frame is read as one too (see below), and
    // nothing is altered.
    let h = plain_handler();
    let r: ScramResponse = decode(&respond(&h, &scram), 0, 2);
    assert_eq!(r.results[0].error_code, 91);
    let _: ScramResponse = decode(&respond(&h, &draft), 0, 1);
    assert_eq!(h.engine().entity_count(), 0);

    // The draft enabled: 50 is AlterQuotas. A Kafka client's DescribeUserScramCredentials does not
    // decode as a draft request and closes the connection; the draft's frame alters.
    let h = plain_handler().with_draft_alter_quotas(true);
    assert!(matches!(
        close(&h, &scram),
        CloseReason::MalformedRequest { api_key: 50, .. }
    ));
    let b = respond(&h, &draft);
    AlterQuotasResponse::decode(&b[4..]).expect("a draft answer, response header v0");
    assert!(h.engine().entity_count() > 0);
}

/// Why a setting, not the bytes: the two requests share key 50 and version 0, and request header v1
/// and v2 differ only by the tagged-field count v2 puts after the client id, which to a v1 reader is
/// the body's first byte. An empty draft batch (entry count 0, ValidateOnly false) is also a whole
/// DescribeUserScramCredentials request (header tags 0, Users null, tags 0, then two bytes that
/// Kafka's rule ignores): both readings succeed, and only the server can say which it serves.
#[test]
fn an_empty_draft_batch_is_also_a_whole_scram_request() {
    let empty = AlterQuotasRequest {
        entries: Vec::new(),
        validate_only: false,
    };
    let f = draft_frame(8, &empty);
    assert_hex(
        "empty draft",
        &f,
        "0032 0000 00000008 0002 6b71 00000000 00",
    );
    let scram = plain_handler();
    let r: ScramResponse = decode(&respond(&scram, &f), 0, 8);
    assert_eq!((r.error_code, r.results.len()), (0, 0));
    let draft = plain_handler().with_draft_alter_quotas(true);
    let b = respond(&draft, &f);
    let answer = AlterQuotasResponse::decode(&b[4..]).unwrap();
    assert!(answer.entries.is_empty());
}

#[test]
fn api_versions_lists_50_at_the_versions_served_and_never_51() {
    let default = plain_handler();
    let draft = plain_handler().with_draft_alter_quotas(true);
    for (h, sasl) in [(&default, false), (&draft, false), (&sasl_handler(), true)] {
        let session = if sasl {
            Session::new("SASL_PLAINTEXT", SecurityProtocol::SaslPlaintext, None)
        } else {
            Session::plaintext()
        };
        let apis = h.supported_apis(&session);
        let fifty: Vec<_> = apis.iter().filter(|a| a.api_key == 50).collect();
        assert_eq!(fifty.len(), 1);
        assert_eq!((fifty[0].min_version, fifty[0].max_version), (0, 0));
        assert!(!apis.iter().any(|a| a.api_key == 51), "51 is not served");
        let r: ApiVersionsResponse =
            decode(&respond(h, &frame(18, 3, 1, &api_versions_request())), 3, 1);
        assert!(r
            .api_keys
            .iter()
            .any(|k| (k.api_key, k.min_version, k.max_version) == (50, 0, 0)));
    }
    // Every version kafka-protocol can decode is served, and nothing beyond it.
    assert_eq!(
        (ScramRequest::VERSIONS.min, ScramRequest::VERSIONS.max),
        (0, 0)
    );
    let mut f = scram_frame(1, &request(None));
    f[3] = 1;
    assert!(matches!(
        close(&default, &f),
        CloseReason::UnsupportedVersion {
            api_key: 50,
            api_version: 1
        }
    ));
    // AlterUserScramCredentials (51): an unknown API, as in ApiVersions.
    let mut f = scram_frame(1, &request(None));
    f[1] = 51;
    assert!(matches!(
        close(&default, &f),
        CloseReason::UnsupportedApi { api_key: 51, .. }
    ));
}

#[test]
fn bad_input_closes_and_trailing_bytes_are_ignored() {
    let h = sasl_handler();
    let f = scram_frame(5, &request(Some(&["alice", "bob"])));
    let expected = respond(&h, &f);
    // Every truncation closes the connection (the header's own cuts as a malformed header).
    for cut in 0..f.len() {
        assert!(
            matches!(
                h.handle(&mut Session::plaintext(), &f[..cut]),
                Outcome::Close(_)
            ),
            "cut at {cut}"
        );
    }
    let mut dirty = f.clone();
    dirty.extend_from_slice(&[0xff, 0, 1]);
    assert_eq!(respond(&h, &dirty), expected);
    let header = &f[..13];
    for body in [
        // 2^31 users in a handful of bytes.
        &[0x80, 0x80, 0x80, 0x80, 0x08, 0][..],
        // A name over Kafka's 0x7fff bytes.
        &[0x02, 0x80, 0x80, 0x02, b'a', 0, 0][..],
        // A varint over five bytes.
        &[0x80, 0x80, 0x80, 0x80, 0x80, 0x01][..],
        // Invalid UTF-8.
        &[0x02, 0x02, 0xff, 0, 0][..],
        // A null name.
        &[0x02, 0x00, 0, 0][..],
    ] {
        let mut bad = header.to_vec();
        bad.extend_from_slice(body);
        assert!(
            matches!(
                close(&h, &bad),
                CloseReason::MalformedRequest { api_key: 50, .. }
            ),
            "{}",
            hex(&bad)
        );
    }
}

#[test]
fn many_users_are_answered_in_linear_time() {
    // 200,000 distinct names and each repeated once: one result per distinct name, quickly.
    let names: Vec<String> = (0..200_000).map(|i| format!("u{i}")).collect();
    let mut users: Vec<UserName> = names
        .iter()
        .map(|n| UserName::default().with_name(StrBytes::from_string(n.clone())))
        .collect();
    users.extend(users.clone());
    let req = ScramRequest::default().with_users(Some(users));
    let started = std::time::Instant::now();
    let r = ask(&sasl_handler(), &mut Session::plaintext(), &req);
    assert_eq!(r.results.len(), 200_000);
    assert!(r.results.iter().all(|u| u.error_code == 92));
    assert!(started.elapsed().as_secs() < 20, "{:?}", started.elapsed());
}

proptest! {
    #[test]
    fn random_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..64)) {
        let h = sasl_handler();
        let mut f = scram_frame(1, &request(None))[..13].to_vec();
        f.extend_from_slice(&body);
        let _ = h.handle(&mut Session::plaintext(), &f);
        prop_assert_eq!(h.engine().entity_count(), 0);
    }
}

#[test]
fn after_a_failed_authentication_nothing_is_served() {
    use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
    let h = sasl_handler();
    let mut session = Session::new("SASL", SecurityProtocol::SaslPlaintext, None);
    let handshake = SaslHandshakeRequest::default().with_mechanism(s("PLAIN"));
    assert!(matches!(
        h.handle(&mut session, &frame(17, 1, 1, &handshake)),
        Outcome::Respond(_)
    ));
    // A wrong password: the error answer, then the connection is to close.
    let wrong = SaslAuthenticateRequest::default()
        .with_auth_bytes(Bytes::from_static(b"\0alice\0not her password"));
    assert!(matches!(
        h.handle(&mut session, &frame(36, 2, 2, &wrong)),
        Outcome::RespondAndClose(..)
    ));
    // A host that goes on calling the handler gets nothing more served: the session is neither
    // authenticated nor anonymous-and-trusted, and every request is refused before its API runs.
    assert!(!session.is_authenticated());
    let describe = frame(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 3, &request(None));
    assert!(matches!(
        h.handle(&mut session, &describe),
        Outcome::Close(CloseReason::Unauthenticated { .. })
    ));
    assert!(matches!(
        h.handle(&mut session, &frame(36, 2, 4, &wrong)),
        Outcome::Close(CloseReason::Unauthenticated { .. })
    ));
}
