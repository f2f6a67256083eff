//! A hand-written SVG line chart of the soak's samples: RSS and recorded MiB on the left axis,
//! open file descriptors on the right, load phases shaded, each round's after-retention point
//! marked. No plotting dependency: a few polylines, axes and labels.

use std::fmt::Write;

use crate::soak::Sample;

const W: f64 = 960.0;
const H: f64 = 440.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 80.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;

/// A round step near `span / 5` (1, 2 or 5 times a power of ten).
fn step(span: f64) -> f64 {
    let raw = (span / 5.0).max(1e-9);
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p)
}

/// The top of an axis: a whole number of steps above `max`.
fn top(max: f64) -> (f64, f64) {
    let s = step(max.max(1.0) * 1.1);
    ((max.max(1.0) * 1.05 / s).ceil() * s, s)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The chart as an SVG document.
pub fn svg(samples: &[Sample], marks: &[(f64, String)], title: &str) -> String {
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let t_max = samples.last().map_or(1.0, |s| s.t).max(1.0);
    let (t_top, t_step) = top(t_max);
    let mib_max = samples
        .iter()
        .map(|s| s.stat.rss_mib.max(s.recorded_mib))
        .fold(0.0, f64::max);
    let (mib_top, mib_step) = top(mib_max);
    let fd_max = samples
        .iter()
        .map(|s| s.stat.fds as f64)
        .fold(0.0, f64::max);
    let (fd_top, fd_step) = top(fd_max);
    let x = |t: f64| LEFT + t / t_top * pw;
    let y_mib = |v: f64| TOP + ph - v / mib_top * ph;
    let y_fd = |v: f64| TOP + ph - v / fd_top * ph;

    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="15">{}</text>"#,
        W / 2.0,
        esc(title)
    );
    // Load phases.
    let mut i = 0;
    while i < samples.len() {
        if samples[i].load {
            let t0 = if i > 0 { samples[i - 1].t } else { 0.0 };
            let mut j = i;
            while j + 1 < samples.len() && samples[j + 1].load {
                j += 1;
            }
            let t1 = samples[j].t;
            let _ = writeln!(
                o,
                r##"<rect x="{:.1}" y="{TOP}" width="{:.1}" height="{ph}" fill="#eef2f7"/>"##,
                x(t0),
                (x(t1) - x(t0)).max(1.0)
            );
            i = j + 1;
        } else {
            i += 1;
        }
    }
    // Grid and axes.
    let mut v = 0.0;
    while v <= mib_top + 1e-9 {
        let y = y_mib(v);
        let _ = writeln!(
            o,
            r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{v}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            y + 4.0
        );
        v += mib_step;
    }
    let mut v = 0.0;
    while v <= fd_top + 1e-9 {
        let _ = writeln!(
            o,
            r##"<text x="{}" y="{:.1}" fill="#c0600a">{v}</text>"##,
            LEFT + pw + 6.0,
            y_fd(v) + 4.0
        );
        v += fd_step;
    }
    let mut t = 0.0;
    while t <= t_top + 1e-9 {
        let _ = writeln!(
            o,
            r##"<line x1="{0:.1}" x2="{0:.1}" y1="{1}" y2="{2}" stroke="#999"/><text x="{0:.1}" y="{3}" text-anchor="middle">{t}</text>"##,
            x(t),
            TOP + ph,
            TOP + ph + 5.0,
            TOP + ph + 18.0
        );
        t += t_step;
    }
    let _ = writeln!(
        o,
        r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##
    );
    let _ = writeln!(
        o,
        r#"<text x="{}" y="{}" text-anchor="middle">seconds (shaded: clients running)</text>"#,
        LEFT + pw / 2.0,
        H - 22.0
    );
    let _ = writeln!(
        o,
        r#"<text transform="translate(18 {}) rotate(-90)" text-anchor="middle">MiB</text>"#,
        TOP + ph / 2.0
    );
    let _ = writeln!(
        o,
        r##"<text transform="translate({} {}) rotate(90)" text-anchor="middle" fill="#c0600a">open file descriptors</text>"##,
        W - 18.0,
        TOP + ph / 2.0
    );
    // Series.
    let line = |o: &mut String, color: &str, dash: &str, f: &dyn Fn(&Sample) -> (f64, f64)| {
        let pts: Vec<String> = samples
            .iter()
            .map(|s| {
                let (px, py) = f(s);
                format!("{px:.1},{py:.1}")
            })
            .collect();
        let _ = writeln!(
            o,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.8" {dash} points="{}"/>"#,
            pts.join(" ")
        );
    };
    line(&mut o, "#c0600a", r#"stroke-opacity="0.7""#, &|s| {
        (x(s.t), y_fd(s.stat.fds as f64))
    });
    line(&mut o, "#2a9d4b", r#"stroke-dasharray="5 3""#, &|s| {
        (x(s.t), y_mib(s.recorded_mib))
    });
    line(&mut o, "#1f5fbf", "", &|s| (x(s.t), y_mib(s.stat.rss_mib)));
    // Each round's after-retention RSS.
    for (t, label) in marks {
        let rss = samples
            .iter()
            .min_by(|a, b| (a.t - t).abs().total_cmp(&(b.t - t).abs()))
            .map_or(0.0, |s| s.stat.rss_mib);
        let _ = writeln!(
            o,
            r##"<circle cx="{:.1}" cy="{:.1}" r="4" fill="#1f5fbf"/><text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#1f5fbf">{} {rss:.0}</text>"##,
            x(*t),
            y_mib(rss),
            x(*t),
            y_mib(rss) - 9.0,
            esc(label)
        );
    }
    // Legend.
    for (k, (color, dash, name)) in [
        ("#1f5fbf", "", "RSS (MiB)"),
        (
            "#2a9d4b",
            r#"stroke-dasharray="5 3""#,
            "tether_recorded_bytes (MiB)",
        ),
        ("#c0600a", "", "open fds (right axis)"),
    ]
    .iter()
    .enumerate()
    {
        let lx = LEFT + 10.0 + k as f64 * 250.0;
        let _ = writeln!(
            o,
            r#"<line x1="{lx}" x2="{}" y1="38" y2="38" stroke="{color}" stroke-width="2" {dash}/><text x="{}" y="42">{name}</text>"#,
            lx + 24.0,
            lx + 30.0
        );
    }
    o.push_str("</svg>\n");
    o
}
