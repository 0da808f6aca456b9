//! Events: what the scheduler tells users about their pods, PodGroups and queues.
//!
//! `Events::report` deduplicates (one event per object and reason until its message
//! changes) and hands the event to one publisher task through a bounded queue: when the API
//! server is slow or down, events wait and retry with back-off, and past the bound the
//! newest are dropped (counted, and said once in the log) instead of piling up in memory.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ::kube::api::{Api, PostParams};
use ::kube::Client;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as ApiEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use tokio::sync::mpsc;

use super::binder::{InFlight, BINDS_FIRST_LIMIT, BINDS_SEEN_LIMIT};
use super::leader::Leadership;
use super::metrics::Metrics;
use super::retry::{cause_of, warn_limited, Failure, Gate};

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

/// How many events may wait for the API server: a first cycle on 5,000 pending gangs
/// reports one Scheduled event each at once (4,096 dropped some); an event waiting costs
/// well under 1 KB.
const QUEUE_BOUND: usize = 16_384;
/// How long one event is retried before it is dropped.
const GIVE_UP_AFTER: Duration = Duration::from_secs(60);

/// The deduplicating front of the publisher.
#[derive(Default)]
pub struct Events {
    /// Last message sent per object uid and reason.
    reported: HashMap<String, HashMap<String, String>>,
    queue: Option<mpsc::Sender<Event>>,
    /// A standby tells nobody anything (the leader does), and does not remember what it
    /// did not say.
    leadership: Option<Arc<Leadership>>,
    /// Events reported where no publisher runs (unit tests), newest last.
    #[cfg(test)]
    pub(super) kept: Vec<Event>,
}

impl Events {
    /// Starts the publisher task.
    pub fn start(
        client: Client,
        instance: String,
        metrics: Arc<Metrics>,
        gate: Arc<Gate>,
        in_flight: Arc<InFlight>,
        leadership: Arc<Leadership>,
    ) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE_BOUND);
        tokio::spawn(publish_all(client, instance, metrics, gate, in_flight, rx));
        Events {
            queue: Some(tx),
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
        let Some(tx) = &self.queue else {
            #[cfg(test)]
            self.kept.push(event);
            return;
        };
        if tx.try_send(event).is_err() {
            warn_limited(
                "event dropped",
                "the API server does not keep up with events; the queue is full",
            );
        }
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

async fn publish_all(
    client: Client,
    instance: String,
    metrics: Arc<Metrics>,
    gate: Arc<Gate>,
    in_flight: Arc<InFlight>,
    mut rx: mpsc::Receiver<Event>,
) {
    while let Some(event) = rx.recv().await {
        if rx.is_empty() {
            // The first of a burst (a cycle's verdicts): the cycle's binds are sent first...
            tokio::time::sleep(super::status::BINDS_FIRST).await;
        }
        // ...and answered first, within reason; on a quiet API server, seen too (a gang's
        // Scheduled event is news once its pods show bound, see `BINDS_SEEN_LIMIT`).
        if in_flight.answered(BINDS_FIRST_LIMIT).await {
            in_flight
                .seen(BINDS_SEEN_LIMIT, || in_flight.all_seen())
                .await;
        }
        let body = api_event(&event, &instance);
        let ns = body.metadata.namespace.clone().unwrap_or_default();
        let api = Api::<ApiEvent>::namespaced(client.clone(), &ns);
        let started = tokio::time::Instant::now();
        loop {
            gate.pass().await;
            let sending = tokio::time::Instant::now();
            let sent = api.create(&PostParams::default(), &body).await;
            gate.record(&sent);
            metrics.api_write_timed("event", sending.elapsed(), sent.as_ref().err());
            match sent {
                Ok(_) => break,
                Err(e) => match Failure::of(&e) {
                    // The gate holds the retry back until the API server answers.
                    Failure::Transient if started.elapsed() < GIVE_UP_AFTER => {}
                    _ => {
                        warn_limited(
                            &format!("event not recorded ({})", cause_of(&e)),
                            &e.to_string(),
                        );
                        break;
                    }
                },
            }
        }
    }
}

/// An events.k8s.io/v1 Event. Every event is its own object: kube's `Recorder` folds events
/// with the same reason into a series that keeps the first note, which would show a stale
/// gang message in `kubectl describe`.
fn api_event(e: &Event, instance: &str) -> ApiEvent {
    let now = k8s_openapi::jiff::Timestamp::now();
    let ns = e
        .regarding
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into());
    let base = e.regarding.name.clone().unwrap_or_else(|| "object".into());
    ApiEvent {
        metadata: ObjectMeta {
            name: Some(format!("{base}.{:x}", now.as_nanosecond())),
            namespace: Some(ns),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        reporting_controller: Some("rust-batch".into()),
        reporting_instance: Some(instance.to_string()),
        action: Some("Scheduling".into()),
        reason: Some(e.reason.clone()),
        note: Some(e.note.chars().take(1000).collect()),
        type_: Some(match e.type_ {
            EventType::Normal => "Normal".into(),
            EventType::Warning => "Warning".into(),
        }),
        regarding: Some(e.regarding.clone()),
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
