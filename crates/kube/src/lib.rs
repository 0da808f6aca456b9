//! The Kubernetes driver: the gang dialects rust-batch reads and writes (`dialects`: every
//! PodGroup kind, pod key and CRD), Kubernetes objects as the engine's model (`convert`,
//! `budgets`), and the parts that connect the engine to
//! an API server, each with one job: `watch` (one task per kind) feeds the `index`;
//! `driver` runs cycles on it once every list is complete (and, with `leader`, only while
//! this replica holds the lease), `pacing` says when the next may start; `binder` sends binds and evictions (as many at once as `bind_limit` finds the API
//! server takes), `status` writes
//! PodGroup and Queue status and pods' PodScheduled condition, `events` publishes events —
//! all through the back-off, log limits and leadership fence of `retry`; `recovery` completes or releases
//! gangs a refused bind left short; `dra_watch` turns DRA's classes, slices, claims and
//! templates into node inventories and pods' claims, and `dra_commit` writes a gang's claim
//! allocations before its binds; `volumes` turns claims, volumes and classes into pods'
//! volume rules (pods and nodes read without managedFields: `lean`), and `provision` holds a gang's binds until its WaitForFirstConsumer claims
//! are bound; `debug` and `metrics` serve HTTP; `client` builds the one API client they
//! share (TCP_NODELAY, retries left to `retry`).
//!
//! The external kube crate is written `::kube`. This crate drives the engine
//! (`rust-batch-engine`), which knows nothing of Kubernetes; the engine's modules are
//! imported below under the names the driver's code uses.

#[cfg(test)]
pub(crate) use rust_batch_engine::testkit;
pub(crate) use rust_batch_engine::{
    cache, conf, framework, model, plugins, snapshot, yaml, REGISTRY,
};

pub mod bind_limit;
pub mod binder;
pub mod budgets;
pub mod client;
pub mod cluster_snapshot;
pub mod convert;
pub mod dialects;
pub mod dra;
pub mod dra_commit;
pub mod dra_watch;
pub mod driver;
pub mod events;
pub mod index;
pub mod leader;
pub mod lean;
pub mod pacing;
pub mod proto;
pub mod provision;
pub mod readiness;
pub mod recovery;
pub mod retry;
pub mod status;
pub mod supervise;
pub mod usage;
pub mod volumes;
pub mod watch;

/// What can stop the live driver.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error(transparent)]
    Config(#[from] crate::conf::ConfError),
    #[error("cannot set up metrics: {0}")]
    Metrics(String),
    #[error(transparent)]
    Leader(#[from] leader::LeaderError),
    #[error("cannot reach the Kubernetes API: {0}")]
    Client(#[from] ::kube::Error),
}
pub mod debug;
pub mod metrics;
