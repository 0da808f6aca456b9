//! When the next cycle may start. While changes pour in, cycles are spaced so that they
//! take at most 1 / CYCLE_CPU_RATIO of a core and a burst's changes land together; a
//! quiet cluster has CYCLE_CREDIT of that budget saved, so the few cycles one submitted
//! gang causes (its PodGroup, its first pods, its last pod) each start at once instead of
//! the last waiting out the spacing of the one before (at 5,000 nodes that wait was most
//! of an idle gang's latency in the scheduler). The rule is a leaky bucket: each cycle
//! adds CYCLE_CPU_RATIO times its length to `due`; a cycle may start once `due` is at
//! most CYCLE_CREDIT ahead of now.

use std::time::{Duration, Instant};

/// Cycles take at most 1 / CYCLE_CPU_RATIO of a core over a burst...
const CYCLE_CPU_RATIO: u32 = 5;
/// ...after a quiet spell's saved budget (this much spacing) is spent.
const CYCLE_CREDIT: Duration = Duration::from_millis(40);
/// Cycles never start closer than this...
const MIN_CYCLE_SPACING: Duration = Duration::from_millis(2);
/// ...nor wait longer than this after the last one started (long cycles are not spaced
/// by more: what gathers in this time is the most a change waits for).
pub const BURST_CYCLE_SPACING: Duration = Duration::from_millis(20);

#[derive(Debug, Clone, Copy)]
pub struct CyclePacer {
    last_start: Instant,
    /// When the cycles so far have paid for their time (see the module comment).
    due: Instant,
}

impl CyclePacer {
    pub fn new(now: Instant) -> Self {
        CyclePacer {
            last_start: now.checked_sub(BURST_CYCLE_SPACING).unwrap_or(now),
            due: now,
        }
    }

    /// The earliest start of a cycle a change wants now.
    pub fn earliest(&self) -> Instant {
        let by_budget = self.due.checked_sub(CYCLE_CREDIT).unwrap_or(self.due);
        (self.last_start + MIN_CYCLE_SPACING)
            .max(by_budget)
            .min(self.last_start + BURST_CYCLE_SPACING)
    }

    /// The start of a cycle for changes nothing waits on (gathered for the burst spacing).
    pub fn gathered(&self) -> Instant {
        self.last_start + BURST_CYCLE_SPACING
    }

    /// A cycle that decides started at `at` and took `took`.
    pub fn ran(&mut self, at: Instant, took: Duration) {
        self.last_start = at;
        self.due = self.due.max(at) + took * CYCLE_CPU_RATIO;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Runs cycles of `took` each as soon as the pacer lets them, changes always waiting:
    /// the gaps between their starts.
    fn gaps(took: Duration, cycles: usize) -> Vec<Duration> {
        let t0 = Instant::now();
        let mut pacer = CyclePacer::new(t0);
        let mut now = t0;
        let mut starts = vec![];
        for _ in 0..cycles {
            let start = pacer.earliest().max(now);
            starts.push(start);
            pacer.ran(start, took);
            now = start + took;
        }
        starts.windows(2).map(|w| w[1] - w[0]).collect()
    }

    #[test]
    fn a_quiet_cluster_runs_a_gangs_few_cycles_at_once() {
        // 3 ms cycles (5,000 nodes): the PodGroup's, the first pod's and the last pod's
        // cycles start as soon as the one before ends.
        let g = gaps(3 * MS, 3);
        assert_eq!(g, vec![3 * MS, 3 * MS], "{g:?}");
        // A cycle right after a quiet spell starts at once too.
        let t0 = Instant::now();
        let mut pacer = CyclePacer::new(t0);
        pacer.ran(t0, 3 * MS);
        let later = t0 + Duration::from_secs(1);
        assert!(pacer.earliest() <= later);
    }

    #[test]
    fn a_burst_spends_the_credit_then_cycles_take_a_fifth_of_a_core() {
        let took = 3 * MS;
        let g = gaps(took, 40);
        // Once the credit is spent, a cycle starts every CYCLE_CPU_RATIO times its length.
        assert!(g[..3].iter().all(|d| *d == took), "{g:?}");
        assert!(
            g[20..].iter().all(|d| *d == took * CYCLE_CPU_RATIO),
            "{g:?}"
        );
        let busy: Duration = took * g.len() as u32;
        let wall: Duration = g.iter().sum();
        assert!(
            busy * CYCLE_CPU_RATIO <= wall + CYCLE_CREDIT,
            "cycles took {busy:?} of {wall:?}"
        );
    }

    #[test]
    fn spacing_stays_within_its_floor_and_ceiling() {
        // Tiny cycles never run closer than MIN_CYCLE_SPACING...
        let g = gaps(Duration::from_micros(100), 50);
        assert!(g.iter().all(|d| *d >= MIN_CYCLE_SPACING), "{g:?}");
        // ...and long ones never wait more than BURST_CYCLE_SPACING after the last start.
        let g = gaps(30 * MS, 20);
        assert!(g.iter().all(|d| *d == 30 * MS), "{g:?}");
        let g = gaps(8 * MS, 30);
        assert!(g.iter().all(|d| *d <= BURST_CYCLE_SPACING), "{g:?}");
        assert_eq!(g.last(), Some(&BURST_CYCLE_SPACING), "{g:?}");
    }
}
