//! Authorization: whether a user may do what a request asks, as kube-apiserver's `--authorization-mode` decides
//! (1.33). `Node,RBAC` (the default) first asks the Node authorizer ([`crate::node_authz`]) about nodes'
//! credentials, then RBAC, which evaluates the Roles, ClusterRoles (with aggregation) and their bindings stored in
//! this server, as `k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac` does; `AlwaysAllow` lets everything through.
//! Members of `system:masters` may do everything whatever the mode, as kube-apiserver's privileged group. A refusal
//! is a 403 with upstream's message. Creating or changing a binding, or a role, is also checked for escalation: a
//! user may grant only what it holds itself, unless it may `bind` (or `escalate`) that role.

use std::collections::BTreeSet;

use nest_registry::{ApiError, ListOptions, Registry, ResourceInfo, Result};
use serde_json::Value;

use crate::auth::User;

/// How requests are authorized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    AlwaysAllow,
    Rbac,
    /// `Node,RBAC`: the Node authorizer, then RBAC.
    NodeRbac,
}

impl Mode {
    /// Whether RBAC decides (alone or after the Node authorizer).
    pub fn rbac(self) -> bool {
        self != Mode::AlwaysAllow
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Mode, String> {
        let modes: BTreeSet<&str> = text.split(',').map(str::trim).filter(|m| !m.is_empty()).collect();
        match modes.iter().copied().collect::<Vec<_>>()[..] {
            ["AlwaysAllow"] => Ok(Mode::AlwaysAllow),
            ["RBAC"] => Ok(Mode::Rbac),
            ["Node", "RBAC"] => Ok(Mode::NodeRbac),
            _ => Err(format!("{text:?} is not an authorization mode nest serves (Node,RBAC; RBAC; AlwaysAllow)")),
        }
    }
}

/// What a request asks to do.
pub enum Action<'a> {
    /// A verb on a resource (its plural, in its API group) or its subresource.
    Resource {
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        subresource: Option<&'a str>,
        namespace: Option<&'a str>,
        name: Option<&'a str>,
    },
    /// A verb (the method, in lower case) on a path that is not a resource (`/api`, `/metrics`).
    Path { verb: &'a str, path: &'a str },
}

/// The verb of a resource request, as kube-apiserver's request info names it.
pub fn verb(method: &hyper::Method, named: bool, watch: bool) -> &'static str {
    match *method {
        hyper::Method::GET | hyper::Method::HEAD if watch => "watch",
        hyper::Method::GET | hyper::Method::HEAD if named => "get",
        hyper::Method::GET | hyper::Method::HEAD => "list",
        hyper::Method::POST => "create",
        hyper::Method::PUT => "update",
        hyper::Method::PATCH => "patch",
        hyper::Method::DELETE if named => "delete",
        hyper::Method::DELETE => "deletecollection",
        _ => "",
    }
}

/// One RBAC rule, as stored in a Role or ClusterRole.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_string)).collect()
}

impl Rule {
    fn from_json(rule: &Value) -> Rule {
        Rule {
            verbs: strings(&rule["verbs"]),
            api_groups: strings(&rule["apiGroups"]),
            resources: strings(&rule["resources"]),
            resource_names: strings(&rule["resourceNames"]),
            non_resource_urls: strings(&rule["nonResourceURLs"]),
        }
    }

    fn verb(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == "*" || v == verb)
    }

    /// Whether the rule allows `verb` on `resource` (`plural` or `plural/subresource`) of `group`, named `name`.
    pub fn allows(&self, verb: &str, group: &str, resource: &str, name: Option<&str>) -> bool {
        let (plural, sub) = resource.split_once('/').map_or((resource, None), |(p, s)| (p, Some(s)));
        let resource_ok = self.resources.iter().any(|r| {
            r == "*" || r == resource || sub.is_some_and(|sub| r.strip_prefix("*/") == Some(sub)) && !plural.is_empty()
        });
        self.verb(verb)
            && self.api_groups.iter().any(|g| g == "*" || g == group)
            && resource_ok
            && (self.resource_names.is_empty() || name.is_some_and(|n| self.resource_names.iter().any(|r| r == n)))
    }

    /// Whether the rule allows `verb` on the non-resource `path`.
    pub fn allows_path(&self, verb: &str, path: &str) -> bool {
        self.verb(verb)
            && self
                .non_resource_urls
                .iter()
                .any(|u| u == "*" || u == path || u.strip_suffix('*').is_some_and(|prefix| path.starts_with(prefix)))
    }
}

