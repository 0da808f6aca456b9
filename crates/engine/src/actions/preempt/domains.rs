//! Preemption for gangs that must stay inside topology domains: room is made inside one
//! allowed domain only, nothing evicted outside it. For a hard rule on the whole gang
//! (`GangDomains::allowed` of the HyperNodeOrder vote) that is one domain for the gang; for
//! a `subGroupPolicy` entry with a hard `networkTopology` it is one domain per subgroup
//! (the SubGroupDomains vote's `allowed`), different subgroups in different domains if need
//! be. Each candidate domain is tried and undone, and the one whose victims lose the least
//! work (then the first, narrowest first) is made again.

use std::collections::BTreeMap;

use super::{Attempt, Rules, WorkLost};
use crate::framework::{NodeSet, Session, Statement};
use crate::model::subgroup::{count_subgroups, subgroup_of};
use crate::model::{JobId, SubGroupKey, TaskRef, TaskStatus, TopologyMode};

/// How many allowed domains preemption tries for a hard gang, or for one hard subgroup.
const DOMAIN_CAP: usize = 16;

/// For a gang with a hard topology rule, the domains preemption may make room in
/// (`GangDomains::allowed`, at most `DOMAIN_CAP`); None for any other gang (room anywhere).
pub(super) fn hard_domains(ssn: &mut Session, job: JobId) -> Option<(Vec<NodeSet>, String)> {
    let pending = ssn.tasks_in(job, TaskStatus::Pending);
    let domains = ssn.gang_domains(job, &pending)?;
    if !domains.hard || domains.allowed.is_empty() {
        return None;
    }
    let mut allowed = domains.allowed;
    allowed.truncate(DOMAIN_CAP);
    Some((allowed, domains.rule))
}

/// Makes room for a hard gang inside one of its allowed domains. Whether the gang is
/// pipelined.
pub(super) fn evict_within_one_domain(
    stmt: &mut Statement,
    job: JobId,
    rules: &Rules,
    domains: &[NodeSet],
) -> bool {
    least_loss(stmt, domains, |stmt, set| {
        super::evict_for_gang_within(stmt, job, rules, Some(set.clone()));
        stmt.job_pipelined(job)
    })
}

/// Tries `make_room` inside each of `sets` and undoes it; makes it again in the set whose
/// evictions lose the least work (then the first). Whether it worked there.
fn least_loss(
    stmt: &mut Statement,
    sets: &[NodeSet],
    make_room: impl Fn(&mut Statement, &NodeSet) -> bool,
) -> bool {
    let mut best: Option<(WorkLost, usize)> = None;
    for (i, set) in sets.iter().enumerate() {
        let mark = stmt.mark();
        if make_room(stmt, set) {
            let lost = WorkLost::of(stmt, &stmt.evicted_since(mark));
            if best.is_none_or(|(b, _)| lost < b) {
                best = Some((lost, i));
            }
        }
        stmt.rollback_to(mark);
    }
    match best {
        Some((_, i)) => make_room(stmt, &sets[i]),
        None => false,
    }
}

/// Whether some `subGroupPolicy` entry of the gang asks its subgroups to stay inside a
/// domain.
pub(super) fn has_subgroup_domains(ssn: &Session, job: JobId) -> bool {
    ssn.job(job).subgroups.iter().any(|p| p.topology.is_some())
}

/// Whether some `subGroupPolicy` entry of the gang asks its subgroups to stay inside a
/// domain, hard.
pub(super) fn has_hard_subgroups(ssn: &Session, job: JobId) -> bool {
    ssn.job(job)
        .subgroups
        .iter()
        .filter_map(|p| p.topology.as_ref())
        .any(|t| t.mode == TopologyMode::Hard)
}

/// Makes room subgroup by subgroup, until the gang is pipelined: each subgroup still short
/// of whole gets what it lacks placed, inside one of its allowed domains when its policy's
/// `networkTopology` is hard, anywhere (inside `within`, the gang's own domain, if any)
/// otherwise; a subgroup that cannot be made whole keeps nothing of its try. The gang's
/// members in no subgroup come last.
pub(super) fn evict_by_subgroups(
    stmt: &mut Statement,
    job: JobId,
    rules: &Rules,
    within: Option<&NodeSet>,
) {
    let policies = stmt.job(job).subgroups.clone();
    let mut by_key: BTreeMap<Option<SubGroupKey>, Vec<TaskRef>> = BTreeMap::new();
    for t in stmt.tasks_in(job, TaskStatus::Pending) {
        by_key
            .entry(subgroup_of(&policies, &stmt.task(t).labels))
            .or_default()
            .push(t);
    }
    let held = |s: TaskStatus| s.is_ready() || s == TaskStatus::Pipelined;
    let before = count_subgroups(&policies, stmt.job(job).tasks(), held, |_| false);
    let loose = by_key.remove(&None);
    for (key, members) in by_key {
        let Some(key) = key else { continue };
        if stmt.job_pipelined(job) {
            return;
        }
        let had = before.get(&key).map_or(0, |c| c.placed);
        let need = policies[key.policy].size.saturating_sub(had) as usize;
        if need == 0 {
            continue;
        }
        let own = stmt
            .subgroup_domains(job, &key, &members)
            .filter(|d| d.hard);
        let whole_in = |stmt: &mut Statement, set: Option<NodeSet>| {
            make_part_whole(stmt, job, rules, set, &members, need)
        };
        match own {
            // A hard request nothing can meet (no allowed domain): no room is made for it.
            Some(d) => {
                let sets: Vec<NodeSet> = d
                    .allowed
                    .into_iter()
                    .take(DOMAIN_CAP)
                    .map(|set| intersect(set, within))
                    .collect();
                least_loss(stmt, &sets, |stmt, set| whole_in(stmt, Some(set.clone())));
            }
            None => {
                whole_in(stmt, within.cloned());
            }
        }
    }
    if let Some(loose) = loose {
        Attempt::new(stmt, job, rules, within.cloned())
            .place_until(stmt, loose, |stmt| (!stmt.job_pipelined(job)).then_some(1));
    }
}

/// Places `need` of a subgroup's pending `members` inside `within` (anywhere: None),
/// evicting where it must; keeps nothing when it cannot. Whether it did.
fn make_part_whole(
    stmt: &mut Statement,
    job: JobId,
    rules: &Rules,
    within: Option<NodeSet>,
    members: &[TaskRef],
    need: usize,
) -> bool {
    let mark = stmt.mark();
    let placed = |stmt: &Statement| {
        members
            .iter()
            .filter(|t| stmt.task(**t).status == TaskStatus::Pipelined)
            .count()
    };
    Attempt::new(stmt, job, rules, within).place_until(stmt, members.to_vec(), |stmt| {
        need.checked_sub(placed(stmt)).filter(|n| *n > 0)
    });
    let whole = placed(stmt) >= need;
    if !whole {
        stmt.rollback_to(mark);
    }
    whole
}

/// `set` narrowed to `within` too (a node set's rules all hold), or `set` itself.
fn intersect(mut set: NodeSet, within: Option<&NodeSet>) -> NodeSet {
    if let Some(w) = within {
        set.name = format!("{} in {}", set.name, w.name);
        set.rules.extend(w.rules.iter().cloned());
    }
    set
}
