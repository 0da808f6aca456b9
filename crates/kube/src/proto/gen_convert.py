#!/usr/bin/env python3
"""Writes convert.rs: protobuf Pod and Node -> their k8s-openapi types, field by field.

The protobuf messages are core_v1.rs's (gen_proto.py: Kubernetes' own core/v1 protos of
K8S_GO) and k8s-pb's for apimachinery (meta/v1, Quantity, IntOrString). Run from the
repository root after changing the k8s-openapi, k8s-pb or Kubernetes version (and
gen_proto.py first):

    go mod download k8s.io/api@v0.37.2 k8s.io/apimachinery@v0.37.2
    python3 crates/kube/src/proto/gen_convert.py > crates/kube/src/proto/convert.rs && cargo fmt

A field of the k8s-openapi types the protos lack would be left empty (a note at the top of
convert.rs says which): the protos and the k8s-openapi feature must be of the same
Kubernetes version, so there is none.

The conversion gives what decoding the same object's JSON gives, so a pod listed in
protobuf is the pod the JSON watch shows. The one difference between the encodings that
matters: Go's protobuf encoding writes a non-pointer string, number or bool even when it
is empty/zero, while its JSON encoding omits it when the field says `omitempty`. Which
fields those are is read from the Go types (k8s.io/api, k8s.io/apimachinery): such a
zero value converts to None; a pointer field's zero value (priority 0, an empty
storageClassName) is kept, as JSON keeps it.
"""

import glob
import os
import re
import sys

K8S_GO = "v0.37.2"
OPENAPI_FEATURE = "v1_37"

REGISTRY = os.path.expanduser("~/.cargo/registry/src")
OPENAPI = glob.glob(f"{REGISTRY}/*/k8s-openapi-0.29.0/src/{OPENAPI_FEATURE}")[0]
PB = glob.glob(f"{REGISTRY}/*/k8s-pb-0.9.0/src")[0]
# core/v1 from Kubernetes' protos of K8S_GO (gen_proto.py), not k8s-pb's (1.35).
CORE_V1 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "core_v1.rs")
GOMOD = os.popen("go env GOMODCACHE").read().strip()
GO_FILES = [
    f"{GOMOD}/k8s.io/api@{K8S_GO}/core/v1/types.go",
    f"{GOMOD}/k8s.io/apimachinery@{K8S_GO}/pkg/apis/meta/v1/types.go",
]

ROOTS = ["api::core::v1::Pod", "api::core::v1::Node"]

# Types converted by hand in mod.rs (their shapes differ between the encodings).
LEAVES = {
    "apimachinery::pkg::api::resource::Quantity",
    "apimachinery::pkg::apis::meta::v1::Time",
    "apimachinery::pkg::apis::meta::v1::MicroTime",
    "apimachinery::pkg::util::intstr::IntOrString",
}
# Fields left out: managedFields are the API server's bookkeeping (see `lean`).
SKIP = {("ObjectMeta", "managed_fields")}
SCALARS = {"String", "i32", "i64", "bool", "f64"}


def norm(name):
    return name.replace("r#", "").replace("_", "").lower()


# ---- Go: which fields are non-pointer scalars with omitempty, and inline structs ----
go_fields = {}  # struct -> norm(json) -> (pointer, omitempty)
go_inline = {}  # struct -> [embedded struct names]
for path in GO_FILES:
    src = open(path).read()
    for m in re.finditer(r"^type (\w+) struct \{\n(.*?)^\}", src, re.S | re.M):
        fields, inline = {}, []
        for line in m.group(2).splitlines():
            line = line.strip()
            if line.startswith("//"):
                continue
            f = re.match(r'(\w+)\s+(\*?)(\S+)\s+`json:"([^",]*)((?:,[^"]*)?)"', line)
            # An embedded struct: `json:",inline"` up to 1.33, `json:""` since.
            e = re.match(r'(\*?)(\w+)\s+`json:"(?:,inline)?"', line)
            if e:
                inline.append(e.group(2))
            elif f:
                fields[norm(f.group(4))] = (f.group(2) == "*", "omitempty" in f.group(5))
        go_fields[m.group(1)] = fields
        go_inline[m.group(1)] = inline


def go_field(struct, name):
    """(pointer, omitempty) of a Go field, looking through inline structs."""
    todo = [struct]
    while todo:
        s = todo.pop()
        if name in go_fields.get(s, {}):
            return go_fields[s][name]
        todo += go_inline.get(s, [])
    return None


# ---- Rust type expressions ----
def split_top(s, sep=","):
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        if ch == sep and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [x.strip() for x in out]


def parse_type(t, module):
    """('opt'|'vec'|'map'|'scalar'|'msg', inner) with message paths made absolute."""
    t = t.replace(" ", "")
    for prefix, kind in [
        ("::core::option::Option<", "opt"),
        ("Option<", "opt"),
        ("::prost::alloc::vec::Vec<", "vec"),
        ("std::vec::Vec<", "vec"),
        ("::prost::alloc::collections::BTreeMap<", "map"),
        ("std::collections::BTreeMap<", "map"),
    ]:
        if t.startswith(prefix):
            inner = t[len(prefix) : -1]
            if kind == "map":
                inner = split_top(inner)[1]
            return (kind, parse_type(inner, module))
    last = t.split("::")[-1]
    if last in SCALARS or t in ("i32", "i64", "bool", "f64"):
        return ("scalar", last)
    if t.startswith("crate::"):
        return ("msg", t[len("crate::") :])
    if t.startswith("k8s_pb::"):
        return ("msg", t[len("k8s_pb::") :])
    parts = t.split("::")
    mod = list(module)
    while parts[0] == "super":
        parts.pop(0)
        mod.pop()
    if len(parts) == 1:
        return ("msg", "::".join(mod + parts))
    return ("msg", "::".join(parts))


