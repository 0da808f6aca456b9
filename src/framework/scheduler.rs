//! The scheduler: a configuration's actions and plugins, built once, running cycles.

use std::sync::Arc;

use super::node_search::KeptStaticFits;
use super::outcome::SessionResult;
use super::plugin::{Action, ConfiguredPlugin, Registry};
use super::session::Session;
use crate::conf::{ConfError, SchedulerConf};
use crate::model::Timestamp;
use crate::snapshot::Snapshot;

/// The configured actions and plugins, ready to run cycles.
pub struct Scheduler {
    conf: Arc<SchedulerConf>,
    plugins: Arc<[ConfiguredPlugin]>,
    actions: Vec<Box<dyn Action>>,
    /// Static fits kept from session to session (see `KeptStaticFits`).
    kept_static_fits: Arc<KeptStaticFits>,
}

impl Scheduler {
    /// Builds every configured action and plugin once, from `registry`: an unknown name or
    /// a bad argument is an error naming the key; a Volcano plugin or action the registry
    /// lacks is skipped with a warning (an error with `conf.strict`, see
    /// `SchedulerConf::resolve_names`); arguments a plugin does not use are added to the
    /// configuration's warnings.
    pub fn new(mut conf: SchedulerConf, registry: &Registry) -> Result<Self, ConfError> {
        conf.resolve_names(&registry.action_names(), &registry.plugin_names())?;
        let invalid = |key: String, message: String| ConfError::Invalid {
            file: conf.source.clone(),
            key,
            message,
        };
        let known_actions = || registry.action_names().join(", ");
        for (i, name) in conf.actions.iter().enumerate() {
            if registry.action(name).is_none() {
                return Err(invalid(
                    format!("actions[{i}]"),
                    format!(
                        "unknown action {name:?}; known actions: {}",
                        known_actions()
                    ),
                ));
            }
        }

        let mut plugins = Vec::new();
        let mut warnings = Vec::new();
        for (t, tier) in conf.tiers.iter().enumerate() {
            for (p, option) in tier.plugins.iter().enumerate() {
                let Some(build) = registry.plugin(&option.name) else {
                    return Err(invalid(
                        format!("tiers[{t}].plugins[{p}].name"),
                        format!(
                            "unknown plugin {:?}; known plugins: {}",
                            option.name,
                            registry.plugin_names().join(", ")
                        ),
                    ));
                };
                let plugin = build(&option.arguments).map_err(|e| invalid(e.key, e.message))?;
                warnings.extend(plugin.argument_warnings(&option.arguments));
                plugins.push(ConfiguredPlugin {
                    name: plugin.name(),
                    plugin,
                    tier: t,
                    disabled: option.disabled.clone(),
                });
            }
        }

        // Arguments of every configured action are checked, listed in `actions` or not.
        for (name, args) in &conf.configurations {
            let Some(build) = registry.action(name) else {
                let at = args.path.strip_suffix(".arguments").unwrap_or(&args.path);
                return Err(invalid(
                    format!("{at}.name"),
                    format!(
                        "unknown action {name:?}; known actions: {}",
                        known_actions()
                    ),
                ));
            };
            if !conf.actions.contains(name) {
                build(args).map_err(|e| invalid(e.key, e.message))?;
            }
        }
        let mut actions = Vec::new();
        for name in &conf.actions {
            let build = registry.action(name).expect("checked above");
            let args = conf.action_arguments(name);
            actions.push(build(&args).map_err(|e| invalid(e.key, e.message))?);
        }

        // A configuration checked twice (by a command, then by the driver) warns once, and
        // a key `resolve_names` already warned about is not named again.
        for w in warnings {
            let said = |c: &String| *c == w || c.starts_with(&format!("{w}: "));
            if !conf.warnings.iter().any(said) {
                conf.warnings.push(w);
            }
        }
        Ok(Scheduler {
            conf: Arc::new(conf),
            plugins: plugins.into(),
            actions,
            kept_static_fits: Default::default(),
        })
    }

