use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Resource, Timestamp};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QueueState {
    #[default]
    Open,
    /// Admits no new jobs; running ones go on.
    Closed,
    Closing,
    Unknown,
}

/// A tenant queue (scheduling.volcano.sh/v1beta1 Queue).
#[derive(Clone, Debug, PartialEq)]
pub struct QueueInfo {
    pub name: Arc<str>,
    pub weight: u32,
    /// Upper bound of what the queue may use.
    pub capability: Option<Resource>,
    /// What the queue is always entitled to.
    pub guarantee: Option<Resource>,
    /// An explicit deserved share (capacity plugin).
    pub deserved: Option<Resource>,
    /// Whether other queues may take back what this queue uses beyond its share.
    pub reclaimable: bool,
    pub state: QueueState,
    pub parent: Option<Arc<str>>,
    pub created: Timestamp,
}

impl QueueInfo {
    pub fn new(name: &str, weight: u32) -> Self {
        QueueInfo {
            name: Arc::from(name),
            weight,
            capability: None,
            guarantee: None,
            deserved: None,
            reclaimable: true,
            state: QueueState::Open,
            parent: None,
            created: 0,
        }
    }

    pub fn is_open(&self) -> bool {
        self.state == QueueState::Open
    }
}
