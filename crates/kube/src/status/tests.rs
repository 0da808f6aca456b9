use super::*;
use crate::dialects::volcano::PodGroup;
use crate::index::lock;

#[test]
fn marks_coalesce_per_object() {
    let mut q = WriteQueue::default();
    let a = Target::Group(Dialect::VOLCANO, "ns/a".into());
    let b = Target::Queue("q".into());
    let now = Instant::now();
    q.mark_at(a.clone(), now);
    q.mark_at(a.clone(), now);
    assert_eq!(q.len(), 1, "one entry per object");
    q.mark_at(b.clone(), now);
    assert_eq!(q.next(now).ok().map(|(t, _)| t), Some(a));
    assert_eq!(q.next(now).ok().map(|(t, _)| t), Some(b));
    assert!(q.next(now).is_err());
    assert_eq!(q.len(), 0);
}

#[test]
fn a_deleted_pod_group_is_never_written() {
    let mut ix = Index::default();
    let pg: PodGroup = serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7"},
        "spec": {"minMember": 1}
    }))
    .unwrap();
    ix.apply_group(&pg);
    let t = Target::Group(Dialect::VOLCANO, "ns/a".into());
    let (patch, rv) = patch_for(&ix, &t, 0).expect("a new PodGroup gets its status");
    assert_eq!(
        rv.as_deref(),
        Some("7"),
        "written over the version it was computed from"
    );
    assert_eq!(patch["status"]["phase"], "Pending");
    ix.delete_group(Dialect::VOLCANO, "ns/a");
    assert!(
        patch_for(&ix, &t, 0).is_none(),
        "gone from the index: nothing to write"
    );
}

#[test]
fn a_pending_pod_gets_its_condition_once_and_never_while_binding() {
    let mut ix = Index::new(vec!["rb".into()]);
    let pod = |rv: &str, cond: serde_json::Value| -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": rv},
            "spec": {"schedulerName": "rb", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Pending", "conditions": cond}
        }))
        .unwrap()
    };
    ix.apply_pod(&pod("5", serde_json::json!([])));
    let t = Target::Pod("u1".into());
    assert!(patch_for(&ix, &t, 0).is_none(), "no verdict yet");
    ix.pod_conditions
        .insert("u1".into(), ("Unschedulable".into(), "gang msg".into()));
    let (patch, rv) = patch_for(&ix, &t, 0).expect("the condition is missing");
    assert_eq!(rv.as_deref(), Some("5"));
    let c = &patch["status"]["conditions"][0];
    assert_eq!(
        (
            c["type"].as_str(),
            c["status"].as_str(),
            c["reason"].as_str()
        ),
        (Some("PodScheduled"), Some("False"), Some("Unschedulable"))
    );
    assert!(c["lastTransitionTime"].is_string(), "False is new");
    ix.apply_pod(&pod(
        "6",
        serde_json::json!([{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "gang msg"}]),
    ));
    assert!(patch_for(&ix, &t, 0).is_none(), "written only on change");
    ix.pod_conditions
        .insert("u1".into(), ("QueueLimit".into(), "queue full".into()));
    let (patch, _) = patch_for(&ix, &t, 0).unwrap();
    assert!(
        patch["status"]["conditions"][0]["lastTransitionTime"].is_null(),
        "still False: its transition time stays"
    );
    ix.cache
        .assume("u1", crate::cache::Assumption::Bind("n1".into()));
    assert!(
        patch_for(&ix, &t, 0).is_none(),
        "the bind sets PodScheduled"
    );
}

#[test]
fn a_failed_object_waits_for_its_own_back_off() {
    let mut q = WriteQueue::default();
    let a = Target::Queue("q".into());
    let now = Instant::now();
    q.back_off(a.clone(), now + Duration::from_secs(2), 1);
    q.mark_at(a.clone(), now);
    assert_eq!(q.len(), 1, "already waiting");
    assert_eq!(q.next(now).err(), Some(Some(Duration::from_secs(2))));
    let (t, tries) = q.next(now + Duration::from_secs(2)).unwrap();
    assert_eq!((t, tries), (a, 1));
}

#[test]
fn a_burst_of_marks_after_a_write_costs_one_write_paced() {
    let mut q = WriteQueue::default();
    let a = Target::Group(Dialect::VOLCANO, "ns/a".into());
    let now = Instant::now();
    q.mark_at(a.clone(), q.paced(&a, now));
    assert_eq!(q.next(now).ok().map(|(t, _)| t), Some(a.clone()));
    q.sent(a.clone(), now);
    // Cycles every 20 ms keep changing its counts.
    for i in 1..=20u64 {
        let at = now + Duration::from_millis(20 * i);
        q.mark_at(a.clone(), q.paced(&a, at));
        assert!(q.next(at).is_err(), "not again before PACE");
    }
    assert_eq!(q.len(), 1, "one entry");
    assert_eq!(q.next(now + PACE).ok().map(|(t, _)| t), Some(a.clone()));
    assert!(q.next(now + PACE).is_err(), "written once");
    // An urgent mark (a phase change) is not paced.
    q.sent(a.clone(), now + PACE);
    q.mark_at(a.clone(), now + PACE);
    assert!(q.next(now + PACE).is_ok());
}

