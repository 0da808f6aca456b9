//! The bodies of the fuzz targets: each takes the raw bytes libFuzzer hands it and calls the
//! library functions a user's input reaches. The cargo-fuzz binaries in `fuzz_targets/` call
//! these, and so does the stable test `tests/offline/fuzz_corpus.rs` (which includes this file with
//! `#[path]`) on every file of `fuzz/corpus/<target>/`. A body returns normally on any
//! input; a panic (or an assertion below) is a bug.

use std::collections::{BTreeMap, HashMap};

use arbitrary::{Arbitrary, Unstructured};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use rust_batch::conf::SchedulerConf;
use rust_batch::framework::Scheduler;
use rust_batch::kube::convert::{self, pod_to_update_with_warnings};
use rust_batch::kube::dialects::coscheduling::{cosched_to_job, SigsPodGroup, XK8sPodGroup};
use rust_batch::kube::dialects::volcano::{
    pod_group_to_job, queue_problems, queue_to_info, PodGroup, Queue,
};
use rust_batch::kube::dialects::{self as dialects, koordinator, pod_gang};
use rust_batch::model::resource::{format_amount, parse_milli, CPU, GPU, MEMORY, PODS};
use rust_batch::model::Resource;
use rust_batch::sim::{Scenario, Simulation};

/// A target's body: it takes whatever bytes libFuzzer makes up.
pub type Body = fn(&[u8]);

/// Every target, by the name of its corpus folder.
pub const TARGETS: &[(&str, Body)] = &[
    ("quantity", quantity),
    ("volcano_config", volcano_config),
    ("scenario", scenario),
    ("pod_dialects", pod_dialects),
    ("crd_specs", crd_specs),
];

/// Kubernetes quantities: `parse_milli` and what is built on it. A quantity that parses
/// is >= 0, fits an i64, and reads back the same from how it is printed.
pub fn quantity(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(milli) = parse_milli(&text) {
        assert!(
            (0..=i128::from(i64::MAX)).contains(&milli),
            "{text:?} -> {milli}"
        );
    }
    for name in [CPU, MEMORY, PODS, GPU] {
        let Ok(r) = Resource::new().with(name, &text) else {
            continue;
        };
        let _ = r.to_string();
        let value = r.get(name);
        let printed = format_amount(name, value);
        // Bytes and pods are parsed in thousandths, so the very largest (above i64::MAX/1000)
        // print as a number too large to read back; everything else reads back the same.
        if let Ok(again) = Resource::new().with(name, &printed) {
            assert_eq!(
                again.get(name),
                value,
                "{name} {text:?} printed as {printed:?}"
            );
        } else {
            assert!(
                value > i64::MAX / 1000,
                "{name} {text:?} printed as {printed:?}"
            );
        }
    }
}

/// A small cluster to run a fuzzed scheduler configuration on: a gang that fits, one that
/// does not, two queues and priorities, so every action has something to do.
const CONFIG_SCENARIO: &str = r#"
name: fuzz
schedulePeriod: 1s
maxTime: 2m
evictionGrace: 5s
nodeGroups:
- name: n
  count: 2
  allocatable: {cpu: "4", memory: 8Gi, nvidia.com/gpu: "1"}
queues:
- name: a
  weight: 2
- name: b
  capability: {cpu: "6"}
jobs:
- name: low
  queue: a
  minMember: 2
  tasks: [{role: w, replicas: 3, requests: {cpu: "1", memory: 1Gi}, runtime: 30s}]
- name: big
  queue: b
  submitAt: 2s
  tasks: [{role: w, replicas: 2, requests: {cpu: "3", nvidia.com/gpu: "1"}, runtime: 20s, estimate: 20s}]
- name: urgent
  queue: a
  submitAt: 5s
  priority: 100
  tasks: [{role: w, replicas: 2, requests: {cpu: "2"}, runtime: 10s}]
- name: never
  queue: b
  tasks: [{role: w, replicas: 1, requests: {cpu: "64"}}]
"#;

/// The Volcano scheduler configuration: load and validate it, build the scheduler (plugin
/// and action arguments), and run a short simulation with it.
pub fn volcano_config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(conf) = SchedulerConf::parse(&text, "fuzz.conf") else {
        return;
    };
    let _ = conf.to_string();
    if Scheduler::new(conf, &rust_batch::REGISTRY).is_err() {
        return;
    }
    let mut scenario =
        Scenario::parse(CONFIG_SCENARIO, "fuzz.yaml").expect("the fuzz scenario is valid");
    scenario.config = Some(text.into_owned());
    let Ok(mut sim) = Simulation::new(scenario, "fuzz.yaml") else {
        return;
    };
    sim.run_until(60_000, &mut |_| {});
    let _ = sim.report();
}

