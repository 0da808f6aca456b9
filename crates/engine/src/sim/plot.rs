//! An SVG picture of a run: utilization per resource over time, each queue's share of the
//! cluster over time, gang spread (with topology levels or GPU nodes) and a job timeline
//! (waiting, then running). Plain SVG text, no plotting dependency: the picture is a few
//! polylines and rectangles.

use std::fmt::Write as _;

use super::report::{fmt_ms, JobReport, Report, Sample};

const WIDTH: f64 = 1000.0;
const LEFT: f64 = 140.0;
const RIGHT: f64 = 20.0;
const PANEL: f64 = 180.0;
const ROW: f64 = 12.0;
const MAX_ROWS: usize = 150;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

struct Frame {
    top: f64,
    end: f64,
}

impl Frame {
    fn x(&self, t: i64) -> f64 {
        LEFT + (WIDTH - LEFT - RIGHT) * (t as f64 / self.end.max(1.0))
    }
    fn y(&self, v: f64) -> f64 {
        self.top + PANEL - PANEL * v.clamp(0.0, 1.0)
    }
}

fn axes(out: &mut String, f: &Frame, title: &str) {
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="{}" font-size="13" font-weight="bold">{}</text>"##,
        f.top - 6.0,
        escape(title)
    );
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{}" width="{}" height="{PANEL}" fill="none" stroke="#999"/>"##,
        f.top,
        WIDTH - LEFT - RIGHT
    );
    for pct in [0, 50, 100] {
        let y = f.y(pct as f64 / 100.0);
        let _ = writeln!(
            out,
            r##"<text x="{}" y="{}" font-size="10" text-anchor="end">{pct}%</text>"##,
            LEFT - 4.0,
            y + 3.0
        );
    }
    let _ = writeln!(
        out,
        r##"<text x="{}" y="{}" font-size="10" text-anchor="end">{}</text>"##,
        WIDTH - RIGHT,
        f.top + PANEL + 12.0,
        fmt_ms(f.end as i64)
    );
}

fn step_line(
    out: &mut String,
    f: &Frame,
    samples: &[Sample],
    color: &str,
    value: impl Fn(&Sample) -> f64,
) {
    let steps: Vec<(i64, Option<f64>)> = samples.iter().map(|s| (s.t, Some(value(s)))).collect();
    step_polylines(out, f, &steps, color);
}

/// A step function through `(time, value)` steps, each holding until the next (the last
/// until the end); a step without a value leaves a gap.
fn step_polylines(out: &mut String, f: &Frame, steps: &[(i64, Option<f64>)], color: &str) {
    let mut points = String::new();
    let mut flush = |points: &mut String| {
        if !points.is_empty() {
            let _ = writeln!(
                out,
                r##"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>"##,
                points.trim_end()
            );
            points.clear();
        }
    };
    for (i, (t, v)) in steps.iter().enumerate() {
        let Some(v) = v else {
            flush(&mut points);
            continue;
        };
        let next_t = steps.get(i + 1).map(|n| n.0).unwrap_or(f.end as i64);
        let _ = write!(
            points,
            "{:.1},{:.1} {:.1},{:.1} ",
            f.x(*t),
            f.y(*v),
            f.x(next_t),
            f.y(*v)
        );
    }
    flush(&mut points);
}

