//! The numeric checks of a pod spec, as `ValidatePodSpec` makes them (pkg/apis/core/validation, 1.33): the bounds
//! kube-apiserver puts on ports, user and group IDs, probe timings, deadlines, file modes, token lifetimes and
//! resource quantities, in upstream's words. Every number a tenant writes into a pod is bounded here, where it
//! enters; what has no bound upstream (a grace period, `tolerationSeconds`) is accepted as upstream accepts it, and
//! whatever computes with it downstream saturates instead of overflowing.
//!
//! Used for pods and, under `spec.template.spec`, for every workload's pod template.

use serde_json::Value;

use crate::error::Cause;

/// `IsValidPortNum`'s message.
const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";
/// `IsValidUserID` and `IsValidGroupID`'s message.
const ID_RANGE: &str = "must be between 0 and 2147483647, inclusive";
/// `IsNegativeErrorMsg`.
const NOT_NEGATIVE: &str = "must be greater than or equal to 0";
/// `fileModeErrorMsg`.
const FILE_MODE: &str = "must be a number between 0 and 0777 (octal), both inclusive";

/// `Invalid value: <n>: <message>` at `field`, with the number printed as Go prints an integer.
fn invalid(field: String, value: i64, message: &str) -> Cause {
    Cause::invalid(field, format!("Invalid value: {value}: {message}"))
}

/// The integer at `key` of `object`, when there is one.
fn int(object: &Value, key: &str) -> Option<i64> {
    object.get(key).and_then(Value::as_i64)
}

/// The numeric checks of the pod spec `spec`, found at `at` (`spec`, or `spec.template.spec`).
pub fn check(spec: &Value, at: &str, causes: &mut Vec<Cause>) {
    if let Some(deadline) = int(spec, "activeDeadlineSeconds")
        && !(1..=i64::from(i32::MAX)).contains(&deadline)
    {
        causes.push(invalid(
            format!("{at}.activeDeadlineSeconds"),
            deadline,
            "must be between 1 and 2147483647, inclusive",
        ));
    }
    security_context_ids(&spec["securityContext"], &format!("{at}.securityContext"), true, causes);
    for (i, toleration) in spec["tolerations"].as_array().into_iter().flatten().enumerate() {
        let set = toleration.get("tolerationSeconds").is_some_and(|s| !s.is_null());
        if let Some(effect) = toleration["effect"].as_str().filter(|e| set && *e != "NoExecute") {
            causes.push(Cause::invalid(
                format!("{at}.tolerations[{i}].effect"),
                format!("Invalid value: {effect:?}: effect must be 'NoExecute' when `tolerationSeconds` is set"),
            ));
        }
    }
    for (i, constraint) in spec["topologySpreadConstraints"].as_array().into_iter().flatten().enumerate() {
        let field = format!("{at}.topologySpreadConstraints[{i}]");
        if let Some(skew) = int(constraint, "maxSkew").filter(|s| *s <= 0) {
            causes.push(invalid(format!("{field}.maxSkew"), skew, "must be greater than zero"));
        }
        if let Some(domains) = int(constraint, "minDomains").filter(|d| *d <= 0) {
            causes.push(invalid(format!("{field}.minDomains"), domains, "must be greater than zero"));
        }
    }
    let grace = int(spec, "terminationGracePeriodSeconds").map(|g| if g < 0 { 1 } else { g });
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for (i, container) in spec[list].as_array().into_iter().flatten().enumerate() {
            self::container(container, &format!("{at}.{list}[{i}]"), grace, causes);
        }
    }
    for (i, volume) in spec["volumes"].as_array().into_iter().flatten().enumerate() {
        self::volume(volume, &format!("{at}.volumes[{i}]"), causes);
    }
}

/// runAsUser and runAsGroup (and, at pod level, fsGroup and supplementalGroups) within Linux's ID range.
fn security_context_ids(context: &Value, at: &str, pod: bool, causes: &mut Vec<Cause>) {
    let mut fields = vec!["runAsUser", "runAsGroup"];
    if pod {
        fields.push("fsGroup");
    }
    for field in fields {
        if let Some(id) = int(context, field).filter(|id| !(0..=i64::from(i32::MAX)).contains(id)) {
            causes.push(invalid(format!("{at}.{field}"), id, ID_RANGE));
        }
    }
    if pod {
        for (i, id) in context["supplementalGroups"].as_array().into_iter().flatten().enumerate() {
            if let Some(id) = id.as_i64().filter(|id| !(0..=i64::from(i32::MAX)).contains(id)) {
                causes.push(invalid(format!("{at}.supplementalGroups[{i}]"), id, ID_RANGE));
            }
        }
    }
}

