//! What the printers share: reading fields as cells, and the formats kube-apiserver's printers use (ages as
//! `duration.HumanDuration`, label selectors as `metav1.FormatLabelSelector`, lists cut after three).

use serde_json::{Value, json};

/// The object's name, the cell of every Name column.
pub(crate) fn name(o: &Value) -> Value {
    json!(o["metadata"]["name"])
}

/// The object's age, the cell of every Age column.
pub(crate) fn created(o: &Value, now: i64) -> Value {
    json!(age(&o["metadata"]["creationTimestamp"], now))
}

pub(crate) fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

pub(crate) fn int(value: &Value) -> i64 {
    value.as_i64().unwrap_or(0)
}

pub(crate) fn or_none(text: String) -> String {
    if text.is_empty() { "<none>".into() } else { text }
}

/// The names (`field` = `name`) or images of a pod spec's containers, joined with commas (`layoutContainerCells`).
pub(crate) fn containers(pod_spec: &Value, field: &str) -> String {
    let all = pod_spec["containers"].as_array().into_iter().flatten();
    all.map(|c| text(&c[field])).collect::<Vec<_>>().join(",")
}

/// A map of labels as `labels.FormatLabels` writes it: `a=b,c=d`, sorted by key (not `<none>`; callers add that).
pub(crate) fn labels(map: &Value) -> String {
    let mut pairs: Vec<(&String, String)> = map.as_object().into_iter().flatten().map(|(k, v)| (k, text(v))).collect();
    pairs.sort();
    pairs.into_iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// A label selector as `metav1.FormatLabelSelector` writes it: every requirement sorted by key (`a=b`,
/// `c in (d,e)`, `f notin (g)`, `h`, `!i`), `<none>` when it has none.
pub(crate) fn selector(selector: &Value) -> String {
    let mut parts: Vec<(String, String)> = Vec::new();
    if let Some(labels) = selector["matchLabels"].as_object() {
        parts.extend(labels.iter().map(|(k, v)| (k.clone(), format!("{k}={}", text(v)))));
    }
    for expression in selector["matchExpressions"].as_array().into_iter().flatten() {
        let key = text(&expression["key"]);
        let values: Vec<String> = expression["values"].as_array().into_iter().flatten().map(text).collect();
        let shown = match expression["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other}"),
        };
        parts.push((key, shown));
    }
    parts.sort_by(|a, b| a.0.cmp(&b.0));
    or_none(parts.into_iter().map(|(_, shown)| shown).collect::<Vec<_>>().join(","))
}

/// The wide cells of a workload whose `spec` has a pod `template` and a `selector` (Deployments, ReplicaSets, Jobs,
/// a CronJob's Job template): CONTAINERS, IMAGES, SELECTOR.
pub(crate) fn template_cells(spec: &Value) -> [Value; 3] {
    [
        json!(containers(&spec["template"]["spec"], "name")),
        json!(containers(&spec["template"]["spec"], "image")),
        json!(selector(&spec["selector"])),
    ]
}

/// The first three of `items` joined with commas, `+ N more...` after them, `<unset>` for none
/// (`listWithMoreString`).
pub(crate) fn first_three(items: Vec<String>) -> String {
    match items.len() {
        0 => "<unset>".into(),
        1..=3 => items.join(","),
        n => format!("{} + {} more...", items[..3].join(","), n - 3),
    }
}

/// `value`, or `<none>` when it is missing or empty.
pub(crate) fn text_or_none(value: &Value) -> String {
    or_none(text(value))
}

/// The time since `timestamp` (RFC 3339), as kubectl prints ages; `<unknown>` without one.
pub(crate) fn age(timestamp: &Value, now: i64) -> String {
    match seconds(timestamp) {
        Some(then) => human_duration(now - then),
        None => "<unknown>".into(),
    }
}

pub(crate) fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// Seconds since the epoch of an RFC 3339 timestamp (`2026-11-30T07:16:26Z`, fractions and offsets allowed); `None`
/// for text that is not one, or a time outside what a timestamp holds.
pub(crate) fn seconds(timestamp: &Value) -> Option<i64> {
    timestamp.as_str()?.parse::<jiff::Timestamp>().ok().map(|t| t.as_second())
}

/// A duration as kubectl prints ages: `45s`, `5m3s`, `65m`, `3h5m`, `30h`, `2d5h`, `65d`, `2y30d`, `9y`.
pub(crate) fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    let seconds = seconds.max(0);
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return if seconds % 60 == 0 { format!("{minutes}m") } else { format!("{minutes}m{}s", seconds % 60) };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        return if minutes % 60 == 0 { format!("{hours}h") } else { format!("{hours}h{}m", minutes % 60) };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return if hours % 24 == 0 { format!("{}d", hours / 24) } else { format!("{}d{}h", hours / 24, hours % 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 { format!("{}y", hours / 24 / 365) } else { format!("{}y{days}d", hours / 24 / 365) };
    }
    format!("{}y", hours / 24 / 365)
}

/// The value at a simple JSONPath (`.spec.size`, `.status.conditions[0].type`,
/// `.status.conditions[?(@.type=="Ready")].status`), as a printer column reads it.
pub(crate) fn json_path(object: &Value, path: &str) -> Option<Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}').trim_start_matches('$');
    let mut at = object.clone();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            at = at.get(&after[..end])?.clone();
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']')?;
            let inside = &after[..end];
            rest = &after[end + 1..];
            if let Some(filter) = inside.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (field, wanted) = filter.split_once("==")?;
                let wanted = wanted.trim().trim_matches(['"', '\'']);
                let items = at.as_array()?;
                at = items.iter().find(|i| text(&i[field.trim()]) == wanted)?.clone();
            } else {
                let index: usize = inside.parse().ok()?;
                at = at.get(index)?.clone();
            }
        } else {
            return None;
        }
    }
    (!at.is_null()).then_some(at)
}
