//! One trait for a gang kind: a PodGroup API type, its CRD (or none: built in), how its
//! pods point at it, its conversion to the engine's gang, its status patch, whether the API
//! server may lack it. A kind is one file implementing [`GangKind`] plus one line in
//! [`super::KINDS`]; the index stores its objects, the driver watches them, the status
//! writer writes them and `crds` writes their CRDs through the type-erased [`Kind`] that
//! line makes.

use std::any::Any;
use std::collections::HashMap;
use std::fmt::Debug;

use ::kube::api::{Api, Patch, PatchParams};
use ::kube::core::NamespaceResourceScope;
use ::kube::{Client, Resource, ResourceExt};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::coscheduling::key_of_group;
use super::crds::CrdFile;
use super::GangDecl;
use crate::convert::ConvertError;
use crate::framework::JobCondition;
use crate::model::{JobInfo, JobSpec};
use crate::supervise::Watches;
use crate::watch::{watch, Feed, Sink, Store as WatchedStore, Wake};

/// Which kind of object defines a gang, by API group. When several kinds name the same
/// `namespace/name`, the first in [`super::KINDS`] defines the gang.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dialect(pub &'static str);

impl Dialect {
    pub const VOLCANO: Dialect = Dialect("scheduling.volcano.sh");
    pub const X_K8S: Dialect = Dialect("scheduling.x-k8s.io");
    pub const SIGS: Dialect = Dialect("scheduling.sigs.k8s.io");

    /// The API group, as logs and the debug API name it.
    pub fn api_group(self) -> &'static str {
        self.0
    }
}

/// What a conversion may read besides the object.
pub struct KindContext<'a> {
    /// PriorityClass values by name.
    pub priority_classes: &'a HashMap<String, i32>,
}

/// A PodGroup kind.
pub trait GangKind:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Serialize
    + Send
    + Sync
    + 'static
{
    const DIALECT: Dialect;
    /// The kind's name in logs and the index's readiness ("scheduling.x-k8s.io PodGroup").
    const WATCH_NAME: &'static str;
    /// What is off while the API server does not serve the kind (a CRD not installed, a
    /// built-in group not enabled): the kind is watched only where it is served.
    const OFF_WHEN_ABSENT: &'static str = "this gang dialect";
    /// Whether status goes through the status subresource (Volcano's PodGroup has none).
    const STATUS_SUBRESOURCE: bool = true;
    /// The pod field `pod_declares` reads, for messages ("" when pods have none).
    const POD_FIELD: &'static str = "";

    /// The CRD rust-batch ships for the kind (its file under `crds/`, see `crds`), or None
    /// for a kind built into the API server (no CRD: it is served or not).
    fn crd() -> Option<CrdFile>;
    /// The engine's gang this object defines.
    fn to_job(&self, ctx: &KindContext) -> Result<JobSpec, ConvertError>;
    /// A merge patch that makes the object's status describe `job` (with the last verdict
    /// on it), or None when it already does.
    fn status_patch(
        &self,
        job: &JobInfo,
        condition: Option<&JobCondition>,
        now_ms: i64,
    ) -> Option<Value>;
    /// The phase the object's status says, if the kind has phases.
    fn stored_phase(&self) -> Option<&str> {
        None
    }
    /// The PriorityClass the object names (its gang is converted again when that class
    /// appears).
    fn priority_class_name(&self) -> Option<&str> {
        None
    }
    /// The gang a pod declares through a field of this kind's own (checked before the
    /// annotation and label dialects, see `pod_gang`), or None.
    fn pod_declares(_pod: &Pod) -> Result<Option<GangDecl>, ConvertError> {
        Ok(None)
    }
    /// The Workload and template the object says it was made from (`workloadRef`), if the
    /// kind has such a reference.
    fn workload_ref(&self) -> Option<(String, String)> {
        None
    }
}

/// What a kind's watch and its status writer's answers go into, whatever the kind: the
/// index, seen through the kind-erased store of each dialect. Defined here so that the
/// dialects need not know the index (it implements this).
pub trait GroupTarget: WatchedStore {
    /// An object of kind `dialect` at `key` (the newest unless a newer is stored); how
    /// soon a cycle needs it.
    fn apply_object(&mut self, dialect: Dialect, key: &str, object: &dyn Any) -> Wake;
    /// The API server's answer to a status write or reread of that object: kept only
    /// while the index still has the object.
    fn apply_answer(&mut self, dialect: Dialect, key: &str, object: &dyn Any);
    fn delete_object(&mut self, dialect: Dialect, key: &str);
    /// Every key stored for kind `dialect` (what a relist may have to forget).
    fn object_keys(&self, dialect: Dialect) -> Vec<String>;
}

