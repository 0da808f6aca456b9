use super::*;
use crate::model::{Placement, Resource};

fn node(name: &str, cpu: &str) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        allocatable: Resource::from_quantities([("cpu", cpu), ("pods", "110")]).unwrap(),
        ready: true,
        ..Default::default()
    }
}

fn pod(
    uid: &str,
    job: Option<&str>,
    cpu: &str,
    node: Option<&str>,
    status: TaskStatus,
) -> PodUpdate {
    let mut task = TaskInfo::new(
        uid,
        "ns",
        uid,
        "",
        Resource::from_quantities([("cpu", cpu)]).unwrap(),
        0,
        Arc::new(Placement::default()),
        0,
    );
    task.status = status;
    task.node = node.map(Arc::from);
    PodUpdate {
        task,
        job: job.map(String::from),
    }
}

fn job(uid: &str) -> JobSpec {
    JobSpec {
        uid: uid.into(),
        namespace: "ns".into(),
        name: uid.into(),
        queue: "default".into(),
        min_member: 1,
        ..Default::default()
    }
}

#[test]
fn a_bind_in_flight_holds_its_room_until_the_watch_shows_it_or_it_fails() {
    let mut c = Cache::new();
    c.apply_node(node("n1", "4"));
    c.apply_job(job("ns/j"));
    let pending = pod("p", Some("ns/j"), "3", None, TaskStatus::Pending);
    c.apply_pod(pending.clone());
    c.assume("p", Assumption::Bind(Arc::from("n1")));
    let idle = |c: &Cache| {
        let s = c.state();
        s.node(s.node_by_name("n1").unwrap()).idle.milli_cpu
    };
    assert_eq!(c.pod("p").unwrap().task.status, TaskStatus::Binding);
    assert_eq!(idle(&c), 1000, "the room is taken while the bind is out");
    // A relist or late event still shows the pod pending: the assumption stands.
    c.apply_pod(pending.clone());
    assert_eq!(idle(&c), 1000);
    // The call failed: the pod is what the watch says again.
    c.drop_assumption("p");
    assert_eq!(c.pod("p").unwrap().task.status, TaskStatus::Pending);
    assert_eq!(idle(&c), 4000);
    // Sent again and seen bound: the assumption is over, the pod as reported.
    c.assume("p", Assumption::Bind(Arc::from("n1")));
    c.apply_pod(pod("p", Some("ns/j"), "3", Some("n1"), TaskStatus::Running));
    assert_eq!(c.assumption("p"), None);
    assert_eq!(c.pod("p").unwrap().task.status, TaskStatus::Running);
    assert_eq!(idle(&c), 1000);
}

#[test]
fn the_count_of_binds_assumed_follows_every_way_an_assumption_ends() {
    let mut c = Cache::new();
    c.apply_node(node("n1", "4"));
    c.apply_job(job("ns/j"));
    for uid in ["a", "b", "c", "d"] {
        c.apply_pod(pod(uid, Some("ns/j"), "1", None, TaskStatus::Pending));
    }
    c.apply_pod(pod("v", Some("ns/j"), "1", Some("n1"), TaskStatus::Running));
    for uid in ["a", "b", "c", "d"] {
        c.assume(uid, Assumption::Bind(Arc::from("n1")));
    }
    c.assume("v", Assumption::Evict);
    assert_eq!(c.binds_assumed(), 4, "evictions are not binds");
    c.assume("a", Assumption::Bind(Arc::from("n1")));
    assert_eq!(c.binds_assumed(), 4, "assumed again, counted once");
    c.drop_assumption("a");
    assert_eq!(c.binds_assumed(), 3, "refused");
    c.apply_pod(pod("b", Some("ns/j"), "1", Some("n1"), TaskStatus::Running));
    assert_eq!(c.binds_assumed(), 2, "seen bound");
    c.delete_pod("c");
    assert_eq!(c.binds_assumed(), 1, "deleted");
    c.drop_assumption("v");
    c.drop_assumption("zz");
    assert_eq!(c.binds_assumed(), 1, "an eviction or nothing dropped");
}

#[test]
fn an_eviction_in_flight_keeps_a_victim_releasing_not_running() {
    let mut c = Cache::new();
    c.apply_node(node("n1", "4"));
    c.apply_job(job("ns/j"));
    let running = pod("v", Some("ns/j"), "1", Some("n1"), TaskStatus::Running);
    c.apply_pod(running.clone());
    c.assume("v", Assumption::Evict);
    c.apply_pod(running);
    assert_eq!(c.pod("v").unwrap().task.status, TaskStatus::Releasing);
    c.drop_assumption("v");
    assert_eq!(
        c.pod("v").unwrap().task.status,
        TaskStatus::Running,
        "refused"
    );
    c.assume("v", Assumption::Evict);
    c.delete_pod("v");
    assert_eq!(c.assumption("v"), None, "gone with the pod");
}