/// A container's ports, security context, probes, lifecycle and resources. `grace` is the pod's termination grace
/// period (a negative one counted as 1, as the Pod conversion makes it), which bounds a `sleep` action.
fn container(container: &Value, at: &str, grace: Option<i64>, causes: &mut Vec<Cause>) {
    for (j, port) in container["ports"].as_array().into_iter().flatten().enumerate() {
        let field = format!("{at}.ports[{j}]");
        match int(port, "containerPort") {
            None | Some(0) => causes.push(Cause::required(format!("{field}.containerPort"))),
            Some(n) if !(1..=65535).contains(&n) => {
                causes.push(invalid(format!("{field}.containerPort"), n, PORT_RANGE))
            }
            Some(_) => {}
        }
        if let Some(n) = int(port, "hostPort").filter(|n| *n != 0 && !(1..=65535).contains(n)) {
            causes.push(invalid(format!("{field}.hostPort"), n, PORT_RANGE));
        }
    }
    security_context_ids(&container["securityContext"], &format!("{at}.securityContext"), false, causes);
    for kind in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(probe) = container.get(kind).filter(|p| p.is_object()) {
            self::probe(probe, kind, &format!("{at}.{kind}"), causes);
        }
    }
    for hook in ["postStart", "preStop"] {
        let handler = &container["lifecycle"][hook];
        port_of(handler, &format!("{at}.lifecycle.{hook}"), causes);
        // validateSleepAction: the error names the action, not its `seconds`.
        if let (Some(seconds), Some(grace)) = (int(&handler["sleep"], "seconds"), grace)
            && !(0..=grace).contains(&seconds)
        {
            causes.push(invalid(
                format!("{at}.lifecycle.{hook}.sleep"),
                seconds,
                &format!("must be non-negative and less than terminationGracePeriodSeconds ({grace})"),
            ));
        }
    }
    resources(&container["resources"], &format!("{at}.resources"), causes);
}

/// `validateProbe` and its liveness, readiness and startup rules.
fn probe(probe: &Value, kind: &str, at: &str, causes: &mut Vec<Cause>) {
    for field in ["initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"] {
        if let Some(n) = int(probe, field).filter(|n| *n < 0) {
            causes.push(invalid(format!("{at}.{field}"), n, NOT_NEGATIVE));
        }
    }
    if kind != "readinessProbe"
        && let Some(n) = int(probe, "successThreshold").filter(|n| *n != 1)
    {
        causes.push(invalid(format!("{at}.successThreshold"), n, "must be 1"));
    }
    if let Some(grace) = int(probe, "terminationGracePeriodSeconds") {
        if grace <= 0 {
            causes.push(invalid(format!("{at}.terminationGracePeriodSeconds"), grace, "must be greater than 0"));
        }
        if kind == "readinessProbe" {
            causes.push(invalid(
                format!("{at}.terminationGracePeriodSeconds"),
                grace,
                "must not be set for readinessProbes",
            ));
        }
    }
    port_of(probe, at, causes);
    if let Some(port) = int(&probe["grpc"], "port").filter(|p| !(1..=65535).contains(p)) {
        causes.push(invalid(format!("{at}.grpc.port"), port, PORT_RANGE));
    }
}

/// The numeric port of a handler's `httpGet` or `tcpSocket` (a named port is the container's to resolve).
fn port_of(handler: &Value, at: &str, causes: &mut Vec<Cause>) {
    for action in ["httpGet", "tcpSocket"] {
        if let Some(port) = int(&handler[action], "port").filter(|p| !(1..=65535).contains(p)) {
            causes.push(invalid(format!("{at}.{action}.port"), port, PORT_RANGE));
        }
    }
}

