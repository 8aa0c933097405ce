//! The audit log, as kube-apiserver writes it (`k8s.io/apiserver/pkg/audit`, 1.33): with `--audit-log-path` and
//! `--audit-policy-file`, every request the policy does not leave out becomes JSON lines of `audit.k8s.io/v1`
//! `Event`s — who (user, groups, the user impersonated), what (verb, object, request URI), from where (source
//! address, user agent), the answer's status, and at the `Request` and `RequestResponse` levels the request's and
//! the answer's objects — one line per stage: `RequestReceived`, then `ResponseComplete` (`ResponseStarted` for a
//! watch or a log stream, which go on).
//!
//! The policy is an `audit.k8s.io/v1` `Policy`: its first rule whose `users`, `userGroups`, `verbs`, `namespaces`,
//! `resources` (group, resources with `*` and `resource/subresource` forms, resourceNames) and `nonResourceURLs`
//! (with a trailing `*`) all match the request gives the level (`None`, `Metadata`, `Request`, `RequestResponse`);
//! none matching is `None`. `omitStages` (the policy's and the rule's) and `omitManagedFields` are honoured. Without a
//! policy file nothing is audited, as upstream.

use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;

use anyhow::Context as _;
use serde_json::{Value, json};

/// How much of a request is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    None,
    Metadata,
    Request,
    RequestResponse,
}

impl Level {
    fn parse(text: &str) -> Option<Level> {
        Some(match text {
            "None" => Level::None,
            "Metadata" => Level::Metadata,
            "Request" => Level::Request,
            "RequestResponse" => Level::RequestResponse,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }
}

/// One rule of the policy.
#[derive(Clone, Debug, Default)]
struct Rule {
    level: Option<Level>,
    users: Vec<String>,
    user_groups: Vec<String>,
    verbs: Vec<String>,
    namespaces: Vec<String>,
    /// (group, resources, resourceNames)
    resources: Vec<(String, Vec<String>, Vec<String>)>,
    non_resource_urls: Vec<String>,
    omit_stages: Vec<String>,
    omit_managed_fields: Option<bool>,
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_string)).collect()
}

/// What kind of request an event is about: a resource, or a path that is not one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectRef {
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub api_group: String,
    pub api_version: String,
}

/// A request as the audit log names it, filled in while it is served.
#[derive(Clone, Debug, Default)]
pub struct Record {
    pub id: String,
    pub received: String,
    pub uri: String,
    /// `get`, `list`, `watch`, `create`… for resources; the HTTP method in lower case for other paths.
    pub verb: String,
    /// Who proved themselves; `None` for an anonymous request.
    pub user: Option<(String, Vec<String>)>,
    /// Whom they acted as (`Impersonate-User`), when not themselves.
    pub impersonated: Option<(String, Vec<String>)>,
    pub object: Option<ObjectRef>,
    pub source: String,
    pub user_agent: String,
    /// The request's object (its body, when JSON).
    pub request_object: Option<Value>,
    /// A watch or a log stream: its answer goes on after the first bytes.
    pub long_running: bool,
}

impl Record {
    /// A request received now.
    pub fn new(uri: &str, method: &str, source: String, user_agent: &str) -> Record {
        Record {
            id: nest_registry::meta::new_uid(),
            received: micro_time(nest_core::clock::now()),
            uri: uri.to_string(),
            verb: method.to_ascii_lowercase(),
            source,
            user_agent: user_agent.to_string(),
            ..Default::default()
        }
    }
}

