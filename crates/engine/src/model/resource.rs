//! Resource vectors and Kubernetes quantity parsing.
//!
//! CPU is kept in millicores, memory in bytes, pods as a count and every other (extended)
//! resource in milli-units, all as `i64`. Integers keep the arithmetic exact, which is what
//! lets a `Statement` discard restore a node bit for bit.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";
pub const GPU: &str = "nvidia.com/gpu";

/// Why a quantity string could not be read.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum QuantityError {
    #[error("quantity {0:?} is empty")]
    Empty(String),
    #[error("quantity {0:?} is not a Kubernetes quantity (examples: \"500m\", \"2Gi\", \"1.5\", \"1e3\")")]
    Malformed(String),
    #[error("quantity {0:?} is negative; resource requests must be >= 0")]
    Negative(String),
    #[error("quantity {0:?} is too large")]
    TooLarge(String),
    #[error("resource {name}: {source}")]
    Named {
        name: String,
        #[source]
        source: Box<QuantityError>,
    },
}

/// Parses a Kubernetes quantity and returns its value in thousandths, rounded up (Kubernetes
/// rounds requests up, never down: "0.1m" CPU is 1m).
pub fn parse_milli(text: &str) -> Result<i128, QuantityError> {
    let s = text.trim();
    if s.is_empty() {
        return Err(QuantityError::Empty(text.to_string()));
    }
    let malformed = || QuantityError::Malformed(text.to_string());
    let too_large = || QuantityError::TooLarge(text.to_string());
    let (negative, body) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(number_end);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() && frac_part.is_empty() || frac_part.contains('.') {
        return Err(malformed());
    }
    let mut mantissa: i128 = 0;
    for c in int_part.chars().chain(frac_part.chars()) {
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(i128::from(c as u8 - b'0')))
            .ok_or_else(too_large)?;
    }
    // value = mantissa * 10^exp10 * 2^exp2; start with milli scaling (10^3).
    let mut exp10: i32 = 3 - frac_part.len() as i32;
    let mut exp2: u32 = 0;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => exp2 = 10,
        "Mi" => exp2 = 20,
        "Gi" => exp2 = 30,
        "Ti" => exp2 = 40,
        "Pi" => exp2 = 50,
        "Ei" => exp2 = 60,
        other if other.starts_with(['e', 'E']) => {
            let exp: i32 = other[1..].parse().map_err(|_| malformed())?;
            if exp.unsigned_abs() > 40 {
                return Err(too_large());
            }
            exp10 += exp;
        }
        _ => return Err(malformed()),
    }
    let mut value = mantissa.checked_mul(1i128 << exp2).ok_or_else(too_large)?;
    if exp10 >= 0 {
        value = value
            .checked_mul(10i128.checked_pow(exp10 as u32).ok_or_else(too_large)?)
            .ok_or_else(too_large)?;
    } else {
        let divisor = 10i128
            .checked_pow(exp10.unsigned_abs())
            .unwrap_or(i128::MAX);
        // Rounded up without `value + divisor - 1`, which overflows.
        value = value / divisor + i128::from(value % divisor != 0);
    }
    if negative && value != 0 {
        return Err(QuantityError::Negative(text.to_string()));
    }
    if value > i128::from(i64::MAX) {
        return Err(too_large());
    }
    Ok(value)
}

/// A resource vector: what a pod requests or what a node offers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Resource {
    pub milli_cpu: i64,
    pub memory: i64,
    pub pods: i64,
    /// Extended resources in milli-units, sorted by name, zero entries dropped.
    pub scalars: Vec<(Arc<str>, i64)>,
}

/// The first dimension in which a request does not fit what is available.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    pub resource: Arc<str>,
    pub need: i64,
    pub free: i64,
}

impl Shortfall {
    pub fn describe(&self) -> String {
        format!(
            "Insufficient {} (need {}, best node has {} free)",
            self.resource,
            format_amount(&self.resource, self.need),
            format_amount(&self.resource, self.free.max(0))
        )
    }
}

