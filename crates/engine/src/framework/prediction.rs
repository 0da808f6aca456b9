//! Predicted start times: for every waiting gang, when the reservation engine (the one EASY
//! backfill uses, `reservation.rs`) expects it to start, by the runtime estimates of the
//! pods that run and of the gangs ahead of it.
//!
//! The gangs are planned one after another in job order (the JobOrder votes: priority, then
//! creation): each gets the earliest time, from now or an estimated end, at which its pods
//! fit on the nodes as they will be then — the pods that ended by then gone, and every gang
//! planned before it whose estimated run overlaps its own in place. That is conservative
//! backfill: a gang may be planned before one ahead of it only where it does not touch that
//! gang's room. A gang without an estimate is planned to run forever, so the gangs after it
//! on its nodes get no time: the prediction is then "unknown" and says why.
//!
//! Pure and bounded: no clock (the session's `now`), at most `PredictOptions::max_gangs`
//! gangs and `MAX_TRIES` placement attempts per gang each session.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::reservation::Release;
use super::session::Session;
use crate::model::{JobId, NodeId, NodeInfo, NodeTask, Resource, TaskRef, TaskStatus, Timestamp};

/// How many gangs get a prediction each session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PredictOptions {
    /// The first this many waiting gangs in job order; those after them are "unknown".
    pub max_gangs: usize,
}

impl Default for PredictOptions {
    fn default() -> Self {
        PredictOptions { max_gangs: 64 }
    }
}

/// Placement attempts per gang: one per candidate time that passes the cheap check.
const MAX_TRIES: usize = 64;

/// When a waiting gang is expected to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PredictedStart {
    At(Timestamp),
    /// No time can be given; the reason says which estimate is missing.
    Unknown(String),
}

impl PredictedStart {
    /// What the `rust-batch.io/predicted-start` annotation holds when predicted at `now`:
    /// an RFC 3339 time, "now", or "unknown: <reason>".
    pub fn annotation_value(&self, now: Timestamp) -> String {
        match self {
            Self::At(at) if *at <= now => "now".into(),
            Self::At(at) => rfc3339(*at),
            Self::Unknown(why) => format!("unknown: {why}"),
        }
    }

    /// The prediction as a gang's message says it when made at `now`. A gang whose room is
    /// free now by the estimates (pods overrunning theirs count as ending now) is "now",
    /// not the cycle's time: the message, and so the object, would change every cycle.
    pub fn stated(&self, now: Timestamp) -> String {
        match self {
            Self::At(at) if *at <= now => "start predicted: now (by runtime estimates)".into(),
            _ => self.to_string(),
        }
    }
}

impl fmt::Display for PredictedStart {
    /// "start predicted at 2026-01-01T10:25:00Z (by runtime estimates)" or "start
    /// predicted: unknown (…)". An absolute time: the message stays put from cycle to cycle
    /// while the estimates hold.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::At(at) => write!(
                f,
                "start predicted at {} (by runtime estimates)",
                rfc3339(*at)
            ),
            Self::Unknown(why) => write!(f, "start predicted: unknown ({why})"),
        }
    }
}

fn rfc3339(at: Timestamp) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(at.max(0) as u64);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// A gang planned to start at `start`, holding `tasks` until `end` (None: no estimate).
struct Planned {
    uid: Arc<str>,
    start: Timestamp,
    end: Option<Timestamp>,
    request: Resource,
    tasks: Vec<(NodeId, Arc<str>, NodeTask)>,
}

impl Planned {
    /// Whether it holds its room at some time in `[from, until)` (`until` None: forever).
    fn overlaps(&self, from: Timestamp, until: Option<Timestamp>) -> bool {
        self.end.is_none_or(|e| e > from) && until.is_none_or(|u| self.start < u)
    }
}

