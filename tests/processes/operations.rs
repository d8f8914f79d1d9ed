//! The quickstart as an operator runs it, as a real process over real
//! sockets: `GET /metrics` after a burst (parsed by an independent
//! Prometheus text-format parser), reload on `SIGHUP` (a real signal) with
//! the change logged and in force, a refused file logged with the running
//! configuration kept, plain-text logs when stdout is not a terminal, the
//! fleet gate against a killed and a paused `redis-server`, and a JWKS
//! endpoint that goes down and comes back.

use crate::support::quickstart as examples;
use crate::support::redis as redis_support;

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

pub(super) struct Quickstart {
    child: Child,
    pub(super) addr: SocketAddr,
    /// Lines of its stdout (the log), as they come.
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Drop for Quickstart {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Quickstart {
    pub(super) fn start(config: &std::path::Path) -> Quickstart {
        Self::start_with(config, &[])
    }

    fn start_with(config: &std::path::Path, args: &[&str]) -> Quickstart {
        let bin = examples::quickstart_binary();
        let mut child = Command::new(bin)
            .arg("--addr")
            .arg("127.0.0.1:0")
            .arg("--config")
            .arg(config)
            .args(args)
            .env("RUST_LOG", "info")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the quickstart");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut q = Quickstart {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            lines,
            seen: Vec::new(),
        };
        let line = q.wait_for("serving on");
        q.addr = examples::serving_addr(&line).unwrap_or_else(|| panic!("no address in {line:?}"));
        q
    }

    /// Waits (30 s at most: a loaded CI machine, a backoff of up to 7.5 s)
    /// for a log line containing `needle`; returns it.
    fn wait_for(&mut self, needle: &str) -> String {
        self.wait_for_any(&[needle])
    }

    /// Waits for a log line containing one of `needles`.
    fn wait_for_any(&mut self, needles: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if needles.iter().any(|n| line.contains(n)) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "no line with {needles:?} within 30 s; the quickstart printed:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Every log line of the next `d`.
    fn lines_for(&mut self, d: Duration) -> Vec<String> {
        let deadline = Instant::now() + d;
        let mut out = Vec::new();
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.seen.push(line.clone());
            out.push(line);
        }
        out
    }

    /// Scrapes `/metrics`, parsed.
    pub(super) fn scrape(&self) -> Vec<(String, HashMap<String, String>, f64)> {
        let text = get(self.addr, "/metrics").body;
        samples(&prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("a valid scrape"))
    }

    fn hangup(&self) {
        let status = Command::new("kill")
            .arg("-HUP")
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -HUP failed: {status}");
    }
}

pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) headers: HashMap<String, String>,
    pub(super) body: String,
}

pub(super) fn get(addr: SocketAddr, path: &str) -> Reply {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: quickstart\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
        .collect();
    // Bodies here are small: no chunked framing to undo for our checks
    // beyond what the parser tolerates (axum sends Content-Length).
    Reply {
        status,
        headers,
        body: body.to_owned(),
    }
}

fn statuses(addr: SocketAddr, path: &str, n: usize) -> Vec<u16> {
    (0..n).map(|_| get(addr, path).status).collect()
}

fn config_file(dir: &str, burst: u32) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ratelimit-ops-{dir}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("quickstart.toml");
    write_config(&path, burst);
    path
}

fn write_config(path: &std::path::Path, burst: u32) {
    let base = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/quickstart.toml")).unwrap();
    let anonymous = "[profiles.anonymous]\nrate = \"30/min\"\nburst = 5\n";
    assert!(
        base.contains(anonymous),
        "examples/quickstart.toml's anonymous profile moved"
    );
    let text = base.replacen(
        anonymous,
        &anonymous.replace("burst = 5", &format!("burst = {burst}")),
        1,
    );
    std::fs::write(path, text).unwrap();
}

/// Sample values by (name, labels) from a parsed scrape.
fn samples(scrape: &prometheus_parse::Scrape) -> Vec<(String, HashMap<String, String>, f64)> {
    scrape
        .samples
        .iter()
        .map(|s| {
            let labels = s.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let value = match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                prometheus_parse::Value::Histogram(ref buckets) => buckets.last().map_or(0.0, |b| b.count),
                prometheus_parse::Value::Summary(_) => f64::NAN,
            };
            (s.metric.clone(), labels, value)
        })
        .collect()
}

