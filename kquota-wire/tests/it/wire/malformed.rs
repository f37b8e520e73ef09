//! Bad input: truncated, padded, oversized, mutated and random frames, unknown keys and versions,
//! and response headers.

use super::*;

/// Valid frames of every served API and version, each with the number of bytes its message uses.
fn valid_frames() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for v in 0..=1 {
        frames.push(frame(
            48,
            v,
            1,
            &describe_request(
                vec![
                    component("user", 0, Some("alice")),
                    component("client-id", 2, None),
                ],
                true,
            ),
        ));
        frames.push(frame(49, v, 1, &golden_alter_request()));
        frames.push(frame(60, v, 1, &DescribeClusterRequest::default()));
    }
    for v in 0..=4 {
        frames.push(frame(18, v, 1, &api_versions_request()));
    }
    for v in 1..=12 {
        frames.push(frame(
            3,
            v,
            1,
            &MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(TopicName(s("t"))))
            ])),
        ));
    }
    frames.push(draft_frame(1, &golden_draft_request()));
    frames
}

#[test]
fn truncated_frames_close_without_touching_the_engine() {
    let h = seeded();
    let before = snapshot(&h);
    for f in valid_frames() {
        for cut in 0..f.len() {
            match h.handle(&mut Session::plaintext(), &f[..cut]) {
                Outcome::Close(_) => {}
                // An ApiVersions v0–2 body is empty: cutting nothing of it still answers.
                Outcome::Respond(_) => assert_eq!(f[1], 18, "a cut {cut} of {} answered", hex(&f)),
                Outcome::RespondAndClose(..) => {
                    panic!("a cut {cut} of {} failed authentication", hex(&f))
                }
            }
            assert_eq!(snapshot(&h), before);
        }
    }
}

#[test]
fn garbage_after_any_request_is_ignored_as_kafka_does() {
    // Every API, the draft (50) included: one rule, in the handler's decode step.
    for f in valid_frames() {
        let clean = respond(&handler(), &f);
        let mut dirty = f.clone();
        dirty.extend_from_slice(&[0xff; 9]);
        assert_eq!(respond(&handler(), &dirty), clean, "{}", hex(&f));
    }
}

/// A 48 v0 frame header followed by `body`.
fn raw(api_key: i16, version: i16, flexible_header: bool, body: &[u8]) -> Vec<u8> {
    let mut buf = BytesMut::new();
    buf.put_i16(api_key);
    buf.put_i16(version);
    buf.put_i32(77);
    buf.put_i16(-1); // null client id
    if flexible_header {
        buf.put_u8(0);
    }
    buf.put_slice(body);
    buf.to_vec()
}

