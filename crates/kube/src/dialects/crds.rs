//! The CRDs rust-batch installs, generated from the Rust types: Volcano's PodGroup, Queue
//! and HyperNode (schemars, brought in line with upstream's), and the optional coscheduling
//! PodGroups (scheduler-plugins, legacy). A gang kind names its own CRD (`GangKind::crd`,
//! None for a built-in kind): the list below follows `KINDS`.
//!
//! `rust-batch crds` prints [`crd_yaml`]; `rust-batch crds --write crds` runs [`write_crds`];
//! `tests/offline/crds.rs` fails when `crds/` differs from [`crd_files`].

use std::path::Path;

use ::kube::core::crd::v1::CustomResourceExt;
use ::kube::core::dynamic::ApiResource;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceSubresourceStatus,
    CustomResourceSubresources, CustomResourceValidation, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde_json::Value;

use super::volcano::api::{PodGroup, Queue, GROUP, VERSION};
use super::volcano::hypernode::{HyperNode, TOPOLOGY_GROUP, TOPOLOGY_VERSION};

/// The OpenAPI v3 schema of a root type, generated as `#[derive(CustomResource)]` does, then
/// brought in line with upstream's (see [`tidy_schema`]).
fn schema_for<K: JsonSchema>() -> JSONSchemaProps {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(::kube::core::schema::StructuralSchemaRewriter)
        .with_transform(::kube::core::schema::OptionalEnum)
        .with_transform(::kube::core::schema::OptionalIntOrString)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<K>().to_value();
    if let Some(root) = schema.as_object_mut() {
        root.remove("title");
        // The root's own fields are the API server's business (apiVersion, kind, metadata);
        // spec and status and everything under them keep their unknown fields.
        if let Some(Value::Object(properties)) = root.get_mut("properties") {
            properties.values_mut().for_each(tidy_schema);
        }
    }
    serde_json::from_value(schema).expect("generated schema is a valid JSONSchemaProps")
}

/// Walks a schema and everything under it:
///
/// - every object with properties gets `x-kubernetes-preserve-unknown-fields: true` (the
///   `extra` maps already yield it through kube's structural rewriter; this makes it hold for
///   every nested object, including core/v1 ones);
/// - `nullable` goes, as in upstream: a null sent for an optional field is dropped by the API
///   server (so defaults apply) rather than stored;
/// - the `default: {}` schemars derives from `#[serde(default)]` goes: upstream defaults
///   only `spec.queue` and `networkTopology.mode`, and so do we;
/// - descriptions are unwrapped (a doc comment's line breaks are not the text's), so
///   `kubectl explain` reflows them.
fn tidy_schema(schema: &mut Value) {
    let Some(map) = schema.as_object_mut() else {
        return;
    };
    map.remove("nullable");
    if let Some(Value::String(description)) = map.get_mut("description") {
        *description = unwrap_lines(description);
    }
    if map
        .get("default")
        .is_some_and(|d| d.as_object().is_some_and(|o| o.is_empty()))
    {
        map.remove("default");
    }
    if let Some(Value::Array(values)) = map.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    if let Some(Value::Object(properties)) = map.get_mut("properties") {
        properties.values_mut().for_each(tidy_schema);
        map.insert(
            "x-kubernetes-preserve-unknown-fields".into(),
            Value::Bool(true),
        );
    }
    match map.get_mut("items") {
        Some(Value::Array(items)) => items.iter_mut().for_each(tidy_schema),
        Some(items) => tidy_schema(items),
        None => {}
    }
    if let Some(additional) = map.get_mut("additionalProperties") {
        tidy_schema(additional);
    }
}

/// Joins the lines of each paragraph with spaces; paragraphs stay apart.
fn unwrap_lines(text: &str) -> String {
    text.split("\n\n")
        .map(|paragraph| {
            paragraph
                .lines()
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// What differs between the CRDs built here.
struct CrdShape {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    scope: &'static str,
    short_names: &'static [&'static str],
    printer_columns: Vec<CustomResourceColumnDefinition>,
    status_subresource: bool,
    schema: JSONSchemaProps,
}

fn build_crd(shape: CrdShape) -> CustomResourceDefinition {
    CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(format!("{}.{}", shape.plural, shape.group)),
            ..Default::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: shape.group.into(),
            names: CustomResourceDefinitionNames {
                kind: shape.kind.into(),
                list_kind: Some(format!("{}List", shape.kind)),
                plural: shape.plural.into(),
                singular: Some(shape.singular.into()),
                short_names: Some(shape.short_names.iter().map(|s| s.to_string()).collect()),
                ..Default::default()
            },
            scope: shape.scope.into(),
            versions: vec![CustomResourceDefinitionVersion {
                name: shape.version.into(),
                served: true,
                storage: true,
                additional_printer_columns: Some(shape.printer_columns),
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(shape.schema),
                }),
                subresources: shape
                    .status_subresource
                    .then(|| CustomResourceSubresources {
                        status: Some(CustomResourceSubresourceStatus(serde_json::json!({}))),
                        scale: None,
                    }),
                ..Default::default()
            }],
            ..Default::default()
        },
        status: None,
    }
}