#[test]
fn metrics_after_a_burst_count_the_429s_with_help_and_type() {
    let config = config_file("metrics", 5);
    let q = Quickstart::start(&config);
    let seen = statuses(q.addr, "/public", 8);
    let rejected = seen.iter().filter(|&&s| s == 429).count();
    assert_eq!(seen.iter().filter(|&&s| s == 200).count(), 5, "{seen:?}");
    assert_eq!(rejected, 3, "{seen:?}");

    let reply = get(q.addr, "/metrics");
    assert_eq!(reply.status, 200);
    assert!(
        reply
            .headers
            .get("content-type")
            .is_some_and(|c| c.starts_with("text/plain")),
        "{:?}",
        reply.headers
    );
    assert!(
        !reply.headers.contains_key("ratelimit-limit"),
        "/metrics is not limited"
    );
    let text = reply.body;
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("a valid scrape");

    // Every ratelimit_ family is described (HELP and TYPE) and catalogued.
    let families: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .filter(|n| n.starts_with("ratelimit_"))
        .collect();
    for name in [
        "ratelimit_decisions_total",
        "ratelimit_retry_after_seconds",
        "ratelimit_store_keys",
        "ratelimit_store_max_keys",
        "ratelimit_store_memory_bytes",
        "ratelimit_store_overflow_total",
        "ratelimit_store_sweeps_total",
        "ratelimit_jwt_keys",
    ] {
        assert!(families.contains(name), "{name} not exported; families: {families:?}");
    }
    for name in &families {
        let m = ratelimit::metrics::find(name).unwrap_or_else(|| panic!("{name} is exported but not catalogued"));
        let help = scrape
            .docs
            .get(*name)
            .unwrap_or_else(|| panic!("{name} has no HELP line"));
        assert_eq!(help, m.help, "{name}");
        let kind = match m.kind {
            ratelimit::metrics::Kind::Counter => "counter",
            ratelimit::metrics::Kind::Gauge => "gauge",
            ratelimit::metrics::Kind::Histogram => "histogram",
            _ => unreachable!(),
        };
        assert!(
            text.contains(&format!("# TYPE {name} {kind}\n")),
            "{name} is not a {kind}"
        );
    }

    // The burst, counted: 5 allowed, 3 rejected, each decision once.
    let all = samples(&scrape);
    let decision = |d: &str| {
        all.iter()
            .filter(|(n, l, _)| {
                n == "ratelimit_decisions_total"
                    && l.get("route").map(String::as_str) == Some("quickstart::public")
                    && l.get("decision").map(String::as_str) == Some(d)
            })
            .map(|(_, l, v)| {
                assert_eq!(l.get("tier").map(String::as_str), Some("anonymous"));
                *v
            })
            .sum::<f64>()
    };
    assert_eq!(decision("allowed"), 5.0);
    assert_eq!(decision("rejected"), rejected as f64);
    assert_eq!(decision("shadow_rejected"), 0.0);
    let waits = all
        .iter()
        .find(|(n, l, _)| n == "ratelimit_retry_after_seconds" && l.get("route").is_some())
        .map(|(_, _, v)| *v);
    assert_eq!(waits, Some(rejected as f64), "one Retry-After observation per 429");
    let gauge = |name: &str| all.iter().find(|(n, _, _)| n == name).map(|(_, _, v)| *v);
    assert_eq!(gauge("ratelimit_store_max_keys"), Some(100_000.0));
    assert_eq!(gauge("ratelimit_jwt_keys"), Some(1.0), "the demo secret");
    // Published once a second by the runtime, not by the scrape.
    scrape_until(&q, "the client's cell in ratelimit_store_keys", |all| {
        value(all, "ratelimit_store_keys", &[]).is_some_and(|k| k >= 1.0)
    });

    // No client value in any label: only route, tier, decision, le, result,
    // reason.
    for (name, labels, _) in all.iter().filter(|(n, _, _)| n.starts_with("ratelimit_")) {
        for key in labels.keys() {
            assert!(
                ["route", "tier", "decision", "le", "result", "reason"].contains(&key.as_str()),
                "{name} has label {key}"
            );
        }
        assert!(!labels.values().any(|v| v.contains("127.0.0.1")), "{name}: {labels:?}");
    }
    // /metrics itself was not counted as a decision.
    assert!(!text.contains("route=\"/metrics\""));
}

