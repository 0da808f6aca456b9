//! Fair share over time: each queue's recent use of each resource, as an exponentially
//! decayed average, and the factor by which it weighs the queue's share (the `proportion`
//! and `capacity` plugins' `usageHalfLife` argument, like Slurm's PriorityDecayHalfLife).
//!
//! A queue's usage of a resource is the average amount it held, the recent past weighing
//! more: with `a(s)` the amount held at time `s` and `h` the half-life,
//!
//! ```text
//! U(t) = ∫ a(s) · 2^(-(t-s)/h) ds  /  ∫ 2^(-(t-s)/h) ds      (s from -∞ to t)
//! ```
//!
//! so a queue that held 32 GPUs for a long time has a usage of 32 GPUs, one half-life after
//! it stopped 16, two half-lives after 8. Between two cycles the amount held is taken as
//! constant (what the later cycle sees), which makes one step exact:
//! `U(t1) = U(t0) · d + a · (1 − d)` with `d = 2^(-(t1−t0)/h)`.
//!
//! The engine keeps it (`UsageLedger`), brought up to date by the scheduler as each cycle
//! opens, from the cycle's time and what each queue holds: no clock is read. A driver that
//! restarts hands the last recorded usage back through `QueueInfo::recorded_usage` (the live
//! driver writes it to the queue annotation `rust-batch.io/usage`).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use crate::conf::{ArgError, Arguments, HumanDuration};
use crate::model::resource::{MEMORY, PODS};
pub use crate::model::QueueUsage;
use crate::model::{Resource, Timestamp};
use crate::snapshot::ClusterState;

/// The shortest half-life a configuration may give: shorter weighs only the last few cycles.
pub const MIN_HALF_LIFE_MS: i64 = 60_000;
/// The longest: a year (past that, usage never decays in any span anyone looks at).
pub const MAX_HALF_LIFE_MS: i64 = 365 * 24 * 3_600_000;

impl QueueUsage {
    /// Whether the queue used anything (any amount above zero).
    pub fn any(&self) -> bool {
        self.amounts.values().any(|v| *v > 0.0)
    }

    /// The usage brought from `at` to `now`, `held` (amounts by resource) held meanwhile.
    /// A `now` at or before `at` changes nothing (a clock that goes back undoes no usage).
    pub fn advance(&mut self, now: Timestamp, held: &BTreeMap<String, f64>, half_life: i64) {
        if now <= self.at {
            return;
        }
        let d = decay(now - self.at, half_life);
        for (name, value) in self.amounts.iter_mut() {
            let a = held.get(name).copied().unwrap_or(0.0);
            *value = *value * d + a * (1.0 - d);
        }
        for (name, a) in held {
            self.amounts
                .entry(name.clone())
                .or_insert_with(|| a * (1.0 - d));
        }
        self.at = now;
    }
}

/// The `usageHalfLife` argument of `proportion` and `capacity`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct FairShareArguments {
    #[serde(rename = "usageHalfLife")]
    pub usage_half_life: Option<HumanDuration>,
}

/// Reads a plugin's `usageHalfLife` (ms; None when not given, and fair share over time is
/// off): a half-life under a minute (zero included) or over a year is refused, naming the
/// key, so `rust-batch check-config` and a reload refuse the file.
pub fn half_life_argument(args: &Arguments) -> Result<Option<i64>, ArgError> {
    let parsed: FairShareArguments = args.parse()?;
    let Some(HumanDuration(ms)) = parsed.usage_half_life else {
        return Ok(None);
    };
    if !(MIN_HALF_LIFE_MS..=MAX_HALF_LIFE_MS).contains(&ms) {
        let written = args
            .get::<crate::conf::Text>("usageHalfLife")
            .ok()
            .flatten()
            .map(|t| t.0)
            .unwrap_or_default();
        return Err(ArgError {
            key: format!("{}.usageHalfLife", args.path),
            message: format!(
                "a usage half-life must be at least 1m and at most 365d, got {written:?}"
            ),
        });
    }
    Ok(Some(ms))
}

