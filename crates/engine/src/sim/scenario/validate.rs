//! A scenario's checks: every name it refers to exists, every number is in range, every pinned pod fits its node, and the topology it declares is well formed; each error names the field.

use super::*;

impl Scenario {
    pub(super) fn validate(&self, file: &str) -> Result<(), ScenarioError> {
        let invalid = |field: String, message: String| ScenarioError::Invalid {
            file: file.to_string(),
            field,
            message,
        };
        if self.schedule_period.0 <= 0 {
            return Err(invalid(
                "schedulePeriod".into(),
                "must be longer than 0s".into(),
            ));
        }
        for (j, job) in self.jobs.iter().enumerate() {
            for (i, p) in job.sub_group_policy.iter().enumerate() {
                if p.sub_group_size == 0 {
                    return Err(invalid(
                        format!("jobs[{j}].subGroupPolicy[{i}].subGroupSize"),
                        "must be at least 1".into(),
                    ));
                }
            }
            for (i, t) in job.tasks.iter().enumerate() {
                for (c, claim) in t.claims.iter().enumerate() {
                    if let Err(message) = claim.to_spec() {
                        return Err(invalid(
                            format!("jobs[{j}].tasks[{i}].claims[{c}]"),
                            message,
                        ));
                    }
                }
                if t.group_size == Some(0) {
                    return Err(invalid(
                        format!("jobs[{j}].tasks[{i}].groupSize"),
                        "must be at least 1".into(),
                    ));
                }
            }
        }
        for (i, pool) in self.device_pools.iter().enumerate() {
            if let Err(message) = pool.devices.validate() {
                return Err(invalid(format!("devicePools[{i}]"), message));
            }
        }
        let mut groups = Vec::new();
        for (i, g) in self.node_groups.iter().enumerate() {
            for (d, set) in g.devices.iter().enumerate() {
                if let Err(message) = set.validate() {
                    return Err(invalid(format!("nodeGroups[{i}].devices[{d}]"), message));
                }
            }
            if groups.contains(&g.name.as_str()) {
                return Err(invalid(
                    format!("nodeGroups[{i}].name"),
                    format!("{:?} is used twice", g.name),
                ));
            }
            groups.push(g.name.as_str());
            if g.allocatable.0.is_empty() {
                return Err(invalid(
                    format!("nodeGroups[{i}].allocatable"),
                    "a node needs some resources, e.g. {cpu: \"8\", memory: 32Gi}".into(),
                ));
            }
        }
        self.validate_pinned(file)?;
        let mut nodes: u64 = 0;
        let node_counts = self
            .node_groups
            .iter()
            .enumerate()
            .map(|(i, g)| (format!("nodeGroups[{i}].count"), g.count))
            .chain(self.events.iter().enumerate().filter_map(|(i, e)| {
                let c = e.add_nodes.as_ref()?;
                Some((format!("events[{i}].addNodes.count"), c.count))
            }));
        for (field, count) in node_counts {
            nodes += u64::from(count);
            if nodes > MAX_NODES {
                return Err(invalid(
                    field,
                    format!(
                        "{nodes} nodes in all (node groups and addNodes events) is more than \
                         the simulator's limit of {MAX_NODES}"
                    ),
                ));
            }
        }
        let mut queues: Vec<&str> = vec!["default"];
        for (i, q) in self.queues.iter().enumerate() {
            if q.weight == 0 {
                return Err(invalid(
                    format!("queues[{i}].weight"),
                    "must be at least 1".into(),
                ));
            }
            queues.push(&q.name);
        }
        let infos: Vec<crate::model::QueueInfo> =
            self.queues.iter().map(QueueDef::to_info).collect();
        let tree = crate::model::QueueTree::new(infos.iter());
        for (i, q) in infos.iter().enumerate() {
            if let Some(problem) = tree.problem(&q.name) {
                let problem = problem.trim_start_matches("spec.parent: ");
                return Err(invalid(format!("queues[{i}].parent"), problem.into()));
            }
            if let Some(problem) = q.guarantee_problem() {
                let problem = problem.trim_start_matches("spec.guarantee: ");
                return Err(invalid(format!("queues[{i}].guarantee"), problem.into()));
            }
        }
        let mut names = Vec::new();
        let mut pods: u64 = 0;
        for (i, j) in self.jobs.iter().enumerate() {
            let at = format!("jobs[{i}]");
            if names.contains(&(&j.namespace, &j.name)) {
                return Err(invalid(
                    format!("{at}.name"),
                    format!("{}/{} is used twice", j.namespace, j.name),
                ));
            }
            names.push((&j.namespace, &j.name));
            if !queues.contains(&j.queue.as_str()) {
                return Err(invalid(
                    format!("{at}.queue"),
                    format!(
                        "queue {:?} is not defined; defined queues: {}",
                        j.queue,
                        queues.join(", ")
                    ),
                ));
            }
            if j.tasks.is_empty() {
                return Err(invalid(
                    format!("{at}.tasks"),
                    "a job needs at least one task".into(),
                ));
            }
            for (k, t) in j.tasks.iter().enumerate() {
                if t.replicas == 0 {
                    return Err(invalid(
                        format!("{at}.tasks[{k}].replicas"),
                        "must be at least 1".into(),
                    ));
                }
                if let Some(p) = t.pod_rules().problem() {
                    let (field, message) = p.split_once(": ").unwrap_or(("", &p));
                    let field = if field.starts_with("topologySpreadConstraints") {
                        field.to_string()
                    } else {
                        format!("affinity.{field}")
                    };
                    return Err(invalid(format!("{at}.tasks[{k}].{field}"), message.into()));
                }
            }
            let copies = j.repeat.as_ref().map_or(1, |r| u64::from(r.count));
            pods += copies * j.tasks.iter().map(|t| u64::from(t.replicas)).sum::<u64>();
            if pods > MAX_PODS {
                let field = if copies > 1 { "repeat.count" } else { "tasks" };
                return Err(invalid(
                    format!("{at}.{field}"),
                    format!(
                        "{pods} pods in all (every job's replicas times its repeat count) is \
                         more than the simulator's limit of {MAX_PODS}"
                    ),
                ));
            }
            let total = j.task_count();
            for (k, member) in j.gang.group.iter().enumerate() {
                if !self
                    .jobs
                    .iter()
                    .any(|o| o.name == *member && o.namespace == j.namespace)
                {
                    return Err(invalid(
                        format!("{at}.gang.group[{k}]"),
                        format!("no job {member:?} in namespace {}", j.namespace),
                    ));
                }
            }
            if let Some(min) = j.min_member {
                if min > total {
                    return Err(invalid(
                        format!("{at}.minMember"),
                        format!("{min} is more than the job's {total} tasks; the gang could never start"),
                    ));
                }
            }
            for (role, min) in &j.min_task_member {
                let have: u32 = j
                    .tasks
                    .iter()
                    .filter(|t| &t.role == role)
                    .map(|t| t.replicas)
                    .sum();
                if have < *min {
                    return Err(invalid(
                        format!("{at}.minTaskMember.{role}"),
                        format!("{min} is more than the {have} tasks of role {role:?}"),
                    ));
                }
            }
            if !(0.0..1.0).contains(&j.runtime_jitter) {
                return Err(invalid(
                    format!("{at}.runtimeJitter"),
                    "must be in [0, 1)".into(),
                ));
            }
            if let Some(r) = &j.repeat {
                if r.count == 0 {
                    return Err(invalid(
                        format!("{at}.repeat.count"),
                        "must be at least 1".into(),
                    ));
                }
            }
        }
        for (i, e) in self.events.iter().enumerate() {
            let at = format!("events[{i}]");
            if e.add_nodes.is_none() && e.remove_nodes.is_none() {
                return Err(invalid(at, "an event needs addNodes or removeNodes".into()));
            }
            for (key, change) in [("addNodes", &e.add_nodes), ("removeNodes", &e.remove_nodes)] {
                if let Some(c) = change {
                    if !groups.contains(&c.group.as_str()) {
                        return Err(invalid(
                            format!("{at}.{key}.group"),
                            format!(
                                "node group {:?} is not defined; defined groups: {}",
                                c.group,
                                groups.join(", ")
                            ),
                        ));
                    }
                }
            }
        }
        self.validate_topology(file)?;
        self.scheduler(file)?;
        Ok(())
    }

