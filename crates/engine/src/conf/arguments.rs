//! A plugin's or action's `arguments`: kept as the file gave them until the plugin or action
//! that owns them reads them into its own struct, with serde (`Arguments::parse`). The
//! struct's field names are the keys, spelt as Volcano spells them
//! (`#[serde(rename = "binpack.weight")]`); its field types are the value types below,
//! which accept what Volcano's files write (a weight may be quoted: `"10"`) and name what
//! they expected. A value of the wrong type is an error naming its path
//! (`tiers[1].plugins[2].arguments.binpack.weight: expected a number, got "heavy"`); a key
//! the owner does not read is reported by `Arguments::unknown`, with the nearest key it
//! does read.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;

use serde::de::{self, DeserializeOwned, Deserializer, IgnoredAny, Visitor};
use serde::Deserialize;
use serde_json::Value;

use super::ArgError;

/// A plugin's or action's `arguments` map.
#[derive(Default)]
pub struct Arguments {
    /// Where the map sits in the file, e.g. `tiers[1].plugins[5].arguments`.
    pub path: String,
    values: BTreeMap<String, Value>,
    /// The keys its owner reads, as declared by `parse` and `declare_family`.
    read: Mutex<Read>,
}

#[derive(Clone, Debug, Default)]
struct Read {
    keys: Vec<&'static str>,
    /// Prefixes ending in '.': every key under one is read (`binpack.resources.`).
    families: Vec<&'static str>,
}

impl Clone for Arguments {
    fn clone(&self) -> Self {
        Arguments {
            path: self.path.clone(),
            values: self.values.clone(),
            read: Mutex::new(self.read().clone()),
        }
    }
}

/// Two argument maps are equal when they hold the same keys and values at the same path.
impl PartialEq for Arguments {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path && self.values == other.values
    }
}

impl fmt::Debug for Arguments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Arguments")
            .field("path", &self.path)
            .field("values", &self.values)
            .finish()
    }
}

/// A key the owner of an argument map does not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownArgument {
    /// Its path in the file: `tiers[0].plugins[1].arguments.binpack.wieght`.
    pub path: String,
    pub key: String,
    /// The key it was most likely meant to be, among those the owner reads.
    pub suggestion: Option<&'static str>,
}

impl Arguments {
    /// An empty map at `path`.
    pub fn new(path: impl Into<String>) -> Self {
        Arguments {
            path: path.into(),
            ..Default::default()
        }
    }

    /// The map as the configuration file gave it.
    pub(crate) fn from_values(path: String, values: BTreeMap<String, Value>) -> Self {
        Arguments {
            path,
            values,
            read: Mutex::default(),
        }
    }

    /// This map with `key` set to `value` (for arguments built in code).
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.values.insert(key.to_string(), value.into());
        self
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(String::as_str)
    }

    fn read(&self) -> std::sync::MutexGuard<'_, Read> {
        // Nothing panics while holding the lock; a poisoned one still holds a valid list.
        self.read
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn key_path(&self, key: &str) -> String {
        format!("{}.{key}", self.path)
    }

    /// The map read into `T`, a struct whose fields are the keys (every field optional or
    /// with a default: `#[serde(default)]`), and `T`'s fields declared as read. A value of
    /// the wrong type is an error naming its path; keys `T` does not have are left for
    /// `unknown`. `T` must not flatten (its keys could not be told apart from unknown ones).
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ArgError> {
        {
            let mut read = self.read();
            for field in fields_of::<T>() {
                if !read.keys.contains(field) {
                    read.keys.push(field);
                }
            }
        }
        let map: serde_json::Map<String, Value> = self
            .values
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        serde_path_to_error::deserialize(Value::Object(map)).map_err(|e| {
            let at = e.path().to_string();
            ArgError {
                key: if at.is_empty() || at == "." {
                    self.path.clone()
                } else {
                    self.key_path(&at)
                },
                message: e.into_inner().to_string(),
            }
        })
    }

    /// Declares every key under `prefix` (ending in '.') as read: a family the owner reads
    /// one by one with `get` (`binpack.resources.` for `binpack.resources.nvidia.com/gpu`).
    pub fn declare_family(&self, prefix: &'static str) {
        let mut read = self.read();
        if !read.families.contains(&prefix) {
            read.families.push(prefix);
        }
    }

    /// One key's value as a `T` (`None` when absent or null); declares nothing.
    pub fn get<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, ArgError> {
        match self.values.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => T::deserialize(v.clone()).map(Some).map_err(|e| ArgError {
                key: self.key_path(key),
                message: e.to_string(),
            }),
        }
    }

    /// The keys not declared as read (by `parse` or `declare_family`), each with the
    /// nearest declared key if one is near.
    pub fn unknown(&self) -> Vec<UnknownArgument> {
        let read = self.read();
        self.values
            .keys()
            .filter(|k| {
                !read.keys.contains(&k.as_str()) && !read.families.iter().any(|p| k.starts_with(p))
            })
            .map(|k| UnknownArgument {
                path: self.key_path(k),
                key: k.clone(),
                suggestion: super::volcano::closest(k, read.keys.iter().copied()),
            })
            .collect()
    }
}

