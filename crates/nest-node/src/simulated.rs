//! The simulated runtime, in the manner of kwok: a pod is reported Running after the node's start delay, with an
//! address from the node's range, without running anything. What its containers do can be declared:
//!
//! - containers are started once their `startupProbe`'s `initialDelaySeconds` have passed and ready once their
//!   `readinessProbe`'s have passed too (probes themselves are not run);
//! - the annotation `nest.dev/ready: "false"` makes readiness fail (and changing it back makes the pod ready);
//! - `nest.dev/exit-code: "<n>"` makes the pod finish: Succeeded for 0, Failed otherwise, so Job flows can be tested;
//! - `nest.dev/stop-seconds: "<n>"` is how long the containers take to stop once the pod is deleted (default 0);
//!   containers still running when the grace period ends are killed (exit code 137).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use crate::{Context, now, rfc3339_now};

/// The annotation that makes a pod finish with an exit code.
pub const EXIT_CODE_ANNOTATION: &str = "nest.dev/exit-code";
/// The annotation that makes a pod's readiness fail (`"false"`).
pub const READY_ANNOTATION: &str = "nest.dev/ready";
/// The annotation saying how many seconds a pod's containers take to stop after SIGTERM.
pub const STOP_SECONDS_ANNOTATION: &str = "nest.dev/stop-seconds";

fn seconds(duration: i64) -> Duration {
    Duration::from_secs(duration.max(0).unsigned_abs())
}

/// Moves a simulated pod along: started, ready, finished or stopped, as declared.
pub(crate) async fn reconcile(pod: &Pod, context: &Context) -> Result<Action, kube::Error> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), &pod.namespace().unwrap_or_default());
    if pod.metadata.deletion_timestamp.is_some() {
        return stop(pod, &pods, context).await;
    }
    if phase == "Succeeded" || phase == "Failed" {
        return Ok(Action::await_change());
    }
    let exit_code = pod.annotations().get(EXIT_CODE_ANNOTATION).and_then(|c| c.parse::<i32>().ok());
    // Not started yet: wait out the start delay, counted from when the pod was created.
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0).unwrap_or_else(now);
    let waited = now().duration_since(created).unsigned_abs();
    let delay = context.options.start_delay;
    if phase != "Running" && waited < delay {
        return Ok(Action::requeue(delay - waited));
    }
    let ip = crate::address(pod, context);
    let (status, next) = match exit_code {
        // A pod told to finish runs for the start delay first.
        Some(code) if phase == "Running" => (finished(pod, code), None),
        Some(_) => (running(pod, context, &ip), Some(delay)),
        None => {
            let status = running(pod, context, &ip);
            let next = next_transition(pod);
            if phase == "Running" && !status_changes(pod, &status) {
                return Ok(next.map_or_else(Action::await_change, Action::requeue));
            }
            (status, next)
        }
    };
    match pods.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&json!({"status": status}))).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(error) => return Err(error),
    }
    Ok(next.map_or_else(Action::await_change, Action::requeue))
}

/// How far a deleted simulated pod is in stopping, at `at`.
#[derive(Debug, PartialEq, Eq)]
struct Stopping {
    /// How long its containers still take to exit; `None` once they have.
    left: Option<Duration>,
    /// Whether they are killed at the end of the grace period rather than exiting by themselves.
    killed: bool,
}

/// Where the stop of `pod` stands at `at`: its containers take `nest.dev/stop-seconds` from when the stop was asked,
/// or are killed when the grace period ends.
fn stopping(pod: &Pod, at: jiff::Timestamp) -> Stopping {
    // Any i64 is a grace period a client may ask for (kube-apiserver bounds none), and the deletion timestamp is
    // the end of it, held at the last time there is: so the time the stop was asked is found with checked
    // arithmetic, never before the dawn of time and never after `at`.
    let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0).max(0);
    let due = pod.metadata.deletion_timestamp.as_ref().map_or(at, |t| t.0);
    let asked = due.checked_sub(jiff::SignedDuration::from_secs(grace)).unwrap_or(jiff::Timestamp::MIN).min(at);
    let stop_seconds = pod.annotations().get(STOP_SECONDS_ANNOTATION).and_then(|s| s.parse::<i64>().ok());
    let killed = stop_seconds.is_some_and(|s| s > 0 && s >= grace);
    let taking = jiff::SignedDuration::from_secs(stop_seconds.unwrap_or(0).clamp(0, grace));
    let stopped = asked.checked_add(taking).unwrap_or(jiff::Timestamp::MAX);
    let left = stopped.duration_since(at);
    Stopping { left: left.is_positive().then(|| left.unsigned_abs()), killed }
}

