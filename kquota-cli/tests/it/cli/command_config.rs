//! --command-config: its keys are used, unknown keys are warned about, a wrong file is a usage
//! error.

use kquota_testkit::temp_dir;

use super::{kafka_quotas, run, start};

#[test]
fn command_config_keys_are_used_and_unknown_keys_warned_about() {
    let server = start();
    let dir = temp_dir("props");
    std::fs::create_dir_all(&dir).unwrap();
    let props = dir.join("admin.properties");
    std::fs::write(
        &props,
        "# admin client\nsecurity.protocol=PLAINTEXT\nclient.id=ops\nrequest.timeout.ms=5000\nretries=3\n",
    )
    .unwrap();
    let props_arg = props.to_str().unwrap();
    let r = kafka_quotas(&server, &["--list", "--command-config", props_arg]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.stderr,
        format!(
            "warning: --command-config {props_arg}: ignoring unknown key 'retries' (understood: {})\nnote: no configured entity matches; nothing to show\n",
            kquota_cli::KNOWN_KEYS.join(", ")
        )
    );

    // bootstrap.servers from the file stands in for --bootstrap-server.
    std::fs::write(&props, format!("bootstrap.servers={}\n", server.addr)).unwrap();
    let r = run(
        env!("CARGO_BIN_EXE_kafka-quotas"),
        None,
        &["--list", "--command-config", props_arg],
    );
    assert_eq!(
        (r.code, r.stderr.as_str()),
        (0, "note: no configured entity matches; nothing to show\n"),
        "{r:?}"
    );

    std::fs::write(&props, "security.protocol=SASL_SSL\n").unwrap();
    let r = kafka_quotas(&server, &["--list", "--command-config", props_arg]);
    assert_eq!(r.code, 2, "{r:?}");
    assert_eq!(
        r.stderr,
        format!("error: --command-config {props_arg}: security.protocol=SASL_SSL needs sasl.mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)\n")
    );
}
