//! Flags of Volcano's vc-scheduler and of kube-scheduler that `rust-batch run` accepts so
//! their manifests carry over, but has no use for: each is accepted and named in a warning
//! saying why it changes nothing (or refused, where ignoring it would put pods where the
//! operator did not want them). The flags rust-batch does act on (`--scheduler-conf`,
//! `--leader-elect…`, `--listen-address`, `-v`, …) are ordinary fields of `run`.
//!
//! Sources, at the versions the docs table (docs/src/volcano-flags.md) names: Volcano
//! v1.15.1's cmd/scheduler/app/options/options.go (its flags), cmd/scheduler/main.go
//! (`--log-flush-frequency`, `--feature-gates`, klog's flags, leader election through
//! k8s.io/component-base/config/options), klog v2's klog.go (its `init`), and kube-scheduler
//! v1.33's cmd/kube-scheduler/app/options/{options,deprecated}.go with the
//! k8s.io/apiserver serving, authentication and authorization options and
//! k8s.io/component-base's logs and metrics options.

use clap::builder::ValueParser;
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};

use super::go_values;

/// Whose flag it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    Volcano,
    KubeScheduler,
    /// Both (klog's verbosity flags, leader election, the API client's limits).
    Both,
}

/// What the flag's value is, checked as the peer checks it (so a typo fails here as it
/// would there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// Go-style: `--flag` alone is true, `--flag=false` false.
    Bool,
    Duration,
    Integer,
    Number,
    Text,
}

/// What rust-batch does when the flag is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Accepted; a warning names it with this reason.
    Ignored(&'static str),
    /// Refused with this reason: ignoring it would change where pods go.
    Refused(&'static str),
}

#[derive(Debug)]
pub struct PeerFlag {
    /// The long name, without dashes.
    pub name: &'static str,
    pub peer: Peer,
    pub value: Value,
    /// Values with which the peer behaves as rust-batch does anyway: given with one of
    /// these, the flag is accepted without a word.
    pub same_as_rust_batch: &'static [&'static str],
    pub effect: Effect,
}

const fn ignored(
    name: &'static str,
    peer: Peer,
    value: Value,
    same_as_rust_batch: &'static [&'static str],
    why: &'static str,
) -> PeerFlag {
    PeerFlag {
        name,
        peer,
        value,
        same_as_rust_batch,
        effect: Effect::Ignored(why),
    }
}

const KLOG: &str = "klog's; rust-batch logs with tracing to stderr (set --log-level, -v or \
                    RUST_LOG, and --log-format)";
const TLS: &str = "rust-batch serves plain HTTP on --http-address (terminate TLS in front of \
                   it if needed)";
const DELEGATED_AUTH: &str = "rust-batch's HTTP endpoints do not authenticate or authorize \
                              requests (keep --http-address on a private network)";
const METRICS_OPTS: &str = "rust-batch exports every metric it has, with fixed labels";

use Peer::{Both, KubeScheduler, Volcano};
use Value::{Bool, Duration, Integer, Number, Text};

