//! The configuration file, reloaded when it changes: a bad new file is logged and the
//! running configuration stays.

use std::time::SystemTime;

use tracing::{info, warn};

use crate::conf::SchedulerConf;
use crate::framework::Scheduler;

/// What identifies a version of the config file: its modification time and size (a
/// ConfigMap update swaps a symlink, which changes both).
pub(super) fn file_version(path: &std::path::Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

pub(super) fn reload_if_changed(
    path: &std::path::Path,
    version: &mut Option<(SystemTime, u64)>,
    scheduler: &mut Scheduler,
) {
    let now = file_version(path);
    if now == *version {
        return;
    }
    *version = now;
    // --strict-config holds for the new file as for the first.
    let strict = scheduler.conf().strict;
    match SchedulerConf::load(path)
        .and_then(|c| Scheduler::new(c.with_strict(strict), &crate::REGISTRY))
    {
        Ok(mut s) => {
            s.predict_starts(scheduler.predicting().cloned());
            s.keep_usage_from(scheduler);
            for w in &s.conf().warnings {
                warn!("{}: {w}", path.display());
            }
            info!(file = %path.display(), actions = ?s.conf().actions, "configuration reloaded");
            *scheduler = s;
        }
        Err(e) => warn!(error = %e, "new configuration rejected; keeping the running one"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration file the test rewrites, in its own directory.
    struct ConfFile(std::path::PathBuf);

    impl ConfFile {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("rb-reload-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            ConfFile(dir.join("volcano-scheduler.conf"))
        }

        fn write(&self, text: &str) {
            std::fs::write(&self.0, text).unwrap();
        }
    }

    impl Drop for ConfFile {
        fn drop(&mut self) {
            if let Some(dir) = self.0.parent() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }

    // Each text has a different length: the file's version is its mtime and length, and
    // the mtime may not move between two writes of a fast test.
    const FIRST: &str = "actions: \"enqueue, allocate\"\ntiers:\n- plugins: [{name: gang}]\n";
    const SECOND: &str =
        "actions: \"enqueue, allocate, backfill\"\ntiers:\n- plugins: [{name: gang}]\n";
    const BAD: &str = "actions: \"enqueue, teleport\"\ntiers: []\n";
    const WITH_SLA: &str =
        "actions: \"allocate\"\ntiers:\n- plugins: [{name: gang}, {name: sla}, {name: drf}]\n";

    fn start(file: &ConfFile, strict: bool) -> (Scheduler, Option<(SystemTime, u64)>) {
        let conf = SchedulerConf::load(&file.0).unwrap().with_strict(strict);
        let scheduler = Scheduler::new(conf, &crate::REGISTRY).unwrap();
        (scheduler, file_version(&file.0))
    }

    #[test]
    fn a_bad_new_file_keeps_the_running_configuration() {
        let file = ConfFile::new("bad");
        file.write(FIRST);
        let (mut scheduler, mut version) = start(&file, false);
        file.write(BAD);
        reload_if_changed(&file.0, &mut version, &mut scheduler);
        assert_eq!(scheduler.conf().actions, ["enqueue", "allocate"]);
        file.write(SECOND);
        reload_if_changed(&file.0, &mut version, &mut scheduler);
        assert_eq!(
            scheduler.conf().actions,
            ["enqueue", "allocate", "backfill"]
        );
    }

    #[test]
    fn a_reload_skips_volcano_only_plugins_unless_strict() {
        let file = ConfFile::new("lenient");
        file.write(FIRST);
        let (mut scheduler, mut version) = start(&file, false);
        file.write(WITH_SLA);
        reload_if_changed(&file.0, &mut version, &mut scheduler);
        assert_eq!(scheduler.conf().actions, ["allocate"]);
        assert!(scheduler.conf().plugin("sla").is_none());
        assert!(scheduler.conf().warnings[0].contains("\"sla\" is a Volcano plugin"));

        let file = ConfFile::new("strict");
        file.write(FIRST);
        let (mut scheduler, mut version) = start(&file, true);
        file.write(WITH_SLA);
        reload_if_changed(&file.0, &mut version, &mut scheduler);
        assert_eq!(scheduler.conf().actions, ["enqueue", "allocate"], "kept");
        assert!(scheduler.conf().strict);
    }
}