/// The rules of ClusterRole `name` among `roles`, with those of every ClusterRole its aggregation rule selects (as
/// the aggregation controller would have stored them), each role once.
fn cluster_role_rules<'r>(roles: &'r [Value], name: &str, seen: &mut BTreeSet<&'r str>, rules: &mut Vec<Rule>) {
    let Some(role) = roles.iter().find(|r| r["metadata"]["name"] == name) else { return };
    let Some(own) = role["metadata"]["name"].as_str() else { return };
    if !seen.insert(own) {
        return;
    }
    rules.extend(role["rules"].as_array().into_iter().flatten().map(Rule::from_json));
    for selector in role["aggregationRule"]["clusterRoleSelectors"].as_array().into_iter().flatten() {
        let wanted = selector["matchLabels"].as_object().cloned().unwrap_or_default();
        for other in roles {
            let labels = &other["metadata"]["labels"];
            if !wanted.is_empty()
                && wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
                && let Some(other_name) = other["metadata"]["name"].as_str()
            {
                cluster_role_rules(roles, other_name, seen, rules);
            }
        }
    }
}

/// Whether a binding's subject is `user`.
fn subject_is(subject: &Value, user: &User) -> bool {
    let name = subject["name"].as_str().unwrap_or_default();
    match subject["kind"].as_str() {
        Some("User") => name == user.name,
        Some("Group") => user.groups.iter().any(|g| g == name),
        Some("ServiceAccount") => {
            let namespace = subject["namespace"].as_str().unwrap_or_default();
            user.name == format!("system:serviceaccount:{namespace}:{name}")
        }
        _ => false,
    }
}

/// The RBAC objects this server holds.
struct Policy<'a> {
    registry: &'a Registry,
}

impl Policy<'_> {
    async fn list(&self, group: &str, plural: &str, namespace: Option<&str>) -> Result<Vec<Value>> {
        let resource = self.registry.resource(group, "v1", plural).expect("RBAC is built in");
        let list = self.registry.list(&resource, namespace, &ListOptions::default()).await?;
        Ok(list["items"].as_array().cloned().unwrap_or_default())
    }

    /// The rules of the role a binding names (a ClusterRole's including those it aggregates).
    /// `cluster_roles` holds the ClusterRoles once read, for the rest of one decision.
    async fn role_rules(
        &self,
        role_ref: &Value,
        namespace: &str,
        cluster_roles: &mut Option<Vec<Value>>,
    ) -> Result<Vec<Rule>> {
        let name = role_ref["name"].as_str().unwrap_or_default();
        let rbac = "rbac.authorization.k8s.io";
        let role = match role_ref["kind"].as_str() {
            Some("ClusterRole") => {
                if cluster_roles.is_none() {
                    *cluster_roles = Some(self.list(rbac, "clusterroles", None).await?);
                }
                let roles = cluster_roles.as_deref().unwrap_or_default();
                let mut rules = Vec::new();
                cluster_role_rules(roles, name, &mut BTreeSet::new(), &mut rules);
                return Ok(rules);
            }
            Some("Role") => {
                let resource = self.registry.resource(rbac, "v1", "roles").expect("RBAC is built in");
                match self.registry.get(&resource, namespace, name).await {
                    Ok(role) => role,
                    Err(error) if error.code == 404 => return Ok(Vec::new()),
                    Err(error) => return Err(error),
                }
            }
            _ => return Ok(Vec::new()),
        };
        Ok(role["rules"].as_array().into_iter().flatten().map(Rule::from_json).collect())
    }

    /// Every rule that applies to `user` in `namespace` (cluster-wide rules only, when `None`).
    async fn rules_for(&self, user: &User, namespace: Option<&str>) -> Result<Vec<Rule>> {
        Ok(self.grants_for(user, namespace).await?.into_iter().flat_map(|(_, rules)| rules).collect())
    }

    /// The rules that apply to `user` in `namespace`, binding by binding: each with what RBAC's reasons call it
    /// (`ClusterRoleBinding "x" of ClusterRole "y" to User "z"`). ClusterRoleBindings come first, as RBAC visits them.
    async fn grants_for(&self, user: &User, namespace: Option<&str>) -> Result<Vec<(String, Vec<Rule>)>> {
        let rbac = "rbac.authorization.k8s.io";
        let mut bindings: Vec<(Value, String)> =
            self.list(rbac, "clusterrolebindings", None).await?.into_iter().map(|b| (b, String::new())).collect();
        if let Some(namespace) = namespace.filter(|n| !n.is_empty()) {
            bindings.extend(
                self.list(rbac, "rolebindings", Some(namespace)).await?.into_iter().map(|b| (b, namespace.to_string())),
            );
        }
        let mut grants = Vec::new();
        let mut cluster_roles = None;
        for (binding, namespace) in bindings {
            let Some(subject) = binding["subjects"].as_array().into_iter().flatten().find(|s| subject_is(s, user))
            else {
                continue;
            };
            let rules = self.role_rules(&binding["roleRef"], &namespace, &mut cluster_roles).await?;
            grants.push((describe(&binding, subject, &namespace), rules));
        }
        Ok(grants)
    }
}

