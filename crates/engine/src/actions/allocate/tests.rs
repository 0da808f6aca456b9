use crate::model::{PodGroupPhase, QueueInfo, Resource, TaskStatus};
use crate::testkit::*;

const GPU_NODE: &[(&str, &str)] = &[("cpu", "8"), ("memory", "32Gi"), ("nvidia.com/gpu", "2")];

/// Two elastic jobs (minMember 1, eight 1-cpu pods each) in queues of weights 1 and 3 on
/// 8 cpu: past its minimum each job takes one pod a turn, and the queue with the lower
/// share goes next, so one cycle splits the cluster by weight (2 and 6) instead of
/// whichever queue came first taking all it could.
#[test]
fn elastic_jobs_take_pods_by_turns_so_queues_share_by_weight() {
    let mut cache = cache_with_default_queue();
    cache.apply_queue(QueueInfo::new("light", 1));
    cache.apply_queue(QueueInfo::new("heavy", 3));
    add_nodes(&mut cache, "n", 8, &[("cpu", "1")]);
    let light = Gang::new("light", 1)
        .queue("light")
        .phase(PodGroupPhase::Inqueue)
        .tasks("", 8, &[("cpu", "1")])
        .apply(&mut cache);
    let heavy = Gang::new("heavy", 1)
        .queue("heavy")
        .phase(PodGroupPhase::Inqueue)
        .tasks("", 8, &[("cpu", "1")])
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    let binds = binds_by_job(&result);
    let n = |job: &str| binds.get(job).map_or(0, Vec::len);
    assert_eq!((n(&light), n(&heavy)), (2, 6), "{binds:?}");
}

fn tf_smoke(cache: &mut crate::cache::Cache) -> String {
    Gang::new("tf-smoke-gpu", 5)
        .tasks("ps", 1, &[("cpu", "1")])
        .tasks("worker", 4, &[("nvidia.com/gpu", "2")])
        .apply(cache)
}

#[test]
fn a_gang_that_cannot_fully_fit_binds_nothing_and_says_why() {
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "gpu", 2, GPU_NODE);
    let job = tf_smoke(&mut cache);
    let result = run_cycle(&cache, None);
    assert!(
        result.binds.is_empty(),
        "not even the PS: {:?}",
        result.binds
    );
    let update = result.job_updates.iter().find(|u| *u.job == *job).unwrap();
    let cond = update.condition.as_ref().unwrap();
    assert_eq!(cond.kind, crate::framework::ConditionKind::Unschedulable);
    assert_eq!(
        cond.reason,
        crate::framework::GangReason::NotEnoughResources
    );
    assert_eq!(
        cond.message,
        "2/5 tasks in gang unschedulable: 2 tasks: Insufficient nvidia.com/gpu (need 2, best node \
             has 0 free); gang is short of 4 nvidia.com/gpu"
    );
    assert_eq!(
        update.phase,
        Some(PodGroupPhase::Inqueue),
        "admitted, not running"
    );
    // Every pending pod gets a reason; the two that found no node name the resource.
    assert_eq!(update.task_reasons.len(), 5);
    let short: Vec<_> = update
        .task_reasons
        .iter()
        .filter(|(_, why)| why.contains("Insufficient nvidia.com/gpu"))
        .collect();
    assert_eq!(short.len(), 2, "{:?}", update.task_reasons);

    // The session left the cluster as it found it: the next cycle sees the same.
    let again = run_cycle(&cache, None);
    assert!(again.binds.is_empty());
}

#[test]
fn a_gang_that_fits_binds_whole_with_every_worker_on_two_free_gpus() {
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "gpu", 2, GPU_NODE);
    let job = tf_smoke(&mut cache);
    let first = run_cycle(&cache, None);
    assert!(first.binds.is_empty());
    apply_result(&mut cache, &first);
    add_nodes(&mut cache, "more", 2, GPU_NODE);
    let result = run_cycle(&cache, None);
    let binds = binds_by_job(&result);
    assert_eq!(binds[&job].len(), 5, "{:?}", result.binds);
    let mut gpus_per_node = std::collections::BTreeMap::<String, i32>::new();
    for b in result.binds.iter().filter(|b| b.task.contains("worker")) {
        *gpus_per_node.entry(b.node.to_string()).or_default() += 2;
    }
    assert_eq!(
        gpus_per_node.len(),
        4,
        "one worker per node: {gpus_per_node:?}"
    );
    assert!(gpus_per_node.values().all(|g| *g == 2));
    let update = result.job_updates.iter().find(|u| *u.job == *job).unwrap();
    assert_eq!(update.phase, Some(PodGroupPhase::Running));
    assert_eq!(
        update.condition.as_ref().unwrap().kind,
        crate::framework::ConditionKind::Scheduled
    );
}

