//! The scheduler: a configuration's actions and plugins, built once, running cycles.

use std::sync::{Arc, Mutex};

use super::node_search::KeptStaticFits;
use super::outcome::SessionResult;
use super::plugin::{Action, ConfiguredPlugin, Registry};
use super::session::Session;
use super::usage::UsageLedger;
use crate::conf::{ignored_argument, Arguments, ConfError, SchedulerConf};
use crate::model::Timestamp;
use crate::snapshot::Snapshot;

/// The configured actions and plugins, ready to run cycles.
pub struct Scheduler {
    conf: Arc<SchedulerConf>,
    plugins: Arc<[ConfiguredPlugin]>,
    actions: Vec<Box<dyn Action>>,
    /// Static fits kept from session to session (see `KeptStaticFits`).
    kept_static_fits: Arc<KeptStaticFits>,
    /// Predict start times as each session closes (off unless a driver asks).
    predict: Option<super::PredictOptions>,
    /// Every queue's usage, kept from cycle to cycle when a plugin weighs shares by it
    /// (`Plugin::usage_half_life`; see `usage.rs`).
    usage: Option<Mutex<UsageLedger>>,
}

impl Scheduler {
    /// Builds every configured action and plugin once, from `registry`: an unknown name or
    /// a bad argument is an error naming the key; a Volcano plugin or action the registry
    /// lacks is skipped with a warning (an error with `conf.strict`, see
    /// `SchedulerConf::resolve_names`); arguments a plugin or action does not read are added
    /// to the configuration's warnings, with the nearest one it reads.
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

        // Each argument map is read by the plugin or action that owns it; the keys it did not
        // read are warned about afterwards, with its owner's name.
        let mut plugins = Vec::new();
        let mut read = Vec::new();
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
                read.push((option.name.as_str(), &option.arguments));
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
            read.push((name.as_str(), args));
        }
        let mut actions = Vec::new();
        for name in &conf.actions {
            let build = registry.action(name).expect("checked above");
            let built = match conf.configurations.get(name) {
                Some(args) => build(args),
                None => build(&conf.action_arguments(name)),
            };
            actions.push(built.map_err(|e| invalid(e.key, e.message))?);
        }

        let warnings = unread_arguments(&read, &conf.warnings);
        conf.warnings.extend(warnings);
        let usage = plugins
            .iter()
            .find_map(|p| p.plugin.usage_half_life())
            .map(|h| Mutex::new(UsageLedger::new(h)));
        Ok(Scheduler {
            conf: Arc::new(conf),
            plugins: plugins.into(),
            actions,
            kept_static_fits: Default::default(),
            predict: None,
            usage,
        })
    }

    fn ledger(&self) -> Option<std::sync::MutexGuard<'_, UsageLedger>> {
        // Nothing panics while holding the lock; a poisoned one still holds valid usage.
        self.usage
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Every queue's usage as of the last cycle, when a plugin weighs shares by it: for a
    /// driver to export and record (`QueueInfo::recorded_usage` hands it back after a
    /// restart).
    pub fn queue_usage(&self) -> Option<UsageLedger> {
        self.ledger().map(|l| l.clone())
    }

    /// Takes over the usage `old` kept (a configuration reloaded: the new scheduler goes on
    /// from the old one's account, not from the last recorded one). The averages are
    /// amounts held, whatever the half-life: a changed half-life decays them at its own
    /// pace from now on.
    pub fn keep_usage_from(&mut self, old: &Scheduler) {
        let (Some(new), Some(old)) = (self.ledger(), old.ledger()) else {
            return;
        };
        let mut new = new;
        for (q, u) in old.queues() {
            new.set(q, u.clone());
        }
    }

    pub fn conf(&self) -> &SchedulerConf {
        &self.conf
    }

    /// Has every session predict the start time of the waiting gangs (`SessionResult::
    /// predictions`); None turns it off.
    pub fn predict_starts(&mut self, opts: Option<super::PredictOptions>) {
        self.predict = opts;
    }

    /// Whether (and how) sessions predict start times.
    pub fn predicting(&self) -> Option<&super::PredictOptions> {
        self.predict.as_ref()
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
        // Usage is brought up to the cycle's time before the plugins read it.
        let usage = self.ledger().map(|mut l| {
            l.advance(&snapshot, now);
            Arc::new(l.clone())
        });
        let mut ssn = Session::open(
            snapshot,
            self.conf.clone(),
            self.plugins.clone(),
            self.kept_static_fits.clone(),
            now,
            usage,
            observer,
        );
        ssn.predict = self.predict.clone();
        ssn
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
        // Shares weighed by usage change with the clock alone: while gangs wait, a driver
        // that cycles only on changes looks again a sixteenth of a half-life later.
        let waiting = ssn.state().tally().pending().iter().next().is_some();
        let mut result = ssn.close_observed(observer);
        let half_life = self.ledger().map(|l| l.half_life());
        if let (Some(half_life), true) = (half_life, waiting) {
            let at = now.saturating_add((half_life / 16).max(1_000));
            result.wake_at = Some(result.wake_at.map_or(at, |w| w.min(at)));
        }
        result
    }

    /// Opens and closes a session without running actions (what "nothing to do" costs).
    pub fn open_close(&self, snapshot: Snapshot, now: Timestamp) -> SessionResult {
        self.open_session(snapshot, now).close()
    }
}

/// Warnings for the keys each owner (plugin or action) did not read from its arguments
/// (`Arguments::unknown`): the key's path, and when a key it reads is near, "did you mean"
/// it. Keys Volcano reads and rust-batch deliberately ignores are left to
/// `resolve_names`'s warning, and a key some warning in `said` already names is not named
/// again (a configuration checked twice, by a command and then by the driver, warns once).
fn unread_arguments(read: &[(&str, &Arguments)], said: &[String]) -> Vec<String> {
    let mut warnings = Vec::new();
    for (owner, args) in read {
        for unknown in args.unknown() {
            let named = |w: &String| {
                *w == unknown.path
                    || w.strip_prefix(unknown.path.as_str())
                        .is_some_and(|rest| rest.starts_with(": "))
            };
            if ignored_argument(owner, &unknown.key).is_some()
                || said.iter().chain(&warnings).any(named)
            {
                continue;
            }
            warnings.push(match unknown.suggestion {
                // The path alone, as the warnings have always named an unknown argument.
                None => unknown.path,
                Some(near) => format!(
                    "{}: not an argument of {owner}, ignored; did you mean {near:?}?",
                    unknown.path
                ),
            });
        }
    }
    warnings
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
