//! Leader election through a `coordination.k8s.io/v1` Lease, as kube-controller-manager does it (client-go's
//! `leaderelection` with a `LeaseLock`): the holder renews the Lease every [`Election::renew_every`]; anyone may take
//! it once `renewTime + leaseDurationSeconds` has passed. Every write is a compare-and-swap on the Lease's
//! `resourceVersion`, so two candidates can never both believe they hold it.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

/// One candidate for one Lease.
pub struct Election {
    api: Api<Lease>,
    name: String,
    /// Who this candidate is (`holderIdentity`); unique per process.
    pub identity: String,
    /// How long a Lease stays held without renewal.
    pub lease_duration: Duration,
    /// How often the holder renews.
    pub renew_every: Duration,
}

impl Election {
    /// A candidate for the Lease `namespace/name`.
    pub fn new(client: Client, namespace: &str, name: &str, identity: String) -> Election {
        Election {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity,
            lease_duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(2),
        }
    }

    /// Waits until this candidate holds the Lease.
    pub async fn acquire(&self) {
        // An API server that does not answer yet (it starts beside this one) is asked again soon, backing off to the
        // renewal period; a Lease another holds, at the renewal period.
        let mut unanswered = Duration::from_millis(100);
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => return,
                Ok(false) => tokio::time::sleep(self.renew_every).await,
                Err(error) => {
                    tracing::debug!(%error, lease = %self.name, "leader election");
                    unanswered = (unanswered * 2).min(self.renew_every);
                    tokio::time::sleep(unanswered).await;
                }
            }
        }
    }

    /// Keeps renewing the Lease; returns when it could not be renewed before it would expire (the holder must stop
    /// acting at once, as kube-controller-manager exits).
    pub async fn hold(&self) {
        let mut last_renewal = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.renew_every).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => last_renewal = tokio::time::Instant::now(),
                Ok(false) => return,
                Err(error) => tracing::warn!(%error, lease = %self.name, "renewing the leader lease"),
            }
            // Stop while the Lease is still ours: nobody else can have taken it yet.
            if last_renewal.elapsed() + self.renew_every >= self.lease_duration {
                return;
            }
        }
    }

    /// One round, given at most the renewal period (as client-go's `RenewDeadline` bounds it): a request stuck on a
    /// connection that carries nothing any more (seen here: a pod's first connection through the service proxy,
    /// its packets lost both ways, which TCP would retry for a quarter of an hour) is abandoned, and the next round
    /// opens another.
    async fn try_acquire_or_renew(&self) -> kube::Result<bool> {
        match tokio::time::timeout(self.renew_every.max(Duration::from_secs(1)), self.round()).await {
            Ok(result) => result,
            Err(_) => Err(kube::Error::Service("the Lease request took longer than the renewal period".into())),
        }
    }

    /// Take the Lease if it is free, expired or already ours. `Ok(true)` when held afterwards.
    async fn round(&self) -> kube::Result<bool> {
        let now = MicroTime(jiff::Timestamp::try_from(SystemTime::now()).unwrap_or(jiff::Timestamp::UNIX_EPOCH));
        let current = self.api.get_opt(&self.name).await?;
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.name.clone()), ..Default::default() },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.lease_duration.as_secs() as i32),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(error) => Err(error),
            };
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == self.identity;
        if !ours && !holder.is_empty() && !expired(spec, &now) {
            return Ok(false);
        }
        if !ours {
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
            tracing::info!(lease = %self.name, from = %holder, to = %self.identity, "taking over the leader lease");
        }
        spec.lease_duration_seconds = Some(self.lease_duration.as_secs() as i32);
        spec.renew_time = Some(now);
        // The replace carries the resourceVersion read above: a concurrent change makes it a 409, and this round
        // is lost rather than shared.
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(error) => Err(error),
        }
    }
}

fn expired(spec: &LeaseSpec, now: &MicroTime) -> bool {
    let Some(renewed) = &spec.renew_time else { return true };
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    renewed.0.as_second() + duration < now.0.as_second()
}