fn column(
    name: &str,
    type_: &str,
    json_path: &str,
    priority: Option<i32>,
    description: Option<&str>,
) -> CustomResourceColumnDefinition {
    CustomResourceColumnDefinition {
        name: name.into(),
        type_: type_.into(),
        json_path: json_path.into(),
        priority,
        description: description.map(Into::into),
        format: None,
    }
}
impl CustomResourceExt for PodGroup {
    fn crd() -> CustomResourceDefinition {
        build_crd(CrdShape {
            group: GROUP,
            version: VERSION,
            kind: "PodGroup",
            plural: "podgroups",
            singular: "podgroup",
            scope: "Namespaced",
            short_names: Self::shortnames(),
            printer_columns: vec![
                column("STATUS", "string", ".status.phase", None, None),
                column("minMember", "integer", ".spec.minMember", None, None),
                column("RUNNINGS", "integer", ".status.running", None, None),
                column("AGE", "date", ".metadata.creationTimestamp", None, None),
                column("QUEUE", "string", ".spec.queue", Some(1), None),
            ],
            // Upstream has none; operators write status with plain updates.
            status_subresource: false,
            schema: schema_for::<Self>(),
        })
    }

    fn crd_name() -> &'static str {
        "podgroups.scheduling.volcano.sh"
    }

    fn api_resource() -> ApiResource {
        ApiResource::erase::<Self>(&())
    }

    fn shortnames() -> &'static [&'static str] {
        &["pg", "podgroup-v1beta1"]
    }
}

impl CustomResourceExt for Queue {
    fn crd() -> CustomResourceDefinition {
        build_crd(CrdShape {
            group: GROUP,
            version: VERSION,
            kind: "Queue",
            plural: "queues",
            singular: "queue",
            scope: "Cluster",
            short_names: Self::shortnames(),
            printer_columns: vec![
                column(
                    "PARENT",
                    "string",
                    ".spec.parent",
                    None,
                    Some("The parent queue of this queue"),
                ),
                column("AGE", "date", ".metadata.creationTimestamp", None, None),
            ],
            status_subresource: true,
            schema: schema_for::<Self>(),
        })
    }

    fn crd_name() -> &'static str {
        "queues.scheduling.volcano.sh"
    }

    fn api_resource() -> ApiResource {
        ApiResource::erase::<Self>(&())
    }

    fn shortnames() -> &'static [&'static str] {
        &["q", "queue-v1beta1"]
    }
}

/// Upstream's HyperNode CRD, minus the member type enum and the selector's CEL rules (see
/// `volcano::hypernode`): the scheduler reports what they would refuse.
impl CustomResourceExt for HyperNode {
    fn crd() -> CustomResourceDefinition {
        build_crd(CrdShape {
            group: TOPOLOGY_GROUP,
            version: TOPOLOGY_VERSION,
            kind: "HyperNode",
            plural: "hypernodes",
            singular: "hypernode",
            scope: "Cluster",
            short_names: Self::shortnames(),
            printer_columns: vec![
                column("Tier", "string", ".spec.tier", None, None),
                column("TierName", "string", ".spec.tierName", None, None),
                column("NodeCount", "integer", ".status.nodeCount", None, None),
                column("Age", "date", ".metadata.creationTimestamp", None, None),
            ],
            status_subresource: true,
            schema: schema_for::<Self>(),
        })
    }

    fn crd_name() -> &'static str {
        "hypernodes.topology.volcano.sh"
    }

    fn api_resource() -> ApiResource {
        ApiResource::erase::<Self>(&())
    }

    fn shortnames() -> &'static [&'static str] {
        &["hn"]
    }
}

// ---------------------------------------------------------------------------------------
// Generated files
// ---------------------------------------------------------------------------------------

const GENERATED_HEADER: &str =
    "# Generated from the types in crates/kube/src/dialects by `rust-batch crds --write crds`. Do not edit.\n";

/// Every CRD we own, in a fixed order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    crd_list().into_iter().map(|(_, crd)| crd).collect()
}

/// A CRD file: its path under `crds/` and the definition.
pub type CrdFile = (&'static str, CustomResourceDefinition);

/// Every gang kind's CRD in the order of `KINDS` (built-in kinds have none), Volcano's
/// Queue beside its PodGroup, then Volcano's optional HyperNode.
fn crd_list() -> Vec<CrdFile> {
    let mut list = Vec::new();
    for kind in super::KINDS {
        if let Some(file) = (kind.crd)() {
            list.push(file);
        }
        if kind.dialect == super::kind::Dialect::VOLCANO {
            list.push(("scheduling.volcano.sh_queues.yaml", Queue::crd()));
        }
    }
    list.push(("topology.volcano.sh_hypernodes.yaml", HyperNode::crd()));
    list
}

/// `*.k8s.io` groups are protected: the API server accepts their CRDs only with an
/// annotation pointing to where the API was approved (as the upstream CRD does).
pub(super) fn approved_if_protected(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    if crd.spec.group.ends_with(".k8s.io") {
        approved(crd)
    } else {
        crd
    }
}

fn approved(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    crd.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            "api-approved.kubernetes.io".into(),
            "https://github.com/kubernetes-sigs/scheduler-plugins/pull/50".into(),
        );
    crd
}

/// The checked-in files: (path in `crds/`, contents), one CRD per file, named as upstream
/// names them; the optional dialects' under `optional/`.
pub fn crd_files() -> Vec<(&'static str, String)> {
    crd_list()
        .into_iter()
        .map(|(name, crd)| {
            let yaml = crate::yaml::to_string(&crd).expect("a CRD serializes to YAML");
            (name, format!("{GENERATED_HEADER}{yaml}"))
        })
        .collect()
}

/// Every CRD as one multi-document YAML stream (`rust-batch crds | kubectl apply -f -`).
pub fn crd_yaml() -> String {
    crd_files()
        .into_iter()
        .map(|(_, contents)| contents)
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Writes [`crd_files`] into `dir`, creating it if needed.
pub fn write_crds(dir: &Path) -> std::io::Result<()> {
    for (name, contents) in crd_files() {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, contents)?;
    }
    Ok(())
}
