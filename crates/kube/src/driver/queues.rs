//! Volcano's queues root and default, created as Volcano's scheduler creates them.

use std::time::{Duration, Instant};

use ::kube::api::{Api, PostParams};
use ::kube::Client;
use tracing::{debug, info, warn};

use crate::dialects::volcano::api::DEFAULT_QUEUE;
use crate::dialects::volcano::Queue;
use crate::metrics::Metrics;
use crate::model::ROOT_QUEUE;
use crate::retry::{backoff, warn_limited, Failure, Gate};

/// Creates queues root and default unless they exist, as Volcano's scheduler does
/// (`newDefaultAndRootQueue`, pkg/scheduler/cache/cache.go, v1.15.1: root not reclaimable,
/// default reclaimable, both weight 1): Volcano's queue controller makes `root` the parent
/// of every queue and expects it to exist. Tries again while the API server cannot be
/// reached or fails, so a scheduler started during an outage still creates them once the
/// API server answers (the cache holds a stand-in default meanwhile, see `run`).
pub(super) async fn ensure_volcano_queues(client: &Client, metrics: &Metrics, gate: &Gate) {
    for (name, reclaimable) in [(ROOT_QUEUE, false), (DEFAULT_QUEUE, true)] {
        ensure_queue(client, metrics, gate, name, reclaimable).await;
    }
}

async fn ensure_queue(
    client: &Client,
    metrics: &Metrics,
    gate: &Gate,
    name: &str,
    reclaimable: bool,
) {
    let api = Api::<Queue>::all(client.clone());
    let queue: Queue = match serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 1, "reclaimable": reclaimable}
    })) {
        Ok(q) => q,
        Err(e) => {
            warn!(error = %e, queue = name, "cannot build the queue");
            return;
        }
    };
    let what = format!("cannot create queue {name}");
    // What scheduling does without the object: a stand-in default queue (see `run`);
    // without root, "root" as a parent means top-level.
    let fallback = if name == DEFAULT_QUEUE {
        "an in-memory default queue"
    } else {
        "queues under root are top-level"
    };
    for wait in backoff(Duration::from_secs(1), Duration::from_secs(60)) {
        // Only the leader writes; during an outage the gate holds every writer.
        gate.pass().await;
        let started = Instant::now();
        let created = api.create(&PostParams::default(), &queue).await;
        metrics.api_write_timed("queue", started.elapsed(), created.as_ref().err());
        gate.record(&created);
        match created {
            Ok(_) => info!("created queue {name}"),
            Err(kube::Error::Api(e)) if e.code == 409 => debug!("queue {name} exists"),
            Err(e) if Failure::of(&e) == Failure::Transient => {
                warn_limited(
                    &what,
                    &format!(
                        "{e}; trying again in {}, {fallback} meanwhile",
                        humantime::format_duration(Duration::from_secs(wait.as_secs().max(1)))
                    ),
                );
                tokio::time::sleep(wait).await;
                continue;
            }
            // Refused (no Queue CRD, no permission): nothing else could be scheduled
            // there either; the fallback stays.
            Err(e) => warn_limited(&what, &format!("{e}; {fallback}")),
        }
        return;
    }
}