#[test]
fn sighup_reloads_the_file_logs_the_change_and_keeps_the_old_one_when_refused() {
    let config = config_file("reload", 5);
    let mut q = Quickstart::start(&config);

    // A smaller burst, then the signal: the log names the change, and the
    // next requests meet it.
    write_config(&config, 2);
    q.hangup();
    let line = q.wait_for("SIGHUP: config reloaded");
    assert!(
        line.contains(r#"profile "anonymous": 30/min (burst 5) -> 30/min (burst 2)"#),
        "{line}"
    );
    assert_eq!(statuses(q.addr, "/public", 4), [200, 200, 429, 429]);

    // A file that does not parse: refused, said why, the running one stays.
    std::fs::write(&config, "[profiles.anonymous]\nrate = \"lots\"\n").unwrap();
    q.hangup();
    let line = q.wait_for("SIGHUP: config refused");
    assert!(line.contains("the running configuration stays"), "{line}");
    assert!(line.contains("profiles.anonymous.rate"), "names the field: {line}");

    // Files the runtime refuses: said once, on one line, with what to do.
    // A `[routes]` section that names no route: the closest names.
    write_config(&config, 2);
    let valid = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{valid}\n[routes.\"pubic\"]\ncost = 2\n")).unwrap();
    q.hangup();
    let line = q.wait_for(r#"[routes."pubic"]"#);
    assert!(line.contains("SIGHUP: config refused: "), "{line}");
    assert_eq!(line.matches("SIGHUP").count(), 1, "{line}");
    assert_eq!(line.matches("the running configuration stays").count(), 1, "{line}");
    assert!(line.contains("did you mean"), "{line}");
    // A profile a route names, missing: the quickstart's routes are one
    // application's (one module), so no hint about other applications'.
    std::fs::write(&config, valid.replace("[profiles.exports]", "[profiles.exported]")).unwrap();
    q.hangup();
    let line = q.wait_for("SIGHUP: config refused");
    assert!(line.contains(r#"profile("exports")"#), "{line}");

    // Reload of an identical file: said so.
    write_config(&config, 2);
    q.hangup();
    q.wait_for("SIGHUP: config reloaded, no changes");
    // (A refusal's later lines came before this one.)
    assert!(
        !q.seen.iter().any(|l| l.contains("routes_in")),
        "a hint about other applications' routes:\n{}",
        q.seen.join("\n")
    );

    // A restart-only section: applied nothing, said so.
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("max_keys = 100000", "max_keys = 5000");
    std::fs::write(&config, text).unwrap();
    q.hangup();
    let line = q.wait_for("keep their running settings until a restart");
    assert!(line.contains("[store]"), "{line}");

    // Logs on a pipe carry no colour codes.
    assert!(
        !q.seen.iter().any(|l| l.contains('\u{1b}')),
        "ANSI escapes in a non-terminal log:\n{}",
        q.seen.join("\n")
    );
}

/// The value of `name` whose labels include `labels`.
fn value(all: &[(String, HashMap<String, String>, f64)], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    all.iter()
        .find(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v)))
        .map(|(_, _, v)| *v)
}

/// Scrapes until `ok` holds (5 s at most): the runtime publishes gauges
/// once a second, and rounds run every 100 ms.
fn scrape_until(
    q: &Quickstart,
    what: &str,
    ok: impl Fn(&[(String, HashMap<String, String>, f64)]) -> bool,
) -> Vec<(String, HashMap<String, String>, f64)> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let all = q.scrape();
        if ok(&all) {
            return all;
        }
        assert!(Instant::now() < deadline, "{what}: not seen within 5 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn reasons(all: &[(String, HashMap<String, String>, f64)]) -> Vec<(String, f64)> {
    let mut r: Vec<_> = all
        .iter()
        .filter(|(n, _, _)| n == "ratelimit_global_degraded_reason")
        .map(|(_, l, v)| (l["reason"].clone(), *v))
        .collect();
    r.sort_by(|a, b| a.0.cmp(&b.0));
    r
}

/// The lines that report the gate going local-only (not, say, the
/// warning that slow rounds ration their reads).
const DEGRADE_LINES: &[&str] = &[
    "sync failed",
    "sync still failing",
    "no successful sync round recently",
    "refused part of a sync round",
    "limiting locally only",
];

fn fleet_lines(lines: &[String]) -> Vec<&String> {
    lines
        .iter()
        .filter(|l| l.contains("fleet gate") && DEGRADE_LINES.iter().any(|d| l.contains(d)))
        .collect()
}

#[test]
fn the_fleet_gate_reports_degraded_with_its_reason_and_logs_one_line_per_incident() {
    let mut redis = redis_support::RedisServer::start();
    let config = config_file("fleet", 5);
    let url = redis.url();
    let mut q = Quickstart::start_with(&config, &["--redis", &url]);
    assert_eq!(statuses(q.addr, "/public", 3), [200, 200, 200]);

    // In force: not degraded, rounds succeed. (The client's key is cold: it
    // is in the one round after its requests, and `synced_keys`, the last
    // round's keys, says 1 for that round's 100 ms only; a scrape on a busy
    // machine missed it. The gauge's series is there from the first round.)
    let all = scrape_until(&q, "successful rounds", |all| {
        value(all, "ratelimit_global_synced_keys", &[]).is_some()
            && value(all, "ratelimit_global_sync_rounds_total", &[("result", "ok")]).is_some_and(|n| n >= 2.0)
    });
    assert_eq!(value(&all, "ratelimit_global_degraded", &[]), Some(0.0));
    assert_eq!(
        reasons(&all),
        [
            ("stalled".to_owned(), 0.0),
            ("sync_error".to_owned(), 0.0),
            ("sync_timeout".to_owned(), 0.0),
            ("task_stopped".to_owned(), 0.0)
        ]
    );
    assert!(
        value(&all, "ratelimit_global_sync_duration_seconds", &[]).is_some_and(|rounds| rounds >= 1.0),
        "the round duration is a histogram with buckets (the parser reads its +Inf count)"
    );

    // Redis gone: one line for the incident (the next comes after 10 s of
    // failures at the earliest), degraded with reason sync_error.
    redis.kill();
    let first = q.wait_for_any(DEGRADE_LINES);
    assert!(first.contains("sync failed"), "{first}");
    let after = q.lines_for(Duration::from_secs(3));
    assert!(
        fleet_lines(&after).is_empty(),
        "a second line for one failure: {first}\n{after:?}"
    );
    let all = scrape_until(&q, "degraded", |all| {
        value(all, "ratelimit_global_degraded", &[]) == Some(1.0)
    });
    assert_eq!(
        value(&all, "ratelimit_global_degraded_reason", &[("reason", "sync_error")]),
        Some(1.0),
        "{:?}",
        reasons(&all)
    );
    assert_eq!(
        reasons(&all).iter().filter(|(_, v)| *v == 1.0).count(),
        1,
        "{:?}",
        reasons(&all)
    );
    assert!(value(&all, "ratelimit_global_sync_rounds_total", &[("result", "error")]).is_some_and(|n| n >= 1.0));
    // Limiting goes on locally meanwhile.
    assert_eq!(get(q.addr, "/public").status, 200);

    // Back: recovered, said once, not degraded.
    redis.restart();
    q.wait_for("sync recovered");
    let all = scrape_until(&q, "recovered", |all| {
        value(all, "ratelimit_global_degraded", &[]) == Some(0.0)
    });
    assert!(reasons(&all).iter().all(|(_, v)| *v == 0.0), "{:?}", reasons(&all));

    // A stalled server (it accepts, never answers): one line again, and a
    // reason that says it is slow, not refusing.
    redis.pause();
    let first = q.wait_for_any(DEGRADE_LINES);
    let after = q.lines_for(Duration::from_secs(3));
    assert!(
        fleet_lines(&after).is_empty(),
        "a second line for one stall: {first}\n{after:?}"
    );
    let all = scrape_until(&q, "degraded by the stall", |all| {
        value(all, "ratelimit_global_degraded", &[]) == Some(1.0)
    });
    let on: Vec<_> = reasons(&all).into_iter().filter(|(_, v)| *v == 1.0).collect();
    assert!(
        on == [("sync_timeout".to_owned(), 1.0)] || on == [("stalled".to_owned(), 1.0)],
        "{on:?} after {first}"
    );
    redis.resume();
    q.wait_for("sync recovered");
}

/// docs/operations.md lists every metric of the catalogue, with its type,
/// and names none that does not exist.
#[test]
fn the_operations_guide_lists_every_metric() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md")).unwrap();
    for m in ratelimit::metrics::CATALOGUE {
        let kind = match m.kind {
            ratelimit::metrics::Kind::Counter => "counter",
            ratelimit::metrics::Kind::Gauge => "gauge",
            ratelimit::metrics::Kind::Histogram => "histogram",
            _ => unreachable!(),
        };
        let row = format!("| `{}` | {kind} |", m.name);
        assert!(doc.contains(&row), "docs/operations.md has no row {row}");
    }
    for word in doc.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("ratelimit_") && word.len() > "ratelimit_".len() {
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| word.strip_suffix(s))
                .filter(|b| ratelimit::metrics::find(b).is_some())
                .unwrap_or(word);
            assert!(
                ratelimit::metrics::find(base).is_some(),
                "docs/operations.md names {word}, which is not exported"
            );
        }
    }
}

