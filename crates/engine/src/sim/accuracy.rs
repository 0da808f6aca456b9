//! How well the predicted start times (`framework/prediction.rs`) held in a run: per gang the
//! prediction made in the first cycle after its submission and the first made while it was
//! the head of its queue, against when it actually started; over the run the distribution
//! of the errors (median, p90), in time and relative to the wait the prediction covered.

use std::fmt::Write as _;

use serde::Serialize;

use super::report::{fmt_ms, JobReport};
use crate::framework::PredictedStart;
use crate::model::Timestamp;

/// A gang's predictions (scenarios with `predictStart` only).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobPrediction {
    /// The start predicted in the first cycle after submission (None: unknown, or it
    /// started in that cycle and was never predicted).
    pub at_submission: Option<Timestamp>,
    /// The start predicted the first time it was the first waiting gang of its queue, and
    /// when that was.
    pub at_head: Option<Timestamp>,
    pub head_since: Option<Timestamp>,
    /// Why the prediction at submission was unknown.
    pub unknown: Option<String>,
}

impl JobPrediction {
    pub fn of(first: Option<&PredictedStart>, head: Option<&(Timestamp, PredictedStart)>) -> Self {
        let known = |p: &PredictedStart| match p {
            PredictedStart::At(t) => Some(*t),
            PredictedStart::Unknown(_) => None,
        };
        JobPrediction {
            at_submission: first.and_then(known),
            at_head: head.and_then(|(_, p)| known(p)),
            head_since: head.map(|(t, _)| *t),
            unknown: match first {
                Some(PredictedStart::Unknown(why)) => Some(why.clone()),
                _ => None,
            },
        }
    }
}

/// The distribution of prediction errors over the gangs that started.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ErrorStats {
    /// Gangs with a known prediction that then started.
    pub gangs: usize,
    pub median_abs_error_ms: Option<i64>,
    pub p90_abs_error_ms: Option<i64>,
    /// |predicted − actual| / (actual − when predicted).
    pub median_rel_error: Option<f64>,
    pub p90_rel_error: Option<f64>,
}

impl ErrorStats {
    /// From (predicted, actual, predicted when) triples.
    fn of(points: impl Iterator<Item = (Timestamp, Timestamp, Timestamp)>) -> Self {
        let mut abs = Vec::new();
        let mut rel = Vec::new();
        for (predicted, actual, when) in points {
            let err = (predicted - actual).abs();
            abs.push(err);
            let wait = actual - when;
            if wait > 0 {
                rel.push(err as f64 / wait as f64);
            }
        }
        abs.sort_unstable();
        rel.sort_by(f64::total_cmp);
        ErrorStats {
            gangs: abs.len(),
            median_abs_error_ms: quantile(&abs, 0.5).copied(),
            p90_abs_error_ms: quantile(&abs, 0.9).copied(),
            median_rel_error: quantile(&rel, 0.5).copied(),
            p90_rel_error: quantile(&rel, 0.9).copied(),
        }
    }
}

/// Nearest-rank quantile of sorted values.
fn quantile<T>(sorted: &[T], q: f64) -> Option<&T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted.get(rank - 1)
}

/// The run's prediction errors (scenarios with `predictStart` only).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PredictionSummary {
    /// Gangs predicted at submission: with a time, and unknown.
    pub predicted: usize,
    pub unknown: usize,
    pub at_submission: ErrorStats,
    pub at_head: ErrorStats,
}

impl PredictionSummary {
    pub fn of(jobs: &[JobReport]) -> Self {
        let with = |j: &JobReport| j.prediction.clone().map(|p| (p, j.submitted, j.started));
        let all: Vec<_> = jobs.iter().filter_map(with).collect();
        PredictionSummary {
            predicted: all
                .iter()
                .filter(|(p, ..)| p.at_submission.is_some())
                .count(),
            unknown: all.iter().filter(|(p, ..)| p.unknown.is_some()).count(),
            at_submission: ErrorStats::of(all.iter().filter_map(|(p, submitted, started)| {
                Some((p.at_submission?, (*started)?, *submitted))
            })),
            at_head: ErrorStats::of(
                all.iter()
                    .filter_map(|(p, _, started)| Some((p.at_head?, (*started)?, p.head_since?))),
            ),
        }
    }

    /// Lines for the human report.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\npredicted start ({} gangs predicted, {} unknown at submission):",
            self.predicted, self.unknown
        );
        for (name, s) in [
            ("at submission", &self.at_submission),
            ("at queue head", &self.at_head),
        ] {
            let ms = |v: Option<i64>| v.map(fmt_ms).unwrap_or_else(|| "-".into());
            let pct = |v: Option<f64>| {
                v.map(|v| format!("{:.1}%", v * 100.0))
                    .unwrap_or_else(|| "-".into())
            };
            let _ = writeln!(
                out,
                "  {name}: {} started; error median {} (p90 {}), of the wait: median {} (p90 {})",
                s.gangs,
                ms(s.median_abs_error_ms),
                ms(s.p90_abs_error_ms),
                pct(s.median_rel_error),
                pct(s.p90_rel_error)
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank_and_relative_errors_skip_zero_waits() {
        let s = ErrorStats::of([(10, 10, 0), (20, 10, 0), (0, 30, 0), (5, 5, 5)].into_iter());
        assert_eq!(s.gangs, 4);
        assert_eq!(s.median_abs_error_ms, Some(0));
        assert_eq!(s.p90_abs_error_ms, Some(30));
        // 0/10, 10/10, 30/30; the gang that started when predicted has no wait.
        assert_eq!(s.median_rel_error, Some(1.0));
        assert_eq!(s.p90_rel_error, Some(1.0));
        assert_eq!(quantile::<i64>(&[], 0.5), None);
    }
}