def struct_fields(text, name):
    """The `pub name: type` fields of `pub struct name {...}` in text, in order."""
    m = re.search(r"pub struct " + name + r" \{\n(.*?)^\}", text, re.S | re.M)
    if not m:
        return None
    body = "\n".join(
        l for l in m.group(1).splitlines() if not l.strip().startswith(("///", "#[", "//"))
    )
    fields = []
    for item in split_top(body):
        f = re.match(r"pub (r#\w+|\w+):\s*(.*)$", item.strip(), re.S)
        if f:
            fields.append((f.group(1), f.group(2)))
    return fields


pb_cache = {}


def pb_struct(path):
    module, name = path.split("::")[:-1], path.split("::")[-1]
    f = CORE_V1 if module == ["api", "core", "v1"] else os.path.join(PB, *module, "mod.rs")
    if f not in pb_cache:
        pb_cache[f] = open(f).read()
    names = re.findall(r"^pub struct (\w+) \{", pb_cache[f], re.M)
    match = [n for n in names if n.lower() == name.lower()]
    fields = struct_fields(pb_cache[f], match[0]) if match else None
    if fields is None:
        sys.exit(f"k8s-pb has no {path}")
    return match[0], [(n, parse_type(t, module)) for n, t in fields]


def openapi_struct(path):
    module, name = path.split("::")[:-1], path.split("::")[-1]
    for f in glob.glob(os.path.join(OPENAPI, *module, "*.rs")):
        text = open(f).read()
        if f"pub struct {name} {{" in text:
            return [(n, parse_type(t, module)) for n, t in struct_fields(text, name)]
    sys.exit(f"k8s-openapi has no {path}")


# ---- the conversion of one field ----
def conv(src, pb, oa, struct, field):
    """Rust expression turning `src` (of pb type) into the openapi type."""
    if oa[0] == "opt" and pb[0] == "opt":
        if oa[1][0] == "scalar":
            go = go_field(struct, norm(field))
            if go is None:
                warnings.append(f"{struct}.{field}: not in the Go types; kept as is")
            elif not go[0] and go[1]:
                return f"{src}.filter(|v| !v.is_zero())"
            return src
        if oa[1][1].endswith(("::Time", "::MicroTime")):
            # Go's JSON writes a zero (non-pointer) time as null; protobuf as 0 s.
            return f"{src}.filter(|v| !v.is_zero()).map(Conv::conv)"
        return f"{src}.map(Conv::conv)"
    if oa[0] != "opt" and pb[0] == "opt":
        if oa[0] == "scalar":
            return f"{src}.unwrap_or_default()"
        return f"{src}.map(Conv::conv).unwrap_or_default()"
    if oa[0] == "opt" and pb[0] in ("vec", "map"):
        return f"non_empty({src})"
    if oa[0] == pb[0] and oa[0] in ("vec", "map"):
        return f"{src}.conv()"
    sys.exit(f"{struct}.{field}: cannot convert {pb} to {oa}")


warnings = []
done, todo, impls = set(), list(ROOTS), []


def messages(t):
    while t[0] in ("opt", "vec", "map"):
        t = t[1]
    return [t[1]] if t[0] == "msg" else []


while todo:
    path = todo.pop(0)
    if path in done or path in LEAVES:
        continue
    done.add(path)
    name = path.split("::")[-1]
    pb_name, pb = pb_struct(path)
    pb_path = "::".join(path.split("::")[:-1] + [pb_name])
    pb_by_name = {norm(n): (n, t) for n, t in pb}
    # Inline (embedded) Go structs are one nested message in protobuf, flat in JSON.
    inline = {}
    for n, t in pb:
        if t[0] == "opt" and t[1][0] == "msg" and t[1][1].split("::")[-1] in go_inline.get(name, []):
            for n2, t2 in pb_struct(t[1][1])[1]:
                inline[norm(n2)] = (n, n2, t2)
    lets, fields = [], []
    used_inline = set()
    for n, oa in openapi_struct(path):
        if (name, n) in SKIP:
            fields.append(f"{n}: None")
            continue
        key = norm(n)
        if key in pb_by_name:
            pn, pt = pb_by_name[key]
            src = f"p.{pn}"
        elif key in inline:
            outer, pn, pt = inline[key]
            used_inline.add(outer)
            src = f"{outer.replace('r#', '')}.{pn}"
        else:
            warnings.append(f"{name}.{n}: not in k8s-pb; left empty")
            fields.append(f"{n}: Default::default()")
            continue
        fields.append(f"{n}: {conv(src, pt, oa, name, n)}")
        todo += messages(oa)
    for outer in sorted(used_inline):
        lets.append(f"let {outer.replace('r#', '')} = p.{outer}.unwrap_or_default();")
    impls.append(
        f"impl Conv<oa::{path}> for pb::{pb_path} {{\n"
        f"    fn conv(self) -> oa::{path} {{\n"
        f"        let p = self;\n"
        + "".join(f"        {l}\n" for l in lets)
        + f"        oa::{path} {{\n"
        + "".join(f"            {f},\n" for f in fields)
        + "        }\n    }\n}\n"
    )

print("// @generated by gen_convert.py (see there how to run it); do not edit.")
print(
    f"// core_v1.rs (k8s.io/api {K8S_GO}) and k8s-pb 0.9.0 (apimachinery) -> k8s-openapi 0.29.0 "
    f"({OPENAPI_FEATURE}), Go types k8s.io/api {K8S_GO}."
)
for w in warnings:
    print(f"// note: {w}")
print("#![allow(clippy::all)]")
print("use super::{non_empty, Conv, Zero};")
print("use k8s_openapi as oa;")
print("use super::pb;")
print()
print("\n".join(impls))