/// Per level, over time: the share of the multi-node gangs running at that time whose
/// nodes lie in one domain of the level (a gap while none runs). A sweep over starts and
/// finishes: reports can hold many thousands of jobs.
fn within_one_domain_steps(jobs: &[JobReport], level: &str, end: i64) -> Vec<(i64, Option<f64>)> {
    // (time, change in running gangs, change in those within one domain)
    let mut changes: Vec<(i64, i64, i64)> = Vec::new();
    for j in jobs.iter().filter(|j| j.nodes.len() > 1) {
        let (Some(spread), Some(start)) = (j.spread.iter().find(|s| s.level == level), j.started)
        else {
            continue;
        };
        let within = i64::from(spread.domains == 1);
        changes.push((start, 1, within));
        changes.push((j.finished.unwrap_or(end), -1, -within));
    }
    changes.sort_unstable();
    let mut steps = vec![(0, None)];
    let (mut running, mut within) = (0i64, 0i64);
    let mut i = 0;
    while i < changes.len() {
        let t = changes[i].0;
        while i < changes.len() && changes[i].0 == t {
            running += changes[i].1;
            within += changes[i].2;
            i += 1;
        }
        let share = (running > 0).then(|| within as f64 / running as f64);
        match steps.last_mut() {
            Some(last) if last.0 == t => last.1 = share,
            _ => steps.push((t, share)),
        }
    }
    steps
}

fn legend(out: &mut String, f: &Frame, names: &[String]) {
    let mut x = LEFT + 8.0;
    for (i, name) in names.iter().enumerate() {
        let y = f.top + 12.0;
        let c = COLORS[i % COLORS.len()];
        let _ = writeln!(
            out,
            r##"<rect x="{x}" y="{}" width="10" height="10" fill="{c}"/><text x="{}" y="{}" font-size="11">{}</text>"##,
            y - 9.0,
            x + 14.0,
            y,
            escape(name)
        );
        // About 6 px per character at font-size 11; at least the old fixed 150 px.
        x += (24.0 + 6.0 * name.chars().count() as f64).max(150.0);
    }
}

