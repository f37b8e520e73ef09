//! How the tools show what a server returns: any entity, any name, any key, any value, in text and
//! in JSON, without refusing an entry or changing what it says.
//!
//! A server is not obliged to store only what kquota's engine would store. Apache Kafka keeps ip
//! entities under host names (`localhost`), names that kquota would print ambiguously (`<default>`
//! spelled out, names with commas or spaces at the ends), and a later Kafka may send entity types or
//! keys this tool does not know. Everything here works on [`QuotaEntry`] as it came off the wire,
//! never on the engine's [`kquota::Entity`], whose shapes are the ones an alteration may have.
//!
//! `docs/cli.md` ("Entries as the server stores them") documents the forms printed here.

use std::cmp::Ordering;
use std::fmt::Write as _;

use kquota::{ComponentMatch, DescribeEntry, EntityType, Level, QuotaKey, DEFAULT_DISPLAY};
use serde_json::{json, Map, Value};

use crate::client::QuotaEntry;
use crate::quote::{is_hidden, quote_if_needed};

/// An entity's components as the wire carries them: `(type, name)`, `None` for the default.
pub type WireEntity = [(String, Option<String>)];

/// A quota key as a server sent it: one this tool knows (any spelling of it), or any other string.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ShownKey {
    /// A key this tool knows; `producer_byte_rate` and `producer_byte_rate:broker_bps` are the
    /// same key.
    Known(QuotaKey),
    /// Any other key, exactly as sent (a key of a later Kafka, or a unit this tool does not know).
    Unknown(String),
}

impl ShownKey {
    /// Reads a key as a server sent it.
    pub fn parse(key: &str) -> ShownKey {
        key.parse::<QuotaKey>()
            .map_or_else(|_| ShownKey::Unknown(key.to_owned()), ShownKey::Known)
    }

    /// Known keys by type, then unit (the library's key order); then unknown keys in byte order.
    fn order(&self, other: &ShownKey) -> Ordering {
        match (self, other) {
            (ShownKey::Known(a), ShownKey::Known(b)) => a.cmp(b),
            (ShownKey::Known(_), ShownKey::Unknown(_)) => Ordering::Less,
            (ShownKey::Unknown(_), ShownKey::Known(_)) => Ordering::Greater,
            (ShownKey::Unknown(a), ShownKey::Unknown(b)) => a.cmp(b),
        }
    }

    /// The text columns that name the key: `type unit` for a known key, the key as sent (quoted if
    /// needed) for any other.
    fn text_columns(&self) -> (String, String) {
        match self {
            ShownKey::Known(k) => (
                k.quota_type().as_str().to_owned(),
                k.unit().as_str().to_owned(),
            ),
            ShownKey::Unknown(k) => (quote_if_needed(k, is_plain_key), String::new()),
        }
    }

    /// The JSON fields that name the key: `type` and `unit`, or for an unknown key `key` with
    /// `type` and `unit` null.
    fn json_fields(&self, object: &mut Map<String, Value>) {
        match self {
            ShownKey::Known(k) => {
                object.insert("type".into(), json!(k.quota_type().as_str()));
                object.insert("unit".into(), json!(k.unit().as_str()));
            }
            ShownKey::Unknown(k) => {
                object.insert("key".into(), json!(k));
                object.insert("type".into(), Value::Null);
                object.insert("unit".into(), Value::Null);
            }
        }
    }
}

/// Whether a name can be printed as it is inside `{type=name}`: not empty, not `<default>` (the
/// default's own spelling), no white space at either end, and no character that separates or
/// quotes (`{ } , " \`) or does not show (control and invisible formatting characters).
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != DEFAULT_DISPLAY
        && !name.starts_with(char::is_whitespace)
        && !name.ends_with(char::is_whitespace)
        && !name
            .chars()
            .any(|c| matches!(c, '{' | '}' | ',' | '"' | '\\') || is_hidden(c))
}