    pub fn conf(&self) -> &SchedulerConf {
        &self.conf
    }

    /// Opens a session on `snapshot`: every plugin registers its votes.
    pub fn open_session(&self, snapshot: Snapshot, now: Timestamp) -> Session {
        self.open_session_observed(snapshot, now, &mut NoObserver)
    }

    fn open_session_observed(
        &self,
        snapshot: Snapshot,
        now: Timestamp,
        observer: &mut dyn CycleObserver,
    ) -> Session {
        Session::open(
            snapshot,
            self.conf.clone(),
            self.plugins.clone(),
            self.kept_static_fits.clone(),
            now,
            observer,
        )
    }

    /// Opens a session on `snapshot`, runs every action in order and closes it.
    pub fn run_cycle(&self, snapshot: Snapshot, now: Timestamp) -> SessionResult {
        self.run_cycle_observed(snapshot, now, &mut |_, _, _| {})
    }

    /// Like `run_cycle`, telling `observe` when each action starts (`true`) and ends
    /// (`false`), so a driver can time actions without the engine reading a clock, and a
    /// test can look at the session between actions (what one action did is visible there
    /// before the session's result folds it together with the others).
    pub fn run_cycle_observed(
        &self,
        snapshot: Snapshot,
        now: Timestamp,
        observe: &mut dyn FnMut(&'static str, bool, &Session),
    ) -> SessionResult {
        self.run_cycle_traced(snapshot, now, &mut ActionsOnly(observe))
    }

    /// Like `run_cycle`, telling `observer` when each plugin's session hooks and each
    /// action start and end (see `CycleObserver`).
    pub fn run_cycle_traced(
        &self,
        snapshot: Snapshot,
        now: Timestamp,
        observer: &mut dyn CycleObserver,
    ) -> SessionResult {
        let mut ssn = self.open_session_observed(snapshot, now, observer);
        observer.opened(&ssn);
        for action in &self.actions {
            observer.action(action.name(), true, &ssn);
            action.execute(&mut ssn);
            observer.action(action.name(), false, &ssn);
        }
        ssn.close_observed(observer)
    }

    /// Opens and closes a session without running actions (what "nothing to do" costs).
    pub fn open_close(&self, snapshot: Snapshot, now: Timestamp) -> SessionResult {
        self.open_session(snapshot, now).close()
    }
}

/// Which of a plugin's session hooks runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionHook {
    /// `on_session_open`: the plugin registers its votes.
    Open,
    /// `on_session_close`.
    Close,
}

impl SessionHook {
    /// Volcano's name for the hook (label `OnSession` of its plugin latency metric).
    pub fn volcano_name(self) -> &'static str {
        match self {
            Self::Open => "OnSessionOpen",
            Self::Close => "OnSessionClose",
        }
    }
}

/// Told where a cycle is as it runs: the engine reads no clock, so a driver that wants to
/// time the steps (the metrics do) times them here. Every method does nothing by default.
pub trait CycleObserver {
    /// A plugin's session hook starts (`starting`) or ends.
    fn plugin(&mut self, _plugin: &'static str, _hook: SessionHook, _starting: bool) {}
    /// The session is open (every plugin registered its votes); the actions come next.
    fn opened(&mut self, _ssn: &Session) {}
    /// An action starts (`starting`) or ends.
    fn action(&mut self, _action: &'static str, _starting: bool, _ssn: &Session) {}
}

/// Observes nothing.
pub(super) struct NoObserver;

impl CycleObserver for NoObserver {}

/// Only the actions, to a closure (what `run_cycle_observed` takes).
struct ActionsOnly<'a>(&'a mut dyn FnMut(&'static str, bool, &Session));

impl CycleObserver for ActionsOnly<'_> {
    fn action(&mut self, action: &'static str, starting: bool, ssn: &Session) {
        (self.0)(action, starting, ssn)
    }
}
