use super::*;

/// Each rule of Volcano's `NewResource` (pkg/scheduler/api/resource_info.go, v1.15.1)
/// and kube-scheduler's `IsScalarResourceName` it calls, one name each.
#[test]
fn resource_names_are_read_as_volcanos_scheduler_reads_them() {
    for kept in [
        "cpu",                        // case v1.ResourceCPU
        "memory",                     // case v1.ResourceMemory
        "pods",                       // case v1.ResourcePods (a task count)
        "ephemeral-storage",          // case v1.ResourceEphemeralStorage
        "nvidia.com/gpu",             // IsExtendedResourceName
        "example.com/foo_bar.baz",    // a qualified name once prefixed with requests.
        "hugepages-2Mi",              // IsHugePageResourceName
        "kubernetes.io/batch-cpu",    // IsPrefixedNativeResource
        "attachable-volumes-aws-ebs", // IsAttachableVolumeResourceName
        // Not native and not starting with "requests.": Volcano counts it.
        "limits.nvidia.com/gpu",
    ] {
        assert!(is_volcano_resource_name(kept), "{kept} must be kept");
    }
    for skipped in [
        "count/pods",              // IsCountQuota
        "count/jobs.batch",        // IsCountQuota
        "requests.cpu",            // native (no '/'), not a scalar name
        "requests.memory",         // native
        "limits.cpu",              // native
        "limits.memory",           // native
        "requests.nvidia.com/gpu", // starts with requests.: not extended
        "storage",                 // native, not in the switch
        "Example.com/gpu",         // the prefix is not a DNS subdomain
        "example.com/a/b",         // two slashes: not a qualified name
        "example.com/-gpu",        // the name must start alphanumeric
    ] {
        assert!(
            !is_volcano_resource_name(skipped),
            "{skipped} must be skipped"
        );
    }
}

/// What Volcano's job controller writes into a GPU vcjob's PodGroup (`calcPGMinResources`
/// sums the pods' quota usage, pkg/controllers/job/job_controller_actions.go) reads as
/// the plain resources only: the gang is admitted by what it really needs.
#[test]
fn the_job_controllers_quota_keys_are_not_resources() {
    let pg: PodGroup = serde_json::from_value(json!({
        "metadata": {"name": "vcjob-gpu", "namespace": "n"},
        "spec": {"minMember": 3, "minResources": {
            "count/pods": "3", "pods": "3",
            "cpu": "3", "requests.cpu": "3", "limits.cpu": "3",
            "memory": "3Gi", "requests.memory": "3Gi", "limits.memory": "3Gi",
            "requests.nvidia.com/gpu": "4",
        }}
    }))
    .unwrap();
    let job = pod_group_to_job(&pg, &HashMap::new()).unwrap();
    let want = Resource::from_quantities([("cpu", "3"), ("memory", "3Gi"), ("pods", "3")]).unwrap();
    assert_eq!(job.min_resources, Some(want));
}

#[test]
fn a_scheduled_gang_keeps_no_stale_unschedulable_message() {
    use crate::framework::GangReason;
    let pg: PodGroup = serde_json::from_value(json!({
        "metadata": {"name": "g", "namespace": "n"},
        "spec": {"minMember": 2},
        "status": {"phase": "Inqueue", "conditions": [{
            "type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
            "message": "2/2 tasks in gang unschedulable: not admitted: queue \"default\" …",
            "lastTransitionTime": "2026-11-28T00:00:00Z"}]}
    }))
    .unwrap();
    let desired = GroupStatus {
        phase: PodGroupPhase::Running,
        running: 2,
        succeeded: 0,
        failed: 0,
        condition: Some(JobCondition {
            kind: ConditionKind::Scheduled,
            reason: GangReason::Scheduled,
            message: "2/2 tasks in gang scheduled".into(),
        }),
    };
    let now = 1_795_000_000_000;
    let patch = status_patch(&pg, &desired, now).expect("a change");
    let conditions = patch["status"]["conditions"].as_array().unwrap();
    let of = |kind: &str| conditions.iter().find(|c| c["type"] == kind).unwrap();
    assert_eq!(of("Scheduled")["status"], "True");
    let unschedulable = of("Unschedulable");
    assert_eq!(unschedulable["status"], "False");
    assert_eq!(unschedulable["message"], "", "no message of when it held");
    assert_eq!(unschedulable["reason"], "Scheduled");
    // Written once: the same status again is no change.
    let mut written = pg.clone();
    written.status = Some(serde_json::from_value(patch["status"].clone()).unwrap());
    assert_eq!(status_patch(&written, &desired, now + 1000), None);
}