/// Whether an entity type or an unknown key prints as it is: ASCII letters, digits, `.`, `_`,
/// `-` and (keys) `:`.
fn is_plain_word(word: &str) -> bool {
    !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn is_plain_key(key: &str) -> bool {
    is_plain_word(&key.replace(':', "_"))
}

/// A component's name as printed: `<default>` for the default, the name as it is when that cannot be
/// mistaken for anything else, and otherwise quoted ([`quote`]): `""`, `"<default>"`, `"a, b"`.
pub fn name_text(name: Option<&str>) -> String {
    match name {
        None => DEFAULT_DISPLAY.to_owned(),
        Some(n) => quote_if_needed(n, is_plain_name),
    }
}

/// An entity type as printed: as it is when it is a plain word, otherwise quoted.
fn type_text(ty: &str) -> String {
    quote_if_needed(ty, is_plain_word)
}

/// The rank of a type in printing order: user, client-id, ip, then the others.
fn type_rank(ty: &str) -> usize {
    EntityType::ALL
        .iter()
        .position(|t| t.as_str() == ty)
        .unwrap_or(EntityType::ALL.len())
}

/// The components in printing order: user, client-id and ip, then types this tool does not know in
/// the order the server sent them (a type sent twice keeps both, in the order sent).
fn printing_order(entity: &WireEntity) -> Vec<&(String, Option<String>)> {
    let mut parts: Vec<&(String, Option<String>)> = entity.iter().collect();
    parts.sort_by_key(|(ty, _)| type_rank(ty));
    parts
}

/// `{user=user-one, client-id=my-client}`: every component the server sent, user, client-id and ip
/// first, then any other type; names as [`name_text`] prints them. `{}` for no component.
pub fn entity_text(entity: &WireEntity) -> String {
    let parts: Vec<String> = printing_order(entity)
        .into_iter()
        .map(|(ty, name)| format!("{}={}", type_text(ty), name_text(name.as_deref())))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

/// Whether an entity names one type more than once (which the JSON object form cannot hold).
fn repeats_a_type(entity: &WireEntity) -> bool {
    entity
        .iter()
        .enumerate()
        .any(|(i, (ty, _))| entity[..i].iter().any(|(t, _)| t == ty))
}

/// The JSON entity: an object keyed by type, the name or `null` for the default. A type sent twice
/// keeps the last name here, as Kafka's own admin client reads it; [`entry_json`] adds the full list.
pub fn entity_json(entity: &WireEntity) -> Value {
    let mut map = Map::new();
    for (ty, name) in entity {
        map.insert(ty.clone(), json!(name));
    }
    Value::Object(map)
}

/// A value as the text prints it: a whole number without a fraction, others in Rust's shortest exact
/// form, and `NaN`, `Infinity`, `-Infinity` as Java spells them.
pub fn value_text(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else if v.fract() == 0.0 && v.abs() < 1e17 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// A value as JSON: an integer when it is whole (below 2^53), otherwise a float; a value that is not
/// a finite number (which JSON cannot hold) as the string `"NaN"`, `"Infinity"` or `"-Infinity"`.
pub fn value_json(v: f64) -> Value {
    if !v.is_finite() {
        json!(value_text(v))
    } else if v.fract() == 0.0 && v.abs() < 9_007_199_254_740_992.0 {
        json!(v as i64)
    } else {
        json!(v)
    }
}

/// One filter condition of `kafka-quotas --list`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Condition {
    /// The entity has a component of this type that matches (`--names`, `--defaults`, typed
    /// `--prefix`).
    Typed(EntityType, ComponentMatch),
    /// The entity has a component of any type, known or not, whose name (never the default) begins
    /// with this prefix (the seed's `--match=prefix=NAME`).
    AnyName(String),
}

fn component_matches(m: &ComponentMatch, name: Option<&str>) -> bool {
    match (m, name) {
        (ComponentMatch::Exact(want), Some(n)) => n == want,
        (ComponentMatch::Default, None) => true,
        (ComponentMatch::Prefix(p), Some(n)) => n.starts_with(p.as_str()),
        (ComponentMatch::Any, _) => true,
        _ => false,
    }
}

/// Whether `entity` passes every condition. Types no condition names may be present or absent.
pub fn matches(entity: &WireEntity, conditions: &[Condition]) -> bool {
    conditions.iter().all(|c| match c {
        Condition::Typed(ty, m) => entity
            .iter()
            .any(|(t, name)| t == ty.as_str() && component_matches(m, name.as_deref())),
        Condition::AnyName(prefix) => entity.iter().any(|(_, name)| {
            name.as_deref()
                .is_some_and(|n| n.starts_with(prefix.as_str()))
        }),
    })
}

/// A name's sort key: names (in byte order) before the default.
fn name_rank(name: &Option<String>) -> (u8, &str) {
    match name {
        Some(n) => (0, n.as_str()),
        None => (1, ""),
    }
}

/// The library's list order, extended to every entity: by user, then client-id, then ip (for each a
/// name in byte order, then the default, then an absent component), then by the remaining
/// components (types this tool does not know, or a type sent twice) sorted by type and name, fewer
/// first.
/// An entity's sort key: the ranks of user, client-id and ip, then the other components.
type SortKey<'a> = (Vec<(u8, &'a str)>, Vec<(&'a str, (u8, &'a str))>);

