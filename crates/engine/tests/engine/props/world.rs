//! The random worlds: nodes, gangs, queues and the configurations they run under.

use proptest::prelude::*;

#[derive(Clone, Debug)]
pub(crate) struct NodeCfg {
    pub(crate) cpu: i64,
    pub(crate) mem_gi: i64,
    pub(crate) gpu: i64,
    pub(crate) pods: i64,
    pub(crate) zone: u8,
    pub(crate) tainted: bool,
    pub(crate) unschedulable: bool,
    pub(crate) ready: bool,
    /// Percent of the node's cpu and memory taken by a pod of another scheduler.
    pub(crate) foreign_pct: i64,
}

#[derive(Clone, Debug)]
pub(crate) struct RoleCfg {
    pub(crate) count: usize,
    pub(crate) cpu_m: i64,
    pub(crate) mem_mi: i64,
    pub(crate) gpu: i64,
    /// minTaskMember is `min_pick % (count + 1)`; 0 leaves the role without one.
    pub(crate) min_pick: u32,
}

#[derive(Clone, Debug)]
pub(crate) struct GangCfg {
    pub(crate) roles: Vec<RoleCfg>,
    pub(crate) min_pick: u32,
    pub(crate) priority: i32,
    pub(crate) queue: usize,
    pub(crate) zone: Option<u8>,
    pub(crate) tolerate: bool,
    pub(crate) inqueue: bool,
    pub(crate) min_resources: bool,
}

#[derive(Clone, Debug)]
pub(crate) struct QueueCfg {
    pub(crate) weight: u32,
    pub(crate) capability_cpu: Option<i64>,
    pub(crate) closed: bool,
    /// A child of q0 (hierarchical queues; q0 then takes no jobs of its own).
    pub(crate) child_of_first: bool,
    pub(crate) deserved_cpu: Option<i64>,
}

#[derive(Clone, Debug)]
pub(crate) struct World {
    pub(crate) nodes: Vec<NodeCfg>,
    pub(crate) gangs: Vec<GangCfg>,
    pub(crate) queues: Vec<QueueCfg>,
    pub(crate) conf: usize,
    pub(crate) cycles: usize,
    pub(crate) seed: u64,
    /// Fill the cluster first with a configuration that ignores queue shares (when no queue
    /// has a capability), so later cycles find queues above their share to reclaim from.
    pub(crate) warm_up: bool,
}

pub(crate) fn node_cfg() -> impl Strategy<Value = NodeCfg> {
    (
        (
            2i64..=32,
            2i64..=128,
            prop_oneof![1 => Just(0i64), 1 => 1i64..=8],
            3i64..=30,
        ),
        (
            0u8..3,
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.05),
            prop::bool::weighted(0.95),
            prop_oneof![2 => Just(0i64), 1 => 0i64..=100],
        ),
    )
        .prop_map(
            |((cpu, mem_gi, gpu, pods), (zone, tainted, unschedulable, ready, foreign_pct))| {
                NodeCfg {
                    cpu,
                    mem_gi,
                    gpu,
                    pods,
                    zone,
                    tainted,
                    unschedulable,
                    ready,
                    foreign_pct,
                }
            },
        )
}

pub(crate) fn role_cfg() -> impl Strategy<Value = RoleCfg> {
    let request = prop_oneof![
        1 => Just((0i64, 0i64, 0i64)),
        4 => (1i64..=16, 0i64..=8, Just(0i64)).prop_map(|(c, m, g)| (c * 250, m * 512, g)),
        2 => (0i64..=8, 0i64..=8, 1i64..=2).prop_map(|(c, m, g)| (c * 250, m * 512, g)),
    ];
    (1usize..=4, request, any::<u32>()).prop_map(|(count, (cpu_m, mem_mi, gpu), min_pick)| {
        RoleCfg {
            count,
            cpu_m,
            mem_mi,
            gpu,
            min_pick,
        }
    })
}

