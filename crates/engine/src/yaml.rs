//! YAML in and out, with serde-saphyr (pure Rust, no unsafe code, fuzzed not to panic,
//! errors with line and column), set up to read values as this program always has (YAML
//! 1.2's core schema, as serde_yaml read it) so that no file changes meaning:
//!
//! - a value read without a type (a plugin's arguments, a switch, a ConfigMap) is a boolean
//!   only when spelt true or false (`gpu-affinity.gpuModel: off` stays the string "off"),
//!   and `010` or `1_000` stay strings;
//! - a null (`key:` with nothing, `~`) where a list, a map or a struct is expected is an
//!   empty one (`events:` with every event commented out), and where a string is
//!   expected, its text (`name:` is "");
//! - a key repeated in a map keeps its last value (a field repeated in a struct is an
//!   error);
//! - `.nan` and `.inf` read without a type are the strings ".nan" and ".inf" (a number
//!   field still reads them as numbers);
//! - nesting is limited as serde_yaml limited it (128 levels); the other budgets (events,
//!   nodes, aliases) stop pathological inputs long before they exhaust memory.
//!
//! Two leniencies of libyaml (the reader of Volcano, kube-scheduler and serde_yaml) are
//! kept, which YAML 1.2 does not allow (see `repair`): a quoted value's continuation lines
//! may start at the column of its key (`actions: "enqueue,⏎backfill"`), and a comment may
//! follow a token without a space (`{cpu: 1}# note`).
//!
//! Errors carry the line and column, without a source snippet: they go into one-line
//! messages that already name the file.

use std::borrow::Cow;

use serde::de::DeserializeOwned;
use serde::Serialize;

mod empty;
use empty::NullAsEmpty;

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
        null_as_string: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::PassThrough,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::AsString,
        with_snippet: false,
    }
}

/// One YAML document as a `T`.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    relaxed(text, |text| {
        serde_saphyr::with_deserializer_from_str_with_options(text, options(), |de| {
            T::deserialize(NullAsEmpty(de))
        })
    })
}

/// Every document of a YAML stream (`---`-separated) as a `T`. (A null in place of a list
/// or a map is an error here: this reads Kubernetes objects, which have none.)
pub fn from_str_multiple<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, Error> {
    relaxed(text, |text| {
        serde_saphyr::from_multiple_with_options(text, options())
    })
}

/// One YAML document as a `T`; an error names the path of the value that failed
/// (`jobs[0].submitAt: …`, nothing for the document itself) before the message, which
/// carries the line and column.
pub fn from_str_with_path<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    let path = std::cell::RefCell::new(String::new());
    relaxed(text, |text| {
        serde_saphyr::with_deserializer_from_str_with_options(text, options(), |de| {
            serde_path_to_error::deserialize::<_, T>(NullAsEmpty(de)).map_err(|e| {
                *path.borrow_mut() = e.path().to_string();
                e.into_inner()
            })
        })
    })
    .map_err(|e| {
        let path = path.borrow().clone();
        let e = message(&e);
        if path.is_empty() || path == "." {
            e
        } else {
            format!("{path}: {e}")
        }
    })
}

/// How many spaces `relaxed` inserts at most: a file needs a few.
const MAX_REPAIRS: usize = 1_000;

/// `parse(text)`, and when it fails only where libyaml (Volcano's reader, and serde_yaml's)
/// is lenient, `parse` again with a space inserted there (see `repair`): libyaml's reading
/// of the text, now also YAML 1.2's. Gives up, with the first error, after `MAX_REPAIRS`
/// tries (each reads the whole text again).
fn relaxed<T>(text: &str, parse: impl Fn(&str) -> Result<T, Error>) -> Result<T, Error> {
    let first = match parse(text) {
        Ok(value) => return Ok(value),
        Err(e) => e,
    };
    let mut fixed = Cow::Borrowed(text);
    let mut at = repair(&first, &fixed);
    let mut tries = 0;
    while let Some(i) = at {
        tries += 1;
        if tries > MAX_REPAIRS {
            break;
        }
        fixed.to_mut().insert(i, ' ');
        match parse(&fixed) {
            Ok(value) => return Ok(value),
            Err(e) => match repair(&e, &fixed) {
                Some(next) => at = Some(next),
                // Repaired, the text has another mistake: that one is the answer.
                None => return Err(e),
            },
        }
    }
    Err(first)
}

