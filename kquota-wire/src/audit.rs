//! The audit: one line per alteration request (AlterClientQuotas, the draft AlterQuotas), under
//! the tracing target [`AUDIT_TARGET`] so that an operator can route or keep it apart
//! (`RUST_LOG=info,kquota::audit=info`, a log shipper's filter on `target`).
//!
//! A line says who asked (`principal`, `peer`, `listener`), what (`changes`: each entry's entity
//! and its operations, `set key=value` or `remove key`, with the entity's result), whether it was
//! `validate_only`, and what came of it (`result`: how many entities were applied and refused, or
//! the error that failed the whole request). An authorized request is logged at INFO once it is
//! answered; a refused one at WARN, in the words of Kafka's authorizer log. A line is bounded
//! whatever the request: at most [`MAX_ENTRIES`] entries and [`MAX_OPS`] operations each are
//! written (the line says how many more there were), and names and messages are cut at
//! [`MAX_TEXT`] bytes and escaped, so that no peer can write a line of its choosing.

use std::collections::HashMap;
use std::fmt::Write as _;

use kquota::{Alteration, ApiError, EntityPart};

use crate::security::Session;

/// The outcome for one distinct entity of an alteration batch: what the answer says of it, and
/// what the audit line says.
pub(crate) struct EntityOutcome {
    /// The entity as collapsed from the request, in first-appearance order.
    pub(crate) entity: Vec<EntityPart>,
    /// How many parts the request sent for its first copy.
    pub(crate) sent_parts: usize,
    /// `None` on success.
    pub(crate) error: Option<ApiError>,
}

/// The tracing target of the audit's lines.
pub const AUDIT_TARGET: &str = "kquota::audit";

/// The most entries of one request written out.
pub(crate) const MAX_ENTRIES: usize = 16;
/// The most operations of one entry written out.
pub(crate) const MAX_OPS: usize = 9;
/// The longest entity name, key or error message written, in bytes.
pub(crate) const MAX_TEXT: usize = 128;

/// Writes `text` escaped (control characters, quotes) and cut at [`MAX_TEXT`] bytes.
fn push_text(out: &mut String, text: &str) {
    let mut end = text.len().min(MAX_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    for c in text[..end].chars() {
        if c.is_control() || c == '"' || c == '\\' {
            let _ = write!(out, "{}", c.escape_default());
        } else {
            out.push(c);
        }
    }
    if end < text.len() {
        out.push('…');
    }
}

/// `user=alice,client-id=<default>`; the empty entity as `<none>`.
fn push_entity(out: &mut String, entity: &[EntityPart]) {
    if entity.is_empty() {
        out.push_str("<none>");
    }
    for (i, part) in entity.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_text(out, &part.entity_type);
        out.push('=');
        match &part.name {
            Some(name) => push_text(out, name),
            None => out.push_str("<default>"),
        }
    }
}

fn push_error(out: &mut String, e: &ApiError) {
    let _ = write!(out, "{} ({}): ", e.code, e.code.0);
    push_text(out, &e.message);
}

/// The `changes` field: each entry (up to [`MAX_ENTRIES`]) as `[entity: ops => result]`.
fn changes(entries: &[&Alteration], outcome: &Result<Vec<EntityOutcome>, ApiError>) -> String {
    // Outcomes are by distinct entity (the parts in any order); entries may repeat one.
    let by_entity: HashMap<Vec<&EntityPart>, &Option<ApiError>> = match outcome {
        Ok(outcomes) => outcomes
            .iter()
            .map(|o| {
                let mut key: Vec<&EntityPart> = o.entity.iter().collect();
                key.sort();
                (key, &o.error)
            })
            .collect(),
        Err(_) => HashMap::new(),
    };
    let mut out = String::new();
    for (i, a) in entries.iter().take(MAX_ENTRIES).enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push('[');
        push_entity(&mut out, &a.entity);
        out.push_str(": ");
        for (j, op) in a.ops.iter().take(MAX_OPS).enumerate() {
            if j > 0 {
                out.push_str(", ");
            }
            match op.value {
                Some(v) => {
                    out.push_str("set ");
                    push_text(&mut out, &op.key);
                    let _ = write!(out, "={v}");
                }
                None => {
                    out.push_str("remove ");
                    push_text(&mut out, &op.key);
                }
            }
        }
        if a.ops.is_empty() {
            out.push_str("no ops");
        } else if a.ops.len() > MAX_OPS {
            let _ = write!(out, " and {} more ops", a.ops.len() - MAX_OPS);
        }
        out.push_str(" => ");
        let mut key: Vec<&EntityPart> = a.entity.iter().collect();
        key.sort();
        match (outcome, by_entity.get(&key)) {
            (Err(e), _) | (Ok(_), Some(Some(e))) => push_error(&mut out, e),
            (Ok(_), Some(None)) => out.push_str("ok"),
            (Ok(_), None) => out.push_str("answered"),
        }
        out.push(']');
    }
    if entries.len() > MAX_ENTRIES {
        let _ = write!(out, " and {} more entries", entries.len() - MAX_ENTRIES);
    }
    out
}

