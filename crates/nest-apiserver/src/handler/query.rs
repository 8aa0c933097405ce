//! Query parameters: decoding them, and reading the options they carry (list options, `dryRun`,
//! `fieldValidation`, `fieldManager`, delete options).

use nest_codec::{decode_object, parse_json};
use nest_registry::{ApiError, DeleteOptions, ListOptions, Resource, Result};
use serde_json::{Value, json};

/// Decoded query parameters, in the order sent; a repeated key's last value counts.
#[derive(Default, Debug)]
pub(super) struct Query(Vec<(String, String)>);

impl Query {
    /// Decodes a query string; a bad `%` escape or a value that is not UTF-8 is a 400.
    pub fn parse(query: Option<&str>) -> Result<Query> {
        let mut pairs = Vec::new();
        for part in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            pairs.push((percent_decode(k)?, percent_decode(v)?));
        }
        Ok(Query(pairs))
    }

    /// The value of `key`, if sent.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Every value of `key`, in the order sent (`command` of an exec).
    pub fn get_all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0.iter().filter(move |(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Whether `key` is sent as true.
    pub fn flag(&self, key: &str) -> bool {
        // Go's strconv.ParseBool, which kube-apiserver uses: clients send "true", "True", "1", …
        matches!(self.get(key), Some("1" | "t" | "T" | "true" | "TRUE" | "True"))
    }

    /// Whether `dryRun=All` is asked; any other value is a 400.
    pub fn dry_run(&self) -> Result<bool> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => {
                Err(ApiError::bad_request(format!("Unsupported value: {other:?}: supported values: \"All\"")))
            }
        }
    }

    /// What `fieldValidation` asks for fields the kind does not have: an error (`Strict`), a warning (`Warn`, the
    /// default) or nothing (`Ignore`). Returns the warnings to send.
    pub fn field_validation(&self, resource: &Resource, body: &Value) -> Result<Vec<String>> {
        let strict = match self.get("fieldValidation") {
            None | Some("") | Some("Warn") => false,
            Some("Strict") => true,
            Some("Ignore") => return Ok(Vec::new()),
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
                )));
            }
        };
        let unknown: Vec<String> =
            resource.unknown_fields(body).into_iter().map(|field| format!("unknown field {field:?}")).collect();
        if strict && !unknown.is_empty() {
            return Err(ApiError::bad_request(format!("strict decoding error: {}", unknown.join(", "))));
        }
        Ok(unknown)
    }

    /// Who a write is recorded for in `managedFields`: the `fieldManager` parameter, else the client's user agent up
    /// to its first `/` (`kubectl`), as kube-apiserver does.
    pub fn field_manager(&self, user_agent: &str) -> Result<String> {
        if let Some(manager) = self.get("fieldManager").filter(|m| !m.is_empty()) {
            if manager.chars().count() > 128 {
                return Err(ApiError::invalid_patch_options("fieldManager: Too long: may not be more than 128 bytes"));
            }
            if manager.chars().any(char::is_control) {
                return Err(ApiError::invalid_patch_options(
                    "fieldManager: Invalid value: must only contain printable characters",
                ));
            }
            return Ok(manager.to_string());
        }
        let prefix: String = user_agent.split('/').next().unwrap_or_default().trim().chars().take(128).collect();
        Ok(if prefix.is_empty() { "unknown".into() } else { prefix })
    }

    /// The options of a list or a watch.
    pub fn list_options(&self) -> Result<ListOptions> {
        let limit = match self.get("limit").filter(|l| !l.is_empty()) {
            Some(l) => Some(l.parse::<usize>().map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?),
            None => None,
        };
        Ok(ListOptions {
            label_selector: self.get("labelSelector").map(str::to_string),
            field_selector: self.get("fieldSelector").map(str::to_string),
            limit,
            continue_token: self.get("continue").map(str::to_string),
            resource_version: self.get("resourceVersion").map(str::to_string),
            resource_version_match: self.get("resourceVersionMatch").map(str::to_string),
            allow_watch_bookmarks: self.flag("allowWatchBookmarks"),
        })
    }

    /// `DeleteOptions` from the body (kubectl sends one without TypeMeta) and this query, which wins.
    pub fn delete_options(&self, content_type: &str, body: &[u8]) -> Result<DeleteOptions> {
        let body: Value = match content_type {
            _ if body.iter().all(u8::is_ascii_whitespace) => json!({}),
            "application/vnd.kubernetes.protobuf" => decode_object(content_type, body)?,
            _ => parse_json(body)?,
        };
        let text = |v: &Value| v.as_str().map(str::to_string);
        let preconditions = body.get("preconditions").cloned().unwrap_or(Value::Null);
        let dry_run_body = body.get("dryRun").and_then(Value::as_array).is_some_and(|d| d.iter().any(|v| v == "All"));
        let mut propagation = body.get("propagationPolicy").and_then(text);
        if let Some(p) = self.get("propagationPolicy").filter(|p| !p.is_empty()) {
            propagation = Some(p.to_string());
        }
        // The deprecated orphanDependents says it too, either way (false keeps a kind that orphans by default from
        // it).
        let orphan = match self.get("orphanDependents").filter(|o| !o.is_empty()) {
            Some(text) => Some(text == "true"),
            None => body.get("orphanDependents").and_then(Value::as_bool),
        };
        if propagation.is_none() {
            propagation = orphan.map(|orphan| if orphan { "Orphan" } else { "Background" }.to_string());
        }
        let mut grace = body.get("gracePeriodSeconds").and_then(Value::as_i64);
        if let Some(text) = self.get("gracePeriodSeconds").filter(|g| !g.is_empty()) {
            let seconds = text.parse().map_err(|_| {
                ApiError::bad_request(format!("gracePeriodSeconds: {text:?} is not a whole number of seconds"))
            })?;
            grace = Some(seconds);
        }
        Ok(DeleteOptions {
            grace_period_seconds: grace,
            propagation_policy: propagation,
            precondition_uid: preconditions.get("uid").and_then(text),
            precondition_resource_version: preconditions.get("resourceVersion").and_then(text),
            dry_run: dry_run_body || self.dry_run()?,
        })
    }
}

/// Decodes `%XX` escapes and `+` (a space, as in a form).
fn percent_decode(text: &str) -> Result<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
                let byte = hex.and_then(|h| u8::from_str_radix(h, 16).ok());
                out.push(byte.ok_or_else(|| ApiError::bad_request(format!("invalid escape in query {text:?}")))?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| ApiError::bad_request("the query is not UTF-8"))
}