#[test]
fn two_gangs_one_fits_the_second_binds_whole_when_the_first_finishes() {
    // S2 (kube-batch walkthrough).
    let mut cache = cache_with_default_queue();
    add_nodes(
        &mut cache,
        "n",
        4,
        &[("cpu", "4"), ("memory", "16Gi"), ("nvidia.com/gpu", "1")],
    );
    let job1 = Gang::new("job1", 4)
        .created(1)
        .tasks("ps", 1, &[("cpu", "1")])
        .tasks("worker", 3, &[("nvidia.com/gpu", "1")])
        .apply(&mut cache);
    let job2 = Gang::new("job2", 3)
        .created(2)
        .tasks("ps", 1, &[("cpu", "1")])
        .tasks("worker", 2, &[("nvidia.com/gpu", "1")])
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    let binds = binds_by_job(&result);
    assert_eq!(binds.get(&job1).map(Vec::len), Some(4));
    assert_eq!(binds.get(&job2), None, "no PS, no worker of job2");
    assert_eq!(
        condition_message(&result, &job2).as_deref(),
        Some(
            "1/3 tasks in gang unschedulable: 1 task: Insufficient nvidia.com/gpu (need 1, best \
                 node has 0 free); gang is short of 1 nvidia.com/gpu"
        )
    );
    apply_result(&mut cache, &result);
    for b in &result.binds {
        cache.set_pod_status(&b.task, TaskStatus::Succeeded, Some(b.node.clone()));
    }
    let result = run_cycle(&cache, None);
    assert_eq!(binds_by_job(&result).get(&job2).map(Vec::len), Some(3));
}

#[test]
fn queues_go_in_queue_order_and_jobs_in_job_order() {
    // Room for two 1-cpu gangs. Queue "b" already uses its share, "a" uses nothing: a's
    // gang goes first. Within "a", the higher-priority gang goes first.
    let mut cache = cache_with_default_queue();
    cache.apply_queue(QueueInfo::new("a", 1));
    cache.apply_queue(QueueInfo::new("b", 1));
    add_nodes(&mut cache, "n", 1, &[("cpu", "3"), ("memory", "8Gi")]);
    Gang::new("b-running", 1)
        .queue("b")
        .tasks("", 1, &[("cpu", "1")])
        .running_on(&["n-00000"])
        .phase(PodGroupPhase::Running)
        .apply(&mut cache);
    let b_new = Gang::new("b-new", 1)
        .queue("b")
        .created(1)
        .tasks("", 1, &[("cpu", "1")])
        .apply(&mut cache);
    let a_low = Gang::new("a-low", 1)
        .queue("a")
        .created(1)
        .tasks("", 1, &[("cpu", "1")])
        .apply(&mut cache);
    let a_high = Gang::new("a-high", 1)
        .queue("a")
        .created(2)
        .priority(10)
        .tasks("", 1, &[("cpu", "1")])
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    let order: Vec<&str> = result.binds.iter().map(|b| &*b.job).collect();
    assert_eq!(
        order,
        [a_high.as_str(), a_low.as_str()],
        "b-new waits: {b_new}"
    );
}

#[test]
fn pipelining_onto_releasing_resources_binds_nothing() {
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "n", 2, &[("cpu", "4"), ("memory", "8Gi")]);
    // Both nodes are taken by pods being evicted: their resources come free soon.
    Gang::new("old", 2)
        .phase(PodGroupPhase::Running)
        .tasks("", 1, &[("cpu", "4")])
        .last_on("n-00000", TaskStatus::Releasing)
        .tasks("", 1, &[("cpu", "4")])
        .last_on("n-00001", TaskStatus::Releasing)
        .apply(&mut cache);
    let job = Gang::new("new", 2)
        .tasks("", 2, &[("cpu", "3")])
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    assert!(result.binds.is_empty(), "{:?}", result.binds);
    let update = result.job_updates.iter().find(|u| *u.job == *job).unwrap();
    assert_ne!(
        update.condition.as_ref().map(|c| c.kind),
        Some(crate::framework::ConditionKind::Unschedulable),
        "a pipelined gang is waiting for resources, not unschedulable: {update:?}"
    );
    // Once the evicted pods are gone the gang binds whole.
    cache.delete_pod("default/old-0");
    cache.delete_pod("default/old-1");
    apply_result(&mut cache, &result);
    let result = run_cycle(&cache, None);
    assert_eq!(binds_by_job(&result).get(&job).map(Vec::len), Some(2));
}

