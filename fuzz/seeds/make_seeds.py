#!/usr/bin/env python3
"""Writes the seed inputs of each fuzz target into fuzz/corpus/<target>/ from the repo's real
files (scenarios, the deployed config, the Kubernetes examples) plus the dialect examples of
the README and tests. Run once before the first fuzzing; `cargo fuzz cmin` keeps what matters."""
import hashlib, json, os, re, sys
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")

def put(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    name = "seed-" + hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

scenarios = sorted(os.path.join(ROOT, "examples", "scenarios", f)
                   for f in os.listdir(os.path.join(ROOT, "examples", "scenarios")))
quantities = set("500m 1 1.5 1e3 2Gi 100M 0.1m 1k .5 +2 -0 8Ei 9223372036854775807m 1E-3 2Ti 1.5Gi 250u 10n".split())
for path in scenarios:
    text = open(path).read()
    put("scenario", text)
    doc = yaml.safe_load(text)
    if doc.get("config"):
        put("volcano_config", doc["config"])
    for m in re.finditer(r'(cpu|memory|nvidia\.com/gpu|pods): *"?([0-9.]+[A-Za-z]*)"?', text):
        quantities.add(m.group(2))
for q in sorted(quantities):
    put("quantity", q)

# The built-in default (crates/engine/src/conf.rs) and the deployed ConfigMap.
conf_rs = open(os.path.join(ROOT, "src", "conf.rs")).read()
put("volcano_config", re.search(r'DEFAULT_CONF: &str = r#"(.*?)"#;', conf_rs, re.S).group(1))
for doc in yaml.safe_load_all(open(os.path.join(ROOT, "deploy", "rust-batch.yaml"))):
    if doc and doc.get("kind") == "ConfigMap":
        for text in doc["data"].values():
            put("volcano_config", text)
# Every plugin and action argument the code reads.
put("volcano_config", """actions: "enqueue, allocate, preempt, reclaim, backfill"
configurations:
- name: allocate
  arguments: {minNodesToFind: 10, percentageOfNodesToFind: 50}
- name: backfill
  arguments: {reservation: true}
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
    enableJobStarving: true
  - name: conformance
- plugins:
  - name: overcommit
    arguments: {overcommit-factor: 1.5}
  - name: drf
    enablePreemptable: false
  - name: predicates
    arguments: {predicate.GPUSharingEnable: false}
  - name: capacity
  - name: nodeorder
    arguments: {leastrequested.weight: 1, mostrequested.weight: 0, balancedresource.weight: 1, tainttoleration.weight: 1}
  - name: binpack
    arguments: {binpack.weight: 10, binpack.cpu: 2, binpack.memory: 1, binpack.resources: "nvidia.com/gpu", binpack.resources.nvidia.com/gpu: 5}
metrics:
  address: http://prometheus:9090
""")

# CRDs: the Kubernetes examples' PodGroups, and one of each kind with every field.
for f in sorted(os.listdir(os.path.join(ROOT, "examples", "k8s"))):
    for doc in yaml.safe_load_all(open(os.path.join(ROOT, "examples", "k8s", f))):
        if doc and doc.get("kind") in ("PodGroup", "Queue"):
            put("crd_specs", json.dumps(doc))
meta = {"name": "tf-smoke-gpu", "namespace": "e2e", "creationTimestamp": "2026-01-02T03:04:05Z"}
put("crd_specs", json.dumps({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
    "metadata": dict(meta, annotations={"scheduling.volcano.sh/queue-name": "team-a"}),
    "spec": {"minMember": 3, "minTaskMember": {"ps": 1, "worker": 2}, "queue": "default",
             "priorityClassName": "high", "minResources": {"cpu": "3", "memory": "1Gi", "nvidia.com/gpu": "2"}},
    "status": {"phase": "Inqueue", "running": 1}}))
for q in [{"weight": 2, "reclaimable": False, "capability": {"cpu": "8"}, "deserved": {"cpu": "4"},
           "guarantee": {"resource": {"cpu": "2", "memory": "1Gi"}}, "parent": "root"},
          {"weight": 0}, {"parent": "b"}]:
    put("crd_specs", json.dumps({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
        "metadata": {"name": "team-a"}, "spec": q, "status": {"state": "Open"}}))
put("crd_specs", json.dumps([
    {"metadata": {"name": "a"}, "spec": {"parent": "b"}},
    {"metadata": {"name": "b"}, "spec": {"parent": "a"}},
    {"metadata": {"name": "c"}, "spec": {"capability": {"cpu": "4"}, "guarantee": {"resource": {"cpu": "8"}}}}]))
put("crd_specs", json.dumps({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
    "metadata": meta, "spec": {"minMember": 5, "minResources": {"cpu": "9"}, "scheduleTimeoutSeconds": 60},
    "status": {"phase": "Scheduling", "running": 2, "scheduleStartTime": "2026-01-02T03:04:05Z"}}))
put("crd_specs", json.dumps({"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
    "metadata": dict(meta, annotations={
        "gang.scheduling.koordinator.sh/mode": "NonStrict",
        "gang.scheduling.koordinator.sh/total-number": "6",
        "gang.scheduling.koordinator.sh/groups": "[\"e2e/gang-a\",\"e2e/gang-b\"]",
        "gang.scheduling.koordinator.sh/waiting-time": "1.5h",
        "gang.scheduling.koordinator.sh/match-policy": "waiting-and-running"}),
    "spec": {"minMember": 4, "scheduleTimeoutSeconds": 10}}))
print("seeds written to", CORPUS)
