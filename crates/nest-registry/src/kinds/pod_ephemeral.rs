//! A pod's ephemeral containers (`kubectl debug`): the `pods/ephemeralcontainers` subresource and the checks of
//! `spec.ephemeralContainers`, after kube-apiserver 1.33 (`podEphemeralContainersStrategy` in
//! pkg/registry/core/pod/strategy.go; `validateEphemeralContainers` and `ValidatePodEphemeralContainersUpdate` in
//! pkg/apis/core/validation/validation.go).
//!
//! A write through the subresource changes `spec.ephemeralContainers` and nothing else (the rest of the body is
//! ignored, as upstream's `dropNonEphemeralContainerUpdates` ignores it); entries may only be added, never removed or
//! edited. An ephemeral container has no ports, probes, lifecycle, resources or restart policy, no `subPath` mounts,
//! a name no other container of the pod has, and a `targetContainerName` naming one of the pod's containers. A pod
//! is never created with ephemeral containers.

use serde_json::{Value, json};

use crate::error::Cause;

/// The subresource's name.
pub const SUBRESOURCE: &str = "ephemeralcontainers";

/// What an ephemeral container may not have, by its JSON name: every field of `EphemeralContainerCommon` outside
/// upstream's `allowedEphemeralContainerFields`.
const NOT_ALLOWED: &[&str] = &[
    "ports",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "lifecycle",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
];

/// The message of each refusal of a field (upstream's `validateFieldAllowList` text).
const CANNOT_BE_SET: &str = "Forbidden: cannot be set for an Ephemeral Container";

/// The pod a write of `body` through the subresource makes of `current`: `current` with `body`'s ephemeral
/// containers (defaulted) and its resourceVersion, for optimistic concurrency.
pub fn updated(current: &Value, body: &Value) -> Value {
    let mut pod = current.clone();
    let mut ephemeral = body["spec"]["ephemeralContainers"].clone();
    for container in ephemeral.as_array_mut().into_iter().flatten() {
        super::pod::default_ephemeral_container(container);
    }
    match ephemeral {
        Value::Null => {
            if let Some(spec) = pod["spec"].as_object_mut() {
                spec.remove("ephemeralContainers");
            }
        }
        list => pod["spec"]["ephemeralContainers"] = list,
    }
    match body["metadata"]["resourceVersion"].as_str().filter(|rv| !rv.is_empty()) {
        Some(rv) => pod["metadata"]["resourceVersion"] = json!(rv),
        None => {
            if let Some(metadata) = pod["metadata"].as_object_mut() {
                metadata.remove("resourceVersion");
            }
        }
    }
    pod
}

/// A pod's create may not name ephemeral containers (`ValidatePodCreate`).
pub fn check_create(spec: &Value, causes: &mut Vec<Cause>) {
    if spec["ephemeralContainers"].as_array().is_some_and(|list| !list.is_empty()) {
        causes.push(forbidden("spec.ephemeralContainers", "Forbidden: cannot be set on create"));
    }
}

/// The checks of `spec.ephemeralContainers` every pod write makes (`validateEphemeralContainers`): names unique
/// across all of the pod's containers, images given, targets that exist, no field outside the allow list, no
/// `subPath` mounts.
pub fn check(spec: &Value, at: &str, causes: &mut Vec<Cause>) {
    let others: Vec<&str> = ["initContainers", "containers"]
        .iter()
        .flat_map(|list| spec[*list].as_array().into_iter().flatten())
        .filter_map(|c| c["name"].as_str())
        .collect();
    let mut names: Vec<&str> = others.clone();
    for (i, container) in spec["ephemeralContainers"].as_array().into_iter().flatten().enumerate() {
        let field = format!("{at}.ephemeralContainers[{i}]");
        match container["name"].as_str().filter(|n| !n.is_empty()) {
            None => causes.push(Cause::required(format!("{field}.name"))),
            Some(name) if names.contains(&name) => causes.push(Cause {
                reason: "FieldValueDuplicate",
                message: format!("Duplicate value: {name:?}"),
                field: format!("{field}.name"),
            }),
            Some(name) => {
                if let Err(message) = crate::validation::dns1123_label(name) {
                    causes.push(Cause::invalid(format!("{field}.name"), format!("Invalid value: {name:?}: {message}")));
                }
                names.push(name);
            }
        }
        if container["image"].as_str().is_none_or(str::is_empty) {
            causes.push(Cause::required(format!("{field}.image")));
        }
        if let Some(target) = container["targetContainerName"].as_str().filter(|t| !t.is_empty())
            && !others.contains(&target)
        {
            causes.push(Cause {
                reason: "FieldValueNotFound",
                message: format!("Not found: {target:?}"),
                field: format!("{field}.targetContainerName"),
            });
        }
        for name in NOT_ALLOWED {
            if set(&container[*name]) {
                causes.push(forbidden(&format!("{field}.{name}"), CANNOT_BE_SET));
            }
        }
        for (j, mount) in container["volumeMounts"].as_array().into_iter().flatten().enumerate() {
            for sub in ["subPath", "subPathExpr"] {
                if mount[sub].as_str().is_some_and(|s| !s.is_empty()) {
                    causes.push(forbidden(&format!("{field}.volumeMounts[{j}].{sub}"), CANNOT_BE_SET));
                }
            }
        }
    }
}

