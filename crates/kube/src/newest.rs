//! Which of two versions of an API object is newer: what every store keeps (a watch event
//! may arrive after the status writer's answer that superseded it).

use std::collections::HashMap;

use ::kube::Resource;

/// Whether resourceVersion `a` is older than `b`. Kubernetes asks clients not to order
/// them, but the API server's are etcd revisions; where either does not parse as one, `a`
/// is not taken to be older.
pub fn older(a: Option<&str>, b: Option<&str>) -> bool {
    match (
        a.and_then(|a| a.parse::<u64>().ok()),
        b.and_then(|b| b.parse::<u64>().ok()),
    ) {
        (Some(a), Some(b)) => a < b,
        _ => false,
    }
}

/// Stores `obj` at `key` unless what is stored there is newer (the status writer's own
/// write came back before the watch delivered an older version) or this very version (the
/// watch's echo of that write). Returns whether it stored.
pub fn store_newest<K: Resource + Clone>(
    map: &mut HashMap<String, K>,
    key: String,
    obj: &K,
) -> bool {
    let (version, uid) = (
        obj.meta().resource_version.as_deref(),
        obj.meta().uid.as_deref(),
    );
    let stale = map.get(&key).is_some_and(|have| {
        let have_version = have.meta().resource_version.as_deref();
        older(version, have_version)
            || (version.is_some() && version == have_version && uid == have.meta().uid.as_deref())
    });
    if !stale {
        map.insert(key, obj.clone());
    }
    !stale
}
