//! capacity: each queue deserves what its `spec.deserved` says, per resource, in a hierarchy
//! of queues (`spec.parent`) — Volcano's capacity plugin, an alternative to proportion (the
//! configuration refuses both). A queue may borrow idle resources beyond its deserved share
//! up to its *real capability*: its capability, and never what other queues' guarantees
//! reserve (`parent's real capability − siblings' guarantees`, the cluster at the top). Every
//! limit holds along the whole chain of ancestors, whose usage includes their descendants'.
//! Queues further below their deserved share go first; a queue below its deserved share
//! reclaims from reclaimable queues above theirs, never taking them below it.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use crate::conf::{ArgError, Arguments};
use crate::framework::{vote, Change, ClusterState, Plugin, Session, Vote};
use crate::model::{QueueInfo, QueueTree, Resource};
use crate::plugins::proportion::{admission_need, is_device_class};

pub struct Capacity {
    /// `usageHalfLife` (ms): fair share over time orders queues by usage too
    /// (`usage_factors`). None: off.
    usage_half_life: Option<i64>,
}

/// Takes one argument, `usageHalfLife` (fair share over time; off unless given).
pub fn build(args: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
    let usage_half_life = crate::framework::usage::half_life_argument(args)?;
    Ok(Box::new(Capacity { usage_half_life }))
}

/// One queue's accounts; `allocated` and `inqueue` include its descendants'.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueAttr {
    pub deserved: Resource,
    pub guarantee: Resource,
    /// The most it may hold, borrowing included (see the module comment).
    pub real_capability: Resource,
    /// `real_capability` as its placements and admissions are held to: devices of a
    /// DeviceClass only where its capability, or an ancestor's, names the class (Volcano's
    /// capacity plugin: no capability for a class, no quota on it; the nodes' answer, with
    /// the claims' reason, covers the rest).
    pub limit: Resource,
    pub allocated: Resource,
    /// What the queue held as the session opened, less what was evicted from it since:
    /// reclaim takes only from this (see proportion's `QueueShare::held`).
    pub held: Resource,
    /// Minimum requests of admitted gangs that are not running yet.
    pub inqueue: Resource,
    pub reclaimable: bool,
}

/// `used` is within `bound` in every dimension `bound` names (only those: a deserved share
/// of `{cpu: 4}` says nothing about memory).
fn within(used: &Resource, bound: &Resource) -> bool {
    bound.dimensions().all(|(n, b)| used.get(n) <= b)
}

/// Allocated over deserved, the largest over the dimensions deserved names; a queue that
/// deserves nothing and holds something comes last.
fn share(q: &QueueAttr) -> f64 {
    let mut s: f64 = 0.0;
    for (n, v) in q.allocated.dimensions() {
        let d = q.deserved.get(n);
        s = s.max(if d > 0 {
            v as f64 / d as f64
        } else {
            f64::INFINITY
        });
    }
    s
}

/// Fair share over time under capacity: each leaf queue's usage factor `2^(-u/s)`
/// (`UsageLedger::fair_factors`), `s` its part of what the leaf queues that hold, wait for
/// or used something deserve (dominant: the largest part over the resources of the
/// cluster), `u` its dominant part of their usage. Deserved shares, guarantees and
/// capabilities are contracts and stay as written: usage only changes which queue goes
/// first among queues at or above their deserved share, and so which one borrows idle
/// resources first (`weighed_share`).
pub fn usage_factors(
    attrs: &BTreeMap<Arc<str>, QueueAttr>,
    tree: &QueueTree,
    total: &Resource,
    usage: &crate::framework::UsageLedger,
) -> BTreeMap<Arc<str>, f64> {
    let part = |d: &Resource| {
        d.dimensions()
            .filter_map(|(n, v)| {
                let t = total.get(n);
                (t > 0).then(|| v as f64 / t as f64)
            })
            .fold(0.0, f64::max)
    };
    let entitled: BTreeMap<Arc<str>, f64> = attrs
        .iter()
        .filter(|(n, a)| {
            tree.is_leaf(n)
                && (!a.allocated.is_empty()
                    || !a.inqueue.is_empty()
                    || usage.queue(n).is_some_and(|u| u.any()))
        })
        .map(|(n, a)| (n.clone(), part(&a.deserved)))
        .collect();
    usage.fair_factors(&entitled)
}