#[test]
fn pods_arriving_before_their_node_and_gang_are_adopted() {
    let mut c = Cache::new();
    c.apply_pod(pod(
        "p1",
        Some("ns/j"),
        "1",
        Some("n1"),
        TaskStatus::Running,
    ));
    c.apply_pod(pod("foreign", None, "2", Some("n1"), TaskStatus::Running));
    c.apply_node(node("n1", "8"));
    c.apply_job(job("ns/j"));
    let s = c.snapshot();
    let n = s.node(s.node_by_name("n1").unwrap());
    assert_eq!(n.used.milli_cpu, 3000, "foreign pods count on their node");
    assert_eq!(n.idle.milli_cpu, 5000);
    let j = s.job(s.job_by_uid("ns/j").unwrap());
    assert_eq!(j.tasks().len(), 1);
    assert_eq!(j.count(TaskStatus::Running), 1);
}

#[test]
fn pods_changing_in_place_leave_the_state_as_if_reported_afresh() {
    // Every kind of move a pod makes, one after another: those that keep it in its gang
    // and on its node replace it there, the others move it between nodes, gangs, the
    // pods waiting for their node and the orphans. Whichever way, the state must equal
    // a cache told only the last reports.
    // (pod, gang, cpu, node, status)
    type Report<'a> = (
        &'a str,
        Option<&'a str>,
        &'a str,
        Option<&'a str>,
        TaskStatus,
    );
    let steps: [Report; 15] = [
        ("a", Some("ns/j"), "1", None, TaskStatus::Pending),
        ("b", Some("ns/j"), "1", None, TaskStatus::Pending),
        ("c", None, "1", Some("n1"), TaskStatus::Running),
        ("a", Some("ns/j"), "1", Some("n1"), TaskStatus::Bound),
        ("a", Some("ns/j"), "1", Some("n1"), TaskStatus::Running),
        ("b", Some("ns/j"), "2", None, TaskStatus::Pending),
        ("b", Some("ns/j"), "2", Some("n2"), TaskStatus::Running),
        ("c", None, "1", Some("n1"), TaskStatus::Releasing),
        ("a", Some("ns/j"), "1", Some("n2"), TaskStatus::Running),
        ("b", Some("ns/j"), "2", Some("n2"), TaskStatus::Succeeded),
        ("a", Some("ns/k"), "1", Some("n2"), TaskStatus::Running),
        ("c", None, "1", Some("nx"), TaskStatus::Running),
        ("c", None, "1", Some("n1"), TaskStatus::Running),
        ("d", Some("ns/z"), "1", None, TaskStatus::Pending),
        ("d", Some("ns/z"), "1", Some("n1"), TaskStatus::Running),
    ];
    let fresh_cache = |c: &mut Cache| {
        c.apply_node(node("n1", "8"));
        c.apply_node(node("n2", "8"));
        c.apply_job(job("ns/j"));
        c.apply_job(job("ns/k"));
    };
    let mut c = Cache::new();
    fresh_cache(&mut c);
    let mut last = BTreeMap::new();
    for (i, (uid, job, cpu, on, status)) in steps.into_iter().enumerate() {
        let kept = c.snapshot(); // a session holding the objects: changes copy them
        c.apply_pod(pod(uid, job, cpu, on, status));
        last.insert(uid, (job, cpu, on, status));
        c.state().check_tally();
        let mut afresh = Cache::new();
        fresh_cache(&mut afresh);
        for (uid, (job, cpu, on, status)) in &last {
            afresh.apply_pod(pod(uid, *job, cpu, *on, *status));
        }
        for name in ["n1", "n2"] {
            let (a, b) = (c.state(), afresh.state());
            let (x, y) = (
                a.node(a.node_by_name(name).unwrap()),
                b.node(b.node_by_name(name).unwrap()),
            );
            assert_eq!(x, y, "step {i}: node {name}");
        }
        for job in ["ns/j", "ns/k"] {
            let members = |c: &Cache| {
                let s = c.state();
                let mut t: Vec<_> = s.job(s.job_by_uid(job).unwrap()).tasks().to_vec();
                t.sort_by(|x, y| x.uid.cmp(&y.uid));
                t
            };
            assert_eq!(members(&c), members(&afresh), "step {i}: gang {job}");
        }
        assert_eq!(c.state().tally(), afresh.state().tally(), "step {i}");
        drop(kept);
    }
    // Binds sent and confirmed are replaced in place: a pod keeps its place in its gang
    // (each change removed and appended it before).
    let mut c = Cache::new();
    fresh_cache(&mut c);
    for uid in ["a", "b"] {
        c.apply_pod(pod(uid, Some("ns/j"), "1", None, TaskStatus::Pending));
        c.assume(uid, Assumption::Bind(Arc::from("n1")));
    }
    c.apply_pod(pod("a", Some("ns/j"), "1", Some("n1"), TaskStatus::Bound));
    let s = c.state();
    let order: Vec<&str> = s
        .job(s.job_by_uid("ns/j").unwrap())
        .tasks()
        .iter()
        .map(|t| &*t.uid)
        .collect();
    assert_eq!(order, ["a", "b"]);
}

