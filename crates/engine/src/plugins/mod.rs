//! Plugins: each file registers votes with a session and does nothing else.

pub mod binpack;
pub mod capacity;
pub mod conformance;
pub mod drf;
pub mod gang;
pub mod gpu_affinity;
pub mod nodeorder;
pub mod overcommit;
pub mod predicates;
pub mod priority;
pub mod proportion;

use crate::framework::PluginBuilder;

/// Every plugin the configuration accepts, with its builder, in the order messages list them.
pub const BUILDERS: &[(&str, PluginBuilder)] = &[
    ("binpack", binpack::build),
    ("capacity", capacity::build),
    ("conformance", conformance::build),
    ("drf", drf::build),
    ("gang", gang::build),
    ("gpu-affinity", gpu_affinity::build),
    ("nodeorder", nodeorder::build),
    ("overcommit", overcommit::build),
    ("predicates", predicates::build),
    ("priority", priority::build),
    ("proportion", proportion::build),
];