/// Requests and limits are not negative, and no request is above its limit (`ValidateResourceRequirements`).
fn resources(resources: &Value, at: &str, causes: &mut Vec<Cause>) {
    for kind in ["limits", "requests"] {
        for (name, quantity) in resources[kind].as_object().into_iter().flatten() {
            if quantity_value(quantity).is_some_and(|q| q < 0.0) {
                causes.push(Cause::invalid(
                    format!("{at}.{kind}[{name}]"),
                    format!("Invalid value: {:?}: {NOT_NEGATIVE}", quantity_text(quantity)),
                ));
            }
        }
    }
    for (name, request) in resources["requests"].as_object().into_iter().flatten() {
        let limit = resources["limits"].get(name).and_then(quantity_value);
        if let (Some(request_value), Some(limit_value)) = (quantity_value(request), limit)
            && request_value > limit_value
        {
            let limit_text = quantity_text(&resources["limits"][name]);
            causes.push(Cause::invalid(
                format!("{at}.requests"),
                format!(
                    "Invalid value: {:?}: must be less than or equal to {name} limit of {limit_text}",
                    quantity_text(request)
                ),
            ));
        }
    }
}

fn quantity_text(quantity: &Value) -> String {
    quantity.as_str().map_or_else(|| quantity.to_string(), str::to_string)
}

fn quantity_value(quantity: &Value) -> Option<f64> {
    let value = nest_core::quantity::parse(&quantity_text(quantity));
    value.is_finite().then_some(value)
}

/// File modes, the projected token's lifetime and an `emptyDir`'s size limit.
fn volume(volume: &Value, at: &str, causes: &mut Vec<Cause>) {
    let mode = |value: Option<i64>, field: String, causes: &mut Vec<Cause>| {
        if let Some(mode) = value.filter(|m| !(0..=0o777).contains(m)) {
            causes.push(invalid(field, mode, FILE_MODE));
        }
    };
    for source in ["secret", "configMap", "downwardAPI", "projected"] {
        let field = format!("{at}.{source}");
        mode(int(&volume[source], "defaultMode"), format!("{field}.defaultMode"), causes);
        items(&volume[source], source, &field, &mode, causes);
    }
    for (j, projection) in volume["projected"]["sources"].as_array().into_iter().flatten().enumerate() {
        let field = format!("{at}.projected.sources[{j}]");
        for source in ["secret", "configMap", "downwardAPI"] {
            items(&projection[source], source, &format!("{field}.{source}"), &mode, causes);
        }
        if let Some(seconds) = int(&projection["serviceAccountToken"], "expirationSeconds") {
            let field = format!("{field}.serviceAccountToken.expirationSeconds");
            if seconds < 600 {
                causes.push(invalid(field, seconds, "may not specify a duration less than 10 minutes"));
            } else if seconds > 1 << 32 {
                causes.push(invalid(field, seconds, "may not specify a duration larger than 2^32 seconds"));
            }
        }
    }
    let limit = &volume["emptyDir"]["sizeLimit"];
    if quantity_value(limit).is_some_and(|q| q < 0.0) {
        causes.push(Cause {
            reason: "FieldValueForbidden",
            message: "Forbidden: SizeLimit field must be a valid resource quantity".into(),
            field: format!("{at}.emptyDir.sizeLimit"),
        });
    }
}