/// A kind's objects by `namespace/name`, the newest seen.
pub struct Store<G>(pub HashMap<String, G>);

/// What the index does with a kind's objects, whatever the kind.
pub trait GroupStore: Send + Sync {
    fn dialect(&self) -> Dialect;
    fn contains(&self, key: &str) -> bool;
    fn meta(&self, key: &str) -> Option<&ObjectMeta>;
    fn object_ref(&self, key: &str) -> Option<ObjectReference>;
    fn to_job(&self, key: &str, ctx: &KindContext) -> Option<Result<JobSpec, ConvertError>>;
    /// The status patch with the resourceVersion it is computed from.
    fn status_patch(
        &self,
        key: &str,
        job: &JobInfo,
        condition: Option<&JobCondition>,
        now_ms: i64,
    ) -> Option<(Value, Option<String>)>;
    fn stored_phase(&self, key: &str) -> Option<&str>;
    /// The (Workload, template) the object names, if any.
    fn workload_ref(&self, key: &str) -> Option<(String, String)>;
    /// Forgets an object; returns its uid.
    fn remove(&mut self, key: &str) -> Option<String>;
    fn keys(&self) -> Vec<String>;
    /// The keys of the objects that name PriorityClass `class`.
    fn naming_class(&self, class: &str) -> Vec<String>;
    /// The PriorityClass the object `key` names.
    fn class_of(&self, key: &str) -> Option<String>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// Stores `object` (of this kind) at `key` unless what is stored is newer (see
    /// `newest::store_newest`); whether it stored.
    fn store_newest(&mut self, key: &str, object: &dyn Any) -> bool;
    /// Whether `object` is the very object stored at `key` (the same uid).
    fn holds(&self, key: &str, object: &dyn Any) -> bool;
}

impl<G: GangKind> GroupStore for Store<G> {
    fn dialect(&self) -> Dialect {
        G::DIALECT
    }
    fn contains(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }
    fn meta(&self, key: &str) -> Option<&ObjectMeta> {
        self.0.get(key).map(|g| g.meta())
    }
    fn object_ref(&self, key: &str) -> Option<ObjectReference> {
        self.0.get(key).map(|g| g.object_ref(&()))
    }
    fn to_job(&self, key: &str, ctx: &KindContext) -> Option<Result<JobSpec, ConvertError>> {
        self.0.get(key).map(|g| g.to_job(ctx))
    }
    fn status_patch(
        &self,
        key: &str,
        job: &JobInfo,
        condition: Option<&JobCondition>,
        now_ms: i64,
    ) -> Option<(Value, Option<String>)> {
        let g = self.0.get(key)?;
        Some((
            g.status_patch(job, condition, now_ms)?,
            g.resource_version(),
        ))
    }
    fn stored_phase(&self, key: &str) -> Option<&str> {
        self.0.get(key)?.stored_phase()
    }
    fn workload_ref(&self, key: &str) -> Option<(String, String)> {
        self.0.get(key)?.workload_ref()
    }
    fn remove(&mut self, key: &str) -> Option<String> {
        self.0.remove(key).and_then(|g| g.uid())
    }
    fn keys(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
    fn naming_class(&self, class: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(_, g)| g.priority_class_name() == Some(class))
            .map(|(k, _)| k.clone())
            .collect()
    }
    fn class_of(&self, key: &str) -> Option<String> {
        self.0.get(key)?.priority_class_name().map(String::from)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn store_newest(&mut self, key: &str, object: &dyn Any) -> bool {
        object
            .downcast_ref::<G>()
            .is_some_and(|g| crate::newest::store_newest(&mut self.0, key.to_string(), g))
    }
    fn holds(&self, key: &str, object: &dyn Any) -> bool {
        let (Some(have), Some(g)) = (self.0.get(key), object.downcast_ref::<G>()) else {
            return false;
        };
        have.uid() == g.uid()
    }
}

/// Where the answer to a status write or reread of a group goes: the index's answer path
/// (`GroupTarget::apply_answer`, under its lock), as the writers' view of it offers.
pub trait GroupAnswers: Sync {
    fn apply_answer(&self, dialect: Dialect, key: &str, object: &dyn Any);
}

/// A status write or a reread of one object, its answer applied into the index the way
/// its watch's events are (`GroupAnswers`).
pub type Call = for<'a> fn(
    &'a Client,
    &'a dyn GroupAnswers,
    &'a str,
    Option<&'a Value>,
) -> BoxFuture<'a, Result<(), ::kube::Error>>;