/// A binding as RBAC's reasons name it (`pkg/registry/rbac/validation`'s describers): `ClusterRoleBinding "name"`
/// or `RoleBinding "name/namespace"`, `of <roleRef kind> "role"`, `to` the subject (`User "alice"`, `Group "devs"`,
/// `ServiceAccount "name/namespace"`).
fn describe(binding: &Value, subject: &Value, namespace: &str) -> String {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let name = text(&binding["metadata"]["name"]);
    let which = if namespace.is_empty() {
        format!("ClusterRoleBinding \"{name}\"")
    } else {
        format!("RoleBinding \"{name}/{namespace}\"")
    };
    let kind = text(&subject["kind"]);
    let subject_name = if kind == "ServiceAccount" {
        let own = text(&subject["namespace"]);
        format!("{}/{}", text(&subject["name"]), if own.is_empty() { namespace.to_string() } else { own })
    } else {
        text(&subject["name"])
    };
    let (role_kind, role) = (text(&binding["roleRef"]["kind"]), text(&binding["roleRef"]["name"]));
    format!("{which} of {role_kind} \"{role}\" to {kind} \"{subject_name}\"")
}

/// The 403 of an action `user` may not take, in kube-apiserver's words.
fn forbidden(user: &User, action: &Action) -> ApiError {
    match action {
        Action::Resource { verb, group, resource: plural, subresource, namespace, name } => {
            let resource = match subresource {
                Some(sub) => format!("{plural}/{sub}"),
                None => plural.to_string(),
            };
            let qualified = if group.is_empty() { plural.to_string() } else { format!("{plural}.{group}") };
            let scope = match namespace.filter(|n| !n.is_empty()) {
                Some(namespace) => format!("in the namespace \"{namespace}\""),
                None => "at the cluster scope".to_string(),
            };
            let reason = format!(
                "User \"{}\" cannot {verb} resource \"{resource}\" in API group \"{group}\" {scope}",
                user.name
            );
            let what = match name {
                Some(name) => format!("{qualified} \"{name}\""),
                None => qualified,
            };
            let mut error = ApiError::new(403, "Forbidden", format!("{what} is forbidden: {reason}"));
            error.details.group = Some(group.to_string());
            error.details.kind = Some(plural.to_string());
            error.details.name = name.map(str::to_string);
            error
        }
        Action::Path { verb, path } => {
            ApiError::new(403, "Forbidden", format!("forbidden: User \"{}\" cannot {verb} path \"{path}\"", user.name))
        }
    }
}

/// Whether `user` may take `action` under `mode`; a 403 if not.
pub async fn authorize(registry: &Registry, mode: Mode, user: &User, action: &Action<'_>) -> Result<()> {
    if allowed(registry, mode, user, action).await? {
        return Ok(());
    }
    let mut error = forbidden(user, action);
    let node = crate::node_authz::node_name(user).filter(|_| mode == Mode::NodeRbac);
    if let Some(reason) = node.and_then(|node| crate::node_authz::refusal(node, action)) {
        error.message = format!("{}: {reason}", error.message);
    }
    Err(error)
}

/// Whether `user` may take `action` under `mode`.
pub async fn allowed(registry: &Registry, mode: Mode, user: &User, action: &Action<'_>) -> Result<bool> {
    Ok(decide(registry, mode, user, action).await?.allowed)
}