/// One thing a driver reports: (kind, index, gang, cpu, node, status) as small indexes.
#[derive(Clone, Debug)]
enum Report {
    Pod(usize, Option<usize>, u8, Option<usize>, TaskStatus),
    DeletePod(usize),
    Node(usize),
    DeleteNode(usize),
    Job(usize),
    DeleteJob(usize),
}

fn any_report() -> impl proptest::strategy::Strategy<Value = Report> {
    use proptest::prelude::*;
    let status = prop_oneof![
        Just(TaskStatus::Pending),
        Just(TaskStatus::Bound),
        Just(TaskStatus::Running),
        Just(TaskStatus::Releasing),
        Just(TaskStatus::Succeeded),
        Just(TaskStatus::Failed),
    ];
    prop_oneof![
        6 => (0..6usize, proptest::option::of(0..3usize), 1..4u8,
              proptest::option::of(0..3usize), status)
            .prop_map(|(p, j, cpu, n, st)| Report::Pod(p, j, cpu, n, st)),
        1 => (0..6usize).prop_map(Report::DeletePod),
        1 => (0..3usize).prop_map(Report::Node),
        1 => (0..3usize).prop_map(Report::DeleteNode),
        1 => (0..3usize).prop_map(Report::Job),
        1 => (0..3usize).prop_map(Report::DeleteJob),
    ]
}

/// The state a cache holds, by names and uids (slot ids differ between caches): every
/// node, every gang's members (as a set), the pods waiting for their node or gang. The
/// tally is derived from these (`check_tally` asserts it after every report).
fn observed(c: &Cache) -> String {
    let s = c.state();
    let mut nodes: Vec<String> = s.nodes().map(|(_, n)| format!("{n:?}")).collect();
    nodes.sort();
    let mut jobs: Vec<String> = s
        .jobs()
        .map(|(_, j)| {
            let mut t: Vec<String> = j.tasks().iter().map(|t| format!("{t:?}")).collect();
            t.sort();
            format!("{}: {t:?}", j.uid)
        })
        .collect();
    jobs.sort();
    let non_empty = |m: &HashMap<Arc<str>, BTreeSet<Arc<str>>>| {
        m.iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<BTreeMap<_, _>>()
    };
    format!(
        "{nodes:#?}\n{jobs:#?}\n{:?}\n{:?}",
        non_empty(&c.orphans),
        non_empty(&c.waiting_for_node),
    )
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
    /// Whatever order pods, nodes and gangs come, change and go in, the cache ends as a
    /// cache told only what is left: nodes, then gangs, then each pod's last report.
    #[test]
    fn any_history_leaves_the_state_a_fresh_cache_builds(
        reports in proptest::collection::vec(any_report(), 1..40)
    ) {
        let names = ["n0", "n1", "n2"];
        let gangs = ["ns/j0", "ns/j1", "ns/j2"];
        let mut c = Cache::new();
        let (mut pods, mut nodes, mut jobs) = (BTreeMap::new(), BTreeSet::new(), BTreeSet::new());
        for r in &reports {
            let kept = c.snapshot(); // a session holding the objects: changes copy them
            match *r {
                Report::Pod(p, j, cpu, n, status) => {
                    let update = pod(
                        &format!("p{p}"),
                        j.map(|j| gangs[j]),
                        &cpu.to_string(),
                        n.map(|n| names[n]),
                        status,
                    );
                    c.apply_pod(update.clone());
                    pods.insert(p, update);
                }
                Report::DeletePod(p) => {
                    c.delete_pod(&format!("p{p}"));
                    pods.remove(&p);
                }
                Report::Node(n) => {
                    c.apply_node(node(names[n], "8"));
                    nodes.insert(n);
                }
                Report::DeleteNode(n) => {
                    c.delete_node(names[n]);
                    nodes.remove(&n);
                }
                Report::Job(j) => {
                    c.apply_job(job(gangs[j]));
                    jobs.insert(j);
                }
                Report::DeleteJob(j) => {
                    c.delete_job(gangs[j]);
                    jobs.remove(&j);
                }
            }
            c.state().check_tally();
            drop(kept);
        }
        let mut afresh = Cache::new();
        for n in &nodes {
            afresh.apply_node(node(names[*n], "8"));
        }
        for j in &jobs {
            afresh.apply_job(job(gangs[*j]));
        }
        for update in pods.values() {
            afresh.apply_pod(update.clone());
        }
        proptest::prop_assert_eq!(observed(&c), observed(&afresh));
    }
}

