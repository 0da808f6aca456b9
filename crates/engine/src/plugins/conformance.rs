//! conformance: never evict system-critical pods or anything in kube-system.

use crate::conf::{ArgError, Arguments, NoArguments};
use crate::framework::{vote, ClusterState, Plugin, Session};
use crate::model::TaskRef;

pub struct Conformance;

/// Takes no arguments.
pub fn build(args: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
    args.parse::<NoArguments>()?;
    Ok(Box::new(Conformance))
}

fn evictable(s: &ClusterState, candidates: &[TaskRef]) -> Vec<TaskRef> {
    // Sized once: most candidates pass, and preempt and reclaim ask for every node and
    // victim gang they look at (a collected filter would grow the vector several times).
    let mut out = Vec::with_capacity(candidates.len());
    out.extend(candidates.iter().copied().filter(|c| {
        let t = s.task(*c);
        !t.critical && &*t.namespace != "kube-system"
    }));
    out
}

impl Plugin for Conformance {
    fn name(&self) -> &'static str {
        "conformance"
    }

    fn on_session_open(&self, ssn: &mut Session) {
        ssn.add(vote::Preemptable, Box::new(|s, _, c| Some(evictable(s, c))));
        ssn.add(vote::Reclaimable, Box::new(|s, _, c| Some(evictable(s, c))));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::cache::PodUpdate;
    use crate::model::{JobSpec, Placement, TaskInfo, TaskRef, TaskStatus};
    use crate::testkit::*;

    fn running(cache: &mut crate::cache::Cache, ns: &str, name: &str, critical: bool) {
        let uid = format!("{ns}/{name}");
        cache.apply_job(JobSpec {
            uid: uid.clone(),
            namespace: ns.into(),
            name: name.into(),
            queue: "default".into(),
            min_member: 1,
            ..Default::default()
        });
        let mut task = TaskInfo::new(
            format!("{uid}-0"),
            ns,
            format!("{name}-0"),
            "",
            res(&[("cpu", "1")]),
            0,
            Arc::new(Placement::default()),
            0,
        );
        task.status = TaskStatus::Running;
        task.node = Some(Arc::from("n-00000"));
        task.critical = critical;
        cache.apply_pod(PodUpdate {
            task,
            job: Some(uid),
        });
    }

    #[test]
    fn kube_system_and_critical_pods_are_never_victims() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "8")]);
        running(&mut cache, "kube-system", "dns", false);
        running(&mut cache, "default", "critical", true);
        running(&mut cache, "default", "batch", false);
        running(&mut cache, "default", "preemptor", false);
        let conf = "actions: allocate\ntiers:\n- plugins:\n  - name: conformance\n";
        let ssn = open_session(&cache, Some(conf));
        let s = ssn.state();
        let t = |uid: &str| task_ref(s, uid).unwrap();
        let candidates: Vec<TaskRef> =
            ["kube-system/dns-0", "default/critical-0", "default/batch-0"]
                .iter()
                .map(|u| t(u))
                .collect();
        let p = t("default/preemptor-0");
        assert_eq!(
            ssn.victims(crate::framework::VictimKind::Preempt, p, &candidates),
            vec![t("default/batch-0")]
        );
        assert_eq!(
            ssn.victims(crate::framework::VictimKind::Reclaim, p, &candidates),
            vec![t("default/batch-0")]
        );
    }

    #[test]
    fn a_tier_that_vetoes_every_victim_falls_through_only_if_empty() {
        // conformance alone in tier 1 says "no" to critical pods: tier 2 cannot overrule it
        // for those, because tier 1's non-empty answer (the batch pod) wins.
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "8")]);
        running(&mut cache, "default", "critical", true);
        running(&mut cache, "default", "batch", false);
        running(&mut cache, "default", "preemptor", false);
        let conf = "actions: allocate\ntiers:\n- plugins:\n  - name: conformance\n- plugins:\n  - name: gang\n";
        let ssn = open_session(&cache, Some(conf));
        let s = ssn.state();
        let t = |uid: &str| task_ref(s, uid).unwrap();
        let victims = ssn.victims(
            crate::framework::VictimKind::Preempt,
            t("default/preemptor-0"),
            &[t("default/critical-0"), t("default/batch-0")],
        );
        assert_eq!(victims, vec![t("default/batch-0")]);
    }
}
