//! Subgroups in domains of their own: a Volcano `subGroupPolicy` entry with a
//! `networkTopology` keeps each of its subgroups (one LeaderWorkerSet replica, one
//! data-parallel replica) inside one domain at or below its bound — hard: must, soft:
//! preferably — while different subgroups of the gang may use different domains.
//!
//! Votes: SubGroupDomains (the domains that hold one subgroup's pending members, tightest
//! fit first, pinned by what the subgroup has placed; for a hard policy, every domain
//! preemption may make room in) and, through the plugin's JobReady,
//! that every subgroup of a hard policy has what it placed inside one domain.

use super::domains::allowed_domains;
use super::{fitting_domains, with_sums, GpuAffinity, View};
use crate::framework::{GangDomains, NodeSet, StaticNodes};
use crate::model::subgroup::subgroup_of;
use crate::model::{JobId, JobInfo, NodeId, Resource, SubGroupKey, TaskInfo, TaskStatus};
use crate::snapshot::ClusterState;

impl GpuAffinity {
    /// SubGroupDomains: where subgroup `key` of gang `id` should go, or None when its
    /// policy asks for no domain (or the request is soft and names nothing there is).
    pub(super) fn subgroup_domains(
        &self,
        view: &View,
        state: &ClusterState,
        id: JobId,
        key: &SubGroupKey,
        usable: &[StaticNodes],
    ) -> Option<GangDomains> {
        let job = state.job(id);
        let policy = job.subgroups.get(key.policy)?;
        let request = policy.topology.as_ref()?;
        let what = key.describe(&job.subgroups);
        let wanted = match self.wanted(view, Some(request)) {
            Ok(Some(w)) => w,
            Ok(None) => return None,
            Err(why) => {
                return Some(GangDomains {
                    options: Vec::new(),
                    hard: true,
                    rule: format!("{what}: {why}"),
                    shortfall: None,
                    allowed: Vec::new(),
                })
            }
        };
        let members = members_of(job, key);
        let placed: Vec<NodeId> = members
            .iter()
            .filter(|t| t.status != TaskStatus::Pending && t.status.is_valid())
            .filter_map(|t| view.node_ids.get(t.node.as_deref()?).copied())
            .collect();
        // What the subgroup still needs to be whole: its first pending members up to its
        // size (more pending than that are not needed together).
        let missing = (policy.size as usize).saturating_sub(placed.len());
        let mut need = Resource::new();
        for t in members
            .iter()
            .filter(|t| t.status == TaskStatus::Pending)
            .take(missing)
        {
            need.add(&t.resreq);
        }
        let dominant = self.dominant(&need);
        let (fitting, shortfall) = with_sums(view, state, usable, |sums| {
            fitting_domains(view, &wanted.levels, sums, &need, &dominant, &placed)
        });
        // Where preemption may make room for a hard subgroup: every domain that holds what
        // it has placed, whatever room each has now.
        let allowed = if wanted.hard {
            allowed_domains(view, &wanted.levels, &placed)
                .into_iter()
                .map(|(name, rule)| NodeSet {
                    name,
                    rules: vec![rule],
                })
                .collect()
        } else {
            Vec::new()
        };
        Some(GangDomains {
            options: fitting
                .into_iter()
                .map(|(name, rule)| NodeSet {
                    name,
                    rules: vec![rule],
                })
                .collect(),
            hard: wanted.hard,
            rule: format!("{what}: {}", wanted.rule),
            shortfall,
            allowed,
        })
    }

    /// Whether every subgroup of a policy with a hard `networkTopology` has the members
    /// `which` selects inside one domain of that policy's levels (a hard request nothing
    /// can meet: none placed at all). Members bound before the rule applied are not held
    /// against new ones, as for the gang's own rule.
    pub(super) fn subgroup_rules_hold(&self, view: &View, job: &JobInfo) -> bool {
        let placed = |t: &TaskInfo| t.status.is_allocated() || t.status == TaskStatus::Pipelined;
        let earlier = |t: &TaskInfo| {
            matches!(
                t.status,
                TaskStatus::Bound | TaskStatus::Binding | TaskStatus::Running
            )
        };
        let fresh =
            |t: &TaskInfo| matches!(t.status, TaskStatus::Allocated | TaskStatus::Pipelined);
        for (p, policy) in job.subgroups.iter().enumerate() {
            let Some(request) = policy.topology.as_ref() else {
                continue;
            };
            let levels = match self.wanted(view, Some(request)) {
                Ok(Some(w)) if w.hard => Some(w.levels),
                Ok(_) => continue,
                Err(_) => None,
            };
            let mut keys: Vec<SubGroupKey> = job
                .tasks()
                .iter()
                .filter_map(|t| subgroup_of(&job.subgroups, &t.labels))
                .filter(|k| k.policy == p)
                .collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let members = members_of(job, &key);
                let nodes_of = |which: &dyn Fn(&TaskInfo) -> bool| -> Vec<NodeId> {
                    members
                        .iter()
                        .filter(|t| which(t))
                        .filter_map(|t| view.node_ids.get(t.node.as_deref()?).copied())
                        .collect()
                };
                let keeps = |nodes: &[NodeId]| {
                    nodes.is_empty()
                        || levels
                            .as_ref()
                            .is_some_and(|levels| view.one_domain(levels, nodes))
                };
                if !keeps(&nodes_of(&placed))
                    && (keeps(&nodes_of(&earlier)) || !keeps(&nodes_of(&fresh)))
                {
                    return false;
                }
            }
        }
        true
    }
}