/// Stops a deleted pod: its containers take `nest.dev/stop-seconds` to exit, or are killed when the grace period ends;
/// then the pod is removed.
async fn stop(pod: &Pod, pods: &Api<Pod>, context: &Context) -> Result<Action, kube::Error> {
    let Stopping { left, killed } = stopping(pod, now());
    if let Some(left) = left {
        return Ok(Action::requeue(left));
    }
    // Report the containers stopped, once: the report is itself a change that brings the pod back here.
    let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let reported = pod
        .status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .all(|c| c.state.as_ref().is_some_and(|s| s.terminated.is_some()));
    if running && !reported {
        let code = if killed { 137 } else { 0 };
        let mut conditions = serde_json::to_value(pod.status.as_ref().and_then(|s| s.conditions.clone()))
            .unwrap_or_default()
            .as_array()
            .cloned()
            .unwrap_or_default();
        for condition in &mut conditions {
            if condition["type"] == "Ready" || condition["type"] == "ContainersReady" {
                *condition = json!({"type": condition["type"], "status": "False", "reason": "PodTerminating",
                                    "lastTransitionTime": rfc3339_now()});
            }
        }
        let status = json!({"status": {
            "conditions": conditions,
            "containerStatuses": container_statuses(pod, |_| (false, false, json!({"terminated": {
                "exitCode": code, "reason": if killed { "Error" } else { "Completed" }, "finishedAt": rfc3339_now()}}))),
        }});
        match pods.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(error) => return Err(error),
        }
    }
    crate::remove(pod, context).await?;
    Ok(Action::await_change())
}

/// How long after the pod started its containers are started and ready: (name, started after, ready after). A
/// container is started when its startup probe's initial delay has passed, and ready when its readiness probe's has
/// too; `None` is never (readiness made to fail by annotation).
fn container_plan(pod: &Pod) -> Vec<(String, Duration, Option<Duration>)> {
    let failing = pod.annotations().get(READY_ANNOTATION).is_some_and(|v| v == "false");
    let delay = |probe: Option<&k8s_openapi::api::core::v1::Probe>| {
        seconds(probe.and_then(|p| p.initial_delay_seconds).unwrap_or(0).into())
    };
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| {
            let started = delay(c.startup_probe.as_ref());
            let ready = started + delay(c.readiness_probe.as_ref());
            (c.name.clone(), started, (!failing).then_some(ready))
        })
        .collect()
}

/// How long the pod has been running.
fn running_for(pod: &Pod) -> Duration {
    let started = pod.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0).unwrap_or_else(now);
    now().duration_since(started).unsigned_abs()
}

/// When the pod's containers next become started or ready, from now.
fn next_transition(pod: &Pod) -> Option<Duration> {
    let elapsed = running_for(pod);
    container_plan(pod)
        .into_iter()
        .flat_map(|(_, started, ready)| [Some(started), ready])
        .flatten()
        .filter(|at| *at > elapsed)
        .map(|at| at - elapsed + Duration::from_millis(50))
        .min()
}

/// Whether `status` says something about the pod's containers that its current status does not.
fn status_changes(pod: &Pod, status: &Value) -> bool {
    let current = serde_json::to_value(pod.status.clone().unwrap_or_default()).unwrap_or_default();
    let flags = |status: &Value| -> Vec<(Value, Value, Value)> {
        status["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| (c["name"].clone(), c["ready"].clone(), c["started"].clone()))
            .collect()
    };
    flags(&current) != flags(status) || current["podIP"] != status["podIP"]
}

/// Each container's status: `state(name)` gives (ready, started, state).
fn container_statuses(pod: &Pod, state: impl Fn(&str) -> (bool, bool, Value)) -> Vec<Value> {
    let uid = pod.uid().unwrap_or_default();
    let restarts: BTreeMap<String, i32> = pod
        .status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .map(|c| (c.name.clone(), c.restart_count))
        .collect();
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| {
            let image = c.image.clone().unwrap_or_default();
            let (ready, started, state) = state(&c.name);
            json!({"name": c.name, "image": image, "imageID": format!("simulated://{image}"),
                   "containerID": format!("simulated://{uid}/{}", c.name), "ready": ready, "started": started,
                   "restartCount": restarts.get(&c.name).copied().unwrap_or(0), "state": state})
        })
        .collect()
}