/// An authorizer's answer, as a SubjectAccessReview's status carries it.
pub struct Decision {
    pub allowed: bool,
    /// Why, in upstream's words: empty when `system:masters`, `AlwaysAllow` or the Node authorizer allows, or nothing
    /// does; `RBAC: allowed by <binding>` when RBAC does.
    pub reason: String,
}

/// Whether, and why, `user` may take `action` under `mode`: the privileged group first, then the Node authorizer,
/// then RBAC, the first that allows deciding (kube-apiserver's union of authorizers).
pub async fn decide(registry: &Registry, mode: Mode, user: &User, action: &Action<'_>) -> Result<Decision> {
    let allow = |reason: String| Ok(Decision { allowed: true, reason });
    if mode == Mode::AlwaysAllow || user.groups.iter().any(|g| g == "system:masters") {
        return allow(String::new());
    }
    if mode == Mode::NodeRbac
        && let Some(node) = crate::node_authz::node_name(user)
        && crate::node_authz::allows(registry, node, action).await?
    {
        return allow(String::new());
    }
    let policy = Policy { registry };
    let namespace = match action {
        Action::Resource { namespace, .. } => *namespace,
        Action::Path { .. } => None,
    };
    for (by, rules) in policy.grants_for(user, namespace).await? {
        if rules.iter().any(|rule| rule_allows(rule, action)) {
            return allow(format!("RBAC: allowed by {by}"));
        }
    }
    Ok(Decision { allowed: false, reason: String::new() })
}

/// Whether `rule` allows `action`.
fn rule_allows(rule: &Rule, action: &Action<'_>) -> bool {
    match action {
        Action::Resource { verb, group, resource, subresource, name, .. } => {
            let resource = subresource.map_or_else(|| resource.to_string(), |sub| format!("{resource}/{sub}"));
            rule.allows(verb, group, &resource, *name)
        }
        Action::Path { verb, path } => rule.allows_path(verb, path),
    }
}

/// Every rule that applies to `user` in `namespace` (cluster-wide ones only when `None`): what
/// `SelfSubjectRulesReview` answers.
pub async fn rules(registry: &Registry, user: &User, namespace: Option<&str>) -> Result<Vec<Rule>> {
    Policy { registry }.rules_for(user, namespace).await
}

/// The atoms a rule grants: (verb, group, resource, name) with `*` kept as written.
fn atoms(rule: &Rule) -> Vec<(String, String, String, Option<String>)> {
    let names: Vec<Option<String>> = if rule.resource_names.is_empty() {
        vec![None]
    } else {
        rule.resource_names.iter().cloned().map(Some).collect()
    };
    let mut out = Vec::new();
    for verb in &rule.verbs {
        for group in &rule.api_groups {
            for resource in &rule.resources {
                for name in &names {
                    out.push((verb.clone(), group.clone(), resource.clone(), name.clone()));
                }
            }
        }
    }
    out
}

/// Whether `owner`'s rules cover every permission of `servant` (upstream's `Covers`): a grant may not give more
/// than its granter holds. A wildcard is covered only by a wildcard.
pub fn covers(owner: &[Rule], servant: &[Rule]) -> bool {
    servant.iter().all(|rule| {
        let resources_ok = atoms(rule).iter().all(|(verb, group, resource, name)| {
            owner.iter().any(|o| {
                o.verbs.iter().any(|v| v == "*" || v == verb)
                    && o.api_groups.iter().any(|g| g == "*" || g == group)
                    && (o.resources.iter().any(|r| r == "*" || r == resource)
                        || resource
                            .split_once('/')
                            .is_some_and(|(_, sub)| o.resources.iter().any(|r| r.strip_prefix("*/") == Some(sub))))
                    && (o.resource_names.is_empty() || name.as_ref().is_some_and(|n| o.resource_names.contains(n)))
            })
        });
        let paths: BTreeSet<&String> = rule.non_resource_urls.iter().collect();
        let paths_ok = paths.iter().all(|path| {
            rule.verbs.iter().all(|verb| {
                owner.iter().any(|o| {
                    o.verbs.iter().any(|v| v == "*" || v == verb)
                        && o.non_resource_urls
                            .iter()
                            .any(|u| u == "*" || u == *path || u.strip_suffix('*').is_some_and(|p| path.starts_with(p)))
                })
            })
        });
        resources_ok && paths_ok
    })
}