impl View {
    /// Whether `nodes` (not empty) all lie in one domain of one of `levels`.
    pub(super) fn one_domain(&self, levels: &[usize], nodes: &[NodeId]) -> bool {
        levels.iter().map(|l| &self.levels[*l]).any(|l| {
            let d = l.domain_of[nodes[0].0 as usize];
            d.is_some() && nodes.iter().all(|n| l.domain_of[n.0 as usize] == d)
        })
    }
}

/// The members of subgroup `key` of `job`.
fn members_of<'a>(job: &'a JobInfo, key: &SubGroupKey) -> Vec<&'a TaskInfo> {
    job.tasks()
        .iter()
        .filter(|t| subgroup_of(&job.subgroups, &t.labels).as_ref() == Some(key))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::super::tests::{hypernodes, nodes_of, racks, CONF};
    use crate::testkit::*;

    /// A gang of `replicas` subgroups of `size` workers (role=worker, replica=i), each
    /// `cpu` cpus, its subgroup policy asking `mode` within tier 1.
    fn replicas(name: &str, replicas: usize, size: usize, cpu: &str, mode: &str) -> Gang {
        let mut g = Gang::new(name, (replicas * size) as u32).subgroups("worker", size as u32, 0);
        for r in 0..replicas {
            g = g
                .tasks(&format!("w{r}"), size, &[("cpu", cpu)])
                .last_labelled(size, &[("role", "worker"), ("replica", &r.to_string())]);
        }
        g.subgroup_topology(mode, Some(1))
    }

    /// The racks each replica's pods landed in (nodes are named r{rack}-n{i}, pods
    /// {gang}-w{replica}-{i}).
    fn racks_by_replica(
        result: &crate::framework::SessionResult,
        job: &str,
    ) -> Vec<BTreeSet<String>> {
        let mut by: std::collections::BTreeMap<String, BTreeSet<String>> = Default::default();
        for b in result.binds.iter().filter(|b| &*b.job == job) {
            let replica = b.task.rsplit_once('-').map_or("", |(r, _)| r).to_string();
            by.entry(replica)
                .or_default()
                .insert(b.node[..2].to_string());
        }
        by.into_values().collect()
    }

    #[test]
    fn each_subgroup_of_a_hard_policy_lands_inside_one_rack_of_its_own() {
        // Two racks of two 4-cpu nodes; two replicas of two 3-cpu workers: a replica fills
        // a rack (one worker a node), so the gang needs both racks, one replica each. Held
        // to one domain for the whole gang (the old reading) it could not bind at all.
        let mut cache = cache_with_default_queue();
        racks(&mut cache, 2, 2);
        hypernodes(&mut cache);
        let job = replicas("lws", 2, 2, "3", "hard").apply(&mut cache);
        let result = run_cycle(&cache, Some(CONF));
        assert_eq!(nodes_of(&result, &job).len(), 4, "{result:?}");
        let racks = racks_by_replica(&result, &job);
        assert_eq!(racks.len(), 2, "{racks:?}");
        assert!(
            racks.iter().all(|r| r.len() == 1),
            "each replica in one rack: {racks:?}"
        );
    }

    #[test]
    fn a_hard_subgroup_too_big_for_any_domain_waits_naming_its_policy_and_shortfall() {
        let mut cache = cache_with_default_queue();
        racks(&mut cache, 2, 2);
        hypernodes(&mut cache);
        // One replica of three 3-cpu workers: 9 cpu, more than a rack's 8.
        let job = replicas("big", 1, 3, "3", "hard").apply(&mut cache);
        let result = run_cycle(&cache, Some(CONF));
        assert!(result.binds.is_empty(), "{:?}", result.binds);
        let message = condition_message(&result, &job).unwrap_or_default();
        assert!(
            message.contains(
                "subgroup 0 of policy \"worker\": spec.subGroupPolicy[0].networkTopology hard \
                 within tier 1: no allowed domain holds the whole subgroup"
            ),
            "{message}"
        );
        assert!(message.contains("short of"), "{message}");
    }

    #[test]
    fn a_soft_subgroup_too_big_for_one_domain_binds_across_domains() {
        let mut cache = cache_with_default_queue();
        racks(&mut cache, 2, 2);
        hypernodes(&mut cache);
        let job = replicas("wide", 1, 3, "3", "soft").apply(&mut cache);
        let result = run_cycle(&cache, Some(CONF));
        assert_eq!(nodes_of(&result, &job).len(), 3, "{result:?}");
    }

    #[test]
    fn a_soft_subgroup_that_fits_one_domain_goes_inside_one() {
        // Four racks of two 4-cpu nodes, two replicas of two 2-cpu workers: each replica
        // fits one node pair; spread scoring alone would scatter them.
        let mut cache = cache_with_default_queue();
        racks(&mut cache, 4, 2);
        let conf = CONF;
        let job = replicas("pack", 2, 2, "2", "soft").apply(&mut cache);
        // No HyperNodes: the soft request falls back to the label levels of the arguments.
        let result = run_cycle(&cache, Some(conf));
        assert_eq!(nodes_of(&result, &job).len(), 4, "{result:?}");
        let racks = racks_by_replica(&result, &job);
        assert!(racks.iter().all(|r| r.len() == 1), "{racks:?}");
    }

    /// A replica of two 3-cpu workers, one bound on r0-n0 and one pending, its policy
    /// hard within tier 1; with `filler`, r0-n1 (the rest of rack-a) is full.
    fn half_bound(filler: bool) -> (crate::cache::Cache, String) {
        let mut cache = cache_with_default_queue();
        racks(&mut cache, 2, 2);
        hypernodes(&mut cache);
        if filler {
            Gang::new("filler", 1)
                .tasks("", 1, &[("cpu", "4")])
                .last_on("r0-n1", crate::model::TaskStatus::Running)
                .apply(&mut cache);
        }
        let job = Gang::new("half", 2)
            .subgroups("worker", 2, 1)
            .tasks("w0", 2, &[("cpu", "3")])
            .last_labelled(2, &[("role", "worker"), ("replica", "0")])
            .last_on("r0-n0", crate::model::TaskStatus::Running)
            .subgroup_topology("hard", Some(1))
            .apply(&mut cache);
        (cache, job)
    }

    #[test]
    fn a_member_joins_the_domain_its_placed_peers_pinned_or_waits() {
        let (cache, job) = half_bound(false);
        let result = run_cycle(&cache, Some(CONF));
        assert_eq!(nodes_of(&result, &job), ["r0-n1"], "{result:?}");
        // Rack-a full: rack-b has room, but the subgroup's rack is where its peer runs.
        let (cache, job) = half_bound(true);
        let result = run_cycle(&cache, Some(CONF));
        assert!(result.binds.is_empty(), "{:?}", result.binds);
        let message = condition_message(&result, &job).unwrap_or_default();
        assert!(
            message.contains("no allowed domain holds the whole subgroup"),
            "{message}"
        );
    }

    const PREEMPT: &str = "actions: \"allocate, preempt\"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: predicates
  - name: nodeorder
  - name: gpu-affinity
    arguments:
      gpu-affinity.topologyLevels: example.com/rack
