//! Volcano's dashboards work on rust-batch, checked against the Volcano source itself:
//!
//! - every `volcano_*` metric a Grafana dashboard shipped in Volcano v1.15.1's source
//!   queries (the Helm chart's, `installer/volcano-monitoring.yaml`'s, the benchmark's) is
//!   registered by rust-batch, with every label the queries select or group by — or it is
//!   another Volcano component's (`OTHER_COMPONENTS`, each checked to be defined outside
//!   the scheduler);
//! - every `volcano_*` metric rust-batch registers is one Volcano defines, with Volcano's
//!   type, labels (in order) and histogram buckets;
//! - `docs/src/volcano-metrics.md` names every metric Volcano's scheduler defines.
//!
//! Volcano's source is the module `volcano.sh/volcano@v1.15.1`, from `go mod download`
//! (the Go module proxy serves that version), or the directory `VOLCANO_SOURCE` names. No
//! cluster; neither way found fails the test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use rust_batch::kube::metrics::{exponential_buckets_range, MetricInfo, VolcanoMetrics};
use serde_json::Value;

const VOLCANO_MODULE: &str = "volcano.sh/volcano@v1.15.1";

/// Metrics the dashboards query that Volcano's scheduler does not export: the component
/// that does, and where Volcano defines them (checked).
const OTHER_COMPONENTS: &[(&str, &str, &str)] = &[
    (
        "volcano_controller_job_to_pod_creation_latency_milliseconds",
        "vc-controller-manager (kept when rust-batch replaces vc-scheduler: it serves this)",
        "pkg/controllers/metrics",
    ),
    (
        "volcano_worker_scheduling_cycle_duration_milliseconds",
        "vc-agent-scheduler, Volcano's separate per-pod fast-path scheduler",
        "pkg/agentscheduler/metrics",
    ),
    (
        "volcano_update_snapshot_duration_milliseconds",
        "vc-agent-scheduler, Volcano's separate per-pod fast-path scheduler",
        "pkg/agentscheduler/metrics",
    ),
];

/// Where Volcano defines the metrics rust-batch takes its names from: the scheduler's,
/// and the controllers' per-queue PodGroup counts (which rust-batch also serves).
const DEFINING_DIRS: &[&str] = &["pkg/scheduler/metrics", "pkg/controllers/metrics"];

/// Labels Prometheus adds when it scrapes (not the exporter's): a query may select on them.
const TARGET_LABELS: &[&str] = &[
    "job",
    "instance",
    "namespace",
    "pod",
    "service",
    "endpoint",
    "container",
    "kubernetes_name",
    "kubernetes_namespace",
    "kubernetes_pod_name",
];

/// The Volcano module's directory, found once.
fn volcano_source() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = match std::env::var_os("VOLCANO_SOURCE") {
            Some(dir) => PathBuf::from(dir),
            None => go_mod_download(),
        };
        assert!(
            dir.join("pkg/scheduler/metrics").is_dir(),
            "{} is not Volcano's source (no pkg/scheduler/metrics)",
            dir.display()
        );
        dir
    })
}

/// `go mod download -json volcano.sh/volcano@v1.15.1`: the module's directory in the Go
/// module cache (downloaded from the proxy when it is not there yet).
fn go_mod_download() -> PathBuf {
    let out = Command::new("go")
        .args(["mod", "download", "-json", VOLCANO_MODULE])
        // Outside any Go module, so no go.mod around decides anything (nor a -mod flag).
        .current_dir(std::env::temp_dir())
        .env("GOFLAGS", "-mod=mod")
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run `go mod download {VOLCANO_MODULE}` ({e}): install Go, or set VOLCANO_SOURCE to Volcano v1.15.1's source")
        });
    let info: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "`go mod download -json {VOLCANO_MODULE}` printed no JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    match info["Dir"].as_str() {
        Some(dir) if out.status.success() => PathBuf::from(dir),
        _ => panic!(
            "`go mod download -json {VOLCANO_MODULE}` failed: {} {}",
            info["Error"].as_str().unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                todo.push(path);
            } else {
                all.push(path);
            }
        }
    }
    all.sort();
    all
}

/// One Grafana dashboard: where it is, its title, and its queries.
struct Dashboard {
    source: String,
    title: String,
    queries: Vec<String>,
}

