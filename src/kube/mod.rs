//! The Kubernetes driver: the API types rust-batch reads and writes, and (to come) the
//! watchers, binder, evictor and status writer that connect the engine to an API server.
//!
//! Inside this module tree the name `kube` means this module; the external crate is
//! `::kube`.

pub mod budgets;
pub mod convert;
pub mod coscheduling;
pub mod crd;
pub mod driver;
pub mod groups;
pub mod koordinator;

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