fn entity_order(a: &WireEntity, b: &WireEntity) -> Ordering {
    fn key(entity: &WireEntity) -> SortKey<'_> {
        let mut known = Vec::new();
        let mut rest: Vec<(&str, (u8, &str))> = Vec::new();
        let mut seen = [false; 3];
        for ty in EntityType::ALL {
            let found = entity.iter().find(|(t, _)| t == ty.as_str());
            known.push(found.map_or((2, ""), |(_, n)| name_rank(n)));
        }
        for (ty, name) in entity {
            let rank = type_rank(ty);
            if rank < 3 && !seen[rank] {
                seen[rank] = true;
                continue;
            }
            rest.push((ty.as_str(), name_rank(name)));
        }
        rest.sort();
        (known, rest)
    }
    key(a).cmp(&key(b))
}

/// An entity's values in output order: known keys by type and unit, then unknown keys in byte
/// order; a key sent twice keeps both, in the order sent.
fn sorted_values(values: &[(String, f64)]) -> Vec<(ShownKey, f64)> {
    let mut out: Vec<(ShownKey, f64)> = values
        .iter()
        .map(|(k, v)| (ShownKey::parse(k), *v))
        .collect();
    out.sort_by(|(a, _), (b, _)| a.order(b));
    out
}

/// Sorts entries into the list order (see `entity_order`); entries the order cannot tell apart
/// keep the server's order, so nothing is dropped or merged.
pub fn sort_entries(entries: &mut [QuotaEntry]) {
    entries.sort_by(|a, b| entity_order(&a.entity, &b.entity));
}

/// The `--list` text: each entity's line, then one `type unit value` line per entry (`key value`
/// for a key this tool does not know), a blank line between entities.
pub fn list_text(entries: &[QuotaEntry]) -> String {
    let mut out = String::new();
    for (i, entry) in entries.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&entity_text(&entry.entity));
        out.push('\n');
        for (key, value) in sorted_values(&entry.values) {
            let (ty, unit) = key.text_columns();
            if unit.is_empty() {
                let _ = writeln!(out, "{ty} {}", value_text(value));
            } else {
                let _ = writeln!(out, "{ty} {unit} {}", value_text(value));
            }
        }
    }
    out
}

/// One `--list` JSON entity: `entity` and `quotas`, and `components` when the entity names a type
/// twice.
fn entry_json(entry: &QuotaEntry, values: &[(ShownKey, f64)]) -> Value {
    let mut object = Map::new();
    object.insert("entity".into(), entity_json(&entry.entity));
    if repeats_a_type(&entry.entity) {
        object.insert(
            "components".into(),
            entry
                .entity
                .iter()
                .map(|(ty, name)| json!({"type": ty, "name": name}))
                .collect(),
        );
    }
    object.insert(
        "quotas".into(),
        values
            .iter()
            .map(|(key, value)| {
                let mut q = Map::new();
                key.json_fields(&mut q);
                q.insert("value".into(), value_json(*value));
                Value::Object(q)
            })
            .collect(),
    );
    Value::Object(object)
}

/// The `--list` JSON document, entities and their quotas in the text's order.
pub fn list_json(entries: &[QuotaEntry]) -> Value {
    json!({
        "version": 1,
        "entities": entries
            .iter()
            .map(|e| entry_json(e, &sorted_values(&e.values)))
            .collect::<Vec<_>>(),
    })
}

/// The `list_json` document with each entity's quotas in the order given (`kafka-configs` prints
/// them in Kafka's order).
pub fn entries_json_in_order(entries: &[(&QuotaEntry, Vec<(ShownKey, f64)>)]) -> Value {
    json!({
        "version": 1,
        "entities": entries
            .iter()
            .map(|(e, values)| entry_json(e, values))
            .collect::<Vec<_>>(),
    })
}