/// The `result` field: `ok`, `2 applied, 1 refused`, or the error that failed the request.
fn result(outcome: &Result<Vec<EntityOutcome>, ApiError>, validate_only: bool) -> String {
    match outcome {
        Err(e) => {
            let mut out = String::from("failed: ");
            push_error(&mut out, e);
            out
        }
        Ok(outcomes) => {
            let refused = outcomes.iter().filter(|o| o.error.is_some()).count();
            let ok = outcomes.len() - refused;
            let verb = if validate_only { "valid" } else { "applied" };
            format!("{ok} {verb}, {refused} refused")
        }
    }
}

/// Logs an authorized alteration request of `api` on `session`, once it is answered.
pub(crate) fn alteration(
    session: &Session,
    api: &'static str,
    entries: &[&Alteration],
    validate_only: bool,
    outcome: &Result<Vec<EntityOutcome>, ApiError>,
) {
    // Built only when the line is written: an operator may turn the audit off.
    if !tracing::enabled!(target: AUDIT_TARGET, tracing::Level::INFO) {
        return;
    }
    let changes = changes(entries, outcome);
    let result = result(outcome, validate_only);
    let principal = session.principal().to_string();
    // Text values as `str`, which the text format quotes as it quotes `api`: `result` and
    // `changes` hold spaces, and a principal may (a certificate's name).
    tracing::info!(
        target: AUDIT_TARGET,
        api,
        principal = principal.as_str(),
        peer = %Peer(session),
        listener = session.listener(),
        validate_only,
        entries = entries.len(),
        result = result.as_str(),
        changes = changes.as_str(),
        "{api} by {} from {}: {result}",
        session.principal(),
        Peer(session),
    );
}

/// Logs a refused alteration request with its principal, as Kafka's authorizer log does.
pub(crate) fn refusal(session: &Session, api: &'static str) {
    let principal = session.principal().to_string();
    tracing::warn!(
        target: AUDIT_TARGET,
        api,
        principal = principal.as_str(),
        peer = %Peer(session),
        listener = session.listener(),
        result = "CLUSTER_AUTHORIZATION_FAILED",
        "Principal = {} is Denied operation {api} on the cluster (CLUSTER_AUTHORIZATION_FAILED)",
        session.principal()
    );
}

/// A session's peer address, or `-` for a session without one (a test, an embedding host).
struct Peer<'a>(&'a Session);

impl std::fmt::Display for Peer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.peer() {
            Some(addr) => write!(f, "{addr}"),
            None => f.write_str("-"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kquota::{ErrorCode, Op};

    fn part(t: &str, n: Option<&str>) -> EntityPart {
        EntityPart {
            entity_type: t.to_owned(),
            name: n.map(str::to_owned),
        }
    }

    fn set(key: &str, v: f64) -> Op {
        Op {
            key: key.to_owned(),
            value: Some(v),
        }
    }

    #[test]
    fn entries_with_their_ops_and_results() {
        let alice = vec![part("user", Some("alice")), part("client-id", None)];
        let a = Alteration {
            entity: alice.clone(),
            ops: vec![
                set("producer_byte_rate", 1024.0),
                Op {
                    key: "request_percentage".to_owned(),
                    value: None,
                },
            ],
        };
        let b = Alteration {
            entity: vec![part("user", Some(""))],
            ops: vec![set("consumer_byte_rate", 1.5)],
        };
        // The outcome names the entity with its parts in another order.
        let outcome = Ok(vec![
            EntityOutcome {
                entity: vec![alice[1].clone(), alice[0].clone()],
                sent_parts: 2,
                error: None,
            },
            EntityOutcome {
                entity: b.entity.clone(),
                sent_parts: 1,
                error: Some(ApiError::invalid_request("Empty user not supported")),
            },
        ]);
        assert_eq!(
            changes(&[&a, &b], &outcome),
            "[user=alice,client-id=<default>: set producer_byte_rate=1024, remove \
             request_percentage => ok] [user=: set consumer_byte_rate=1.5 => INVALID_REQUEST \
             (42): Empty user not supported]"
        );
        assert_eq!(result(&outcome, false), "1 applied, 1 refused");
        assert_eq!(result(&outcome, true), "1 valid, 1 refused");
        let failed = Err(ApiError::new(ErrorCode::UNKNOWN_SERVER_ERROR, "disk full"));
        assert_eq!(
            changes(&[&b], &failed),
            "[user=: set consumer_byte_rate=1.5 => UNKNOWN_SERVER_ERROR (-1): disk full]"
        );
        assert_eq!(
            result(&failed, false),
            "failed: UNKNOWN_SERVER_ERROR (-1): disk full"
        );
    }

    #[test]
    fn a_line_is_bounded_whatever_the_request() {
        let long = "x\n\"".repeat(10_000);
        let a = Alteration {
            entity: vec![part(&long, Some(&long))],
            ops: (0..1000).map(|i| set(&format!("{long}{i}"), 1.0)).collect(),
        };
        let entries: Vec<&Alteration> = std::iter::repeat_n(&a, 100_000).collect();
        let outcome = Ok(Vec::new());
        let text = changes(&entries, &outcome);
        assert!(
            text.ends_with(" and 99984 more entries"),
            "{}",
            &text[text.len() - 40..]
        );
        assert!(text.contains(" and 991 more ops"));
        // No raw newline or quote from the peer, and a bound that does not grow with the request.
        assert!(!text.contains('\n') && !text.contains("x\""));
        let bound = MAX_ENTRIES * ((MAX_OPS + 2) * (2 * MAX_TEXT + 32) + 2 * MAX_TEXT + 32);
        assert!(text.len() < bound, "{} >= {bound}", text.len());
    }
}
