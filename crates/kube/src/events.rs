//! The event publisher: one task writes the events the index reports (through its
//! `event_feed::Events` front) to the API server, from a bounded queue: when the API server
//! is slow or down, events wait and retry with back-off, and past the bound the newest are
//! dropped (counted, and said once in the log) instead of piling up in memory.

use std::sync::Arc;
use std::time::Duration;

use ::kube::api::{Api, PostParams};
use ::kube::Client;
use k8s_openapi::api::events::v1::Event as ApiEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use tokio::sync::mpsc;

pub use super::event_feed::{pod_ref, Event, EventSink, EventType, Events};
use super::in_flight::{InFlight, BINDS_FIRST_LIMIT, BINDS_SEEN_LIMIT};
use super::leadership::Leadership;
use super::metrics::Metrics;
use super::retry::{cause_of, warn_limited, Failure, Gate};

/// How many events may wait for the API server: a first cycle on 5,000 pending gangs
/// reports one Scheduled event each at once (4,096 dropped some); an event waiting costs
/// well under 1 KB.
const QUEUE_BOUND: usize = 16_384;
/// How long one event is retried before it is dropped.
const GIVE_UP_AFTER: Duration = Duration::from_secs(60);

/// The publisher's end of the queue, as the index's `EventSink`.
pub struct Publisher(mpsc::Sender<Event>);

impl EventSink for Publisher {
    fn publish(&self, event: Event) {
        if self.0.try_send(event).is_err() {
            warn_limited(
                "event dropped",
                "the API server does not keep up with events; the queue is full",
            );
        }
    }
}

/// Starts the publisher task; returns the index's front that feeds it.
pub fn start(
    client: Client,
    instance: String,
    metrics: Arc<Metrics>,
    gate: Arc<Gate>,
    in_flight: Arc<InFlight>,
    leadership: Arc<Leadership>,
) -> Events {
    let (tx, rx) = mpsc::channel(QUEUE_BOUND);
    tokio::spawn(publish_all(client, instance, metrics, gate, in_flight, rx));
    Events::to(Box::new(Publisher(tx)), leadership)
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
            tokio::time::sleep(super::in_flight::BINDS_FIRST).await;
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
