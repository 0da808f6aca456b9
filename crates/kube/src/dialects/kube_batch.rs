//! kube-batch and ACK: gangs declared on the pods alone. kube-batch names the group with
//! Volcano's annotation `scheduling.k8s.io/group-name` and gives its minimum in
//! `scheduling.k8s.io/group-min-member`; ACK (and the legacy scheduler-plugins) label pods
//! with `pod-group.scheduling.sigs.k8s.io/name` and `…/min-available`. Without the minimum
//! the gang is its PodGroup object (`scheduling.sigs.k8s.io`, see `coscheduling`).

/// kube-batch: the gang's minimum, on the pod, when there is no PodGroup object.
pub const KUBE_BATCH_MIN_MEMBER: &str = "scheduling.k8s.io/group-min-member";
/// ACK / legacy scheduler-plugins label-only gangs.
pub const ACK_GROUP_NAME: &str = "pod-group.scheduling.sigs.k8s.io/name";
pub const ACK_GROUP_NAME_SHORT: &str = "pod-group.scheduling.sigs.k8s.io";
pub const ACK_MIN_AVAILABLE: &str = "pod-group.scheduling.sigs.k8s.io/min-available";
