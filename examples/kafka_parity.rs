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
//!
//! The JSON is read and written by the small `json` module below: the engine's JSON support is behind
//! its `serde` feature, and this example must build without it.

use std::collections::BTreeSet;
use std::io::{self, BufRead, BufWriter, Write};
use std::process::ExitCode;
use std::sync::Arc;

use json::{Row, Value};
use kquota::meter::{BucketOwner, ManualClock, Meter, MeterConfig};
use kquota::{sanitize, Alteration, Engine, QuotaKey, SubQuotaPolicy};

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
        let input = Value::parse(&line).map_err(|e| format!("line {}: {e}", n + 1))?;
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
    let write = |out: &mut dyn Write, row: Row| {
        writeln!(out, "{row}").map_err(|e| format!("writing the results: {e}"))
    };
    for (i, result) in engine.alter(&batch, false).into_iter().enumerate() {
        if let Some(error) = result.error {
            write(
                out,
                Row::new()
                    .number("case", case)
                    .number("quota", i)
                    .string("error", &error.message),
            )?;
        }
    }
    let pairs = input
        .get("pairs")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("case {case}: missing pairs"))?;
    for (i, pair) in pairs.iter().enumerate() {
        let (Some(user), Some(client_id)) = (
            pair.at(0).and_then(Value::as_str),
            pair.at(1).and_then(Value::as_str),
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
                    Row::new()
                        .number("case", case)
                        .number("pair", i)
                        .string("key", name)
                        .float("limit", q.limit)
                        .number("level", q.level.number())
                        .string("user", &tags.0)
                        .string("client_id", &tags.1)
                }
                None => Row::new()
                    .number("case", case)
                    .number("pair", i)
                    .string("key", name)
                    .null("limit"),
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

/// Just enough JSON for this example's input and output lines.
mod json {
    use std::fmt::{self, Write as _};

    /// A parsed JSON value; an object keeps its members in input order.
    #[derive(Clone, Debug, PartialEq)]
    pub(crate) enum Value {
        Null,
        Bool(bool),
        Number(f64),
        String(String),
        Array(Vec<Value>),
        Object(Vec<(String, Value)>),
    }

    impl Value {
        /// Parses one complete JSON text.
        pub(crate) fn parse(text: &str) -> Result<Value, String> {
            let mut parser = Parser {
                text: text.as_bytes(),
                at: 0,
            };
            let value = parser.value()?;
            parser.space();
            match parser.at == text.len() {
                true => Ok(value),
                false => Err(format!("trailing characters at column {}", parser.at + 1)),
            }
        }

        /// An object's member (the last one, if the name repeats, as serde_json keeps).
        pub(crate) fn get(&self, name: &str) -> Option<&Value> {
            match self {
                Value::Object(members) => {
                    members.iter().rev().find(|(n, _)| n == name).map(|m| &m.1)
                }
                _ => None,
            }
        }

        /// An array's element.
        pub(crate) fn at(&self, index: usize) -> Option<&Value> {
            self.as_array()?.get(index)
        }

        pub(crate) fn as_u64(&self) -> Option<u64> {
            match *self {
                Value::Number(n) if n >= 0.0 && n.fract() == 0.0 && n < 9_007_199_254_740_992.0 => {
                    Some(n as u64)
                }
                _ => None,
            }
        }

        pub(crate) fn as_f64(&self) -> Option<f64> {
            match *self {
                Value::Number(n) => Some(n),
                _ => None,
            }
        }

        pub(crate) fn as_str(&self) -> Option<&str> {
            match self {
                Value::String(s) => Some(s),
                _ => None,
            }
        }

        pub(crate) fn as_array(&self) -> Option<&[Value]> {
            match self {
                Value::Array(items) => Some(items),
                _ => None,
            }
        }

        pub(crate) fn as_object(&self) -> Option<&[(String, Value)]> {
            match self {
                Value::Object(members) => Some(members),
                _ => None,
            }
        }
    }

    impl fmt::Display for Value {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                Value::Null => f.write_str("null"),
                Value::Bool(b) => write!(f, "{b}"),
                Value::Number(n) => write!(f, "{n}"),
                Value::String(s) => quote(f, s),
                Value::Array(items) => {
                    f.write_char('[')?;
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            f.write_char(',')?;
                        }
                        write!(f, "{item}")?;
                    }
                    f.write_char(']')
                }
                Value::Object(members) => {
                    f.write_char('{')?;
                    for (i, (name, value)) in members.iter().enumerate() {
                        if i > 0 {
                            f.write_char(',')?;
                        }
                        quote(f, name)?;
                        write!(f, ":{value}")?;
                    }
                    f.write_char('}')
                }
            }
        }
    }

    /// Writes `s` as a JSON string.
    fn quote(f: &mut impl fmt::Write, s: &str) -> fmt::Result {
        f.write_char('"')?;
        for c in s.chars() {
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                c if (c as u32) < 0x20 => write!(f, "\\u{:04x}", c as u32)?,
                c => f.write_char(c)?,
            }
        }
        f.write_char('"')
    }

    /// One output line: a JSON object built member by member.
    #[derive(Debug, Default)]
    pub(crate) struct Row(String);

    impl Row {
        pub(crate) fn new() -> Row {
            Row::default()
        }

        fn name(mut self, name: &str) -> Row {
            self.0.push(if self.0.is_empty() { '{' } else { ',' });
            quote(&mut self.0, name).expect("writing to a String");
            self.0.push(':');
            self
        }

        /// A whole number.
        pub(crate) fn number(self, name: &str, n: impl fmt::Display) -> Row {
            let mut row = self.name(name);
            write!(row.0, "{n}").expect("writing to a String");
            row
        }

        /// A limit: printed as Rust's `{:?}` prints an `f64` (`1.0`, `1e20`), which JSON readers
        /// take as the same number serde_json would write.
        pub(crate) fn float(self, name: &str, n: f64) -> Row {
            let mut row = self.name(name);
            write!(row.0, "{n:?}").expect("writing to a String");
            row
        }

        pub(crate) fn string(self, name: &str, s: &str) -> Row {
            let mut row = self.name(name);
            quote(&mut row.0, s).expect("writing to a String");
            row
        }

        pub(crate) fn null(self, name: &str) -> Row {
            let mut row = self.name(name);
            row.0.push_str("null");
            row
        }
    }

    impl fmt::Display for Row {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{}}}", self.0)
        }
    }

    struct Parser<'a> {
        text: &'a [u8],
        at: usize,
    }

    impl Parser<'_> {
        fn space(&mut self) {
            while matches!(self.text.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
                self.at += 1;
            }
        }

        fn error(&self, what: &str) -> String {
            format!("{what} at column {}", self.at + 1)
        }

        fn eat(&mut self, byte: u8) -> bool {
            self.space();
            let found = self.text.get(self.at) == Some(&byte);
            self.at += usize::from(found);
            found
        }

        fn literal(&mut self, word: &str, value: Value) -> Result<Value, String> {
            if self.text[self.at..].starts_with(word.as_bytes()) {
                self.at += word.len();
                Ok(value)
            } else {
                Err(self.error("expected a JSON value"))
            }
        }

        fn value(&mut self) -> Result<Value, String> {
            self.space();
            match self.text.get(self.at) {
                Some(b'{') => {
                    self.at += 1;
                    let mut members = Vec::new();
                    if self.eat(b'}') {
                        return Ok(Value::Object(members));
                    }
                    loop {
                        self.space();
                        let name = self.string()?;
                        if !self.eat(b':') {
                            return Err(self.error("expected ':'"));
                        }
                        members.push((name, self.value()?));
                        if self.eat(b'}') {
                            return Ok(Value::Object(members));
                        }
                        if !self.eat(b',') {
                            return Err(self.error("expected ',' or '}'"));
                        }
                    }
                }
                Some(b'[') => {
                    self.at += 1;
                    let mut items = Vec::new();
                    if self.eat(b']') {
                        return Ok(Value::Array(items));
                    }
                    loop {
                        items.push(self.value()?);
                        if self.eat(b']') {
                            return Ok(Value::Array(items));
                        }
                        if !self.eat(b',') {
                            return Err(self.error("expected ',' or ']'"));
                        }
                    }
                }
                Some(b'"') => self.string().map(Value::String),
                Some(b't') => self.literal("true", Value::Bool(true)),
                Some(b'f') => self.literal("false", Value::Bool(false)),
                Some(b'n') => self.literal("null", Value::Null),
                Some(b'-' | b'0'..=b'9') => {
                    let start = self.at;
                    while matches!(
                        self.text.get(self.at),
                        Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                    ) {
                        self.at += 1;
                    }
                    let lexeme = std::str::from_utf8(&self.text[start..self.at]).expect("ASCII");
                    lexeme
                        .parse()
                        .map(Value::Number)
                        .map_err(|_| format!("invalid number {lexeme} at column {}", start + 1))
                }
                _ => Err(self.error("expected a JSON value")),
            }
        }

        fn hex4(&mut self) -> Result<u32, String> {
            let digits = self
                .text
                .get(self.at..self.at + 4)
                .and_then(|d| std::str::from_utf8(d).ok())
                .and_then(|d| u32::from_str_radix(d, 16).ok())
                .ok_or_else(|| self.error("invalid \\u escape"))?;
            self.at += 4;
            Ok(digits)
        }

        fn string(&mut self) -> Result<String, String> {
            if self.text.get(self.at) != Some(&b'"') {
                return Err(self.error("expected a string"));
            }
            self.at += 1;
            let mut out = Vec::new();
            loop {
                match self.text.get(self.at) {
                    None => return Err(self.error("unterminated string")),
                    Some(b'"') => {
                        self.at += 1;
                        return String::from_utf8(out).map_err(|_| self.error("invalid UTF-8"));
                    }
                    Some(b'\\') => {
                        self.at += 1;
                        let escape = self.text.get(self.at).copied();
                        self.at += 1;
                        let c = match escape {
                            Some(b'"') => '"',
                            Some(b'\\') => '\\',
                            Some(b'/') => '/',
                            Some(b'b') => '\u{8}',
                            Some(b'f') => '\u{c}',
                            Some(b'n') => '\n',
                            Some(b'r') => '\r',
                            Some(b't') => '\t',
                            Some(b'u') => {
                                let mut unit = self.hex4()?;
                                // A surrogate pair: the high half, then `\u` and the low half.
                                if (0xd800..0xdc00).contains(&unit)
                                    && self.text[self.at..].starts_with(b"\\u")
                                {
                                    self.at += 2;
                                    let low = self.hex4()?;
                                    unit = 0x10000
                                        + ((unit - 0xd800) << 10)
                                        + (low.wrapping_sub(0xdc00) & 0x3ff);
                                }
                                char::from_u32(unit)
                                    .ok_or_else(|| self.error("invalid \\u escape"))?
                            }
                            _ => return Err(self.error("invalid escape")),
                        };
                        out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                    }
                    Some(&b) => {
                        out.push(b);
                        self.at += 1;
                    }
                }
            }
        }
    }
}