impl Session {
    /// The predicted start of every waiting gang (pending members, valid), by uid, in job
    /// order. Call it once the actions ran: what they placed counts as running.
    pub fn predict_starts(&mut self, opts: &PredictOptions) -> Vec<(Arc<str>, PredictedStart)> {
        let mut waiting: Vec<JobId> = self
            .state()
            .tally()
            .pending()
            .iter()
            .filter(|id| {
                let job = self.job(*id);
                job.count(TaskStatus::Pending) > 0 && self.queue(&job.queue).is_some()
            })
            .filter(|id| self.job_valid(*id).is_none())
            .collect();
        if waiting.is_empty() {
            return Vec::new();
        }
        waiting.sort_by(|a, b| self.job_order(*a, *b));
        let releases = self.releases();
        let endless = self.endless_pods();
        let mut planned: Vec<Planned> = Vec::new();
        let mut out = Vec::with_capacity(waiting.len());
        for (i, id) in waiting.into_iter().enumerate() {
            let uid = self.job(id).uid.clone();
            let prediction = if i >= opts.max_gangs {
                PredictedStart::Unknown(format!(
                    "only the first {} waiting gangs are predicted",
                    opts.max_gangs
                ))
            } else {
                self.predict_one(id, &releases, &endless, &mut planned)
            };
            out.push((uid, prediction));
        }
        out
    }

    fn predict_one(
        &mut self,
        id: JobId,
        releases: &[Release],
        endless: &Endless,
        planned: &mut Vec<Planned>,
    ) -> PredictedStart {
        if self.job(id).policy.group.len() > 1 {
            return PredictedStart::Unknown("it binds only together with its gang group".into());
        }
        let pending = self.tasks_in(id, TaskStatus::Pending);
        let queue = self.job(id).queue.clone();
        if let Some(q) = self.queue(&queue) {
            if let Some(why) = self.queue_blocked(q) {
                return PredictedStart::Unknown(why);
            }
            if pending.iter().any(|t| !self.allocatable(q, *t)) {
                return PredictedStart::Unknown(format!(
                    "queue {queue:?} cannot take it within its capability"
                ));
            }
        }
        let own = self.gang_estimate(id, &pending);
        let mut need = Resource::new();
        for t in &pending {
            need.add(&self.task(*t).resreq);
        }
        let need = need.without_pods();
        let now = self.now;
        let mut times: Vec<Timestamp> = std::iter::once(now)
            .chain(releases.iter().map(|r| r.end))
            .chain(planned.iter().filter_map(|p| p.end))
            .filter(|t| *t >= now)
            .collect();
        times.sort_unstable();
        times.dedup();
        // The nodes as they will be, releases applied in time order as the times advance.
        let mut base: BTreeMap<NodeId, NodeInfo> = BTreeMap::new();
        let mut free = self.cluster_free().clone();
        let mut next_release = 0;
        let mut tries = 0;
        for at in times {
            while next_release < releases.len() && releases[next_release].end <= at {
                let r = &releases[next_release];
                next_release += 1;
                let node = base
                    .entry(r.node)
                    .or_insert_with(|| self.node(r.node).clone());
                if let Some(t) = node.tasks.get(&r.uid) {
                    if node.schedulable() {
                        free.add(&t.resreq);
                    }
                }
                node.remove_task(&r.uid);
            }
            let until = own.map(|e| at.saturating_add(e));
            let overlapping: Vec<&Planned> =
                planned.iter().filter(|p| p.overlaps(at, until)).collect();
            let mut free_then = free.clone();
            for p in &overlapping {
                free_then.sub(&p.request);
            }
            if !need.fits(&free_then) {
                continue;
            }
            if tries == MAX_TRIES {
                return PredictedStart::Unknown(format!(
                    "no room found in its first {MAX_TRIES} candidate times"
                ));
            }
            tries += 1;
            let mut scratch: BTreeMap<NodeId, NodeInfo> = BTreeMap::new();
            for p in &overlapping {
                for (n, task_uid, task) in &p.tasks {
                    scratch
                        .entry(*n)
                        .or_insert_with(|| base.get(n).unwrap_or_else(|| self.node(*n)).clone())
                        .add_task(task_uid.clone(), task.clone());
                }
            }
            let Some(placed) = self.place_pending(id, &base, &mut scratch) else {
                continue;
            };
            let job_uid = self.job(id).uid.clone();
            let mut request = Resource::new();
            for (_, t) in &placed {
                request.add(&self.task(*t).resreq);
            }
            let tasks = placed
                .into_iter()
                .map(|(n, t)| {
                    let task = self.task(t);
                    let held = NodeTask {
                        status: TaskStatus::Allocated,
                        ..NodeTask::of(task, Some(job_uid.clone()))
                    };
                    (n, task.uid.clone(), held)
                })
                .collect();
            planned.push(Planned {
                uid: job_uid,
                start: at,
                end: until,
                request: request.without_pods(),
                tasks,
            });
            return PredictedStart::At(at);
        }
        PredictedStart::Unknown(endless.reason(planned))
    }