/// Renders the report as an SVG document.
pub fn render(report: &Report) -> String {
    let end = report
        .summary
        .makespan_ms
        .max(report.samples.last().map(|s| s.t).unwrap_or(0))
        .max(1) as f64;
    let resources: Vec<String> = report.summary.mean_utilization.keys().cloned().collect();
    let queues: Vec<String> = report.summary.mean_queue_share.keys().cloned().collect();
    let share_resource = if resources.iter().any(|r| r == "nvidia.com/gpu") {
        "nvidia.com/gpu"
    } else {
        "cpu"
    }
    .to_string();
    let rows = report.jobs.len().min(MAX_ROWS);
    let levels: Vec<String> = report
        .summary
        .topology
        .iter()
        .map(|l| l.level.clone())
        .collect();
    let gpus = report.samples.iter().any(|s| s.gpu_nodes > 0);
    let spread_panel = !levels.is_empty() || gpus;
    let panels = if spread_panel { 3.0 } else { 2.0 };
    let timeline_top = 40.0 + panels * (PANEL + 50.0);
    let height = timeline_top + rows as f64 * ROW + 60.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif">"##
    );
    let _ = writeln!(out, r##"<rect width="100%" height="100%" fill="white"/>"##);
    let _ = writeln!(
        out,
        r##"<text x="10" y="18" font-size="15" font-weight="bold">{} — partial gangs {}, over-committed nodes {}</text>"##,
        escape(&report.scenario),
        report.invariants.partial_gangs,
        report.invariants.overcommitted_nodes
    );

    let util = Frame { top: 50.0, end };
    axes(&mut out, &util, "utilization (used / allocatable)");
    for (i, r) in resources.iter().enumerate() {
        step_line(
            &mut out,
            &util,
            &report.samples,
            COLORS[i % COLORS.len()],
            |s| s.utilization.get(r).copied().unwrap_or(0.0),
        );
    }
    legend(&mut out, &util, &resources);

    let shares = Frame {
        top: 50.0 + PANEL + 50.0,
        end,
    };
    axes(
        &mut out,
        &shares,
        &format!("queue share of cluster {share_resource}"),
    );
    for (i, q) in queues.iter().enumerate() {
        step_line(
            &mut out,
            &shares,
            &report.samples,
            COLORS[i % COLORS.len()],
            |s| {
                s.queue_share
                    .get(q)
                    .and_then(|m| m.get(&share_resource))
                    .copied()
                    .unwrap_or(0.0)
            },
        );
    }
    legend(&mut out, &shares, &queues);

    if spread_panel {
        let spread = Frame {
            top: 50.0 + 2.0 * (PANEL + 50.0),
            end,
        };
        axes(
            &mut out,
            &spread,
            "gang spread: running multi-node gangs within one domain; GPU nodes partially used",
        );
        let mut names = Vec::new();
        for level in &levels {
            let color = COLORS[names.len() % COLORS.len()];
            let steps = within_one_domain_steps(&report.jobs, level, end as i64);
            step_polylines(&mut out, &spread, &steps, color);
            names.push(format!("within one {level}"));
        }
        if gpus {
            let color = COLORS[names.len() % COLORS.len()];
            step_line(&mut out, &spread, &report.samples, color, |s| {
                if s.gpu_nodes > 0 {
                    s.partial_gpu_nodes as f64 / s.gpu_nodes as f64
                } else {
                    0.0
                }
            });
            names.push("partially used GPU nodes".into());
        }
        legend(&mut out, &spread, &names);
    }

    let tl = Frame {
        top: timeline_top,
        end,
    };
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="{}" font-size="13" font-weight="bold">jobs (light: waiting, dark: running)</text>"##,
        tl.top - 6.0
    );
    for (i, j) in report.jobs.iter().take(rows).enumerate() {
        let y = tl.top + i as f64 * ROW;
        let _ = writeln!(
            out,
            r##"<text x="{}" y="{}" font-size="9" text-anchor="end">{}</text>"##,
            LEFT - 4.0,
            y + 9.0,
            escape(&j.name)
        );
        let wait_end = j.started.unwrap_or(end as i64);
        let _ = writeln!(
            out,
            r##"<rect x="{:.1}" y="{y}" width="{:.1}" height="{}" fill="#f3c6a5"/>"##,
            tl.x(j.submitted),
            (tl.x(wait_end) - tl.x(j.submitted)).max(0.5),
            ROW - 2.0
        );
        if let Some(start) = j.started {
            let stop = j.finished.unwrap_or(end as i64);
            let _ = writeln!(
                out,
                r##"<rect x="{:.1}" y="{y}" width="{:.1}" height="{}" fill="#2b6cb0"/>"##,
                tl.x(start),
                (tl.x(stop) - tl.x(start)).max(0.5),
                ROW - 2.0
            );
        }
    }
    if report.jobs.len() > rows {
        let _ = writeln!(
            out,
            r##"<text x="{LEFT}" y="{}" font-size="11">… {} more jobs not drawn</text>"##,
            tl.top + rows as f64 * ROW + 14.0,
            report.jobs.len() - rows
        );
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::report::LevelSpread;

    fn job(started: Option<i64>, finished: Option<i64>, nodes: usize, racks: usize) -> JobReport {
        JobReport {
            name: "j".into(),
            queue: "default".into(),
            tasks: nodes,
            min_member: nodes as u32,
            request: String::new(),
            submitted: 0,
            started,
            finished,
            wait: None,
            status: String::new(),
            message: None,
            reservation: None,
            nodes: (0..nodes).map(|n| format!("n{n}")).collect(),
            spread: vec![LevelSpread {
                level: "rack".into(),
                domains: racks,
            }],
            gpu_models: Vec::new(),
        }
    }

    #[test]
    fn spread_over_time_counts_running_multi_node_gangs_with_gaps_while_none_runs() {
        let jobs = [
            job(Some(10), Some(30), 2, 1),
            job(Some(20), None, 3, 2),
            job(Some(0), Some(100), 1, 1), // one node: not a multi-node gang
            job(None, None, 0, 0),         // never ran
            job(Some(50), Some(60), 2, 1),
        ];
        // The second one still runs at the end of the run (70).
        assert_eq!(
            within_one_domain_steps(&jobs, "rack", 70),
            [
                (0, None),
                (10, Some(1.0)),
                (20, Some(0.5)),
                (30, Some(0.0)),
                (50, Some(0.5)),
                (60, Some(0.0)),
                (70, None),
            ]
        );
    }
}
