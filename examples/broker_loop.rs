//! A simulated broker request loop: several users and clients produce as fast as they are allowed,
//! honouring every throttle kquota returns, on a simulated clock.
//!
//! ```sh
//! cargo run --release --example broker_loop                        # print each client's long-run rate
//! cargo run --release --example broker_loop -- --svg docs/convergence.svg   # also draw the runs
//! ```
//!
//! Without `--svg` the example only prints and writes no file. `--svg PATH` draws the runs as an SVG
//! and writes it to PATH, replacing whatever is there: `docs/convergence.svg`, which the repository
//! keeps, is regenerated only when that path is given.
//!
//! Four scenarios, each against its limit: a `broker_bps` user quota, a `bps` quota on a 3-broker
//! cluster, two users with `shares` 2:1 of one capacity, and two clients sharing a KIP-55 remainder.

use std::fmt::Write as _;
use std::sync::Arc;

use kquota::meter::{ClientMeter, Clock, ManualClock, Meter, MeterConfig};
use kquota::{Alteration, Engine, Entity, EntityName};

const REQUEST_BYTES: u64 = 10_000;
const SECONDS: u64 = 300;

struct Scenario {
    title: &'static str,
    /// (label, user, client-id, expected long-run bytes/s)
    clients: Vec<(&'static str, &'static str, &'static str, f64)>,
    engine: Engine,
    config: Vec<Alteration>,
}

fn user(name: &str) -> Alteration {
    Alteration::new(&Entity::User(EntityName::named(name).unwrap()))
}

fn user_client(u: &str, c: &str) -> Alteration {
    Alteration::new(&Entity::UserClient(
        EntityName::named(u).unwrap(),
        EntityName::named(c).unwrap(),
    ))
}

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            title: "broker_bps: producer_byte_rate=100000 on {user=alice}",
            clients: vec![("alice/app", "alice", "app", 100_000.0)],
            engine: Engine::new(),
            config: vec![user("alice").set("producer_byte_rate", 100_000.0)],
        },
        Scenario {
            title: "bps: producer_byte_rate:bps=300000 on {user=bob}, 3 brokers",
            clients: vec![("bob/app", "bob", "app", 100_000.0)],
            engine: Engine::builder().broker_count(3).build().unwrap(),
            config: vec![user("bob").set("producer_byte_rate:bps", 300_000.0)],
        },
        Scenario {
            title: "shares 2:1 of a 300000 B/s producer capacity",
            clients: vec![
                ("carol (200 shares)", "carol", "app", 200_000.0),
                ("dave (100 shares)", "dave", "app", 100_000.0),
            ],
            engine: Engine::builder()
                .producer_capacity(300_000.0)
                .build()
                .unwrap(),
            config: vec![
                user("carol").set("producer_byte_rate:shares", 200.0),
                user("dave").set("producer_byte_rate:shares", 100.0),
            ],
        },
        Scenario {
            title: "KIP-55: {user=erin} 300000, sub-quota {erin, batch} 100000",
            clients: vec![
                ("erin/batch (sub-quota)", "erin", "batch", 100_000.0),
                ("erin/web (remainder, shared)", "erin", "web", 100_000.0),
                ("erin/api (remainder, shared)", "erin", "api", 100_000.0),
            ],
            engine: Engine::new(),
            config: vec![
                user("erin").set("producer_byte_rate", 300_000.0),
                user_client("erin", "batch").set("producer_byte_rate", 100_000.0),
            ],
        },
    ]
}

/// Per client: bytes sent in each simulated second.
fn run(scenario: &mut Scenario) -> Vec<Vec<u64>> {
    let engine = Arc::new(std::mem::take(&mut scenario.engine));
    let results = engine.alter(&scenario.config, false);
    assert!(results.iter().all(|r| r.error.is_none()), "{results:?}");
    let clock = Arc::new(ManualClock::new(0));
    let meter = Meter::with_clock(engine, clock.clone(), MeterConfig::default());
    let mut clients: Vec<ClientMeter> = scenario
        .clients
        .iter()
        .map(|(_, u, c, _)| meter.client(u, c))
        .collect();
    let mut next = vec![0u64; clients.len()];
    let mut per_second = vec![vec![0u64; SECONDS as usize]; clients.len()];
    loop {
        let (i, &t) = next.iter().enumerate().min_by_key(|(_, t)| **t).unwrap();
        if t >= SECONDS * 1000 {
            break;
        }
        clock.set(t);
        let throttle = clients[i].produce(REQUEST_BYTES);
        per_second[i][(clock.now_ms() / 1000) as usize] += REQUEST_BYTES;
        // A well-behaved client waits out its throttle; otherwise it sends every 10 ms.
        next[i] = t + throttle.ms.max(10);
    }
    per_second
}

const USAGE: &str = "\
usage: broker_loop [--svg PATH]