/// One place a described quota can come from: a precedence level (`None` for ip entities, which
/// resolve outside the eight levels) and its entity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The precedence level, 1 to 8, or `None` for an ip.
    pub level: Option<u8>,
    /// The entity of that level.
    pub entity: Vec<(String, Option<String>)>,
}

impl Candidate {
    /// The candidate for a precedence level of the engine.
    pub fn of_level(
        level: Level,
        user: Option<&str>,
        client_id: Option<&str>,
    ) -> Option<Candidate> {
        let entity = level.entity(user, client_id)?;
        Some(Candidate {
            level: Some(level.number()),
            entity: entity
                .components()
                .map(|(ty, name)| (ty.as_str().to_owned(), name.as_option().map(str::to_owned)))
                .collect(),
        })
    }
}

/// One entry that applies, or is overridden.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    /// The configured value, as the server sent it.
    pub value: f64,
    /// Where it is configured.
    pub entity: Vec<(String, Option<String>)>,
    /// Its precedence level (`None` for an ip).
    pub level: Option<u8>,
}

/// One key of a description: the entry that applies, and the entries it overrides (most specific
/// first).
#[derive(Clone, Debug, PartialEq)]
pub struct Described {
    /// The key.
    pub key: ShownKey,
    /// The entry that applies.
    pub effective: Source,
    /// The entries it overrides, when asked for.
    pub overridden: Vec<Source>,
}

fn same_entity(a: &WireEntity, b: &WireEntity) -> bool {
    let mut a: Vec<_> = a.iter().collect();
    let mut b: Vec<_> = b.iter().collect();
    a.sort();
    b.sort();
    a == b
}

/// Resolves every key the server returned for `candidates` (most specific first): each key takes the
/// value of the first candidate that configures it. Keys this tool does not know resolve the same
/// way, since precedence belongs to entities, not keys. Entries whose entity is not a candidate are
/// not part of the description and are passed over. Values are shown as configured.
pub fn resolve(
    candidates: &[Candidate],
    entries: &[QuotaEntry],
    include_overrides: bool,
) -> Vec<Described> {
    let mut out: Vec<Described> = Vec::new();
    for candidate in candidates {
        for entry in entries
            .iter()
            .filter(|e| same_entity(&e.entity, &candidate.entity))
        {
            for (key, value) in &entry.values {
                let key = ShownKey::parse(key);
                let source = Source {
                    value: *value,
                    entity: candidate.entity.clone(),
                    level: candidate.level,
                };
                match out.iter_mut().find(|d| d.key == key) {
                    Some(d) => {
                        if include_overrides {
                            d.overridden.push(source);
                        }
                    }
                    None => out.push(Described {
                        key,
                        effective: source,
                        overridden: Vec::new(),
                    }),
                }
            }
        }
    }
    out.sort_by(|a, b| a.key.order(&b.key));
    out
}

/// The `--describe` text: `type unit value entity` rows in aligned columns (`key value entity`, the
/// unit column blank, for a key this tool does not know), each overridden entry after the one that
/// overrides it, marked ` * `.
pub fn describe_text(described: &[Described]) -> String {
    kquota::describe_columns(described.iter().map(|d| {
        let (quota_type, unit) = d.key.text_columns();
        DescribeEntry {
            quota_type,
            unit,
            value: value_text(d.effective.value),
            entity: entity_text(&d.effective.entity),
            overridden: d
                .overridden
                .iter()
                .map(|o| (value_text(o.value), entity_text(&o.entity)))
                .collect(),
        }
    }))
}

