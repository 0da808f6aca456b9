//! The victim plans beyond one-by-one on a node: every combination of its victim units, cheapest in work lost first (exhaustive up to EXACT_UNITS units), and whole victim gangs.

use super::*;

/// A victim unit for the exhaustive search: one task let go alone, or a whole gang.
struct Unit {
    gang: JobId,
    whole: bool,
    tasks: Vec<TaskRef>,
    /// What it frees on the node examined.
    frees: Resource,
    lost: WorkLost,
}

impl Attempt<'_> {
    /// Every combination of the node's victim units (its single victims, and its victim
    /// gangs that may go whole) that makes room for the task, cheapest in work lost first,
    /// the first the plugins allow together; None when the node offers more than
    /// `EXACT_UNITS` units or none makes room.
    pub(super) fn cheapest_combination(
        &mut self,
        ssn: &Session,
        task: TaskRef,
        node: NodeId,
        whole_candidates: &[TaskRef],
        singles: &[TaskRef],
        request: &Resource,
    ) -> Option<Plan> {
        let here = &*ssn.node(node).name;
        let mut units: Vec<Unit> = singles
            .iter()
            .map(|&v| Unit {
                gang: v.job,
                whole: false,
                tasks: vec![v],
                frees: ssn.task(v).resreq.clone(),
                lost: WorkLost::of_task(ssn, v),
            })
            .collect();
        let mut gangs: Vec<JobId> = whole_candidates.iter().map(|c| c.job).collect();
        gangs.sort();
        gangs.dedup();
        for g in gangs {
            if units.len() > EXACT_UNITS {
                return None;
            }
            if !self.whole_allowed(ssn, task, g) || !self.whole_inside(ssn, g) {
                continue;
            }
            let tasks = placed_tasks(ssn, g);
            let mut frees = Resource::new();
            for t in &tasks {
                if ssn.task(*t).node.as_deref() == Some(here) {
                    frees.add(&ssn.task(*t).resreq);
                }
            }
            let lost = WorkLost::of(ssn, &tasks);
            units.push(Unit {
                gang: g,
                whole: true,
                tasks,
                frees,
                lost,
            });
        }
        if units.is_empty() || units.len() > EXACT_UNITS {
            return None;
        }
        // Only the dimensions the task asks for decide whether it fits: each combination
        // is summed over those alone.
        let free = future_free(ssn.node(node), &Resource::new());
        let dims: Vec<(i64, i64)> = request
            .dimensions()
            .map(|(n, need)| (need, free.get(n)))
            .collect();
        let frees: Vec<Vec<i64>> = units
            .iter()
            .map(|u| request.dimensions().map(|(n, _)| u.frees.get(n)).collect())
            .collect();
        // Per unit, the units it may not be chosen with: a gang whole and that gang's
        // single victims (the whole gang covers them).
        let clashes: Vec<u32> = units
            .iter()
            .map(|u| {
                units
                    .iter()
                    .enumerate()
                    .filter(|(_, o)| o.gang == u.gang && (o.whole || u.whole))
                    .fold(0, |m, (j, _)| m | 1 << j)
            })
            .collect();
        let mut fitting: Vec<(WorkLost, i32, u32, u32)> = Vec::new();
        let mut sums = vec![0i64; dims.len()];
        for mask in 1u32..(1 << units.len()) {
            let chosen = |i: usize| mask & (1 << i) != 0;
            if (0..units.len()).any(|i| chosen(i) && mask & clashes[i] & !(1 << i) != 0) {
                continue;
            }
            sums.iter_mut().for_each(|v| *v = 0);
            let mut lost = WorkLost::default();
            for i in (0..units.len()).filter(|i| chosen(*i)) {
                for (d, v) in frees[i].iter().enumerate() {
                    sums[d] += v;
                }
                lost = lost.plus(units[i].lost);
            }
            if dims
                .iter()
                .zip(&sums)
                .all(|((need, free), freed)| need <= &(free + freed))
            {
                // At equal work lost: the lower highest victim priority, then fewer units.
                let top = (0..units.len())
                    .filter(|i| chosen(*i))
                    .map(|i| ssn.job(units[i].gang).priority)
                    .max()
                    .unwrap_or(i32::MIN);
                fitting.push((lost, top, mask.count_ones(), mask));
            }
        }
        // Only the first SET_VOTES are asked: a partial sort (every key differs in its mask,
        // so the order of those is the full sort's).
        if fitting.len() > SET_VOTES {
            fitting.select_nth_unstable(SET_VOTES);
            fitting.truncate(SET_VOTES);
        }
        fitting.sort_unstable();
        for &(lost, top, count, mask) in fitting.iter().take(SET_VOTES) {
            let set: Vec<TaskRef> = (0..units.len())
                .filter(|i| mask & (1 << i) != 0)
                .flat_map(|i| units[i].tasks.iter().copied())
                .collect();
            if ssn.victims_together(self.rules.kind, task, &set) {
                let tasks = set.len();
                return Some(Plan {
                    node,
                    set,
                    key: (lost, 3, (count as usize, top, tasks), 0),
                });
            }
        }
        None
    }

    /// Whole victim gangs with tasks on `node` that, with the node's single victims, make
    /// room for the task: the lowest-priority, smallest gangs first.
    pub(super) fn whole_plan(
        &mut self,
        ssn: &Session,
        task: TaskRef,
        node: NodeId,
        candidates: &[TaskRef],
        singles: &[TaskRef],
        request: &Resource,
    ) -> Option<WholePlan> {
        let mut gangs: Vec<JobId> = candidates.iter().map(|c| c.job).collect();
        gangs.sort();
        gangs.dedup();
        gangs.retain(|g| self.whole_allowed(ssn, task, *g) && self.whole_inside(ssn, *g));
        if gangs.is_empty() {
            return None;
        }
        // Placed tasks per gang, counted once (not in every comparison).
        let sizes: HashMap<JobId, usize> = gangs
            .iter()
            .map(|&g| (g, placed_tasks(ssn, g).len()))
            .collect();
        let size = |g: JobId| sizes[&g];
        gangs.sort_by(|a, b| {
            let (x, y) = (ssn.job(*a), ssn.job(*b));
            x.priority
                .cmp(&y.priority)
                .then(size(*a).cmp(&size(*b)))
                .then(y.created.cmp(&x.created))
                .then(x.uid.cmp(&y.uid))
        });
        let on_node = |g: JobId| candidates.iter().filter(move |c| c.job == g);
        let free_with = |chosen: &[JobId]| {
            let mut freed = Resource::new();
            for &g in chosen {
                for c in on_node(g) {
                    freed.add(&ssn.task(*c).resreq);
                }
            }
            for s in singles.iter().filter(|s| !chosen.contains(&s.job)) {
                freed.add(&ssn.task(*s).resreq);
            }
            future_free(ssn.node(node), &freed)
        };
        let mut chosen = Vec::new();
        for g in gangs {
            chosen.push(g);
            if request.fits(&free_with(&chosen)) {
                let top = chosen.iter().map(|g| ssn.job(*g).priority).max()?;
                let tasks = chosen.iter().map(|g| size(*g)).sum();
                return Some(WholePlan {
                    node,
                    cost: (chosen.len(), top, tasks),
                    gangs: chosen,
                });
            }
        }
        None
    }
}
