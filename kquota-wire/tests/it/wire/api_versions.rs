//! ApiVersions (18): what is listed, an unsupported version's v0 answer, the software name.

use super::*;

const API_VERSIONS_V0_RESPONSE: &str =
    "0000000300000000000600030000000c001200000004003000000001003100000001003200000000003c00000001";
const API_VERSIONS_V3_RESPONSE: &str = "\
    0000000300000700030000000c0000120000000400003000000001000031000000010000320000000000003c00000001
    000000000000";
const API_VERSIONS_UNSUPPORTED_RESPONSE: &str = "00000003002300000001001200000004";

#[test]
fn api_versions_lists_what_is_served() {
    let h = handler();
    for version in 0..=4 {
        let bytes = respond(&h, &frame(18, version, 3, &api_versions_request()));
        if version == 0 {
            assert_hex("ApiVersions v0", &bytes, API_VERSIONS_V0_RESPONSE);
        }
        if version == 3 {
            assert_hex("ApiVersions v3", &bytes, API_VERSIONS_V3_RESPONSE);
        }
        let resp: ApiVersionsResponse = decode(&bytes, version, 3);
        assert_eq!(resp.error_code, 0);
        let listed: Vec<(i16, i16, i16)> = resp
            .api_keys
            .iter()
            .map(|k| (k.api_key, k.min_version, k.max_version))
            .collect();
        assert_eq!(
            listed,
            vec![
                (3, 0, 12),
                (18, 0, 4),
                (48, 0, 1),
                (49, 0, 1),
                (50, 0, 0),
                (60, 0, 1)
            ]
        );
    }
}

#[test]
fn api_versions_of_an_unsupported_version_answers_in_v0_layout() {
    let h = handler();
    for version in [5, 127, -1, i16::MAX] {
        // The body is not read: garbage after the header is fine.
        let mut f = frame(18, version.clamp(0, 4), 3, &api_versions_request());
        f[2..4].copy_from_slice(&version.to_be_bytes());
        if version >= 3 {
            // Header v2: the tagged-field byte is already there (the client built a v3+ header).
        } else {
            // Header v1: drop the tagged-field byte the v3+ header had.
            f = frame(18, 0, 3, &api_versions_request());
            f[2..4].copy_from_slice(&version.to_be_bytes());
        }
        f.extend_from_slice(&[0xde, 0xad]);
        let bytes = respond(&h, &f);
        assert_hex(
            "ApiVersions unsupported",
            &bytes,
            API_VERSIONS_UNSUPPORTED_RESPONSE,
        );
        let resp: ApiVersionsResponse = decode(&bytes, 0, 3);
        assert_eq!(resp.error_code, 35);
        let listed: Vec<(i16, i16, i16)> = resp
            .api_keys
            .iter()
            .map(|k| (k.api_key, k.min_version, k.max_version))
            .collect();
        assert_eq!(listed, vec![(18, 0, 4)]);
    }
}

#[test]
fn api_versions_v3_checks_the_software_name() {
    let h = handler();
    for (name, version) in [("bad name", "1"), ("ok", "-1"), ("", "1")] {
        let req = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_string(name.to_owned()))
            .with_client_software_version(StrBytes::from_string(version.to_owned()));
        for v in [3, 4] {
            let resp: ApiVersionsResponse = decode(&respond(&h, &frame(18, v, 3, &req)), v, 3);
            assert_eq!(resp.error_code, 42);
            assert!(resp.api_keys.is_empty());
        }
    }
}
