//! Long windows (per-day, per-week, per-month profiles) through a real axum
//! router under a manual clock: `RateLimit-Policy`'s `w` in whole seconds
//! (the period, 86400 / 604800 / 2592000, for a profile whose burst is its
//! count; burst x emission interval otherwise), `t`, `RateLimit-Reset` and
//! `Retry-After` for a spent daily quota, the structured fields parsed as
//! RFC 9651 Lists with `sfv`; and with the fleet gate over a real
//! `redis-server` (started by the test, on a free port: a test that cannot
//! start one fails), a daily profile gets its burst on each instance while
//! a per-minute profile stays fleet-limited, and startup says so once.

use crate::support::redis as redis_support;
use crate::support::sf;

use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::{Request, Response, StatusCode};
use ratelimit::axum::RateLimit;
use ratelimit::config::Config;
use ratelimit::key::PeerAddr;
use ratelimit::{rate_limit, ManualClock, Quota};
use sf::{limit_triples, policy_triples};
use tower::ServiceExt;

const CONFIG: &str = r#"
default_profile = "daily"

# One unit every 8.64 s, 20 at once.
[profiles.daily]
rate = "10000/d"
burst = 20

# The whole day's 10,000 at once (the default burst: the count).
[profiles.full_day]
rate = "10000/day"

[profiles.weekly]
rate = "100000/week"

# A month is 30 days.
[profiles.monthly]
rate = "1000000/month"

# The profile of the `fleet` module's route below (this module's routes
# include it: startup checks every route of a module against its config).
[profiles.minute]
rate = "60/min"

[routes."bulk"]
profile = "full_day"
cost = 10000

[headers]
style = "both"
"#;

#[rate_limit(key = ip, resolve = [default], name = "daily", layer)]
async fn daily() -> &'static str {
    "daily"
}

#[rate_limit(key = ip, resolve = [profile("full_day"), default], name = "full", layer)]
async fn full() -> &'static str {
    "full"
}

#[rate_limit(key = ip, resolve = [profile("full_day"), default], name = "bulk", layer)]
async fn bulk() -> &'static str {
    "bulk"
}

#[rate_limit(key = ip, resolve = [profile("weekly"), default], name = "weekly", layer)]
async fn weekly() -> &'static str {
    "weekly"
}

#[rate_limit(key = ip, resolve = [profile("monthly"), default], name = "monthly", layer)]
async fn monthly() -> &'static str {
    "monthly"
}

async fn app(clock: &ManualClock) -> axum::routing::RouterIntoService<Body> {
    let config = Config::from_toml_str(CONFIG).unwrap();
    assert_eq!(
        config.profile("daily").unwrap().quota,
        Quota::per_day(10_000).with_burst(20)
    );
    assert_eq!(config.profile("weekly").unwrap().quota, Quota::per_week(100_000));
    let rl = RateLimit::builder(config)
        .routes_in(module_path!())
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    Router::new()
        .route("/daily", get(daily))
        .route("/full", get(full))
        .route("/bulk", get(bulk))
        .route("/weekly", get(weekly))
        .route("/monthly", get(monthly))
        .layer(rl.layer())
        .into_service()
}

async fn get_from(app: &axum::routing::RouterIntoService<Body>, path: &str, peer: &str) -> Response<Body> {
    let mut r = Request::builder().uri(path).body(Body::empty()).unwrap();
    r.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
    app.clone().oneshot(r).await.unwrap()
}

fn header<B>(r: &Response<B>, name: &str) -> Option<u64> {
    r.headers().get(name).map(|v| v.to_str().unwrap().parse().unwrap())
}

/// `(Limit, Remaining, Reset)` of draft-06.
fn draft06<B>(r: &Response<B>) -> (Option<u64>, Option<u64>, Option<u64>) {
    (
        header(r, "ratelimit-limit"),
        header(r, "ratelimit-remaining"),
        header(r, "ratelimit-reset"),
    )
}

fn s(name: &str) -> String {
    name.to_owned()
}

#[tokio::test]
async fn w_is_the_period_in_seconds_for_day_week_and_month_profiles() {
    let clock = ManualClock::new();
    let app = app(&clock).await;
    for (path, name, q, w, t) in [
        // 86,400 s / 10,000 = 8.64 s a unit: t rounds up to 9.
        ("/full", "full/full_day", 10_000, 86_400, 9),
        // 604,800 s / 100,000 = 6.048 s.
        ("/weekly", "weekly/weekly", 100_000, 604_800, 7),
        // 30 days = 2,592,000 s / 1,000,000 = 2.592 s.
        ("/monthly", "monthly/monthly", 1_000_000, 2_592_000, 3),
    ] {
        let r = get_from(&app, path, "192.0.2.1:1").await;
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(policy_triples(&r), vec![(s(name), q, Some(w))], "{path}");
        assert_eq!(limit_triples(&r), vec![(s(name), q - 1, Some(t))], "{path}");
        // draft-06: Reset is the time to a full bucket: one unit's worth.
        assert_eq!(
            draft06(&r),
            (Some(q as u64), Some(q as u64 - 1), Some(t as u64)),
            "{path}"
        );
    }
    // With a burst below the count, `w` is the time the burst takes to
    // refill (20 x 8.64 s = 172.8 s, rounded up), so q/w is still the rate.
    let r = get_from(&app, "/daily", "192.0.2.1:1").await;
    assert_eq!(policy_triples(&r), vec![(s("daily/daily"), 20, Some(173))]);
    assert_eq!(limit_triples(&r), vec![(s("daily/daily"), 19, Some(9))]);
}