/// Scenario files: parse and validate; run the small ones for a few cycles.
pub fn scenario(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(s) = Scenario::parse(&text, "fuzz.yaml") else {
        return;
    };
    // The fuzzer's own bound, to keep each run short; validation refuses what is truly huge.
    let nodes: u64 = s
        .node_groups
        .iter()
        .map(|g| u64::from(g.count))
        .sum::<u64>()
        + s.events
            .iter()
            .filter_map(|e| e.add_nodes.as_ref())
            .map(|c| u64::from(c.count))
            .sum::<u64>();
    let pods: u64 = s
        .jobs
        .iter()
        .map(|j| {
            let per_copy: u64 = j.tasks.iter().map(|t| u64::from(t.replicas)).sum();
            per_copy * j.repeat.as_ref().map_or(1, |r| u64::from(r.count))
        })
        .sum();
    if nodes > 32 || pods > 128 || s.events.len() > 32 {
        return;
    }
    let until = s.schedule_period.0.saturating_mul(30).min(s.max_time.0);
    let Ok(mut sim) = Simulation::new(s, "fuzz.yaml") else {
        return;
    };
    sim.run_until(until, &mut |_| {});
    let _ = sim.report();
}

/// Every pod key a dialect reads (crates/kube/src/convert.rs, crates/kube/src/koordinator.rs).
pub const POD_KEYS: &[&str] = &[
    dialects::GROUP_NAME_ANNOTATION,
    dialects::VOLCANO_GROUP_NAME,
    dialects::TASK_SPEC_ANNOTATION,
    dialects::QUEUE_NAME_ANNOTATION,
    convert::RUNTIME_ANNOTATION,
    convert::RUNTIME_ESTIMATE_ANNOTATION,
    dialects::KUBE_BATCH_MIN_MEMBER,
    dialects::ACK_GROUP_NAME,
    dialects::ACK_GROUP_NAME_SHORT,
    dialects::ACK_MIN_AVAILABLE,
    dialects::X_K8S_POD_GROUP_LABEL,
    koordinator::NAME,
    koordinator::MIN_AVAILABLE,
    koordinator::TOTAL_NUMBER,
    koordinator::MODE,
    koordinator::GROUPS,
    koordinator::WAITING_TIME,
    koordinator::MATCH_POLICY,
];

/// Values those keys take, valid and nearly valid.
const POD_VALUES: &[&str] = &[
    "gang-a",
    "gang-b",
    "tf-smoke-gpu",
    "Gang_A",
    "a..b",
    "-a",
    "default",
    "team-a",
    "worker",
    "ps",
    "0",
    "1",
    "2",
    "3",
    " 2 ",
    "-1",
    "4294967295",
    "4294967296",
    "1e3",
    "Strict",
    "NonStrict",
    "strict",
    "once-satisfied",
    "only-waiting",
    "waiting-and-running",
    "30s",
    "10m",
    "1h30m",
    "1.5h",
    "0.5s",
    "300ms",
    "-5s",
    "1e400h",
    "18446744073709551615s",
    "[\"default/gang-a\",\"default/gang-b\"]",
    "[\"default/gang-a\"]",
    "[\"gang-a\"]",
    "[]",
    "[1]",
    "{}",
];

const RESOURCE_NAMES: &[&str] = &[CPU, MEMORY, PODS, GPU, "ephemeral-storage"];

const QUANTITIES: &[&str] = &[
    "1",
    "500m",
    "2Gi",
    "9223372036854775807m",
    "9e15",
    "8Ei",
    "0.001",
    "1e-3",
    "-1",
];

/// A string drawn from a table of real ones, or anything.
#[derive(Arbitrary, Debug, Clone)]
pub enum Pick {
    Known(u8),
    Raw(String),
}

impl Pick {
    fn get(&self, table: &[&str]) -> String {
        match self {
            Pick::Known(i) => table[usize::from(*i) % table.len()].to_string(),
            Pick::Raw(s) => s.clone(),
        }
    }
}

/// `name: value` pairs (labels, annotations, resource lists).
pub type Pairs = Vec<(Pick, Pick)>;

