//! Logs as a weapon: one peer cannot make the server write more than a few lines per second (what
//! it holds back is counted in one line), the log has no colour codes when it is a file, and a
//! failed start says why once. Before the fix one anonymous client wrote 70,000 lines in 5 s.

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kquota_testkit::kquotad_exit;

use super::client::{describe_users, sasl_server, Conn};

const FLOOD: Duration = Duration::from_secs(3);

#[test]
fn one_peer_writes_a_few_lines_per_second() {
    // No super user on PLAINTEXT: every describe is refused, and each refusal is a warning.
    let (_server, log, plaintext, _) = sasl_server(&[]);
    let stop = AtomicBool::new(false);
    let requests = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|s| {
        // One connection pipelining refused describes.
        s.spawn(|| {
            let mut c = Conn::open(plaintext);
            let frame = c.frame(&describe_users(), 1);
            let batch: Vec<u8> = frame.repeat(64);
            while !stop.load(Ordering::Relaxed) {
                if c.stream.write_all(&batch).is_err() {
                    break;
                }
                for _ in 0..64 {
                    if c.recv::<kafka_protocol::messages::DescribeClientQuotasRequest>(1)
                        .is_none()
                    {
                        return;
                    }
                }
                requests.fetch_add(64, Ordering::Relaxed);
            }
        });
        // Connections that send an API the server does not serve, and are closed for it.
        s.spawn(|| {
            let mut garbage = 10u32.to_be_bytes().to_vec();
            garbage.extend_from_slice(&[0x7f, 0x7f, 0, 0, 0, 0, 0, 1, 0, 0]);
            while !stop.load(Ordering::Relaxed) {
                if let Ok(mut s) = TcpStream::connect(plaintext) {
                    let _ = s.write_all(&garbage);
                    let _ = std::io::Read::read(&mut s, &mut [0u8; 1]);
                    requests.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        std::thread::sleep(FLOOD);
        stop.store(true, Ordering::Relaxed);
    });
    let flood = started.elapsed();
    // What was held back is written once the interval is over.
    std::thread::sleep(Duration::from_millis(1500));
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("127.0.0.1")).collect();
    let sent = requests.load(Ordering::Relaxed);
    let seconds = flood.as_secs_f64() + 1.5;
    let per_second = lines.len() as f64 / seconds;
    eprintln!(
        "{sent} refused or malformed requests from 127.0.0.1 in {flood:?}: {} log lines about it ({per_second:.1} per second)",
        lines.len()
    );
    assert!(sent > 1000, "the flood ran ({sent} requests)");
    // At most 5 lines and a summary per peer per second; intervals start at the peer's first line,
    // so the flood and the wait after it span at most 6 of them.
    assert!(
        lines.len() <= 6 * 6,
        "{} lines about one peer:\n{}",
        lines.len(),
        lines.join("\n")
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("more lines like these from 127.0.0.1")),
        "what was held back is counted:\n{}",
        lines.join("\n")
    );
    assert!(
        text.contains("Principal = User:ANONYMOUS is Denied operation DescribeClientQuotas"),
        "the first of a kind is written:\n{text}"
    );
    assert!(!text.contains('\x1b'), "no colour codes in a log file");
}

#[test]
fn a_failed_start_says_why_once() {
    let (code, stderr) = kquotad_exit(&["--data-dir", "/dev/null/kquota"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(
        stderr.matches("cannot use data directory").count(),
        1,
        "one line for one error:\n{stderr}"
    );
    assert!(!stderr.contains('\x1b'), "{stderr}");
}