/// Where a space makes YAML 1.2 read `text` as libyaml reads it, when `e` is one of:
/// - a quoted value's continuation line not indented past its key
///   (`actions: "enqueue,⏎backfill"`): indented by a space, the value is the same (a quoted
///   value's line breaks fold, and its continuation lines' leading blanks are dropped);
/// - a comment right after a token (`{cpu: 1}# note`), which libyaml takes as a comment.
fn repair(e: &Error, text: &str) -> Option<usize> {
    use serde_saphyr::granit_parser::ErrorKind;
    let Error::ExternalMessage { source, .. } = e.without_snippet() else {
        return None;
    };
    let serde_saphyr::ExternalMessageSource::Parser(scan) = &**source else {
        return None;
    };
    match scan.kind() {
        ErrorKind::InvalidQuotedScalarIndent => line_start(text, scan.marker().line()),
        ErrorKind::CommentNotSeparated => scan
            .marker()
            .byte_offset()
            .filter(|&i| text.as_bytes().get(i) == Some(&b'#')),
        _ => None,
    }
}

/// The byte offset where line `n` (1-based) of `text` starts; a line ends at "\n", "\r\n"
/// or a lone "\r", as YAML counts them.
fn line_start(text: &str, n: usize) -> Option<usize> {
    let mut line = 1;
    let mut bytes = text.bytes().enumerate().peekable();
    while line < n {
        let (i, b) = bytes.next()?;
        let lone_cr = b == b'\r' && bytes.peek().map(|(_, b)| *b) != Some(b'\n');
        if b == b'\n' || lone_cr {
            line += 1;
            if line == n {
                return Some(i + 1);
            }
        }
    }
    Some(0)
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
    fn nulls_are_empty_lists_maps_and_structs_and_empty_strings() {
        #[derive(Deserialize, Debug, Default, PartialEq)]
        #[serde(default)]
        struct Inner {
            a: Vec<u32>,
            b: std::collections::BTreeMap<String, String>,
            c: String,
            d: Option<Vec<u32>>,
        }
        #[derive(Deserialize, Debug, PartialEq)]
        struct S {
            items: Vec<Inner>,
            one: Inner,
            tuple: (u32, String),
        }
        let s: S = super::from_str(
            "items:\n- a:\n  b: ~\n  c:\n  d:\n- a: [1]\n  b: {x:}\n  c: ~\none:\ntuple: [1, ~]\n",
        )
        .unwrap();
        assert_eq!(
            s,
            S {
                items: vec![
                    Inner::default(),
                    Inner {
                        a: vec![1],
                        b: [("x".to_string(), String::new())].into(),
                        c: "~".into(),
                        d: None,
                    },
                ],
                one: Inner::default(),
                tuple: (1, "~".into()),
            }
        );
        // A value that is there but of the wrong kind is still an error.
        assert!(super::from_str::<Inner>("a: 5\n").is_err());
        let with_path = super::from_str_with_path::<Inner>("a:\nb: [1]\n").unwrap_err();
        assert!(with_path.starts_with("b: "), "{with_path}");
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

    /// libyaml (Volcano's reader, and serde_yaml's) takes a quoted value whose continuation
    /// lines start at its key's column; so does this, with the same value.
    #[test]
    fn what_libyaml_reads_reads_alike() {
        let v: Value = super::from_str(
            "actions: \"enqueue, allocate,\n\n backfill,\nreclaim\"\nb:\n  c: 'x\n  y'\n",
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"actions": "enqueue, allocate,\nbackfill, reclaim", "b": {"c": "x y"}})
        );
        let v: Value = super::from_str("a: \"1\r2\"\r\nb: \"3\r\n4\"\r\n").unwrap();
        assert_eq!(v, json!({"a": "1 2", "b": "3 4"}));
        let docs: Vec<Value> = super::from_str_multiple("a: \"1\n2\"\n---\nb: \"3\n4\"\n").unwrap();
        assert_eq!(docs, [json!({"a": "1 2"}), json!({"b": "3 4"})]);
        let v: Value = super::from_str("a: {b: 1}# note\nc: [1]#\n").unwrap();
        assert_eq!(v, json!({"a": {"b": 1}, "c": [1]}));
        // Another mistake after it is still reported, at its line.
        let msg = super::from_str_with_path::<Value>("a: \"1\n2\"\nb: [\n").unwrap_err();
        assert!(msg.contains("line 3") || msg.contains("line 4"), "{msg}");
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let text = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(super::from_str::<Value>(&text).is_err());
    }
}