/// A pod as a user writes it: labels and annotations of every dialect, container requests.
#[derive(Arbitrary, Debug, Clone)]
pub struct PodInput {
    pub namespace: Pick,
    pub name: Pick,
    pub labels: Pairs,
    pub annotations: Pairs,
    /// Per container: (resource, quantity) requests, and limits.
    pub containers: Vec<(Pairs, Pairs)>,
    /// Init containers: requests, and whether it is a sidecar (restartPolicy Always).
    pub init_containers: Vec<(Pairs, bool)>,
    pub overhead: Pairs,
    pub active_deadline_seconds: Option<i64>,
    pub priority: Option<i32>,
}

fn string_map(pairs: &[(Pick, Pick)], keys: &[&str], values: &[&str]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.get(keys), v.get(values)))
        .collect()
}

fn quantities(pairs: &[(Pick, Pick)]) -> Option<BTreeMap<String, Quantity>> {
    (!pairs.is_empty()).then(|| {
        pairs
            .iter()
            .map(|(k, v)| (k.get(RESOURCE_NAMES), Quantity(v.get(QUANTITIES))))
            .collect()
    })
}

impl PodInput {
    pub fn pod(&self) -> Pod {
        let values = |pairs: &[(Pick, Pick)]| Some(string_map(pairs, POD_KEYS, POD_VALUES));
        let container =
            |name: String, requests: &[(Pick, Pick)], limits: &[(Pick, Pick)]| Container {
                name,
                resources: Some(ResourceRequirements {
                    requests: quantities(requests),
                    limits: quantities(limits),
                    ..Default::default()
                }),
                ..Default::default()
            };
        Pod {
            metadata: ObjectMeta {
                namespace: Some(self.namespace.get(POD_VALUES)),
                name: Some(self.name.get(POD_VALUES)),
                labels: values(&self.labels),
                annotations: values(&self.annotations),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: self
                    .containers
                    .iter()
                    .enumerate()
                    .map(|(i, (r, l))| container(format!("c{i}"), r, l))
                    .collect(),
                init_containers: Some(
                    self.init_containers
                        .iter()
                        .enumerate()
                        .map(|(i, (r, sidecar))| Container {
                            restart_policy: sidecar.then(|| "Always".to_string()),
                            ..container(format!("i{i}"), r, &[])
                        })
                        .collect(),
                ),
                overhead: quantities(&self.overhead),
                active_deadline_seconds: self.active_deadline_seconds,
                priority: self.priority,
                ..Default::default()
            }),
            status: None,
        }
    }
}

/// Pods of every dialect: the gang a pod declares (`pod_gang`, Koordinator's policy) and the
/// pod as the engine's task (`pod_to_update_with_warnings`).
pub fn pod_dialects(data: &[u8]) {
    let Ok(input) = PodInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let pod = input.pod();
    let gang = pod_gang(&pod);
    let job = match &gang {
        Ok(Some(decl)) => {
            assert!(!decl.name.is_empty());
            Some(format!(
                "{}/{}",
                pod.metadata.namespace.clone().unwrap_or_default(),
                decl.name
            ))
        }
        _ => None,
    };
    let _ = dialects::pod_group_name(&pod);
    let _ = convert::runtime_estimate(&pod);
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let _ = koordinator::gang_policy(&annotations, "default", "gang-a", "pod default/p");
    if let Some(v) = annotations.get(koordinator::WAITING_TIME) {
        let _ = koordinator::parse_go_duration(v);
    }
    if let Ok((update, _warnings)) = pod_to_update_with_warnings(&pod, job) {
        assert!(
            update.task.resreq.is_non_negative(),
            "a pod's request is never negative: {}",
            update.task.resreq
        );
    }
}

/// Each CRD: arbitrary JSON as a Volcano PodGroup and Queue, a scheduler-plugins and a
/// legacy PodGroup (and a list of Queues), converted to the engine's model.
pub fn crd_specs(data: &[u8]) {
    let classes: HashMap<String, i32> =
        [("high".to_string(), 1000), ("low".to_string(), -5)].into();
    if let Ok(pg) = serde_json::from_slice::<PodGroup>(data) {
        let _ = pod_group_to_job(&pg, &classes);
    }
    if let Ok(q) = serde_json::from_slice::<Queue>(data) {
        let _ = queue_to_info(&q);
        let _ = queue_problems([&q]);
    }
    if let Ok(g) = serde_json::from_slice::<XK8sPodGroup>(data) {
        let _ = cosched_to_job(&g);
    }
    if let Ok(g) = serde_json::from_slice::<SigsPodGroup>(data) {
        let _ = cosched_to_job(&g);
    }
    if let Ok(qs) = serde_json::from_slice::<Vec<Queue>>(data) {
        let _ = queue_problems(qs.iter());
    }
}
