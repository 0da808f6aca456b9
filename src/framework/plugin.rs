//! The two extension points: plugins vote, actions decide.

use super::session::Session;
use crate::conf::{ArgError, Arguments};

/// A plugin registers votes when a session opens, and nothing else: all its decisions are
/// made by the functions it registers.
pub trait Plugin {
    fn name(&self) -> &'static str;
    fn on_session_open(&mut self, ssn: &mut Session);
    fn on_session_close(&mut self, _ssn: &mut Session) {}
    /// Arguments the plugin does not know (reported, not fatal: Volcano ignores them too).
    fn argument_warnings(&self, _args: &Arguments) -> Vec<String> {
        Vec::new()
    }
}

/// Builds a plugin from its arguments; a bad argument is an error naming the key.
pub type PluginBuilder = fn(&Arguments) -> Result<Box<dyn Plugin>, ArgError>;

/// An action runs once per session, in configured order, and changes the session only
/// through statements.
pub trait Action {
    fn name(&self) -> &'static str;
    fn execute(&self, ssn: &mut Session);
}

pub type ActionBuilder = fn(&Arguments) -> Result<Box<dyn Action>, ArgError>;