/// The checks of a write through the subresource (`ValidatePodEphemeralContainersUpdate`): every ephemeral container
/// `old` has is still there, unchanged. Upstream appends a `cmp.Diff` of an edited entry to its message; this one
/// names the entry without the diff.
pub fn check_update(new: &Value, old: &Value, causes: &mut Vec<Cause>) {
    let field = "spec.ephemeralContainers";
    if old["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string() {
        causes.push(forbidden("", "Forbidden: static pods do not support ephemeral containers"));
        return;
    }
    let new_list = new["spec"][field.trim_start_matches("spec.")].as_array().map(Vec::as_slice).unwrap_or_default();
    for before in old["spec"]["ephemeralContainers"].as_array().into_iter().flatten() {
        let name = before["name"].as_str().unwrap_or_default();
        match new_list.iter().find(|c| c["name"] == before["name"]) {
            None => causes.push(forbidden(
                field,
                &format!("Forbidden: existing ephemeral containers {name:?} may not be removed\n"),
            )),
            Some(after) if after != before => causes.push(forbidden(
                &format!("{field}[{name}]"),
                &format!("Forbidden: existing ephemeral containers {name:?} may not be changed\n"),
            )),
            Some(_) => {}
        }
    }
}

/// The fields of a pod's spec that an update of the pod itself may change, in upstream's words
/// (`updatablePodSpecFields`, pkg/apis/core/validation/validation.go, 1.33), which its refusal lists.
const UPDATABLE_POD_SPEC_FIELDS: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,\
`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),\
`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// The check of an update of the pod itself (PUT or PATCH of `pods/<name>`, `ValidatePodUpdate`): its ephemeral
/// containers are not among the fields it may change, so a body whose `spec.ephemeralContainers` differs from the
/// stored pod's is refused with upstream's `spec: Forbidden: pod updates may not change fields other than …`, rather
/// than the change being dropped without a word. Upstream appends a `cmp.Diff` of the two specs; this one names the
/// ephemeral containers before and after.
pub fn check_main_update(new: &Value, old: &Value, causes: &mut Vec<Cause>) {
    let list =
        |pod: &Value| -> Vec<Value> { pod["spec"]["ephemeralContainers"].as_array().cloned().unwrap_or_default() };
    let (before, after) = (list(old), list(new));
    if before == after {
        return;
    }
    let names = |list: &[Value]| -> Vec<String> {
        list.iter().map(|c| c["name"].as_str().unwrap_or_default().to_string()).collect()
    };
    let message = format!(
        "Forbidden: pod updates may not change fields other than {UPDATABLE_POD_SPEC_FIELDS}\n  \
         spec.ephemeralContainers: {:?} -> {:?} (only pods/{SUBRESOURCE} adds ephemeral containers)",
        names(&before),
        names(&after)
    );
    causes.push(forbidden("spec", &message));
}

/// Whether a field is set: present and not its type's zero value (upstream compares with the zero value).
fn set(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Object(map) => !map.is_empty(),
        Value::Array(list) => !list.is_empty(),
        Value::String(text) => !text.is_empty(),
        _ => true,
    }
}

