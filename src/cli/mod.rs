//! The command line's pieces that are not the commands themselves: Go's flag spellings,
//! the peer schedulers' flags, logging, and how errors are told.

pub mod args;
pub mod explain;
pub mod go_values;
pub mod logging;
pub mod peer_flags;

use std::ffi::OsString;

/// vc-scheduler's default `--scheduler-name`, for a command line written for it.
pub const VOLCANO_SCHEDULER_NAME: &str = "--scheduler-name=volcano";

/// The heading `run --help` lists the peer flags under.
pub const PEER_HEADING: &str = "Accepted for Volcano's and kube-scheduler's manifests";

/// With no command but flags (a Volcano Deployment's `args:` given to rust-batch's image,
/// whose entrypoint is the binary), the command is `run`, as vc-scheduler's would be, and
/// without `--scheduler-name` the pods are Volcano's (vc-scheduler's default name: Volcano's
/// chart passes none). Returns the arguments and whether `run` was implied.
pub fn imply_run(mut args: Vec<OsString>, commands: &[&str]) -> (Vec<OsString>, bool) {
    let Some(first) = args.get(1).and_then(|a| a.to_str()) else {
        return (args, false);
    };
    let asks_about_the_program = ["-h", "--help", "-V", "--version"].contains(&first);
    let names_a_command = args
        .iter()
        .skip(1)
        .take_while(|a| a.to_str() != Some("--"))
        .any(|a| a.to_str().is_some_and(|a| commands.contains(&a)));
    if first.starts_with('-') && !asks_about_the_program && !names_a_command {
        args.insert(1, "run".into());
        let names_a_scheduler = args
            .iter()
            .filter_map(|a| a.to_str())
            .any(|a| a == "--scheduler-name" || a.starts_with("--scheduler-name="));
        if !names_a_scheduler {
            args.push(VOLCANO_SCHEDULER_NAME.into());
        }
        return (args, true);
    }
    (args, false)
}

/// An error and its causes, each said once: "a: b: c". Library errors often print their
/// cause in their own message and return it as their source too; a cause whose text is
/// already in what is printed is left out.
pub fn error_report(error: &anyhow::Error) -> String {
    let mut report = error.to_string();
    for cause in error.chain().skip(1) {
        let text = cause.to_string();
        if !report.contains(&text) {
            report.push_str(": ");
            report.push_str(&text);
        }
    }
    report
}

/// The long flags `command` (a subcommand's name, or None for the program) accepts, its own
/// and the peers' apart, for the message refusing an unknown flag.
pub fn accepted_flags(
    mut program: clap::Command,
    command: Option<&str>,
) -> (Vec<String>, Vec<String>) {
    program.build();
    let cmd = match command.and_then(|c| program.find_subcommand(c)) {
        Some(sub) => sub.clone(),
        None => program,
    };
    let mut own = Vec::new();
    let mut peers = Vec::new();
    for arg in cmd.get_arguments() {
        let names = arg
            .get_long_and_visible_aliases()
            .into_iter()
            .flatten()
            .map(|l| format!("--{l}"))
            .chain(arg.get_short().map(|s| format!("-{s}")));
        if arg.get_help_heading() == Some(PEER_HEADING) {
            peers.extend(names);
        } else {
            own.extend(names);
        }
    }
    own.sort();
    peers.sort();
    (own, peers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn flags_without_a_command_imply_run() {
        let commands = ["run", "simulate", "check-config"];
        assert_eq!(
            imply_run(
                args(&["rb", "--logtostderr", "--scheduler-conf=/c"]),
                &commands
            ),
            (
                args(&[
                    "rb",
                    "run",
                    "--logtostderr",
                    "--scheduler-conf=/c",
                    "--scheduler-name=volcano"
                ]),
                true
            )
        );
        assert_eq!(
            imply_run(args(&["rb", "-v=3", "--scheduler-name", "vc"]), &commands),
            (args(&["rb", "run", "-v=3", "--scheduler-name", "vc"]), true)
        );
        for unchanged in [
            &["rb"][..],
            &["rb", "--help"],
            &["rb", "-V"],
            &["rb", "--version"],
            &["rb", "simulate", "--seed", "1"],
            &["rb", "-v=3", "check-config", "f"],
            &["rb", "teleport"],
        ] {
            assert_eq!(
                imply_run(args(unchanged), &commands),
                (args(unchanged), false),
                "{unchanged:?}"
            );
        }
    }

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read /x: {0}")]
    struct Repeats(#[source] std::io::Error);

    #[test]
    fn each_cause_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = anyhow::Error::new(Repeats(io)).context("loading the configuration");
        assert_eq!(
            error_report(&e),
            "loading the configuration: cannot read /x: no such file"
        );
        let e = anyhow::anyhow!("inner").context("middle").context("outer");
        assert_eq!(error_report(&e), "outer: middle: inner");
    }
}