Simulates a broker's request loop on four quota scenarios and prints each client's long-run rate
against its limit. Writes no file unless asked:

  --svg PATH   also draw the runs as an SVG and write it to PATH (replacing that file)
  -h, --help   print this help";

/// The SVG's path, if `--svg PATH` was given. Anything else it does not know ends the program, so a
/// mistyped flag never runs (or writes) something other than what was asked.
fn svg_path() -> Option<String> {
    let mut args = std::env::args().skip(1);
    let mut path = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            "--svg" => match args.next() {
                Some(p) => path = Some(p),
                None => fail("--svg needs a PATH"),
            },
            other => fail(&format!("unknown argument '{other}'")),
        }
    }
    path
}

fn fail(message: &str) -> ! {
    eprintln!("broker_loop: {message}\n\n{USAGE}");
    std::process::exit(2);
}

fn main() {
    let svg_path = svg_path();
    let mut panels = Vec::new();
    for scenario in scenarios() {
        let mut scenario = scenario;
        let per_second = run(&mut scenario);
        println!("{}", scenario.title);
        // The KIP-55 remainder clients share one bucket; report them together.
        let half = (SECONDS / 2) as usize;
        let rate = |i: usize| {
            per_second[i][half..].iter().sum::<u64>() as f64 / (SECONDS as f64 - half as f64)
        };
        for (i, (label, _, _, expected)) in scenario.clients.iter().enumerate() {
            let r = rate(i);
            if scenario.title.starts_with("KIP-55") && i > 0 {
                println!("  {label:<30} {r:>9.0} B/s   (shares the remainder)");
            } else {
                println!(
                    "  {label:<30} {r:>9.0} B/s   limit {expected:>7.0}   ({:+.1}%)",
                    (r - expected) / expected * 100.0
                );
            }
        }
        if scenario.title.starts_with("KIP-55") {
            let together: f64 = (1..scenario.clients.len()).map(rate).sum();
            println!(
                "  {:<30} {together:>9.0} B/s   limit  200000   ({:+.1}%)",
                "remainder clients together",
                (together - 200_000.0) / 200_000.0 * 100.0
            );
        }
        panels.push((scenario, per_second));
    }
    if let Some(path) = svg_path {
        std::fs::write(&path, svg(&panels)).expect("write the SVG");
        println!("wrote {path}");
    }
}

/// Draws each scenario as a panel: every client's rate (10 s moving average) against its limit.
fn svg(panels: &[(Scenario, Vec<Vec<u64>>)]) -> String {
    const W: f64 = 760.0;
    const PANEL_H: f64 = 170.0;
    const LEFT: f64 = 70.0;
    const TOP: f64 = 30.0;
    let colors = ["#1f77b4", "#d62728", "#2ca02c"];
    let height = panels.len() as f64 * (PANEL_H + 40.0) + 20.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (p, (scenario, series)) in panels.iter().enumerate() {
        let y0 = p as f64 * (PANEL_H + 40.0) + TOP;
        let plot_w = W - LEFT - 20.0;
        let y_max = 260_000.0;
        let x = |sec: f64| LEFT + sec / SECONDS as f64 * plot_w;
        let y = |rate: f64| y0 + PANEL_H - (rate / y_max).min(1.0) * PANEL_H;
        let _ = writeln!(
            s,
            r#"<text x="{LEFT}" y="{}" font-size="13" font-weight="bold">{}</text>"#,
            y0 - 8.0,
            scenario.title
        );
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{y0}" width="{plot_w}" height="{PANEL_H}" fill="none" stroke="#999"/>"##
        );
        for tick in [0.0, 100_000.0, 200_000.0] {
            let _ = writeln!(
                s,
                r##"<text x="{}" y="{}" text-anchor="end">{}k</text>"##,
                LEFT - 5.0,
                y(tick) + 4.0,
                tick / 1000.0
            );
        }
        for (c, ((label, _, _, limit), data)) in scenario.clients.iter().zip(series).enumerate() {
            let color = colors[c % colors.len()];
            let _ = writeln!(
                s,
                r#"<line x1="{LEFT}" x2="{}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-dasharray="4 3" opacity="0.7"/>"#,
                LEFT + plot_w,
                ly = y(*limit)
            );
            let mut points = String::new();
            for sec in 10..data.len() {
                let avg = data[sec - 10..sec].iter().sum::<u64>() as f64 / 10.0;
                let _ = write!(points, "{:.1},{:.1} ", x(sec as f64), y(avg));
            }
            let _ = writeln!(
                s,
                r#"<polyline points="{points}" fill="none" stroke="{color}" stroke-width="1.5"/>"#
            );
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" fill="{color}">{label} (dashed: limit)</text>"#,
                LEFT + 10.0,
                y0 + 14.0 + c as f64 * 13.0
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">seconds (rate: 10 s moving average, B/s)</text>"#,
            LEFT + plot_w / 2.0,
            y0 + PANEL_H + 15.0
        );
    }
    s.push_str("</svg>\n");
    s
}
