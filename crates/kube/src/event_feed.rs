//! Events as the index reports them: what the scheduler tells users about their pods,
//! PodGroups and queues. `Events::report` deduplicates (one event per object and reason
//! until its message changes) and hands each event to an `EventSink`: the publisher
//! (`events`), which writes them to the API server on its own. The index knows only this
//! front, never the publisher.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;

use super::leadership::Leadership;

/// Whether an event reports something normal or a problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// One event to publish.
#[derive(Clone, Debug)]
pub struct Event {
    pub regarding: ObjectReference,
    pub type_: EventType,
    pub reason: String,
    pub note: String,
}

/// Where events go once reported: the publisher (`events::Publisher`), which owns the
/// writing; the index only hands them on.
pub trait EventSink: Send {
    fn publish(&self, event: Event);
}

/// The deduplicating front of the publisher, kept in the index.
#[derive(Default)]
pub struct Events {
    /// Last message sent per object uid and reason.
    reported: HashMap<String, HashMap<String, String>>,
    sink: Option<Box<dyn EventSink>>,
    /// A standby tells nobody anything (the leader does), and does not remember what it
    /// did not say.
    leadership: Option<Arc<Leadership>>,
    /// Events reported where no publisher runs (unit tests), newest last.
    #[cfg(test)]
    pub(crate) kept: Vec<Event>,
}

impl Events {
    /// Events handed to `sink`, said only while `leadership` leads.
    pub fn to(sink: Box<dyn EventSink>, leadership: Arc<Leadership>) -> Self {
        Events {
            sink: Some(sink),
            leadership: Some(leadership),
            ..Default::default()
        }
    }

    fn standby(&self) -> bool {
        self.leadership.as_ref().is_some_and(|l| !l.is_leader())
    }

    /// Reports an event unless the object already got this reason with this message.
    pub fn report(
        &mut self,
        regarding: ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        if self.standby() {
            return;
        }
        let uid = regarding.uid.clone().unwrap_or_default();
        let last = self.reported.entry(uid).or_default();
        if last.get(reason) == Some(&note) {
            return;
        }
        last.insert(reason.to_string(), note.clone());
        self.send(Event {
            regarding,
            type_,
            reason: reason.to_string(),
            note,
        });
    }

    /// Sends an event even if it repeats the last one (something happened again: a bind).
    pub fn send(&mut self, event: Event) {
        if self.standby() {
            return;
        }
        let Some(sink) = &self.sink else {
            #[cfg(test)]
            self.kept.push(event);
            return;
        };
        sink.publish(event);
    }

    /// Forgets an object that is gone (its uid), so memory follows the cluster.
    pub fn forget(&mut self, uid: &str) {
        self.reported.remove(uid);
    }

    /// Forgets what `uid` was told for `reason`: the problem it reported is gone, so the
    /// same problem coming back is news again.
    pub fn forget_reason(&mut self, uid: &str, reason: &str) {
        if let Some(last) = self.reported.get_mut(uid) {
            last.remove(reason);
            if last.is_empty() {
                self.reported.remove(uid);
            }
        }
    }

    /// What `uid` was last told for `reason`.
    #[cfg(test)]
    pub fn last(&self, uid: &str, reason: &str) -> Option<&str> {
        self.reported.get(uid)?.get(reason).map(String::as_str)
    }
}

pub fn pod_ref(ns: &str, name: &str, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(ns.into()),
        name: Some(name.into()),
        uid: Some(uid.into()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_repeats_only_when_its_message_changes_and_a_forgotten_object_starts_over() {
        let mut events = Events::default();
        let r = pod_ref("ns", "p", "u1");
        events.report(
            r.clone(),
            EventType::Warning,
            "FailedScheduling",
            "a".into(),
        );
        events.report(
            r.clone(),
            EventType::Warning,
            "FailedScheduling",
            "a".into(),
        );
        events.report(r.clone(), EventType::Warning, "Other", "a".into());
        events.report(
            r.clone(),
            EventType::Warning,
            "FailedScheduling",
            "b".into(),
        );
        assert_eq!(events.kept.len(), 3);
        events.forget_reason("u1", "Other");
        events.report(r.clone(), EventType::Warning, "Other", "a".into());
        assert_eq!(
            events.kept.len(),
            4,
            "a problem that went and came back is news"
        );
        events.forget("u1");
        assert!(events.reported.is_empty(), "nothing kept for a gone object");
        events.report(r, EventType::Warning, "FailedScheduling", "b".into());
        assert_eq!(events.kept.len(), 5);
    }
}