";
    const HOUR: i64 = 3_600_000;

    /// Racks a and b, each node held by a one-pod 4-cpu victim of priority 1 that started
    /// at `starts[i]` (r0-n0, r0-n1, r1-n0, r1-n1), protected for `min` if given; and an
    /// urgent gang of one replica of two 3-cpu workers whose policy is hard within tier 1.
    fn full_racks(starts: [i64; 4], min: [Option<i64>; 4]) -> (crate::cache::Cache, String) {
        let mut cache = cache_with_default_queue();
        racks(&mut cache, 2, 2);
        hypernodes(&mut cache);
        let nodes = ["r0-n0", "r0-n1", "r1-n0", "r1-n1"];
        for (i, node) in nodes.iter().enumerate() {
            Gang::new(&format!("v-{node}"), 1)
                .priority(1)
                .created(starts[i])
                .phase(crate::model::PodGroupPhase::Running)
                .tasks("", 1, &[("cpu", "4")])
                .running_on(&[node])
                .started(starts[i])
                .min_runtime_opt(min[i])
                .apply(&mut cache);
        }
        let job = replicas("urgent", 1, 2, "3", "hard")
            .priority(100)
            .phase(crate::model::PodGroupPhase::Inqueue)
            .apply(&mut cache);
        (cache, job)
    }

    #[test]
    fn preemption_for_a_hard_subgroup_evicts_only_inside_the_one_rack_it_lands_in() {
        // The two youngest victims are in different racks; the subgroup must stay in one:
        // rack-a costs 1 h + 10 h of work, rack-b 2 h + 10 h. Rack-a goes whole, nothing
        // in rack-b.
        let (cache, job) = full_racks([9 * HOUR, 0, 8 * HOUR, 0], [None; 4]);
        let result = scheduler(Some(PREEMPT)).run_cycle(cache.snapshot(), 10 * HOUR);
        assert_eq!(
            evicted(&result).into_keys().collect::<Vec<_>>(),
            ["default/v-r0-n0", "default/v-r0-n1"],
            "{result:?}"
        );
        // When neither rack can be freed whole, nothing is evicted anywhere, and the gang
        // says why.
        let protect = Some(11 * HOUR);
        let (cache, _) = full_racks([9 * HOUR, 0, 8 * HOUR, 0], [None, protect, None, protect]);
        let result = scheduler(Some(PREEMPT)).run_cycle(cache.snapshot(), 10 * HOUR);
        assert!(result.evictions.is_empty(), "{:?}", result.evictions);
        let message = condition_message(&result, &job).unwrap_or_default();
        assert!(
            message.contains("each subgroup of a hard subGroupPolicy inside one domain"),
            "{message}"
        );
    }
}
