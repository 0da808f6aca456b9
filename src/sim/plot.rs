//! An SVG picture of a run: utilization per resource over time, each queue's share of the
//! cluster over time, and a job timeline (waiting, then running). Plain SVG text, no
//! plotting dependency: the picture is a few polylines and rectangles.

use std::fmt::Write as _;

use super::report::{fmt_ms, Report, Sample};

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
    let mut points = String::new();
    for (i, s) in samples.iter().enumerate() {
        let v = value(s);
        let next_t = samples.get(i + 1).map(|n| n.t).unwrap_or(f.end as i64);
        let _ = write!(
            points,
            "{:.1},{:.1} {:.1},{:.1} ",
            f.x(s.t),
            f.y(v),
            f.x(next_t),
            f.y(v)
        );
    }
    let _ = writeln!(
        out,
        r##"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>"##,
        points.trim_end()
    );
}

fn legend(out: &mut String, f: &Frame, names: &[String]) {
    for (i, name) in names.iter().enumerate() {
        let x = LEFT + 8.0 + 150.0 * i as f64;
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
    let timeline_top = 40.0 + 2.0 * (PANEL + 50.0);
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
