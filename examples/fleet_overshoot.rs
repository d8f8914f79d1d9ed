//! Measures the fleet gate's overshoot for 1, 2, 4 and 8 instances and
//! can draw an SVG (admitted per 10 s window against the
//! budget and the documented bound).
//!
//! ```text
//! cargo run --release --example fleet_overshoot [-- --svg FILE.svg]
//! ```
//!
//! Each instance has its own limiter, gate and sync loop (run by hand here,
//! every 100 ms, staggered), on one manual clock, sharing an in-process
//! counter store (Redis adds its round trip to the sync interval: see
//! `tests/fleet/gate.rs` for the same run against `redis-server`). Together the
//! instances offer twice the fleet budget on one key: 20 requests per second
//! against `600/min` (burst 10) over a 10 s window, a budget of 100.

use std::fmt::Write as _;
use std::time::Duration;

use ratelimit::fleet::{FleetGate, GateSettings, MemoryFleetStore};
use ratelimit::{Limiter, ManualClock, MemoryStore, Quota};

const STEP_MS: u64 = 10;
const SECONDS: u64 = 60;
const WINDOW_STEPS: u64 = 1000;

fn bound(n: u64) -> u64 {
    // budget + (N - 1) * (b + r * S) = 100 + (N - 1) * (10 + 10/s * 0.1 s)
    100 + (n - 1) * 11
}

async fn run(n: usize) -> Vec<u64> {
    let clock = ManualClock::new();
    let store = MemoryFleetStore::new();
    let quota = Quota::per_minute(600).with_burst(10);
    let settings = GateSettings::new(b"overshoot demo secret, 32 bytes.")
        .with_window(Duration::from_secs(10))
        .with_sync_interval(Duration::from_millis(100))
        .with_max_keys(1000);
    let instances: Vec<_> = (0..n)
        .map(|_| {
            (
                Limiter::new(MemoryStore::default(), clock.clone()),
                FleetGate::new(settings.clone(), &clock).expect("gate"),
            )
        })
        .collect();
    let rate = 20.0 / n as f64;
    let mut credit: Vec<f64> = (0..n).map(|i| i as f64 / n as f64).collect();
    let mut admitted = Vec::new();
    for step in 0..SECONDS * 1000 / STEP_MS {
        clock.advance(Duration::from_millis(STEP_MS));
        for (i, (limiter, gate)) in instances.iter().enumerate() {
            credit[i] += rate * STEP_MS as f64 / 1000.0;
            while credit[i] >= 1.0 {
                credit[i] -= 1.0;
                if gate.check(limiter, 1, "one-key", &quota, 1).is_allowed() {
                    admitted.push(step);
                }
            }
            if step % 10 == (i as u64 * 10 / n as u64) % 10 {
                gate.sync_once(&store, &clock).await.expect("in-memory sync");
            }
        }
    }
    admitted
}

/// Admitted in the window ending at each half second, from the first full
/// window on.
fn per_window(admitted: &[u64]) -> Vec<(f64, u64)> {
    (WINDOW_STEPS..=SECONDS * 1000 / STEP_MS)
        .step_by(50)
        .map(|end| {
            let n = admitted.iter().filter(|&&t| t >= end - WINDOW_STEPS && t < end).count() as u64;
            (end as f64 * STEP_MS as f64 / 1000.0, n)
        })
        .collect()
}

fn svg(series: &[(u64, Vec<(f64, u64)>)]) -> String {
    let (w, h, left, right, top, bottom) = (760.0, 420.0, 60.0, 150.0, 30.0, 50.0);
    let (x0, x1) = (10.0, SECONDS as f64);
    let (y0, y1) = (0.0, 200.0);
    let x = |t: f64| left + (t - x0) / (x1 - x0) * (w - left - right);
    let y = |v: f64| top + (1.0 - (v - y0) / (y1 - y0)) * (h - top - bottom);
    let colors = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a"];
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="18" font-size="14">Admitted per 10 s window, one key, 2x the budget offered (budget 100)</text>"#
    );
    for v in (0..=200).step_by(25) {
        let yy = y(f64::from(v));
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{yy}" y2="{yy}" stroke="#eee"/>"##,
            w - right
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{v}</text>"#,
            left - 6.0,
            yy + 4.0
        );
    }
    for t in (10..=SECONDS).step_by(10) {
        let xx = x(t as f64);
        let _ = writeln!(
            s,
            r#"<text x="{xx}" y="{}" text-anchor="middle">{t} s</text>"#,
            h - bottom + 18.0
        );
    }
    let budget = y(100.0);
    let _ = writeln!(
        s,
        r##"<line x1="{left}" x2="{}" y1="{budget}" y2="{budget}" stroke="#000" stroke-width="1.5"/>"##,
        w - right
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}">budget 100</text>"#,
        w - right + 6.0,
        budget + 4.0
    );
    for (i, (n, points)) in series.iter().enumerate() {
        let c = colors[i % colors.len()];
        let b = y(bound(*n) as f64);
        let _ = writeln!(
            s,
            r#"<line x1="{left}" x2="{}" y1="{b}" y2="{b}" stroke="{c}" stroke-dasharray="5,4"/>"#,
            w - right
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" fill="{c}">bound N={n}: {}</text>"#,
            w - right + 6.0,
            b + 4.0 - 10.0 * (i as f64 - 1.5),
            bound(*n)
        );
        let path: Vec<String> = points
            .iter()
            .map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(*v as f64)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" fill="{c}">N = {n}</text>"#,
            w - right + 6.0,
            top + 20.0 + 16.0 * i as f64
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{left}" y="{}" fill="#555">without the gate, N instances would admit up to N x 100 (each its local 10/s)</text>"##,
        h - 8.0
    );
    s.push_str("</svg>\n");
    s
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut out = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--svg" {
            out = args.next();
        }
    }
    println!(
        "{:<4}{:>16}{:>16}{:>10}",
        "N", "busiest window", "leanest window", "bound"
    );
    let mut series = Vec::new();
    for n in [1u64, 2, 4, 8] {
        let admitted = run(n as usize).await;
        let points = per_window(&admitted);
        let max = points.iter().map(|p| p.1).max().unwrap_or(0);
        let min = points.iter().map(|p| p.1).min().unwrap_or(0);
        println!("{n:<4}{max:>16}{min:>16}{:>10}", bound(n));
        if std::env::var_os("OVERSHOOT_SERIES").is_some() {
            let line: Vec<String> = points.iter().step_by(4).map(|(t, v)| format!("{t:.0}:{v}")).collect();
            println!("    {}", line.join(" "));
        }
        series.push((n, points));
    }
    if let Some(path) = out {
        std::fs::write(&path, svg(&series)).expect("write the SVG");
        println!("wrote {path}");
    }
}