#[test]
fn a_hold_is_not_hastened_by_later_marks() {
    let mut q = WriteQueue::default();
    let a = Target::Group(Dialect::VOLCANO, "ns/a".into());
    let now = Instant::now();
    q.hold_until(a.clone(), now + TEARDOWN_GRACE);
    q.mark_at(a.clone(), now);
    assert!(q.next(now).is_err());
    assert!(q.next(now + TEARDOWN_GRACE).is_ok());
}

fn group(uid: &str, rv: &str, status: serde_json::Value) -> PodGroup {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ns", "uid": uid, "resourceVersion": rv},
        "spec": {"minMember": 2},
        "status": status
    }))
    .unwrap()
}

fn member(i: usize, node: Option<&str>) -> Pod {
    let mut spec = serde_json::json!({"schedulerName": "rb",
            "containers": [{"name": "c", "image": "i"}]});
    if let Some(n) = node {
        spec["nodeName"] = n.into();
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("p{i}"), "namespace": "ns", "uid": format!("u{i}"),
                     "resourceVersion": "3",
                     "annotations": {"scheduling.k8s.io/group-name": "g"}},
        "spec": spec,
        "status": {"phase": if node.is_some() { "Running" } else { "Pending" }}
    }))
    .unwrap()
}

/// A gang of two running pods whose PodGroup already says what the scheduler wants.
fn settled() -> Index {
    let mut ix = Index::new(vec!["rb".into()]);
    ix.apply_group(&group("pg1", "5", serde_json::json!({})));
    ix.apply_pod(&member(0, Some("n1")));
    ix.apply_pod(&member(1, Some("n1")));
    ix.cache.set_job_phase("ns/g", PodGroupPhase::Running);
    let t = Target::Group(Dialect::VOLCANO, "ns/g".into());
    let (patch, _) = patch_for(&ix, &t, 0).expect("its status is missing");
    ix.apply_group_answer(&group("pg1", "6", patch["status"].clone()));
    assert!(patch_for(&ix, &t, 0).is_none(), "now it says it all");
    ix
}

#[test]
fn a_gangs_binds_count_as_seen_once_the_watch_shows_every_member_bound() {
    let mut ix = Index::new(vec!["rb".into()]);
    ix.apply_group(&group("pg1", "5", serde_json::json!({})));
    ix.apply_pod(&member(0, None));
    ix.apply_pod(&member(1, None));
    assert!(
        binds_seen(&ix, "ns/g"),
        "nothing bound, nothing to wait for"
    );
    assert!(
        binds_seen(&ix, "ns/gone"),
        "a gang not known waits for nothing"
    );
    for uid in ["u0", "u1"] {
        ix.cache
            .assume(uid, crate::cache::Assumption::Bind("n1".into()));
    }
    assert!(!binds_seen(&ix, "ns/g"), "both binds only assumed");
    ix.apply_pod(&member(0, Some("n1")));
    assert!(!binds_seen(&ix, "ns/g"), "one member still only assumed");
    ix.apply_pod(&member(1, Some("n1")));
    assert!(binds_seen(&ix, "ns/g"), "the watch showed both");
}