/// The `quotas` array of the `--describe` JSON document.
pub fn describe_quotas_json(described: &[Described]) -> Value {
    described
        .iter()
        .map(|d| {
            let mut q = Map::new();
            d.key.json_fields(&mut q);
            q.insert("value".into(), value_json(d.effective.value));
            q.insert("entity".into(), entity_json(&d.effective.entity));
            q.insert("level".into(), json!(d.effective.level));
            q.insert(
                "overridden".into(),
                d.overridden
                    .iter()
                    .map(|o| {
                        json!({
                            "value": value_json(o.value),
                            "entity": entity_json(&o.entity),
                            "level": o.level,
                        })
                    })
                    .collect(),
            );
            Value::Object(q)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(parts: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        parts
            .iter()
            .map(|(t, n)| ((*t).to_owned(), n.map(str::to_owned)))
            .collect()
    }

    fn entry(parts: &[(&str, Option<&str>)], values: &[(&str, f64)]) -> QuotaEntry {
        QuotaEntry {
            entity: e(parts),
            values: values.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        }
    }

    #[test]
    fn plain_names_print_as_they_are() {
        assert_eq!(
            entity_text(&e(&[
                ("client-id", Some("my-client")),
                ("user", Some("user-one"))
            ])),
            "{user=user-one, client-id=my-client}"
        );
        assert_eq!(entity_text(&e(&[("user", None)])), "{user=<default>}");
        assert_eq!(
            entity_text(&e(&[("ip", Some("localhost"))])),
            "{ip=localhost}"
        );
        assert_eq!(entity_text(&e(&[("ip", Some("::1"))])), "{ip=::1}");
        assert_eq!(entity_text(&e(&[("user", Some("a b"))])), "{user=a b}");
        assert_eq!(entity_text(&e(&[("user", Some("a=b"))])), "{user=a=b}");
        assert_eq!(
            entity_text(&e(&[("user", Some("Jürgen 李"))])),
            "{user=Jürgen 李}"
        );
        let long = "x".repeat(5000);
        assert_eq!(
            entity_text(&e(&[("user", Some(&long))])),
            format!("{{user={long}}}")
        );
    }

    #[test]
    fn names_that_could_be_misread_are_quoted() {
        let cases = [
            ("", "\"\""),
            ("<default>", "\"<default>\""),
            (" lead", "\" lead\""),
            ("trail ", "\"trail \""),
            ("a, client-id=b", "\"a, client-id=b\""),
            ("{x}", "\"{x}\""),
            ("say \"hi\"", "\"say \\\"hi\\\"\""),
            ("back\\slash", "\"back\\\\slash\""),
            ("two\nlines\ttab\r", "\"two\\nlines\\ttab\\r\""),
            ("esc\u{1b}[31m", "\"esc\\u{1b}[31m\""),
            ("zero\u{200b}width", "\"zero\\u{200b}width\""),
        ];
        for (name, printed) in cases {
            assert_eq!(name_text(Some(name)), printed, "{name:?}");
        }
        assert_eq!(
            entity_text(&e(&[("user", Some("<default>")), ("client-id", None)])),
            "{user=\"<default>\", client-id=<default>}"
        );
    }

    #[test]
    fn unknown_types_follow_the_known_ones_and_nothing_is_dropped() {
        assert_eq!(
            entity_text(&e(&[
                ("group", Some("g")),
                ("user", Some("u")),
                ("odd type", None)
            ])),
            "{user=u, group=g, \"odd type\"=<default>}"
        );
        assert_eq!(
            entity_text(&e(&[("user", Some("a")), ("user", Some("b"))])),
            "{user=a, user=b}"
        );
        assert_eq!(entity_text(&[]), "{}");
        let twice = entry(
            &[("user", Some("a")), ("user", Some("b"))],
            &[("producer_byte_rate", 1.0)],
        );
        let j = list_json(&[twice]);
        assert_eq!(j["entities"][0]["entity"], json!({"user": "b"}));
        assert_eq!(
            j["entities"][0]["components"],
            json!([{"type": "user", "name": "a"}, {"type": "user", "name": "b"}])
        );
    }

    #[test]
    fn unknown_keys_and_values_print_as_sent() {
        let entries = [entry(
            &[("user", Some("u"))],
            &[
                ("future_quota_rate", 5.0),
                ("producer_byte_rate", 1.5),
                ("producer_byte_rate:furlongs", 2.0),
                ("request_percentage", f64::NAN),
                ("consumer_byte_rate", -3.0),
                ("controller_mutation_rate", f64::INFINITY),
                ("we ird", 0.0),
            ],
        )];
        assert_eq!(
            list_text(&entries),
            "{user=u}\n\
             consumer_byte_rate broker_bps -3\n\
             controller_mutation_rate mutations_per_sec Infinity\n\
             producer_byte_rate broker_bps 1.5\n\
             request_percentage percent NaN\n\
             future_quota_rate 5\n\
             producer_byte_rate:furlongs 2\n\
             \"we ird\" 0\n"
        );
        let j = list_json(&entries);
        let quotas = j["entities"][0]["quotas"].as_array().unwrap();
        assert_eq!(
            quotas[1],
            json!({"type": "controller_mutation_rate", "unit": "mutations_per_sec", "value": "Infinity"})
        );
        assert_eq!(quotas[3]["value"], "NaN");
        assert_eq!(
            quotas[4],
            json!({"key": "future_quota_rate", "type": null, "unit": null, "value": 5})
        );
        assert_eq!(
            quotas[6],
            json!({"key": "we ird", "type": null, "unit": null, "value": 0})
        );
    }

    #[test]
    fn the_list_order_extends_the_librarys() {
        let mut entries = vec![
            entry(&[("group", Some("g"))], &[]),
            entry(&[("ip", Some("localhost"))], &[]),
            entry(&[("user", None)], &[]),
            entry(&[("user", Some("<default>"))], &[]),
            entry(&[("user", Some("b")), ("client-id", None)], &[]),
            entry(&[("user", Some("b"))], &[]),
            entry(&[("user", Some("b")), ("group", Some("g"))], &[]),
            entry(&[("client-id", Some("c"))], &[]),
            entry(&[("user", Some(""))], &[]),
        ];
        sort_entries(&mut entries);
        let printed: Vec<String> = entries.iter().map(|x| entity_text(&x.entity)).collect();
        assert_eq!(
            printed,
            [
                "{user=\"\"}",
                "{user=\"<default>\"}",
                "{user=b, client-id=<default>}",
                "{user=b}",
                "{user=b, group=g}",
                "{user=<default>}",
                "{client-id=c}",
                "{ip=localhost}",
                "{group=g}",
            ]
        );
    }

    #[test]
    fn conditions_match_names_of_any_type() {
        let any = |p: &str| Condition::AnyName(p.to_owned());
        let ue = e(&[("user", Some("user-one")), ("client-id", Some("my-client"))]);
        let de = e(&[("user", None), ("client-id", Some("my-client"))]);
        let ge = e(&[("group", Some("user-group"))]);
        assert!(matches(&ue, &[any("user")]));
        assert!(!matches(&de, &[any("user")]), "the default has no name");
        assert!(matches(&de, &[any("my-")]));
        assert!(
            matches(&ge, &[any("user")]),
            "types this tool does not know count"
        );
        assert!(
            matches(&ue, &[any("user"), any("my-")]),
            "every condition holds"
        );
        assert!(!matches(&ue, &[any("user"), any("x")]));
        assert!(matches(&ue, &[any("")]));
        assert!(!matches(&e(&[("user", None)]), &[any("")]));
        let typed = Condition::Typed(EntityType::ClientId, ComponentMatch::Prefix("user".into()));
        assert!(!matches(&ue, &[typed]));
    }

    #[test]
    fn describe_resolves_every_key_by_precedence() {
        let user = Some("<default>");
        let candidates: Vec<Candidate> = Level::ALL
            .iter()
            .filter_map(|l| Candidate::of_level(*l, user, Some("c")))
            .collect();
        let entries = [
            entry(
                &[("user", Some("<default>")), ("client-id", Some("c"))],
                &[("future_quota_rate", 2.0)],
            ),
            entry(
                &[("client-id", Some("c"))],
                &[("future_quota_rate", 3.0), ("producer_byte_rate", 7.5)],
            ),
            entry(&[("user", None)], &[("request_percentage", f64::NAN)]),
            entry(&[("user", Some("other"))], &[("request_percentage", 1.0)]),
        ];
        let d = resolve(&candidates, &entries, true);
        assert_eq!(
            describe_text(&d),
            "producer_byte_rate   broker_bps 7.5 {client-id=c}\n\
             request_percentage   percent    NaN {user=<default>}\n\
             future_quota_rate               2   {user=\"<default>\", client-id=c}\n \
             * future_quota_rate            3   {client-id=c}\n"
        );
        let j = describe_quotas_json(&d);
        assert_eq!(j[2]["key"], "future_quota_rate");
        assert_eq!(j[2]["level"], 1);
        assert_eq!(
            j[2]["entity"],
            json!({"user": "<default>", "client-id": "c"})
        );
        assert_eq!(j[2]["overridden"][0]["level"], 7);
        assert_eq!(j[1]["value"], "NaN");
    }
}
