//! Fair share over time across restarts: the engine keeps every queue's usage
//! (`framework::usage`); the leader records it on each Queue as the annotation
//! `rust-batch.io/usage`, at most once per `RECORD_EVERY`, and a scheduler that starts (or a
//! standby that takes over) reads it back from there (`QueueInfo::recorded_usage`). What
//! happened between the last record and the restart is lost: at most `RECORD_EVERY` of it.

use std::time::Duration;

use ::kube::api::{Api, Patch, PatchParams};
use ::kube::Client;

use super::dialects::volcano::Queue;
use super::metrics::Metrics;
use super::retry::{warn_limited, Failure, Gate};
pub use crate::dialects::volcano::usage_record::{annotation_value, parse, USAGE};
use crate::framework::UsageLedger;

/// How often the leader records usage: a usage moves by a few percent of its value per
/// minute at the shortest half-life, and each record is a write per queue.
pub const RECORD_EVERY: Duration = Duration::from_secs(60);

/// Records every queue's usage on its Queue object (a merge patch of the annotation), each
/// write through the gate. A queue deleted meanwhile is skipped.
pub async fn record(
    client: Client,
    gate: std::sync::Arc<Gate>,
    metrics: std::sync::Arc<Metrics>,
    usage: UsageLedger,
) {
    let api = Api::<Queue>::all(client);
    for (queue, u) in usage.queues() {
        let patch = serde_json::json!({
            "metadata": {"annotations": {USAGE: annotation_value(u)}}
        });
        gate.pass().await;
        let started = tokio::time::Instant::now();
        let r = api
            .patch(queue, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        metrics.api_write_timed("queue usage", started.elapsed(), r.as_ref().err());
        gate.record(&r);
        if let Err(e) = r {
            if Failure::of(&e) != Failure::NotFound {
                warn_limited("cannot record queue usage", &format!("queue {queue}: {e}"));
            }
        }
    }
}
