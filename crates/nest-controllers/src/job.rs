//! Jobs, after kube-controller-manager's `job` controller (`pkg/controller/job`, 1.33), for non-indexed Jobs: up to
//! `parallelism` pods at a time until `completions` of them have succeeded (the Job is then `Complete`), or until
//! more than `backoffLimit` have failed (the Job is then `Failed`, reason `BackoffLimitExceeded`); a suspended Job has
//! no pods. Pods carry the `job-name` and `controller-uid` labels, as kube's do.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::informers::Informers;
use crate::replicaset::{controlled_by, is_active, is_ready};

/// Runs the controller until the process stops.
pub(crate) async fn run(client: Client, caches: Informers) {
    let pair = (&caches.jobs, &caches.pods);
    crate::run_owning(client, &caches, pair, vec![], reconcile, "job-controller").await;
}

fn finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
}

/// How long a Job whose `failed` pods last failed at `last` still waits before it makes a new pod.
fn backoff_left(failed: i32, last: Option<jiff::Timestamp>, now: jiff::Timestamp) -> std::time::Duration {
    let Some(last) = last.filter(|_| failed > 0) else { return std::time::Duration::ZERO };
    let backoff = std::time::Duration::from_secs(10)
        .saturating_mul(1 << (failed - 1).clamp(0, 10))
        .min(std::time::Duration::from_secs(600));
    let since = now.duration_since(last);
    let since = std::time::Duration::try_from(since).unwrap_or(std::time::Duration::ZERO);
    backoff.saturating_sub(since)
}

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