#[test]
fn huge_counts_close_without_allocating() {
    let h = seeded();
    let before = snapshot(&h);
    let cases: Vec<Vec<u8>> = vec![
        // 48 v0: 2^31-1 components.
        raw(48, 0, false, &[0x7f, 0xff, 0xff, 0xff, 0]),
        // 48 v1: a compact count of 2^32-2.
        raw(48, 1, true, &[0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0]),
        // 49 v0: 2^31-1 entries.
        raw(49, 0, false, &[0x7f, 0xff, 0xff, 0xff, 0]),
        // 49 v0: one entry whose entity count is huge.
        raw(
            49,
            0,
            false,
            &[0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0],
        ),
        // 49 v1: one entry, no entity parts, a huge op count.
        raw(49, 1, true, &[2, 1, 0xfe, 0xff, 0xff, 0xff, 0x0f, 0, 0, 0]),
        // 49 v1: a huge tagged-field count at the end.
        raw(49, 1, true, &[1, 0, 0xff, 0xff, 0xff, 0xff, 0x07]),
        // 49 v1: a tagged field claiming 2^32-1 bytes.
        raw(49, 1, true, &[1, 0, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f]),
        // 49 v0: a string claiming 32767 bytes.
        raw(49, 0, false, &[0, 0, 0, 1, 0, 0, 0, 1, 0x7f, 0xff, b'u']),
        // 49 v1: a compact string longer than Kafka allows (0x8000 bytes), all present.
        {
            let mut body = vec![2, 2, 0x81, 0x80, 0x02];
            body.extend(std::iter::repeat_n(b'a', 0x8000));
            body.extend_from_slice(&[0, 0, 1, 0, 0]);
            raw(49, 1, true, &body)
        },
        // 49 v1: an over-long varint.
        raw(49, 1, true, &[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
        // 3 v9: a huge topic count.
        raw(3, 9, true, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        // 3 v0: a huge topic count.
        raw(3, 0, false, &[0x7f, 0xff, 0xff, 0xff]),
        // 50: 2^31-1 entries, and one entry with a huge op count.
        raw(50, 0, false, &[0x7f, 0xff, 0xff, 0xff, 0]),
        raw(
            50,
            0,
            false,
            &[0, 0, 0, 1, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0],
        ),
        // A negative array length other than -1.
        raw(49, 0, false, &[0xff, 0xff, 0xff, 0xfe, 0]),
        // A null where the schema has none.
        raw(48, 0, false, &[0xff, 0xff, 0xff, 0xff, 0]),
    ];
    for f in cases {
        match h.handle(&mut Session::plaintext(), &f) {
            Outcome::Close(CloseReason::MalformedRequest { .. }) => {}
            other => panic!("{}: {other:?}", hex(&f)),
        }
        assert_eq!(snapshot(&h), before);
    }
}

#[test]
fn invalid_utf8_closes() {
    let h = handler();
    // 49 v0: one entry, one entity part whose type is the byte 0xff.
    let f = raw(
        49,
        0,
        false,
        &[
            0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0,
        ],
    );
    assert!(matches!(
        close(&h, &f),
        CloseReason::MalformedRequest { .. }
    ));
}

#[test]
fn unknown_api_keys_and_versions_close() {
    let h = seeded();
    let before = snapshot(&h);
    for (key, version) in [
        (0, 9),
        (1, 12),
        (19, 5),
        (51, 0),
        (1000, 0),
        (-1, 0),
        (i16::MIN, 0),
        (17, 1),
    ] {
        let f = raw(key, version, false, &[0, 0, 0, 0]);
        assert_eq!(
            close(&h, &f),
            CloseReason::UnsupportedApi {
                api_key: key,
                api_version: version
            }
        );
    }
    for (key, version) in [
        (48, 2),
        (48, -1),
        (49, 2),
        (50, 1),
        (3, 13),
        (60, 2),
        (3, -1),
    ] {
        let f = raw(key, version, true, &[0, 0, 0, 0]);
        assert_eq!(
            close(&h, &f),
            CloseReason::UnsupportedVersion {
                api_key: key,
                api_version: version
            }
        );
    }
    // Frames too short for a header.
    for f in [
        &[][..],
        &[0],
        &[0, 48],
        &[0, 48, 0],
        &[0, 48, 0, 0, 0, 0, 0],
    ] {
        assert!(matches!(close(&h, f), CloseReason::MalformedHeader(_)));
    }
    assert_eq!(snapshot(&h), before);
}

#[test]
fn responses_carry_the_correlation_id_and_header_version() {
    let h = handler();
    // 48 v1 answers with a v1 header (a tagged-field byte after the correlation id).
    let bytes = respond(
        &h,
        &frame(48, 1, 0x01020304, &describe_request(vec![], true)),
    );
    assert_eq!(&bytes[..5], &[1, 2, 3, 4, 0]);
    // ApiVersions v3 answers with a v0 header.
    let bytes = respond(&h, &frame(18, 3, 0x01020304, &api_versions_request()));
    assert_eq!(&bytes[..6], &[1, 2, 3, 4, 0, 0]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn mutated_frames_never_panic(index in 0usize..64, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6), cut in any::<usize>()) {
        let frames = valid_frames();
        let mut f = frames[index % frames.len()].clone();
        for (pos, byte) in flips {
            let i = pos % f.len();
            f[i] = byte;
        }
        let len = f.len();
        f.truncate(len - cut % (len / 4 + 1));
        let h = seeded();
        let _ = h.handle(&mut Session::plaintext(), &f);
    }

    #[test]
    fn random_frames_never_panic_or_touch_the_engine(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let h = seeded();
        let before = snapshot(&h);
        let _ = h.handle(&mut Session::plaintext(), &bytes);
        // Random bytes rarely form a valid alter; when the key is not 49/50 they never may.
        if bytes.len() < 2 || !matches!(i16::from_be_bytes([bytes[0], bytes[1]]), 49 | 50) {
            prop_assert_eq!(snapshot(&h), before);
        }
    }
}