    /// Node names, pods running at t=0 and other pods: each on a node the scenario has at
    /// t=0.
    pub(super) fn validate_pinned(&self, file: &str) -> Result<(), ScenarioError> {
        let invalid = |field: String, message: String| ScenarioError::Invalid {
            file: file.to_string(),
            field,
            message,
        };
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for (i, g) in self.node_groups.iter().enumerate() {
            if g.names.len() > g.count as usize {
                return Err(invalid(
                    format!("nodeGroups[{i}].names"),
                    format!("{} names for a count of {}", g.names.len(), g.count),
                ));
            }
            if g.names.iter().any(String::is_empty) {
                return Err(invalid(
                    format!("nodeGroups[{i}].names"),
                    "a node name must not be empty".into(),
                ));
            }
            if g.names.is_empty() {
                continue;
            }
            for n in 1..=g.count {
                let name = g.node_name(n);
                if let Some(other) = seen.insert(name.clone(), i) {
                    return Err(invalid(
                        format!("nodeGroups[{i}].names"),
                        format!("node {name:?} is also a node of nodeGroups[{other}]"),
                    ));
                }
            }
        }
        let nodes = if self
            .jobs
            .iter()
            .any(|j| j.tasks.iter().any(|t| !t.running.is_empty()))
            || !self.other_pods.is_empty()
        {
            self.initial_nodes()
        } else {
            BTreeMap::new()
        };
        for (j, job) in self.jobs.iter().enumerate() {
            for (k, t) in job.tasks.iter().enumerate() {
                if t.running.is_empty() {
                    continue;
                }
                let at = format!("jobs[{j}].tasks[{k}].running");
                if t.running.len() > t.replicas as usize {
                    return Err(invalid(
                        at,
                        format!(
                            "{} pods running for {} replicas",
                            t.running.len(),
                            t.replicas
                        ),
                    ));
                }
                if job.submit_at.0 != 0 || job.repeat.is_some() {
                    return Err(invalid(
                        at,
                        "only a job submitted at t=0, not repeated, has pods running at t=0".into(),
                    ));
                }
                for (r, pod) in t.running.iter().enumerate() {
                    if !nodes.contains_key(&pod.node) {
                        return Err(invalid(
                            format!("{at}[{r}].node"),
                            format!("no node {:?} at t=0", pod.node),
                        ));
                    }
                }
            }
        }
        for (i, pod) in self.other_pods.iter().enumerate() {
            if !nodes.contains_key(&pod.node) {
                return Err(invalid(
                    format!("otherPods[{i}].node"),
                    format!("no node {:?} at t=0", pod.node),
                ));
            }
        }
        Ok(())
    }

