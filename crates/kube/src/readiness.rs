//! Whether each watched kind's list is complete. The driver runs no cycle until every kind
//! is listed (or its CRD is absent), at start and again whenever a watch lists anew:
//! deciding on a partial view would hand out room that pods not listed yet already hold.

use std::collections::BTreeMap;

/// Whether each watched kind's list is complete.
#[derive(Default, Debug)]
pub struct Readiness {
    kinds: BTreeMap<&'static str, KindState>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KindState {
    /// Not listed yet, or being listed again after the watch lost its place.
    Listing,
    Listed,
    /// An optional kind whose CRD is not installed (its dialect is off).
    Absent,
}

impl Readiness {
    /// A kind is watched: nothing is decided until its list is in.
    pub fn expect(&mut self, kind: &'static str) {
        self.kinds.insert(kind, KindState::Listing);
    }
    pub fn listed(&mut self, kind: &'static str) {
        self.kinds.insert(kind, KindState::Listed);
    }
    pub fn absent(&mut self, kind: &'static str) {
        self.kinds.insert(kind, KindState::Absent);
    }
    /// Every watched kind is listed (or not installed).
    pub fn complete(&self) -> bool {
        !self.kinds.is_empty() && self.kinds.values().all(|s| *s != KindState::Listing)
    }
    /// The kinds whose list is not in yet.
    pub fn waiting_for(&self) -> Vec<&'static str> {
        self.kinds
            .iter()
            .filter(|(_, s)| **s == KindState::Listing)
            .map(|(k, _)| *k)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_waits_for_every_expected_kind_and_again_after_a_relist() {
        let mut r = Readiness::default();
        assert!(!r.complete(), "nothing watched yet: not ready");
        r.expect("Pod");
        r.expect("Node");
        r.expect("scheduling.x-k8s.io PodGroup");
        r.listed("Pod");
        r.absent("scheduling.x-k8s.io PodGroup");
        assert_eq!(r.waiting_for(), vec!["Node"]);
        r.listed("Node");
        assert!(r.complete());
        r.expect("Pod"); // a relist
        assert!(!r.complete());
    }
}