/// Every peer flag `run` accepts without acting on it.
pub const PEER_FLAGS: &[PeerFlag] = &[
    // Volcano v1.15.1, cmd/scheduler/app/options/options.go.
    ignored(
        "ca-cert-file",
        Volcano,
        Text,
        &[],
        "Volcano serves its health check over TLS with it; rust-batch serves plain HTTP",
    ),
    ignored("tls-cert-file", Both, Text, &[], TLS),
    ignored("tls-private-key-file", Both, Text, &[], TLS),
    ignored(
        "resync-period",
        Volcano,
        Duration,
        &["0", "0s"],
        "rust-batch's watches never resync: each change arrives as an event",
    ),
    ignored(
        "default-queue",
        Volcano,
        Text,
        &["default"],
        "rust-batch's default queue is always named \"default\"",
    ),
    ignored(
        "priority-class",
        Volcano,
        Bool,
        &["true"],
        "rust-batch always orders and preempts by PriorityClass",
    ),
    ignored(
        "kube-api-qps",
        Both,
        Number,
        &[],
        "rust-batch does not cap its requests per second: binds and evictions in flight \
         start at --bind-concurrency and adapt to the API server's answers (fewer on 429s, \
         5xx and slow replies, up to --max-bind-concurrency)",
    ),
    ignored(
        "kube-api-burst",
        Both,
        Integer,
        &[],
        "rust-batch does not cap its requests per second: binds and evictions in flight \
         start at --bind-concurrency and adapt to the API server's answers (fewer on 429s, \
         5xx and slow replies, up to --max-bind-concurrency)",
    ),
    ignored(
        "minimum-feasible-nodes",
        Volcano,
        Integer,
        &["100"],
        "set allocate's minNodesToFind in the scheduler configuration (configurations: - \
         name: allocate)",
    ),
    ignored(
        "minimum-percentage-nodes-to-find",
        Volcano,
        Integer,
        &["5"],
        "set allocate's percentageOfNodesToFind in the scheduler configuration",
    ),
    ignored(
        "percentage-nodes-to-find",
        Volcano,
        Integer,
        &["0"],
        "set allocate's percentageOfNodesToFind in the scheduler configuration",
    ),
    ignored(
        "plugins-dir",
        Volcano,
        Text,
        &[""],
        "rust-batch loads no plugins at run time; its plugins are built in",
    ),
    ignored(
        "csi-storage",
        Volcano,
        Bool,
        &["false"],
        "rust-batch does not track CSI storage capacity; WaitForFirstConsumer claims are \
         bound by the provisioner after the gang is placed",
    ),
    ignored(
        "enable-metrics",
        Volcano,
        Bool,
        &["true"],
        "rust-batch always serves /metrics on --http-address (--http-address=off turns it \
         off)",
    ),
    ignored(
        "enable-pprof",
        Volcano,
        Bool,
        &["false"],
        "rust-batch has no pprof endpoint",
    ),
    PeerFlag {
        name: "node-selector",
        peer: Volcano,
        value: Text,
        same_as_rust_batch: &[],
        effect: Effect::Refused(
            "rust-batch considers every node; ignoring this would place pods on nodes \
             outside the selection (give pods a nodeSelector or node affinity instead)",
        ),
    },
    ignored(
        "cache-dumper",
        Volcano,
        Bool,
        &["false"],
        "rust-batch has no cache dump; `rust-batch explain NAMESPACE/NAME` shows a gang as \
         the scheduler sees it",
    ),
    ignored(
        "cache-dump-dir",
        Volcano,
        Text,
        &[],
        "rust-batch has no cache dump; `rust-batch explain NAMESPACE/NAME` shows a gang as \
         the scheduler sees it",
    ),
    ignored(
        "node-worker-threads",
        Volcano,
        Integer,
        &[],
        "rust-batch applies node changes on its I/O threads (--io-threads)",
    ),
    ignored(
        "gate-removal-worker-num",
        Volcano,
        Integer,
        &[],
        "rust-batch does not remove scheduling gates",
    ),
    ignored(
        "ignored-provisioners",
        Volcano,
        Text,
        &[],
        "rust-batch does not count volumes against node limits by provisioner",
    ),
    ignored(
        "resource-sync-timeout",
        Volcano,
        Duration,
        &[],
        "rust-batch's first cycle waits until every watch has listed, however long that takes",
    ),
    ignored(
        "disable-default-scheduler-config",
        Volcano,
        Bool,
        &["true"],
        "rust-batch never falls back to the default configuration: a bad file is an error \
         at start, and a bad new file keeps the running configuration",
    ),
    PeerFlag {
        name: "scheduler-sharding-mode",
        peer: Volcano,
        value: Text,
        same_as_rust_batch: &["none"],
        effect: Effect::Refused(
            "rust-batch does not shard nodes between schedulers; ignoring this would place \
             pods on nodes of other shards",
        ),
    },
    ignored(
        "scheduler-sharding-name",
        Volcano,
        Text,
        &["volcano"],
        "rust-batch does not shard nodes between schedulers",
    ),
    // Volcano's cmd/scheduler/main.go; kube-scheduler's logs options.
    ignored(
        "log-flush-frequency",
        Both,
        Duration,
        &[],
        "rust-batch writes each log line at once",
    ),
    ignored(
        "feature-gates",
        Both,
        Text,
        &[],
        "rust-batch has no feature gates: what it has is on",
    ),
    // Leader election flags rust-batch has no counterpart for (k8s.io/component-base
    // config/options/leaderelectionconfig.go; the others are `run`'s own).
    ignored(
        "leader-elect-retry-period",
        Both,
        Duration,
        &[],
        "the leader renews twice per --leader-elect-renew-deadline, and standbys try as \
         often",
    ),
    // klog v2 (klog.go's init), registered by Volcano; `-v` is `run`'s own.
    ignored("log-dir", Volcano, Text, &[""], KLOG),
    ignored("log-file", Volcano, Text, &[""], KLOG),
    ignored("log-file-max-size", Volcano, Integer, &[], KLOG),
    ignored("logtostderr", Volcano, Bool, &["true"], KLOG),
    ignored("alsologtostderr", Volcano, Bool, &["false"], KLOG),
    ignored("add-dir-header", Volcano, Bool, &["false"], KLOG),
    ignored("skip-headers", Volcano, Bool, &["false"], KLOG),
    ignored("one-output", Volcano, Bool, &["false"], KLOG),
    ignored("skip-log-headers", Volcano, Bool, &["false"], KLOG),
    ignored("stderrthreshold", Volcano, Text, &[], KLOG),
    ignored("vmodule", Both, Text, &[""], KLOG),
    ignored("log-backtrace-at", Volcano, Text, &[""], KLOG),
    ignored("legacy-stderr-threshold-behavior", Volcano, Bool, &[], KLOG),
    // kube-scheduler v1.33: cmd/kube-scheduler/app/options.
    PeerFlag {
        name: "config",
        peer: KubeScheduler,
        value: Text,
        same_as_rust_batch: &[],
        effect: Effect::Refused(
            "rust-batch does not read a KubeSchedulerConfiguration; give its profiles' \
             scheduler names with --scheduler-name and a Volcano-format configuration with \
             --scheduler-conf",
        ),
    },
    PeerFlag {
        name: "write-config-to",
        peer: KubeScheduler,
        value: Text,
        same_as_rust_batch: &[],
        effect: Effect::Refused("rust-batch does not write a KubeSchedulerConfiguration"),
    },
    ignored(
        "profiling",
        KubeScheduler,
        Bool,
        &["false"],
        "rust-batch has no profiling endpoint",
    ),
    ignored(
        "contention-profiling",
        KubeScheduler,
        Bool,
        &["false"],
        "rust-batch has no profiling endpoint",
    ),
    ignored(
        "kube-api-content-type",
        KubeScheduler,
        Text,
        &[],
        "rust-batch picks the content type per request (its large lists in protobuf)",
    ),
    ignored(
        "pod-max-in-unschedulable-pods-duration",
        KubeScheduler,
        Duration,
        &[],
        "rust-batch looks at every pending pod in every cycle; it has no unschedulable queue",
    ),
    // k8s.io/apiserver pkg/server/options: secure serving, delegated authentication and
    // authorization.
    ignored("bind-address", KubeScheduler, Text, &[], TLS),
    ignored("secure-port", KubeScheduler, Integer, &[], TLS),
    ignored("cert-dir", KubeScheduler, Text, &[], TLS),
    ignored("tls-cipher-suites", KubeScheduler, Text, &[], TLS),
    ignored("tls-min-version", KubeScheduler, Text, &[], TLS),
    ignored("tls-sni-cert-key", KubeScheduler, Text, &[], TLS),
    ignored("permit-port-sharing", KubeScheduler, Bool, &[], TLS),
    ignored("permit-address-sharing", KubeScheduler, Bool, &[], TLS),
    ignored("client-ca-file", KubeScheduler, Text, &[], DELEGATED_AUTH),
    ignored(
        "authentication-kubeconfig",
        KubeScheduler,
        Text,
        &[],
        DELEGATED_AUTH,
    ),
    ignored(
        "authentication-skip-lookup",
        KubeScheduler,
        Bool,
        &[],
        DELEGATED_AUTH,
    ),
    ignored(
        "authentication-token-webhook-cache-ttl",
        KubeScheduler,
        Duration,
        &[],
        DELEGATED_AUTH,
    ),
    ignored(
        "authentication-tolerate-lookup-failure",
        KubeScheduler,
        Bool,
        &[],
        DELEGATED_AUTH,
    ),
    ignored(
        "requestheader-client-ca-file",
        KubeScheduler,
        Text,
        &[],
        DELEGATED_AUTH,
    ),
    ignored(
        "requestheader-allowed-names",
        KubeScheduler,
        Text,
        &[],
        DELEGATED_AUTH,
    ),
    ignored(
        "requestheader-username-headers",
        KubeScheduler,
        Text,
        &[],
        DELEGATED_AUTH,
    ),
    ignored(
        "requestheader-uid-headers",
        KubeScheduler,
        Text,
        &[],
        DELEGATED_AUTH,
    ),
    ignored(
        "requestheader-group-headers",
        KubeScheduler,
        Text,
        &[],
        DELEGATED_AUTH,
    ),
    ignored(
        "requestheader-extra-headers-prefix",
        KubeScheduler,
        Text,
        &[],
        DELEGATED_AUTH,
    ),
    ignored(
        "authorization-kubeconfig",
        KubeScheduler,
        Text,
        &[],
        DELEGATED_AUTH,
    ),
    ignored(
        "authorization-always-allow-paths",
        KubeScheduler,
        Text,
        &[],
        DELEGATED_AUTH,
    ),
    ignored(
        "authorization-webhook-cache-authorized-ttl",
        KubeScheduler,
        Duration,
        &[],
        DELEGATED_AUTH,
    ),
    ignored(
        "authorization-webhook-cache-unauthorized-ttl",
        KubeScheduler,
        Duration,
        &[],
        DELEGATED_AUTH,
    ),
    // k8s.io/component-base: feature gates' emulation, metrics and logs options.
    ignored(
        "emulated-version",
        KubeScheduler,
        Text,
        &[],
        "rust-batch does not emulate other Kubernetes versions",
    ),
    ignored(
        "show-hidden-metrics-for-version",
        KubeScheduler,
        Text,
        &[],
        METRICS_OPTS,
    ),
    ignored(
        "allow-metric-labels",
        KubeScheduler,
        Text,
        &[],
        METRICS_OPTS,
    ),
    ignored(
        "allow-metric-labels-manifest",
        KubeScheduler,
        Text,
        &[],
        METRICS_OPTS,
    ),
    ignored(
        "log-text-split-stream",
        KubeScheduler,
        Bool,
        &["false"],
        KLOG,
    ),
    ignored("log-text-info-buffer-size", KubeScheduler, Text, &[], KLOG),
    ignored(
        "log-json-split-stream",
        KubeScheduler,
        Bool,
        &["false"],
        KLOG,
    ),
    ignored("log-json-info-buffer-size", KubeScheduler, Text, &[], KLOG),
];