/// A queue's place in the order with fair share over time: queues below their deserved
/// share first, by share (deserved shares are contracts, usage does not change them); then
/// queues at or above it — borrowing — by share divided by their usage factor (a queue
/// that used more than its part looks further along); at equal such values, the larger
/// factor first. Without usage (factor 1 for all) this is the order by share alone.
fn weighed_share(share: f64, factor: Option<f64>) -> (u8, f64, f64) {
    let f = factor.unwrap_or(1.0);
    if share < 1.0 {
        return (0, share, -f);
    }
    let weighed = if f > 0.0 { share / f } else { f64::INFINITY };
    (1, weighed, -f)
}

/// Every healthy queue's deserved share, guarantee and real capability, top-down.
pub fn queue_attrs(
    total: &Resource,
    queues: &BTreeMap<Arc<str>, &QueueInfo>,
    tree: &QueueTree,
) -> BTreeMap<Arc<str>, QueueAttr> {
    let mut attrs = BTreeMap::new();
    let top: Vec<Arc<str>> = tree.top_level().cloned().collect();
    let mut level: Vec<(Vec<Arc<str>>, Resource)> = vec![(top, total.clone())];
    while let Some((siblings, base)) = level.pop() {
        let guarantee_of = |n: &Arc<str>| {
            queues
                .get(n)
                .and_then(|q| q.guarantee.as_ref())
                .map(Resource::without_pods)
                .unwrap_or_default()
        };
        let mut guarantees = Resource::new();
        for s in &siblings {
            guarantees.add(&guarantee_of(s));
        }
        for name in siblings {
            let Some(q) = queues.get(&name) else { continue };
            let guarantee = guarantee_of(&name);
            // What the others' guarantees reserve is never lent.
            let mut real = base.minus(&guarantees);
            real.add(&guarantee);
            real.max_with(&guarantee);
            if let Some(cap) = &q.capability {
                for (n, c) in cap.without_pods().dimensions() {
                    real.set(n, c.min(real.get(n)));
                }
            }
            let mut limit = real.clone();
            let named = |n: &str| {
                tree.path(&name).any(|a| {
                    queues
                        .get(a)
                        .and_then(|q| q.capability.as_ref())
                        .is_some_and(|c| c.get(n) > 0)
                })
            };
            let unnamed: Vec<String> = limit
                .scalars
                .iter()
                .filter(|(n, _)| is_device_class(n) && !named(n))
                .map(|(n, _)| n.to_string())
                .collect();
            for n in unnamed {
                limit.set_scalar(&n, 0);
            }
            let mut deserved = q
                .deserved
                .as_ref()
                .map(Resource::without_pods)
                .unwrap_or_else(|| guarantee.clone());
            deserved.max_with(&guarantee);
            deserved.min_with(&real);
            level.push((tree.children(&name).to_vec(), real.clone()));
            attrs.insert(
                name,
                QueueAttr {
                    deserved,
                    guarantee,
                    real_capability: real,
                    limit,
                    reclaimable: q.reclaimable,
                    ..Default::default()
                },
            );
        }
    }
    attrs
}

/// Every queue's accounts as a session opens (its descendants' usage included).
pub fn session_attrs(state: &ClusterState, tree: &QueueTree) -> BTreeMap<Arc<str>, QueueAttr> {
    // Devices count per DeviceClass (`deviceclass/<class>`), beside what nodes offer.
    let mut total = state.total_allocatable().without_pods();
    total.add(&state.device_class_totals());
    let infos: BTreeMap<Arc<str>, &QueueInfo> =
        state.queues().map(|q| (q.name.clone(), q)).collect();
    let mut attrs = queue_attrs(&total, &infos, tree);
    // The per-queue sums the state keeps (`Tally`), not a pass over every gang.
    for (name, sums) in state.tally().queues() {
        let allocated = sums.allocated.without_pods();
        let waiting = sums.inqueue.without_pods();
        for q in tree.path(name) {
            if let Some(a) = attrs.get_mut(q) {
                a.allocated.add(&allocated);
                a.inqueue.add(&waiting);
            }
        }
    }
    for a in attrs.values_mut() {
        a.held = a.allocated.clone();
    }
    attrs
}

