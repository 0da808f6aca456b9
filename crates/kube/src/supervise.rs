//! Watch tasks under supervision. A watch runs until the process ends; one that ends or
//! panics anyway (a bug, a library's panic) would otherwise stop feeding its kind in
//! silence while cycles go on with stale objects. The supervisor holds every watch in one
//! `JoinSet`, logs the one that stopped, tells the caller (who marks the kind not listed,
//! so cycles wait for it) and starts it again after a back-off.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::task::{Id, JoinSet};
use tracing::error;

use super::retry::backoff;

type Start = Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

/// The first and the longest wait before a stopped watch starts again.
const RESTART_MIN_DELAY: Duration = Duration::from_secs(1);
const RESTART_MAX_DELAY: Duration = Duration::from_secs(60);

/// The watches to run, each with the kind it feeds.
#[derive(Default)]
pub struct Watches {
    starts: Vec<(&'static str, Start)>,
}

impl Watches {
    /// Adds the watch of `kind`: `start` makes a new run of it.
    pub fn add<F, Fut>(&mut self, kind: &'static str, start: F)
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let start: Start = Arc::new(move || Box::pin(start()));
        self.starts.push((kind, start));
    }

    /// Runs every watch; one that ends or panics is logged, `stopped(kind)` is called, and
    /// it starts again after a back-off that grows while it keeps stopping. Returns only
    /// once every watch is gone (never, in the scheduler).
    pub async fn supervise(self, stopped: impl Fn(&'static str) + Send) {
        struct Running {
            kind: &'static str,
            start: Start,
            delays: Box<dyn Iterator<Item = Duration> + Send>,
        }
        let mut set = JoinSet::new();
        let mut running: HashMap<Id, Running> = HashMap::new();
        for (kind, start) in self.starts {
            let id = set.spawn(start()).id();
            let delays = Box::new(backoff(RESTART_MIN_DELAY, RESTART_MAX_DELAY));
            running.insert(
                id,
                Running {
                    kind,
                    start,
                    delays,
                },
            );
        }
        while let Some(done) = set.join_next_with_id().await {
            let (id, why) = match done {
                Ok((id, ())) => (id, "ended".to_string()),
                Err(e) if e.is_panic() => {
                    let id = e.id();
                    let payload = e.into_panic();
                    let message = payload
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a panic".into());
                    (id, format!("panicked: {message}"))
                }
                // Cancelled: the runtime is shutting down.
                Err(_) => return,
            };
            let Some(mut watch) = running.remove(&id) else {
                continue;
            };
            let wait = watch.delays.next().unwrap_or(RESTART_MAX_DELAY);
            error!(
                kind = watch.kind,
                "watch {why}; starting it again in {}",
                humantime::format_duration(Duration::from_secs(wait.as_secs().max(1)))
            );
            stopped(watch.kind);
            let again = watch.start.clone();
            let id = set
                .spawn(async move {
                    tokio::time::sleep(wait).await;
                    again().await
                })
                .id();
            running.insert(id, watch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    #[tokio::test(start_paused = true)]
    async fn a_watch_that_panics_or_ends_is_started_again_and_its_kind_told() {
        let runs = Arc::new(AtomicUsize::new(0));
        let stopped = Arc::new(Mutex::new(Vec::new()));
        let mut watches = Watches::default();
        let r = runs.clone();
        watches.add("Pod", move || {
            let run = r.fetch_add(1, Ordering::SeqCst);
            async move {
                match run {
                    0 => panic!("a bug in the watch"),
                    1 => {} // ended
                    _ => std::future::pending().await,
                }
            }
        });
        // A healthy watch beside it is never restarted.
        watches.add("Node", std::future::pending);
        let s = stopped.clone();
        let supervisor = tokio::spawn(watches.supervise(move |kind| s.lock().unwrap().push(kind)));
        for _ in 0..200 {
            if runs.load(Ordering::SeqCst) >= 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert_eq!(
            runs.load(Ordering::SeqCst),
            3,
            "started again after each stop"
        );
        assert_eq!(*stopped.lock().unwrap(), ["Pod", "Pod"]);
        assert!(!supervisor.is_finished());
        supervisor.abort();
    }
}