impl Resource {
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a resource vector from `name -> quantity` pairs, as found in a pod spec or a
    /// node's allocatable. Unknown names become extended resources.
    pub fn from_quantities<'a, I>(pairs: I) -> Result<Self, QuantityError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut r = Resource::new();
        for (name, quantity) in pairs {
            let milli = parse_milli(quantity).map_err(|e| QuantityError::Named {
                name: name.to_string(),
                source: Box::new(e),
            })?;
            r.set_milli(name, milli as i64);
        }
        Ok(r)
    }

    /// Sets a dimension from a value in thousandths (rounding bytes and pods up).
    pub fn set_milli(&mut self, name: &str, milli: i64) {
        match name {
            CPU => self.milli_cpu = milli,
            MEMORY => self.memory = div_ceil(milli, 1000),
            PODS => self.pods = div_ceil(milli, 1000),
            _ => self.set_scalar(name, milli),
        }
    }

    /// Sets a dimension from a value in its canonical unit (see `get`).
    pub fn set(&mut self, name: &str, value: i64) {
        match name {
            CPU => self.milli_cpu = value,
            MEMORY => self.memory = value,
            PODS => self.pods = value,
            _ => self.set_scalar(name, value),
        }
    }

    pub fn with(mut self, name: &str, quantity: &str) -> Result<Self, QuantityError> {
        let milli = parse_milli(quantity)?;
        self.set_milli(name, milli as i64);
        Ok(self)
    }

    pub fn set_scalar(&mut self, name: &str, milli: i64) {
        match self.scalars.binary_search_by(|(n, _)| (**n).cmp(name)) {
            Ok(i) if milli == 0 => {
                self.scalars.remove(i);
            }
            Ok(i) => self.scalars[i].1 = milli,
            Err(_) if milli == 0 => {}
            Err(i) => self.scalars.insert(i, (Arc::from(name), milli)),
        }
    }

    pub fn scalar(&self, name: &str) -> i64 {
        self.scalars
            .binary_search_by(|(n, _)| (**n).cmp(name))
            .map(|i| self.scalars[i].1)
            .unwrap_or(0)
    }

    /// The value of one dimension in its canonical unit.
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.milli_cpu,
            MEMORY => self.memory,
            PODS => self.pods,
            _ => self.scalar(name),
        }
    }

    /// Every dimension that is set, pods included, in a fixed order.
    pub fn dimensions(&self) -> impl Iterator<Item = (&str, i64)> {
        [
            (CPU, self.milli_cpu),
            (MEMORY, self.memory),
            (PODS, self.pods),
        ]
        .into_iter()
        .chain(self.scalars.iter().map(|(n, v)| (&**n, *v)))
        .filter(|(_, v)| *v != 0)
    }

    pub fn is_empty(&self) -> bool {
        self.milli_cpu == 0 && self.memory == 0 && self.scalars.is_empty()
    }

    /// True when no dimension but `pods` is requested: a BestEffort pod.
    pub fn is_best_effort(&self) -> bool {
        self.is_empty()
    }

    pub fn add(&mut self, other: &Resource) {
        self.combine(other, |a, b| a + b);
    }

    pub fn sub(&mut self, other: &Resource) {
        self.combine(other, |a, b| a - b);
    }

    /// Element-wise maximum.
    pub fn max_with(&mut self, other: &Resource) {
        self.combine(other, i64::max);
    }

    /// Element-wise minimum.
    pub fn min_with(&mut self, other: &Resource) {
        self.combine(other, i64::min);
    }

    /// The same vector without the pod count (for shares and quotas, which are about
    /// compute resources, not pod slots).
    pub fn without_pods(&self) -> Resource {
        let mut r = self.clone();
        r.pods = 0;
        r
    }

    pub fn plus(&self, other: &Resource) -> Resource {
        let mut r = self.clone();
        r.add(other);
        r
    }

    pub fn minus(&self, other: &Resource) -> Resource {
        let mut r = self.clone();
        r.sub(other);
        r
    }

    /// Multiplies every dimension by `factor` (used for overcommit factors), rounding down.
    pub fn scaled(&self, factor: f64) -> Resource {
        let f = |v: i64| (v as f64 * factor).floor() as i64;
        Resource {
            milli_cpu: f(self.milli_cpu),
            memory: f(self.memory),
            pods: f(self.pods),
            scalars: self
                .scalars
                .iter()
                .map(|(n, v)| (n.clone(), f(*v)))
                .filter(|(_, v)| *v != 0)
                .collect(),
        }
    }

    fn combine(&mut self, other: &Resource, op: impl Fn(i64, i64) -> i64) {
        self.milli_cpu = op(self.milli_cpu, other.milli_cpu);
        self.memory = op(self.memory, other.memory);
        self.pods = op(self.pods, other.pods);
        if other.scalars.is_empty() && self.scalars.is_empty() {
            return;
        }
        // The same extended resources on both sides (a GPU pod on a GPU node), or none on
        // the other side: update in place rather than merge into a new vector.
        if other.scalars.is_empty()
            || self.scalars.len() == other.scalars.len()
                && self
                    .scalars
                    .iter()
                    .zip(&other.scalars)
                    .all(|(a, b)| a.0 == b.0)
        {
            for (i, (_, v)) in self.scalars.iter_mut().enumerate() {
                *v = op(*v, other.scalars.get(i).map_or(0, |s| s.1));
            }
            self.scalars.retain(|(_, v)| *v != 0);
            return;
        }
        // Merge two sorted lists; dimensions missing on either side count as 0.
        let mut merged = Vec::with_capacity(self.scalars.len().max(other.scalars.len()));
        let (mut i, mut j) = (0, 0);
        while i < self.scalars.len() || j < other.scalars.len() {
            let order = match (self.scalars.get(i), other.scalars.get(j)) {
                (Some(a), Some(b)) => a.0.cmp(&b.0),
                (Some(_), None) => Ordering::Less,
                _ => Ordering::Greater,
            };
            let (name, value) = match order {
                Ordering::Less => {
                    i += 1;
                    (self.scalars[i - 1].0.clone(), op(self.scalars[i - 1].1, 0))
                }
                Ordering::Greater => {
                    j += 1;
                    (
                        other.scalars[j - 1].0.clone(),
                        op(0, other.scalars[j - 1].1),
                    )
                }
                Ordering::Equal => {
                    i += 1;
                    j += 1;
                    (
                        self.scalars[i - 1].0.clone(),
                        op(self.scalars[i - 1].1, other.scalars[j - 1].1),
                    )
                }
            };
            if value != 0 {
                merged.push((name, value));
            }
        }
        self.scalars = merged;
    }

    /// Whether `self` (a request) fits into `available`; pods count as one dimension.
    pub fn fits(&self, available: &Resource) -> bool {
        self.first_shortfall(available).is_none()
    }

    /// The first dimension where the request exceeds what is available, if any.
    pub fn first_shortfall(&self, available: &Resource) -> Option<Shortfall> {
        self.shortfall_with(|name| available.get(name))
    }

    /// Like `first_shortfall`, with availability given per dimension (no allocation).
    pub fn shortfall_with(&self, available: impl Fn(&str) -> i64) -> Option<Shortfall> {
        self.dimensions().find_map(|(name, need)| {
            let free = available(name);
            (need > free).then(|| Shortfall {
                resource: Arc::from(name),
                need,
                free,
            })
        })
    }

    /// True when every dimension is >= 0 (an over-committed node has a negative idle).
    pub fn is_non_negative(&self) -> bool {
        self.milli_cpu >= 0
            && self.memory >= 0
            && self.pods >= 0
            && self.scalars.iter().all(|(_, v)| *v >= 0)
    }

    /// Every resource name with a non-zero value in either vector.
    pub fn names<'a>(&'a self, other: &'a Resource) -> Vec<Arc<str>> {
        let mut names: Vec<Arc<str>> = [CPU, MEMORY, PODS]
            .into_iter()
            .filter(|n| self.get(n) != 0 || other.get(n) != 0)
            .map(Arc::from)
            .collect();
        for (n, _) in self.scalars.iter().chain(other.scalars.iter()) {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
        names
    }
}

