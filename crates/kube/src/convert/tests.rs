use super::*;
use crate::testkit::labels;

fn pod(yaml: &str) -> Pod {
    crate::yaml::from_str(yaml).unwrap()
}

#[test]
fn requests_that_overflow_when_added_are_an_error_not_a_panic() {
    // Found by fuzzing (fuzz/corpus/pod_dialects): each request fits an i64, their sum
    // did not, and adding them panicked.
    let p = pod(r#"
metadata: {name: w-0, namespace: ml}
spec:
  containers:
  - name: a
    resources: {requests: {cpu: "9223372036854775807m"}}
  - name: b
    resources: {requests: {cpu: "1"}}
  overhead: {memory: 1Gi}
"#);
    let e = pod_to_update(&p, None).unwrap_err();
    assert_eq!(e.field, "spec.containers[*].resources");
    assert_eq!(
        e.to_string(),
        "pod ml/w-0: spec.containers[*].resources: the requests of cpu add up to more than \
             the scheduler can count"
    );
    let sidecars = pod(r#"
metadata: {name: w-0, namespace: ml}
spec:
  containers: [{name: a, resources: {requests: {nvidia.com/gpu: "9e15"}}}]
  initContainers:
  - {name: s, restartPolicy: Always, resources: {requests: {nvidia.com/gpu: "9e15"}}}
"#);
    assert!(pod_to_update(&sidecars, None).is_err());
    // The largest single request is fine.
    let big = pod(r#"
metadata: {name: w-0, namespace: ml}
spec:
  containers: [{name: a, resources: {requests: {cpu: "9223372036854775807m"}}}]
"#);
    assert_eq!(
        pod_to_update(&big, None).unwrap().task.resreq.milli_cpu,
        i64::MAX
    );
}

#[test]
fn pod_requests_group_and_role() {
    let p = pod(r#"
metadata:
  name: w-0
  namespace: ml
  uid: u1
  annotations: {scheduling.k8s.io/group-name: tf, volcano.sh/task-spec: worker}
spec:
  schedulerName: rust-batch
  priority: 100
  nodeSelector: {pool: gpu}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  containers:
  - name: c
    resources:
      requests: {cpu: 500m, memory: 1Gi}
      limits: {nvidia.com/gpu: "2"}
  initContainers:
  - name: i
    resources: {requests: {cpu: "2"}}
"#);
    let u = pod_to_update(&p, Some("ml/tf".into())).unwrap();
    assert_eq!(u.task.resreq.milli_cpu, 2000, "init container peak wins");
    assert_eq!(u.task.resreq.memory, 1 << 30);
    assert_eq!(
        u.task.resreq.scalar("nvidia.com/gpu"),
        2000,
        "limits stand in for requests"
    );
    assert_eq!(&*u.task.role, "worker");
    assert_eq!(u.task.priority, 100);
    assert_eq!(u.task.status, TaskStatus::Pending);
    assert_eq!(
        u.task
            .placement
            .node_selector
            .get("pool")
            .map(String::as_str),
        Some("gpu")
    );
}

#[test]
fn bad_quantities_name_the_field() {
    let p = pod(r#"
metadata: {name: bad, namespace: ns}
spec:
  containers:
  - name: c
    resources: {requests: {cpu: "-1"}}
"#);
    let e = pod_to_update(&p, None).unwrap_err();
    assert_eq!(e.field, "spec.containers[0].resources");
    assert!(e.to_string().contains("pod ns/bad"), "{e}");
    assert!(e.to_string().contains("negative"), "{e}");
}

#[test]
fn pod_rules_convert_with_their_label_keys_and_host_ports() {
    let p = pod(r#"
metadata: {name: w, namespace: ns, labels: {job: j1, rev: r2}}
spec:
  hostNetwork: true
  containers:
  - name: c
    ports: [{containerPort: 2222}, {containerPort: 80, hostPort: 8080, protocol: UDP}]
  affinity:
    nodeAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - {weight: 10, preference: {matchExpressions: [{key: zone, operator: In, values: [a]}]}}
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {job: j1}}}
  topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway,
     labelSelector: {matchLabels: {job: j1}}, matchLabelKeys: [rev]}
"#);
    let t = pod_to_update(&p, None).unwrap().task;
    let pl = &t.placement;
    assert_eq!(pl.preferred_node_affinity[0].weight, 10);
    let ports: Vec<(i32, &str)> = pl
        .host_ports
        .iter()
        .map(|h| (h.port, h.protocol.as_str()))
        .collect();
    assert_eq!(ports, [(2222, "TCP"), (8080, "UDP")]);
    let rules = pl.rules().unwrap();
    assert_eq!(rules.pod_anti_affinity.required().len(), 1);
    let spread = &rules.topology_spread_constraints[0];
    assert!(
        spread.match_label_keys.is_empty(),
        "folded into the selector"
    );
    let selector = spread.label_selector.as_ref().unwrap();
    assert!(selector.matches(&labels(&[("job", "j1"), ("rev", "r2")])));
    assert!(!selector.matches(&labels(&[("job", "j1"), ("rev", "r1")])));
    assert_eq!(t.labels.get("job").map(String::as_str), Some("j1"));
}

#[test]
fn malformed_pod_rules_name_the_field() {
    let cases = [
            (
                "affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: zone, labelSelector: {matchExpressions: [{key: a, operator: Near, values: [x]}]}}]}}",
                "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchExpressions[0].operator",
            ),
            (
                "topologySpreadConstraints: [{maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]",
                "spec.topologySpreadConstraints[0]",
            ),
            (
                "affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: '', labelSelector: {}}]}}",
                "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]",
            ),
            (
                "topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: Sometimes}]",
                "spec.topologySpreadConstraints[0].whenUnsatisfiable",
            ),
        ];
    for (spec, field) in cases {
        let p = pod(&format!(
                "metadata: {{name: bad, namespace: ns}}\nspec:\n  containers: [{{name: c}}]\n  {spec}\n"
            ));
        let e = pod_to_update(&p, None).unwrap_err();
        assert_eq!(e.field, field, "{e}");
    }
}

#[test]
fn runtime_estimates_come_from_the_annotation_or_the_deadline() {
    let annotated = pod(r#"
metadata:
  name: a
  namespace: ns
  annotations: {rust-batch.io/runtime-estimate: 1h30m}
spec: {activeDeadlineSeconds: 60, containers: []}
status: {phase: Running, startTime: '2026-01-01T00:00:00Z'}
"#);
    let (u, warnings) = pod_to_update_with_warnings(&annotated, None).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(u.task.estimate, Some(90 * 60 * 1000), "the annotation wins");
    assert_eq!(u.task.started, Some(1_767_225_600_000));
    let deadline = pod("metadata: {name: d}\nspec: {activeDeadlineSeconds: 600, containers: []}\n");
    let u = pod_to_update(&deadline, None).unwrap();
    assert_eq!(u.task.estimate, Some(600_000));
    assert_eq!(u.task.started, None);
    let none = pod("metadata: {name: n}\nspec: {containers: []}\n");
    assert_eq!(pod_to_update(&none, None).unwrap().task.estimate, None);
}

#[test]
fn a_bad_runtime_estimate_is_ignored_with_a_warning() {
    let bad = pod(r#"
metadata:
  name: b
  namespace: ns
  annotations: {rust-batch.io/runtime-estimate: soon}
spec: {activeDeadlineSeconds: 120, containers: []}
"#);
    let (u, warnings) = pod_to_update_with_warnings(&bad, Some("ns/g".into())).unwrap();
    assert_eq!(u.task.estimate, Some(120_000), "the deadline still serves");
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].reason, "BadRuntimeEstimate");
    let w = &warnings[0].message;
    assert!(
        w.contains("pod ns/b")
            && w.contains("rust-batch.io/runtime-estimate")
            && w.contains("\"soon\""),
        "{w}"
    );
    let bad_only = pod("metadata: {name: c, annotations: {rust-batch.io/runtime-estimate: '-'}}\nspec: {containers: []}\n");
    let (u, warnings) = pod_to_update_with_warnings(&bad_only, None).unwrap();
    assert_eq!((u.task.estimate, warnings.len()), (None, 1));
}

#[test]
fn kueue_topology_annotations_become_the_pods_request() {
    use crate::model::{TopologyBound, TopologyMode};
    let required = pod(r#"
metadata:
  name: w-0
  namespace: ml
  annotations: {kueue.x-k8s.io/podset-required-topology: example.com/rack}
spec: {containers: []}
"#);
    let (u, warnings) = pod_to_update_with_warnings(&required, None).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let t = u.task.topology.expect("a request");
    assert_eq!(
        (t.mode, &t.bound, &t.problem),
        (
            TopologyMode::Hard,
            &TopologyBound::LabelKey("example.com/rack".into()),
            &None
        )
    );
    let preferred = pod(r#"
metadata:
  name: w-1
  namespace: ml
  annotations: {kueue.x-k8s.io/podset-preferred-topology: topology.kubernetes.io/zone}
spec: {containers: []}
"#);
    let t = pod_to_update(&preferred, None)
        .unwrap()
        .task
        .topology
        .unwrap();
    assert_eq!(t.mode, TopologyMode::Soft);
    let plain = pod("metadata: {name: p}\nspec: {containers: []}\n");
    assert!(pod_to_update(&plain, None).unwrap().task.topology.is_none());
}

#[test]
fn a_malformed_kueue_annotation_is_passed_on_with_a_warning() {
    let bad = pod(r#"
metadata:
  name: w-0
  namespace: ml
  annotations: {kueue.x-k8s.io/podset-required-topology: "not a key/"}
spec: {containers: []}
"#);
    let (u, warnings) = pod_to_update_with_warnings(&bad, Some("ml/g".into())).unwrap();
    let t = u
        .task
        .topology
        .expect("the request is kept: a hard one makes the gang wait");
    let problem = t.problem.clone().expect("with its problem");
    assert!(
        problem.starts_with(
            "pod ml/w-0: annotation kueue.x-k8s.io/podset-required-topology \"not a key/\""
        ),
        "{problem}"
    );
    assert_eq!(
        warnings,
        vec![PodWarning {
            reason: "InvalidNetworkTopology",
            message: problem
        }]
    );
}

#[test]
fn pod_level_resources_replace_the_containers_requests_per_resource() {
    // PodLevelResources: cpu from the pod (its limit standing in for a request),
    // memory from the containers, overhead on top.
    let p = pod(r#"
metadata: {name: w-0, namespace: ml}
spec:
  resources: {limits: {cpu: "4"}}
  containers:
  - {name: a, resources: {requests: {cpu: "1", memory: 1Gi}}}
  - {name: b, resources: {requests: {cpu: "1", memory: 1Gi}}}
  overhead: {cpu: 250m}
"#);
    let r = pod_to_update(&p, None).unwrap().task.resreq;
    assert_eq!(r.milli_cpu, 4250);
    assert_eq!(r.memory, 2 * (1 << 30));
    let bad = pod("metadata: {name: w-0, namespace: ml}\nspec: {resources: {requests: {cpu: lots}}, containers: []}\n");
    assert_eq!(
        pod_to_update(&bad, None).unwrap_err().field,
        "spec.resources"
    );
}

#[test]
fn statuses_follow_volcano() {
    let bound = pod(
        "metadata: {name: a}\nspec: {nodeName: n1, containers: []}\nstatus: {phase: Pending}\n",
    );
    assert_eq!(pod_status(&bound), TaskStatus::Bound);
    let deleting = pod("metadata: {name: a, deletionTimestamp: '2024-01-01T00:00:00Z'}\nspec: {nodeName: n1, containers: []}\nstatus: {phase: Running}\n");
    assert_eq!(pod_status(&deleting), TaskStatus::Releasing);
    let done = pod("metadata: {name: a}\nspec: {containers: []}\nstatus: {phase: Succeeded}\n");
    assert_eq!(pod_status(&done), TaskStatus::Succeeded);
}

#[test]
fn nodes_convert_with_taints_and_readiness() {
    let n: Node = crate::yaml::from_str(
        r#"
metadata: {name: n1, labels: {pool: gpu}}
spec:
  taints: [{key: gpu, value: "yes", effect: NoSchedule}]
status:
  allocatable: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "2", pods: "110"}
  conditions: [{type: Ready, status: "True"}]
"#,
    )
    .unwrap();
    let s = node_to_spec(&n).unwrap();
    assert!(s.ready);
    assert_eq!(s.allocatable.scalar("nvidia.com/gpu"), 2000);
    assert_eq!(s.taints.len(), 1);
}

#[test]
fn what_the_engine_does_not_model_is_named_and_the_rest_passes() {
    let spec = |yaml: &str| -> PodSpec { crate::yaml::from_str(yaml).unwrap() };
    assert_eq!(
        unsupported_fields(&spec(
            "containers: [{name: c, resources: {requests: {cpu: '1'}}}]\n\
                 preemptionPolicy: Never\nschedulingGates: [{name: a.io/x}]\n"
        )),
        None,
        "modelled fields and gates (held by the driver) are no refusal"
    );
    assert_eq!(
        unsupported_fields(&spec(
            "containers: [{name: c}, {name: d, resources: {claims: [{name: gpu}]}}]\n\
                 resourceClaims: [{name: gpu, resourceClaimTemplateName: t}]\n\
                 resources: {requests: {cpu: '2'}, claims: [{name: gpu}]}\n"
        )),
        None,
        "DRA claims are modelled (dra_watch): a claim the engine cannot allocate blocks \
             with its own reason"
    );
    assert_eq!(
        unsupported_fields(&spec(
            "containers: [{name: c}]\nresources: {requests: {cpu: '2'}}\n"
        )),
        None,
        "pod-level requests are modelled"
    );
    assert_eq!(
        unsupported_fields(&spec(
            "containers: [{name: c}]\nschedulingGroup: {podGroupName: trainers}\n"
        )),
        None,
        "a member of a native gang joins its PodGroup's gang (dialects::native)"
    );
    assert_eq!(
        unsupported_fields(&spec(
            "containers: [{name: c}]\nhostnameOverride: h\n\
                 evictionResponders: [{name: example.com/drain, priority: 10000}]\n"
        )),
        None,
        "the other fields 1.34-1.37 added are the kubelet's and the eviction API's"
    );
    let never = pod("metadata: {name: a}\nspec: {preemptionPolicy: Never, containers: []}\n");
    assert!(pod_to_update(&never, None).unwrap().task.never_preempts);
    let plain = pod("metadata: {name: a}\nspec: {containers: []}\n");
    assert!(!pod_to_update(&plain, None).unwrap().task.never_preempts);
}

/// The property names of a Kubernetes type, from its OpenAPI schema.
fn fields<T: schemars::JsonSchema>() -> std::collections::BTreeSet<String> {
    let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
    schema
        .get("properties")
        .and_then(|p| p.as_object())
        .expect("an object schema")
        .keys()
        .cloned()
        .collect()
}

/// Every field of `T` is in exactly one of the lists, and every listed field exists:
/// a field a new Kubernetes version adds fails here until someone decides whether
/// rust-batch honours it, refuses pods that use it, or may ignore it.
fn audit<T: schemars::JsonSchema>(
    kind: &str,
    modelled: &[(&str, &str)],
    refused: &[(&str, &str)],
    irrelevant: &[(&str, &str)],
) {
    let have = fields::<T>();
    let mut listed = std::collections::BTreeMap::new();
    for (list, entries) in [
        ("modelled", modelled),
        ("refused", refused),
        ("irrelevant", irrelevant),
    ] {
        for (field, why) in entries {
            assert!(!why.is_empty(), "{kind}.{field}: say why");
            if let Some(other) = listed.insert(*field, list) {
                panic!("{kind}.{field} is both {other} and {list}");
            }
        }
    }
    let unlisted: Vec<&String> = have
        .iter()
        .filter(|f| !listed.contains_key(f.as_str()))
        .collect();
    assert!(
        unlisted.is_empty(),
        "{kind} fields neither modelled, refused nor irrelevant to placement: {unlisted:?} \
             (a silent ignore: honour them, refuse them in unsupported_fields, or say why \
             placement may ignore them)"
    );
    let stale: Vec<&&str> = listed.keys().filter(|f| !have.contains(**f)).collect();
    assert!(stale.is_empty(), "{kind} has no fields {stale:?}");
}

#[test]
fn every_pod_spec_field_is_modelled_refused_or_irrelevant() {
    use k8s_openapi::api::core::v1::{Container, ContainerPort};
    audit::<PodSpec>(
            "PodSpec",
            &[
                ("affinity", "node affinity (required: predicates; preferred: nodeorder) and pod affinity/anti-affinity: predicates and nodeorder"),
                ("containers", "requests and host ports (see the Container audit)"),
                ("initContainers", "requests (max with the sum of sidecars), sidecars, host ports"),
                ("hostNetwork", "every container port is a host port"),
                ("nodeName", "a pod with a node is bound: it counts on that node, whoever set it"),
                ("nodeSelector", "predicates"),
                ("overhead", "added to the requests (RuntimeClass admission sets it)"),
                ("preemptionPolicy", "Never: preempt and reclaim do not evict for the pod's gang"),
                ("priority", "job and task order, preemption (admission sets it from the class)"),
                ("priorityClassName", "through priority; system-*-critical pods are never victims"),
                ("runtimeClassName", "through what RuntimeClass admission writes into the pod: overhead, and its scheduling nodeSelector and tolerations"),
                ("schedulerName", "which pods are ours"),
                ("schedulingGroup", "the pod's gang: its scheduling.k8s.io PodGroup (dialects::native)"),
                ("schedulingGates", "a gated pod is held back; its gang waits and says which gates"),
                ("tolerations", "predicates, against node taints"),
                ("topologySpreadConstraints", "predicates (DoNotSchedule) and nodeorder (ScheduleAnyway)"),
                ("volumes", "PersistentVolumeClaims: their volumes' node affinity and binding (issue 14 item 4)"),
                ("activeDeadlineSeconds", "a runtime estimate for backfill (the pod cannot run longer)"),
                ("resources", "pod-level requests (limits standing in) replace the containers' per resource; its claims name the pod's resourceClaims"),
                ("resourceClaims", "DRA: the pod's claims, allocated from ResourceSlices in the search that places its gang, written before its bind (dra_watch, dra_commit)"),
            ],
            &[],
            &[
                ("automountServiceAccountToken", "kubelet: token mount"),
                ("dnsConfig", "kubelet: resolv.conf"),
                ("dnsPolicy", "kubelet: resolv.conf"),
                ("enableServiceLinks", "kubelet: environment"),
                ("ephemeralContainers", "added to running pods only, with no resources"),
                ("evictionResponders", "who answers an EvictionRequest (1.37, alpha gate EvictionRequestAPI); the pods/eviction subresource preemption goes through does not read it, and placement does not either"),
                ("hostAliases", "kubelet: /etc/hosts"),
                ("hostIPC", "kubelet: namespaces; no node resource is taken"),
                ("hostPID", "kubelet: namespaces; no node resource is taken"),
                ("hostUsers", "kubelet: user namespaces; kube-scheduler does not filter on it either"),
                ("hostname", "kubelet: the pod's hostname"),
                ("hostnameOverride", "kubelet: the pod's hostname (1.34)"),
                ("imagePullSecrets", "kubelet: image pulls"),
                ("os", "validation and kubelet admission; kube-scheduler does not filter on it either (nodeSelector kubernetes.io/os places pods by OS)"),
                ("readinessGates", "readiness after the pod runs"),
                ("restartPolicy", "kubelet: restarts on the node the pod is bound to"),
                ("securityContext", "kubelet: process security"),
                ("serviceAccount", "identity, not placement"),
                ("serviceAccountName", "identity, not placement"),
                ("setHostnameAsFQDN", "kubelet: the pod's hostname"),
                ("shareProcessNamespace", "kubelet: namespaces"),
                ("subdomain", "DNS name, not placement"),
                ("terminationGracePeriodSeconds", "how long a victim takes to go; its room counts until it is gone"),
            ],
        );
    audit::<Container>(
            "Container",
            &[
                (
                    "ports",
                    "hostPort (and every port with hostNetwork): predicates",
                ),
                (
                    "resources",
                    "requests, limits where requests are missing (claims: see below)",
                ),
                (
                    "restartPolicy",
                    "Always on an init container: a sidecar, counted as running alongside",
                ),
            ],
            &[],
            &[
                ("args", "process"),
                ("command", "process"),
                ("env", "process"),
                ("envFrom", "process"),
                (
                    "image",
                    "kube-scheduler's ImageLocality only scores; nothing is misplaced without it",
                ),
                ("imagePullPolicy", "kubelet"),
                ("lifecycle", "kubelet"),
                ("livenessProbe", "kubelet"),
                ("name", "identity"),
                ("readinessProbe", "kubelet"),
                ("resizePolicy", "kubelet: in-place resize"),
                (
                    "restartPolicyRules",
                    "kubelet: restarts a container by its exit code (1.34); a sidecar is told by restartPolicy alone",
                ),
                ("securityContext", "kubelet"),
                ("startupProbe", "kubelet"),
                ("stdin", "kubelet"),
                ("stdinOnce", "kubelet"),
                ("terminationMessagePath", "kubelet"),
                ("terminationMessagePolicy", "kubelet"),
                ("tty", "kubelet"),
                (
                    "volumeDevices",
                    "refers to the pod's volumes, audited there",
                ),
                ("volumeMounts", "refers to the pod's volumes, audited there"),
                ("workingDir", "process"),
            ],
        );
    audit::<ResourceRequirements>(
            "ResourceRequirements",
            &[
                ("requests", "the pod's requests"),
                ("limits", "stand in for missing requests, as in Kubernetes"),
            ],
            &[],
            &[("claims", "which of the pod's resourceClaims a container sees (the kubelet's); placement allocates them through spec.resourceClaims")],
        );
    audit::<ContainerPort>(
        "ContainerPort",
        &[
            ("containerPort", "a host port with hostNetwork"),
            ("hostIP", "host ports clash per IP, 0.0.0.0 with every IP"),
            ("hostPort", "predicates"),
            ("protocol", "host ports clash per protocol"),
        ],
        &[],
        &[("name", "a name for Services")],
    );
}