fn running(pod: &Pod, context: &Context, ip: &str) -> Value {
    let at = rfc3339_now();
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map_or_else(|| at.clone(), |t| t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    let elapsed = running_for(pod);
    let plan = container_plan(pod);
    let state = |name: &str| {
        let (_, start, ready) = plan.iter().find(|(n, ..)| n == name).cloned().unwrap_or_default();
        let running = json!({"running": {"startedAt": started}});
        (ready.is_some_and(|r| elapsed >= r), elapsed >= start, running)
    };
    let statuses = container_statuses(pod, state);
    let all_ready = statuses.iter().all(|c| c["ready"] == true);
    let condition = |kind: &str, ok: bool| {
        let reason = if ok { Value::Null } else { json!("ContainersNotReady") };
        json!({"type": kind, "status": if ok { "True" } else { "False" }, "reason": reason, "lastProbeTime": null,
               "lastTransitionTime": at})
    };
    json!({
        "phase": "Running",
        "hostIP": context.options.address, "hostIPs": [{"ip": context.options.address}],
        "podIP": ip, "podIPs": [{"ip": ip}],
        "startTime": started,
        "conditions": [condition("PodReadyToStartContainers", true), condition("Initialized", true),
                       condition("Ready", all_ready), condition("ContainersReady", all_ready),
                       condition("PodScheduled", true)],
        "containerStatuses": statuses,
        "qosClass": "BestEffort",
    })
}

fn finished(pod: &Pod, code: i32) -> Value {
    let at = rfc3339_now();
    let statuses = container_statuses(pod, |_| {
        let reason = if code == 0 { "Completed" } else { "Error" };
        (false, false, json!({"terminated": {"exitCode": code, "reason": reason, "finishedAt": at}}))
    });
    let condition = |kind: &str, status: &str| json!({"type": kind, "status": status, "reason": "PodCompleted", "lastProbeTime": null, "lastTransitionTime": at});
    json!({
        "phase": if code == 0 { "Succeeded" } else { "Failed" },
        "conditions": [condition("PodScheduled", "True"), condition("Initialized", "True"),
                       condition("Ready", "False"), condition("ContainersReady", "False")],
        "containerStatuses": statuses,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deleted(grace: i64, due: &str, stop_seconds: Option<&str>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.deletion_grace_period_seconds = Some(grace);
        pod.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(due.parse().unwrap()));
        if let Some(seconds) = stop_seconds {
            pod.metadata.annotations = Some([(STOP_SECONDS_ANNOTATION.to_string(), seconds.to_string())].into());
        }
        pod
    }

    #[test]
    fn a_stop_counts_from_when_it_was_asked_within_the_grace_period() {
        let at: jiff::Timestamp = "2026-12-04T10:00:10Z".parse().unwrap();
        // Asked at 10:00:00 with 30 s of grace; the containers take 20 s: 10 s left.
        let pod = deleted(30, "2026-12-04T10:00:30Z", Some("20"));
        assert_eq!(stopping(&pod, at), Stopping { left: Some(Duration::from_secs(10)), killed: false });
        // They would take 60 s: killed when the 30 s are over.
        let pod = deleted(30, "2026-12-04T10:00:30Z", Some("60"));
        assert_eq!(stopping(&pod, at), Stopping { left: Some(Duration::from_secs(20)), killed: true });
    }

    #[test]
    fn a_grace_period_at_the_extremes_of_i64_is_counted_without_overflow() {
        let at: jiff::Timestamp = "2026-12-04T10:00:00Z".parse().unwrap();
        // What the API server writes for i64::MAX: the last time there is, and the period as asked.
        let last = jiff::Timestamp::MAX.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        for (grace, stop_seconds) in [(i64::MAX, None), (i64::MAX, Some("9223372036854775807")), (i64::MIN, Some("5"))]
        {
            let pod = deleted(grace, &last, stop_seconds);
            let Stopping { left, .. } = stopping(&pod, at);
            assert!(left.is_none_or(|l| l <= Duration::from_secs(i64::MAX.unsigned_abs())), "{grace} {stop_seconds:?}");
        }
        // Nothing asked the containers to wait: they are stopped now.
        assert_eq!(stopping(&deleted(i64::MAX, &last, None), at).left, None);
    }
}