/// A registered kind, type-erased: what [`kind`] makes of a [`GangKind`].
pub struct Kind {
    pub dialect: Dialect,
    pub new_store: fn() -> Box<dyn GroupStore>,
    /// Adds the kind's watch (off while the API server does not serve the kind).
    pub watch: fn(&mut Watches, &Client, &Sink<dyn GroupTarget>),
    /// Writes a status merge patch (`Some(patch)`) or rereads the object (`None`), keeping
    /// the answer as the newest object.
    pub call: Call,
    pub pod_declares: fn(&Pod) -> Result<Option<GangDecl>, ConvertError>,
    pub pod_field: &'static str,
    /// The CRD shipped for the kind, if it is not built in.
    pub crd: fn() -> Option<CrdFile>,
}

/// The registration of kind `G` (one line in [`super::KINDS`]).
pub const fn kind<G: GangKind>() -> Kind {
    Kind {
        dialect: G::DIALECT,
        new_store: new_store::<G>,
        watch: add_watch::<G>,
        call: call::<G>,
        pod_declares: G::pod_declares,
        pod_field: G::POD_FIELD,
        crd: G::crd,
    }
}

fn new_store<G: GangKind>() -> Box<dyn GroupStore> {
    Box::new(Store::<G>(HashMap::new()))
}

fn add_watch<G: GangKind>(watches: &mut Watches, client: &Client, sink: &Sink<dyn GroupTarget>) {
    let api = Api::<G>::all(client.clone());
    let sink = sink.clone();
    let feed: Feed<G, dyn GroupTarget> = Feed {
        kind: G::WATCH_NAME,
        optional: Some(G::OFF_WHEN_ABSENT),
        apply: |ix, o| ix.apply_object(G::DIALECT, &key_of_group(o), o),
        delete: |ix, key| ix.delete_object(G::DIALECT, key),
        known: |ix| ix.object_keys(G::DIALECT),
    };
    watches.add(G::WATCH_NAME, move || {
        watch(api.clone(), sink.clone(), feed)
    });
}

fn call<'a, G: GangKind>(
    client: &'a Client,
    index: &'a dyn GroupAnswers,
    key: &'a str,
    patch: Option<&'a Value>,
) -> BoxFuture<'a, Result<(), ::kube::Error>> {
    Box::pin(async move {
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let api = Api::<G>::namespaced(client.clone(), ns);
        let pp = PatchParams::default();
        let answer = match patch {
            Some(p) if G::STATUS_SUBRESOURCE => api.patch_status(name, &pp, &Patch::Merge(p)).await,
            Some(p) => api.patch(name, &pp, &Patch::Merge(p)).await,
            None => api.get(name).await,
        };
        answer.map(|g| index.apply_answer(G::DIALECT, &key_of_group(&g), &g))
    })
}

/// Every registered kind's store, in the order of [`super::KINDS`] (which defines a gang
/// named by several).
pub struct Groups(Vec<Box<dyn GroupStore>>);

impl Default for Groups {
    fn default() -> Self {
        Groups(super::KINDS.iter().map(|k| (k.new_store)()).collect())
    }
}

impl Groups {
    /// The store that defines gang `key`: the first that has it.
    pub fn defining(&self, key: &str) -> Option<&dyn GroupStore> {
        self.0.iter().find(|s| s.contains(key)).map(|s| &**s)
    }
    pub fn of(&self, dialect: Dialect) -> Option<&dyn GroupStore> {
        self.0.iter().find(|s| s.dialect() == dialect).map(|s| &**s)
    }
    pub fn of_mut(&mut self, dialect: Dialect) -> Option<&mut Box<dyn GroupStore>> {
        self.0.iter_mut().find(|s| s.dialect() == dialect)
    }
    pub fn all(&self) -> impl Iterator<Item = &dyn GroupStore> {
        self.0.iter().map(|s| &**s)
    }
    /// Kind `G`'s objects.
    pub fn typed<G: GangKind>(&self) -> &HashMap<String, G> {
        &self
            .of(G::DIALECT)
            .and_then(|s| s.as_any().downcast_ref::<Store<G>>())
            .expect("every GangKind is registered in KINDS")
            .0
    }
    pub fn typed_mut<G: GangKind>(&mut self) -> &mut HashMap<String, G> {
        &mut self
            .of_mut(G::DIALECT)
            .and_then(|s| s.as_any_mut().downcast_mut::<Store<G>>())
            .expect("every GangKind is registered in KINDS")
            .0
    }
}

/// The registered kind of `dialect`.
pub fn registered(dialect: Dialect) -> Option<&'static Kind> {
    super::KINDS.iter().find(|k| k.dialect == dialect)
}
