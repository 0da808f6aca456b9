//! The Kubernetes driver: the API types rust-batch reads and writes (`crd`, `coscheduling`,
//! `convert`, `groups`, `koordinator`, `budgets`), and the parts that connect the engine to
//! an API server, each with one job: `watch` (one task per kind) feeds the `index`;
//! `driver` runs cycles on it once every list is complete; `binder` sends binds and
//! evictions, `status` writes PodGroup and Queue status, `events` publishes events —
//! all through the back-off and log limits of `retry`; `recovery` completes or releases
//! gangs a refused bind left short; `debug` and `metrics` serve HTTP.
//!
//! Inside this module tree the name `kube` means this module; the external crate is
//! `::kube`.

pub mod binder;
pub mod budgets;
pub mod convert;
pub mod coscheduling;
pub mod crd;
pub mod driver;
pub mod events;
pub mod groups;
pub mod index;
pub mod koordinator;
pub mod recovery;
pub mod retry;
pub mod status;
pub mod watch;

/// What can stop the live driver.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error(transparent)]
    Config(#[from] crate::conf::ConfError),
    #[error("cannot set up metrics: {0}")]
    Metrics(String),
    #[error("cannot reach the Kubernetes API: {0}")]
    Client(#[from] ::kube::Error),
}
pub mod debug;
pub mod metrics;
