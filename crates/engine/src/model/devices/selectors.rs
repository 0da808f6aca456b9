//! DeviceClasses and the CEL selectors of classes and requests, evaluated with the `cel`
//! crate over the shape kube-scheduler gives them: `device.driver`,
//! `device.attributes["domain"].name` and `device.capacity["domain"].name`. Quantities
//! are integers in milli-units, with `quantity("40Gi")` and the comparison methods of
//! Kubernetes' quantity library (`compareTo`, `isGreaterThan`, `isLessThan`, `asInteger`)
//! as a small adapter.
//!
//! Each expression is compiled once per catalog (a catalog lives until the classes
//! change), and which devices of a node's inventory match one class-and-selectors choice is
//! worked out once per inventory, not per pod or per placement.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use cel::extractors::This;
use cel::{Context, Program, Value};

use super::{AttrValue, Device, DeviceChoice, NodeDevices};
use crate::model::resource::parse_milli;

/// Where a selector came from and why it failed, in kube-scheduler's words once the
/// claim's name is known (`SelectorError::describe`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelectorError {
    /// The request names a class that does not exist.
    NoClass { class: String },
    Compile {
        class: Option<String>,
        index: usize,
        error: String,
    },
    Runtime {
        class: Option<String>,
        index: usize,
        error: String,
    },
}

impl SelectorError {
    /// The message for a pod of `claim` asking through `request`.
    pub fn describe(&self, claim: &str, request: &str) -> String {
        let origin = |class: &Option<String>| match class {
            Some(c) => format!("class {c}"),
            None => format!("claim {claim}"),
        };
        match self {
            Self::NoClass { class } => {
                format!("request {request}: device class {class} does not exist")
            }
            Self::Compile {
                class,
                index,
                error,
            } => format!(
                "{}: selector #{index}: CEL compile error: {error}",
                origin(class)
            ),
            Self::Runtime {
                class,
                index,
                error,
            } => format!(
                "{}: selector #{index}: CEL runtime error: {error}",
                origin(class)
            ),
        }
    }

    /// Whether no node can help (the expression or the class is wrong), rather than this
    /// node's devices making a valid expression fail.
    pub fn is_static(&self) -> bool {
        !matches!(self, Self::Runtime { .. })
    }
}

type Matches = Result<Arc<[u32]>, SelectorError>;

/// The most inventories and choice-inventory answers a catalog remembers before it starts
/// over (a node's inventory is new whenever its slices change).
const MEMO_LIMIT: usize = 200_000;

/// The DeviceClasses by name, with compiled selectors and what they matched so far.
pub struct DeviceCatalog {
    classes: BTreeMap<String, Vec<String>>,
    memo: Mutex<Memo>,
}

#[derive(Default)]
struct Memo {
    programs: HashMap<String, Result<Arc<Program>, String>>,
    matches: HashMap<(DeviceChoiceKey, u64), Matches>,
    /// The functions selectors may call, registered once per catalog.
    root: Option<Context<'static, 'static>>,
    /// Each inventory's devices as CEL values, built once for every choice.
    values: HashMap<u64, Arc<[Value]>>,
}

/// A choice as far as matching goes (its class and its selectors).
#[derive(Clone, PartialEq, Eq, Hash)]
struct DeviceChoiceKey {
    class: String,
    selectors: Vec<String>,
}

impl Default for DeviceCatalog {
    fn default() -> Self {
        Self::new(BTreeMap::new())
    }
}

impl std::fmt::Debug for DeviceCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceCatalog")
            .field("classes", &self.classes)
            .finish()
    }
}

impl DeviceCatalog {
    /// A catalog of DeviceClasses: name → its CEL selectors.
    pub fn new(classes: BTreeMap<String, Vec<String>>) -> Self {
        DeviceCatalog {
            classes,
            memo: Mutex::default(),
        }
    }

    pub fn classes(&self) -> &BTreeMap<String, Vec<String>> {
        &self.classes
    }

    /// The devices of `inv` that `choice`'s class and selectors select, by index, in the
    /// inventory's order; or why that cannot be told.
    pub fn matching(&self, choice: &DeviceChoice, inv: &NodeDevices) -> Matches {
        let key = DeviceChoiceKey {
            class: choice.device_class_name.clone(),
            selectors: choice.selectors.clone(),
        };
        let mut memo = self.memo.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = memo.matches.get(&(key.clone(), inv.id)) {
            return m.clone();
        }
        if memo.matches.len() >= MEMO_LIMIT || memo.values.len() >= MEMO_LIMIT {
            // Inventories replaced by newer slices leave entries no one asks for again.
            memo.matches.clear();
            memo.values.clear();
        }
        let found = self.evaluate(&mut memo, &key, inv);
        memo.matches.insert((key, inv.id), found.clone());
        found
    }