#[tokio::test]
async fn a_spent_daily_burst_says_the_real_wait() {
    let clock = ManualClock::new();
    let app = app(&clock).await;
    let peer = "192.0.2.2:1";
    for i in 0..20 {
        let r = get_from(&app, "/daily", peer).await;
        assert_eq!(r.status(), 200, "request {i} of the burst");
    }
    let r = get_from(&app, "/daily", peer).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    // The next unit is 8.64 s away: t and Retry-After say 9; a full
    // bucket is 172.8 s away: Reset says 173.
    assert_eq!(limit_triples(&r), vec![(s("daily/daily"), 0, Some(9))]);
    assert_eq!(policy_triples(&r), vec![(s("daily/daily"), 20, Some(173))]);
    assert_eq!(header(&r, "retry-after"), Some(9));
    assert_eq!(draft06(&r), (Some(20), Some(0), Some(173)));

    // 4 s later: 4.64 s to go, rounded up.
    clock.advance(Duration::from_secs(4));
    let r = get_from(&app, "/daily", peer).await;
    assert_eq!(r.status(), 429);
    assert_eq!(limit_triples(&r), vec![(s("daily/daily"), 0, Some(5))]);
    assert_eq!(header(&r, "retry-after"), Some(5));
    // At 8.64 s exactly, one more; then the next is 8.64 s away again.
    clock.advance(Duration::from_millis(4_640));
    let r = get_from(&app, "/daily", peer).await;
    assert_eq!(r.status(), 200);
    assert_eq!(limit_triples(&r), vec![(s("daily/daily"), 0, Some(9))]);
    assert_eq!(get_from(&app, "/daily", peer).await.status(), 429);
}

#[tokio::test]
async fn a_spent_daily_quota_waits_a_unit_or_a_whole_day() {
    let clock = ManualClock::new();
    let app = app(&clock).await;
    // The whole day's 10,000, one at a time.
    let peer = "192.0.2.3:1";
    for i in 0..10_000 {
        let r = get_from(&app, "/full", peer).await;
        assert_eq!(r.status(), 200, "request {i}");
    }
    let r = get_from(&app, "/full", peer).await;
    assert_eq!(r.status(), 429);
    assert_eq!(limit_triples(&r), vec![(s("full/full_day"), 0, Some(9))]);
    assert_eq!(policy_triples(&r), vec![(s("full/full_day"), 10_000, Some(86_400))]);
    assert_eq!(header(&r, "retry-after"), Some(9));
    assert_eq!(draft06(&r), (Some(10_000), Some(0), Some(86_400)));

    // A request costing the whole day (cost 10,000, [routes."bulk"]): the
    // second must wait the whole day, and Retry-After says so (not capped).
    let peer = "192.0.2.4:1";
    assert_eq!(get_from(&app, "/bulk", peer).await.status(), 200);
    let r = get_from(&app, "/bulk", peer).await;
    assert_eq!(r.status(), 429);
    assert_eq!(header(&r, "retry-after"), Some(86_400));
    assert_eq!(limit_triples(&r), vec![(s("bulk/full_day"), 0, Some(9))]);
    assert_eq!(draft06(&r), (Some(10_000), Some(0), Some(86_400)));
    clock.advance(Duration::from_secs(86_400) - Duration::from_nanos(1));
    let r = get_from(&app, "/bulk", peer).await;
    assert_eq!(r.status(), 429);
    assert_eq!(header(&r, "retry-after"), Some(1));
    clock.advance(Duration::from_nanos(1));
    assert_eq!(get_from(&app, "/bulk", peer).await.status(), 200);
}

// ---- with the fleet gate: a real redis-server, two instances -------------

mod fleet {
    use super::*;
    use ratelimit::config::FleetSecret;
    use redis_support::RedisServer;
    use std::time::Instant;

    const SECRET: &[u8] = b"long windows fleet secret, 32 b.";

