//! A whole cluster as Cluster API declares it: a `Cluster` referencing a `NestedCluster` and a `NestedControlPlane`
//! of the same name, all labelled with it. What `nest up` creates as `demo`.

use kube::api::{Api, ObjectMeta, PostParams};

use crate::api::{
    CLUSTER_NAME_LABEL, CONTROL_PLANE_GROUP, Cluster, ClusterSpec, ComponentOverrides,
    ContractVersionedObjectReference, Flavor, INFRASTRUCTURE_GROUP, NestedAPIServerSpec, NestedCluster,
    NestedClusterSpec, NestedComponentSpec, NestedControlPlane, NestedControlPlaneSpec,
};

/// The Kubernetes version nest's own components speak.
pub const DEFAULT_VERSION: &str = "v1.33.0";

/// What a new cluster is asked to be.
#[derive(Clone, Debug)]
pub struct Shape {
    /// The Kubernetes version of the control plane.
    pub version: String,
    pub flavor: Flavor,
    /// The members of its etcd; none (the `nest` flavor's API server keeps its data itself) when unset.
    pub etcd_members: Option<i32>,
    /// The API servers (more than one needs an etcd).
    pub api_servers: Option<i32>,
    /// The Pod Security level its workloads get in the management cluster ([`crate::api::POD_SECURITY_ANNOTATION`]);
    /// the syncer's default when unset.
    pub pod_security: Option<String>,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            version: DEFAULT_VERSION.into(),
            flavor: Flavor::Nest,
            etcd_members: None,
            api_servers: None,
            pod_security: None,
        }
    }
}

/// The three objects of cluster `name` in `namespace`.
pub fn bundle(name: &str, namespace: &str, shape: &Shape) -> (Cluster, NestedCluster, NestedControlPlane) {
    let meta = ObjectMeta {
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        labels: Some([(CLUSTER_NAME_LABEL.to_string(), name.to_string())].into()),
        ..Default::default()
    };
    let reference = |group: &str, kind: &str| ContractVersionedObjectReference {
        api_group: group.into(),
        kind: kind.into(),
        name: name.into(),
    };
    let mut cluster_meta = meta.clone();
    if let Some(level) = &shape.pod_security {
        cluster_meta.annotations = Some([(crate::api::POD_SECURITY_ANNOTATION.to_string(), level.clone())].into());
    }
    let cluster = Cluster {
        metadata: cluster_meta,
        spec: ClusterSpec {
            control_plane_ref: Some(reference(CONTROL_PLANE_GROUP, "NestedControlPlane")),
            infrastructure_ref: Some(reference(INFRASTRUCTURE_GROUP, "NestedCluster")),
            ..Default::default()
        },
        status: None,
    };
    let infrastructure = NestedCluster { metadata: meta.clone(), spec: NestedClusterSpec::default(), status: None };
    let plane = NestedControlPlane {
        metadata: meta,
        spec: NestedControlPlaneSpec {
            version: shape.version.clone(),
            flavor: shape.flavor,
            components: (shape.etcd_members.is_some() || shape.api_servers.is_some()).then(|| ComponentOverrides {
                etcd: shape.etcd_members.map(|n| NestedComponentSpec { replicas: Some(n), ..Default::default() }),
                api_server: shape.api_servers.map(|n| NestedAPIServerSpec {
                    component: NestedComponentSpec { replicas: Some(n), ..Default::default() },
                    limits: Default::default(),
                }),
                controller_manager: None,
            }),
            ..Default::default()
        },
        status: None,
    };
    (cluster, infrastructure, plane)
}

/// Creates the objects of cluster `name`; those that exist already are left as they are.
pub async fn create(client: &kube::Client, name: &str, namespace: &str, shape: &Shape) -> kube::Result<()> {
    let (cluster, infrastructure, plane) = bundle(name, namespace, shape);
    let post = PostParams::default();
    tolerate(Api::<NestedControlPlane>::namespaced(client.clone(), namespace).create(&post, &plane).await)?;
    tolerate(Api::<NestedCluster>::namespaced(client.clone(), namespace).create(&post, &infrastructure).await)?;
    tolerate(Api::<Cluster>::namespaced(client.clone(), namespace).create(&post, &cluster).await)
}

/// `Ok` for a creation that happened or found the object there already.
fn tolerate<T>(result: kube::Result<T>) -> kube::Result<()> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error),
    }
}
