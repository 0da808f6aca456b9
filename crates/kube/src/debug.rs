//! The gang debug API, with Koordinator's field names where they apply, so tools written
//! for Koordinator's Coscheduling endpoints work unchanged:
//!
//! - `GET /apis/v1/plugins/Coscheduling/gangs` — every gang;
//! - `GET /apis/v1/plugins/Coscheduling/gang/{namespace}/{name}` — one gang, or 404.
//!
//! Beyond Koordinator's fields each gang carries `queue`, `phase`, the last cycle's
//! `condition`, and `pending`: why each pending pod waits (what `rust-batch explain` prints).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::dialects::volcano::api::{PodGroupConditionType, PodGroupPhase};
use super::index::{GangView, IndexView};
use crate::model::{GangMode, GangOrigin, TaskStatus};

pub(super) fn routes(state: IndexView) -> Router {
    Router::new()
        .route("/apis/v1/plugins/Coscheduling/gangs", get(all))
        .route(
            "/apis/v1/plugins/Coscheduling/gang/{namespace}/{name}",
            get(one),
        )
        .with_state(state)
}

fn rfc3339(ms: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn gang(view: GangView) -> Value {
    let GangView {
        job,
        dialect,
        verdict,
        held,
        workload,
    } = view;
    let key = job.uid.to_string();
    let name_of = |t: &crate::model::TaskInfo| format!("{}/{}", t.namespace, t.name);
    let with = |pred: fn(TaskStatus) -> bool| -> Vec<String> {
        job.tasks()
            .iter()
            .filter(|t| pred(t.status))
            .map(name_of)
            .collect()
    };
    // Koordinator's two sources; `dialect` says which object or keys exactly.
    let (from, dialect) = match dialect {
        Some(d) => ("GangFromPodGroupCrd", d.api_group()),
        None if job.origin == GangOrigin::SinglePod => ("GangFromPodAnnotation", "pod"),
        None => ("GangFromPodAnnotation", "annotations"),
    };
    let group: Vec<String> = if job.policy.group.is_empty() {
        vec![key.clone()]
    } else {
        job.policy.group.clone()
    };
    let (condition, reasons) = verdict.unwrap_or_default();
    let mut pending: Vec<Value> = job
        .tasks()
        .iter()
        .filter(|t| t.status == TaskStatus::Pending)
        .map(|t| {
            let why = reasons
                .iter()
                .find(|(uid, _)| *uid == t.uid)
                .map(|(_, w)| w.clone())
                .unwrap_or_else(|| "not yet considered".into());
            json!({"pod": name_of(t), "reason": why})
        })
        .collect();
    // Members the driver keeps out of the engine (gated, refused) are children that wait.
    pending.extend(
        held.iter()
            .map(|(pod, why)| json!({"pod": pod, "reason": why})),
    );
    let mut children: Vec<String> = job.tasks().iter().map(name_of).collect();
    children.extend(held.iter().map(|(pod, _)| pod.clone()));
    json!({
        "name": key,
        "mode": match job.policy.mode { GangMode::Strict => "Strict", GangMode::NonStrict => "NonStrict" },
        "matchPolicy": job.policy.match_policy,
        "gangFrom": from,
        "dialect": dialect,
        "minRequiredNumber": job.min_member,
        "totalChildrenNum": job.policy.total_number.unwrap_or(children.len() as u32),
        "children": children,
        // Placed by the scheduler (held, for a NonStrict gang) or being bound.
        "waitingForBindChildren": with(|s| matches!(s, TaskStatus::Allocated | TaskStatus::Pipelined | TaskStatus::Binding)),
        "boundChildren": with(|s| matches!(s, TaskStatus::Bound | TaskStatus::Running | TaskStatus::Succeeded)),
        "onceResourceSatisfied": job.runtime.once_satisfied || matches!(job.phase, crate::model::PodGroupPhase::Running | crate::model::PodGroupPhase::Completed),
        "gangGroup": group,
        "waitTime": job.policy.wait_timeout.map(|ms| humantime::format_duration(std::time::Duration::from_millis(ms.max(0) as u64)).to_string()),
        "waitingSince": job.runtime.waiting_since.map(rfc3339),
        "backoffUntil": (job.runtime.expiries > 0).then(|| rfc3339(job.runtime.backoff_until)),
        "createTime": rfc3339(job.created),
        "queue": &*job.queue,
        "phase": PodGroupPhase::from(job.phase),
        "condition": condition.map(|c| json!({
            "type": PodGroupConditionType::from(c.kind),
            "reason": c.reason,
            "message": c.message,
        })),
        "pending": pending,
        // Kubernetes' own PodGroups: the Workload and template `workloadRef` names.
        "workload": workload,
    })
}

async fn one(
    State(state): State<IndexView>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    let key = format!("{namespace}/{name}");
    let view = state.read(|ix| ix.gang_view(&key));
    match view {
        Some(v) => Json(gang(v)).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": format!("gang {key} not found: no PodGroup, labelled pods or pod of ours has that name")})),
        )
            .into_response(),
    }
}

async fn all(State(state): State<IndexView>) -> Json<Value> {
    let views: Vec<GangView> = state.read(|ix| {
        ix.gang_keys()
            .iter()
            .filter_map(|k| ix.gang_view(k))
            .collect()
    });
    Json(Value::Array(views.into_iter().map(gang).collect()))
}
