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
    let mut rows: Vec<[String; 4]> = Vec::new();
    for q in quotas {
        let ty = q.key.quota_type().to_string();
        let unit = q.key.unit().to_string();
        rows.push([
            ty.clone(),
            unit.clone(),
            number(q.value),
            q.entity.to_string(),
        ]);
        for o in &q.overridden {
            rows.push([
                format!(" * {ty}"),
                unit.clone(),
                number(o.value),
                o.entity.to_string(),
            ]);
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
