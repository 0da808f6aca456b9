//! Koordinator's gang annotations (`gang.scheduling.koordinator.sh/*`), read from a pod (an
//! implicit gang, no object needed) or from a `scheduling.sigs.k8s.io` PodGroup, into the
//! engine's [`GangPolicy`]. Every bad value is an error naming the key and the problem.

use std::collections::BTreeMap;

use crate::model::{GangMode, GangPolicy, MatchPolicy};

use super::is_dns_subdomain;
use crate::convert::ConvertError;

pub const NAME: &str = "gang.scheduling.koordinator.sh/name";
pub const MIN_AVAILABLE: &str = "gang.scheduling.koordinator.sh/min-available";
pub const TOTAL_NUMBER: &str = "gang.scheduling.koordinator.sh/total-number";
pub const MODE: &str = "gang.scheduling.koordinator.sh/mode";
pub const GROUPS: &str = "gang.scheduling.koordinator.sh/groups";
pub const WAITING_TIME: &str = "gang.scheduling.koordinator.sh/waiting-time";
pub const MATCH_POLICY: &str = "gang.scheduling.koordinator.sh/match-policy";

/// A gang's minimum and policy as Koordinator annotations declare them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KoordinatorGang {
    /// `min-available`, if given.
    pub min_available: Option<u32>,
    pub policy: GangPolicy,
}

/// Reads the Koordinator keys of `annotations` for the gang `namespace/name`; `object` names
/// the pod or PodGroup in errors. Koordinator's defaults: mode Strict, match-policy
/// once-satisfied, no total-number, no group, no waiting time (the scheduler-wide default).
pub fn gang_policy(
    annotations: &BTreeMap<String, String>,
    namespace: &str,
    name: &str,
    object: &str,
) -> Result<KoordinatorGang, ConvertError> {
    let err = |key: &str, message: String| ConvertError {
        object: object.to_string(),
        field: format!("metadata.annotations[{key}]"),
        message,
    };
    let get = |key: &str| {
        annotations
            .get(key)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    };
    let number = |key: &str| -> Result<Option<u32>, ConvertError> {
        get(key)
            .map(|v| {
                v.parse::<u32>()
                    .map_err(|_| err(key, format!("{v:?} is not a whole number >= 0")))
            })
            .transpose()
    };
    let min_available = number(MIN_AVAILABLE)?;
    let total_number = number(TOTAL_NUMBER)?;
    if let (Some(min), Some(total)) = (min_available, total_number) {
        if min > total {
            return Err(err(
                MIN_AVAILABLE,
                format!("min-available {min} is larger than total-number {total}"),
            ));
        }
    }
    let mode = match get(MODE) {
        None | Some("Strict") => GangMode::Strict,
        Some("NonStrict") => GangMode::NonStrict,
        Some(other) => {
            return Err(err(
                MODE,
                format!("{other:?} is not a gang mode; use \"Strict\" or \"NonStrict\""),
            ))
        }
    };
    let match_policy = match get(MATCH_POLICY) {
        None | Some("once-satisfied") => MatchPolicy::OnceSatisfied,
        Some("only-waiting") => MatchPolicy::OnlyWaiting,
        Some("waiting-and-running") => MatchPolicy::WaitingAndRunning,
        Some(other) => {
            return Err(err(
                MATCH_POLICY,
                format!(
                    "{other:?} is not a match policy; use \"only-waiting\", \
                     \"waiting-and-running\" or \"once-satisfied\""
                ),
            ))
        }
    };
    let wait_timeout = get(WAITING_TIME)
        .map(|v| {
            parse_go_duration(v).ok_or_else(|| {
                err(
                    WAITING_TIME,
                    format!("{v:?} is not a duration; write e.g. \"30s\", \"10m\", \"1h30m\""),
                )
            })
        })
        .transpose()?;
    let group = match get(GROUPS) {
        None => Vec::new(),
        Some(text) => {
            let members: Vec<String> = serde_json::from_str(text).map_err(|e| {
                err(
                    GROUPS,
                    format!(
                        "{text:?} is not a JSON list of \"namespace/name\" strings ({e}); \
                         write e.g. [\"default/gang-a\",\"default/gang-b\"]"
                    ),
                )
            })?;
            let mut group = Vec::with_capacity(members.len() + 1);
            for m in members {
                let valid = m
                    .split_once('/')
                    .is_some_and(|(ns, n)| is_dns_subdomain(ns) && is_dns_subdomain(n));
                if !valid {
                    return Err(err(
                        GROUPS,
                        format!("{m:?} is not \"namespace/name\" of a gang"),
                    ));
                }
                group.push(m);
            }
            group.push(format!("{namespace}/{name}"));
            group.sort();
            group.dedup();
            if group.len() == 1 {
                Vec::new() // a group of itself alone is no group
            } else {
                group
            }
        }
    };
    Ok(KoordinatorGang {
        min_available,
        policy: GangPolicy {
            mode,
            match_policy,
            total_number,
            group,
            wait_timeout,
            ..Default::default()
        },
    })
}