#[tokio::test(start_paused = true)]
async fn a_write_waiting_for_binds_to_be_seen_wakes_when_the_watch_shows_them() {
    let mut ix = Index::new(vec!["rb".into()]);
    ix.apply_group(&group("pg1", "5", serde_json::json!({})));
    ix.apply_pod(&member(0, None));
    let in_flight = std::sync::Arc::new(InFlight::default());
    ix.cache
        .assume("u0", crate::cache::Assumption::Bind("n1".into()));
    in_flight.count_unseen(&ix.cache);
    assert!(!in_flight.all_seen(), "one bind assumed, not seen");
    let index = std::sync::Arc::new(std::sync::Mutex::new(ix));
    let started = tokio::time::Instant::now();
    let waiting = tokio::spawn({
        let (in_flight, index) = (in_flight.clone(), index.clone());
        async move {
            in_flight
                .seen(BINDS_SEEN_LIMIT, || binds_seen(&lock(&index), "ns/g"))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert!(!waiting.is_finished(), "the bind is not seen yet");
    {
        // The watch shows the pod bound (what `watch` does with a pod event).
        let mut ix = lock(&index);
        ix.apply_pod(&member(0, Some("n1")));
        in_flight.count_unseen(&ix.cache);
    }
    assert!(waiting.await.unwrap(), "seen");
    assert!(in_flight.all_seen());
    assert!(
        started.elapsed() < BINDS_SEEN_LIMIT,
        "woken by the watch, not by the limit ({:?})",
        started.elapsed()
    );
    // Nothing seen within the limit: the wait ends there, saying so.
    assert!(!in_flight.seen(BINDS_SEEN_LIMIT, || false).await);
}

fn marked(w: &StatusWriter) -> Vec<(Target, Instant)> {
    let q = w.queue();
    q.schedule
        .iter()
        .map(|((at, _), t)| (t.clone(), *at))
        .collect()
}

#[test]
fn only_what_changed_since_the_last_look_is_computed_and_marked() {
    let mut ix = settled();
    let w = StatusWriter::default();
    let now = Instant::now();
    w.mark_touched_at(&mut ix, 0, now);
    assert!(
        marked(&w).is_empty(),
        "the first look finds nothing to write"
    );
    // The stored object loses its status behind the scheduler's back (no event): with
    // nothing touched, no cycle computes its patch again.
    ix.groups
        .typed_mut::<PodGroup>()
        .get_mut("ns/g")
        .unwrap()
        .status = None;
    w.mark_touched_at(&mut ix, 0, now);
    assert!(marked(&w).is_empty(), "nothing touched, nothing computed");
    // A new pending member changes the gang: its PodGroup is marked, paced.
    ix.apply_pod(&member(2, None));
    w.mark_touched_at(&mut ix, 0, now);
    let t = Target::Group(Dialect::VOLCANO, "ns/g".into());
    assert_eq!(
        marked(&w),
        [(t.clone(), now + BINDS_FIRST)],
        "never written: due now, after the binds"
    );
    // A watch event on the object touches it too.
    let mut ix = settled();
    w.mark_touched_at(&mut ix, 0, now); // the first look of this index
    let _ = w.queue().next(now + PACE);
    ix.apply_group(&group("pg1", "7", serde_json::json!({})));
    w.mark_touched_at(&mut ix, 0, now);
    assert_eq!(marked(&w).len(), 1);
}

#[test]
fn a_gang_losing_members_is_written_after_a_grace_and_not_at_all_once_deleted() {
    let mut ix = settled();
    let w = StatusWriter::default();
    let now = Instant::now();
    w.mark_touched_at(&mut ix, 0, now);
    ix.delete_pod("u1");
    w.mark_touched_at(&mut ix, 0, now);
    let t = Target::Group(Dialect::VOLCANO, "ns/g".into());
    assert_eq!(marked(&w), [(t.clone(), now + TEARDOWN_GRACE)]);
    // Another cycle's change does not hasten it.
    ix.cache.set_job_phase("ns/g", PodGroupPhase::Pending);
    w.mark_touched_at(&mut ix, 0, now);
    assert_eq!(marked(&w), [(t.clone(), now + TEARDOWN_GRACE)]);
    assert!(
        patch_for(&ix, &t, 0).is_some(),
        "a PodGroup that stays gets its status after the grace"
    );
    // Its delete event arrives within the grace: nothing is written.
    ix.delete_group(Dialect::VOLCANO, "ns/g");
    assert!(patch_for(&ix, &t, 0).is_none());
}

#[test]
fn a_pod_group_being_deleted_gets_no_status() {
    let mut ix = settled();
    let mut pg = ix.groups.typed::<PodGroup>()["ns/g"].clone();
    pg.metadata.resource_version = Some("9".into());
    pg.metadata.deletion_timestamp =
        Some(serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).unwrap());
    pg.status = None;
    ix.apply_group(&pg);
    let t = Target::Group(Dialect::VOLCANO, "ns/g".into());
    assert!(patch_for(&ix, &t, 0).is_none());
}

#[test]
fn a_phase_change_is_marked_at_once_even_just_after_a_write() {
    let mut ix = settled();
    let w = StatusWriter::default();
    let now = Instant::now();
    let t = Target::Group(Dialect::VOLCANO, "ns/g".into());
    w.mark_touched_at(&mut ix, 0, now);
    w.queue().sent(t.clone(), now);
    ix.apply_pod(&member(2, None));
    w.mark_touched_at(&mut ix, 0, now);
    assert_eq!(marked(&w), [(t.clone(), now + PACE)], "counts: paced");
    ix.cache.set_job_phase("ns/g", PodGroupPhase::Inqueue);
    w.mark_touched_at(&mut ix, 0, now);
    assert_eq!(
        marked(&w),
        [(t, now + BINDS_FIRST)],
        "a phase change: at once, after the binds"
    );
}

#[test]
fn a_pending_pods_condition_waits_a_grace_and_is_dropped_if_bound_meanwhile() {
    let mut ix = Index::new(vec!["rb".into()]);
    ix.apply_group(&group("pg1", "5", serde_json::json!({})));
    ix.apply_pod(&member(0, None));
    let w = StatusWriter::default();
    let now = Instant::now();
    w.mark_touched_at(&mut ix, 0, now);
    let _ = w.queue().next(now);
    ix.want_pod_condition("u0", "GangIncomplete", "waiting");
    w.mark_touched_at(&mut ix, 0, now);
    let t = Target::Pod("u0".into());
    assert_eq!(
        marked(&w)
            .into_iter()
            .filter(|(t, _)| matches!(t, Target::Pod(_)))
            .collect::<Vec<_>>(),
        [(t.clone(), now + POD_CONDITION_GRACE)]
    );
    ix.cache
        .assume("u0", crate::cache::Assumption::Bind("n1".into()));
    assert!(
        patch_for(&ix, &t, 0).is_none(),
        "bound meanwhile: nothing to say"
    );
}