/// A timestamp as audit events write them: RFC 3339 with microseconds.
fn micro_time(at: jiff::Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

/// The audit log: where events go and which.
#[derive(Debug)]
pub struct Auditor {
    rules: Vec<Rule>,
    omit_stages: Vec<String>,
    omit_managed_fields: bool,
    file: Mutex<std::fs::File>,
}

impl Auditor {
    /// The auditor of `--audit-log-path` and `--audit-policy-file`: `None` (nothing audited) without both.
    pub fn open(log: Option<&Path>, policy: Option<&Path>) -> anyhow::Result<Option<Auditor>> {
        let (Some(log), Some(policy)) = (log, policy) else {
            if log.is_some() {
                tracing::warn!("--audit-log-path without --audit-policy-file: nothing is audited");
            }
            return Ok(None);
        };
        let text = std::fs::read_to_string(policy).with_context(|| format!("reading {}", policy.display()))?;
        let mut auditor = Auditor::parse(&text).with_context(|| format!("the audit policy {}", policy.display()))?;
        use std::os::unix::fs::OpenOptionsExt as _;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        auditor.file = Mutex::new(file);
        Ok(Some(auditor))
    }

    /// A policy from its YAML or JSON text, writing nowhere yet.
    fn parse(text: &str) -> anyhow::Result<Auditor> {
        let policy: Value = serde_norway::from_str(text).context("not YAML")?;
        anyhow::ensure!(
            policy["apiVersion"] == "audit.k8s.io/v1" && policy["kind"] == "Policy",
            "not an audit.k8s.io/v1 Policy"
        );
        let mut rules = Vec::new();
        for (i, rule) in policy["rules"].as_array().into_iter().flatten().enumerate() {
            let level = rule["level"].as_str().unwrap_or_default();
            let level = Level::parse(level).with_context(|| format!("rules[{i}].level: {level:?} is not a level"))?;
            rules.push(Rule {
                level: Some(level),
                users: strings(&rule["users"]),
                user_groups: strings(&rule["userGroups"]),
                verbs: strings(&rule["verbs"]),
                namespaces: strings(&rule["namespaces"]),
                resources: rule["resources"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|r| {
                        let group = r["group"].as_str().unwrap_or_default().to_string();
                        (group, strings(&r["resources"]), strings(&r["resourceNames"]))
                    })
                    .collect(),
                non_resource_urls: strings(&rule["nonResourceURLs"]),
                omit_stages: strings(&rule["omitStages"]),
                omit_managed_fields: rule["omitManagedFields"].as_bool(),
            });
        }
        Ok(Auditor {
            rules,
            omit_stages: strings(&policy["omitStages"]),
            omit_managed_fields: policy["omitManagedFields"].as_bool().unwrap_or(false),
            file: Mutex::new(tempfile_sink()),
        })
    }

    /// The first rule that matches `record`.
    fn rule(&self, record: &Record) -> Option<&Rule> {
        let (name, groups) = record.user.clone().unwrap_or_else(anonymous);
        self.rules.iter().find(|rule| {
            let listed = |list: &[String], value: &str| list.is_empty() || list.iter().any(|l| l == value);
            if !listed(&rule.users, &name) || !listed(&rule.verbs, &record.verb) {
                return false;
            }
            if !rule.user_groups.is_empty() && !groups.iter().any(|g| rule.user_groups.contains(g)) {
                return false;
            }
            match &record.object {
                Some(object) => {
                    if !rule.non_resource_urls.is_empty() || !listed(&rule.namespaces, &object.namespace) {
                        return false;
                    }
                    rule.resources.is_empty()
                        || rule.resources.iter().any(|(group, resources, names)| {
                            let full = if object.subresource.is_empty() {
                                object.resource.clone()
                            } else {
                                format!("{}/{}", object.resource, object.subresource)
                            };
                            let resource = resources.is_empty()
                                || resources.iter().any(|r| {
                                    r == "*"
                                        || *r == full
                                        || (r.ends_with("/*") && r.trim_end_matches("/*") == object.resource)
                                        || (r.starts_with("*/") && r.trim_start_matches("*/") == object.subresource)
                                });
                            *group == object.api_group && resource && (names.is_empty() || names.contains(&object.name))
                        })
                }
                None => {
                    if !rule.resources.is_empty() || !rule.namespaces.is_empty() {
                        return false;
                    }
                    let path = record.uri.split('?').next().unwrap_or_default();
                    rule.non_resource_urls.is_empty()
                        || rule.non_resource_urls.iter().any(|url| match url.strip_suffix('*') {
                            Some(prefix) => path.starts_with(prefix),
                            None => path == url,
                        })
                }
            }
        })
    }

    /// The level `record` is audited at.
    pub fn level(&self, record: &Record) -> Level {
        self.rule(record).and_then(|r| r.level).unwrap_or(Level::None)
    }

    /// Writes `record`'s events, answered with `status` (a Status object for a failure, else `{"code": N}`) and,
    /// at `RequestResponse`, `response` (the answer's object when it is one).
    pub fn write(&self, record: &Record, status: Value, response: Option<Value>) {
        let Some(rule) = self.rule(record) else { return };
        let level = rule.level.unwrap_or(Level::None);
        if level == Level::None {
            return;
        }
        let omitted = |stage: &str| self.omit_stages.iter().chain(&rule.omit_stages).any(|s| s == stage);
        let omit_managed = rule.omit_managed_fields.unwrap_or(self.omit_managed_fields);
        let strip = |mut object: Value| {
            if omit_managed && let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                metadata.remove("managedFields");
            }
            object
        };
        let (name, groups) = record.user.clone().unwrap_or_else(anonymous);
        let mut event = json!({
            "kind": "Event",
            "apiVersion": "audit.k8s.io/v1",
            "level": level.name(),
            "auditID": record.id,
            "stage": "RequestReceived",
            "requestURI": record.uri,
            "verb": record.verb,
            "user": {"username": name, "groups": groups},
            "sourceIPs": [record.source],
            "userAgent": record.user_agent,
            "requestReceivedTimestamp": record.received,
            "stageTimestamp": record.received,
        });
        if let Some((name, groups)) = &record.impersonated {
            event["impersonatedUser"] = json!({"username": name, "groups": groups});
        }
        if let Some(object) = &record.object {
            let mut reference = serde_json::Map::new();
            for (key, value) in [
                ("resource", &object.resource),
                ("namespace", &object.namespace),
                ("name", &object.name),
                ("apiGroup", &object.api_group),
                ("apiVersion", &object.api_version),
                ("subresource", &object.subresource),
            ] {
                if !value.is_empty() {
                    reference.insert(key.into(), json!(value));
                }
            }
            event["objectRef"] = Value::Object(reference);
        }
        if level >= Level::Request
            && let Some(object) = &record.request_object
        {
            event["requestObject"] = strip(object.clone());
        }
        let mut lines = Vec::new();
        if !omitted("RequestReceived") {
            lines.push(event.to_string());
        }
        let stage = if record.long_running { "ResponseStarted" } else { "ResponseComplete" };
        if !omitted(stage) {
            event["stage"] = json!(stage);
            event["stageTimestamp"] = json!(micro_time(nest_core::clock::now()));
            event["responseStatus"] = status;
            if level == Level::RequestResponse
                && let Some(response) = response
            {
                event["responseObject"] = strip(response);
            }
            lines.push(event.to_string());
        }
        if lines.is_empty() {
            return;
        }
        let text = lines.join("\n") + "\n";
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(error) = file.write_all(text.as_bytes()) {
            tracing::warn!(%error, "writing the audit log");
        }
    }
}

