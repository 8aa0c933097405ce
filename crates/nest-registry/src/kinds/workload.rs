//! Workloads (Deployment, ReplicaSet, ReplicationController, StatefulSet, DaemonSet, Job, CronJob): the defaults of pkg/apis/apps/v1/defaults.go
//! (and batch's) that controllers rely on, the checks that protect the controllers, and their pod template's pod
//! defaults and checks ([`crate::kinds::pod`]).

use serde_json::Value;

use crate::error::Cause;
use crate::strategy::Strategy;

/// The workload strategies: the defaults of pkg/apis/apps/v1/defaults.go that controllers rely on (replicas, strategies, history
/// limits), and the pod template's pod defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    Deployment,
    ReplicaSet,
    /// core v1's ReplicaSet before there were ReplicaSets: its selector is a map of labels.
    ReplicationController,
    StatefulSet,
    DaemonSet,
    Job,
    /// Its pods' template is its Job template's (`spec.jobTemplate.spec.template`).
    CronJob,
}

/// The annotation apps/v1 keeps a DaemonSet's template generation in.
const TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";

/// The labels kube-apiserver gives a Job's pod template, and (the first) its generated selector.
pub const JOB_LABELS: [&str; 4] =
    ["batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name", "controller-uid", "job-name"];

/// A Job's selector and template labels, as kube-apiserver generates them unless `manualSelector` is true
/// (`generateSelector` in pkg/registry/batch/job): the selector matches the Job's UID, and the template carries the
/// UID and the Job's name under both the `batch.kubernetes.io/` and the legacy keys. So `kubectl logs job/x` finds
/// the Job's own pods, never another workload's.
fn generate_job_selector(obj: &mut Value) {
    if obj["spec"]["manualSelector"] == Value::Bool(true) {
        return;
    }
    let uid = obj["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
    if uid.is_empty() {
        return;
    }
    let template = &mut obj["spec"]["template"];
    if !template.is_object() {
        return;
    }
    let labels = &mut template["metadata"]["labels"];
    if !labels.is_object() {
        *labels = serde_json::json!({});
    }
    for (key, value) in JOB_LABELS.iter().zip([&uid, &name, &uid, &name]) {
        labels[*key] = serde_json::json!(value);
    }
    if obj["spec"]["selector"].is_null() {
        obj["spec"]["selector"] = serde_json::json!({"matchLabels": {JOB_LABELS[0]: uid}});
    }
}

impl Strategy for Workload {
    fn prepare_for_create(&self, obj: &mut Value) {
        if !obj.get("spec").is_some_and(Value::is_object) {
            return;
        }
        if *self == Workload::Job {
            if obj["spec"].get("manualSelector").is_none_or(Value::is_null) {
                obj["spec"]["manualSelector"] = serde_json::json!(false);
            }
            generate_job_selector(obj);
            // SetDefaults_Job: a Job without labels of its own carries its template's (which now include the
            // generated ones).
            let labels = obj["spec"]["template"]["metadata"]["labels"].clone();
            if labels.as_object().is_some_and(|l| !l.is_empty())
                && obj["metadata"]["labels"].as_object().is_none_or(|l| l.is_empty())
            {
                obj["metadata"]["labels"] = labels;
            }
        }
        if *self == Workload::ReplicationController {
            default_from_template_labels(obj);
        }
        // A new DaemonSet's template generation is 1 whatever the client wrote (PrepareForCreate); an update counts on
        // from the stored one (below).
        if *self == Workload::DaemonSet {
            if !obj["metadata"]["annotations"].is_object() {
                obj["metadata"]["annotations"] = serde_json::json!({});
            }
            obj["metadata"]["annotations"][TEMPLATE_GENERATION] = serde_json::json!("1");
        }
        let spec = &mut obj["spec"];
        let mut defaults: Vec<(&str, Value)> = Vec::new();
        match self {
            Workload::Deployment => {
                defaults.push(("replicas", serde_json::json!(1)));
                defaults.push(("strategy", serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})));
                defaults.push(("revisionHistoryLimit", serde_json::json!(10)));
                defaults.push(("progressDeadlineSeconds", serde_json::json!(600)));
            }
            Workload::ReplicaSet | Workload::ReplicationController => defaults.push(("replicas", serde_json::json!(1))),
            Workload::StatefulSet => {
                // Not omitempty in Go: "" when not given.
                defaults.push(("serviceName", serde_json::json!("")));
                defaults.push(("replicas", serde_json::json!(1)));
                defaults.push(("podManagementPolicy", serde_json::json!("OrderedReady")));
                defaults.push((
                    "updateStrategy",
                    serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
                ));
                defaults.push(("revisionHistoryLimit", serde_json::json!(10)));
                defaults.push((
                    "persistentVolumeClaimRetentionPolicy",
                    serde_json::json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
                ));
            }
            Workload::DaemonSet => {
                defaults.push((
                    "updateStrategy",
                    serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
                ));
                defaults.push(("revisionHistoryLimit", serde_json::json!(10)));
            }
            // SetDefaults_CronJob.
            Workload::CronJob => {
                defaults.push(("concurrencyPolicy", serde_json::json!("Allow")));
                defaults.push(("suspend", serde_json::json!(false)));
                defaults.push(("successfulJobsHistoryLimit", serde_json::json!(3)));
                defaults.push(("failedJobsHistoryLimit", serde_json::json!(1)));
            }
            // SetDefaults_Job.
            Workload::Job => {
                // Neither count given: one pod, once; a parallelism alone is a work queue's.
                if spec.get("completions").is_none_or(Value::is_null)
                    && spec.get("parallelism").is_none_or(Value::is_null)
                {
                    defaults.push(("completions", serde_json::json!(1)));
                }
                defaults.push(("parallelism", serde_json::json!(1)));
                let per_index = spec.get("backoffLimitPerIndex").is_some_and(|b| !b.is_null());
                defaults.push(("backoffLimit", serde_json::json!(if per_index { i32::MAX } else { 6 })));
                defaults.push(("completionMode", serde_json::json!("NonIndexed")));
                defaults.push(("suspend", serde_json::json!(false)));
                let failure_policy = spec.get("podFailurePolicy").is_some_and(|p| !p.is_null());
                let replacement = if failure_policy { "Failed" } else { "TerminatingOrFailed" };
                defaults.push(("podReplacementPolicy", serde_json::json!(replacement)));
            }
        }
        for (field, default) in defaults {
            match spec.get_mut(field) {
                None | Some(Value::Null) => spec[field] = default,
                // A strategy without a type (protobuf clients send `strategy: {}`) gets the default type, and a
                // rolling update its default parameters.
                Some(Value::Object(given)) if matches!(field, "strategy" | "updateStrategy") => {
                    if !given.contains_key("type") {
                        given.insert("type".into(), default["type"].clone());
                    }
                    if given.get("type") == default.get("type") && !given.contains_key("rollingUpdate") {
                        given.insert("rollingUpdate".into(), default["rollingUpdate"].clone());
                    }
                }
                Some(_) => {}
            }
        }
        if *self == Workload::CronJob
            && let Some(job_template) = spec.get_mut("jobTemplate").filter(|t| t.is_object())
        {
            crate::kinds::pod::default_template_metadata(job_template);
        }
        let template = match self {
            Workload::CronJob => {
                spec.get_mut("jobTemplate").and_then(|t| t.get_mut("spec")).and_then(|s| s.get_mut("template"))
            }
            _ => spec.get_mut("template"),
        };
        if let Some(template) = template
            && template.get("spec").is_some_and(Value::is_object)
        {
            crate::kinds::pod::default_template(template);
            if matches!(self, Workload::Job | Workload::CronJob) && template["spec"]["restartPolicy"] == "Always" {
                // A Job's pods must not restart forever; kube-apiserver refuses Always, nest defaults to Never.
                template["spec"]["restartPolicy"] = serde_json::json!("Never");
            }
        }
    }

    fn validate(&self, obj: &Value) -> Vec<Cause> {
        self.check(obj)
    }

    /// The defaults again, and a DaemonSet's template generation: 1 when created, one more with each change of its
    /// template (`daemonSetStrategy`; apps/v1 writes it as the `deprecated.daemonset.template.generation`
    /// annotation).
    fn prepare_for_update(&self, obj: &mut Value, old: &Value) {
        self.prepare_for_create(obj);
        if *self == Workload::DaemonSet {
            let before =
                old["metadata"]["annotations"][TEMPLATE_GENERATION].as_str().and_then(|g| g.parse::<i64>().ok());
            let changed = obj["spec"]["template"] != old["spec"]["template"];
            let generation = before.unwrap_or(1).saturating_add(i64::from(changed && before.is_some()));
            obj["metadata"]["annotations"][TEMPLATE_GENERATION] = serde_json::json!(generation.to_string());
        }
    }

    /// core v1's ReplicationControllers orphan their pods unless told otherwise, as upstream keeps them for old
    /// clients (`rcStrategy.DefaultGarbageCollectionPolicy`).
    fn default_propagation(&self) -> Option<&'static str> {
        (*self == Workload::ReplicationController).then_some("Orphan")
    }
}

