//! The run's report: `report.md` with the verdict and the figures, four SVG charts beside it,
//! and `summary.json` (the same figures, for machines and tests).
//!
//! Charts are drawn with `plotters`' SVG backend only: text goes into the SVG as text, so no
//! font library is needed to draw them.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, anyhow};
use plotters::prelude::*;

use super::analysis::{ETA_MIN_ACTUAL, ETA_WARM_UP, ErrorStats, Percentiles, Series, Summary};

/// Writes `report.md`, `summary.json` and the charts into `out`.
pub(crate) fn write(
    out: &Path,
    summary: &Summary,
    series: &Series,
    command: &str,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let json = serde_json::to_string_pretty(summary)?;
    std::fs::write(out.join("summary.json"), json + "\n")?;
    let max_x = summary.duration.ceil().max(1.0);
    line_chart(
        &out.join("queue.svg"),
        "Visitors waiting",
        "visitors",
        max_x,
        ("waiting (seen by visitors)", &series.queue),
        None,
    )?;
    line_chart(
        &out.join("admissions.svg"),
        "Admissions per second (5-second bins)",
        "admissions / s",
        max_x,
        ("admitted", &series.admissions),
        (summary.admit_per_minute > 0).then(|| {
            (
                "admit_per_minute / 60",
                summary.admit_per_minute as f64 / 60.0,
            )
        }),
    )?;
    if summary.origin.enabled {
        line_chart(
            &out.join("active.svg"),
            "Sessions active at the origin vs max_active",
            "sessions",
            max_x,
            ("active at the origin (most in each second)", &series.active),
            (summary.max_active > 0).then_some(("max_active", summary.max_active as f64)),
        )?;
    }
    eta_chart(&out.join("eta.svg"), &series.eta)?;
    std::fs::write(out.join("report.md"), markdown(summary, command))?;
    Ok(())
}

fn line_chart(
    path: &Path,
    title: &str,
    y_label: &str,
    max_x: f64,
    (name, points): (&str, &[(f64, f64)]),
    reference: Option<(&str, f64)>,
) -> anyhow::Result<()> {
    let max_y = points
        .iter()
        .map(|&(_, y)| y)
        .chain(reference.map(|(_, y)| y))
        .fold(1.0, f64::max)
        * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..max_x, 0.0..max_y)
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .x_desc("seconds since start")
            .y_desc(y_label)
            .draw()
            .map_err(draw_error)?;
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                BLUE.stroke_width(2),
            ))
            .map_err(draw_error)?
            .label(name)
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE));
        if let Some((reference_name, y)) = reference {
            chart
                .draw_series(LineSeries::new([(0.0, y), (max_x, y)], RED.stroke_width(1)))
                .map_err(draw_error)?
                .label(reference_name)
                .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(draw_error)?;
        root.present().map_err(draw_error)?;
    }
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))
}

fn eta_chart(path: &Path, points: &[(f64, f64)]) -> anyhow::Result<()> {
    let max = points
        .iter()
        .map(|&(actual, predicted)| actual.max(predicted))
        .fold(1.0, f64::max)
        * 1.05;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (600, 600)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("ETA shown vs actual wait", ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..max, 0.0..max)
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .x_desc("actual remaining wait (s)")
            .y_desc("eta_seconds shown (s)")
            .draw()
            .map_err(draw_error)?;
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&point| Circle::new(point, 1, BLUE.mix(0.4).filled())),
            )
            .map_err(draw_error)?
            .label("a status seen by a visitor")
            .legend(|(x, y)| Circle::new((x + 10, y), 3, BLUE.filled()));
        chart
            .draw_series(LineSeries::new([(0.0, 0.0), (max, max)], RED))
            .map_err(draw_error)?
            .label("exact")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(draw_error)?;
        root.present().map_err(draw_error)?;
    }
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))
}

fn draw_error(error: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing a chart: {error}")
}

/// The report: the run's setting and verdict, then one section per measure.
fn markdown(summary: &Summary, command: &str) -> String {
    let mut md = String::new();
    write_heading(&mut md, summary, command);
    write_verdict(&mut md, summary);
    write_charts(&mut md, summary);
    write_visitors(&mut md, summary);
    write_latency(&mut md, summary);
    write_admission_rate(&mut md, summary);
    write_order(&mut md, summary);
    write_ahead_increases(&mut md, summary);
    write_eta(&mut md, summary);
    write_origin(&mut md, summary);
    write_errors(&mut md, summary);
    md
}