/// Every Grafana dashboard in Volcano's source: JSON files, and JSON kept in YAML (the
/// ConfigMaps of the Helm chart and of the installer's manifests hold one per key
/// `*.json: |-`; the chart's is a template, so it is read by lines, not as YAML).
fn dashboards(root: &Path) -> Vec<Dashboard> {
    let mut found = Vec::new();
    for path in files(root) {
        let name = path.to_string_lossy().to_string();
        let relative = name
            .strip_prefix(&*root.to_string_lossy())
            .unwrap_or(&name)
            .trim_start_matches('/')
            .to_string();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) if t.contains("\"panels\"") => t,
            _ => continue,
        };
        if name.ends_with(".json") {
            let json: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{relative}: not JSON: {e}"));
            found.extend(dashboard(&relative, &json));
        } else if name.ends_with(".yaml") || name.ends_with(".yml") {
            for (key, body) in json_blocks(&text) {
                let json: Value = serde_json::from_str(&body)
                    .unwrap_or_else(|e| panic!("{relative} {key}: not JSON: {e}"));
                found.extend(dashboard(&format!("{relative} {key}"), &json));
            }
        }
    }
    found
}

/// The JSON documents a YAML text keeps as block scalars under keys ending in `.json`.
fn json_blocks(text: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim();
        let key = trimmed
            .strip_suffix("|-")
            .or_else(|| trimmed.strip_suffix('|'))
            .map(str::trim_end)
            .and_then(|k| k.strip_suffix(':'))
            .filter(|k| k.ends_with(".json") && !k.contains(' '));
        i += 1;
        let Some(key) = key else { continue };
        let mut body = Vec::new();
        while i < lines.len() {
            let l = lines[i];
            let more = l.trim().is_empty() || l.len() - l.trim_start().len() > indent;
            if !more {
                break;
            }
            body.push(l);
            i += 1;
        }
        blocks.push((key.to_string(), body.join("\n")));
    }
    blocks
}

/// `json` as a dashboard (bare, or wrapped in `{"dashboard": …}`), if it is one.
fn dashboard(source: &str, json: &Value) -> Option<Dashboard> {
    let d = if json.get("panels").is_some() {
        json
    } else {
        json.get("dashboard")
            .filter(|d| d.get("panels").is_some())?
    };
    let mut queries = Vec::new();
    collect_queries(d, false, &mut queries);
    Some(Dashboard {
        source: source.to_string(),
        title: d["title"].as_str().unwrap_or("(untitled)").to_string(),
        queries,
    })
}

/// Every panel target's `expr`, and every templating variable's query.
fn collect_queries(v: &Value, in_templating: bool, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr", Value::String(q)) => out.push(q.clone()),
                    ("query" | "definition", Value::String(q)) if in_templating => {
                        out.push(q.clone())
                    }
                    _ => collect_queries(v, in_templating || k == "templating", out),
                }
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|v| collect_queries(v, in_templating, out)),
        _ => {}
    }
}

/// A metric a PromQL expression selects, with the labels its matchers name.
#[derive(Debug, PartialEq)]
struct Selected {
    metric: String,
    matcher_labels: Vec<String>,
}

/// What a PromQL expression reads: the metrics it selects and the labels it groups or
/// matches by (`by`, `without`, `on`, `ignoring`, `group_left`, `group_right`).
#[derive(Debug, Default, PartialEq)]
struct Query {
    selected: Vec<Selected>,
    grouping_labels: Vec<String>,
}

const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "bool", "offset", "inf", "nan", "atan2",
];