#[test]
fn snapshots_are_isolated_from_later_updates() {
    let mut c = Cache::new();
    c.apply_node(node("n1", "8"));
    let before = c.snapshot();
    c.apply_pod(pod("p", None, "2", Some("n1"), TaskStatus::Running));
    let after = c.snapshot();
    let id = before.node_by_name("n1").unwrap();
    assert_eq!(before.node(id).used.milli_cpu, 0);
    assert_eq!(after.node(id).used.milli_cpu, 2000);
    // Unchanged objects are shared, not copied.
    c.apply_node(node("n2", "8"));
    let later = c.snapshot();
    assert!(Arc::ptr_eq(
        after.nodes.get(id.0 as usize).unwrap(),
        later.nodes.get(id.0 as usize).unwrap()
    ));
}

#[test]
fn deleting_pods_nodes_and_gangs_keeps_accounting_exact() {
    let mut c = Cache::new();
    c.apply_node(node("n1", "8"));
    c.apply_job(job("ns/j"));
    c.apply_pod(pod("a", Some("ns/j"), "1", Some("n1"), TaskStatus::Running));
    c.apply_pod(pod("b", Some("ns/j"), "1", None, TaskStatus::Pending));
    c.delete_job("ns/j");
    assert_eq!(c.orphans().get("ns/j").map(|o| o.len()), Some(2));
    let s = c.snapshot();
    assert_eq!(s.node(s.node_by_name("n1").unwrap()).used.milli_cpu, 1000);
    c.apply_job(job("ns/j"));
    assert!(c.orphans().is_empty());
    c.delete_pod("a");
    let s = c.snapshot();
    assert_eq!(s.node(s.node_by_name("n1").unwrap()).used.milli_cpu, 0);
    assert_eq!(s.job(s.job_by_uid("ns/j").unwrap()).tasks().len(), 1);
    c.apply_pod(pod("c", Some("ns/j"), "3", Some("n1"), TaskStatus::Running));
    c.delete_node("n1");
    c.apply_node(node("n1", "8"));
    let s = c.snapshot();
    assert_eq!(
        s.node(s.node_by_name("n1").unwrap()).used.milli_cpu,
        3000,
        "a node that returns gets its pods back"
    );
    assert!(c.set_pod_status("c", TaskStatus::Succeeded, Some(Arc::from("n1"))));
    let s = c.snapshot();
    assert_eq!(s.node(s.node_by_name("n1").unwrap()).used.milli_cpu, 0);
}

#[test]
fn label_topology_is_kept_while_labels_stay_and_rebuilt_when_they_change() {
    let racked = |name: &str, rack: &str| NodeSpec {
        labels: [("rack".to_string(), rack.to_string())]
            .into_iter()
            .collect(),
        ..node(name, "8")
    };
    let domains = |s: &Snapshot| -> Vec<(String, usize)> {
        let level = s.label_level("rack");
        level
            .domains
            .iter()
            .map(|d| (d.name.to_string(), d.nodes.len()))
            .collect()
    };
    let mut c = Cache::new();
    c.apply_node(racked("n1", "r1"));
    c.apply_node(racked("n2", "r1"));
    let before = c.snapshot();
    assert_eq!(domains(&before), vec![("r1".into(), 2)]);
    // Pods coming and going keep the level built.
    c.apply_pod(pod("a", None, "1", Some("n1"), TaskStatus::Running));
    let same = c.snapshot();
    assert!(Arc::ptr_eq(
        &before.label_level("rack"),
        &same.label_level("rack")
    ));
    // A label changes, a node comes, a node goes: built again, old snapshots unchanged.
    c.apply_node(racked("n2", "r2"));
    assert_eq!(
        domains(&c.snapshot()),
        vec![("r1".into(), 1), ("r2".into(), 1)]
    );
    assert_eq!(domains(&before), vec![("r1".into(), 2)]);
    c.apply_node(racked("n3", "r2"));
    assert_eq!(
        domains(&c.snapshot()),
        vec![("r1".into(), 1), ("r2".into(), 2)]
    );
    c.delete_node("n1");
    assert_eq!(domains(&c.snapshot()), vec![("r2".into(), 2)]);
}