/// The title, the verdict in one word, the command and the room's settings.
fn write_heading(md: &mut String, summary: &Summary, command: &str) {
    let held = summary.invariants_held();
    let _ = writeln!(md, "# Crowd run: {}\n", summary.scenario);
    if !summary.description.is_empty() {
        let _ = writeln!(md, "{}\n", summary.description);
    }
    let _ = writeln!(
        md,
        "**{}**: {}.\n",
        if held { "PASS" } else { "FAIL" },
        if held {
            "every invariant held"
        } else {
            "an invariant broke (see below)"
        }
    );
    let _ = writeln!(md, "```sh\n{command}\n```\n");
    let _ = writeln!(
        md,
        "{} visitors over {} node(s), {} worker process(es); room: max_active {}, \
         admit_per_minute {}, order {}. The run took {:.0} s.\n",
        summary.visitors,
        summary.nodes,
        summary.workers,
        if summary.max_active == 0 {
            "unlimited".to_owned()
        } else {
            summary.max_active.to_string()
        },
        if summary.admit_per_minute == 0 {
            "unlimited".to_owned()
        } else {
            summary.admit_per_minute.to_string()
        },
        if summary.fifo { "fifo" } else { "random" },
        summary.duration
    );
    let room = &summary.settings.room;
    let other_settings: Vec<String> = [
        (
            "admit_burst",
            room.admit_burst.map(|burst| burst.to_string()),
        ),
        ("session_ttl", room.session_ttl.clone()),
        ("claim_ttl", room.claim_ttl.clone()),
        ("ticket_idle_ttl", room.ticket_idle_ttl.clone()),
    ]
    .into_iter()
    .filter_map(|(key, value)| Some(format!("{key} {}", value?)))
    .collect();
    if !other_settings.is_empty() {
        let _ = writeln!(
            md,
            "Also set for the room: {}. The whole scenario is in `summary.json` (`settings`).\n",
            other_settings.join(", ")
        );
    }
}

/// Every check, invariant or target, met or not.
fn write_verdict(md: &mut String, summary: &Summary) {
    let _ = writeln!(md, "## Verdict\n");
    let _ = writeln!(
        md,
        "| check | kind | result | measured |\n|---|---|---|---|"
    );
    for check in &summary.checks {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            check.name,
            if check.invariant {
                "invariant"
            } else {
                "target"
            },
            if check.met { "met" } else { "**not met**" },
            check.detail
        );
    }
    let _ = writeln!(md);
}

/// Links to the charts written next to the report.
fn write_charts(md: &mut String, summary: &Summary) {
    let _ = writeln!(md, "## Charts\n");
    let _ = writeln!(md, "![waiting](queue.svg)\n");
    let _ = writeln!(md, "![admissions](admissions.svg)\n");
    if summary.origin.enabled {
        let _ = writeln!(md, "![active vs cap](active.svg)\n");
    }
    let _ = writeln!(md, "![ETA](eta.svg)\n");
}

/// How many visitors did what, and the statuses seen while waiting.
fn write_visitors(md: &mut String, summary: &Summary) {
    let _ = writeln!(md, "## Visitors\n");
    let _ = writeln!(md, "| | visitors |\n|---|---:|");
    let _ = writeln!(md, "| joined | {} |", summary.joined);
    let _ = writeln!(
        md,
        "| queued (not admitted by the join) | {} |",
        summary.queued
    );
    let _ = writeln!(md, "| admitted | {} |", summary.admitted);
    let _ = writeln!(
        md,
        "| followed the line over SSE | {} |",
        summary.followed_sse
    );
    let _ = writeln!(
        md,
        "| refused an event stream (node at its limit: 503 `too_many_connections`), polled | {} |",
        summary.sse_refused
    );
    for (outcome, count) in &summary.outcomes {
        let _ = writeln!(md, "| outcome: {outcome} | {count} |");
    }
    let _ = writeln!(
        md,
        "\nStatuses seen while waiting: {}.\n",
        summary.observations
    );
}

/// Join latency and time in queue, as percentiles.
fn write_latency(md: &mut String, summary: &Summary) {
    let _ = writeln!(md, "## Latency and waiting\n");
    let _ = writeln!(
        md,
        "| | count | p50 | p90 | p99 | max |\n|---|---:|---:|---:|---:|---:|"
    );
    percentile_row(md, "join latency (ms)", &summary.join_latency_ms, 1);
    percentile_row(md, "time in queue (s)", &summary.queue_seconds, 1);
    let _ = writeln!(md);
}

/// The admission rate measured while the line was not empty, against the configured one.
fn write_admission_rate(md: &mut String, summary: &Summary) {
    let _ = writeln!(md, "## Admission rate\n");
    let admission = &summary.admission;
    match (admission.window, admission.measured_per_minute) {
        (Some([low, high]), Some(rate)) => {
            let _ = writeln!(
                md,
                "{} admissions between {low:.1} s and {high:.1} s (the 5th and 95th percentile of \
                 queued visitors' admissions, so the line was not empty): **{rate:.0} per \
                 minute**, configured {}{}.\n",
                admission.admissions_in_window,
                admission.configured_per_minute,
                admission
                    .deviation
                    .map(|d| format!(" ({:+.1} %)", d * 100.0))
                    .unwrap_or_default()
            );
        }
        _ => {
            let _ = writeln!(md, "Too few queued admissions to measure a rate.\n");
        }
    }
}