/// A Go `time.Duration` string ("300ms", "30s", "1m30s", "1.5h") in milliseconds; humantime
/// reads the integral forms, a fraction is handled here. None for anything else, including
/// negative durations.
pub fn parse_go_duration(text: &str) -> Option<i64> {
    if let Ok(d) = humantime::parse_duration(text) {
        return i64::try_from(d.as_millis()).ok();
    }
    // "1.5h", "0.5s": one fractional number and a unit.
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)?;
    let unit_ms = match unit {
        "ms" => 1.0,
        "s" => 1_000.0,
        "m" => 60_000.0,
        "h" => 3_600_000.0,
        _ => return None,
    };
    let ms = value * unit_ms;
    (ms <= i64::MAX as f64).then_some(ms as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn read(pairs: &[(&str, &str)]) -> Result<KoordinatorGang, ConvertError> {
        gang_policy(&ann(pairs), "default", "gang-a", "pod default/p")
    }

    #[test]
    fn defaults_are_koordinators() {
        let g = read(&[(MIN_AVAILABLE, "2")]).unwrap();
        assert_eq!(g.min_available, Some(2));
        assert_eq!(g.policy.mode, GangMode::Strict);
        assert_eq!(g.policy.match_policy, MatchPolicy::OnceSatisfied);
        assert_eq!(g.policy.total_number, None);
        assert!(g.policy.group.is_empty());
        assert_eq!(g.policy.wait_timeout, None);
    }

    #[test]
    fn every_key_is_read() {
        let g = read(&[
            (MIN_AVAILABLE, "2"),
            (TOTAL_NUMBER, "3"),
            (MODE, "NonStrict"),
            (MATCH_POLICY, "only-waiting"),
            (WAITING_TIME, "1m30s"),
            (GROUPS, r#"["default/gang-b", "default/gang-a"]"#),
        ])
        .unwrap();
        assert_eq!(g.policy.total_number, Some(3));
        assert_eq!(g.policy.mode, GangMode::NonStrict);
        assert_eq!(g.policy.match_policy, MatchPolicy::OnlyWaiting);
        assert_eq!(g.policy.wait_timeout, Some(90_000));
        assert_eq!(g.policy.group, vec!["default/gang-a", "default/gang-b"]);
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("30s"), Some(30_000));
        assert_eq!(parse_go_duration("1h30m"), Some(5_400_000));
        assert_eq!(parse_go_duration("300ms"), Some(300));
        assert_eq!(parse_go_duration("1.5h"), Some(5_400_000));
        assert_eq!(parse_go_duration("-5s"), None);
        assert_eq!(parse_go_duration("soon"), None);
        assert_eq!(parse_go_duration("5"), None);
    }

    #[test]
    fn bad_values_name_the_key_and_the_problem() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[(GROUPS, "[default/gang-b")], "is not a JSON list"),
            (
                &[(GROUPS, r#"["gang-b"]"#)],
                "\"gang-b\" is not \"namespace/name\"",
            ),
            (
                &[(GROUPS, r#"["default/Gang_B"]"#)],
                "is not \"namespace/name\"",
            ),
            (&[(WAITING_TIME, "ten minutes")], "is not a duration"),
            (&[(MIN_AVAILABLE, "two")], "\"two\" is not a whole number"),
            (
                &[(MIN_AVAILABLE, "4"), (TOTAL_NUMBER, "3")],
                "min-available 4 is larger than total-number 3",
            ),
            (&[(MODE, "strict-ish")], "is not a gang mode"),
            (&[(MATCH_POLICY, "sometimes")], "is not a match policy"),
        ];
        for (pairs, expected) in cases {
            let e = read(pairs).unwrap_err().to_string();
            assert!(e.contains(expected), "{pairs:?}: {e}");
            assert!(
                e.starts_with("pod default/p: metadata.annotations[gang."),
                "{e}"
            );
        }
    }
}