/// `2^(-elapsed/half_life)`: what is left of a usage after `elapsed` ms.
pub fn decay(elapsed: i64, half_life: i64) -> f64 {
    if half_life <= 0 {
        return 0.0;
    }
    (-(elapsed as f64) / half_life as f64).exp2()
}

/// A resource vector as amounts in the unit people write (cores, bytes, GPUs), pods left
/// out (a queue's accounts hold none).
pub fn amounts_of(r: &Resource) -> BTreeMap<String, f64> {
    r.dimensions()
        .filter(|(n, _)| *n != PODS)
        .map(|(n, v)| {
            let v = if n == MEMORY {
                v as f64
            } else {
                v as f64 / 1000.0
            };
            (n.to_string(), v)
        })
        .collect()
}

/// Every queue's usage, kept by the scheduler from cycle to cycle.
#[derive(Clone, Debug, PartialEq)]
pub struct UsageLedger {
    half_life: i64,
    queues: BTreeMap<Arc<str>, QueueUsage>,
}

impl UsageLedger {
    pub fn new(half_life: i64) -> Self {
        UsageLedger {
            half_life,
            queues: BTreeMap::new(),
        }
    }

    /// The half-life, ms.
    pub fn half_life(&self) -> i64 {
        self.half_life
    }

    pub fn queue(&self, name: &str) -> Option<&QueueUsage> {
        self.queues.get(name)
    }

    pub fn queues(&self) -> impl Iterator<Item = (&Arc<str>, &QueueUsage)> {
        self.queues.iter()
    }

    /// Sets one queue's usage (a driver handing back what it recorded, a test).
    pub fn set(&mut self, queue: &str, usage: QueueUsage) {
        self.queues.insert(Arc::from(queue), usage);
    }

    /// Brings every queue of `state` up to `now`, each having held what it holds in `state`
    /// since the last cycle. A queue first seen starts from the usage it recorded
    /// (`QueueInfo::recorded_usage`, e.g. before a restart), else from none; a queue that is
    /// gone is forgotten.
    pub fn advance(&mut self, state: &ClusterState, now: Timestamp) {
        let held: BTreeMap<&str, BTreeMap<String, f64>> = state
            .tally()
            .queues()
            .map(|(name, sums)| (&**name, amounts_of(&sums.allocated)))
            .collect();
        let none = BTreeMap::new();
        let mut kept = BTreeMap::new();
        for q in state.queues() {
            let mut usage = match self.queues.remove(&q.name) {
                Some(u) => u,
                // A record from a clock ahead of this one simply waits for it to catch up.
                None => q.recorded_usage.clone().unwrap_or_else(|| QueueUsage {
                    at: now,
                    amounts: BTreeMap::new(),
                }),
            };
            usage.advance(now, held.get(&*q.name).unwrap_or(&none), self.half_life);
            kept.insert(q.name.clone(), usage);
        }
        self.queues = kept;
    }

    /// Each queue's fair-share factor `F = 2^(-u/s)` (Slurm's classic fair-share factor),
    /// for the queues of `entitled` (queue → what it is entitled to, in any unit: a weight,
    /// a deserved share): `s` is the queue's part of the sum of `entitled`, `u` its
    /// dominant usage share — over the resources any of these queues used, the largest
    /// part of their summed usage that is this queue's. A queue that used nothing has a
    /// factor of 1; one that used exactly its part, 1/2; twice its part, 1/4. Queues not in
    /// `entitled` get none.
    pub fn fair_factors(&self, entitled: &BTreeMap<Arc<str>, f64>) -> BTreeMap<Arc<str>, f64> {
        fair_factors(entitled, |q| self.queues.get(q).map(|u| &u.amounts))
    }
}

