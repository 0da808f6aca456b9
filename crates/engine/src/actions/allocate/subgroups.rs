//! Subgroups in domains of their own: a gang some of whose `subGroupPolicy` entries carry a
//! `networkTopology` is placed subgroup by subgroup, each inside a domain the plugins name
//! for it (the SubGroupDomains vote), all inside each node set named for the gang in turn.
//! Placing one subgroup where it fits tightest can leave a later one no domain, so the
//! choices are searched depth first, within a bound.

use super::place_gang;
use crate::framework::{NodeSet, SearchBudget, SearchOutcome, Statement};
use crate::model::subgroup::{count_subgroups, subgroup_of};
use crate::model::{JobId, SubGroupKey, TaskRef, TaskStatus};
use std::collections::BTreeMap;

/// Steps of the depth-first search per gang and node set of the gang, beyond one per
/// subgroup (each step a bounded search of its own): enough to revisit a few choices of a
/// few subgroups with a few domains each.
const SPARE_STEPS: usize = 64;

/// Places the gang's pending `tasks` inside each node set named for the gang in turn (then
/// anywhere, unless the gang's own rule is hard), subgroup by subgroup. Returns what to add
/// to the gang's message when it could not be placed.
pub(super) fn place_in_domains(
    stmt: &mut Statement,
    id: JobId,
    tasks: &[TaskRef],
    want_nodes: usize,
    budget: &mut SearchBudget,
) -> Option<String> {
    let policies = stmt.job(id).subgroups.clone();
    let mut by_key: BTreeMap<Option<SubGroupKey>, Vec<TaskRef>> = BTreeMap::new();
    for &t in tasks {
        by_key
            .entry(subgroup_of(&policies, &stmt.task(t).labels))
            .or_default()
            .push(t);
    }
    // What each subgroup still needs to be whole (counted once, from what it holds).
    let held = |s: TaskStatus| s.is_ready() || s == TaskStatus::Pipelined;
    let before = count_subgroups(&policies, stmt.job(id).tasks(), held, |_| false);
    let groups: Vec<Group> = by_key
        .into_iter()
        .map(|(key, members)| {
            let need = key.as_ref().map_or(members.len(), |k| {
                let had = before.get(k).map_or(0, |c| c.placed);
                policies[k.policy].size.saturating_sub(had) as usize
            });
            let own = key
                .as_ref()
                .filter(|k| policies[k.policy].topology.is_some())
                .cloned();
            Group {
                key,
                own,
                members,
                need,
            }
        })
        .collect();
    let gang = stmt.gang_domains(id, tasks);
    let mut withins: Vec<Option<NodeSet>> = Vec::new();
    if let Some(g) = &gang {
        withins.extend(g.options.iter().cloned().map(Some));
    }
    if gang.as_ref().is_none_or(|g| !g.hard) {
        withins.push(None);
    }
    let mut why = None;
    for within in &withins {
        let mut search = Search {
            id,
            want_nodes,
            within: within.as_ref(),
            steps_left: 2 * groups.len() + SPARE_STEPS,
            why: None,
        };
        if search.place_from(stmt, &groups, 0, budget) {
            return None;
        }
        why = why.or(search.why);
    }
    match gang.filter(|g| g.hard) {
        Some(g) => Some(format!(
            "{}: no allowed domain holds the whole gang",
            g.rule
        )),
        None => why,
    }
}

/// One subgroup's pending members (or the gang's members in no subgroup: `key` None).
struct Group {
    key: Option<SubGroupKey>,
    /// The key again when its policy asks for a domain of its own.
    own: Option<SubGroupKey>,
    members: Vec<TaskRef>,
    /// Members to place for it to be whole.
    need: usize,
}

struct Search<'a> {
    id: JobId,
    want_nodes: usize,
    within: Option<&'a NodeSet>,
    steps_left: usize,
    /// Why a subgroup of a hard policy found no domain (the first one met).
    why: Option<String>,
}

impl Search<'_> {
    /// Places `groups[k..]` until the gang is ready or pipelined: each subgroup in each
    /// place it may go in turn, then (an elastic gang) not at all. True once placed; the
    /// statement is then left with the placement, otherwise as it was.
    fn place_from(
        &mut self,
        stmt: &mut Statement,
        groups: &[Group],
        k: usize,
        budget: &mut SearchBudget,
    ) -> bool {
        if stmt.job_ready(self.id) || stmt.job_pipelined(self.id) {
            return true;
        }
        let Some(group) = groups.get(k) else {
            return false;
        };
        for place in self.places(stmt, group) {
            if self.steps_left == 0 || budget.left_in_cycle == 0 {
                return false;
            }
            self.steps_left -= 1;
            let mark = stmt.mark();
            let whole = match &place {
                Some(set) => matches!(
                    stmt.search_part(self.id, &group.members, group.need, Some(set), budget),
                    SearchOutcome::Placed { .. }
                ),
                None => {
                    place_gang(stmt, &group.members, self.want_nodes);
                    let placed = group
                        .members
                        .iter()
                        .filter(|&&t| {
                            let s = stmt.task(t).status;
                            s.is_ready() || s == TaskStatus::Pipelined
                        })
                        .count();
                    group.key.is_none() || placed >= group.need
                }
            };
            if whole && self.place_from(stmt, groups, k + 1, budget) {
                return true;
            }
            stmt.rollback_to(mark);
        }
        // Without this subgroup: an elastic gang may be ready with the others.
        if self.steps_left == 0 {
            return false;
        }
        self.steps_left -= 1;
        self.place_from(stmt, groups, k + 1, budget)
    }

    /// Where a group may go, best first: inside each domain named for its subgroup (and the
    /// gang's set), then — a soft rule, or no rule of its own — anywhere in the gang's set
    /// (None: anywhere, task by task).
    fn places(&mut self, stmt: &mut Statement, group: &Group) -> Vec<Option<NodeSet>> {
        let within = self.within;
        let anywhere = || vec![within.cloned()];
        let Some(key) = &group.own else {
            return anywhere();
        };
        let Some(domains) = stmt.subgroup_domains(self.id, key, &group.members) else {
            return anywhere();
        };
        let mut places: Vec<Option<NodeSet>> = domains
            .options
            .iter()
            .map(|set| {
                Some(match within {
                    Some(w) => NodeSet {
                        name: format!("{}, {}", w.name, set.name),
                        rules: w.rules.iter().chain(&set.rules).cloned().collect(),
                    },
                    None => set.clone(),
                })
            })
            .collect();
        if !domains.hard {
            places.push(within.cloned());
        } else if self.why.is_none() && places.is_empty() {
            let mut why = format!(
                "{}: no allowed domain holds the whole subgroup",
                domains.rule
            );
            if let Some(s) = &domains.shortfall {
                why = format!("{why} ({s})");
            }
            self.why = Some(why);
        }
        places
    }
}
