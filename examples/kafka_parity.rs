//! kquota's side of the resolution parity check against Apache Kafka's own `ClientQuotaManager`
//! (`interop/quota-manager/parity.sh` runs both and compares).
//!
//! ```sh
//! cargo run --release --example kafka_parity < cases.jsonl > kquota.jsonl
//! ```
//!
//! Input, one case a line: `{"case":N,"quotas":[{"user":"u"|null,"client_id":"c"|null,
//! "values":{"producer_byte_rate":1.0}}],"pairs":[["u","c"]]}`; a missing `user` or `client_id` is an
//! absent component, `null` the default. Each case gets a fresh engine under the `kafka` sub-quota policy.
//!
//! Output, one JSON object a line: for every pair and key, the limit (`null`: unlimited) and the bucket
//! as Kafka's metric tags, `{"case":N,"pair":i,"key":"producer_byte_rate","limit":1.0,"user":"tag",
//! "client_id":"tag"}`: the user tag is the sanitized user when the bucket is per user, else `""`; the
//! client-id tag is the client-id when the bucket is per client-id, else `""`. Every refused entity gives
//! `{"case":N,"quota":i,"error":"message"}`.
//!
//! The bucket is taken from `resolve`'s `BucketScope`; the example also opens a `ClientMeter` for every
//! pair and fails unless the meter created exactly those buckets.

use std::collections::BTreeSet;
use std::io::{self, BufRead, BufWriter, Write};
use std::process::ExitCode;
use std::sync::Arc;

use kquota::meter::{BucketOwner, ManualClock, Meter, MeterConfig};
use kquota::{sanitize, Alteration, Engine, QuotaKey, SubQuotaPolicy};
use serde_json::{json, Value};

/// The keys Kafka's three client quota managers (produce, fetch, request) enforce.
const KEYS: [(&str, QuotaKey); 3] = [
    ("producer_byte_rate", QuotaKey::PRODUCER_BROKER_BPS),
    ("consumer_byte_rate", QuotaKey::CONSUMER_BROKER_BPS),
    ("request_percentage", QuotaKey::REQUEST_PERCENTAGE),
];

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kafka_parity: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let stdin = io::stdin().lock();
    let mut out = BufWriter::new(io::stdout().lock());
    for (n, line) in stdin.lines().enumerate() {
        let line = line.map_err(|e| format!("reading line {}: {e}", n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let input: Value =
            serde_json::from_str(&line).map_err(|e| format!("line {}: {e}", n + 1))?;
        run_case(&input, &mut out).map_err(|e| format!("line {}: {e}", n + 1))?;
    }
    out.flush().map_err(|e| format!("writing the results: {e}"))
}

/// An entity component as the input gives it: absent, the default (`null`) or a name.
fn component(q: &Value, field: &str) -> Result<Option<Option<String>>, String> {
    match q.get(field) {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(Value::String(s)) => Ok(Some(Some(s.clone()))),
        Some(other) => Err(format!("{field} must be a string or null, got {other}")),
    }
}

fn run_case(input: &Value, out: &mut impl Write) -> Result<(), String> {
    let case = input
        .get("case")
        .and_then(Value::as_u64)
        .ok_or("missing case number")?;
    let engine = Arc::new(
        Engine::builder()
            .policy(SubQuotaPolicy::Kafka)
            .build()
            .map_err(|e| format!("case {case}: {e}"))?,
    );
    // A clock that never moves, so no bucket idles out while the pairs are opened.
    let meter = Meter::with_clock(
        Arc::clone(&engine),
        Arc::new(ManualClock::new(0)),
        MeterConfig::default(),
    );
    let mut expected_buckets = BTreeSet::new();
    let quotas = input
        .get("quotas")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("case {case}: missing quotas"))?;
    let mut batch = Vec::with_capacity(quotas.len());
    for q in quotas {
        let mut parts = Vec::new();
        if let Some(user) = component(q, "user")? {
            parts.push(("user", user));
        }
        if let Some(client) = component(q, "client_id")? {
            parts.push(("client-id", client));
        }
        let mut alteration = Alteration::raw(parts);
        let values = q
            .get("values")
            .and_then(Value::as_object)
            .ok_or_else(|| format!("case {case}: a quota without values"))?;
        for (key, value) in values {
            let value = value
                .as_f64()
                .ok_or_else(|| format!("case {case}: {key} is not a number"))?;
            alteration = alteration.set(key, value);
        }
        batch.push(alteration);
    }
    let write = |out: &mut dyn Write, row: Value| {
        writeln!(out, "{row}").map_err(|e| format!("writing the results: {e}"))
    };
    for (i, result) in engine.alter(&batch, false).into_iter().enumerate() {
        if let Some(error) = result.error {
            write(
                out,
                json!({"case": case, "quota": i, "error": error.message}),
            )?;
        }
    }
    let pairs = input
        .get("pairs")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("case {case}: missing pairs"))?;
    for (i, pair) in pairs.iter().enumerate() {
        let (Some(user), Some(client_id)) = (
            pair.get(0).and_then(Value::as_str),
            pair.get(1).and_then(Value::as_str),
        ) else {
            return Err(format!("case {case}: pair {i} is not two strings"));
        };
        let resolved = engine.resolve(user, client_id);
        meter.client(user, client_id);
        for (name, key) in KEYS {
            let row = match resolved.get(key) {
                Some(q) => {
                    // The bucket the meter shares this quota in, spelled as Kafka's metric tags.
                    let bucket = q.bucket_scope().bucket(user, client_id);
                    let tags = (
                        bucket.user.map(sanitize).unwrap_or_default(),
                        bucket.client_id.unwrap_or_default().to_owned(),
                    );
                    expected_buckets.insert((key, tags.clone()));
                    json!({
                        "case": case, "pair": i, "key": name, "limit": q.limit,
                        "level": q.level.number(),
                        "user": tags.0,
                        "client_id": tags.1,
                    })
                }
                None => json!({"case": case, "pair": i, "key": name, "limit": null}),
            };
            write(out, row)?;
        }
    }
    let metered: BTreeSet<_> = meter
        .snapshot()
        .into_iter()
        .filter(|b| KEYS.iter().any(|(_, k)| *k == b.key))
        .map(|b| (b.key, tags(&b.owner)))
        .collect();
    if metered != expected_buckets {
        return Err(format!(
            "case {case}: the meter's buckets {metered:?} are not resolve's {expected_buckets:?}"
        ));
    }
    Ok(())
}

/// A meter bucket's owner as Kafka's metric tags `(user, client-id)`.
fn tags(owner: &BucketOwner) -> (String, String) {
    match owner {
        BucketOwner::UserClient(u, c) => (sanitize(u), c.to_string()),
        BucketOwner::User(u) => (sanitize(u), String::new()),
        BucketOwner::ClientId(c) => (String::new(), c.to_string()),
        BucketOwner::Ip(ip) => (format!("ip {ip}"), String::new()),
    }
}