/// The modes of a source's `items`; a downward API source's are reported at the source, as upstream's path is.
fn items(
    source: &Value,
    kind: &str,
    at: &str,
    mode: &impl Fn(Option<i64>, String, &mut Vec<Cause>),
    causes: &mut Vec<Cause>,
) {
    for (k, item) in source["items"].as_array().into_iter().flatten().enumerate() {
        let field = if kind == "downwardAPI" { format!("{at}.mode") } else { format!("{at}.items[{k}].mode") };
        mode(int(item, "mode"), field, causes);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn causes(spec: Value) -> Vec<String> {
        let mut causes = Vec::new();
        check(&spec, "spec", &mut causes);
        causes.into_iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    fn pod(container: Value) -> Value {
        let mut c = json!({"name": "c", "image": "i"});
        c.as_object_mut().unwrap().extend(container.as_object().unwrap().clone());
        json!({"containers": [c]})
    }

    #[test]
    fn numbers_within_upstreams_bounds_pass_whatever_their_size() {
        let spec = json!({
            "terminationGracePeriodSeconds": i64::MAX, "activeDeadlineSeconds": i32::MAX,
            "securityContext": {"runAsUser": 0, "fsGroup": i32::MAX, "supplementalGroups": [0, i32::MAX]},
            "tolerations": [{"key": "k", "effect": "NoExecute", "tolerationSeconds": i64::MIN}],
            "containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 65535, "hostPort": 0}],
                "livenessProbe": {"initialDelaySeconds": i32::MAX, "periodSeconds": 0, "successThreshold": 1,
                    "terminationGracePeriodSeconds": i64::MAX, "httpGet": {"port": "http"}},
                "lifecycle": {"preStop": {"sleep": {"seconds": 0}}},
                "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1000m"}}}],
            "volumes": [{"name": "v", "secret": {"defaultMode": 0o777, "items": [{"key": "k", "path": "p", "mode": 0}]}},
                {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "expirationSeconds": 1_i64 << 32}}]}}],
        });
        assert_eq!(causes(spec), Vec::<String>::new());
    }

    #[test]
    fn numbers_past_upstreams_bounds_are_refused_in_upstreams_words() {
        let spec = json!({
            "activeDeadlineSeconds": 0,
            "securityContext": {"runAsUser": -1, "supplementalGroups": [4294967295_i64]},
            "tolerations": [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}],
            "topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "k", "whenUnsatisfiable": "DoNotSchedule"}],
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 70000, "hostPort": -1}, {"containerPort": 0}],
                "securityContext": {"runAsGroup": i64::MAX},
                "livenessProbe": {"periodSeconds": -1, "successThreshold": 2, "terminationGracePeriodSeconds": 0,
                    "tcpSocket": {"port": 0}},
                "readinessProbe": {"terminationGracePeriodSeconds": 10, "grpc": {"port": 70000}},
                "lifecycle": {"preStop": {"sleep": {"seconds": 60}}},
                "resources": {"requests": {"cpu": "2", "memory": "-1"}, "limits": {"cpu": "1"}}}],
            "volumes": [{"name": "v", "configMap": {"defaultMode": 1000, "items": [{"key": "k", "path": "p", "mode": -1}]}},
                {"name": "d", "downwardAPI": {"items": [{"path": "p", "mode": 512}]}},
                {"name": "e", "emptyDir": {"sizeLimit": "-1"}},
                {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "expirationSeconds": 599}}]}}],
        });
        assert_eq!(
            causes(spec),
            [
                "spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive",
                "spec.securityContext.runAsUser: Invalid value: -1: must be between 0 and 2147483647, inclusive",
                "spec.securityContext.supplementalGroups[0]: Invalid value: 4294967295: must be between 0 and 2147483647, inclusive",
                "spec.tolerations[0].effect: Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is set",
                "spec.topologySpreadConstraints[0].maxSkew: Invalid value: 0: must be greater than zero",
                "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.containers[0].ports[0].hostPort: Invalid value: -1: must be between 1 and 65535, inclusive",
                "spec.containers[0].ports[1].containerPort: Required value",
                "spec.containers[0].securityContext.runAsGroup: Invalid value: 9223372036854775807: must be between 0 and 2147483647, inclusive",
                "spec.containers[0].livenessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0",
                "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1",
                "spec.containers[0].livenessProbe.terminationGracePeriodSeconds: Invalid value: 0: must be greater than 0",
                "spec.containers[0].livenessProbe.tcpSocket.port: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.containers[0].readinessProbe.terminationGracePeriodSeconds: Invalid value: 10: must not be set for readinessProbes",
                "spec.containers[0].readinessProbe.grpc.port: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.containers[0].lifecycle.preStop.sleep: Invalid value: 60: must be non-negative and less than terminationGracePeriodSeconds (30)",
                "spec.containers[0].resources.requests[memory]: Invalid value: \"-1\": must be greater than or equal to 0",
                "spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1",
                "spec.volumes[0].configMap.defaultMode: Invalid value: 1000: must be a number between 0 and 0777 (octal), both inclusive",
                "spec.volumes[0].configMap.items[0].mode: Invalid value: -1: must be a number between 0 and 0777 (octal), both inclusive",
                "spec.volumes[1].downwardAPI.mode: Invalid value: 512: must be a number between 0 and 0777 (octal), both inclusive",
                "spec.volumes[2].emptyDir.sizeLimit: Forbidden: SizeLimit field must be a valid resource quantity",
                "spec.volumes[3].projected.sources[0].serviceAccountToken.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes",
            ]
        );
        // A container alone, through the helper the other tests use.
        assert_eq!(causes(pod(json!({"ports": [{"containerPort": -5}]}))).len(), 1);
    }
}
