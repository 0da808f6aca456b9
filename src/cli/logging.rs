//! The log's filter, format and colour, from the command line and the environment.

use std::io::IsTerminal;

use clap::ValueEnum;
use tracing_subscriber::filter::{EnvFilter, LevelFilter};

/// The default log filter. kube's client logs every failed request at error level; the
/// driver says the same once per cause and interval (`kube::retry::warn_limited`), so an
/// API server outage costs tens of lines, not one per request. kube's watcher logs a list
/// the API server refuses (403) at warn on every retry; the watch says it once per cause.
pub const DEFAULT_FILTER: &str =
    "info,kube=warn,kube_client::client::builder=off,kube_runtime::watcher=error";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One line per event, for people.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Where the filter came from, for its error message and the log's first line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FilterSource {
    Default,
    Flag(&'static str),
    Env,
}

/// The filter directives to log with: `--log-level`, else `-v`, else RUST_LOG, else the
/// default. Flags win over the environment, as they do over a manifest's env.
pub fn filter_directives(
    log_level: Option<&str>,
    verbosity: Option<u8>,
    rust_log: Option<&str>,
) -> (String, FilterSource) {
    if let Some(level) = log_level {
        return (level_directives(level), FilterSource::Flag("--log-level"));
    }
    if let Some(v) = verbosity {
        return (klog_directives(v), FilterSource::Flag("-v"));
    }
    match rust_log.filter(|s| !s.trim().is_empty()) {
        Some(env) => (env.to_string(), FilterSource::Env),
        None => (DEFAULT_FILTER.to_string(), FilterSource::Default),
    }
}

/// `--log-level`: a bare level (error, warn, info, debug, trace, off) sets rust-batch's own
/// logs and leaves its libraries at the default; anything else is an EnvFilter directive
/// list, as RUST_LOG takes it.
fn level_directives(level: &str) -> String {
    match level.trim().parse::<LevelFilter>() {
        Ok(LevelFilter::OFF) => "off".to_string(),
        Ok(l) => format!("{DEFAULT_FILTER},rust_batch={l}"),
        Err(_) => level.to_string(),
    }
}

/// klog's `-v=N` as Kubernetes' logging conventions read it: up to 3 the usual operator
/// information (info), 4–5 debug, 6–7 also the API client's requests (debug everywhere),
/// 8 and more everything (trace).
pub fn klog_directives(v: u8) -> String {
    match v {
        0..=3 => DEFAULT_FILTER.to_string(),
        4..=5 => format!("{DEFAULT_FILTER},rust_batch=debug"),
        6..=7 => "debug".to_string(),
        _ => "trace".to_string(),
    }
}

/// The filter, or an error naming where the bad string came from.
pub fn parse_filter(directives: &str, source: &FilterSource) -> Result<EnvFilter, String> {
    EnvFilter::builder()
        .parse(directives)
        .map_err(|e| match source {
            FilterSource::Env => format!("RUST_LOG={directives:?} is not a valid log filter: {e}"),
            FilterSource::Flag(flag) => {
                format!("{flag} {directives:?} is not a valid log level or filter: {e}")
            }
            FilterSource::Default => format!("the default log filter is invalid: {e}"),
        })
}

/// Colour only for a person at a terminal, and never with NO_COLOR set (no-color.org: any
/// value but the empty string).
pub fn use_colour(stderr_is_terminal: bool, no_color: Option<&str>) -> bool {
    stderr_is_terminal && no_color.is_none_or(str::is_empty)
}

/// Installs the global subscriber, writing to stderr.
pub fn init(format: LogFormat, filter: EnvFilter) {
    let no_color = std::env::var("NO_COLOR").ok();
    let colour = use_colour(std::io::stderr().is_terminal(), no_color.as_deref());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(colour).init(),
        LogFormat::Json => builder.json().flatten_event(true).with_ansi(false).init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_rust_log_and_the_default() {
        assert_eq!(
            filter_directives(None, None, None),
            (DEFAULT_FILTER.to_string(), FilterSource::Default)
        );
        assert_eq!(
            filter_directives(None, None, Some("  ")),
            (DEFAULT_FILTER.to_string(), FilterSource::Default)
        );
        assert_eq!(
            filter_directives(None, None, Some("debug")),
            ("debug".to_string(), FilterSource::Env)
        );
        assert_eq!(
            filter_directives(None, Some(4), Some("warn")),
            (
                format!("{DEFAULT_FILTER},rust_batch=debug"),
                FilterSource::Flag("-v")
            )
        );
        assert_eq!(
            filter_directives(Some("trace"), None, Some("warn")),
            (
                format!("{DEFAULT_FILTER},rust_batch=trace"),
                FilterSource::Flag("--log-level")
            )
        );
        assert_eq!(
            filter_directives(Some("info,rust_batch::kube=debug"), None, None).0,
            "info,rust_batch::kube=debug"
        );
        assert_eq!(filter_directives(Some("off"), None, None).0, "off");
    }

    #[test]
    fn klog_verbosity_maps_to_levels() {
        assert_eq!(klog_directives(0), DEFAULT_FILTER);
        assert_eq!(klog_directives(3), DEFAULT_FILTER);
        assert!(klog_directives(4).ends_with(",rust_batch=debug"));
        assert!(klog_directives(5).ends_with(",rust_batch=debug"));
        assert_eq!(klog_directives(6), "debug");
        assert_eq!(klog_directives(10), "trace");
        for v in [0, 3, 4, 6, 9, 255] {
            parse_filter(&klog_directives(v), &FilterSource::Flag("-v")).unwrap();
        }
    }

    #[test]
    fn a_bad_filter_is_an_error_naming_it() {
        let e = parse_filter("info,kube=loud", &FilterSource::Env).unwrap_err();
        assert!(
            e.starts_with("RUST_LOG=\"info,kube=loud\" is not a valid log filter"),
            "{e}"
        );
        let e = parse_filter("[{", &FilterSource::Flag("--log-level")).unwrap_err();
        assert!(
            e.starts_with("--log-level \"[{\" is not a valid log level or filter"),
            "{e}"
        );
        parse_filter(DEFAULT_FILTER, &FilterSource::Default).unwrap();
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(use_colour(true, None));
        assert!(use_colour(true, Some("")));
        assert!(!use_colour(true, Some("1")));
        assert!(!use_colour(false, None));
        assert!(!use_colour(false, Some("")));
    }
}
