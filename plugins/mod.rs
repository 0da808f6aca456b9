//! Plugins: each file registers votes with a session and does nothing else.

pub mod binpack;
pub mod capacity;
pub mod conformance;
pub mod drf;
pub mod gang;
pub mod nodeorder;
pub mod overcommit;
pub mod predicates;
pub mod priority;
pub mod proportion;

use crate::framework::PluginBuilder;

/// Every plugin name the configuration accepts.
pub const NAMES: &[&str] = &[
    "binpack",
    "capacity",
    "conformance",
    "drf",
    "gang",
    "nodeorder",
    "overcommit",
    "predicates",
    "priority",
    "proportion",
];

pub fn builder(name: &str) -> Option<PluginBuilder> {
    Some(match name {
        "binpack" => binpack::build,
        "capacity" => capacity::build,
        "conformance" => conformance::build,
        "drf" => drf::build,
        "gang" => gang::build,
        "nodeorder" => nodeorder::build,
        "overcommit" => overcommit::build,
        "predicates" => predicates::build,
        "priority" => priority::build,
        "proportion" => proportion::build,
        _ => return None,
    })
}
