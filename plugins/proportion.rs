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
use crate::framework::{Plugin, Session, Vote};
use crate::model::{PodGroupPhase, QueueInfo, Resource, TaskStatus};

pub struct Proportion;

pub fn build(_: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
    Ok(Box::new(Proportion))
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueShare {
    pub weight: u32,
    pub deserved: Resource,
    pub allocated: Resource,
    pub request: Resource,
    /// Requests of admitted gangs that are not running yet.
    pub inqueue: Resource,
    /// min(capability, cluster total).
    pub capability: Resource,
    /// Whether the queue set a capability (otherwise the cluster is the only limit, and
    /// the framework's resource fit already enforces it).
    pub capped: bool,
    pub guarantee: Resource,
}

impl QueueShare {
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
}

/// Water-filling of `total` over queues by weight, capped by request and capability.
pub fn deserved_shares(total: &Resource, queues: &mut BTreeMap<Arc<str>, QueueShare>) {
    let mut remaining = total.clone();
    let mut met: Vec<Arc<str>> = Vec::new();
    for _ in 0..=queues.len() {
        let weight: u64 = queues
            .iter()
            .filter(|(n, _)| !met.contains(n))
            .map(|(_, q)| u64::from(q.weight))
            .sum();
        if weight == 0 || remaining.dimensions().all(|(_, v)| v <= 0) {
            break;
        }
        for (name, q) in queues.iter_mut() {
            if met.contains(name) {
                continue;
            }
            let mut share = remaining.scaled(f64::from(q.weight) / weight as f64);
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

impl Plugin for Proportion {
    fn name(&self) -> &'static str {
        "proportion"
    }

    fn on_session_open(&mut self, ssn: &mut Session) {
        let total = ssn.state().total_allocatable().without_pods();
        let mut queues: BTreeMap<Arc<str>, QueueShare> = ssn
            .state()
            .queues()
            .map(|q: &QueueInfo| {
                let mut capability = q
                    .capability
                    .as_ref()
                    .map(Resource::without_pods)
                    .unwrap_or_else(|| total.clone());
                capability.min_with(&total);
                (
                    q.name.clone(),
                    QueueShare {
                        weight: q.weight,
                        capability,
                        capped: q.capability.is_some(),
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
        for (_, job) in ssn.state().jobs() {
            let Some(q) = queues.get_mut(&job.queue) else {
                continue;
            };
            q.allocated.add(&job.allocated.without_pods());
            q.request.add(&job.total_request.without_pods());
            if job.phase == PodGroupPhase::Inqueue && job.count(TaskStatus::Running) == 0 {
                q.inqueue.add(&job.min_request().without_pods());
            }
        }
        deserved_shares(&total, &mut queues);
        let state = Rc::new(RefCell::new(queues));

        let s = state.clone();
        ssn.add_queue_order_fn(
            self.name(),
            Box::new(move |l, r| {
                let q = s.borrow();
                let share = |n: &str| q.get(n).map(QueueShare::share).unwrap_or(0.0);
                share(&l.name).total_cmp(&share(&r.name))
            }),
        );
        let s = state.clone();
        ssn.add_overused_fn(
            self.name(),
            Box::new(move |q| s.borrow().get(&q.name).is_some_and(QueueShare::overused)),
        );
        let s = state.clone();
        ssn.add_allocatable_fn(
            self.name(),
            Box::new(move |q, t| {
                let queues = s.borrow();
                let Some(share) = queues.get(&q.name).filter(|s| s.capped) else {
                    return true;
                };
                t.resreq
                    .without_pods()
                    .fits(&share.capability.minus(&share.allocated))
            }),
        );
        let s = state.clone();
        ssn.add_job_enqueueable_fn(
            self.name(),
            Box::new(move |job| {
                if job.min_resources.is_none() {
                    return Vote::Permit;
                }
                let queues = s.borrow();
                let Some(share) = queues.get(&job.queue) else {
                    return Vote::Reject;
                };
                let mut want = job.min_request().without_pods();
                want.add(&share.allocated);
                want.add(&share.inqueue);
                if want.fits(&share.capability) {
                    Vote::Permit
                } else {
                    Vote::Reject
                }
            }),
        );
        let s = state.clone();
        ssn.add_job_enqueued_fn(Box::new(move |job| {
            if let Some(q) = s.borrow_mut().get_mut(&job.queue) {
                q.inqueue.add(&job.min_request().without_pods());
            }
        }));
        let (a, d) = (state.clone(), state);
        ssn.add_event_handler(
            Some(Box::new(move |e| {
                if let Some(q) = a.borrow_mut().get_mut(&e.job.queue) {
                    q.allocated.add(&e.task.resreq.without_pods());
                }
            })),
            Some(Box::new(move |e| {
                if let Some(q) = d.borrow_mut().get_mut(&e.job.queue) {
                    q.allocated.sub(&e.task.resreq.without_pods());
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
}