/// For a plugin or action that takes no arguments: every key is unknown.
#[derive(Debug, Default, Deserialize)]
pub struct NoArguments {}

/// The field names of `T` (a struct deriving `Deserialize`), as serde hands them to a
/// deserializer: renamed, with aliases.
fn fields_of<T: DeserializeOwned>() -> &'static [&'static str] {
    struct Fields<'a>(&'a mut &'static [&'static str]);

    impl<'de> Deserializer<'de> for Fields<'_> {
        type Error = de::value::Error;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("fields read"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }

    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Fields(&mut fields));
    fields
}

/// One argument value as the file wrote it, for the value types' messages.
enum Scalar {
    Nothing,
    Bool(bool),
    /// The number and how it reads (`10`, `1.5`).
    Number(f64, String),
    Text(String),
    List(Vec<Scalar>),
    Map,
}

impl Scalar {
    /// How a message names it: `true`, `10`, `"heavy"`, `a list`.
    fn describe(&self) -> String {
        match self {
            Scalar::Nothing => "nothing".into(),
            Scalar::Bool(b) => b.to_string(),
            Scalar::Number(_, text) => text.clone(),
            Scalar::Text(s) => format!("{s:?}"),
            Scalar::List(_) => "a list".into(),
            Scalar::Map => "a map".into(),
        }
    }

    /// A number, or a string that reads as one (Volcano's files quote some: "10").
    fn number<E: de::Error>(self) -> Result<f64, E> {
        match self {
            Scalar::Number(n, _) => Ok(n),
            Scalar::Text(s) => s
                .trim()
                .parse::<f64>()
                .map_err(|_| E::custom(format!("expected a number, got {s:?}"))),
            other => Err(E::custom(format!(
                "expected a number, got {}",
                other.describe()
            ))),
        }
    }

    /// A string, or a number as it reads.
    fn text<E: de::Error>(self) -> Result<String, E> {
        match self {
            Scalar::Text(s) => Ok(s),
            Scalar::Number(_, text) => Ok(text),
            other => Err(E::custom(format!(
                "expected a string, got {}",
                other.describe()
            ))),
        }
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;

        impl<'de> Visitor<'de> for ScalarVisitor {
            type Value = Scalar;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an argument value")
            }
            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Nothing)
            }
            fn visit_none<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Nothing)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(b))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Scalar, E> {
                Ok(Scalar::Number(n as f64, n.to_string()))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Scalar, E> {
                Ok(Scalar::Number(n as f64, n.to_string()))
            }
            fn visit_f64<E>(self, n: f64) -> Result<Scalar, E> {
                // As a number reads in YAML: 1.0, not 1.
                let text = serde_json::Number::from_f64(n)
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| n.to_string());
                Ok(Scalar::Number(n, text))
            }
            fn visit_str<E>(self, s: &str) -> Result<Scalar, E> {
                Ok(Scalar::Text(s.to_string()))
            }
            fn visit_string<E>(self, s: String) -> Result<Scalar, E> {
                Ok(Scalar::Text(s))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Scalar::List(items))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Scalar, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Map)
            }
        }

        d.deserialize_any(ScalarVisitor)
    }
}