#[test]
fn sub_group_policies_convert_with_volcanos_defaults_and_name_bad_fields() {
    let pg = |policy: serde_json::Value| -> PodGroup {
        serde_json::from_value(json!({
            "metadata": {"name": "lws", "namespace": "n"},
            "spec": {"minMember": 4, "subGroupPolicy": [policy]}
        }))
        .unwrap()
    };
    let job = pod_group_to_job(
        &pg(
            json!({"name": "replicas", "subGroupSize": 4, "minSubGroups": 2,
                       "labelSelector": {"matchLabels": {"role": "worker"}},
                       "matchLabelKeys": ["leaderworkerset.sigs.k8s.io/group-index"]}),
        ),
        &HashMap::new(),
    )
    .unwrap();
    let p = &job.subgroups[0];
    assert_eq!((&*p.name, p.size, p.min_groups), ("replicas", 4, 2));
    assert_eq!(
        p.match_label_keys,
        ["leaderworkerset.sigs.k8s.io/group-index"]
    );
    assert!(p.selector.is_some());
    // Defaults: size 1, minSubGroups 0, named by position.
    let job = pod_group_to_job(&pg(json!({})), &HashMap::new()).unwrap();
    let p = &job.subgroups[0];
    assert_eq!((&*p.name, p.size, p.min_groups), ("0", 1, 0));
    let bad = pod_group_to_job(&pg(json!({"subGroupSize": 0})), &HashMap::new()).unwrap_err();
    assert_eq!(bad.field, "spec.subGroupPolicy[0].subGroupSize");
    let bad = pod_group_to_job(
        &pg(json!({"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}})),
        &HashMap::new(),
    )
    .unwrap_err();
    assert_eq!(bad.field, "spec.subGroupPolicy[0].labelSelector");
    // A subgroup's topology is its own (each subgroup in a domain), not the gang's.
    let job = pod_group_to_job(
        &pg(json!({"networkTopology": {"mode": "hard", "highestTierAllowed": 1}})),
        &HashMap::new(),
    )
    .unwrap();
    assert!(job.topology.is_none());
    let t = job.subgroups[0].topology.as_ref().unwrap();
    assert_eq!(t.mode, crate::model::TopologyMode::Hard);
    assert_eq!(t.bound, crate::model::TopologyBound::Tier(1));
    assert_eq!(t.source, "spec.subGroupPolicy[0].networkTopology");
}

#[test]
fn required_node_groups_close_the_queue_and_preferred_ones_are_said_ignored() {
    let q = |name: &str, affinity: serde_json::Value| -> Queue {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"weight": 1, "priority": 3, "affinity": affinity}
        }))
        .unwrap()
    };
    let required = q(
        "pinned",
        json!({"nodeGroupAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ["g1"]}}),
    );
    let preferred = q(
        "leaning",
        json!({"nodeGroupAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": ["g2"]}}),
    );
    let info = queue_to_info(&required).unwrap();
    assert_eq!(info.priority, 3);
    assert!(info.refused.as_deref().is_some_and(|r| r.starts_with(
        "spec.affinity.nodeGroupAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    )));
    assert_eq!(queue_to_info(&preferred).unwrap().refused, None);
    let problems = queue_problems([&required, &preferred]);
    assert_eq!(Some(&problems["pinned"]), info.refused.as_ref());
    assert!(problems["leaning"].contains("placed without that preference"));
    // The engine keeps new work out of it, naming why.
    let mut cache = crate::testkit::cache_with_default_queue();
    cache.apply_queue(info);
    crate::testkit::add_nodes(&mut cache, "n", 1, &[("cpu", "4")]);
    let job = crate::testkit::Gang::new("j", 1)
        .queue("pinned")
        .phase(PodGroupPhase::Inqueue)
        .tasks("", 1, &[("cpu", "1")])
        .apply(&mut cache);
    let result = crate::testkit::run_cycle(&cache, None);
    assert!(result.binds.is_empty());
    assert!(crate::testkit::condition_message(&result, &job)
        .is_some_and(|m| m.contains("queue \"pinned\" takes no work: spec.affinity")));
}

#[test]
fn a_queues_default_runtime_estimate_is_read_and_a_bad_one_named() {
    let q = |v: &str| -> Queue {
        serde_json::from_value(json!({
            "metadata": {"name": "q", "annotations": {DEFAULT_RUNTIME_ESTIMATE: v}},
            "spec": {}
        }))
        .unwrap()
    };
    assert_eq!(
        queue_to_info(&q("2h")).unwrap().default_runtime_estimate,
        Some(7_200_000)
    );
    for bad in ["soon", "0s", "400days"] {
        let e = queue_to_info(&q(bad)).unwrap_err().to_string();
        assert!(
            e.contains("metadata.annotations[rust-batch.io/default-runtime-estimate]")
                && e.contains(bad),
            "{e}"
        );
    }
}

#[test]
fn a_queues_recorded_usage_is_read_back_and_a_bad_one_ignored() {
    let q = |v: &str| -> Queue {
        serde_json::from_value(json!({
            "metadata": {"name": "q", "annotations": {usage_record::USAGE: v}},
            "spec": {}
        }))
        .unwrap()
    };
    let info = queue_to_info(&q(
        r#"{"at":"1970-01-01T00:00:01Z","amounts":{"nvidia.com/gpu":8.5}}"#,
    ))
    .unwrap();
    let usage = info.recorded_usage.unwrap();
    assert_eq!(usage.at, 1000);
    assert_eq!(usage.amounts["nvidia.com/gpu"], 8.5);
    // A record that cannot be read costs the history, not the queue.
    let info = queue_to_info(&q("garbage")).unwrap();
    assert_eq!(info.recorded_usage, None);
}

/// The same rules hold for a Queue's lists: a quota-style key never limits a queue.
#[test]
fn queue_lists_skip_quota_keys_too() {
    let q: Queue = serde_json::from_value(json!({
        "metadata": {"name": "q"},
        "spec": {"capability": {"cpu": "8", "requests.cpu": "1", "count/pods": "1"},
                 "deserved": {"nvidia.com/gpu": "2", "limits.memory": "1Gi"}}
    }))
    .unwrap();
    let info = queue_to_info(&q).unwrap();
    assert_eq!(
        info.capability,
        Some(Resource::from_quantities([("cpu", "8")]).unwrap())
    );
    assert_eq!(
        info.deserved,
        Some(Resource::from_quantities([("nvidia.com/gpu", "2")]).unwrap())
    );
}

#[test]
fn the_queue_comes_from_spec_then_the_queue_name_annotation_then_default() {
    let pg = |value: serde_json::Value| -> PodGroup { serde_json::from_value(value).unwrap() };
    let job = |p: &PodGroup| pod_group_to_job(p, &HashMap::new()).unwrap().queue;
    let annotated = json!({"name": "g", "namespace": "n",
            "annotations": {"scheduling.volcano.sh/queue-name": "team-a"}});
    assert_eq!(
        job(&pg(
            json!({"metadata": annotated, "spec": {"queue": "team-b"}})
        )),
        "team-b"
    );
    assert_eq!(
        job(&pg(json!({"metadata": annotated, "spec": {}}))),
        "team-a"
    );
    assert_eq!(
        job(&pg(json!({"metadata": {"name": "g", "namespace": "n"}}))),
        "default"
    );
}
