//! What every namespace starts with, after kube-controller-manager's `serviceaccount` and `root-ca-cert-publisher`
//! controllers: a `default` ServiceAccount, and the `kube-root-ca.crt` ConfigMap holding the cluster CA so that pods
//! can verify the API server. Both come back if deleted, and the ConfigMap is corrected if changed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};

use crate::informers::Informers;
use crate::reconciling::Reconciling;

/// The ConfigMap every namespace gets.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

struct Context {
    client: Client,
    /// The cluster CA, PEM.
    ca_pem: String,
}

/// Runs the controller until the process stops.
pub(crate) async fn run(client: Client, caches: Informers, ca_pem: String) {
    let in_namespace = |object_namespace: Option<String>| object_namespace.map(|ns| ObjectRef::<Namespace>::new(&ns));
    let context = Arc::new(Context { client, ca_pem });
    let results = Reconciling::new(&caches.namespaces)
        .watches(&caches.default_accounts, move |sa| in_namespace(sa.namespace()).into_iter().collect())
        .watches(&caches.root_ca_configmaps, move |cm| in_namespace(cm.namespace()).into_iter().collect())
        .run(reconcile, error_policy, context);
    crate::drive(results, "serviceaccount").await;
}

fn error_policy(_: Arc<Namespace>, error: &kube::Error, _: Arc<Context>) -> Action {
    tracing::debug!(%error, "default service account or root CA");
    Action::requeue(Duration::from_secs(2))
}

async fn reconcile(namespace: Arc<Namespace>, context: Arc<Context>) -> Result<Action, kube::Error> {
    if namespace.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = namespace.name_any();
    let accounts: Api<ServiceAccount> = Api::namespaced(context.client.clone(), &name);
    if accounts.get_opt("default").await?.is_none() {
        let account = ServiceAccount {
            metadata: ObjectMeta { name: Some("default".into()), ..Default::default() },
            ..Default::default()
        };
        ignore_conflict(accounts.create(&PostParams::default(), &account).await)?;
    }
    let configmaps: Api<ConfigMap> = Api::namespaced(context.client.clone(), &name);
    let data = BTreeMap::from([("ca.crt".to_string(), context.ca_pem.clone())]);
    match configmaps.get_opt(ROOT_CA_CONFIGMAP).await? {
        None => {
            let configmap = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(ROOT_CA_CONFIGMAP.into()),
                    annotations: Some(BTreeMap::from([(
                        "kubernetes.io/description".to_string(),
                        "Contains a CA bundle that can be used to verify the kube-apiserver when using internal \
                         endpoints such as the internal service IP or kubernetes.default.svc. No other usage is \
                         guaranteed across distributions of Kubernetes clusters."
                            .to_string(),
                    )])),
                    ..Default::default()
                },
                data: Some(data),
                ..Default::default()
            };
            ignore_conflict(configmaps.create(&PostParams::default(), &configmap).await)?;
        }
        Some(mut configmap) if configmap.data.as_ref() != Some(&data) => {
            configmap.data = Some(data);
            ignore_conflict(configmaps.replace(ROOT_CA_CONFIGMAP, &PostParams::default(), &configmap).await)?;
        }
        Some(_) => {}
    }
    Ok(Action::await_change())
}

/// A 409 means someone else wrote first; the watch brings the result back here.
fn ignore_conflict<T>(result: kube::Result<T>) -> kube::Result<()> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error),
    }
}