impl PeerFlag {
    fn arg(&'static self) -> Arg {
        let whose = match self.peer {
            Volcano => "Volcano's",
            KubeScheduler => "kube-scheduler's",
            Both => "Volcano's and kube-scheduler's",
        };
        let what = match self.effect {
            Effect::Ignored(why) => format!("{whose}; accepted and ignored: {why}."),
            Effect::Refused(why) => format!("{whose}; refused: {why}."),
        };
        let arg = Arg::new(self.name)
            .long(self.name)
            .help(what)
            .hide_short_help(true)
            .action(ArgAction::Append);
        match self.value {
            Bool => arg
                .value_name("BOOL")
                .num_args(0..=1)
                .require_equals(true)
                .default_missing_value("true")
                .value_parser(ValueParser::new(|s: &str| {
                    go_values::parse_bool(s).map(|b| b.to_string())
                })),
            Duration => arg
                .value_name("DURATION")
                .value_parser(ValueParser::new(|s: &str| {
                    go_values::parse_duration(s).map(|_| s.to_string())
                })),
            Integer => arg
                .value_name("N")
                .value_parser(ValueParser::new(|s: &str| {
                    s.parse::<i64>()
                        .map(|_| s.to_string())
                        .map_err(|_| format!("{s:?} is not a whole number"))
                })),
            Number => arg
                .value_name("N")
                .value_parser(ValueParser::new(|s: &str| {
                    s.parse::<f64>()
                        .map(|_| s.to_string())
                        .map_err(|_| format!("{s:?} is not a number"))
                })),
            Text => arg
                .value_name("VALUE")
                .value_parser(ValueParser::new(|s: &str| Ok::<_, String>(s.to_string()))),
        }
    }
}