fn forbidden(field: &str, message: &str) -> Cause {
    Cause { reason: "FieldValueForbidden", message: message.into(), field: field.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ephemeral: Value) -> Value {
        json!({"metadata": {"name": "p", "resourceVersion": "7"},
               "spec": {"containers": [{"name": "app", "image": "busybox"}], "ephemeralContainers": ephemeral}})
    }

    fn causes_of(spec: &Value) -> Vec<(String, String)> {
        let mut causes = Vec::new();
        check(spec, "spec", &mut causes);
        causes.into_iter().map(|c| (c.field, c.message)).collect()
    }

    #[test]
    fn a_debug_container_as_kubectl_debug_writes_it_passes() {
        let debugger = json!({"name": "debugger-x", "image": "busybox", "stdin": true, "tty": true,
                              "targetContainerName": "app", "resources": {}, "terminationMessagePath": "/dev/termination-log"});
        assert!(causes_of(&pod(json!([debugger]))["spec"]).is_empty());
    }

    #[test]
    fn ports_probes_resources_subpaths_and_unknown_targets_are_refused_with_upstreams_words() {
        let bad = json!({"name": "d", "image": "busybox", "ports": [{"containerPort": 80}],
                         "readinessProbe": {"exec": {"command": ["true"]}}, "resources": {"limits": {"cpu": "1"}},
                         "targetContainerName": "nope", "volumeMounts": [{"name": "v", "mountPath": "/v", "subPath": "x"}]});
        let causes = causes_of(&pod(json!([bad]))["spec"]);
        let at = |field: &str| causes.iter().find(|(f, _)| f == field).map(|(_, m)| m.as_str());
        assert_eq!(at("spec.ephemeralContainers[0].ports"), Some(CANNOT_BE_SET));
        assert_eq!(at("spec.ephemeralContainers[0].readinessProbe"), Some(CANNOT_BE_SET));
        assert_eq!(at("spec.ephemeralContainers[0].resources"), Some(CANNOT_BE_SET));
        assert_eq!(at("spec.ephemeralContainers[0].volumeMounts[0].subPath"), Some(CANNOT_BE_SET));
        assert_eq!(at("spec.ephemeralContainers[0].targetContainerName"), Some("Not found: \"nope\""));
    }

    #[test]
    fn a_name_another_container_has_is_a_duplicate() {
        let causes = causes_of(&pod(json!([{"name": "app", "image": "busybox"}, {"image": "busybox"}]))["spec"]);
        assert_eq!(
            causes,
            [
                ("spec.ephemeralContainers[0].name".to_string(), "Duplicate value: \"app\"".to_string()),
                ("spec.ephemeralContainers[1].name".to_string(), "Required value".to_string()),
            ]
        );
    }

    #[test]
    fn entries_are_only_added_never_removed_or_edited() {
        let old = pod(json!([{"name": "d1", "image": "busybox"}]));
        let mut causes = Vec::new();
        check_update(
            &pod(json!([{"name": "d1", "image": "busybox"}, {"name": "d2", "image": "busybox"}])),
            &old,
            &mut causes,
        );
        assert!(causes.is_empty(), "adding is allowed: {causes:?}");
        check_update(&pod(json!([{"name": "d2", "image": "busybox"}])), &old, &mut causes);
        assert_eq!(causes[0].field, "spec.ephemeralContainers");
        assert_eq!(causes[0].message, "Forbidden: existing ephemeral containers \"d1\" may not be removed\n");
        causes.clear();
        check_update(&pod(json!([{"name": "d1", "image": "nginx"}])), &old, &mut causes);
        assert_eq!(causes[0].field, "spec.ephemeralContainers[d1]");
        assert!(causes[0].message.starts_with("Forbidden: existing ephemeral containers \"d1\" may not be changed"));
    }

    #[test]
    fn an_update_of_the_pod_itself_may_not_change_its_ephemeral_containers() {
        let old = pod(json!([{"name": "d1", "image": "busybox"}]));
        let refused = |new: &Value| {
            let mut causes = Vec::new();
            check_main_update(new, &old, &mut causes);
            causes.into_iter().map(|c| (c.field, c.message)).collect::<Vec<_>>()
        };
        assert!(refused(&old).is_empty(), "unchanged");
        for new in [
            pod(json!([{"name": "d1", "image": "busybox"}, {"name": "d2", "image": "busybox"}])),
            pod(json!([{"name": "d1", "image": "nginx"}])),
            pod(json!([])),
            pod(Value::Null),
        ] {
            let causes = refused(&new);
            assert_eq!(causes.len(), 1, "{new}");
            assert_eq!(causes[0].0, "spec");
            let upstream = "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,\
                            `spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only \
                            additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be \
                            set to 1 if it was previously negative)\n";
            assert!(causes[0].1.starts_with(upstream), "{}", causes[0].1);
        }
        // None before and none after, however written, is no change.
        let mut causes = Vec::new();
        check_main_update(&pod(json!([])), &pod(Value::Null), &mut causes);
        assert!(causes.is_empty(), "{causes:?}");
    }

    #[test]
    fn a_write_through_the_subresource_changes_only_the_ephemeral_containers() {
        let current = pod(Value::Null);
        let mut body = pod(json!([{"name": "d", "image": "busybox"}]));
        body["spec"]["containers"][0]["image"] = json!("evil");
        body["metadata"]["labels"] = json!({"a": "b"});
        let pod = updated(&current, &body);
        assert_eq!(pod["spec"]["containers"][0]["image"], "busybox");
        assert!(pod["metadata"]["labels"].is_null());
        assert_eq!(pod["spec"]["ephemeralContainers"][0]["name"], "d");
        assert_eq!(pod["spec"]["ephemeralContainers"][0]["terminationMessagePolicy"], "File", "defaulted");
        assert_eq!(pod["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn a_pod_is_not_created_with_ephemeral_containers() {
        let mut causes = Vec::new();
        check_create(&pod(json!([{"name": "d", "image": "busybox"}]))["spec"], &mut causes);
        assert_eq!(
            (causes[0].field.as_str(), causes[0].message.as_str()),
            ("spec.ephemeralContainers", "Forbidden: cannot be set on create")
        );
    }
}