fn div_ceil(a: i64, b: i64) -> i64 {
    // Not `(a + b - 1) / b`: that overflows for the largest quantities.
    a.div_euclid(b) + i64::from(a.rem_euclid(b) != 0)
}

/// A whole number in the largest binary unit that divides it exactly (`80Gi`, `512Mi`;
/// plain digits otherwise), as Kubernetes quantities write bytes.
pub fn binary_quantity(value: i64) -> String {
    const UNITS: [(&str, i64); 4] = [
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    UNITS
        .iter()
        .find(|(_, size)| value != 0 && value % size == 0)
        .map(|(unit, size)| format!("{}{unit}", value / size))
        .unwrap_or_else(|| value.to_string())
}

/// Formats one dimension's value in the unit people write for it.
pub fn format_amount(name: &str, value: i64) -> String {
    match name {
        CPU => {
            if value % 1000 == 0 {
                format!("{}", value / 1000)
            } else {
                format!("{value}m")
            }
        }
        MEMORY => binary_quantity(value),
        PODS => value.to_string(),
        _ => {
            if value % 1000 == 0 {
                format!("{}", value / 1000)
            } else {
                format!("{value}m")
            }
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .dimensions()
            .filter(|(n, _)| *n != PODS)
            .map(|(n, v)| format!("{n} {}", format_amount(n, v)))
            .collect();
        if parts.is_empty() {
            write!(f, "nothing")
        } else {
            write!(f, "{}", parts.join(", "))
        }
    }
}

/// A resource list as written in YAML (`{cpu: "1", memory: 2Gi}`), parsed when loaded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceList(pub Resource);

impl Serialize for ResourceList {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for ResourceList {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw: std::collections::BTreeMap<String, serde_json::Value> =
            Deserialize::deserialize(d)?;
        let mut pairs = Vec::with_capacity(raw.len());
        for (name, value) in &raw {
            let text = match value {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                other => {
                    return Err(serde::de::Error::custom(format!(
                        "resource {name}: expected a quantity, got {other:?}"
                    )))
                }
            };
            pairs.push((name.clone(), text));
        }
        Resource::from_quantities(pairs.iter().map(|(n, q)| (n.as_str(), q.as_str())))
            .map(ResourceList)
            .map_err(serde::de::Error::custom)
    }
}

impl Serialize for Resource {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let dims: Vec<_> = self.dimensions().collect();
        let mut map = s.serialize_map(Some(dims.len()))?;
        for (n, v) in dims {
            map.serialize_entry(n, &format_amount(n, v))?;
        }
        map.end()
    }
}

/// Effective pod request as Kubernetes computes it: the larger of the app containers' sum
/// (plus sidecars) and the peak during init, plus pod overhead. `init` is
/// `(request, restartable)`; restartable init containers are sidecars that keep running.
pub fn pod_requests(
    containers: &[Resource],
    init: &[(Resource, bool)],
    overhead: Option<&Resource>,
) -> Resource {
    let mut app = Resource::new();
    for c in containers {
        app.add(c);
    }
    let mut sidecars = Resource::new();
    let mut init_peak = Resource::new();
    for (request, restartable) in init {
        if *restartable {
            sidecars.add(request);
            init_peak.max_with(&sidecars);
        } else {
            init_peak.max_with(&request.plus(&sidecars));
        }
    }
    let mut total = app.plus(&sidecars);
    total.max_with(&init_peak);
    if let Some(o) = overhead {
        total.add(o);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kubernetes_quantities() {
        assert_eq!(parse_milli("500m").unwrap(), 500);
        assert_eq!(parse_milli("1").unwrap(), 1000);
        assert_eq!(parse_milli("1.5").unwrap(), 1500);
        assert_eq!(parse_milli("1e3").unwrap(), 1_000_000);
        assert_eq!(parse_milli("2Gi").unwrap(), 2 * (1 << 30) * 1000);
        assert_eq!(parse_milli("100M").unwrap(), 100_000_000_000);
        assert_eq!(parse_milli("0.1m").unwrap(), 1, "rounds up");
        assert_eq!(parse_milli("1k").unwrap(), 1_000_000);
        assert_eq!(parse_milli(".5").unwrap(), 500);
        assert_eq!(parse_milli("+2").unwrap(), 2000);
        assert_eq!(parse_milli("-0").unwrap(), 0);
    }

    #[test]
    fn rejects_bad_quantities() {
        assert!(matches!(parse_milli(""), Err(QuantityError::Empty(_))));
        assert!(matches!(
            parse_milli("abc"),
            Err(QuantityError::Malformed(_))
        ));
        assert!(matches!(
            parse_milli("1.2.3"),
            Err(QuantityError::Malformed(_))
        ));
        assert!(matches!(
            parse_milli("5Zi"),
            Err(QuantityError::Malformed(_))
        ));
        assert!(matches!(parse_milli("-1"), Err(QuantityError::Negative(_))));
        assert!(matches!(
            parse_milli("1e99"),
            Err(QuantityError::TooLarge(_))
        ));
        assert!(matches!(
            parse_milli("99999999999999999999999999999999999999"),
            Err(QuantityError::TooLarge(_))
        ));
    }

    #[test]
    fn tiny_quantities_and_huge_exponents_are_results_not_overflows() {
        // Found by fuzzing (fuzz/corpus/quantity): a fraction below 10^-38 (whose divisor is
        // capped at i128::MAX) overflowed while rounding up, and exponent i32::MIN
        // overflowed `abs()`.
        assert_eq!(parse_milli("1.592720323308E-35").unwrap(), 1, "rounds up");
        assert_eq!(
            parse_milli("0.000000000000000000000000000000000000000001").unwrap(),
            1
        );
        assert_eq!(parse_milli("0e-30").unwrap(), 0);
        assert!(matches!(
            parse_milli("1e-2147483648"),
            Err(QuantityError::TooLarge(_))
        ));
        assert!(matches!(
            parse_milli("170141183460469231731687303715884105727n"),
            Err(QuantityError::TooLarge(_))
        ));
    }

    #[test]
    fn the_largest_memory_and_pod_quantities_round_up_without_overflow() {
        // Found by fuzzing (fuzz/corpus/quantity): bytes and pods are rounded up from
        // thousandths, and `(a + 999) / 1000` overflowed at i64::MAX.
        let r = Resource::new()
            .with(MEMORY, "9223372036854775807m")
            .unwrap()
            .with(PODS, "9223372036854775807m")
            .unwrap();
        assert_eq!(r.memory, i64::MAX / 1000 + 1);
        assert_eq!(r.pods, i64::MAX / 1000 + 1);
        assert_eq!(div_ceil(-1500, 1000), -1);
        assert_eq!(div_ceil(2000, 1000), 2);
    }

    #[test]
    fn builds_vectors_with_canonical_units() {
        let r = Resource::from_quantities([
            ("cpu", "2"),
            ("memory", "1Gi"),
            ("nvidia.com/gpu", "4"),
            ("pods", "110"),
        ])
        .unwrap();
        assert_eq!(r.milli_cpu, 2000);
        assert_eq!(r.memory, 1 << 30);
        assert_eq!(r.pods, 110);
        assert_eq!(r.scalar(GPU), 4000);
        assert_eq!(r.to_string(), "cpu 2, memory 1Gi, nvidia.com/gpu 4");
        let err = Resource::from_quantities([("memory", "lots")]).unwrap_err();
        assert!(err.to_string().contains("resource memory"), "{err}");
    }

    #[test]
    fn arithmetic_merges_extended_resources() {
        let a = Resource::from_quantities([("cpu", "1"), ("nvidia.com/gpu", "2")]).unwrap();
        let b = Resource::from_quantities([("cpu", "500m"), ("example.com/fpga", "1")]).unwrap();
        let sum = a.plus(&b);
        assert_eq!(sum.milli_cpu, 1500);
        assert_eq!(sum.scalar(GPU), 2000);
        assert_eq!(sum.scalar("example.com/fpga"), 1000);
        assert_eq!(sum.minus(&b), a, "subtraction drops zeroed dimensions");
        assert!(a.fits(&sum));
        assert!(!sum.fits(&a));
        let short = b.first_shortfall(&a).unwrap();
        assert_eq!(&*short.resource, "example.com/fpga");
        assert_eq!(
            short.describe(),
            "Insufficient example.com/fpga (need 1, best node has 0 free)"
        );
    }

    #[test]
    fn pod_requests_follow_kubernetes_rules() {
        let r = |cpu: &str| Resource::from_quantities([("cpu", cpu)]).unwrap();
        // Sum of containers (1 + 1) vs the largest init container (3): init wins.
        let total = pod_requests(&[r("1"), r("1")], &[(r("3"), false), (r("1"), false)], None);
        assert_eq!(total.milli_cpu, 3000);
        // Containers win, plus overhead.
        let total = pod_requests(&[r("2"), r("2")], &[(r("3"), false)], Some(&r("250m")));
        assert_eq!(total.milli_cpu, 4250);
        // A sidecar adds to the app containers and to later init containers.
        let total = pod_requests(&[r("1")], &[(r("1"), true), (r("3"), false)], None);
        assert_eq!(total.milli_cpu, 4000);
    }
}