    /// How long the gang runs by its members' estimates (the longest), if every member
    /// has a usable one or its queue a default.
    fn gang_estimate(&self, id: JobId, pending: &[TaskRef]) -> Option<i64> {
        let job = self.job(id);
        let fallback = self
            .queue(&job.queue)
            .and_then(|q| q.default_runtime_estimate);
        let mut longest = 0;
        for t in pending {
            let e = self
                .task(*t)
                .checked_estimate()
                .ok()
                .flatten()
                .or(fallback)?;
            longest = longest.max(e);
        }
        Some(longest)
    }

    /// The pods that hold nodes with no known end.
    fn endless_pods(&self) -> Endless {
        let mut out = Endless::default();
        for (_, job) in self.state().jobs() {
            for t in job.tasks() {
                let holds = matches!(
                    t.status,
                    TaskStatus::Allocated
                        | TaskStatus::Binding
                        | TaskStatus::Bound
                        | TaskStatus::Running
                );
                if !holds || t.node.is_none() || self.task_end(job, t).is_some() {
                    continue;
                }
                out.count += 1;
                match t.checked_estimate() {
                    Err(problem) if out.bad.is_none() => {
                        out.bad = Some(format!("pod {}: {problem}", t.uid));
                    }
                    Ok(None) if out.missing.is_none() => out.missing = Some(t.uid.clone()),
                    _ => {}
                }
            }
        }
        out
    }
}

/// Running pods without a usable estimate: nothing is known to free their room.
#[derive(Default)]
struct Endless {
    count: usize,
    /// The first with no estimate at all.
    missing: Option<Arc<str>>,
    /// The first whose estimate was refused, and why.
    bad: Option<String>,
}

impl Endless {
    /// Why a gang that fits at no estimated end has no prediction.
    fn reason(&self, planned: &[Planned]) -> String {
        const HOW: &str = "(pod annotation rust-batch.io/runtime-estimate, \
                           activeDeadlineSeconds, or the queue's \
                           rust-batch.io/default-runtime-estimate)";
        if self.count > 0 {
            let example = match (&self.bad, &self.missing) {
                (Some(bad), _) => format!("{bad}, taken as missing"),
                (None, Some(uid)) => format!("e.g. pod {uid}"),
                (None, None) => String::new(),
            };
            return format!(
                "{} running pod(s) have no usable runtime estimate {HOW}: {example}",
                self.count
            );
        }
        if let Some(p) = planned.iter().find(|p| p.end.is_none()) {
            return format!("gang {} ahead of it has no runtime estimate {HOW}", p.uid);
        }
        "its pods do not fit even once every running pod has ended".into()
    }
}

#[cfg(test)]
mod tests {
    use super::{PredictOptions, PredictedStart};
    use crate::cache::Cache;
    use crate::model::{PodGroupPhase, Timestamp};
    use crate::testkit::*;

    const EASY: &str = crate::conf_yaml!("enqueue, allocate, backfill"; ["priority", "gang"], ["predicates", "nodeorder"]);
    const GPU8: &[(&str, &str)] = &[("cpu", "32"), ("memory", "64Gi"), ("nvidia.com/gpu", "8")];
    const MIN: i64 = 60_000;

    fn predictions(cache: &Cache, now: Timestamp) -> Vec<(String, PredictedStart)> {
        let mut s = scheduler(Some(EASY));
        s.predict_starts(Some(PredictOptions::default()));
        s.run_cycle(cache.snapshot(), now)
            .predictions
            .into_iter()
            .map(|(uid, p)| (uid.to_string(), p))
            .collect()
    }

