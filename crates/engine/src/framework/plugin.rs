//! The two extension points: plugins vote, actions decide. Both are built once per
//! configuration (see `Scheduler::new`) from a `Registry` the program hands in.

use super::session::Session;
use crate::conf::{ArgError, Arguments, VoteKind};

/// A plugin registers votes when a session opens, and nothing else: all its decisions are
/// made by the functions it registers. One plugin object serves every session of a
/// configuration, so state that changes during a session lives in what it registers.
pub trait Plugin: Send + Sync {
    fn name(&self) -> &'static str;
    fn on_session_open(&self, ssn: &mut Session);
    fn on_session_close(&self, _ssn: &mut Session) {}
    /// The half-life (ms) of the queue usage the plugin weighs shares by, if it does (its
    /// `usageHalfLife` argument): the scheduler then keeps every queue's usage from cycle
    /// to cycle (`framework::usage`) and hands it to each session.
    fn usage_half_life(&self) -> Option<i64> {
        None
    }
}

/// Builds a plugin from its arguments, which it reads into its own struct
/// (`Arguments::parse`, `NoArguments` for none): a bad argument is an error naming the key;
/// the keys it did not read are then warned about (`Scheduler::new`).
pub type PluginBuilder = fn(&Arguments) -> Result<Box<dyn Plugin>, ArgError>;

/// An action runs once per session, in configured order, and changes the session only
/// through statements.
pub trait Action: Send + Sync {
    fn name(&self) -> &'static str;
    fn execute(&self, ssn: &mut Session);
}

/// Builds an action from its arguments (`configurations:`), read as a plugin's are.
pub type ActionBuilder = fn(&Arguments) -> Result<Box<dyn Action>, ArgError>;

/// Every action and plugin a configuration may name, with its builder. The framework knows
/// none of them: the program passes its registry in (`rust_batch::REGISTRY`).
#[derive(Clone, Copy)]
pub struct Registry {
    /// In the order error messages list them.
    pub actions: &'static [(&'static str, ActionBuilder)],
    pub plugins: &'static [(&'static str, PluginBuilder)],
}

impl Registry {
    pub fn action(&self, name: &str) -> Option<ActionBuilder> {
        self.actions
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| *b)
    }

    pub fn plugin(&self, name: &str) -> Option<PluginBuilder> {
        self.plugins
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| *b)
    }

    pub fn action_names(&self) -> Vec<&'static str> {
        self.actions.iter().map(|(n, _)| *n).collect()
    }

    pub fn plugin_names(&self) -> Vec<&'static str> {
        self.plugins.iter().map(|(n, _)| *n).collect()
    }
}

/// A plugin as configured: built once, with its tier and the votes switched off for it.
pub(super) struct ConfiguredPlugin {
    pub(super) plugin: Box<dyn Plugin>,
    pub(super) name: &'static str,
    pub(super) tier: usize,
    pub(super) disabled: Vec<VoteKind>,
}
