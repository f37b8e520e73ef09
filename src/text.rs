//! The seeds' text output for listings and descriptions, shared by the tools and the examples.

use std::fmt::Write;

use crate::describe::{DescribedQuota, ListedEntity};
use crate::key::QuotaValue;

/// Prints a listing: each entity's line, then a `type unit value` line per entry, and a blank line
/// between entities.
pub fn format_list(entities: &[ListedEntity]) -> String {
    let mut out = String::new();
    for (i, listed) in entities.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "{}", listed.entity);
        for (key, value) in &listed.quotas {
            let _ = writeln!(
                out,
                "{} {} {}",
                key.quota_type(),
                key.unit(),
                number(*value)
            );
        }
    }
    out
}

/// Prints a description: `type unit value entity` rows in aligned columns, each overridden entry after
/// the entry that overrides it, marked ` * `.
pub fn format_describe(quotas: &[DescribedQuota]) -> String {
    describe_columns(quotas.iter().map(|q| {
        DescribeEntry {
            quota_type: q.key.quota_type().to_string(),
            unit: q.key.unit().to_string(),
            value: number(q.value),
            entity: q.entity.to_string(),
            overridden: q
                .overridden
                .iter()
                .map(|o| (number(o.value), o.entity.to_string()))
                .collect(),
        }
    }))
}

/// One entry of a description as its columns print it: what [`describe_columns`] aligns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DescribeEntry {
    /// The quota type column (`producer_byte_rate`).
    pub quota_type: String,
    /// The unit column (`bps`; empty for a key a tool does not know).
    pub unit: String,
    /// The value, as printed.
    pub value: String,
    /// The entity the value comes from, as printed.
    pub entity: String,
    /// The entries it overrides: their values and entities, as printed.
    pub overridden: Vec<(String, String)>,
}

/// `type unit value entity` rows in aligned columns, each overridden entry after the entry that
/// overrides it, marked ` * `: the text of a description, for the engine's own and the tools'.
pub fn describe_columns(entries: impl IntoIterator<Item = DescribeEntry>) -> String {
    let mut rows: Vec<[String; 4]> = Vec::new();
    for e in entries {
        let marked = format!(" * {}", e.quota_type);
        rows.push([e.quota_type, e.unit.clone(), e.value, e.entity]);
        for (value, entity) in e.overridden {
            rows.push([marked.clone(), e.unit.clone(), value, entity]);
        }
    }
    let mut widths = [0usize; 3];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for [ty, unit, value, entity] in &rows {
        let _ = writeln!(
            out,
            "{ty:<w0$} {unit:<w1$} {value:<w2$} {entity}",
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
    }
    out
}

/// A quota value as printed: whole numbers without a fraction.
fn number(v: f64) -> String {
    match QuotaValue::new(v) {
        Ok(v) => v.to_string(),
        Err(_) => v.to_string(),
    }
}
