//! The end-to-end tests that disturb the whole cluster: they stop or kill the API server
//! and etcd, remove CRDs every test installs, or cordon every node. They run in a binary of
//! their own, after the `e2e` binary's tests (test binaries run one after another), and one
//! at a time: each holds `ONE_AT_A_TIME` for its whole run.
//!
//! One module: `tests/cluster/with-cluster.sh cargo test --test e2e_disruptive chaos::`.

#[path = "../e2e/common/mod.rs"]
mod common;

mod chaos;
mod late_crd;
mod outage;
mod queue_shares;

/// One test at a time, whichever module it is in.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