    fn running(cache: &mut Cache, name: &str, node: &str, gpus: &str, estimate: Option<i64>) {
        let mut g = Gang::new(name, 1)
            .phase(PodGroupPhase::Running)
            .tasks("", 1, &[("nvidia.com/gpu", gpus)])
            .running_on(&[node])
            .started(0);
        if let Some(e) = estimate {
            g = g.estimate(e);
        }
        g.apply(cache);
    }

    fn waiting(cache: &mut Cache, name: &str, created: i64, pods: usize, estimate: Option<i64>) {
        let mut g = Gang::new(name, pods as u32).created(created).tasks(
            "",
            pods,
            &[("nvidia.com/gpu", "8")],
        );
        if let Some(e) = estimate {
            g = g.estimate(e);
        }
        g.apply(cache);
    }

    #[test]
    fn gangs_in_line_are_planned_one_after_another_by_the_estimates() {
        // Two 8-GPU nodes, each busy: n0 until 20m, n1 until 30m. "first" (2 nodes) starts
        // when both are free (30m) and runs 60m; "second" (1 node) after it (90m): it
        // would fit at 20m on n0, but "first" holds n0 from 30m and "second" runs 60m.
        // "third" runs 5m: it fits on n0 from 20m to 25m, before "first" needs it.
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 2, GPU8);
        running(&mut cache, "a", "n-00000", "8", Some(20 * MIN));
        running(&mut cache, "b", "n-00001", "8", Some(30 * MIN));
        waiting(&mut cache, "first", 1, 2, Some(60 * MIN));
        waiting(&mut cache, "second", 2, 1, Some(60 * MIN));
        waiting(&mut cache, "third", 3, 1, Some(5 * MIN));
        let p = predictions(&cache, 1_000);
        assert_eq!(
            p,
            [
                ("default/first".into(), PredictedStart::At(30 * MIN)),
                ("default/second".into(), PredictedStart::At(90 * MIN)),
                ("default/third".into(), PredictedStart::At(20 * MIN)),
            ]
        );
    }

    #[test]
    fn the_head_gangs_prediction_is_its_reservation() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 2, GPU8);
        running(&mut cache, "a", "n-00000", "8", Some(20 * MIN));
        waiting(&mut cache, "big", 1, 2, Some(10 * MIN));
        let mut s = scheduler(Some(EASY));
        s.predict_starts(Some(PredictOptions::default()));
        let result = s.run_cycle(cache.snapshot(), 0);
        let reservation = result
            .job_updates
            .iter()
            .find_map(|u| u.reservation.clone())
            .unwrap();
        assert_eq!(
            result.predictions,
            [("default/big".into(), PredictedStart::At(reservation.from))]
        );
    }

    #[test]
    fn a_running_pod_without_an_estimate_makes_the_gangs_behind_it_unknown_and_says_which() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, GPU8);
        running(&mut cache, "forever", "n-00000", "8", None);
        waiting(&mut cache, "w", 1, 1, Some(MIN));
        let p = predictions(&cache, 0);
        let PredictedStart::Unknown(why) = &p[0].1 else {
            panic!("{p:?}")
        };
        assert!(
            why.contains("1 running pod(s) have no usable runtime estimate")
                && why.contains("pod default/forever-0"),
            "{why}"
        );
        assert!(p[0].1.to_string().starts_with("start predicted: unknown ("));
    }

    #[test]
    fn zero_and_over_a_year_estimates_are_named_and_taken_as_missing() {
        for (estimate, words) in [
            (0, "runtime estimate 0s is not positive"),
            (
                400 * 24 * 60 * MIN,
                "runtime estimate 1year 1month 4days 7h 26m 24s is over a year",
            ),
        ] {
            let mut cache = cache_with_default_queue();
            add_nodes(&mut cache, "n", 1, GPU8);
            running(&mut cache, "odd", "n-00000", "8", Some(estimate));
            waiting(&mut cache, "w", 1, 1, Some(MIN));
            let p = predictions(&cache, 0);
            let PredictedStart::Unknown(why) = &p[0].1 else {
                panic!("{p:?}")
            };
            assert!(
                why.contains(&format!("pod default/odd-0: {words}, taken as missing")),
                "{why}"
            );
        }
    }

    #[test]
    fn the_queues_default_estimate_stands_in_for_a_missing_one() {
        let mut cache = cache_with_default_queue();
        let mut q = queue("default", 1);
        q.default_runtime_estimate = Some(45 * MIN);
        cache.apply_queue(q);
        add_nodes(&mut cache, "n", 1, GPU8);
        running(&mut cache, "a", "n-00000", "8", None);
        waiting(&mut cache, "w", 1, 1, None);
        waiting(&mut cache, "v", 2, 1, None);
        let p = predictions(&cache, 0);
        assert_eq!(
            p,
            [
                ("default/w".into(), PredictedStart::At(45 * MIN)),
                ("default/v".into(), PredictedStart::At(90 * MIN)),
            ]
        );
    }

    #[test]
    fn a_gang_ahead_without_an_estimate_leaves_the_later_ones_unknown() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, GPU8);
        running(&mut cache, "a", "n-00000", "8", Some(10 * MIN));
        waiting(&mut cache, "endless", 1, 1, None);
        waiting(&mut cache, "later", 2, 1, Some(MIN));
        let p = predictions(&cache, 0);
        assert_eq!(p[0].1, PredictedStart::At(10 * MIN));
        let PredictedStart::Unknown(why) = &p[1].1 else {
            panic!("{p:?}")
        };
        assert!(
            why.contains("gang default/endless ahead of it has no runtime estimate"),
            "{why}"
        );
    }

    #[test]
    fn a_gang_larger_than_the_cluster_is_unknown_and_gangs_past_the_horizon_say_so() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, GPU8);
        running(&mut cache, "a", "n-00000", "8", Some(10 * MIN));
        waiting(&mut cache, "huge", 1, 2, Some(MIN));
        waiting(&mut cache, "small", 2, 1, Some(MIN));
        let mut s = scheduler(Some(EASY));
        s.predict_starts(Some(PredictOptions { max_gangs: 1 }));
        let p = s.run_cycle(cache.snapshot(), 0).predictions;
        assert_eq!(
            p[0].1,
            PredictedStart::Unknown(
                "its pods do not fit even once every running pod has ended".into()
            )
        );
        assert_eq!(
            p[1].1,
            PredictedStart::Unknown("only the first 1 waiting gangs are predicted".into())
        );
    }

    #[test]
    fn without_the_option_nothing_is_predicted_and_the_result_is_unchanged() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 2, GPU8);
        running(&mut cache, "a", "n-00000", "8", Some(20 * MIN));
        waiting(&mut cache, "first", 1, 2, Some(60 * MIN));
        waiting(&mut cache, "small", 2, 1, Some(5 * MIN));
        let plain = scheduler(Some(EASY)).run_cycle(cache.snapshot(), 0);
        assert!(plain.predictions.is_empty());
        let mut s = scheduler(Some(EASY));
        s.predict_starts(Some(PredictOptions::default()));
        let predicted = s.run_cycle(cache.snapshot(), 0);
        assert_eq!(plain.binds, predicted.binds);
        assert_eq!(plain.job_updates, predicted.job_updates);
        assert!(!predicted.predictions.is_empty());
    }

    #[test]
    fn the_message_and_annotation_spell_an_absolute_time() {
        let at = PredictedStart::At(90 * MIN);
        assert_eq!(
            at.to_string(),
            "start predicted at 1970-01-01T01:30:00Z (by runtime estimates)"
        );
        assert_eq!(at.annotation_value(0), "1970-01-01T01:30:00Z");
        assert_eq!(at.stated(0), at.to_string());
        assert_eq!(
            PredictedStart::Unknown("x".into()).annotation_value(0),
            "unknown: x"
        );
    }

    /// A prediction of "now" (room free by the estimates, or an overrunning pod taken as
    /// ending now) reads the same from cycle to cycle, so the object is not rewritten.
    #[test]
    fn a_start_due_now_reads_the_same_every_cycle() {
        for now in [90 * MIN, 91 * MIN, 120 * MIN] {
            let due = PredictedStart::At(now);
            assert_eq!(
                due.stated(now),
                "start predicted: now (by runtime estimates)"
            );
            assert_eq!(due.annotation_value(now), "now");
        }
    }
}
