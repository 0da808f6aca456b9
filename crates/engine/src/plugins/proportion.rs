//! proportion: each queue deserves a share of the cluster by weight (water-filling: a
//! queue never deserves more than it asks for or its capability allows, and what it leaves
//! goes to the others), at least its guarantee. Queues below their share go first, a queue
//! at its share is overused, nothing is placed beyond a queue's capability, and a gang is
//! admitted only if its minResources fit under that capability.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use crate::conf::{ArgError, Arguments};
use crate::framework::{vote, Change, ClusterState, Plugin, Session, Vote};
use crate::model::resource::PODS;
use crate::model::{JobId, QueueInfo, QueueTree, Resource};

pub struct Proportion {
    /// `usageHalfLife` (ms): fair share over time, each queue's weight multiplied by its
    /// usage factor (`weigh_by_usage`). None: off.
    usage_half_life: Option<i64>,
}

/// Takes one argument, `usageHalfLife` (fair share over time; off unless given).
pub fn build(args: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
    let usage_half_life = crate::framework::usage::half_life_argument(args)?;
    Ok(Box::new(Proportion { usage_half_life }))
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueShare {
    pub weight: u32,
    pub deserved: Resource,
    pub allocated: Resource,
    /// What the queue held as the session opened, less what was evicted from it since:
    /// reclaim takes only from this, never because of work placed in the same cycle and
    /// not running yet.
    pub held: Resource,
    pub request: Resource,
    /// Requests of admitted gangs that are not running yet.
    pub inqueue: Resource,
    /// The cluster total, lowered to the queue's capability in the dimensions it names.
    pub capability: Resource,
    /// The queue's capability as written: only the dimensions it names are limited (a
    /// capability of `{cpu: 10}` says nothing about memory or GPUs). Empty when the queue
    /// has none: then the cluster is the only limit, and the framework's resource fit
    /// enforces it with a message that names the resource.
    pub limit: Resource,
    pub guarantee: Resource,
    /// Whether other queues may take back what this queue holds beyond its share.
    pub reclaimable: bool,
    /// What the descendants of a parent queue hold (kept for parent queues only): its
    /// capability caps them all.
    pub subtree_allocated: Resource,
    /// Fair share over time: the factor its weight is multiplied by for its deserved share
    /// (`framework::usage`); None when the option is off (the weight as it is).
    pub usage_factor: Option<f64>,
}

impl QueueShare {
    /// The weight its deserved share is computed with: its weight, times its usage factor
    /// with fair share over time.
    pub fn effective_weight(&self) -> f64 {
        f64::from(self.weight) * self.usage_factor.unwrap_or(1.0)
    }

    /// max over resources of allocated / deserved.
    pub fn share(&self) -> f64 {
        self.allocated
            .dimensions()
            .map(|(n, v)| {
                let d = self.deserved.get(n);
                if d > 0 {
                    v as f64 / d as f64
                } else if v > 0 {
                    f64::INFINITY
                } else {
                    0.0
                }
            })
            .fold(0.0, f64::max)
    }

    pub fn overused(&self) -> bool {
        let d = &self.deserved;
        d.dimensions().next().is_some() && d.fits(&self.allocated)
    }

    /// Whether the queue, having given up `taken` already, can give up `victim` too
    /// without falling below its deserved share: the victim must free something the
    /// queue holds beyond its share, and in every dimension where the queue still holds
    /// at least its share, what is left must still reach it. What it holds is `held`:
    /// pods placed for it earlier in the cycle (pipelined onto space being released) do
    /// not make its running pods fair game. (Volcano only asks that the queue be above
    /// its share, counting such pods, before the victim goes, so the last victim can take
    /// it below; a queue above its share in memory alone would also lose pods for want of
    /// cpu.) Pod counts play no part: a queue's accounts hold none.
    pub fn can_give(&self, taken: &Resource, victim: &Resource) -> bool {
        let mut frees_surplus = false;
        for (name, amount) in victim.dimensions() {
            if name == PODS {
                continue;
            }
            let (left, deserved) = (
                self.held.get(name) - taken.get(name),
                self.deserved.get(name),
            );
            if left >= deserved && left - amount < deserved {
                return false;
            }
            frees_surplus |= left > deserved;
        }
        frees_surplus
    }

    /// Whether `extra` more fits under the queue's capability, in the dimensions it names.
    pub fn within_limit(&self, extra: &Resource) -> bool {
        fits_limit(&self.limit, &self.allocated, extra)
    }

    /// Whether `extra` more fits under the capability of this queue as an ancestor.
    fn subtree_within_limit(&self, extra: &Resource) -> bool {
        fits_limit(&self.limit, &self.subtree_allocated, extra)
    }
}

/// Whether a resource name counts devices of a DeviceClass (`deviceclass/<class>`).
pub fn is_device_class(name: &str) -> bool {
    name.starts_with(crate::model::devices::DEVICE_CLASS_PREFIX)
}

/// What admitting a gang asks of its queue: its minResources (when it gives them) and the
/// devices per DeviceClass its first `minMember` pods' claims count (Volcano's capacity
/// plugin asks both), pods aside.
pub fn admission_need(job: &crate::model::JobInfo, devices: &Resource) -> Resource {
    let mut need = match &job.min_resources {
        Some(_) => job.min_request().without_pods(),
        None => Resource::new(),
    };
    need.add(devices);
    need
}

/// `used + extra` within `limit` in the dimensions `limit` names.
fn fits_limit(limit: &Resource, used: &Resource, extra: &Resource) -> bool {
    limit
        .dimensions()
        .all(|(n, cap)| used.get(n) + extra.get(n) <= cap)
}

/// Whether `extra` more for `queue` fits under the capability of every ancestor (shares
/// are flat; a parent's capability still caps its children together).
fn ancestors_allow(
    queues: &BTreeMap<Arc<str>, QueueShare>,
    tree: &QueueTree,
    queue: &str,
    extra: &Resource,
) -> bool {
    tree.ancestors(queue)
        .iter()
        .all(|a| queues.get(a).is_none_or(|q| q.subtree_within_limit(extra)))
}

/// The cluster total with the dimensions a queue's capability names lowered to it.
pub fn effective_capability(total: &Resource, limit: &Resource) -> Resource {
    let mut capability = total.clone();
    for (name, cap) in limit.dimensions() {
        capability.set(name, cap.min(total.get(name)));
    }
    capability
}

/// Water-filling of `total` over queues by weight, capped by request and capability.
pub fn deserved_shares(total: &Resource, queues: &mut BTreeMap<Arc<str>, QueueShare>) {
    let mut remaining = total.clone();
    let mut met: Vec<Arc<str>> = Vec::new();
    for _ in 0..=queues.len() {
        // Weights are whole numbers unless weighed by usage: their sum is exact either way
        // that matters (the same shares as summing integers).
        let weight: f64 = queues
            .iter()
            .filter(|(n, _)| !met.contains(n))
            .map(|(_, q)| q.effective_weight())
            .sum();
        if weight <= 0.0 || remaining.dimensions().all(|(_, v)| v <= 0) {
            break;
        }
        for (name, q) in queues.iter_mut() {
            if met.contains(name) {
                continue;
            }
            let mut share = remaining.scaled(q.effective_weight() / weight);
            share.min_with(&remaining);
            q.deserved.add(&share);
            q.deserved.min_with(&q.request);
            q.deserved.min_with(&q.capability);
            if q.request.fits(&q.deserved) || q.capability.fits(&q.deserved) {
                met.push(name.clone());
            }
        }
        let mut used = Resource::new();
        for q in queues.values() {
            used.add(&q.deserved);
        }
        let next = total.minus(&used);
        if next == remaining {
            break;
        }
        remaining = next;
    }
    for q in queues.values_mut() {
        q.deserved.max_with(&q.guarantee);
    }
}

/// Fair share over time: every queue's deserved share again, its weight multiplied by its
/// usage factor `2^(-u/s)` (`UsageLedger::fair_factors`; `s` its part of the weights of the
/// queues that ask for something or used something, `u` its dominant part of their usage).
/// A queue that ran alone all night deserves less in the morning than one that ran nothing;
/// as its usage decays the shares return to the weights.
pub fn weigh_by_usage(
    total: &Resource,
    queues: &mut BTreeMap<Arc<str>, QueueShare>,
    usage: &crate::framework::UsageLedger,
) {
    let entitled: BTreeMap<Arc<str>, f64> = queues
        .iter()
        .filter(|(n, q)| !q.request.is_empty() || usage.queue(n).is_some_and(|u| u.any()))
        .map(|(n, q)| (n.clone(), f64::from(q.weight)))
        .collect();
    let factors = usage.fair_factors(&entitled);
    for (name, q) in queues.iter_mut() {
        q.usage_factor = Some(factors.get(name).copied().unwrap_or(1.0));
        q.deserved = Resource::new();
    }
    deserved_shares(&total.without_pods(), queues);
}

/// Every queue's share of the cluster as a session opens: what it holds, asks for, is
/// limited to, and deserves.
pub fn queue_shares(state: &ClusterState, tree: &QueueTree) -> BTreeMap<Arc<str>, QueueShare> {
    queue_shares_of(state, tree, &state.total_allocatable())
}

/// `queue_shares` given the cluster's total allocatable (a session has it summed already:
/// summing it again read every node once more when a session opens).
pub fn queue_shares_of(
    state: &ClusterState,
    tree: &QueueTree,
    total: &Resource,
) -> BTreeMap<Arc<str>, QueueShare> {
    // Devices count per DeviceClass (`deviceclass/<class>`), beside what nodes offer.
    let mut total = total.without_pods();
    total.add(&state.device_class_totals());
    let mut queues: BTreeMap<Arc<str>, QueueShare> = state
        .queues()
        .map(|q: &QueueInfo| {
            let limit = q
                .capability
                .as_ref()
                .map(Resource::without_pods)
                .unwrap_or_default();
            (
                q.name.clone(),
                QueueShare {
                    weight: q.weight,
                    reclaimable: q.reclaimable,
                    capability: effective_capability(&total, &limit),
                    limit,
                    guarantee: q
                        .guarantee
                        .as_ref()
                        .map(Resource::without_pods)
                        .unwrap_or_default(),
                    ..Default::default()
                },
            )
        })
        .collect();
    // The sums per queue are kept by the state as gangs change (`Tally`): the tree is
    // walked once per queue, never once per gang.
    for (name, sums) in state.tally().queues() {
        let subtree = sums.allocated.without_pods();
        for a in tree.path(name).filter(|q| !tree.is_leaf(q)) {
            if let Some(q) = queues.get_mut(a) {
                q.subtree_allocated.add(&subtree);
            }
        }
        let Some(q) = queues.get_mut(name) else {
            continue;
        };
        q.allocated.add(&sums.allocated);
        q.request.add(&sums.request);
        q.inqueue.add(&sums.inqueue);
    }
    for q in queues.values_mut() {
        q.allocated.pods = 0;
        q.request.pods = 0;
        q.inqueue.pods = 0;
        q.held = q.allocated.clone();
    }
    deserved_shares(&total, &mut queues);
    queues
}

impl Plugin for Proportion {
    fn name(&self) -> &'static str {
        "proportion"
    }

    fn usage_half_life(&self) -> Option<i64> {
        self.usage_half_life
    }

    fn on_session_open(&self, ssn: &mut Session) {
        let tree = Rc::new(ssn.queue_tree().clone());
        let mut queues = queue_shares_of(ssn.state(), &tree, ssn.total_allocatable());
        if let (Some(_), Some(usage)) = (self.usage_half_life, ssn.queue_usage()) {
            weigh_by_usage(ssn.total_allocatable(), &mut queues, usage);
        }
        let state = Rc::new(RefCell::new(queues));

        let s = state.clone();
        ssn.add(
            vote::QueueOrder,
            Box::new(move |l, r| {
                let q = s.borrow();
                let share = |n: &str| q.get(n).map(QueueShare::share).unwrap_or(0.0);
                // Higher priority first, then the lower share (Volcano's order).
                r.priority
                    .cmp(&l.priority)
                    .then_with(|| share(&l.name).total_cmp(&share(&r.name)))
            }),
        );
        let s = state.clone();
        ssn.add(
            vote::Reclaimable,
            Box::new(move |st, reclaimer, candidates| {
                // Victims only from reclaimable queues above their share, and only while
                // taking them keeps that queue at or above what it deserves.
                // Asked for every node and victim gang a reclaimer looks at: the queue of
                // consecutive candidates of one gang is looked up once, and what this answer
                // takes is kept per victim queue in a short list (an answer spans few).
                let queues = s.borrow();
                let own = &st.job(reclaimer.job).queue;
                let mut taken: Vec<(&QueueShare, Resource)> = Vec::new();
                let mut last: Option<(JobId, Option<usize>)> = None;
                let mut out = Vec::with_capacity(candidates.len());
                for &c in candidates {
                    let slot = match last {
                        Some((job, slot)) if job == c.job => slot,
                        _ => {
                            let queue = &st.job(c.job).queue;
                            let share = (queue != own)
                                .then(|| queues.get(queue))
                                .flatten()
                                .filter(|q| q.reclaimable);
                            let slot = share.map(|q| {
                                taken
                                    .iter()
                                    .position(|(t, _)| std::ptr::eq(*t, q))
                                    .unwrap_or_else(|| {
                                        taken.push((q, Resource::new()));
                                        taken.len() - 1
                                    })
                            });
                            last = Some((c.job, slot));
                            slot
                        }
                    };
                    let Some(i) = slot else { continue };
                    let (q, taken) = &mut taken[i];
                    let victim = st.task(c).quota_request();
                    if q.can_give(taken, &victim) {
                        taken.add(&victim);
                        out.push(c);
                    }
                }
                Some(out)
            }),
        );
        let s = state.clone();
        ssn.add(
            vote::Overused,
            Box::new(move |q| s.borrow().get(&q.name).is_some_and(QueueShare::overused)),
        );
        let (s, t) = (state.clone(), tree.clone());
        ssn.add(
            vote::Allocatable,
            Box::new(move |q, task| {
                let queues = s.borrow();
                let Some(share) = queues.get(&q.name) else {
                    return true;
                };
                // Only the queues' own limits: what does not fit in the cluster is the
                // nodes' answer to give, with the resource and the shortfall.
                let need = task.quota_request();
                share.within_limit(&need) && ancestors_allow(&queues, &t, &q.name, &need)
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
                let queues = s.borrow();
                let Some(share) = queues.get(&job.queue) else {
                    return Vote::Reject;
                };
                let min = admission_need(job, &devices);
                // Only in the resources the gang asks for (Volcano's
                // LessEqualWithDimension): what the queue holds or waits for in others does
                // not hold it back.
                // Devices only where the queue's capability names their class (Volcano's
                // capacity plugin: no capability for a DeviceClass, no quota on it); the
                // nodes' answer, with the claims' reason, covers the rest.
                let within = min.dimensions().all(|(n, v)| {
                    (is_device_class(n) && share.limit.get(n) == 0)
                        || v + share.allocated.get(n) + share.inqueue.get(n)
                            <= share.capability.get(n)
                });
                if within && ancestors_allow(&queues, &t, &job.queue, &min) {
                    Vote::Permit
                } else {
                    Vote::Reject
                }
            }),
        );
        let s = state.clone();
        ssn.add_job_enqueued_fn(Box::new(move |job| {
            if let Some(q) = s.borrow_mut().get_mut(&job.queue) {
                q.inqueue
                    .add(&admission_need(job, &job.min_device_charge()));
            }
        }));
        let (a, d, ta, td) = (state.clone(), state, tree.clone(), tree);
        // The task's request without its pod count (the accounts hold none), applied in
        // place: the same exact sums as adding a copy without pods, with no copy made for
        // every placement of the cycle.
        fn add_need(r: &mut Resource, need: &Resource) {
            let pods = r.pods;
            r.add(need);
            r.pods = pods;
        }
        fn sub_need(r: &mut Resource, need: &Resource) {
            let pods = r.pods;
            r.sub(need);
            r.pods = pods;
        }
        ssn.add_event_handler(
            Some(Box::new(move |e| {
                let need = e.task.quota_request();
                let need = &*need;
                let mut queues = a.borrow_mut();
                if let Some(q) = queues.get_mut(&e.job.queue) {
                    add_need(&mut q.allocated, need);
                    if e.change == Change::Restored {
                        add_need(&mut q.held, need);
                    }
                }
                for n in ta.ancestors(&e.job.queue) {
                    if let Some(q) = queues.get_mut(n) {
                        add_need(&mut q.subtree_allocated, need);
                    }
                }
            })),
            Some(Box::new(move |e| {
                let need = e.task.quota_request();
                let need = &*need;
                let mut queues = d.borrow_mut();
                if let Some(q) = queues.get_mut(&e.job.queue) {
                    sub_need(&mut q.allocated, need);
                    if e.change == Change::Evicted {
                        sub_need(&mut q.held, need);
                    }
                }
                for n in td.ancestors(&e.job.queue) {
                    if let Some(q) = queues.get_mut(n) {
                        sub_need(&mut q.subtree_allocated, need);
                    }
                }
            })),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(n: i64) -> Resource {
        Resource {
            milli_cpu: n * 1000,
            ..Default::default()
        }
    }

    fn queue(weight: u32, request: i64) -> QueueShare {
        QueueShare {
            weight,
            request: cpu(request),
            capability: cpu(1000),
            ..Default::default()
        }
    }

    #[test]
    fn water_filling_by_weight() {
        let mut q: BTreeMap<Arc<str>, QueueShare> = [
            (Arc::from("a"), queue(1, 100)),
            (Arc::from("b"), queue(3, 100)),
        ]
        .into_iter()
        .collect();
        deserved_shares(&cpu(32), &mut q);
        assert_eq!(q["a"].deserved.milli_cpu, 8000);
        assert_eq!(q["b"].deserved.milli_cpu, 24000);
    }

    #[test]
    fn what_a_queue_does_not_ask_for_goes_to_the_others() {
        let mut q: BTreeMap<Arc<str>, QueueShare> = [
            (Arc::from("a"), queue(1, 2)),
            (Arc::from("b"), queue(1, 100)),
        ]
        .into_iter()
        .collect();
        deserved_shares(&cpu(32), &mut q);
        assert_eq!(q["a"].deserved.milli_cpu, 2000);
        assert_eq!(q["b"].deserved.milli_cpu, 30000);
    }

    #[test]
    fn capability_caps_and_guarantee_floors() {
        let mut capped = queue(3, 100);
        capped.capability = cpu(4);
        let mut guaranteed = queue(1, 1);
        guaranteed.guarantee = cpu(5);
        let mut q: BTreeMap<Arc<str>, QueueShare> = [
            (Arc::from("a"), capped),
            (Arc::from("b"), guaranteed),
            (Arc::from("c"), queue(1, 100)),
        ]
        .into_iter()
        .collect();
        deserved_shares(&cpu(32), &mut q);
        assert_eq!(q["a"].deserved.milli_cpu, 4000);
        assert_eq!(q["b"].deserved.milli_cpu, 5000);
        assert_eq!(q["c"].deserved.milli_cpu, 27000);
    }

    #[test]
    fn a_queue_gives_only_what_it_holds_beyond_its_share() {
        let mem = |gi: i64| Resource {
            memory: gi << 30,
            ..Default::default()
        };
        // Holds 5 cpu and 4Gi, deserves 3 cpu and 8Gi: 2 cpu beyond its share.
        let q = QueueShare {
            held: cpu(5).plus(&mem(4)),
            deserved: cpu(3).plus(&mem(8)),
            ..Default::default()
        };
        let pod = cpu(1).plus(&mem(1));
        assert!(q.can_give(&Resource::new(), &pod));
        assert!(q.can_give(&pod, &pod), "the second cpu is surplus too");
        assert!(
            !q.can_give(&pod.plus(&pod), &pod),
            "a third takes it below 3 cpu"
        );
        assert!(
            !q.can_give(&Resource::new(), &cpu(3)),
            "one victim larger than the surplus takes it below its share"
        );
        assert!(
            !q.can_give(&Resource::new(), &mem(1)),
            "it is not above its share in memory: freeing memory alone gives nothing back"
        );
        // At exactly its share in GPUs and above in cpu: a pod with a GPU would take it
        // below its GPU share, one without may go.
        let gpu = Resource::new().with("nvidia.com/gpu", "1").unwrap();
        let q = QueueShare {
            held: cpu(5).plus(&gpu),
            deserved: cpu(3).plus(&gpu),
            ..Default::default()
        };
        assert!(!q.can_give(&Resource::new(), &cpu(1).plus(&gpu)));
        assert!(q.can_give(&Resource::new(), &cpu(1)));
    }

    use crate::framework::ConditionKind;
    use crate::model::PodGroupPhase;
    use crate::testkit::*;

    const CONF: &str = crate::conf_yaml!("enqueue, allocate"; ["gang", "proportion", "predicates"]);

    fn capped(name: &str, weight: u32, capability: &[(&str, &str)]) -> QueueInfo {
        let mut q = QueueInfo::new(name, weight);
        q.capability = Some(res(capability));
        q
    }

    #[test]
    fn queues_below_their_share_go_first() {
        let mut cache = cache_with_default_queue();
        cache.apply_queue(QueueInfo::new("a", 1));
        cache.apply_queue(QueueInfo::new("b", 1));
        add_nodes(&mut cache, "n", 1, &[("cpu", "8")]);
        Gang::new("a-run", 1)
            .queue("a")
            .tasks("", 3, &[("cpu", "1")])
            .running_on(&["n-00000", "n-00000"])
            .apply(&mut cache);
        Gang::new("b-run", 1)
            .queue("b")
            .tasks("", 2, &[("cpu", "1")])
            .running_on(&["n-00000"])
            .apply(&mut cache);
        let ssn = open_session(&cache, Some(CONF));
        let (a, b) = (ssn.queue("a").unwrap(), ssn.queue("b").unwrap());
        // Each deserves what it asks for (3 and 2 cpu, both under half of 8): a uses 2/3 of
        // its share, b 1/2: b goes first.
        assert_eq!(ssn.queue_order(b, a), std::cmp::Ordering::Less);
        assert_eq!(ssn.queue_order(a, b), std::cmp::Ordering::Greater);
        drop(ssn);
        // A queue of higher priority goes first whatever its share (Volcano's order).
        let mut urgent = QueueInfo::new("a", 1);
        urgent.priority = 10;
        cache.apply_queue(urgent);
        let ssn = open_session(&cache, Some(CONF));
        let (a, b) = (ssn.queue("a").unwrap(), ssn.queue("b").unwrap());
        assert_eq!(ssn.queue_order(a, b), std::cmp::Ordering::Less);
    }

    #[test]
    fn an_overused_queue_gets_nothing_more() {
        // Two queues of equal weight on 4 cpu: each deserves 2. "a" already uses 2.
        let mut cache = cache_with_default_queue();
        cache.apply_queue(QueueInfo::new("a", 1));
        cache.apply_queue(QueueInfo::new("b", 1));
        add_nodes(&mut cache, "n", 1, &[("cpu", "4")]);
        Gang::new("a-run", 1)
            .queue("a")
            .phase(PodGroupPhase::Running)
            .tasks("", 2, &[("cpu", "1")])
            .running_on(&["n-00000", "n-00000"])
            .tasks("", 2, &[("cpu", "1")])
            .apply(&mut cache);
        let a_new = Gang::new("a-new", 1)
            .queue("a")
            .tasks("", 1, &[("cpu", "1")])
            .apply(&mut cache);
        let b_new = Gang::new("b-new", 1)
            .queue("b")
            .tasks("", 4, &[("cpu", "1")])
            .apply(&mut cache);
        let ssn = open_session(&cache, Some(CONF));
        assert!(ssn.overused(ssn.queue("a").unwrap()));
        assert!(!ssn.overused(ssn.queue("b").unwrap()));
        drop(ssn);
        let result = run_cycle(&cache, Some(CONF));
        let binds = binds_by_job(&result);
        assert_eq!(binds.get(&b_new).map(Vec::len), Some(2), "{binds:?}");
        assert!(!binds.contains_key("default/a-run"));
        assert!(!binds.contains_key(&a_new));
        assert_eq!(
            condition_message(&result, &a_new).as_deref(),
            Some("queue \"a\" is using its whole deserved share")
        );
    }

    #[test]
    fn nothing_is_allocated_beyond_a_queue_capability() {
        let mut cache = cache_with_default_queue();
        cache.apply_queue(capped("q", 1, &[("cpu", "2")]));
        add_nodes(&mut cache, "n", 2, &[("cpu", "8"), ("memory", "16Gi")]);
        let job = Gang::new("j", 1)
            .queue("q")
            .tasks("", 3, &[("cpu", "1"), ("memory", "1Gi")])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(CONF));
        assert_eq!(
            binds_by_job(&result).get(&job).map(Vec::len),
            Some(2),
            "a cpu-only capability caps cpu and leaves memory unlimited"
        );
    }

    #[test]
    fn a_capability_limits_only_the_resources_it_names() {
        let mut cache = cache_with_default_queue();
        cache.apply_queue(capped("q", 1, &[("nvidia.com/gpu", "2")]));
        add_nodes(
            &mut cache,
            "n",
            1,
            &[("cpu", "8"), ("memory", "16Gi"), ("nvidia.com/gpu", "4")],
        );
        let job = Gang::new("j", 2)
            .queue("q")
            .min_resources(&[("cpu", "2"), ("memory", "2Gi"), ("nvidia.com/gpu", "2")])
            .tasks(
                "",
                2,
                &[("cpu", "1"), ("memory", "1Gi"), ("nvidia.com/gpu", "1")],
            )
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(CONF));
        assert_eq!(binds_by_job(&result).get(&job).map(Vec::len), Some(2));
    }

    #[test]
    fn a_gang_is_admitted_only_if_its_min_resources_fit_under_the_capability() {
        let mut cache = cache_with_default_queue();
        cache.apply_queue(capped("q", 1, &[("cpu", "4")]));
        add_nodes(&mut cache, "n", 2, &[("cpu", "8"), ("memory", "16Gi")]);
        let big = Gang::new("big", 5)
            .queue("q")
            .min_resources(&[("cpu", "5")])
            .tasks("", 5, &[("cpu", "1")])
            .apply(&mut cache);
        let small = Gang::new("small", 4)
            .queue("q")
            .min_resources(&[("cpu", "4"), ("memory", "1Gi")])
            .tasks("", 4, &[("cpu", "1"), ("memory", "256Mi")])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(CONF));
        let update = |j: &str| result.job_updates.iter().find(|u| *u.job == *j).cloned();
        let big_u = update(&big).unwrap();
        assert_eq!(big_u.phase, None, "stays Pending");
        assert!(big_u.condition.unwrap().message.contains("not admitted"));
        let small_u = update(&small).unwrap();
        assert_eq!(small_u.phase, Some(PodGroupPhase::Running));
        assert_eq!(small_u.condition.unwrap().kind, ConditionKind::Scheduled);
    }

    #[test]
    fn admitted_gangs_count_against_the_capability_until_they_run() {
        let mut cache = cache_with_default_queue();
        cache.apply_queue(capped("q", 1, &[("cpu", "6")]));
        add_nodes(&mut cache, "n", 2, &[("cpu", "8")]);
        let first = Gang::new("first", 1)
            .queue("q")
            .created(1)
            .min_resources(&[("cpu", "4")])
            .tasks("", 1, &[("cpu", "4")])
            .apply(&mut cache);
        let second = Gang::new("second", 1)
            .queue("q")
            .created(2)
            .min_resources(&[("cpu", "4")])
            .tasks("", 1, &[("cpu", "4")])
            .apply(&mut cache);
        let conf = "actions: enqueue\ntiers:\n- plugins:\n  - name: proportion\n";
        let result = run_cycle(&cache, Some(conf));
        let phase = |j: &str| {
            result
                .job_updates
                .iter()
                .find(|u| *u.job == *j)
                .and_then(|u| u.phase)
        };
        assert_eq!(phase(&first), Some(PodGroupPhase::Inqueue));
        assert_eq!(phase(&second), None);
    }
}