/// Who an anonymous request is.
fn anonymous() -> (String, Vec<String>) {
    ("system:anonymous".into(), vec!["system:unauthenticated".into()])
}

/// Where a parsed policy writes until it is given its log: nowhere.
fn tempfile_sink() -> std::fs::File {
    std::fs::OpenOptions::new().write(true).open("/dev/null").expect("/dev/null")
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: ["system:kube-proxy"]
  verbs: [watch]
- level: None
  nonResourceURLs: ["/healthz*", /version]
- level: RequestResponse
  resources: [{group: "", resources: [configmaps], resourceNames: [special]}]
- level: Request
  userGroups: [developers]
  namespaces: [team]
- level: Metadata
  resources: [{group: "", resources: ["pods/*"]}]
- level: Metadata
"#;

    fn record(user: &str, groups: &[&str], verb: &str, object: Option<(&str, &str, &str, &str)>) -> Record {
        Record {
            uri: "/api/v1/namespaces/team/configmaps".into(),
            verb: verb.into(),
            user: Some((user.into(), groups.iter().map(|g| g.to_string()).collect())),
            object: object.map(|(resource, subresource, namespace, name)| ObjectRef {
                resource: resource.into(),
                subresource: subresource.into(),
                namespace: namespace.into(),
                name: name.into(),
                api_version: "v1".into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_first_matching_rule_decides_the_level() {
        let auditor = Auditor::parse(POLICY).unwrap();
        let level = |r: Record| auditor.level(&r);
        assert_eq!(level(record("system:kube-proxy", &[], "watch", Some(("services", "", "", "")))), Level::None);
        assert_eq!(level(record("system:kube-proxy", &[], "list", Some(("services", "", "", "")))), Level::Metadata);
        let mut health = record("alice", &[], "get", None);
        health.uri = "/healthz/etcd".into();
        assert_eq!(level(health.clone()), Level::None);
        health.uri = "/api".into();
        assert_eq!(level(health), Level::Metadata, "a path no narrower rule names");
        let special = Some(("configmaps", "", "team", "special"));
        assert_eq!(level(record("bob", &[], "get", special)), Level::RequestResponse);
        let other = Some(("configmaps", "", "team", "other"));
        assert_eq!(level(record("bob", &["developers"], "get", other)), Level::Request);
        assert_eq!(level(record("bob", &[], "get", other)), Level::Metadata);
    }

    #[test]
    fn a_policy_that_is_not_one_is_refused() {
        assert!(Auditor::parse("apiVersion: v1\nkind: ConfigMap\n").is_err());
        let bad = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Everything}]\n";
        assert!(Auditor::parse(bad).unwrap_err().to_string().contains("rules[0].level"));
    }

    #[test]
    fn events_are_upstreams_shape_one_line_a_stage() {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.yaml");
        std::fs::write(&policy, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: RequestResponse}]\n")
            .unwrap();
        let log = dir.path().join("audit.log");
        let auditor = Auditor::open(Some(&log), Some(&policy)).unwrap().unwrap();
        let mut record =
            record("alice", &["team", "system:authenticated"], "create", Some(("configmaps", "", "team", "c")));
        record.request_object = Some(json!({"metadata": {"name": "c", "managedFields": []}}));
        auditor.write(&record, json!({"metadata": {}, "code": 201}), Some(json!({"metadata": {"name": "c"}})));
        let text = std::fs::read_to_string(&log).unwrap();
        let events: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(events.len(), 2);
        assert_eq!(
            (events[0]["stage"].as_str(), events[1]["stage"].as_str()),
            (Some("RequestReceived"), Some("ResponseComplete"))
        );
        let event = &events[1];
        assert_eq!(event["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(event["user"], json!({"username": "alice", "groups": ["team", "system:authenticated"]}));
        assert_eq!(
            event["objectRef"],
            json!({"resource": "configmaps", "namespace": "team", "name": "c", "apiVersion": "v1"})
        );
        assert_eq!(event["responseStatus"]["code"], 201);
        assert_eq!(event["requestObject"]["metadata"]["name"], "c");
        assert_eq!(event["responseObject"]["metadata"]["name"], "c");
        assert!(events[0].get("responseStatus").is_none());
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&log).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
