//! The claim writer: a WaitForFirstConsumer claim's selected-node annotation, set for the
//! node its pod was placed on (its gang's binds wait for the claim to be provisioned, see
//! `provision`) or cleared when the gang is called off.

use std::time::Duration;

use ::kube::api::{Api, Patch, PatchParams};
use ::kube::Client;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use crate::metrics::Metrics;
use crate::model::volumes::SELECTED_NODE_ANNOTATION;
use crate::provision::ClaimPatch;
use crate::retry::{cause_of, delay, warn_limited, Failure, Gate};

/// Sets (or clears) a claim's selected-node annotation, retrying while the API server does
/// not answer; what stopped it otherwise.
pub async fn patch_claim(
    client: &Client,
    gate: &Gate,
    metrics: &Metrics,
    patch: &ClaimPatch,
) -> Result<(), String> {
    let (ns, name) = patch
        .claim
        .split_once('/')
        .ok_or_else(|| format!("bad claim key {}", patch.claim))?;
    let api = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns);
    let body = serde_json::json!({
        "metadata": {"annotations": {SELECTED_NODE_ANNOTATION: patch.node.as_deref()}}
    });
    let mut attempt = 0;
    loop {
        gate.pass().await;
        let started = tokio::time::Instant::now();
        let sent = api
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await;
        gate.record(&sent);
        metrics.api_write_timed("claim", started.elapsed(), sent.as_ref().err());
        let err = match sent {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        match Failure::of(&err) {
            Failure::Transient | Failure::Conflict(_) if attempt < 20 => {
                attempt += 1;
                warn_limited(
                    &format!("claim annotation not answered ({})", cause_of(&err)),
                    "retrying",
                );
                tokio::time::sleep(delay(
                    attempt,
                    Duration::from_millis(200),
                    Duration::from_secs(5),
                ))
                .await;
            }
            Failure::NotFound => {
                return Err(format!("persistentvolumeclaim {} not found", patch.claim))
            }
            _ => {
                return Err(format!(
                    "cannot annotate persistentvolumeclaim {}: {}",
                    patch.claim,
                    cause_of(&err)
                ))
            }
        }
    }
}
