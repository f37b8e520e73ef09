//! Security settings that cannot work stop kquotad with a message and exit status 2, as do bad
//! `scram-credential` arguments.

use kquota_testkit::{kquotad_exit, temp_dir};

use super::support::*;

#[test]
fn bad_security_settings_exit_with_a_message() {
    let pki = pki();
    let dir = temp_dir("security-bad");
    let run = |args: &[&str]| {
        let mut all = vec!["--data-dir", dir.to_str().expect("utf-8 path")];
        all.extend_from_slice(args);
        kquotad_exit(&all)
    };
    let (code, err) = run(&["--listeners", "SSL://127.0.0.1:0"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("a TLS listener needs ssl.keystore.location"),
        "{err}"
    );
    let (code, err) = run(&["--listeners", "SASL_PLAINTEXT://127.0.0.1:0"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("a SASL listener needs sasl.credentials.file"),
        "{err}"
    );
    let (code, err) = run(&[
        "--listeners",
        "SASL_PLAINTEXT://127.0.0.1:0",
        "--sasl-credentials-file",
        &pki.path("ca.pem"),
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("not a credentials file"), "{err}");
    let (code, err) = run(&["--sasl-enabled-mechanisms", "GSSAPI"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("unsupported SASL mechanism 'GSSAPI'"), "{err}");
    let (code, err) = run(&["--super-users", "alice"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("write Type:name"), "{err}");
    let (code, err) = run(&["--override", "ssl.client.auth=always"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("expected required, requested or none"),
        "{err}"
    );
    let (code, err) = run(&[
        "--listeners",
        "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "--listener-security-protocol-map",
        "INTERNAL:PLAINTEXT,EXTERNAL:SSL",
        "--override",
        &format!("ssl.keystore.location={}", pki.path("ca.pem")),
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("no usable PEM private key"), "{err}");
    // scram-credential refuses an empty password and a bad mechanism.
    let (code, err) = kquotad_exit(&[
        "scram-credential",
        "--user",
        "a",
        "--mechanism",
        "SCRAM-SHA-1",
    ]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("expected SCRAM-SHA-256 or SCRAM-SHA-512"),
        "{err}"
    );
    let (code, err) = kquotad_exit(&["scram-credential", "--user", "a"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("no password on stdin"), "{err}");
}