    fn evaluate(&self, memo: &mut Memo, key: &DeviceChoiceKey, inv: &NodeDevices) -> Matches {
        let Some(class_selectors) = self.classes.get(&key.class) else {
            return Err(SelectorError::NoClass {
                class: key.class.clone(),
            });
        };
        let mut programs = Vec::new();
        let origins = class_selectors
            .iter()
            .enumerate()
            .map(|(i, e)| (Some(key.class.clone()), i, e))
            .chain(key.selectors.iter().enumerate().map(|(i, e)| (None, i, e)));
        for (class, index, expr) in origins {
            let program = memo
                .programs
                .entry(expr.clone())
                .or_insert_with(|| compile(expr))
                .clone();
            match program {
                Ok(p) => programs.push((class, index, p)),
                Err(error) => {
                    return Err(SelectorError::Compile {
                        class,
                        index,
                        error,
                    })
                }
            }
        }
        let values = memo
            .values
            .entry(inv.id)
            .or_insert_with(|| inv.devices.iter().map(device_value).collect())
            .clone();
        let root = memo.root.get_or_insert_with(root_context);
        let mut found = Vec::new();
        'devices: for (i, value) in values.iter().enumerate() {
            let mut scope = root.new_inner_scope();
            scope.add_variable_from_value("device", value.clone());
            for (class, index, program) in &programs {
                match program.execute(&scope) {
                    Ok(Value::Bool(true)) => {}
                    Ok(Value::Bool(false)) => continue 'devices,
                    Ok(other) => {
                        return Err(SelectorError::Runtime {
                            class: class.clone(),
                            index: *index,
                            error: format!("expected a bool, got {other:?}"),
                        })
                    }
                    Err(e) => {
                        return Err(SelectorError::Runtime {
                            class: class.clone(),
                            index: *index,
                            error: e.to_string(),
                        })
                    }
                }
            }
            found.push(i as u32);
        }
        Ok(found.into())
    }
}

fn compile(expr: &str) -> Result<Arc<Program>, String> {
    Program::compile(expr)
        .map(Arc::new)
        .map_err(|e| e.to_string().lines().next().unwrap_or_default().to_string())
}

/// The functions selectors may call beyond standard CEL: Kubernetes' quantity library over
/// milli-unit integers.
fn root_context() -> Context<'static, 'static> {
    let mut ctx = Context::default();
    fn quantity(text: Arc<String>) -> Result<i64, cel::ExecutionError> {
        parse_milli(&text)
            .ok()
            .and_then(|m| i64::try_from(m).ok())
            .ok_or_else(|| cel::ExecutionError::function_error("quantity", "invalid quantity"))
    }
    let added = [
        ctx.add_function("quantity", quantity),
        ctx.add_function("compareTo", |This(a): This<i64>, b: i64| a.cmp(&b) as i64),
        ctx.add_function("isGreaterThan", |This(a): This<i64>, b: i64| a > b),
        ctx.add_function("isLessThan", |This(a): This<i64>, b: i64| a < b),
        ctx.add_function("asInteger", |This(a): This<i64>| a / 1000),
    ];
    // The names are not CEL built-ins: a conflict would be a bug of this list.
    debug_assert!(added.iter().all(Result::is_ok), "{added:?}");
    ctx
}

/// `domain/name` split at its last `/`; an unqualified name belongs to the driver.
fn split_qualified<'a>(name: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    match name.rsplit_once('/') {
        Some((domain, id)) => (domain, id),
        None => (driver, name),
    }
}

fn device_value(d: &Device) -> Value {
    let mut attributes: HashMap<String, HashMap<String, Value>> = HashMap::new();
    for (name, v) in &d.attributes {
        let (domain, id) = split_qualified(name, &d.driver);
        let value = match v {
            AttrValue::Int(i) => Value::Int(*i),
            AttrValue::Bool(b) => Value::Bool(*b),
            AttrValue::String(s) | AttrValue::Version(s) => Value::String(Arc::new(s.clone())),
        };
        attributes
            .entry(domain.to_string())
            .or_default()
            .insert(id.to_string(), value);
    }
    let mut capacity: HashMap<String, HashMap<String, Value>> = HashMap::new();
    for (name, milli) in &d.capacity {
        let (domain, id) = split_qualified(name, &d.driver);
        capacity
            .entry(domain.to_string())
            .or_default()
            .insert(id.to_string(), Value::Int(*milli));
    }
    let nested = |m: HashMap<String, HashMap<String, Value>>| -> Value {
        m.into_iter()
            .map(|(k, v)| (k, Value::from(v)))
            .collect::<HashMap<String, Value>>()
            .into()
    };
    let mut device: HashMap<String, Value> = HashMap::new();
    device.insert(
        "driver".into(),
        Value::String(Arc::new(d.driver.to_string())),
    );
    device.insert("attributes".into(), nested(attributes));
    device.insert("capacity".into(), nested(capacity));
    device.into()
}
