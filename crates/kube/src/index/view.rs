//! What the writers (the binder, the status writer, the DRA and claim writers, the debug
//! API) see of the index: a read-only view, and one way back in, `IndexView::answer`, for
//! what the API server answered them. An answer changes the index through the same
//! functions a watch event does (`note_pod_answer`, `apply_queue_answer`, the kinds'
//! `apply_answer`, `apply_resource_claim`), or drops what a cycle assumed for a write that
//! did not go through; a writer never reaches into the cache, the verdicts or the stores
//! otherwise. The cycle (driver/) alone decides, with the index itself.

use std::any::Any;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;

use super::dra_commits::{call_off, GangCommit};
use super::{lock, Index, Target};
use crate::dialects::kind::{Dialect, GroupAnswers, GroupTarget};
use crate::dialects::volcano::Queue;
use crate::event_feed::{pod_ref, Event, EventType};
use crate::framework::{Bind, Eviction};

/// The writers' handle on the index (cheap to clone into each write's task).
#[derive(Clone)]
pub struct IndexView(Arc<Mutex<Index>>);

impl IndexView {
    pub fn new(index: Arc<Mutex<Index>>) -> Self {
        IndexView(index)
    }

    /// Reads the index under its lock; keep `f` short, the watches wait meanwhile.
    pub fn read<R>(&self, f: impl FnOnce(&Index) -> R) -> R {
        f(&lock(&self.0))
    }

    /// Applies what the API server answered a writer, under the index's lock.
    pub fn answer<R>(&self, f: impl FnOnce(&mut Answers<'_>) -> R) -> R {
        f(&mut Answers(&mut lock(&self.0)))
    }
}

impl GroupAnswers for IndexView {
    fn apply_answer(&self, dialect: Dialect, key: &str, object: &dyn Any) {
        GroupTarget::apply_answer(&mut *lock(&self.0), dialect, key, object)
    }
}

/// The index as a writer's answer may change it; it reads as the index does.
pub struct Answers<'a>(&'a mut Index);

impl Deref for Answers<'_> {
    type Target = Index;
    fn deref(&self) -> &Index {
        self.0
    }
}

impl Answers<'_> {
    /// A pod as a write or read of it returned it.
    pub fn pod(&mut self, pod: &Pod) {
        self.0.note_pod_answer(pod)
    }

    /// A Queue as a write or read of it returned it.
    pub fn queue(&mut self, queue: &Queue) {
        self.0.apply_queue_answer(queue)
    }

    /// A ResourceClaim as a write of its allocation returned it.
    pub fn resource_claim(&mut self, claim: &ResourceClaim) {
        self.0.apply_resource_claim(claim);
    }

    /// The object a status write targets is gone (404): forgotten now, so nothing writes it
    /// again before its watch event comes.
    pub fn gone(&mut self, target: &Target) {
        self.0.forget_gone(target)
    }

    /// An event to publish about what a write did.
    pub fn event(&mut self, event: Event) {
        self.0.events.send(event)
    }

    /// A bind or an eviction that did not happen (the pod is gone, or the API server
    /// refused): the room the cycle assumed for it is free again.
    pub fn not_done(&mut self, task: &str) {
        self.0.cache.drop_assumption(task)
    }

    /// A bind the API server refused: its room is free again, the gang's recovery is told
    /// (a gang left short of its minimum is completed first, or released), and the pod
    /// gets a FailedScheduling event.
    pub fn bind_refused(&mut self, b: &Bind, why: &str, now_ms: i64) {
        self.0.cache.drop_assumption(&b.task);
        let member = format!("{}/{}", b.namespace, b.name);
        self.0.recovery.bind_refused(&b.job, &member, why, now_ms);
        self.0.events.report(
            pod_ref(&b.namespace, &b.name, &b.task),
            EventType::Warning,
            "FailedScheduling",
            format!("binding to {} failed: {why}", b.node),
        );
    }

    /// An eviction the API server refused: the victim keeps running (the room the cycle
    /// assumed it would free is taken again), and it gets an EvictionFailed event.
    pub fn eviction_refused(&mut self, e: &Eviction, err: &str) {
        self.0.cache.drop_assumption(&e.task);
        self.0.events.send(Event {
            regarding: pod_ref(&e.namespace, &e.name, &e.task),
            type_: EventType::Warning,
            reason: "EvictionFailed".into(),
            note: format!("{}: {err}", e.reason),
        });
    }

    /// A claim's selected-node annotation could not be set: the gang waiting for it is
    /// called off at the next cycle.
    pub fn claim_patch_failed(&mut self, gang: &str, why: String) {
        self.0.provisioning.fail(gang, why)
    }

    /// Every claim of a gang's was written: its failures in a row start again from none.
    pub fn devices_written(&mut self, gang: &str) {
        self.0.dra.attempts.remove(gang);
    }

    /// A claim write of a gang's failed (the others rolled back): the gang gives everything
    /// back and backs off (`dra_commits::call_off`).
    pub fn devices_called_off(&mut self, c: &GangCommit, why: &str, now_ms: i64) {
        call_off(self.0, c, why, now_ms)
    }
}