/// `UsageLedger::fair_factors` given each queue's usage amounts.
pub fn fair_factors<'a>(
    entitled: &BTreeMap<Arc<str>, f64>,
    usage_of: impl Fn(&str) -> Option<&'a BTreeMap<String, f64>>,
) -> BTreeMap<Arc<str>, f64> {
    let total_entitled: f64 = entitled.values().filter(|e| **e > 0.0).sum();
    let mut totals: BTreeMap<&str, f64> = BTreeMap::new();
    for q in entitled.keys() {
        for (name, v) in usage_of(q).into_iter().flatten() {
            if *v > 0.0 {
                *totals.entry(name).or_default() += v;
            }
        }
    }
    entitled
        .iter()
        .map(|(q, e)| {
            let used = usage_of(q)
                .into_iter()
                .flatten()
                .filter_map(|(name, v)| {
                    let total = totals.get(name.as_str()).copied().unwrap_or(0.0);
                    (total > 0.0 && *v > 0.0).then(|| v / total)
                })
                .fold(0.0, f64::max);
            let factor = if used <= 0.0 {
                1.0
            } else if *e <= 0.0 || total_entitled <= 0.0 {
                0.0
            } else {
                (-used / (e / total_entitled)).exp2()
            };
            (q.clone(), factor)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn half_life_of(yaml: &str) -> Result<Option<i64>, String> {
        let values: BTreeMap<String, serde_json::Value> = crate::yaml::from_str(yaml).unwrap();
        let args = Arguments::from_values("tiers[1].plugins[2].arguments".into(), values);
        half_life_argument(&args).map_err(|e| format!("{}: {}", e.key, e.message))
    }

    #[test]
    fn the_half_life_argument_is_read_and_checked() {
        assert_eq!(half_life_of("{}"), Ok(None));
        assert_eq!(half_life_of("usageHalfLife: 2h"), Ok(Some(2 * 3_600_000)));
        assert_eq!(
            half_life_of("usageHalfLife: 0s"),
            Err(
                "tiers[1].plugins[2].arguments.usageHalfLife: a usage half-life must be at \
                 least 1m and at most 365d, got \"0s\""
                    .into()
            )
        );
        assert_eq!(
            half_life_of("usageHalfLife: 400days"),
            Err(
                "tiers[1].plugins[2].arguments.usageHalfLife: a usage half-life must be at \
                 least 1m and at most 365d, got \"400days\""
                    .into()
            )
        );
        assert!(half_life_of("usageHalfLife: 2")
            .unwrap_err()
            .starts_with("tiers[1].plugins[2].arguments.usageHalfLife: expected a duration"));
    }

    const H: i64 = 2 * 3_600_000;

    fn held(gpus: f64) -> BTreeMap<String, f64> {
        BTreeMap::from([("nvidia.com/gpu".to_string(), gpus)])
    }

    fn gpus(u: &QueueUsage) -> f64 {
        u.amounts.get("nvidia.com/gpu").copied().unwrap_or(0.0)
    }

    #[test]
    fn decay_halves_per_half_life() {
        assert_eq!(decay(0, H), 1.0);
        assert_eq!(decay(H, H), 0.5);
        assert_eq!(decay(2 * H, H), 0.25);
        assert_eq!(decay(3 * H, H), 0.125);
        assert!((decay(H / 2, H) - 0.5f64.sqrt()).abs() < 1e-15);
    }

    #[test]
    fn usage_rises_toward_what_is_held_and_decays_after() {
        let mut u = QueueUsage::default();
        // Holding 32 GPUs for one half-life: half of 32; for another: three quarters.
        u.advance(H, &held(32.0), H);
        assert_eq!(gpus(&u), 16.0);
        u.advance(2 * H, &held(32.0), H);
        assert_eq!(gpus(&u), 24.0);
        // Holding nothing: halves every half-life.
        u.advance(3 * H, &held(0.0), H);
        assert_eq!(gpus(&u), 12.0);
        u.advance(5 * H, &BTreeMap::new(), H);
        assert_eq!(gpus(&u), 3.0);
        assert_eq!(u.at, 5 * H);
    }

    #[test]
    fn steps_compose_exactly() {
        // Two steps of one half-life each equal one step of two (the amount held constant).
        let mut a = QueueUsage::default();
        a.advance(H, &held(8.0), H);
        a.advance(2 * H, &held(8.0), H);
        let mut b = QueueUsage::default();
        b.advance(2 * H, &held(8.0), H);
        assert_eq!(a, b);
        assert_eq!(gpus(&a), 6.0);
    }

    #[test]
    fn time_going_back_changes_nothing() {
        let mut u = QueueUsage {
            at: H,
            amounts: held(4.0),
        };
        u.advance(H / 2, &held(100.0), H);
        assert_eq!(
            u,
            QueueUsage {
                at: H,
                amounts: held(4.0)
            }
        );
        u.advance(H, &held(100.0), H);
        assert_eq!(gpus(&u), 4.0, "no time passed");
    }

    #[test]
    fn amounts_are_in_the_units_people_write() {
        let r = Resource::from_quantities([
            ("cpu", "1500m"),
            ("memory", "2Gi"),
            ("nvidia.com/gpu", "4"),
            ("pods", "3"),
        ])
        .unwrap();
        assert_eq!(
            amounts_of(&r),
            BTreeMap::from([
                ("cpu".to_string(), 1.5),
                ("memory".to_string(), 2147483648.0),
                ("nvidia.com/gpu".to_string(), 4.0),
            ])
        );
    }

    fn factors(entries: &[(&str, f64, f64)]) -> BTreeMap<Arc<str>, f64> {
        let entitled = entries
            .iter()
            .map(|(q, w, _)| (Arc::from(*q), *w))
            .collect();
        let usage: BTreeMap<&str, BTreeMap<String, f64>> =
            entries.iter().map(|(q, _, u)| (*q, held(*u))).collect();
        fair_factors(&entitled, |q| usage.get(q))
    }

    #[test]
    fn the_factor_is_two_to_the_minus_usage_over_share() {
        // Equal weights; A used everything: u/s = 1/(1/2) = 2, F = 1/4; B used nothing.
        let f = factors(&[("a", 1.0, 32.0), ("b", 1.0, 0.0)]);
        assert_eq!(f["a"], 0.25);
        assert_eq!(f["b"], 1.0);
        // Each used exactly its share: 1/2 both, whatever the weights.
        let f = factors(&[("a", 1.0, 8.0), ("b", 3.0, 24.0)]);
        assert_eq!(f["a"], 0.5);
        assert_eq!(f["b"], 0.5);
        // Nobody used anything: every factor is 1 (weights unchanged).
        let f = factors(&[("a", 1.0, 0.0), ("b", 3.0, 0.0)]);
        assert_eq!((f["a"], f["b"]), (1.0, 1.0));
        // A weight of zero that used something gets nothing.
        let f = factors(&[("a", 0.0, 4.0), ("b", 1.0, 4.0)]);
        assert_eq!(f["a"], 0.0);
        assert_eq!(f["b"], (-0.5f64).exp2(), "half the use, all the weight");
    }

    #[test]
    fn the_dominant_resource_decides() {
        // A used half the GPUs and a quarter of the cpu: its usage share is 1/2.
        let entitled: BTreeMap<Arc<str>, f64> = [(Arc::from("a"), 1.0), (Arc::from("b"), 1.0)]
            .into_iter()
            .collect();
        let a = BTreeMap::from([
            ("nvidia.com/gpu".to_string(), 4.0),
            ("cpu".to_string(), 1.0),
        ]);
        let b = BTreeMap::from([
            ("nvidia.com/gpu".to_string(), 4.0),
            ("cpu".to_string(), 3.0),
        ]);
        let f = fair_factors(&entitled, |q| if q == "a" { Some(&a) } else { Some(&b) });
        assert_eq!(f["a"], 0.5, "gpu 4/8 over a share of 1/2");
        assert_eq!(f["b"], (-1.5f64).exp2(), "cpu 3/4 over a share of 1/2");
    }
}