async fn reconcile(job: Arc<Job>, context: Arc<crate::Context>) -> Result<Action, kube::Error> {
    if job.metadata.deletion_timestamp.is_some() || finished(&job) {
        return Ok(Action::await_change());
    }
    let (namespace, name) = (job.namespace().unwrap_or_default(), job.name_any());
    let uid = job.uid().unwrap_or_default();
    let spec = job.spec.clone().unwrap_or_default();
    let expectations = &context.expectations;
    // Pods just created or deleted that the cache does not show yet would be created or deleted again.
    if !expectations.satisfied(&uid) {
        return Ok(Action::requeue(crate::expectations::EXPECTING));
    }
    let pods_api: Api<Pod> = Api::namespaced(context.client.clone(), &namespace);
    let pods = controlled_by(&context.caches.pods.store(), &namespace, &uid);
    let succeeded = pods.iter().filter(|p| phase(p) == "Succeeded").count() as i32;
    let failed = pods.iter().filter(|p| phase(p) == "Failed").count() as i32;
    let mut active: Vec<&Pod> = pods.iter().filter(|p| is_active(p)).collect();
    let completions = spec.completions.unwrap_or(1);
    let parallelism = spec.parallelism.unwrap_or(1);
    let backoff_limit = spec.backoff_limit.unwrap_or(6);
    let now = nest_core::clock::rfc3339_now();

    let mut conditions = Vec::new();
    let mut completion_time = None;
    if succeeded >= completions {
        let condition = |kind: &str, reason: &str| {
            json!({"type": kind, "status": "True", "reason": reason, "message": "Reached expected number of succeeded pods",
                   "lastProbeTime": now, "lastTransitionTime": now})
        };
        conditions =
            vec![condition("SuccessCriteriaMet", "CompletionsReached"), condition("Complete", "CompletionsReached")];
        completion_time = Some(now.clone());
    } else if failed > backoff_limit {
        let condition = |kind: &str| {
            json!({"type": kind, "status": "True", "reason": "BackoffLimitExceeded",
                   "message": "Job has reached the specified backoff limit", "lastProbeTime": now, "lastTransitionTime": now})
        };
        conditions = vec![condition("FailureTarget"), condition("Failed")];
    }
    let wanted_active = if !conditions.is_empty() || spec.suspend == Some(true) {
        0
    } else {
        parallelism.min(completions - succeeded).max(0) as usize
    };

    // After a failure, a new pod waits the Job controller's back-off: 10 s, doubling with each failure, at most
    // 10 min, counted from when the last failed pod finished.
    let last_failure = pods
        .iter()
        .filter(|p| phase(p) == "Failed")
        .filter_map(|p| {
            p.status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .iter()
                .filter_map(|c| Some(c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref()?.0))
                .max()
        })
        .max();
    let wait = backoff_left(failed, last_failure, nest_core::clock::now());
    let holding = active.len() < wanted_active && !wait.is_zero();
    if active.len() < wanted_active && !holding {
        let labels = [
            ("batch.kubernetes.io/controller-uid", uid.as_str()),
            ("batch.kubernetes.io/job-name", name.as_str()),
            ("controller-uid", uid.as_str()),
            ("job-name", name.as_str()),
        ];
        let pod = crate::pod_from_template(&*job, &spec.template, &labels, None);
        // At most a burst of pods per pass, as the ReplicaSet controller (upstream: slow-start batches of at most
        // 500): a Job asking for 2³¹ pods at once makes them a burst at a time, never 2³¹ requests in memory.
        let missing = (wanted_active - active.len()).min(crate::replicaset::BURST);
        crate::pods::create(&context, &pods_api, &*job, &pod, missing).await?;
    } else if active.len() > wanted_active {
        active.sort_by_key(|p| is_ready(p));
        let delete = DeleteParams::background();
        for pod in &active[..active.len() - wanted_active] {
            crate::pods::delete(&context, &pods_api, &*job, pod, &delete, nest_client::done_unless_refused).await?;
        }
        active.truncate(wanted_active);
    }

    let ready = pods.iter().filter(|p| is_active(p) && is_ready(p)).count();
    let mut status = json!({
        "active": if !conditions.is_empty() { 0 } else if holding { active.len() } else { active.len().max(wanted_active) },
        "succeeded": succeeded, "failed": failed, "ready": ready,
        "startTime": job.status.as_ref().and_then(|s| s.start_time.clone()).map(|t| json!(t)).unwrap_or(json!(now)),
    });
    if !conditions.is_empty() {
        status["conditions"] = json!(conditions);
    }
    if let Some(at) = &completion_time {
        status["completionTime"] = json!(at);
    }
    let previous = job.status.clone().unwrap_or_default();
    let unchanged = conditions.is_empty()
        && previous.active.unwrap_or(0) == status["active"].as_i64().unwrap_or(0) as i32
        && previous.succeeded.unwrap_or(0) == succeeded
        && previous.failed.unwrap_or(0) == failed
        && previous.ready.unwrap_or(0) == ready as i32
        && previous.start_time.is_some();
    if !unchanged {
        let jobs: Api<Job> = Api::namespaced(context.client.clone(), &namespace);
        let written = nest_client::done_unless_refused(
            jobs.patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({"status": status}))).await,
        )?;
        // The Job's end, told once (the Job is not looked at again once finished).
        if written && completion_time.is_some() {
            context.events.about(&*job, "Normal", "Completed", "Job completed");
        } else if written && !conditions.is_empty() {
            let message = "Job has reached the specified backoff limit";
            context.events.about(&*job, "Warning", "BackoffLimitExceeded", message);
        }
    }
    Ok(if holding { Action::requeue(wait) } else { Action::await_change() })
}

#[cfg(test)]
mod tests {
    use super::backoff_left;
    use std::time::Duration;

    #[test]
    fn a_failed_pod_is_replaced_after_the_job_controllers_back_off() {
        let at = jiff::Timestamp::from_second(1_000_000).unwrap();
        let later = |seconds: i64| at.checked_add(jiff::SignedDuration::from_secs(seconds)).unwrap();
        assert_eq!(backoff_left(0, None, at), Duration::ZERO);
        assert_eq!(backoff_left(1, Some(at), later(4)), Duration::from_secs(6));
        assert_eq!(backoff_left(1, Some(at), later(11)), Duration::ZERO);
        assert_eq!(backoff_left(3, Some(at), later(0)), Duration::from_secs(40));
        assert_eq!(backoff_left(20, Some(at), later(0)), Duration::from_secs(600), "at most ten minutes");
    }
}