/// A number: `1.2`, `10`, or a string that reads as one (`"10"`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Number(pub f64);

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Scalar::deserialize(d)?.number().map(Number)
    }
}

/// A whole number >= 0 that fits 32 bits, written as a number or a string (`10`, `"10"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Weight(pub u32);

impl<'de> Deserialize<'de> for Weight {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Scalar::deserialize(d)?.number::<D::Error>()?;
        if v >= 0.0 && v.fract() == 0.0 && v <= f64::from(u32::MAX) {
            Ok(Weight(v as u32))
        } else {
            Err(de::Error::custom(format!(
                "expected a whole number >= 0, got {v}"
            )))
        }
    }
}

impl Weight {
    pub fn as_f64(self) -> f64 {
        f64::from(self.0)
    }
}

/// true or false (also as the strings "true" and "false").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flag(pub bool);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Scalar::deserialize(d)? {
            Scalar::Bool(b) => Ok(Flag(b)),
            Scalar::Text(s) if s == "true" || s == "false" => Ok(Flag(s == "true")),
            other => Err(de::Error::custom(format!(
                "expected true or false, got {}",
                other.describe()
            ))),
        }
    }
}

/// A string; a number is taken as it reads (`gpuResource: 1` is "1").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Text(pub String);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Scalar::deserialize(d)?.text().map(Text)
    }
}

/// A duration as humantime writes it (`2h`, `90m`, `1h 30m`), in milliseconds; a bare
/// number is refused (seconds or hours? the file must say).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HumanDuration(pub i64);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = match Scalar::deserialize(d)? {
            Scalar::Text(s) => s,
            other => {
                return Err(de::Error::custom(format!(
                    "expected a duration such as \"2h\", got {}",
                    other.describe()
                )))
            }
        };
        let ms = humantime::parse_duration(text.trim())
            .map_err(|e| {
                de::Error::custom(format!(
                    "expected a duration such as \"2h\", got {text:?} ({e})"
                ))
            })?
            .as_millis();
        Ok(HumanDuration(i64::try_from(ms).unwrap_or(i64::MAX)))
    }
}

/// A list of strings: a YAML list (`[a, b]`), or one string of comma-separated items
/// (`"a, b"`, as Volcano writes lists), each trimmed, empty ones dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct List(pub Vec<String>);

impl<'de> Deserialize<'de> for List {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Scalar::deserialize(d)? {
            Scalar::Nothing => Ok(List(Vec::new())),
            Scalar::List(items) => items
                .into_iter()
                .map(|item| match item {
                    Scalar::Text(s) => Ok(s.trim().to_string()),
                    other => Err(de::Error::custom(format!(
                        "expected a list of strings, got {} in it",
                        other.describe()
                    ))),
                })
                .collect::<Result<_, _>>()
                .map(List),
            other => Ok(List(
                other
                    .text::<D::Error>()?
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default)]
    struct Args {
        #[serde(rename = "x.weight")]
        weight: Option<Weight>,
        #[serde(rename = "x.factor")]
        factor: Option<Number>,
        #[serde(rename = "x.on")]
        on: Option<Flag>,
        #[serde(rename = "x.name")]
        name: Option<Text>,
        #[serde(rename = "x.list")]
        list: Option<List>,
        #[serde(rename = "x.span")]
        span: Option<HumanDuration>,
    }

    fn args(yaml: &str) -> Arguments {
        let values: BTreeMap<String, Value> = crate::yaml::from_str(yaml).unwrap();
        Arguments::from_values("tiers[0].plugins[1].arguments".into(), values)
    }

    fn error(yaml: &str) -> String {
        args(yaml).parse::<Args>().unwrap_err().to_string()
    }

