//! rust-batch: a gang-aware batch scheduler for Kubernetes.
//!
//! Three crates, the data flowing one way: the engine (`rust-batch-engine`: model, snapshot,
//! cache, conf, framework, actions, plugins, and the simulator; pure, no I/O, no clock, no
//! Kubernetes), the live driver (`rust-batch-kube`), and this package on top: the
//! `rust-batch` binary and its command line. This library re-exports both under the paths
//! the benches and integration tests use (`rust_batch::model`, `rust_batch::kube`, ...).

pub use rust_batch_engine::{
    actions, cache, conf, conf_yaml, framework, model, plugins, sim, snapshot, testkit, yaml,
    REGISTRY,
};
pub use rust_batch_kube as kube;