impl Plugin for Capacity {
    fn name(&self) -> &'static str {
        "capacity"
    }

    fn usage_half_life(&self) -> Option<i64> {
        self.usage_half_life
    }

    fn on_session_open(&self, ssn: &mut Session) {
        let tree = ssn.queue_tree().clone();
        let attrs = session_attrs(ssn.state(), &tree);
        let factors = match (self.usage_half_life, ssn.queue_usage()) {
            (Some(_), Some(usage)) => {
                let total = ssn.total_allocatable().without_pods();
                usage_factors(&attrs, &tree, &total, usage)
            }
            _ => BTreeMap::new(),
        };
        let state = Rc::new(RefCell::new(attrs));
        let tree = Rc::new(tree);

        let (s, t) = (state.clone(), tree.clone());
        ssn.add(
            vote::QueueOrder,
            Box::new(move |l, r| {
                let attrs = s.borrow();
                // The leaf's share, then its parent's, and so on up.
                let share_of = |q: &str| {
                    let s = attrs.get(q).map(share).unwrap_or(0.0);
                    weighed_share(s, factors.get(q).copied())
                };
                let cmp = |a: (u8, f64, f64), b: (u8, f64, f64)| {
                    a.0.cmp(&b.0)
                        .then_with(|| a.1.total_cmp(&b.1))
                        .then_with(|| a.2.total_cmp(&b.2))
                };
                // Higher priority first (Volcano's order), then shares down the paths.
                r.priority.cmp(&l.priority).then_with(|| {
                    t.path(&l.name)
                        .zip(t.path(&r.name))
                        .map(|(a, b)| cmp(share_of(a), share_of(b)))
                        .find(|o| o.is_ne())
                        .unwrap_or(std::cmp::Ordering::Equal)
                })
            }),
        );
        let (s, t) = (state.clone(), tree.clone());
        ssn.add(
            vote::Allocatable,
            Box::new(move |q, task| {
                let attrs = s.borrow();
                let need = task.quota_request().without_pods();
                t.path(&q.name).all(|n| {
                    attrs.get(n).is_none_or(|a| {
                        let mut after = a.allocated.clone();
                        after.add(&need);
                        within(&after, &a.limit)
                    })
                })
            }),
        );
        let (s, t) = (state.clone(), tree.clone());
        ssn.add(
            vote::JobEnqueueable,
            Box::new(move |job| {
                let devices = job.min_device_charge();
                if job.min_resources.is_none() && devices.scalars.is_empty() {
                    return Vote::Permit;
                }
                let attrs = s.borrow();
                let min = admission_need(job, &devices);
                let fits = t.path(&job.queue).all(|n| {
                    attrs.get(n).is_some_and(|a| {
                        let mut want = min.clone();
                        want.add(&a.allocated);
                        want.add(&a.inqueue);
                        within(&want, &a.limit)
                    })
                });
                if fits {
                    Vote::Permit
                } else {
                    Vote::Reject
                }
            }),
        );
        let (s, t) = (state.clone(), tree.clone());
        ssn.add_job_enqueued_fn(Box::new(move |job| {
            let min = admission_need(job, &job.min_device_charge());
            let mut attrs = s.borrow_mut();
            for n in t.path(&job.queue) {
                if let Some(a) = attrs.get_mut(n) {
                    a.inqueue.add(&min);
                }
            }
        }));
        let s = state.clone();
        ssn.add(
            vote::Reclaimable,
            Box::new(move |st, reclaimer, candidates| {
                let attrs = s.borrow();
                let own = &st.job(reclaimer.job).queue;
                // Only a queue below its deserved share reclaims.
                let below = attrs.get(own).is_some_and(|a| {
                    let mut after = a.allocated.clone();
                    after.add(&st.task(reclaimer).quota_request().without_pods());
                    within(&after, &a.deserved)
                });
                if !below {
                    return Some(Vec::new());
                }
                // From reclaimable queues above theirs, never below it.
                let mut taken: BTreeMap<Arc<str>, Resource> = BTreeMap::new();
                let mut out = Vec::new();
                for &c in candidates {
                    let queue = &st.job(c.job).queue;
                    if queue == own {
                        continue;
                    }
                    let Some(a) = attrs.get(queue) else { continue };
                    let taken = taken.entry(queue.clone()).or_default();
                    let left = a.held.minus(taken);
                    if a.reclaimable && !within(&left, &a.deserved) {
                        let victim = st.task(c).quota_request();
                        // Taking it must free some of what the queue holds above its
                        // share (a pod asking none of it frees nothing for the reclaimer:
                        // a parent queue over its share through its children held pods
                        // asking nothing, and lost them), and leave the queue at or above
                        // what it deserves.
                        let frees_surplus = a
                            .deserved
                            .dimensions()
                            .any(|(n, d)| left.get(n) > d && victim.get(n) > 0);
                        if frees_surplus
                            && a.deserved
                                .dimensions()
                                .all(|(n, d)| left.get(n) - victim.get(n) >= d)
                        {
                            taken.add(&victim.without_pods());
                            out.push(c);
                        }
                    }
                }
                Some(out)
            }),
        );
        let (a, d, ta, td) = (state.clone(), state, tree.clone(), tree);
        ssn.add_event_handler(
            Some(Box::new(move |e| {
                let need = e.task.quota_request().without_pods();
                let mut attrs = a.borrow_mut();
                for n in ta.path(&e.job.queue) {
                    if let Some(q) = attrs.get_mut(n) {
                        q.allocated.add(&need);
                        if e.change == Change::Restored {
                            q.held.add(&need);
                        }
                    }
                }
            })),
            Some(Box::new(move |e| {
                let need = e.task.quota_request().without_pods();
                let mut attrs = d.borrow_mut();
                for n in td.path(&e.job.queue) {
                    if let Some(q) = attrs.get_mut(n) {
                        q.allocated.sub(&need);
                        if e.change == Change::Evicted {
                            q.held.sub(&need);
                        }
                    }
                }
            })),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PodGroupPhase, TaskStatus};
    use crate::testkit::*;

    const CONF: &str = "actions: \"enqueue, allocate, reclaim\"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: predicates
  - name: capacity
  - name: nodeorder
";

    fn q(name: &str, parent: Option<&str>, spec: &[(&str, &[(&str, &str)])]) -> QueueInfo {
        let mut q = queue(name, 1);
        q.parent = parent.map(Arc::from);
        for (field, pairs) in spec {
            let r = Some(res(pairs));
            match *field {
                "deserved" => q.deserved = r,
                "capability" => q.capability = r,
                "guarantee" => q.guarantee = r,
                other => panic!("{other}"),
            }
        }
        q
    }

    fn cpu_of(r: &Resource) -> i64 {
        r.milli_cpu / 1000
    }

    #[test]
    fn real_capability_keeps_others_guarantees_and_is_capped_along_the_chain() {
        let qs = [
            q("eng", None, &[("capability", &[("cpu", "24")])]),
            q("ml", Some("eng"), &[("deserved", &[("cpu", "10")])]),
            q("web", Some("eng"), &[("guarantee", &[("cpu", "6")])]),
            q("ops", None, &[("guarantee", &[("cpu", "4")])]),
        ];
        let infos: BTreeMap<Arc<str>, &QueueInfo> =
            qs.iter().map(|q| (q.name.clone(), q)).collect();
        let tree = QueueTree::new(qs.iter());
        let a = queue_attrs(&res(&[("cpu", "32")]), &infos, &tree);
        // eng: 32 - ops's 4 = 28, capped at 24. ml under eng: 24 - web's 6 = 18.
        assert_eq!(cpu_of(&a["eng"].real_capability), 24);
        assert_eq!(cpu_of(&a["ml"].real_capability), 18);
        assert_eq!(cpu_of(&a["web"].real_capability), 24);
        assert_eq!(
            cpu_of(&a["ops"].real_capability),
            32,
            "its own guarantee is its own"
        );
        assert_eq!(cpu_of(&a["ml"].deserved), 10);
        assert_eq!(cpu_of(&a["web"].deserved), 6, "no deserved: its guarantee");
    }

    #[test]
    fn a_queue_borrows_idle_capacity_up_to_its_capability_and_its_parents() {
        let mut cache = crate::cache::Cache::new();
        for info in [
            q("eng", None, &[("capability", &[("cpu", "6")])]),
            q("ml", Some("eng"), &[("deserved", &[("cpu", "2")])]),
            q("default", None, &[]),
        ] {
            cache.apply_queue(info);
        }
        add_nodes(&mut cache, "n", 4, &[("cpu", "4"), ("memory", "16Gi")]);
        for i in 0..5 {
            Gang::new(&format!("g{i}"), 2)
                .queue("ml")
                .tasks("", 2, &[("cpu", "1")])
                .apply(&mut cache);
        }
        let r = cycle_at(&mut cache, Some(CONF), 0);
        // ml deserves 2 but borrows idle cpu: up to eng's capability of 6 (3 gangs).
        assert_eq!(r.binds.len(), 6, "{:?}", binds_by_job(&r));
    }

    #[test]
    fn jobs_in_a_parent_queue_wait_with_a_reason() {
        let mut cache = crate::cache::Cache::new();
        for info in [q("eng", None, &[]), q("ml", Some("eng"), &[])] {
            cache.apply_queue(info);
        }
        add_nodes(&mut cache, "n", 1, &[("cpu", "4")]);
        let job = Gang::new("g", 1)
            .queue("eng")
            .tasks("", 1, &[("cpu", "1")])
            .apply(&mut cache);
        let r = cycle_at(&mut cache, Some(CONF), 0);
        assert!(r.binds.is_empty());
        let why = condition_message(&r, &job).unwrap_or_default();
        assert!(
            why.contains("has child queues; submit jobs to a leaf queue"),
            "{why}"
        );
    }

    #[test]
    fn a_queue_below_its_deserved_share_reclaims_from_one_above_only_down_to_its_share() {
        let mut cache = crate::cache::Cache::new();
        for info in [
            q("a", None, &[("deserved", &[("cpu", "4")])]),
            q("b", None, &[("deserved", &[("cpu", "4")])]),
        ] {
            cache.apply_queue(info);
        }
        add_nodes(&mut cache, "n", 2, &[("cpu", "4"), ("memory", "16Gi")]);
        // b borrowed everything: 8 one-cpu gangs.
        for i in 0..8 {
            Gang::new(&format!("b{i}"), 1)
                .queue("b")
                .phase(PodGroupPhase::Running)
                .tasks("", 1, &[("cpu", "1")])
                .running_on(&[if i < 4 { "n-00000" } else { "n-00001" }])
                .apply(&mut cache);
        }
        let a = Gang::new("a0", 2)
            .queue("a")
            .tasks("", 2, &[("cpu", "1")])
            .apply(&mut cache);
        let r = cycle_at(&mut cache, Some(CONF), 0);
        assert_eq!(
            r.evictions.len(),
            2,
            "exactly what a's gang needs: {:?}",
            r.evictions
        );
        // b stays at or above its deserved 4.
        let b_left = cache
            .state()
            .jobs()
            .filter(|(_, j)| &*j.queue == "b")
            .map(|(_, j)| j.count(TaskStatus::Running))
            .sum::<u32>();
        assert!(b_left >= 4, "{b_left}");
        let _ = a;
    }

    #[test]
    fn a_gang_is_admitted_only_if_its_min_resources_fit_the_real_capability() {
        let mut cache = crate::cache::Cache::new();
        cache.apply_queue(q("small", None, &[("capability", &[("cpu", "2")])]));
        add_nodes(&mut cache, "n", 2, &[("cpu", "4")]);
        let big = Gang::new("big", 1)
            .queue("small")
            .min_resources(&[("cpu", "3")])
            .tasks("", 1, &[("cpu", "3")])
            .apply(&mut cache);
        let r = cycle_at(&mut cache, Some(CONF), 0);
        assert!(r.binds.is_empty());
        let phase = cache
            .state()
            .job(cache.state().job_by_uid(&big).unwrap())
            .phase;
        assert_eq!(phase, PodGroupPhase::Pending, "not admitted");
    }

    /// `n` GPUs of driver gpu.example.com on every node of `nodes`, and the class `gpu`.
    fn with_gpus(cache: &mut crate::cache::Cache, nodes: &[String], n: usize) {
        use crate::model::devices::{Device, NodeDevices};
        cache.set_device_classes(BTreeMap::from([(
            "gpu".to_string(),
            vec!["device.driver == \"gpu.example.com\"".to_string()],
        )]));
        for node in nodes {
            let devices = (0..n)
                .map(|i| Device {
                    driver: "gpu.example.com".into(),
                    pool: node.as_str().into(),
                    name: format!("gpu-{i}").into(),
                    ..Device::default()
                })
                .collect();
            cache.apply_node_devices(
                node,
                Some(Arc::new(NodeDevices::new(devices, &BTreeMap::new()))),
            );
        }
    }

    /// A gang of `pods` pods, each claiming `gpus` GPUs of class `gpu`.
    fn gpu_gang(name: &str, queue: &str, pods: usize, gpus: u32) -> Gang {
        use crate::model::devices::{
            AllocationMode, ClaimSpec, DeviceChoice, DeviceRequest, TaskClaim,
        };
        let spec = ClaimSpec {
            requests: vec![DeviceRequest {
                name: "gpu".into(),
                choices: vec![DeviceChoice {
                    device_class_name: "gpu".into(),
                    mode: AllocationMode::ExactCount(gpus),
                    ..DeviceChoice::default()
                }],
            }],
            constraints: vec![],
        };
        let mut g = Gang::new(name, pods as u32)
            .queue(queue)
            .tasks("", pods, &[("cpu", "1")]);
        for (i, t) in g.tasks.iter_mut().enumerate() {
            t.set_claims(vec![TaskClaim::new(
                format!("default/{name}-{i}"),
                spec.clone(),
            )]);
        }
        g
    }

    #[test]
    fn device_quota_per_class_caps_a_queue_and_its_parent() {
        let mut cache = crate::cache::Cache::new();
        for info in [
            q("eng", None, &[("capability", &[("deviceclass/gpu", "6")])]),
            q(
                "ml",
                Some("eng"),
                &[("capability", &[("deviceclass/gpu", "4")])],
            ),
            q("web", Some("eng"), &[]),
        ] {
            cache.apply_queue(info);
        }
        let nodes = add_nodes(&mut cache, "n", 2, &[("cpu", "16"), ("memory", "64Gi")]);
        with_gpus(&mut cache, &nodes, 8);
        // ml: 3 gangs of 2 GPUs, its capability 4 takes at most two; with web's 2 gangs of
        // 2 GPUs, eng's capability 6 takes three of the five. 16 GPUs are free throughout.
        for i in 0..3 {
            gpu_gang(&format!("ml{i}"), "ml", 1, 2).apply(&mut cache);
        }
        for i in 0..2 {
            gpu_gang(&format!("web{i}"), "web", 1, 2).apply(&mut cache);
        }
        let r = cycle_at(&mut cache, Some(CONF), 0);
        let bound = binds_by_job(&r);
        let in_queue = |q: &str| bound.keys().filter(|j| j.contains(q)).count();
        assert!(in_queue("default/ml") <= 2, "{bound:?}");
        assert_eq!(
            in_queue("default/ml") + in_queue("default/web"),
            3,
            "{bound:?}"
        );
        // The queues' accounts count devices per class, as Volcano's queue status does.
        let state = cache.state();
        let attrs = session_attrs(state, &QueueTree::new(state.queues()));
        assert!(attrs["ml"].allocated.scalar("deviceclass/gpu") <= 4000);
        assert_eq!(attrs["eng"].allocated.scalar("deviceclass/gpu"), 6000);
        assert_eq!(attrs["eng"].real_capability.scalar("deviceclass/gpu"), 6000);
        assert_eq!(attrs["web"].real_capability.scalar("deviceclass/gpu"), 6000);
    }
}