    #[test]
    fn values_read_as_volcano_writes_them() {
        let a = args(
            "x.weight: \"10\"\nx.factor: 1.5\nx.on: \"false\"\nx.name: 7\nx.list: \"a, b,, \"\n",
        )
        .parse::<Args>()
        .unwrap();
        assert_eq!(
            a,
            Args {
                weight: Some(Weight(10)),
                factor: Some(Number(1.5)),
                on: Some(Flag(false)),
                name: Some(Text("7".into())),
                list: Some(List(vec!["a".into(), "b".into()])),
                span: None,
            }
        );
        let a = args("x.span: 1h 30m\n").parse::<Args>().unwrap();
        assert_eq!(a.span, Some(HumanDuration(5_400_000)));
        let a = args("x.weight: ~\nx.list: [\" a \", b]\n")
            .parse::<Args>()
            .unwrap();
        assert_eq!(a.weight, None);
        assert_eq!(a.list, Some(List(vec!["a".into(), "b".into()])));
    }

    #[test]
    fn wrong_types_name_the_path_and_what_was_expected() {
        assert_eq!(
            error("x.weight: heavy\n"),
            "tiers[0].plugins[1].arguments.x.weight: expected a number, got \"heavy\""
        );
        assert_eq!(
            error("x.weight: 1.5\n"),
            "tiers[0].plugins[1].arguments.x.weight: expected a whole number >= 0, got 1.5"
        );
        assert_eq!(
            error("x.weight: -1\n"),
            "tiers[0].plugins[1].arguments.x.weight: expected a whole number >= 0, got -1"
        );
        assert_eq!(
            error("x.factor: [1]\n"),
            "tiers[0].plugins[1].arguments.x.factor: expected a number, got a list"
        );
        assert_eq!(
            error("x.on: maybe\n"),
            "tiers[0].plugins[1].arguments.x.on: expected true or false, got \"maybe\""
        );
        assert_eq!(
            error("x.name: {a: 1}\n"),
            "tiers[0].plugins[1].arguments.x.name: expected a string, got a map"
        );
        assert_eq!(
            error("x.span: 2\n"),
            "tiers[0].plugins[1].arguments.x.span: expected a duration such as \"2h\", got 2"
        );
        assert!(error("x.span: soon\n")
            .starts_with("tiers[0].plugins[1].arguments.x.span: expected a duration such as \"2h\", got \"soon\" ("));
        assert_eq!(
            error("x.list: [a, 1]\n"),
            "tiers[0].plugins[1].arguments.x.list: expected a list of strings, got 1 in it"
        );
    }

    #[test]
    fn unknown_keys_are_found_with_the_nearest_known_one() {
        let a = args("x.wieght: 1\nx.factor: 2\nzzz: 3\nfam.a: 1\n");
        a.parse::<Args>().unwrap();
        a.declare_family("fam.");
        assert_eq!(
            a.unknown(),
            [
                UnknownArgument {
                    path: "tiers[0].plugins[1].arguments.x.wieght".into(),
                    key: "x.wieght".into(),
                    suggestion: Some("x.weight"),
                },
                UnknownArgument {
                    path: "tiers[0].plugins[1].arguments.zzz".into(),
                    key: "zzz".into(),
                    suggestion: None,
                },
            ]
        );
        // Nothing declared: every key is unknown.
        let a = args("x.weight: 1\n");
        a.parse::<NoArguments>().unwrap();
        assert_eq!(a.unknown().len(), 1);
    }

    #[test]
    fn fields_of_a_struct_are_its_keys() {
        assert_eq!(
            fields_of::<Args>(),
            ["x.weight", "x.factor", "x.on", "x.name", "x.list", "x.span"]
        );
        assert!(fields_of::<NoArguments>().is_empty());
    }

    #[test]
    fn get_reads_one_key() {
        let a = args("fam.gpu: 3\nfam.bad: heavy\n");
        assert_eq!(a.get::<Weight>("fam.gpu").unwrap(), Some(Weight(3)));
        assert_eq!(a.get::<Weight>("fam.none").unwrap(), None);
        assert_eq!(
            a.get::<Weight>("fam.bad").unwrap_err().to_string(),
            "tiers[0].plugins[1].arguments.fam.bad: expected a number, got \"heavy\""
        );
    }
}
