#!/usr/bin/env python3
"""Writes core_v1.rs: prost messages of Kubernetes' core/v1 protos, for Pod and Node lists.

Run from the repository root after changing the Kubernetes version the protos come from
(K8S_GO below; the same version as k8s-openapi's feature, see gen_convert.py):

    go mod download k8s.io/api@v0.37.2
    python3 crates/kube/src/proto/gen_proto.py > crates/kube/src/proto/core_v1.rs && cargo fmt

Why not k8s-pb's core/v1: k8s-pb 0.9.0 (the newest published) was generated from
Kubernetes 1.35's protos, and prost skips a field it does not know without a word. Decoding
a 1.37 pod with it loses `spec.schedulingGroup` (a pod of a native gang would be scheduled
as a lone pod), `spec.evictionResponders`, `status.nodeAllocatableResourceClaimStatuses`
and 19 more fields of core/v1. The meta/v1, resource and intstr messages still come from k8s-pb
(unchanged up to 1.37 but for ListMeta.shardInfo, which only a sharded list request gets).

Only the messages a Pod, Node, PodList or NodeList reaches are written. Names follow
prost-build (what k8s-pb has): messages in UpperCamelCase with acronyms as words
(`TCPSocketAction` -> `TcpSocketAction`), fields in snake_case. Kubernetes' protos are
proto2: every scalar is `optional`, repeated scalars are not packed.
"""

import os
import re
import sys

K8S_GO = "v0.37.2"
GOMOD = os.popen("go env GOMODCACHE").read().strip()
PROTO = f"{GOMOD}/k8s.io/api@{K8S_GO}/core/v1/generated.proto"
ROOTS = ["Pod", "PodList", "Node", "NodeList"]

# Messages of other packages, from k8s-pb.
EXTERNAL = {
    ".k8s.io.apimachinery.pkg.apis.meta.v1.": "k8s_pb::apimachinery::pkg::apis::meta::v1::",
    ".k8s.io.apimachinery.pkg.api.resource.": "k8s_pb::apimachinery::pkg::api::resource::",
    ".k8s.io.apimachinery.pkg.util.intstr.": "k8s_pb::apimachinery::pkg::util::intstr::",
    ".k8s.io.apimachinery.pkg.runtime.": "k8s_pb::apimachinery::pkg::runtime::",
}
SCALARS = {
    "string": ("string", "::prost::alloc::string::String"),
    "bool": ("bool", "bool"),
    "int32": ("int32", "i32"),
    "int64": ("int64", "i64"),
    "double": ("double", "f64"),
    "bytes": ('bytes = "vec"', "::prost::alloc::vec::Vec<u8>"),
}
KEYWORDS = {"type", "continue", "ref", "match", "in", "where", "struct", "self"}


def words(name):
    """prost-build's (heck's) words: at a lower->upper step and before the last capital of
    an acronym followed by a lower-case letter (`TCPSocket` -> TCP, Socket); an acronym's
    plural is one word, as k8s-pb names it (`podIPs` -> pod_ips)."""
    return re.findall(r"[A-Z]{2,}s(?![a-z])|[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z]+", name)


def camel(name):
    return "".join(w[0].upper() + w[1:].lower() for w in words(name))


def snake(name):
    s = "_".join(w.lower() for w in words(name))
    return f"r#{s}" if s in KEYWORDS else s


src = open(PROTO).read()
messages = {}  # name -> [(label, type, field, tag)]
for m in re.finditer(r"^message (\w+) \{\n(.*?)^\}", src, re.S | re.M):
    fields = []
    for line in m.group(2).splitlines():
        line = line.strip()
        if not line or line.startswith("//"):
            continue
        f = re.match(r"(optional|repeated)?\s*(map<\s*\w+\s*,\s*[\w.]+\s*>|[\w.]+)\s+(\w+) = (\d+);", line)
        if not f:
            sys.exit(f"{m.group(1)}: cannot read {line!r}")
        fields.append((f.group(1) or "map", f.group(2), f.group(3), int(f.group(4))))
    messages[m.group(1)] = fields


def rust_type(t):
    """(prost kind, Rust type, core/v1 message or None)."""
    if t in SCALARS:
        return SCALARS[t] + (None,)
    for prefix, path in EXTERNAL.items():
        if t.startswith(prefix):
            return ("message", path + camel(t[len(prefix):]), None)
    if t in messages:
        return ("message", camel(t), t)
    sys.exit(f"unknown type {t}")


out, done, todo = [], set(), list(ROOTS)
while todo:
    name = todo.pop(0)
    if name in done:
        continue
    done.add(name)
    fields = messages[name]
    lines = ["#[derive(Clone, PartialEq, ::prost::Message)]", f"pub struct {camel(name)} {{"]
    for label, t, field, tag in fields:
        if label == "map":
            k, v = [x.strip() for x in t[4:-1].split(",")]
            vk, vt, vm = rust_type(v)
            kind = "message" if vk == "message" else vk.split(" ")[0]
            attr = f'btree_map = "{SCALARS[k][0]}, {kind}"'
            ty = f"::prost::alloc::collections::BTreeMap<{SCALARS[k][1]}, {vt}>"
            if vm:
                todo.append(vm)
        else:
            kind, rt, m = rust_type(t)
            if m:
                todo.append(m)
            if label == "repeated":
                packed = ', packed = "false"' if t in ("int32", "int64", "bool", "double") else ""
                attr = f"{kind}, repeated{packed}"
                ty = f"::prost::alloc::vec::Vec<{rt}>"
            else:
                attr = f"{kind}, optional"
                ty = f"::core::option::Option<{rt}>"
        lines.append(f'    #[prost({attr}, tag = "{tag}")]')
        lines.append(f"    pub {snake(field)}: {ty},")
    lines.append("}")
    out.append("\n".join(lines))

print("// @generated by gen_proto.py (see there how to run it); do not edit.")
print(f"// Kubernetes core/v1 protos of k8s.io/api {K8S_GO}: {len(out)} messages a Pod or Node reaches.")
print()
print("/// The Kubernetes minor version (1.x) these protos are of: a newer API server may send")
print("/// fields they lack.")
print(f"pub const KUBERNETES_MINOR: u32 = {int(K8S_GO.split('.')[1])};")
print()
print("\n\n".join(out))