    /// `topologyLevels` and `hypernodes`. What depends on the nodes (a node selected by two
    /// HyperNodes of one tier) can change as nodes come and go; the engine reports it and
    /// the report lists it, as for a live cluster.
    pub(super) fn validate_topology(&self, file: &str) -> Result<(), ScenarioError> {
        let invalid = |field: String, message: String| ScenarioError::Invalid {
            file: file.to_string(),
            field,
            message,
        };
        if self.topology_levels.len() > MAX_TOPOLOGY_LEVELS {
            return Err(invalid(
                "topologyLevels".into(),
                format!(
                    "{} levels is more than the simulator's limit of {MAX_TOPOLOGY_LEVELS}",
                    self.topology_levels.len()
                ),
            ));
        }
        for (i, key) in self.topology_levels.iter().enumerate() {
            if let Some(why) = label_key_problem(key) {
                return Err(invalid(
                    format!("topologyLevels[{i}]"),
                    format!("{key:?} is not a node label key ({why})"),
                ));
            }
            if self.topology_levels[..i].contains(key) {
                return Err(invalid(
                    format!("topologyLevels[{i}]"),
                    format!("{key:?} is listed twice"),
                ));
            }
        }
        if self.hypernodes.len() > MAX_HYPERNODES {
            return Err(invalid(
                "hypernodes".into(),
                format!(
                    "{} HyperNodes is more than the simulator's limit of {MAX_HYPERNODES}",
                    self.hypernodes.len()
                ),
            ));
        }
        for (i, h) in self.hypernodes.iter().enumerate() {
            let at = format!("hypernodes[{i}]");
            if h.name.is_empty() {
                return Err(invalid(format!("{at}.name"), "must not be empty".into()));
            }
            if self.hypernodes[..i].iter().any(|o| o.name == h.name) {
                return Err(invalid(
                    format!("{at}.name"),
                    format!("{:?} is used twice", h.name),
                ));
            }
            if h.tier == 0 {
                return Err(invalid(
                    format!("{at}.tier"),
                    "must be at least 1 (1 is the narrowest tier)".into(),
                ));
            }
            if h.members.is_empty() {
                return Err(invalid(
                    format!("{at}.members"),
                    "a HyperNode needs at least one member (Volcano's admission refuses one \
                     without)"
                        .into(),
                ));
            }
            for (k, m) in h.members.iter().enumerate() {
                let at = format!("{at}.members[{k}].selector");
                if let MemberSelector::Invalid(why) = m.selector.to_selector() {
                    return Err(invalid(
                        at,
                        format!("{why}; give one of exactMatch, regexMatch, labelMatch"),
                    ));
                }
                let is_hypernode = m.kind == HyperNodeMemberType::HyperNode;
                // The engine's matching: a pattern must match the whole name.
                let matches: Box<dyn Fn(&str) -> bool> = match &m.selector {
                    MemberSelectorDef {
                        exact_match: Some(e),
                        ..
                    } => {
                        if e.name.is_empty() {
                            return Err(invalid(
                                format!("{at}.exactMatch.name"),
                                "must not be empty".into(),
                            ));
                        }
                        let name = e.name.clone();
                        Box::new(move |n: &str| n == name)
                    }
                    MemberSelectorDef {
                        regex_match: Some(r),
                        ..
                    } if r.pattern.is_empty() => {
                        return Err(invalid(
                            format!("{at}.regexMatch.pattern"),
                            "must not be empty".into(),
                        ))
                    }
                    MemberSelectorDef {
                        regex_match: Some(r),
                        ..
                    } => match regex::Regex::new(&format!("^(?:{})$", r.pattern)) {
                        Ok(re) => Box::new(move |n: &str| re.is_match(n)),
                        Err(e) => {
                            let why = e.to_string();
                            let why = why.lines().last().unwrap_or_default().trim().to_string();
                            return Err(invalid(
                                format!("{at}.regexMatch.pattern"),
                                format!("{:?} is not a regular expression ({why})", r.pattern),
                            ));
                        }
                    },
                    _ if is_hypernode => {
                        return Err(invalid(
                            format!("{at}.labelMatch"),
                            "selects nodes by their labels; name HyperNode members with \
                             exactMatch or regexMatch"
                                .into(),
                        ))
                    }
                    _ => continue,
                };
                if !is_hypernode {
                    continue;
                }
                let children: Vec<&HyperNodeDef> = self
                    .hypernodes
                    .iter()
                    .filter(|c| matches(&c.name))
                    .collect();
                if let (Some(e), true) = (&m.selector.exact_match, children.is_empty()) {
                    return Err(invalid(
                        format!("{at}.exactMatch.name"),
                        format!("no HyperNode {:?} is declared", e.name),
                    ));
                }
                if let Some(c) = children.iter().find(|c| c.tier >= h.tier) {
                    return Err(invalid(
                        at,
                        format!(
                            "selects HyperNode {} of tier {}; members must be of a lower tier \
                             than {}'s {}",
                            c.name, c.tier, h.name, h.tier
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}