pub(crate) fn gang_cfg() -> impl Strategy<Value = GangCfg> {
    (
        prop::collection::vec(role_cfg(), 1..=3),
        any::<u32>(),
        0i32..3,
        0usize..4,
        prop_oneof![5 => Just(None), 1 => (0u8..3).prop_map(Some)],
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.3),
    )
        .prop_map(
            |(roles, min_pick, priority, queue, zone, tolerate, inqueue, min_resources)| GangCfg {
                roles,
                min_pick,
                priority,
                queue,
                zone,
                tolerate,
                inqueue,
                min_resources,
            },
        )
}

pub(crate) fn queue_cfg() -> impl Strategy<Value = QueueCfg> {
    (
        1u32..=4,
        prop_oneof![2 => Just(None), 1 => (1i64..=32).prop_map(Some)],
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.3),
        prop_oneof![1 => Just(None), 2 => (1i64..=16).prop_map(Some)],
    )
        .prop_map(
            |(weight, capability_cpu, closed, child_of_first, deserved_cpu)| QueueCfg {
                weight,
                capability_cpu,
                closed,
                child_of_first,
                deserved_cpu,
            },
        )
}

pub(crate) fn world() -> impl Strategy<Value = World> {
    (
        prop::collection::vec(node_cfg(), 1..=10),
        prop::collection::vec(gang_cfg(), 1..=10),
        prop::collection::vec(queue_cfg(), 3),
        0usize..CONFS.len(),
        1usize..=4,
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(
            |(nodes, gangs, queues, conf, cycles, seed, warm_up)| World {
                nodes,
                gangs,
                queues,
                conf,
                cycles,
                seed,
                warm_up,
            },
        )
}

/// The configuration in `CONFS` without any queue plugin.
pub(crate) const GREEDY: usize = 3;
/// The configurations in `CONFS` with preempt or reclaim.
pub(crate) const EVICTING: &[usize] = &[4, 5];

/// Configurations the properties must hold under. Every one has gang and predicates.
pub(crate) const CONFS: &[Option<&str>] = &[
    None,
    Some(
        "actions: \"allocate, backfill\"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
",
    ),
    Some(
        "actions: \"enqueue, allocate, backfill\"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: overcommit
    arguments: {overcommit-factor: 1.0}
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
    arguments: {leastrequested.weight: 0, mostrequested.weight: 2}
  - name: binpack
    arguments: {binpack.weight: 10, binpack.resources: nvidia.com/gpu}
",
    ),
    Some(
        "actions: \"enqueue, allocate, backfill\"
tiers:
- plugins:
  - name: gang
  - name: predicates
  - name: nodeorder
",
    ),
    Some(
        "actions: \"enqueue, allocate, preempt, reclaim, backfill\"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
",
    ),
    Some(
        "actions: \"enqueue, allocate, reclaim, backfill\"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: capacity
  - name: nodeorder
",
    ),
];

/// Worlds where preempt and reclaim have work: the cluster filled ignoring shares and
/// priorities, then a configuration with preempt or reclaim.
pub(crate) fn evicting_world() -> impl Strategy<Value = World> {
    world().prop_map(|mut w| {
        w.conf = EVICTING[(w.seed % EVICTING.len() as u64) as usize];
        w.warm_up = true;
        for q in &mut w.queues {
            q.capability_cpu = None;
        }
        w
    })
}

/// Few small nodes and many gangs, every node usable, every queue open: most gangs wait
/// after the warm-up, so preempt and reclaim have far more to choose from.
pub(crate) fn crowded_world() -> impl Strategy<Value = World> {
    (
        prop::collection::vec(node_cfg(), 1..=3),
        prop::collection::vec(gang_cfg(), 6..=16),
        prop::collection::vec(queue_cfg(), 3),
        2usize..=4,
        any::<u64>(),
    )
        .prop_map(|(mut nodes, gangs, mut queues, cycles, seed)| {
            for n in &mut nodes {
                n.cpu = n.cpu.min(8);
                n.ready = true;
                n.unschedulable = false;
            }
            for q in &mut queues {
                q.capability_cpu = None;
                q.closed = false;
            }
            World {
                nodes,
                gangs,
                queues,
                conf: EVICTING[(seed % EVICTING.len() as u64) as usize],
                cycles,
                seed,
                warm_up: true,
            }
        })
}
