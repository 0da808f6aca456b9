//! The engine's integration tests, one binary that links the engine only (no kube, no
//! k8s-openapi): gang semantics across cycles, what keeps a gang waiting, rules relative to
//! other pods, the property tests (no partial gang, no over-committed node, whole-gang
//! placement against an exhaustive solver, pod rules against an independent checker), and
//! every bundled simulator scenario. Run one group with a filter, e.g.
//! `cargo test -p rust-batch-engine --test engine scenarios::`.

mod blockers;
mod devices;
mod devices_props;
mod fair_share;
mod gang_placement_props;
mod gangs;
mod pod_rules;
mod pod_rules_props;
mod predicted_start;
mod preempt_cost;
mod preempt_protection;
mod props;
mod scenarios;
mod snapshot_scenarios;
