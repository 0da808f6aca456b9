//! JobReady: a gang's hard rules (one domain within the bound, one GPU model) hold for what
//! it has placed, whichever action placed it.

use super::*;

/// A gang's hard rules, as JobReady checks them.
struct HardRules {
    model_hard: bool,
    /// The levels of a hard topology request; Err for a hard request nothing can meet.
    levels: Result<Option<Vec<usize>>, ()>,
}

impl GpuAffinity {
    /// JobReady: what the gang has placed keeps its hard rules (one domain within the
    /// bound, one GPU model), whichever action placed it. Members bound before the rule
    /// applied (e.g. before the HyperNodes existed) are not held against new ones.
    pub(super) fn hard_rules_hold(&self, view: &View, job: &JobInfo) -> bool {
        let model_hard = self.model_rule == ModelRule::Hard && self.model_rule(view, job).is_some();
        // The levels of a hard topology request (Err: a hard request nothing can meet).
        let levels = match self.wanted(view, job.topology_request()) {
            Ok(Some(w)) if w.hard => Ok(Some(w.levels)),
            Ok(_) => Ok(None),
            Err(_) => Err(()),
        };
        if !model_hard && matches!(levels, Ok(None)) {
            return true;
        }
        let rules = HardRules { model_hard, levels };
        let placed = |t: &TaskInfo| t.status.is_allocated() || t.status == TaskStatus::Pipelined;
        if self.placement_keeps_rules(view, job, &rules, &placed) {
            return true;
        }
        let earlier = |t: &TaskInfo| {
            matches!(
                t.status,
                TaskStatus::Bound | TaskStatus::Binding | TaskStatus::Running
            )
        };
        let fresh =
            |t: &TaskInfo| matches!(t.status, TaskStatus::Allocated | TaskStatus::Pipelined);
        !self.placement_keeps_rules(view, job, &rules, &earlier)
            && self.placement_keeps_rules(view, job, &rules, &fresh)
    }

    /// Whether the members `which` selects keep the gang's hard rules.
    fn placement_keeps_rules(
        &self,
        view: &View,
        job: &JobInfo,
        rules: &HardRules,
        which: &dyn Fn(&TaskInfo) -> bool,
    ) -> bool {
        let mut nodes = Vec::new();
        let mut models = Vec::new();
        for t in job.tasks().iter().filter(|t| which(t)) {
            let Some(&id) = t.node.as_deref().and_then(|n| view.node_ids.get(n)) else {
                continue;
            };
            nodes.push(id);
            if t.resreq.get(&self.gpu_resource) > 0 {
                models.push(view.gpu.model_of[id.0 as usize]);
            }
        }
        // Even one pod breaks a hard request when it lands outside every allowed domain
        // (or the request is malformed).
        if nodes.is_empty() {
            return true;
        }
        if rules.model_hard && models.windows(2).any(|w| w[0] != w[1]) {
            return false;
        }
        match &rules.levels {
            Ok(Some(levels)) => view.one_domain(levels, &nodes),
            Ok(None) => true,
            Err(()) => false,
        }
    }
}