#[test]
fn a_pipelined_gang_holds_its_place_within_the_session() {
    // "first" is pipelined onto the releasing node; "second" (same size, later) must not
    // be placed against the same releasing resources.
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "n", 1, &[("cpu", "4"), ("memory", "8Gi")]);
    Gang::new("old", 1)
        .phase(PodGroupPhase::Running)
        .tasks("", 1, &[("cpu", "4")])
        .last_on("n-00000", TaskStatus::Releasing)
        .apply(&mut cache);
    let first = Gang::new("first", 1)
        .created(1)
        .tasks("", 1, &[("cpu", "4")]);
    let second = Gang::new("second", 1)
        .created(2)
        .tasks("", 1, &[("cpu", "4")]);
    first.apply(&mut cache);
    let second = second.apply(&mut cache);
    // Without proportion, which would (rightly) call the queue's share used up first.
    let conf = crate::conf_yaml!("enqueue, allocate"; ["gang", "predicates"]);
    let mut ssn = open_session(&cache, Some(conf));
    for name in ["enqueue", "allocate"] {
        let args = ssn.conf().action_arguments(name);
        crate::REGISTRY.action(name).unwrap()(&args)
            .unwrap()
            .execute(&mut ssn);
    }
    let state = ssn.state();
    let t1 = task_ref(state, "default/first-0").unwrap();
    let t2 = task_ref(state, "default/second-0").unwrap();
    assert_eq!(state.task(t1).status, TaskStatus::Pipelined);
    assert_eq!(state.task(t2).status, TaskStatus::Pending);
    let result = ssn.close();
    assert!(result.binds.is_empty());
    assert_eq!(
        condition_message(&result, &second).as_deref(),
        Some(
            "1/1 tasks in gang unschedulable: 1 task: Insufficient cpu (need 4, best node has 0 \
                 free); gang is short of 4 cpu"
        )
    );
}

#[test]
fn a_job_in_a_missing_queue_is_reported_not_scheduled() {
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "n", 1, &[("cpu", "4")]);
    let job = Gang::new("lost", 1)
        .queue("nowhere")
        .tasks("", 1, &[("cpu", "1")])
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    assert!(result.binds.is_empty());
    assert_eq!(
        condition_message(&result, &job).as_deref(),
        Some("queue \"nowhere\" does not exist")
    );
}

#[test]
fn gangs_already_running_grow_task_by_task() {
    // minMember 2 reached by running pods: each extra pod may bind on its own.
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "n", 2, &[("cpu", "2")]);
    let job = Gang::new("elastic", 2)
        .phase(PodGroupPhase::Running)
        .tasks("", 4, &[("cpu", "1")])
        .running_on(&["n-00000", "n-00000"])
        .tasks("", 2, &[("cpu", "1")])
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    assert_eq!(binds_by_job(&result).get(&job).map(Vec::len), Some(2));
    assert!(result.binds.iter().all(|b| &*b.node == "n-00001"));
}

#[test]
fn identical_pods_of_a_gang_see_where_the_previous_ones_went() {
    // Three nodes, one gang of three identical pods, spreading scores: the pods share
    // one scored sample of nodes, and each placement must lower that node's score for the
    // next pod (or drop it once full), not leave a stale best.
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "n", 3, &[("cpu", "2"), ("memory", "4Gi")]);
    let job = Gang::new("spread", 3)
        .tasks("", 3, &[("cpu", "1"), ("memory", "1Gi")])
        .apply(&mut cache);
    let conf = crate::conf_yaml!("enqueue, allocate"; ["gang", "predicates", "nodeorder"]);
    let result = run_cycle(&cache, Some(conf));
    let mut nodes = binds_by_job(&result)[&job].clone();
    nodes.sort();
    assert_eq!(nodes, ["n-00000", "n-00001", "n-00002"]);
    // Packing: two pods fill a node, the third must go elsewhere.
    let packing = crate::conf_yaml!("enqueue, allocate"; ["gang", "predicates", "binpack"]);
    let result = run_cycle(&cache, Some(packing));
    let mut per_node = std::collections::BTreeMap::<String, usize>::new();
    for n in &binds_by_job(&result)[&job] {
        *per_node.entry(n.clone()).or_default() += 1;
    }
    let mut counts: Vec<usize> = per_node.into_values().collect();
    counts.sort();
    assert_eq!(counts, [1, 2]);
}

