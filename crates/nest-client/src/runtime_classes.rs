//! The RuntimeClass nest's nodes simulate pods with, and its making: `nest up` makes it in the management cluster,
//! and the syncer in every tenant cluster, so that a pod (of the platform or of a tenant) asks for simulation by
//! `runtimeClassName: nest-simulated` and nothing else is ever simulated.

use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{Api, ObjectMeta, PostParams};

/// The RuntimeClass's name.
pub const SIMULATED: &str = "nest-simulated";
/// Its handler, which a `process` node runs by reporting the pod Running without running anything.
pub const SIMULATED_HANDLER: &str = "simulated";

/// Makes RuntimeClass [`SIMULATED`] unless it exists (whoever made it, with whatever handler: the handler is
/// immutable, and a cluster's admin may have reasons).
pub async fn ensure_simulated(client: &kube::Client) -> Result<(), kube::Error> {
    let classes: Api<RuntimeClass> = Api::all(client.clone());
    let class = RuntimeClass {
        metadata: ObjectMeta { name: Some(SIMULATED.into()), ..Default::default() },
        handler: SIMULATED_HANDLER.into(),
        ..Default::default()
    };
    match classes.create(&PostParams::default(), &class).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error),
    }
}