/// A JWKS endpoint on loopback: serves `jwks` while `up` is set, 503 otherwise.
fn jwks_server(jwks: String, up: std::sync::Arc<std::sync::atomic::AtomicBool>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/jwks.json?api_key=idp-secret", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut buf = [0u8; 4096];
            let mut n = 0;
            while !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf[n..]) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => n += k,
                }
            }
            let reply = if up.load(std::sync::atomic::Ordering::SeqCst) {
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{jwks}",
                    jwks.len()
                )
            } else {
                "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_owned()
            };
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    url
}

/// A token naming a `kid` the JWKS does not have: the verifier asks the
/// endpoint again (at most once per cooldown).
fn unknown_kid_token(n: u32) -> String {
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some(format!("rotated-{n}"));
    let claims = serde_json::json!({"sub": "u", "exp": jsonwebtoken::get_current_timestamp() + 600});
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(include_bytes!("../fixtures/rsa2_private.pem")).unwrap();
    jsonwebtoken::encode(&header, &claims, &key).unwrap()
}

fn get_with_token(addr: SocketAddr, path: &str, token: &str) -> u16 {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: quickstart\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    String::from_utf8_lossy(&raw)
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn jwks_fetches_are_counted_and_a_failing_refresh_logs_once_without_the_query() {
    let up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let jwks = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/jwks.json")).unwrap();
    let url = jwks_server(jwks, up.clone());
    let config = config_file("jwks", 5);
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "[jwt]\n",
        &format!("[jwt]\njwks_url = \"{url}\"\njwks_cooldown = \"200ms\"\n"),
    );
    std::fs::write(&config, text).unwrap();
    let mut q = Quickstart::start(&config);

    let all = scrape_until(&q, "the JWKS's keys", |all| {
        value(all, "ratelimit_jwt_keys", &[]) == Some(2.0)
    });
    assert_eq!(
        value(&all, "ratelimit_jwks_fetches_total", &[("result", "ok")]),
        Some(1.0)
    );

    // The provider goes down; a token names a new kid: one failed refresh,
    // one line, naming the URL without its query (an API key there).
    up.store(false, std::sync::atomic::Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        get_with_token(q.addr, "/me", &unknown_kid_token(1)),
        200,
        "anonymous, served"
    );
    let line = q.wait_for("JWKS refresh failed");
    assert!(line.contains("/jwks.json") && !line.contains("idp-secret"), "{line}");
    assert!(line.contains("keys_in_force=2"), "{line}");
    // A second failure within the minute: counted, not logged.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(get_with_token(q.addr, "/me", &unknown_kid_token(2)), 200);
    scrape_until(&q, "two failed fetches", |all| {
        value(all, "ratelimit_jwks_fetches_total", &[("result", "error")]) == Some(2.0)
    });
    let quiet = q.lines_for(Duration::from_millis(500));
    assert!(!quiet.iter().any(|l| l.contains("JWKS refresh failed")), "{quiet:?}");

    // Back: the next refresh succeeds and says so, with the count.
    up.store(true, std::sync::atomic::Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(300));
    get_with_token(q.addr, "/me", &unknown_kid_token(3));
    let line = q.wait_for("JWKS refresh succeeded again");
    assert!(line.contains("failed=2"), "{line}");
    let all = scrape_until(&q, "the second good fetch", |all| {
        value(all, "ratelimit_jwks_fetches_total", &[("result", "ok")]) == Some(2.0)
    });
    assert_eq!(value(&all, "ratelimit_jwt_keys", &[]), Some(2.0));
    let leaks: Vec<_> = q.seen.iter().filter(|l| l.contains("idp-secret")).collect();
    assert!(leaks.is_empty(), "the query reaches the log: {leaks:?}");
}