    #[rate_limit(key = ip, resolve = [default], name = "quota")]
    async fn quota() -> &'static str {
        "quota"
    }

    #[rate_limit(key = ip, resolve = [profile("minute"), default], name = "minute")]
    async fn minute() -> &'static str {
        "minute"
    }

    async fn instance(url: &str, clock: &ManualClock) -> (RateLimit, axum::routing::RouterIntoService<Body>) {
        // daily: 10000/d burst 20 over a 10 s window (budget 1.16 < 20):
        // locally only. minute: 60/min burst 100, a fleet budget of 10 per
        // window, so only the fleet limit binds.
        let toml = format!(
            "default_profile = \"daily\"\n[profiles.daily]\nrate = \"10000/d\"\nburst = 20\n\
             [profiles.minute]\nrate = \"60/min\"\nburst = 100\n\
             [global]\nredis_url = \"{url}\"\nsync_interval = \"50ms\"\nwindow = \"10s\"\n"
        );
        let mut config = Config::from_toml_str(&toml).unwrap();
        config.global.as_mut().unwrap().key_secret = Some(FleetSecret(SECRET.to_vec()));
        let rl = RateLimit::builder(config)
            .routes_in(module_path!())
            .clock(clock.clone())
            .build()
            .await
            .unwrap();
        let app = Router::new()
            .route("/quota", get(quota))
            .route("/minute", get(minute))
            .with_state(rl.clone())
            .into_service();
        (rl, app)
    }

    async fn rounds_after(rl: &RateLimit, at_least: u64) {
        let gate = rl.gate().expect("[global] builds a gate");
        let start = Instant::now();
        while gate.status().rounds < at_least {
            assert!(start.elapsed() < Duration::from_secs(5), "no sync round");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn statuses(app: &axum::routing::RouterIntoService<Body>, path: &str, n: usize) -> Vec<u16> {
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(get_from(app, path, "192.0.2.50:1").await.status().as_u16());
        }
        out
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_daily_burst_is_granted_per_instance_while_a_per_minute_limit_holds_fleet_wide() {
        let (log, _log) = crate::support::log::Captured::on_this_thread("ratelimit=warn");

        let server = RedisServer::start();
        let clock = ManualClock::new();
        let (a, app_a) = instance(&server.url(), &clock).await;
        // Startup: one warning, naming the daily profile (not the other).
        let warned = log.lines_with("period longer than an hour");
        assert_eq!(warned.len(), 1, "{warned:?}");
        assert!(warned[0].contains("WARN"), "{}", warned[0]);
        assert!(warned[0].contains("daily (10000/d)"), "{}", warned[0]);
        assert!(!warned[0].contains("minute"), "{}", warned[0]);
        let (b, app_b) = instance(&server.url(), &clock).await;
        assert_eq!(
            log.lines_with("period longer than an hour").len(),
            2,
            "one per instance"
        );
        rounds_after(&a, 2).await;
        rounds_after(&b, 2).await;
        let gate = a.gate().unwrap();
        assert_eq!(gate.health(), ratelimit::fleet::FleetHealth::InForce);
        assert!(gate.limits_locally(&Quota::per_day(10_000).with_burst(20)));

        // The daily burst on instance A: all 20 (the fleet budget, 1.16 per
        // window, would have let one through), then the local limit.
        assert_eq!(
            statuses(&app_a, "/quota", 21).await,
            [vec![200; 20], vec![429]].concat()
        );
        // The per-minute profile on the same gate: fleet-limited, a key new
        // to A held to its share of the fleet budget of 10 (two instances).
        assert_eq!(statuses(&app_a, "/minute", 6).await, [vec![200; 5], vec![429]].concat());

        // After rounds, B sees A's per-minute use (one admitted first: a key
        // new to B, the overshoot the model allows) ...
        let seen = a.gate().unwrap().status().rounds;
        rounds_after(&a, seen + 2).await;
        assert_eq!(statuses(&app_b, "/minute", 1).await, [200]);
        let seen = b.gate().unwrap().status().rounds;
        rounds_after(&b, seen + 2).await;
        assert_eq!(statuses(&app_b, "/minute", 1).await, [429]);
        // ... while the daily client gets its own burst there: the
        // documented worst case, N instances admit N times the local limit.
        assert_eq!(
            statuses(&app_b, "/quota", 21).await,
            [vec![200; 20], vec![429]].concat()
        );

        // Only the per-minute client reached Redis (the manual clock stays
        // in one epoch: one hash); the daily one left no fleet state.
        // (Beside the roster of live instances, which each joins, and the
        // list of hot keys, where A marked the per-minute one.)
        let keys: Vec<String> = server
            .keys()
            .into_iter()
            .filter(|k| !k.contains(":instances:") && !k.contains(":hot:"))
            .collect();
        assert_eq!(keys.len(), 1, "{keys:?}");
        assert_eq!(a.gate().unwrap().status().untracked, 0);
        assert_eq!(a.gate().unwrap().health(), ratelimit::fleet::FleetHealth::InForce);
    }
}
