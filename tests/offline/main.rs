//! Every test of the `rust-batch` package that needs no control plane, one binary: the
//! shipped artifacts (CRDs against Volcano's, the chart and its render, the deploy
//! manifests, the static binary in an empty root, the docs book's links, Volcano's
//! dashboards against our metrics, the driver's layers) and the dialect adapters (property tests, the fuzz
//! corpora). Run one group with a filter, e.g. `cargo test --test offline crds::`.

#[path = "../e2e/common/mod.rs"]
mod common;

mod adapters_props;
mod crds;
mod deploy;
mod docs_links;
mod driver_layers;
mod fuzz_corpus;
mod helm;
mod simulate_cli;
mod static_binary;
mod volcano_dashboards;
