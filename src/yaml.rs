//! YAML in and out, with serde-saphyr (pure Rust, no unsafe code, fuzzed not to panic,
//! errors with line and column), set up to read values as this program always has (YAML
//! 1.2's core schema, as serde_yaml read it) so that no file changes meaning:
//!
//! - a value read without a type (a plugin's arguments, a switch, a ConfigMap) is a boolean
//!   only when spelt true or false (`gpu-affinity.gpuModel: off` stays the string "off"),
//!   and `010` or `1_000` stay strings;
//! - a key repeated in a map keeps its last value (a field repeated in a struct is an
//!   error);
//! - `.nan` and `.inf` read without a type are the strings ".nan" and ".inf" (a number
//!   field still reads them as numbers);
//! - nesting is limited as serde_yaml limited it (128 levels); the other budgets (events,
//!   nodes, aliases) stop pathological inputs long before they exhaust memory.
//!
//! Errors carry the line and column, without a source snippet: they go into one-line
//! messages that already name the file.

use serde::de::DeserializeOwned;
use serde::Serialize;

pub use serde_saphyr::{Error, SerializeError};

/// The options every YAML text is read with (see the module's doc).
pub fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_depth: 128,
            max_events: 10_000_000,
            max_nodes: 2_500_000,
        },
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::PassThrough,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::AsString,
        with_snippet: false,
    }
}

/// One YAML document as a `T`.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    serde_saphyr::from_str_with_options(text, options())
}

/// Every document of a YAML stream (`---`-separated) as a `T`.
pub fn from_str_multiple<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, Error> {
    serde_saphyr::from_multiple_with_options(text, options())
}

/// One YAML document as a `T`; an error names the path of the value that failed
/// (`jobs[0].submitAt: …`, nothing for the document itself) before the message, which
/// carries the line and column.
pub fn from_str_with_path<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    let mut path = String::new();
    serde_saphyr::with_deserializer_from_str_with_options(text, options(), |de| {
        serde_path_to_error::deserialize::<_, T>(de).map_err(|e| {
            path = e.path().to_string();
            e.into_inner()
        })
    })
    .map_err(|e| {
        let e = message(&e);
        if path.is_empty() || path == "." {
            e
        } else {
            format!("{path}: {e}")
        }
    })
}

/// An error's message, with its line and column; an unknown field or variant is named in
/// serde's own words (``unknown field `x`, expected `a` or `b` ``), as serde_yaml named it.
pub fn message(e: &Error) -> String {
    let (unknown, name, expected) = match e.without_snippet() {
        Error::SerdeUnknownField {
            field, expected, ..
        } => ("field", field, expected),
        Error::SerdeUnknownVariant {
            variant, expected, ..
        } => ("variant", variant, expected),
        _ => return e.to_string(),
    };
    let quoted: Vec<String> = expected.iter().map(|x| format!("`{x}`")).collect();
    let expected = match quoted.as_slice() {
        [] => format!("there are no {unknown}s"),
        [one] => format!("expected {one}"),
        [a, b] => format!("expected {a} or {b}"),
        more => format!("expected one of {}", more.join(", ")),
    };
    let at = e
        .location()
        .filter(|l| l.line() > 0)
        .map(|l| format!(" at line {}, column {}", l.line(), l.column()))
        .unwrap_or_default();
    format!("unknown {unknown} `{name}`, {expected}{at}")
}

/// `value` as a YAML document. Strings stay on one line, quoted when they must be (with
/// `\n` for a newline, no block or folded scalars), as serde_yaml wrote them.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, SerializeError> {
    serde_saphyr::to_string_with_options(
        value,
        serde_saphyr::ser_options! { prefer_block_scalars: false },
    )
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::{json, Value};

    /// Values read without a type mean what they meant to serde_yaml (YAML 1.2).
    #[test]
    fn untyped_values_read_as_yaml_1_2() {
        let v: Value = super::from_str(
            "a: off\nb: no\nc: yes\nd: true\ne: 010\nf: 1_000\ng: 0x10\nh: 1.5\ni: .nan\nj: ~\nk: \"10\"\n",
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"a": "off", "b": "no", "c": "yes", "d": true, "e": "010", "f": "1_000",
                   "g": 16, "h": 1.5, "i": ".nan", "j": null, "k": "10"})
        );
    }

    #[test]
    fn repeated_map_keys_keep_the_last_value_and_repeated_fields_are_errors() {
        let v: std::collections::BTreeMap<String, u32> = super::from_str("a: 1\na: 2\n").unwrap();
        assert_eq!(v["a"], 2);
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct S {
            a: u32,
        }
        assert!(super::from_str::<S>("a: 1\na: 2\n").is_err());
    }

    #[test]
    fn errors_name_the_path_line_and_column() {
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct Job {
            count: u32,
        }
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct S {
            jobs: Vec<Job>,
        }
        let msg = super::from_str_with_path::<S>("jobs:\n- count: 1\n- count: lots\n").unwrap_err();
        assert!(msg.starts_with("jobs[1].count: "), "{msg}");
        assert!(msg.contains("line 3"), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }

    #[test]
    fn unknown_fields_are_named_in_serdes_words() {
        #[derive(Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct S {
            a: Option<u32>,
            b: Option<u32>,
        }
        let msg = super::from_str_with_path::<S>(
            "a: 1
c: 2
",
        )
        .unwrap_err();
        assert_eq!(
            msg,
            "c: unknown field `c`, expected `a` or `b` at line 2, column 1"
        );
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let text = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(super::from_str::<Value>(&text).is_err());
    }
}