/// Whether visitors were admitted in the order of their positions, and each inversion.
fn write_order(md: &mut String, summary: &Summary) {
    let _ = writeln!(md, "## Order\n");
    let order = &summary.order;
    let _ = writeln!(
        md,
        "Kendall tau between position and admission: **{}** over {} visitors: {} pairs in \
         order, {} inverted, {} ties. A visitor's admission lies between the send time of the last \
         join or poll answered \"waiting\" and the time it saw the admission; pairs whose \
         intervals overlap are ties (SSE events carry no time for the view they show, so a \
         visitor following the line over SSE is bounded by its join only). Statuses (SSE or \
         polled) showing a visitor waiting although `serving` had reached its position: {}.\n",
        order
            .tau
            .map_or("n/a".to_owned(), |tau| format!("{tau:.6}")),
        order.visitors,
        order.concordant,
        order.discordant,
        order.ties,
        order.passed_over
    );
    if !order.inversions.is_empty() {
        let _ = writeln!(
            md,
            "| earlier position | waiting at (s) | later position | admitted at (s) |\n|---:|---:|---:|---:|"
        );
        for inversion in &order.inversions {
            let _ = writeln!(
                md,
                "| {} | {:.3} | {} | {:.3} |",
                inversion.earlier,
                inversion.earlier_waiting_at,
                inversion.later,
                inversion.later_admitted_at
            );
        }
        let _ = writeln!(md);
    }
}

/// The times a visitor saw more visitors ahead than before (the first 20 listed).
fn write_ahead_increases(md: &mut String, summary: &Summary) {
    let _ = writeln!(
        md,
        "`ahead` increases seen: **{}**.\n",
        summary.ahead_increase_count
    );
    if !summary.ahead_increases.is_empty() {
        let _ = writeln!(
            md,
            "| visitor | position | from | to | at (s) | via |\n|---:|---:|---:|---:|---:|---|"
        );
        for increase in summary.ahead_increases.iter().take(20) {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {:.3} | {} |",
                increase.visitor,
                increase.position,
                increase.from,
                increase.to,
                increase.at,
                if increase.sse { "SSE" } else { "poll" }
            );
        }
        if summary.ahead_increases.len() > 20 {
            let _ = writeln!(
                md,
                "\n… and {} more, all in `summary.json`.",
                summary.ahead_increases.len() - 20
            );
        }
        let _ = writeln!(md);
    }
}

/// How far the shown ETAs were from the actual waits.
fn write_eta(md: &mut String, summary: &Summary) {
    let _ = writeln!(md, "## ETA\n");
    let _ = writeln!(
        md,
        "Relative error |shown - actual| / actual of every `eta_seconds` a queued, later admitted \
         visitor was shown (join answer, polls, SSE events) with at least {ETA_MIN_ACTUAL} s still \
         to wait; \"after the first minute\" counts statuses seen {ETA_WARM_UP} s or more after the \
         first visitor queued. Statuses without an ETA (rate not known yet): {}.\n",
        summary.eta.without_eta
    );
    let _ = writeln!(md, "| | statuses | median | p90 |\n|---|---:|---:|---:|");
    error_row(md, "overall", &summary.eta.overall);
    error_row(
        md,
        "after the first minute",
        &summary.eta.after_first_minute,
    );
    let _ = writeln!(md);
}

/// What the origin saw, when the run had one.
fn write_origin(md: &mut String, summary: &Summary) {
    if summary.origin.enabled {
        let origin = &summary.origin;
        let _ = writeln!(md, "## Origin\n");
        let _ = writeln!(
            md,
            "The origin saw {} sessions ({} ended by release, the others left to expire) and {} \
             requests ({} without a pass). At most **{}** sessions were open at once (from a \
             session's first request to its release or last request) and at most {} had a \
             request in flight at once.\n",
            origin.sessions,
            origin.released,
            origin.requests,
            origin.without_pass,
            origin.max_active,
            origin.max_in_flight
        );
    }
}

/// Every error, counted.
fn write_errors(md: &mut String, summary: &Summary) {
    let _ = writeln!(md, "## Errors\n");
    if summary.errors.is_empty() {
        let _ = writeln!(md, "None.");
    } else {
        let _ = writeln!(md, "| error | count |\n|---|---:|");
        for (error, count) in &summary.errors {
            let _ = writeln!(md, "| {error} | {count} |");
        }
    }
}

fn percentile_row(md: &mut String, name: &str, values: &Percentiles, decimals: usize) {
    let _ = writeln!(
        md,
        "| {name} | {} | {:.decimals$} | {:.decimals$} | {:.decimals$} | {:.decimals$} |",
        values.count, values.p50, values.p90, values.p99, values.max
    );
}

fn error_row(md: &mut String, name: &str, stats: &ErrorStats) {
    let percent =
        |value: Option<f64>| value.map_or("n/a".to_owned(), |v| format!("{:.1} %", v * 100.0));
    let _ = writeln!(
        md,
        "| {name} | {} | {} | {} |",
        stats.count,
        percent(stats.median),
        percent(stats.p90)
    );
}
