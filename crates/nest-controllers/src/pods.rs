//! What the workload controllers do to the pods they control, each step told to the controller's expectations (so
//! that the next pass does not do it again before the cache shows it) and, as upstream's controllers do, in an Event
//! about the owner.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::expectations::version_of;

/// Creates `count` copies of `pod` for `owner` at once (`SuccessfulCreate` for each); returns those created, or the
/// first error once every request has been answered.
pub(crate) async fn create<O: Resource<DynamicType = ()>>(
    context: &crate::Context,
    api: &Api<Pod>,
    owner: &O,
    pod: &Pod,
    count: usize,
) -> kube::Result<Vec<Pod>> {
    let uid = owner.uid().unwrap_or_default();
    context.expectations.expect_creations(&uid, count);
    let post = PostParams::default();
    let creations = (0..count).map(|_| api.create(&post, pod));
    let (mut created, mut failure) = (Vec::new(), None);
    for answer in futures_util::future::join_all(creations).await {
        match answer {
            Ok(pod) => {
                let message = format!("Created pod: {}", pod.name_any());
                context.events.about(owner, "Normal", "SuccessfulCreate", message);
                created.push(pod);
            }
            Err(error) => {
                context.expectations.creation_failed(&uid);
                failure.get_or_insert(error);
            }
        }
    }
    failure.map_or(Ok(created), Err)
}

/// Deletes `pod` of `owner` with `params` (`SuccessfulDelete` once done); the answer is read as `done` reads it
/// ([`nest_client::done_unless_refused`] or [`nest_client::done_unless_gone_or_changed`]).
pub(crate) async fn delete<O: Resource<DynamicType = ()>>(
    context: &crate::Context,
    api: &Api<Pod>,
    owner: &O,
    pod: &Pod,
    params: &DeleteParams,
    done: fn(kube::Result<()>) -> kube::Result<bool>,
) -> kube::Result<bool> {
    let uid = owner.uid().unwrap_or_default();
    context.expectations.expect_deletion(&uid, pod);
    let answer = api.delete(&pod.name_any(), params).await;
    context.expectations.answered(&uid, pod, &answer, |a| a.as_ref().left().and_then(version_of));
    let deleted = done(answer.map(drop))?;
    if deleted {
        context.events.about(owner, "Normal", "SuccessfulDelete", format!("Deleted pod: {}", pod.name_any()));
    }
    Ok(deleted)
}

/// Makes `owner` the controller of the orphan `pod`, as long as the pod has not changed since it was read.
pub(crate) async fn adopt<O: Resource<DynamicType = ()>>(
    context: &crate::Context,
    api: &Api<Pod>,
    owner: &O,
    pod: &Pod,
) -> kube::Result<Pod> {
    let uid = owner.uid().unwrap_or_default();
    let mut references = pod.owner_references().to_vec();
    references.push(crate::controller_reference(owner));
    let patch = json!({"metadata": {"ownerReferences": references, "resourceVersion": pod.resource_version()}});
    context.expectations.expect_change(&uid, pod);
    let adopted = api.patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await;
    context.expectations.answered(&uid, pod, &adopted, version_of);
    adopted
}
