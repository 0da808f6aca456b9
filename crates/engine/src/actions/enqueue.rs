//! enqueue: admits Pending gangs (PodGroup Pending → Inqueue) in queue and job order when
//! the plugins agree they can be admitted (JobEnqueueable). Operators such as the
//! training-operator create their pods only after this happens. Closed and Closing queues,
//! and queues whose parent chain is broken, admit none (`Session::queue_blocked`).

use crate::conf::{ArgError, Arguments, NoArguments};
use crate::framework::fit::device_quota_note;
use crate::framework::{Action, Session};
use crate::model::resource::format_amount;
use crate::model::{JobId, PodGroupPhase};

pub struct Enqueue;

/// Takes no arguments.
pub fn build(args: &Arguments) -> Result<Box<dyn Action>, ArgError> {
    args.parse::<NoArguments>()?;
    Ok(Box::new(Enqueue))
}

impl Action for Enqueue {
    fn name(&self) -> &'static str {
        "enqueue"
    }

    fn execute(&self, ssn: &mut Session) {
        let unadmitted = ssn.state().tally().unadmitted().clone();
        let mut groups = ssn.jobs_by_queue(&unadmitted, |s, id| {
            s.job(id).phase == PodGroupPhase::Pending
        });
        for (queue, jobs) in groups.iter_mut() {
            let blocked = ssn.queue(queue).and_then(|q| ssn.queue_blocked(q));
            if let Some(why) = blocked {
                for id in jobs.drain(..) {
                    ssn.record_job_note(id, format!("not admitted: {why}"));
                }
            }
            jobs.reverse(); // pop() takes from the front of job order
        }
        while let Some(queue) =
            ssn.next_queue(groups.iter().filter(|(_, j)| !j.is_empty()).map(|(q, _)| q))
        {
            let Some(id) = groups.get_mut(&queue).and_then(Vec::pop) else {
                break;
            };
            if ssn.job_enqueueable(id) {
                ssn.enqueue_job(id);
            } else {
                let why = admission_blocker(ssn, id, &queue);
                ssn.record_job_note(id, why);
            }
        }
    }
}

/// Why a gang is not admitted, naming the minResources keys the schedulable nodes cannot
/// hold at all (with their total, which changes only with nodes), else those that do not
/// fit what is free now; when every key fits, its
/// queue (capability, deserved share) or the gangs admitted before it hold it back.
fn admission_blocker(ssn: &Session, id: JobId, queue: &str) -> String {
    let need = ssn.job(id).min_request();
    let tally = ssn.state().tally();
    let total = tally.schedulable_allocatable();
    let free = total.minus(tally.schedulable_used());
    let (mut never, mut not_now) = (Vec::new(), Vec::new());
    for (name, want) in need.dimensions() {
        let amount = |v: i64| format_amount(name, v.max(0));
        if want > total.get(name) {
            never.push(format!(
                "{name} {} ({} in all)",
                amount(want),
                amount(total.get(name))
            ));
        } else if want > free.get(name) {
            // Not the free amount: it changes every cycle, and the message is written to
            // the PodGroup whenever it changes.
            not_now.push(format!("{name} {}", amount(want)));
        }
    }
    if !never.is_empty() {
        format!(
            "not admitted: its minResources ask for more than the schedulable nodes have: {}",
            never.join(", ")
        )
    } else if !not_now.is_empty() {
        format!(
            "not admitted: its minResources do not fit what is free now: {}",
            not_now.join(", ")
        )
    } else {
        let mut why = format!("not admitted: queue {queue:?} cannot hold its minResources yet (its capability, deserved share or the gangs admitted before it)");
        let capability = ssn.queue(queue).and_then(|q| q.capability.as_ref());
        if let Some(note) = device_quota_note(capability, &ssn.job(id).min_device_charge()) {
            why.push_str(&format!("; its devices: {note}"));
        }
        why
    }
}

#[cfg(test)]
mod tests {
    use crate::model::{PodGroupPhase, QueueState};
    use crate::testkit::*;

    const ENQUEUE: &str = "actions: enqueue\ntiers:\n- plugins:\n  - name: gang\n- plugins:\n  - name: overcommit\n    arguments: {overcommit-factor: 1.0}\n  - name: proportion\n";

    fn phase(result: &crate::framework::SessionResult, job: &str) -> Option<PodGroupPhase> {
        result
            .job_updates
            .iter()
            .find(|u| *u.job == *job)
            .and_then(|u| u.phase)
    }

    #[test]
    fn admissible_gangs_go_from_pending_to_inqueue() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "8")]);
        let plain = Gang::new("plain", 2)
            .tasks("", 2, &[("cpu", "1")])
            .apply(&mut cache);
        let sized = Gang::new("sized", 2)
            .min_resources(&[("cpu", "4")])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(ENQUEUE));
        assert_eq!(phase(&result, &plain), Some(PodGroupPhase::Inqueue));
        assert_eq!(
            phase(&result, &sized),
            Some(PodGroupPhase::Inqueue),
            "admitted before any pod exists (training-operator waits for this)"
        );
        assert!(result.binds.is_empty(), "enqueue binds nothing");
        // Applied back, the phase sticks and is not reported again.
        apply_result(&mut cache, &result);
        let again = run_cycle(&cache, Some(ENQUEUE));
        assert_eq!(phase(&again, &plain), None);
    }

    #[test]
    fn a_closed_queue_admits_none() {
        let mut cache = cache_with_default_queue();
        let mut closed = queue("closed", 1);
        closed.state = QueueState::Closed;
        cache.apply_queue(closed);
        add_nodes(&mut cache, "n", 1, &[("cpu", "8")]);
        let job = Gang::new("j", 1)
            .queue("closed")
            .tasks("", 1, &[("cpu", "1")])
            .apply(&mut cache);
        let result = run_cycle(&cache, None);
        assert_eq!(phase(&result, &job), None);
        assert!(result.binds.is_empty());
        assert_eq!(
            condition_message(&result, &job).as_deref(),
            Some("not admitted: queue \"closed\" is closed")
        );
    }

    #[test]
    fn not_admitted_while_min_resources_do_not_fit() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "8"), ("memory", "16Gi")]);
        let first = Gang::new("first", 1)
            .created(1)
            .min_resources(&[("cpu", "6")])
            .apply(&mut cache);
        let second = Gang::new("second", 1)
            .created(2)
            .min_resources(&[("cpu", "6")])
            .apply(&mut cache);
        let too_big = Gang::new("too-big", 1)
            .created(3)
            .min_resources(&[("cpu", "1"), ("memory", "32Gi")])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(ENQUEUE));
        assert_eq!(phase(&result, &first), Some(PodGroupPhase::Inqueue));
        assert_eq!(phase(&result, &second), None, "6 + 6 cpu > 8");
        assert_eq!(phase(&result, &too_big), None);
        let msg = condition_message(&result, &second).unwrap();
        assert!(msg.starts_with("not admitted"), "{msg}");
        // Named: the key no node set holds, with how much there is.
        let msg = condition_message(&result, &too_big).unwrap();
        assert!(
            msg.contains("more than the schedulable nodes have: memory 32Gi (16Gi in all)"),
            "{msg}"
        );
    }

    #[test]
    fn already_admitted_gangs_are_left_alone() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "1")]);
        let job = Gang::new("running", 1)
            .phase(PodGroupPhase::Inqueue)
            .min_resources(&[("cpu", "100")])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(ENQUEUE));
        assert_eq!(phase(&result, &job), None);
        assert_eq!(condition_message(&result, &job), None);
    }
}
