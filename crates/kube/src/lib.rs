//! The Kubernetes driver, in three layers with the data flowing one way, and the driver on
//! top (docs/src/architecture.md, "The driver's layers"; `cargo test --test offline
//! driver_layers` fails on an import cycle between these modules):
//!
//! - stores: `watch` (one task per kind, under `supervise`) feeds any `watch::Store`,
//!   with each kind's `readiness`; pods and nodes are read without managedFields (`lean`)
//!   and listed in protobuf (`proto`); `newest` orders an object's versions;
//! - the index: `index` turns the stores' objects into the engine's cache — through the
//!   gang kinds of `dialects` (every PodGroup kind, pod key and CRD), `convert`, `budgets`,
//!   `volumes`, `dra` and `index::dra_watch` — and knows which gangs changed; it keeps the
//!   bookkeeping of `provision` and `recovery` and reports events to `event_feed`;
//! - writers, each owning its state and sending what the API server answers back through
//!   the index's apply functions: `binder` (binds and evictions, as many at once as
//!   `bind_limit` finds the API server takes), `status` (PodGroup and Queue status, pods'
//!   PodScheduled condition), `events` (the publisher), `dra_commit` (claim allocations
//!   before binds), `claim_writer` (WaitForFirstConsumer claims' selected node), `usage`
//!   (queues' usage) — all through the back-off, log limits and leadership fence of
//!   `retry` and `leadership` (moved by `leader`'s election);
//! - `driver`: `run` wires the parts; `driver::Decider::decide` is the cycle's synchronous
//!   decision, and its async loop paces cycles (`pacing`) once every list is complete and
//!   hands each plan to the writers. `debug` and `metrics` serve HTTP; `client` builds the
//!   one API client they share (TCP_NODELAY, retries left to `retry`).
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
pub mod claim_writer;
pub mod client;
pub mod clock;
pub mod cluster_snapshot;
pub mod convert;
pub mod dialects;
pub mod dra;
pub mod dra_commit;
pub mod driver;
pub mod event_feed;
pub mod events;
pub mod in_flight;
pub mod index;
pub mod leader;
pub mod leadership;
pub mod lean;
pub mod newest;
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

/// DRA's objects as the index holds them: kept at its old path (`index::dra_watch`).
pub use index::dra_watch;

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
