//! The end-to-end tests: one test binary against the real control plane started by
//! tests/cluster/with-cluster.sh (KUBECONFIG), each module a behaviour with its own
//! namespaces, node pools and scheduler names, so that the tests of all modules run side
//! by side (libtest's threads) on one cluster. One binary links kube and tokio once
//! instead of once per module.
//!
//! One module: `tests/cluster/with-cluster.sh cargo test --test e2e dialects::`.
//! What shares a process-wide resource takes its turn: a scheduler answering to `volcano`
//! (`common::operators::volcano_name_lock`), a Job controller (`common::job_controller`).
//! Tests that stop the control plane or change what every test relies on (CRDs removed,
//! every node cordoned) are in the `e2e_disruptive` binary, which runs them one at a time.

// protobuf_lists's `json!` pod and node specs nest deeper than the default limit.
#![recursion_limit = "256"]

mod common;

mod autoscaler_signal;
mod dialects;
mod dra;
mod driver_robustness;
mod gates_and_refusals;
mod helm;
mod job_controller;
mod leader_election;
mod metrics;
mod native_podgroup;
mod operators_kubeflow;
mod operators_ray_spark;
mod pod_rules;
mod predicted_start;
mod preemption_and_invalid_queues;
mod protobuf_lists;
mod simulate_from_cluster;
mod topology;
mod volcano_all_or_nothing;
mod volcano_controllers;
mod volumes;
