//! Label and field selectors, parsed as `k8s.io/apimachinery/pkg/labels` and `.../fields` (1.33) parse them.
//!
//! Labels: `k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k>N`, `k<N`, comma-separated (AND).
//! Fields: `f=v`, `f==v`, `f!=v`, comma-separated; which fields exist depends on the kind.

use std::collections::BTreeMap;

use crate::error::{ApiError, Result};
use crate::validation;

/// One label requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Greater(String, i64),
    Less(String, i64),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses `text`; a malformed selector is a 400 naming the problem.
    pub fn parse(text: &str) -> Result<LabelSelector> {
        let mut requirements = Vec::new();
        for part in split_top_level(text) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            requirements.push(
                parse_requirement(part)
                    .map_err(|message| ApiError::bad_request(format!("unable to parse requirement: {message}")))?,
            );
        }
        Ok(LabelSelector { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
            Requirement::In(k, values) => labels.get(k).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(k, values) => labels.get(k).is_none_or(|v| !values.contains(v)),
            Requirement::Greater(k, n) => labels.get(k).and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v > *n),
            Requirement::Less(k, n) => labels.get(k).and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v < *n),
        })
    }
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn parse_requirement(part: &str) -> std::result::Result<Requirement, String> {
    let key_ok = |key: &str| -> std::result::Result<String, String> {
        let key = key.trim();
        validation::qualified_name(key).map_err(|m| format!("invalid label key {key:?}: {m}"))?;
        Ok(key.to_string())
    };
    let value_ok = |value: &str| -> std::result::Result<String, String> {
        let value = value.trim();
        validation::label_value(value).map_err(|m| format!("invalid label value {value:?}: {m}"))?;
        Ok(value.to_string())
    };
    if let Some(key) = part.strip_prefix('!') {
        return Ok(Requirement::NotExists(key_ok(key)?));
    }
    for (op, make) in [("!=", 0), ("==", 1), ("=", 1)] {
        if let Some((key, value)) = part.split_once(op) {
            let (key, value) = (key_ok(key)?, value_ok(value)?);
            return Ok(if make == 0 {
                Requirement::NotIn(key, vec![value])
            } else {
                Requirement::In(key, vec![value])
            });
        }
    }
    for (op, greater) in [(">", true), ("<", false)] {
        if let Some((key, value)) = part.split_once(op) {
            let key = key_ok(key)?;
            let n: i64 =
                value.trim().parse().map_err(|_| format!("for '{op}' operator, the value must be an integer"))?;
            return Ok(if greater { Requirement::Greater(key, n) } else { Requirement::Less(key, n) });
        }
    }
    let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
    if words.len() == 2 {
        let rest = words[1].trim_start();
        for (op, is_in) in [("notin", false), ("in", true)] {
            if let Some(list) = rest.strip_prefix(op) {
                let list = list.trim();
                let inner = list
                    .strip_prefix('(')
                    .and_then(|l| l.strip_suffix(')'))
                    .ok_or_else(|| format!("found '{list}', expected: '(' ... ')'"))?;
                let values = inner.split(',').map(value_ok).collect::<std::result::Result<Vec<_>, _>>()?;
                let key = key_ok(words[0])?;
                return Ok(if is_in { Requirement::In(key, values) } else { Requirement::NotIn(key, values) });
            }
        }
        return Err(format!("found '{rest}', expected: in, notin, =, ==, !=, gt, lt"));
    }
    Ok(Requirement::Exists(key_ok(part)?))
}

/// One field requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: String,
    pub value: String,
    pub equal: bool,
}

/// A parsed field selector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    pub requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses `text`, accepting only the fields in `supported` (others are a 400, as kube-apiserver answers
    /// `field label not supported: …`).
    pub fn parse(text: &str, supported: &[&str]) -> Result<FieldSelector> {
        let mut requirements = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, value, equal) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, v, true)
            } else {
                return Err(ApiError::bad_request(format!("invalid selector: '{text}'; can't understand '{part}'")));
            };
            let field = field.trim();
            if !supported.contains(&field) {
                return Err(ApiError::bad_request(format!("field label not supported: {field}")));
            }
            requirements.push(FieldRequirement { field: field.to_string(), value: value.trim().to_string(), equal });
        }
        Ok(FieldSelector { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether the object's field values (looked up by `value_of`) satisfy every requirement.
    pub fn matches(&self, value_of: impl Fn(&str) -> String) -> bool {
        self.requirements.iter().all(|r| (value_of(&r.field) == r.value) == r.equal)
    }

    /// The value the selector pins `field` to with `=`, if any (used to narrow a list to one name).
    pub fn pinned(&self, field: &str) -> Option<&str> {
        self.requirements.iter().find(|r| r.equal && r.field == field).map(|r| r.value.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn every_label_operator() {
        let l = labels(&[("app", "web"), ("tier", "front"), ("rank", "5")]);
        for (selector, expected) in [
            ("", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app!=db", true),
            ("missing!=x", true),
            ("app in (web, db)", true),
            ("app notin (web,db)", false),
            ("missing notin (a)", true),
            ("app=web,tier=back", false),
            ("app=web, tier in (front)", true),
            ("rank>4", true),
            ("rank<5", false),
            ("example.com/role", false),
        ] {
            assert_eq!(LabelSelector::parse(selector).unwrap().matches(&l), expected, "{selector}");
        }
    }

    #[test]
    fn malformed_label_selectors_are_bad_requests() {
        for selector in ["app in web", "a b", "-bad=1", "app=has space", "rank>x", "app in (a,b"] {
            let error = LabelSelector::parse(selector).unwrap_err();
            assert_eq!(error.code, 400, "{selector}");
        }
    }

    #[test]
    fn field_selectors_know_their_fields() {
        let supported = ["metadata.name", "metadata.namespace", "status.phase"];
        let s = FieldSelector::parse("metadata.name=web,status.phase!=Failed", &supported).unwrap();
        assert!(s.matches(|f| if f == "metadata.name" { "web".into() } else { "Running".into() }));
        assert!(!s.matches(|f| if f == "metadata.name" { "web".into() } else { "Failed".into() }));
        assert_eq!(s.pinned("metadata.name"), Some("web"));
        let error = FieldSelector::parse("spec.secret=x", &supported).unwrap_err();
        assert_eq!((error.code, error.message.as_str()), (400, "field label not supported: spec.secret"));
    }
}