/// The TFJob: 1 PS (2 cpu) and 1 worker (4 cpu, 2 GPUs) on one 4-cpu node and
/// one 5-cpu/2-GPU node. Least-requested scoring puts the PS on the GPU node first, and
/// task-by-task placement then strands the worker.
fn stranded_tfjob(cache: &mut crate::cache::Cache) -> String {
    cache.apply_node(node("cpu-node", &[("cpu", "4"), ("memory", "16Gi")]));
    cache.apply_node(node(
        "gpu-node",
        &[("cpu", "5"), ("memory", "16Gi"), ("nvidia.com/gpu", "2")],
    ));
    Gang::new("tfjob", 2)
        .tasks("ps", 1, &[("cpu", "2")])
        .tasks("worker", 1, &[("cpu", "4"), ("nvidia.com/gpu", "2")])
        .apply(cache)
}

#[test]
fn a_gang_that_fits_is_placed_whatever_order_greedy_placement_would_take() {
    let mut cache = cache_with_default_queue();
    let job = stranded_tfjob(&mut cache);
    let result = run_cycle(&cache, None);
    let mut placed: Vec<(String, String)> = result
        .binds
        .iter()
        .map(|b| (b.task.to_string(), b.node.to_string()))
        .collect();
    placed.sort();
    assert_eq!(
        placed,
        [
            ("default/tfjob-ps-0".to_string(), "cpu-node".to_string()),
            ("default/tfjob-worker-0".to_string(), "gpu-node".to_string())
        ],
        "the PS on the cpu node, the worker on the GPU node: {job}"
    );
}

const TIGHT_BUDGET: &str = "actions: \"enqueue, allocate\"
configurations:
- name: allocate
  arguments:
    placementSearchTries: 1
tiers:
- plugins:
  - name: gang
  - name: predicates
  - name: nodeorder
";

#[test]
fn a_search_out_of_budget_says_so_and_places_nothing() {
    let mut cache = cache_with_default_queue();
    let job = stranded_tfjob(&mut cache);
    let result = run_cycle(&cache, Some(TIGHT_BUDGET));
    assert!(result.binds.is_empty(), "{:?}", result.binds);
    let msg = condition_message(&result, &job).unwrap();
    assert!(
        msg.ends_with("placement search gave up after 2 tries"),
        "{msg}"
    );
}

#[test]
fn a_gang_that_fits_in_total_but_on_no_nodes_says_the_search_found_none() {
    // 9 cpu free in all, 8 asked, but no node has the 4 cpu one pod needs... except one,
    // so the first pod places and the second cannot.
    let mut cache = cache_with_default_queue();
    cache.apply_node(node("big", &[("cpu", "5")]));
    cache.apply_node(node("small-a", &[("cpu", "2")]));
    cache.apply_node(node("small-b", &[("cpu", "2")]));
    let job = Gang::new("pair", 2)
        .tasks("", 2, &[("cpu", "4")])
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    assert!(result.binds.is_empty());
    let msg = condition_message(&result, &job).unwrap();
    assert!(
            msg.starts_with("1/2 tasks in gang unschedulable: 1 task: Insufficient cpu (need 4, best node has 2 free)"),
            "{msg}"
        );
    assert!(
        msg.ends_with("no combination of nodes holds the whole gang (searched 3 placements)"),
        "{msg}"
    );
}

#[test]
fn a_gang_short_of_resources_in_total_names_the_cluster_shortfall_without_searching() {
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "n", 2, &[("cpu", "4")]);
    let job = Gang::new("big", 3)
        .tasks("", 3, &[("cpu", "3")])
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    assert_eq!(
        condition_message(&result, &job).as_deref(),
        Some(
            "1/3 tasks in gang unschedulable: 1 task: Insufficient cpu (need 3, best node has 1 \
                 free); gang is short of 1 cpu"
        )
    );
}

#[test]
fn arguments_are_validated() {
    use crate::conf::Arguments;
    let args = |k: &str, v: u64| Arguments::new("configurations[0].arguments").with(k, v);
    assert!(super::build(&args("percentageOfNodesToFind", 101)).is_err());
    assert!(super::build(&args("percentageOfNodesToFind", 100)).is_ok());
    assert!(
        super::build(&args("minNodesToFind", 0)).is_ok(),
        "clamped to 1"
    );
    let a = super::Allocate {
        min_nodes_to_find: 100,
        percentage_of_nodes_to_find: 5,
        search_tries: 1,
        search_cycle_tries: 1,
    };
    assert_eq!(a.nodes_to_find(10), 100);
    assert_eq!(a.nodes_to_find(5000), 250);
    let _ = Resource::new();
}
