//! The simulator driver: a discrete-event cluster with a virtual clock, driving the same
//! engine the live scheduler runs. `rust-batch simulate` runs it; so do most tests.

pub mod accuracy;
pub mod capture;
pub mod devices;
mod driver;
mod measure;
pub mod plot;
pub mod report;
pub mod scenario;
mod tally;

pub use driver::{Progress, SimJob, SimPod, Simulation};
pub use report::Report;
pub use scenario::{Scenario, ScenarioError, DEFAULT_SCENARIO};
