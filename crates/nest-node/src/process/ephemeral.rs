//! Ephemeral containers (`kubectl debug`), started in a running pod when its spec gains them
//! (`pods/ephemeralcontainers`), as the kubelet's `SyncPod` starts those it has not started yet.
//!
//! An ephemeral container runs as the pod's other containers do ([`super::sandbox`]: the pod's user range, its
//! network namespace, beneath its tenant's share, the same refusal of privileges), from its image, once: it is never
//! restarted, and its state is reported in `status.ephemeralContainerStatuses`. With `targetContainerName` naming a
//! running container it joins that container's PID namespace (and the user namespace that owns it), so that `ps`
//! shows the target's processes; when the target does not run, it gets a PID namespace of its own. An ephemeral
//! container that cannot start (its image cannot be had, it asks for privileges) waits with the reason, and is
//! tried again when the pod is next looked at.

use std::path::Path;

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};
use kube::ResourceExt;

use super::{PodRun, PrepareError, Runtime, prepare};

impl Runtime {
    /// Starts those of `pod`'s ephemeral containers this node has not started yet, if it runs the pod.
    pub async fn start_ephemeral(&self, pod: &Pod, facts: &prepare::PodFacts<'_>) {
        let uid = pod.uid().unwrap_or_default();
        let Some(run) = self.pods().get(&uid).cloned() else { return };
        let ephemeral = pod.spec.as_ref().and_then(|s| s.ephemeral_containers.clone()).unwrap_or_default();
        for wanted in ephemeral.iter().filter(|e| !run.has_started(&e.name)) {
            let Some(container) = as_container(wanted) else { continue };
            if let Err(error) = self.start_one(pod, facts, &run, &container, wanted).await {
                tracing::info!(pod = %pod.name_any(), container = %container.name, %error,
                               "cannot start an ephemeral container");
                let image = container.image.as_deref().unwrap_or_default();
                run.ephemeral_waiting(&container.name, image, error.reason(), &error.to_string()).await;
            }
        }
    }

    async fn start_one(
        &self,
        pod: &Pod,
        facts: &prepare::PodFacts<'_>,
        run: &PodRun,
        container: &Container,
        wanted: &EphemeralContainer,
    ) -> Result<(), PrepareError> {
        let uid = pod.uid().unwrap_or_default();
        let pod_dir = self.pod_dir(&uid);
        let claims_dir = self.config.data_dir.join("claims");
        let mut sources = prepare::Sources::new(self.client.clone(), &pod.namespace().unwrap_or_default());
        let base = self.sandboxes.base(pod)?;
        let name = container.image.clone().unwrap_or_default();
        let image = self.image(pod, container, false, &mut sources).await?;
        let rootfs = self.images.rootfs(&image, base).map_err(|e| PrepareError::Pull {
            image: name.clone(),
            message: format!("unpacking image \"{name}\": {e}"),
            reason: "CreateContainerError",
        })?;
        let root = Some((&image, rootfs));
        let mut launch =
            prepare::launch(facts, container, Path::new(""), root, &mut sources, &pod_dir, &claims_dir).await?;
        let placement = self.sandboxes.place(pod)?;
        let netns = run.netns.as_deref();
        let sandboxed = self.sandboxes.prepare(pod, container, &launch, facts.pod_ip, netns, base, &placement)?;
        let target = wanted.target_container_name.as_deref().filter(|t| !t.is_empty());
        if let Some(pid) = target.and_then(|t| run.running_sandbox(t).ok()).and_then(|sandbox| sandbox.pid()) {
            sandboxed.join_pid_namespace_of(pid)?;
        }
        launch.sandbox = Some(std::sync::Arc::new(sandboxed));
        run.start_ephemeral(container, launch);
        Ok(())
    }
}

/// An ephemeral container as the container it runs as: the same fields, less `targetContainerName` (the API server
/// has refused those an ephemeral container may not have).
fn as_container(ephemeral: &EphemeralContainer) -> Option<Container> {
    let mut value = serde_json::to_value(ephemeral).ok()?;
    value.as_object_mut()?.remove("targetContainerName");
    serde_json::from_value(value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ephemeral_container_runs_as_a_container_of_its_fields() {
        let ephemeral: EphemeralContainer = serde_json::from_value(serde_json::json!({
            "name": "debugger", "image": "busybox", "stdin": true, "tty": true, "targetContainerName": "app",
            "command": ["sh"]}))
        .unwrap();
        let container = as_container(&ephemeral).unwrap();
        assert_eq!(container.name, "debugger");
        assert_eq!(container.command, Some(vec!["sh".to_string()]));
        assert_eq!((container.stdin, container.tty), (Some(true), Some(true)));
    }
}