impl Workload {
    /// The checks of `pkg/apis/apps/validation` (and batch's) that protect the controllers: counts are not negative,
    /// an apps workload has a selector its template's labels match, and the template is a valid pod.
    fn check(&self, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        let spec = &obj["spec"];
        // ValidateNonnegativeField over every count and duration of apps and batch (a Job's under a CronJob's
        // `jobTemplate` too); Indexed Jobs' upper bounds are not checked.
        let job_fields = [
            "completions",
            "parallelism",
            "backoffLimit",
            "activeDeadlineSeconds",
            "ttlSecondsAfterFinished",
            "backoffLimitPerIndex",
            "maxFailedIndexes",
        ];
        let apps_fields = ["replicas", "minReadySeconds", "revisionHistoryLimit", "progressDeadlineSeconds"];
        let cron_fields = ["startingDeadlineSeconds", "successfulJobsHistoryLimit", "failedJobsHistoryLimit"];
        let counted: Vec<(&Value, &str, &[&str])> = match self {
            Workload::CronJob => {
                vec![(spec, "spec", &cron_fields), (&spec["jobTemplate"]["spec"], "spec.jobTemplate.spec", &job_fields)]
            }
            Workload::Job => vec![(spec, "spec", &job_fields)],
            _ => vec![(spec, "spec", &apps_fields)],
        };
        for (object, at, fields) in counted {
            for field in fields {
                if let Some(n) = object.get(*field).and_then(Value::as_i64)
                    && n < 0
                {
                    causes.push(Cause::invalid(
                        format!("{at}.{field}"),
                        format!("Invalid value: {n}: must be greater than or equal to 0"),
                    ));
                }
            }
        }
        if !matches!(self, Workload::Job | Workload::CronJob) {
            let labels = &spec["template"]["metadata"]["labels"];
            // A ReplicationController's selector is a map of labels; the others' a label selector.
            let (selector, match_labels) = match self {
                Workload::ReplicationController => {
                    let selector = spec.get("selector").filter(|s| s.as_object().is_some_and(|m| !m.is_empty()));
                    (selector, selector)
                }
                _ => {
                    let selector = spec.get("selector").filter(|s| s.is_object());
                    (selector, selector.map(|s| &s["matchLabels"]))
                }
            };
            match selector {
                None => causes.push(Cause::required("spec.selector")),
                Some(_) => {
                    let unmatched = match_labels
                        .and_then(Value::as_object)
                        .into_iter()
                        .flatten()
                        .any(|(key, value)| labels.get(key) != Some(value));
                    if unmatched {
                        causes.push(Cause::invalid(
                            "spec.template.metadata.labels",
                            format!("Invalid value: {}: `selector` does not match template `labels`", go_map(labels)),
                        ));
                    }
                }
            }
            // Their pods run until the workload removes them (ValidatePodTemplateSpecForReplicaSet and friends).
            let restart = &spec["template"]["spec"]["restartPolicy"];
            if let Some(policy) = restart.as_str().filter(|p| *p != "Always") {
                causes.push(Cause {
                    reason: "FieldValueNotSupported",
                    field: "spec.template.spec.restartPolicy".into(),
                    message: format!("Unsupported value: {policy:?}: supported values: \"Always\""),
                });
            }
        }
        let (template, path) = match self {
            Workload::CronJob => (&spec["jobTemplate"]["spec"]["template"], "spec.jobTemplate.spec.template"),
            _ => (&spec["template"], "spec.template"),
        };
        match Some(template).filter(|t| t.is_object()) {
            None => causes.push(Cause::required(path)),
            Some(template) => causes.extend(crate::kinds::pod::template(template).into_iter().map(|mut cause| {
                cause.field = format!("{path}.{}", cause.field);
                cause
            })),
        }
        causes
    }
}

/// `SetDefaults_ReplicationController`: a controller without a selector selects its template's labels, and one without
/// labels of its own carries them.
fn default_from_template_labels(obj: &mut Value) {
    let labels = obj["spec"]["template"]["metadata"]["labels"].clone();
    if labels.as_object().is_none_or(|m| m.is_empty()) {
        return;
    }
    if obj["spec"]["selector"].as_object().is_none_or(|m| m.is_empty()) {
        obj["spec"]["selector"] = labels.clone();
    }
    if obj["metadata"]["labels"].as_object().is_none_or(|m| m.is_empty()) {
        obj["metadata"]["labels"] = labels;
    }
}

/// A map of labels as Go's `%#v` prints one in a field error: `map[string]string{"a":"b", "c":"d"}`.
fn go_map(labels: &Value) -> String {
    let pairs = labels.as_object().into_iter().flatten();
    let pairs: Vec<String> = pairs.map(|(k, v)| format!("{k:?}:{:?}", v.as_str().unwrap_or_default())).collect();
    if pairs.is_empty() && labels.is_null() {
        return "map[string]string(nil)".into();
    }
    format!("map[string]string{{{}}}", pairs.join(", "))
}