/// The peer flags given on a command line, with their values.
#[derive(Clone, Debug, Default)]
pub struct PeerFlags {
    pub given: Vec<(&'static PeerFlag, Vec<String>)>,
}

impl PeerFlags {
    /// One warning per flag given that rust-batch ignores, unless its value is what
    /// rust-batch does anyway.
    pub fn warnings(&self) -> Vec<String> {
        self.given
            .iter()
            .filter_map(|(flag, values)| {
                let Effect::Ignored(why) = flag.effect else {
                    return None;
                };
                if values
                    .iter()
                    .all(|v| flag.same_as_rust_batch.contains(&v.as_str()))
                {
                    return None;
                }
                Some(format!("--{}: ignored: {why}", shown(flag, values)))
            })
            .collect()
    }

    /// An error for the first refused flag given with a value that changes something.
    pub fn refusal(&self) -> Option<String> {
        self.given.iter().find_map(|(flag, values)| {
            let Effect::Refused(why) = flag.effect else {
                return None;
            };
            if values
                .iter()
                .all(|v| flag.same_as_rust_batch.contains(&v.as_str()))
            {
                return None;
            }
            Some(format!("--{} is not supported: {why}", shown(flag, values)))
        })
    }
}

/// `name=value` (or `name=a,b` for a repeated flag).
fn shown(flag: &PeerFlag, values: &[String]) -> String {
    format!("{}={}", flag.name, values.join(","))
}

impl FromArgMatches for PeerFlags {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let given = PEER_FLAGS
            .iter()
            .filter(|f| matches.value_source(f.name) == Some(ValueSource::CommandLine))
            .map(|f| {
                let values = matches
                    .get_many::<String>(f.name)
                    .map(|v| v.cloned().collect())
                    .unwrap_or_default();
                (f, values)
            })
            .collect();
        Ok(PeerFlags { given })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Args for PeerFlags {
    fn augment_args(cmd: Command) -> Command {
        cmd.next_help_heading(super::PEER_HEADING)
            .args(PEER_FLAGS.iter().map(PeerFlag::arg))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}
