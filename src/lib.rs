//! rust-batch: a gang-aware batch scheduler for Kubernetes.
//!
//! The engine (`model`, `cache`, `framework`, `conf`, `actions`, `plugins`) is pure: it does
//! no I/O and reads no clock. Drivers feed it and apply its decisions: `sim` (a
//! discrete-event cluster with a virtual clock) today, the Kubernetes driver next.

pub mod cache;
pub mod conf;
pub mod framework;
pub mod kube;
pub mod model;
pub mod sim;
pub mod snapshot;
pub mod testkit;

#[path = "../actions/mod.rs"]
pub mod actions;
#[path = "../plugins/mod.rs"]
pub mod plugins;
