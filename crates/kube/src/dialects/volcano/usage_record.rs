//! The Queue annotation `rust-batch.io/usage`: a queue's fair-share usage over time as the
//! leader records it (`usage::record`) and a starting scheduler reads it back
//! (`QueueInfo::recorded_usage`, through the queue's conversion).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::QueueUsage;

/// The Queue annotation that records the queue's usage.
pub const USAGE: &str = "rust-batch.io/usage";

/// The annotation's value: `{"at": "2026-11-28T10:00:00.000Z", "amounts": {"cpu": 12.5,
/// "nvidia.com/gpu": 8}}` (decayed average amounts held, in cores, bytes and GPUs).
#[derive(Debug, Serialize, Deserialize)]
struct Recorded {
    at: String,
    amounts: BTreeMap<String, f64>,
}

/// The annotation value recording `usage`.
pub fn annotation_value(usage: &QueueUsage) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(usage.at.max(0) as u64);
    let recorded = Recorded {
        at: humantime::format_rfc3339_millis(at).to_string(),
        amounts: usage.amounts.clone(),
    };
    serde_json::to_string(&recorded).unwrap_or_default()
}

/// The usage an annotation value records, or why it cannot be read (the queue then starts
/// from no usage: a bad record costs fairness over time, never the queue).
pub fn parse(text: &str) -> Result<QueueUsage, String> {
    let r: Recorded = serde_json::from_str(text).map_err(|e| format!("not a usage record: {e}"))?;
    let at = humantime::parse_rfc3339(&r.at).map_err(|e| format!("at: {e}"))?;
    let at = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| "at: before 1970".to_string())?
        .as_millis();
    if let Some((name, v)) = r.amounts.iter().find(|(_, v)| !v.is_finite() || **v < 0.0) {
        return Err(format!("amounts.{name}: {v} is not an amount"));
    }
    Ok(QueueUsage {
        at: i64::try_from(at).map_err(|_| "at: too far ahead".to_string())?,
        amounts: r.amounts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written() {
        let usage = QueueUsage {
            at: 1_764_324_000_123,
            amounts: BTreeMap::from([
                ("cpu".to_string(), 12.5),
                ("nvidia.com/gpu".to_string(), 8.0),
            ]),
        };
        let text = annotation_value(&usage);
        assert_eq!(
            text,
            r#"{"at":"2025-11-28T10:00:00.123Z","amounts":{"cpu":12.5,"nvidia.com/gpu":8.0}}"#
        );
        assert_eq!(parse(&text), Ok(usage));
    }

    #[test]
    fn a_bad_record_says_why() {
        assert!(parse("12").unwrap_err().starts_with("not a usage record"));
        assert!(parse(r#"{"at":"yesterday","amounts":{}}"#)
            .unwrap_err()
            .starts_with("at: "));
        assert_eq!(
            parse(r#"{"at":"2025-11-28T10:00:00Z","amounts":{"cpu":-1}}"#),
            Err("amounts.cpu: -1 is not an amount".into())
        );
    }
}
