//! Gang bind recovery. Binding is one API call per pod, so the API server can refuse one
//! member of a gang whose others are bound (an admission policy, a node gone between the
//! decision and the bind, a quota): the gang is then below its minimum, holding room for
//! nothing. Such a gang is marked `recovering`, so its missing members are placed before
//! any other gang's; if it is still short after `timeout`, its bound members are released
//! through the eviction API (or kept, if so configured), and its condition says which
//! member could not be bound and why.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::framework::{ClusterState, ConditionKind};
use crate::model::{TaskStatus, Timestamp};

/// What to do with a gang that stays short.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ShortGangPolicy {
    /// Evict its bound members, so they hold no room for a gang that cannot start.
    Release,
    /// Leave them bound (the gang completes when its missing members fit).
    Keep,
}

/// A gang a refused bind left short, since when, and the latest refusal.
#[derive(Clone, Debug, PartialEq)]
struct Short {
    since: Timestamp,
    member: String,
    reason: String,
}

/// Gangs left short, and the rule for them.
#[derive(Debug)]
pub struct Recovery {
    gangs: HashMap<String, Short>,
    /// What the condition of a released gang adds, until it is scheduled again.
    notes: HashMap<String, String>,
    pub timeout: Duration,
    pub policy: ShortGangPolicy,
}

impl Default for Recovery {
    fn default() -> Self {
        Recovery {
            gangs: HashMap::new(),
            notes: HashMap::new(),
            timeout: Duration::from_secs(30),
            policy: ShortGangPolicy::Release,
        }
    }
}

/// A short gang whose time ran out: the members to evict and what to tell.
#[derive(Clone, Debug, PartialEq)]
pub struct Release {
    pub gang: String,
    /// Pod uids of its bound members (empty under `ShortGangPolicy::Keep`).
    pub members: Vec<Arc<str>>,
    /// Pod uids of its members whose binds are still out (held back after a refusal):
    /// called off, so that none binds alone after the others went.
    pub binding: Vec<Arc<str>>,
    pub message: String,
}

impl Recovery {
    /// The bind of `member` (`namespace/name`) of `gang` was refused for `reason`.
    pub fn bind_refused(&mut self, gang: &str, member: &str, reason: &str, now: Timestamp) {
        let entry = self.gangs.entry(gang.to_string()).or_insert(Short {
            since: now,
            member: String::new(),
            reason: String::new(),
        });
        entry.member = member.to_string();
        entry.reason = reason.to_string();
    }

    pub fn forget(&mut self, gang: &str) {
        self.gangs.remove(gang);
        self.notes.remove(gang);
    }

    /// Keeps `message` in the gang's condition until it is scheduled again.
    pub fn note(&mut self, gang: &str, message: &str) {
        self.notes.insert(gang.to_string(), message.to_string());
    }

    /// What to add to a gang's new condition of `kind`: the note of its release, while it
    /// is not scheduled again (a Scheduled condition ends it).
    pub fn noted(&mut self, gang: &str, kind: ConditionKind) -> Option<&str> {
        if kind == ConditionKind::Scheduled {
            self.notes.remove(gang);
            return None;
        }
        self.notes.get(gang).map(String::as_str)
    }

    /// The gangs being recovered.
    pub fn gangs(&self) -> impl Iterator<Item = &str> {
        self.gangs.keys().map(String::as_str)
    }

    /// Once per cycle, before it: a gang that is whole again, or has nothing bound, or is
    /// gone, is no longer short; one short for `timeout` is released. Returns the releases.
    pub fn review(&mut self, state: &ClusterState, now: Timestamp) -> Vec<Release> {
        let mut releases = Vec::new();
        let timeout = self.timeout.as_millis() as i64;
        self.gangs.retain(|gang, short| {
            let Some(id) = state.job_by_uid(gang) else {
                return false;
            };
            let job = state.job(id);
            // What the API server has bound (a bind held back after a refusal is not).
            let placed = |s: TaskStatus| {
                matches!(
                    s,
                    TaskStatus::Bound | TaskStatus::Running | TaskStatus::Succeeded
                )
            };
            let count = job.tasks().iter().filter(|t| placed(t.status)).count() as u32;
            let binding = job.count(TaskStatus::Binding);
            // Whole again, or nothing bound nor on its way: nothing to recover.
            if count >= job.min_member || count + binding == 0 {
                return false;
            }
            if now - short.since < timeout {
                return true;
            }
            let waited = humantime::format_duration(Duration::from_millis(timeout as u64));
            let (members, what) = match self.policy {
                ShortGangPolicy::Release => (
                    job.tasks()
                        .iter()
                        .filter(|t| matches!(t.status, TaskStatus::Bound | TaskStatus::Running))
                        .map(|t| t.uid.clone())
                        .collect(),
                    "its bound members are released",
                ),
                ShortGangPolicy::Keep => (Vec::new(), "its bound members are kept"),
            };
            let binding = job
                .tasks()
                .iter()
                .filter(|t| t.status == TaskStatus::Binding)
                .map(|t| t.uid.clone())
                .collect();
            releases.push(Release {
                gang: gang.clone(),
                members,
                binding,
                message: format!(
                    "gang has {count}/{} members bound after {waited}: the bind of {} was refused ({}); {what}",
                    job.min_member, short.member, short.reason
                ),
            });
            false
        });
        releases
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Cache;
    use crate::testkit::*;

    /// A gang of 3 (minimum 3), `running` of them running, on one node.
    fn world(running: usize) -> Cache {
        let mut c = Cache::new();
        c.apply_node(node("n1", &[("cpu", "8"), ("memory", "8Gi")]));
        let nodes = vec!["n1"; running];
        Gang::new("g", 3)
            .tasks("", 3, &[("cpu", "1")])
            .running_on(&nodes)
            .apply(&mut c);
        c
    }

    #[test]
    fn a_short_gang_is_released_after_the_timeout_and_a_whole_one_is_forgotten() {
        let mut r = Recovery::default();
        let c = world(2);
        r.bind_refused("default/g", "default/g-2", "denied by policy", 1_000);
        assert!(r.review(c.state(), 20_000).is_empty(), "still within 30s");
        let released = r.review(c.state(), 31_000);
        assert_eq!(released.len(), 1);
        assert_eq!(released[0].members.len(), 2, "both bound members go");
        assert!(
            released[0].message.contains("default/g-2")
                && released[0].message.contains("denied by policy"),
            "{}",
            released[0].message
        );
        assert_eq!(r.gangs().count(), 0, "released once");

        r.bind_refused("default/g", "default/g-2", "x", 1_000);
        let whole = world(3);
        assert!(r.review(whole.state(), 40_000).is_empty());
        assert_eq!(r.gangs().count(), 0, "whole again: nothing to recover");
    }

    #[test]
    fn keep_tells_but_evicts_nothing() {
        let mut r = Recovery {
            policy: ShortGangPolicy::Keep,
            ..Default::default()
        };
        r.bind_refused("default/g", "default/g-2", "x", 0);
        let released = r.review(world(1).state(), 60_000);
        assert!(released[0].members.is_empty());
        assert!(released[0].message.contains("kept"));
    }
}