/// Refuses a write of an RBAC object that would grant more than `user` holds (kube-apiserver's escalation check,
/// `pkg/registry/rbac`): a binding's role must be covered by the user's own rules where the binding applies, unless
/// the user may `bind` it; a role's rules likewise, unless the user may `escalate`.
pub async fn check_escalation(
    registry: &Registry,
    mode: Mode,
    user: &User,
    info: &ResourceInfo,
    namespace: &str,
    object: &Value,
) -> Result<()> {
    if mode == Mode::AlwaysAllow
        || user.groups.iter().any(|g| g == "system:masters")
        || info.group != "rbac.authorization.k8s.io"
    {
        return Ok(());
    }
    let policy = Policy { registry };
    let scope = Some(namespace).filter(|n| !n.is_empty());
    let own = policy.rules_for(user, scope).await?;
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let (granted, exempt_verb, role_resource, role_name) = match info.plural.as_str() {
        "rolebindings" | "clusterrolebindings" => {
            let role_ref = &object["roleRef"];
            let role_plural = if role_ref["kind"] == "ClusterRole" { "clusterroles" } else { "roles" };
            (
                policy.role_rules(role_ref, namespace, &mut None).await?,
                "bind",
                role_plural,
                role_ref["name"].as_str().unwrap_or_default().to_string(),
            )
        }
        "roles" | "clusterroles" => {
            let rules: Vec<Rule> = object["rules"].as_array().into_iter().flatten().map(Rule::from_json).collect();
            (rules, "escalate", info.plural.as_str(), name.to_string())
        }
        _ => return Ok(()),
    };
    let may_exempt =
        own.iter().any(|r| r.allows(exempt_verb, "rbac.authorization.k8s.io", role_resource, Some(&role_name)));
    if may_exempt || covers(&own, &granted) {
        return Ok(());
    }
    let what = if exempt_verb == "bind" { "the role it names" } else { "its rules" };
    Err(ApiError::new(
        403,
        "Forbidden",
        format!(
            "{} \"{name}\" is forbidden: user \"{}\" (groups={:?}) is attempting to grant RBAC permissions not currently held: {what} grant more than the user holds",
            info.qualified(),
            user.name,
            user.groups
        ),
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rule(value: Value) -> Rule {
        Rule::from_json(&value)
    }

    #[test]
    fn rules_match_verbs_groups_resources_subresources_and_names() {
        let pods = rule(json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}));
        assert!(pods.allows("get", "", "pods", Some("web")));
        assert!(!pods.allows("delete", "", "pods", Some("web")));
        assert!(!pods.allows("get", "apps", "pods", None));
        assert!(!pods.allows("get", "", "pods/log", Some("web")), "a resource does not grant its subresources");
        let logs = rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log"]}));
        assert!(logs.allows("get", "", "pods/log", Some("web")) && !logs.allows("get", "", "pods", Some("web")));
        let statuses = rule(json!({"verbs": ["update"], "apiGroups": ["*"], "resources": ["*/status"]}));
        assert!(statuses.allows("update", "apps", "deployments/status", Some("d")));
        assert!(!statuses.allows("update", "apps", "deployments", Some("d")));
        let named =
            rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["one"]}));
        assert!(named.allows("get", "", "configmaps", Some("one")));
        assert!(!named.allows("get", "", "configmaps", Some("two")) && !named.allows("list", "", "configmaps", None));
        let paths = rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz", "/apis/*"]}));
        assert!(paths.allows_path("get", "/healthz") && paths.allows_path("get", "/apis/apps/v1"));
        assert!(!paths.allows_path("get", "/metrics") && !paths.allows_path("post", "/healthz"));
    }

    #[test]
    fn a_grant_is_covered_only_by_as_much_or_more() {
        let owner = vec![rule(
            json!({"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods", "configmaps"]}),
        )];
        let less = vec![rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}))];
        let more = vec![rule(json!({"verbs": ["get", "delete"], "apiGroups": [""], "resources": ["pods"]}))];
        let wild = vec![rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["*"]}))];
        assert!(covers(&owner, &less));
        assert!(!covers(&owner, &more));
        assert!(!covers(&owner, &wild), "a wildcard is covered only by a wildcard");
        let admin =
            vec![rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "nonResourceURLs": ["*"]}))];
        assert!(covers(&admin, &more) && covers(&admin, &wild));
    }
}