/// Reads a PromQL expression: identifiers that are not function calls, keywords or
/// inside strings, label matchers (`{…}`), ranges (`[…]`) or grouping lists are metrics.
fn parse_promql(expr: &str) -> Query {
    let chars: Vec<char> = expr.chars().collect();
    let mut q = Query::default();
    let mut i = 0;
    let ident_start = |c: char| c.is_ascii_alphabetic() || c == '_' || c == ':';
    let ident_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let skip_ws = |mut j: usize| {
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        j
    };
    // The index just past the string starting at `j`.
    let skip_string = |j: usize| {
        let quote = chars[j];
        let mut k = j + 1;
        while k < chars.len() && chars[k] != quote {
            k += if chars[k] == '\\' { 2 } else { 1 };
        }
        k + 1
    };
    // The index of the bracket closing the one at `j`, passing over strings.
    let closing = |j: usize, open: char, close: char| {
        let mut depth = 0;
        let mut k = j;
        while k < chars.len() {
            let c = chars[k];
            if c == '"' || c == '\'' || c == '`' {
                k = skip_string(k);
                continue;
            }
            if c == open {
                depth += 1;
            } else if c == close {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            k += 1;
        }
        chars.len()
    };
    // The identifiers of a list, e.g. the labels between the parentheses of `by (…)`.
    let identifiers = |text: &[char]| -> Vec<String> {
        let s: String = text.iter().collect();
        s.split(|c: char| !ident_char(c))
            .filter(|w| !w.is_empty())
            .map(String::from)
            .collect()
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(i);
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '[' {
            i = closing(i, '[', ']') + 1;
        } else if c == '{' {
            // A matcher without a metric name before it (`{__name__=…}`) selects nothing
            // this test can name.
            i = closing(i, '{', '}') + 1;
        } else if c.is_ascii_digit() || c == '.' {
            // A number or a duration (`5m`, `1e3`).
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if ident_start(c) {
            let start = i;
            while i < chars.len() && ident_char(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = skip_ws(i);
            let at = chars.get(next).copied();
            if GROUPING.contains(&word.as_str()) {
                if at == Some('(') {
                    let end = closing(next, '(', ')');
                    q.grouping_labels
                        .extend(identifiers(&chars[next + 1..end.min(chars.len())]));
                    i = end + 1;
                }
            } else if at == Some('(') || KEYWORDS.contains(&word.as_str()) {
                // A function or aggregation: its arguments are read as they come.
            } else {
                let mut matcher_labels = Vec::new();
                if at == Some('{') {
                    let end = closing(next, '{', '}');
                    let inner: String = chars[next + 1..end.min(chars.len())].iter().collect();
                    matcher_labels = matcher_names(&inner);
                    i = end + 1;
                }
                q.selected.push(Selected {
                    metric: word,
                    matcher_labels,
                });
            }
        } else {
            i += 1;
        }
    }
    q
}

/// The label names of a matcher list (`a="x", b!~"y"`).
fn matcher_names(inner: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_string = None;
    let mut start = true;
    let mut current = String::new();
    for c in inner.chars() {
        match in_string {
            Some(q) if c == q => in_string = None,
            Some(_) => {}
            None if c == '"' || c == '\'' || c == '`' => in_string = Some(c),
            None if c == ',' => {
                start = true;
                current.clear();
            }
            None if start && (c.is_ascii_alphanumeric() || c == '_') => current.push(c),
            None if start && !current.is_empty() => {
                names.push(std::mem::take(&mut current));
                start = false;
            }
            None => {}
        }
    }
    names
}

fn catalogue() -> BTreeMap<String, MetricInfo> {
    VolcanoMetrics::catalogue()
        .expect("rust-batch's Volcano metrics build")
        .into_iter()
        .map(|m| (m.name.clone(), m))
        .collect()
}

/// The registered metric a queried series name belongs to: the name itself, or a
/// histogram's `_bucket`, `_sum`, `_count` series (a summary's `_sum`, `_count`).
fn resolve<'a>(
    series: &str,
    registered: &'a BTreeMap<String, MetricInfo>,
) -> Option<&'a MetricInfo> {
    if let Some(m) = registered.get(series) {
        return Some(m);
    }
    let suffixed = |suffix: &str, kinds: &[&str]| {
        let base = series.strip_suffix(suffix)?;
        registered.get(base).filter(|m| kinds.contains(&m.kind))
    };
    suffixed("_bucket", &["histogram"])
        .or_else(|| suffixed("_sum", &["histogram", "summary"]))
        .or_else(|| suffixed("_count", &["histogram", "summary"]))
}

#[test]
fn every_metric_volcanos_dashboards_query_is_registered() {
    let root = volcano_source();
    let boards = dashboards(root);
    let registered = catalogue();
    let other: BTreeMap<&str, (&str, &str)> = OTHER_COMPONENTS
        .iter()
        .map(|(name, who, dir)| (*name, (*who, *dir)))
        .collect();
    // Fewer would mean the layout changed and this test stopped reading what ships.
    assert!(
        boards.len() >= 11,
        "expected the Helm chart's, the installer's and the benchmark's dashboards (11), found {}: {:?}",
        boards.len(),
        boards.iter().map(|d| &d.source).collect::<Vec<_>>()
    );
    let mut problems = Vec::new();
    let mut queried: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for board in &boards {
        for expr in &board.queries {
            let q = parse_promql(expr);
            let mut metrics = Vec::new();
            let mut all_volcano = !q.selected.is_empty();
            for s in &q.selected {
                if !s.metric.starts_with("volcano_") {
                    all_volcano = false;
                    continue;
                }
                let theirs = other_component(&s.metric, &other);
                let ours = resolve(&s.metric, &registered);
                let family = match (theirs, ours) {
                    (Some(name), _) => name.to_string(),
                    (_, Some(m)) => m.name.clone(),
                    _ => s.metric.clone(),
                };
                queried
                    .entry(family)
                    .or_default()
                    .insert(board.title.clone());
                if theirs.is_some() {
                    all_volcano = false;
                    continue;
                }
                let Some(m) = ours else {
                    problems.push(format!(
                        "{} ({}): {} is not registered by rust-batch\n    query: {expr}",
                        board.title, board.source, s.metric
                    ));
                    continue;
                };
                for label in &s.matcher_labels {
                    let ok = m.labels.contains(label)
                        || TARGET_LABELS.contains(&label.as_str())
                        || (label == "le" && s.metric.ends_with("_bucket"));
                    if !ok {
                        problems.push(format!(
                            "{} ({}): {} has no label {label} (it has {:?})\n    query: {expr}",
                            board.title, board.source, m.name, m.labels
                        ));
                    }
                }
                metrics.push((s.metric.as_str(), m));
            }
            // Grouping labels can only be checked when every metric grouped is ours.
            if all_volcano {
                for label in &q.grouping_labels {
                    let ok = TARGET_LABELS.contains(&label.as_str())
                        || metrics.iter().any(|(series, m)| {
                            m.labels.contains(label)
                                || (label == "le" && series.ends_with("_bucket"))
                        });
                    if !ok {
                        problems.push(format!(
                            "{} ({}): groups by {label}, a label none of {:?} has\n    query: {expr}",
                            board.title,
                            board.source,
                            metrics.iter().map(|(s, _)| *s).collect::<Vec<_>>()
                        ));
                    }
                }
            }
        }
    }
    // The names left to other components are theirs: defined there, not by the scheduler.
    let scheduler = go_definitions(root, &["pkg/scheduler/metrics"]);
    for (name, (who, dir)) in &other {
        let theirs = go_definitions(root, &[dir]);
        if !theirs.contains_key(*name) || scheduler.contains_key(*name) {
            problems.push(format!(
                "{name} is left to {who}, but {dir} does not define it or the scheduler does"
            ));
        }
    }
    assert!(
        queried.len() >= 20,
        "the dashboards query Volcano's metrics: {queried:?}"
    );
    for (name, boards) in &queried {
        let status = if other.contains_key(name.as_str()) {
            "another component's"
        } else if resolve(name, &registered).is_some() {
            "registered"
        } else {
            "MISSING"
        };
        eprintln!("{status:>20}  {name}  ({})", join(boards));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The metric of `OTHER_COMPONENTS` a queried series belongs to (itself, or a histogram's
/// `_bucket`, `_sum`, `_count`).
fn other_component<'a>(series: &str, other: &BTreeMap<&'a str, (&str, &str)>) -> Option<&'a str> {
    ["", "_bucket", "_sum", "_count"].iter().find_map(|suffix| {
        let base = series.strip_suffix(suffix)?;
        other.get_key_value(base).map(|(k, _)| *k)
    })
}

fn join(set: &BTreeSet<String>) -> String {
    set.iter().cloned().collect::<Vec<_>>().join(", ")
}

/// A metric as Volcano's Go source defines it.
#[derive(Clone, Debug)]
struct GoMetric {
    kind: &'static str,
    labels: Vec<String>,
    buckets: Vec<f64>,
    file: String,
}

/// The `promauto.New…` definitions in `dirs` (Go files, tests left out), by full name.
fn go_definitions(root: &Path, dirs: &[&str]) -> BTreeMap<String, GoMetric> {
    let mut defs = BTreeMap::new();
    for dir in dirs {
        for path in files(&root.join(dir)) {
            let name = path.to_string_lossy().to_string();
            if !name.ends_with(".go") || name.ends_with("_test.go") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("Go source");
            let file = format!("{dir}/{}", path.file_name().unwrap().to_string_lossy());
            for (full, m) in parse_go_metrics(&text, &file) {
                defs.insert(full, m);
            }
        }
    }
    defs
}

/// The metrics a Go file defines with `promauto.New<Kind>[Vec](prometheus.<Kind>Opts{…}
/// [, []string{…}])`; every one in Volcano's metrics packages has this shape (gofmt'd, the
/// call ends at a line `\t)`). Anything else in such a call fails the test.
fn parse_go_metrics(text: &str, file: &str) -> Vec<(String, GoMetric)> {
    let mut found = Vec::new();
    for chunk in text.split("promauto.New").skip(1) {
        let call = &chunk[..chunk.find("\n\t)").unwrap_or(chunk.len())];
        let constructor: String = call.chars().take_while(|c| c.is_alphanumeric()).collect();
        let kind = match constructor.trim_end_matches("Vec") {
            "Counter" => "counter",
            "Gauge" => "gauge",
            "Histogram" => "histogram",
            "Summary" => "summary",
            other => panic!("{file}: promauto.New{other}: a kind this test does not know"),
        };
        let field = |key: &str| -> Option<String> {
            let at = call.find(&format!("{key}:"))? + key.len() + 1;
            let rest = call[at..].trim_start();
            let end = rest.find([',', '\n']).unwrap_or(rest.len());
            Some(rest[..end].trim().to_string())
        };
        let subsystem = field("Subsystem").unwrap_or_default();
        assert!(
            subsystem.ends_with("VolcanoSubSystemName"),
            "{file}: a metric outside Volcano's subsystem: {call}"
        );
        let name = field("Name")
            .and_then(|n| Some(n.strip_prefix('"')?.strip_suffix('"')?.to_string()))
            .unwrap_or_else(|| panic!("{file}: no quoted Name in {call}"));
        let buckets = match kind {
            "histogram" => match field("Buckets") {
                Some(expr) => go_buckets(call, &expr, file),
                // client_golang's prometheus.DefBuckets.
                None => vec![
                    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                ],
            },
            _ => Vec::new(),
        };
        let labels = match call.find("[]string{") {
            None => Vec::new(),
            Some(at) => {
                let rest = &call[at + "[]string{".len()..];
                let list = &rest[..rest.find('}').expect("label list ends")];
                list.split(',')
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(|l| {
                        l.strip_prefix('"')
                            .and_then(|l| l.strip_suffix('"'))
                            .unwrap_or_else(|| panic!("{file}: label {l} is not a string literal"))
                            .to_string()
                    })
                    .collect()
            }
        };
        found.push((
            format!("volcano_{name}"),
            GoMetric {
                kind,
                labels,
                buckets,
                file: file.to_string(),
            },
        ));
    }
    found
}

/// A Go bucket expression's bounds: `prometheus.ExponentialBucketsRange(min, max, n)`,
/// `prometheus.ExponentialBuckets(start, factor, n)` or `prometheus.LinearBuckets(start,
/// width, n)`.
fn go_buckets(call: &str, expr: &str, file: &str) -> Vec<f64> {
    // `field` stops at the first comma: take the whole call from the source.
    let at = call.find(expr).expect("the bucket expression");
    let rest = &call[at..];
    let open = rest
        .find('(')
        .unwrap_or_else(|| panic!("{file}: buckets {expr}"));
    let close = rest
        .find(')')
        .unwrap_or_else(|| panic!("{file}: buckets {expr}"));
    let function = rest[..open].trim();
    let args: Vec<f64> = rest[open + 1..close]
        .split(',')
        .map(|a| {
            a.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{file}: bucket argument {a} is not a number"))
        })
        .collect();
    let [a, b, n] = args[..] else {
        panic!("{file}: {function} with {} arguments", args.len())
    };
    let n = n as usize;
    match function {
        "prometheus.ExponentialBucketsRange" => exponential_buckets_range(a, b, n),
        "prometheus.ExponentialBuckets" => (0..n).map(|i| a * b.powi(i as i32)).collect(),
        "prometheus.LinearBuckets" => (0..n).map(|i| a + b * i as f64).collect(),
        other => panic!("{file}: buckets from {other}, a function this test does not know"),
    }
}

fn same_buckets(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= 1e-9 * x.abs().max(y.abs()))
}

#[test]
fn every_volcano_metric_rust_batch_registers_is_volcanos() {
    let defs = go_definitions(volcano_source(), DEFINING_DIRS);
    assert!(
        defs.len() >= 30,
        "Volcano's metrics packages define its metrics: {:?}",
        defs.keys()
    );
    let mut problems = Vec::new();
    for (name, ours) in catalogue() {
        let Some(theirs) = defs.get(&name) else {
            problems.push(format!(
                "{name}: rust-batch registers it, Volcano ({}) defines no such metric",
                DEFINING_DIRS.join(", ")
            ));
            continue;
        };
        if ours.kind != theirs.kind {
            problems.push(format!(
                "{name}: a {} here, a {} in Volcano's {}",
                ours.kind, theirs.kind, theirs.file
            ));
        }
        if ours.labels != theirs.labels {
            problems.push(format!(
                "{name}: labels {:?} here, {:?} in Volcano's {}",
                ours.labels, theirs.labels, theirs.file
            ));
        }
        if !same_buckets(&ours.buckets, &theirs.buckets) {
            problems.push(format!(
                "{name}: buckets {:?} here, {:?} in Volcano's {}",
                ours.buckets, theirs.buckets, theirs.file
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_docs_name_every_metric_volcanos_scheduler_defines() {
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/src/volcano-metrics.md"
    ))
    .expect("docs/src/volcano-metrics.md");
    let defs = go_definitions(volcano_source(), &["pkg/scheduler/metrics"]);
    let missing: Vec<&String> = defs
        .keys()
        .filter(|n| !docs.contains(&format!("`{n}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/src/volcano-metrics.md says nothing of {missing:?}"
    );
    for (name, _, _) in OTHER_COMPONENTS {
        assert!(
            docs.contains(&format!("`{name}`")),
            "docs/src/volcano-metrics.md says nothing of {name}"
        );
    }
}

#[test]
fn promql_reading() {
    let q = parse_promql(
        "histogram_quantile(0.95, sum(rate(volcano_plugin_scheduling_latency_milliseconds_bucket[5m])) by (le,plugin,OnSession))",
    );
    assert_eq!(
        q.selected,
        vec![Selected {
            metric: "volcano_plugin_scheduling_latency_milliseconds_bucket".into(),
            matcher_labels: vec![],
        }]
    );
    assert_eq!(q.grouping_labels, ["le", "plugin", "OnSession"]);
    let q = parse_promql(
        "sum(kube_pod_volcano_container_resource_requests{resource=\"memory\", unit=\"byte\",job=\"kube-state-metrics\"}) by (volcano_namespace)",
    );
    let names: Vec<&str> = q.selected.iter().map(|s| s.metric.as_str()).collect();
    assert_eq!(names, ["kube_pod_volcano_container_resource_requests"]);
    assert_eq!(q.selected[0].matcher_labels, ["resource", "unit", "job"]);
    assert_eq!(q.grouping_labels, ["volcano_namespace"]);
    let q = parse_promql(
        "stddev(volcano_e2e_job_scheduling_duration)/avg(volcano_e2e_job_scheduling_duration{queue=~\"a,b\", job_namespace!=\"x}\"}) offset 5m",
    );
    assert_eq!(q.selected.len(), 2);
    assert_eq!(q.selected[1].matcher_labels, ["queue", "job_namespace"]);
    let q = parse_promql("increase(volcano_e2e_job_scheduling_duration{}[24h]) != 0");
    assert_eq!(q.selected.len(), 1);
    let q = parse_promql("a * on(pod) group_left(node) b and c");
    let names: Vec<&str> = q.selected.iter().map(|s| s.metric.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(q.grouping_labels, ["pod", "node"]);
}

#[test]
fn yaml_json_blocks() {
    let text = "data:\n  a.json: |-\n    {\"panels\": [],\n     \"title\": \"A\"}\n\n  b.yaml: |-\n    x: 1\n  c.json: |\n    {}\nkind: ConfigMap\n";
    let blocks = json_blocks(text);
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].0, "a.json");
    let a: Value = serde_json::from_str(&blocks[0].1).unwrap();
    assert_eq!(a["title"], "A");
    assert_eq!(blocks[1], ("c.json".to_string(), "    {}".to_string()));
}
