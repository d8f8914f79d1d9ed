//! `rediss://` against real `redis-server` processes with TLS, a private CA
//! and certificates made here with rcgen: the CA in `ca_file` is trusted and
//! nothing else is, the hostname is checked, a cluster works over TLS, the
//! `[global] ca_file` setting is checked at startup, `[tls] ca_file` applies
//! to the runtime's Redis client (`[global] ca_file` wins), and the library never
//! installs a process-wide rustls `CryptoProvider` (an application that
//! installs its own keeps it). Servers listen on free loopback ports (never
//! 6379, and no plain-text port); a test that cannot start one fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::pki;
use crate::support::redis as redis_support;

use pki::Pki;
use ratelimit::config::Config;
use ratelimit::fleet::{FleetGate, FleetStore, GateSettings, RedisSettings, RedisStore};
use ratelimit::{Limiter, ManualClock, MemoryStore, Quota};
use rustls::crypto::CryptoProvider;

const TTL: Duration = Duration::from_secs(30);

/// A `redis-server` with TLS only (`--port 0`), stopped when dropped.
struct TlsServer {
    port: u16,
    child: Child,
    dir: PathBuf,
    ca: PathBuf,
}

impl TlsServer {
    /// A server on a free port. The port is free when picked, but another
    /// process (a parallel test's server or client) may take it before
    /// `redis-server` binds it: then the server exits, and another port is
    /// tried. The server that answers must be this one (its `INFO` names
    /// the child's pid), not another test's that took the port.
    fn start(pki: &Pki, cert: &(PathBuf, PathBuf), cluster: bool) -> TlsServer {
        let mut tried = Vec::new();
        for _ in 0..5 {
            match Self::try_start(pki, cert, cluster) {
                Ok(server) => return server,
                Err(e) => tried.push(e),
            }
        }
        panic!("redis-server with TLS did not start (built without TLS?): {tried:?}");
    }

    fn try_start(pki: &Pki, cert: &(PathBuf, PathBuf), cluster: bool) -> Result<TlsServer, String> {
        let port = redis_support::free_port();
        let dir = pki.dir.join(format!("node-{port}"));
        std::fs::create_dir_all(&dir).expect("node dir");
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", "0", "--bind", "127.0.0.1", "--tls-port", &port.to_string()])
            .arg("--tls-cert-file")
            .arg(&cert.0)
            .arg("--tls-key-file")
            .arg(&cert.1)
            .arg("--tls-ca-cert-file")
            .arg(&pki.ca)
            .args(["--tls-auth-clients", "no", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if cluster {
            cmd.args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--tls-cluster",
                "yes",
            ]);
        }
        let child = cmd
            .spawn()
            .expect("start redis-server (scripts/test installs it; the test fails rather than skip)");
        let ours = format!("process_id:{}", child.id());
        let mut server = TlsServer {
            port,
            child,
            dir,
            ca: pki.ca.clone(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !server.cli(&["INFO", "server"]).lines().any(|l| l.trim() == ours) {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("redis-server with TLS on port {port} exited ({status})"));
            }
            if Instant::now() > deadline {
                return Err(format!("redis-server with TLS on port {port} did not answer"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    /// `redis-cli` over TLS, trusting the test CA.
    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .arg("--tls")
            .arg("--cacert")
            .arg(&self.ca)
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn store(url: &str, ca_file: Option<&Path>, cluster: bool) -> RedisStore {
    RedisStore::new(url, {
        let mut settings = RedisSettings::default()
            .with_cluster(cluster)
            .with_connect_timeout(Duration::from_secs(2))
            .with_response_timeout(Duration::from_secs(1));
        settings.ca_file = ca_file.map(Path::to_path_buf);
        settings
    })
    .expect("a rediss:// store")
}

/// A round with nothing to sync: a PING, over TLS.
async fn ping(store: &RedisStore) -> Result<(), String> {
    store.sync(&[], TTL).await.map(drop).map_err(|e| e.to_string())
}

/// One key through a gate: INCRBY, PEXPIRE and MGET over TLS.
async fn gate_round(store: &RedisStore) {
    let clock = ManualClock::new();
    let settings = GateSettings::new(b"fleet secret for the tests, 32 B").with_window(Duration::from_secs(10));
    let gate = FleetGate::new(settings, &clock).expect("gate");
    let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    // A hot key (cold ones never reach Redis): marked, and the mark read.
    gate.mark_hot(store, &clock, &[gate.fleet_id(1, "tls-user")])
        .await
        .expect("a hot mark over TLS");
    gate.sync_once(store, &clock).await.expect("a round over TLS");
    assert!(gate
        .check(&limiter, 1, "tls-user", &Quota::per_minute(600), 1)
        .is_allowed());
    let report = gate.sync_once(store, &clock).await.expect("a gate round over TLS");
    assert_eq!((report.keys, report.pushed), (1, 1));
}

/// The library installed no process-wide provider.
fn no_process_provider() {
    assert!(
        CryptoProvider::get_default().is_none(),
        "a process-default rustls CryptoProvider was installed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_ca_is_trusted_through_ca_file_and_only_then() {
    let pki = Pki::new("trust");
    let server = TlsServer::start(&pki, &pki.server("server", &["localhost", "127.0.0.1"]), false);

    // (a) ca_file: a PING round and a gate round, by IP and by name.
    for host in ["127.0.0.1", "localhost"] {
        let url = format!("rediss://{host}:{}/", server.port);
        let s = store(&url, Some(&pki.ca), false);
        ping(&s).await.unwrap_or_else(|e| panic!("{url}: {e}"));
        gate_round(&s).await;
    }
    assert!(
        !server.cli(&["--scan"]).trim().is_empty(),
        "the gate round wrote no key"
    );
    // AUTH and SELECT run on our TLS stream too.
    assert_eq!(server.cli(&["CONFIG", "SET", "requirepass", "s3cret"]).trim(), "OK");
    let authed = store(
        &format!("rediss://:s3cret@127.0.0.1:{}/2", server.port),
        Some(&pki.ca),
        false,
    );
    ping(&authed).await.expect("AUTH and SELECT over TLS");
    let wrong = store(
        &format!("rediss://:nope@127.0.0.1:{}/", server.port),
        Some(&pki.ca),
        false,
    );
    assert!(ping(&wrong).await.is_err(), "a wrong password was accepted");

    // (b) Without ca_file the webpki roots do not know the private CA.
    let untrusted = store(&format!("rediss://127.0.0.1:{}/", server.port), None, false);
    let err = ping(&untrusted).await.expect_err("an unknown CA was trusted");
    println!("without ca_file: {err}");
    assert!(
        err.contains("invalid peer certificate") && err.contains("UnknownIssuer"),
        "unclear error: {err}"
    );

    // (d) Nothing of the above installed a process-wide provider.
    no_process_provider();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_is_refused() {
    let pki = Pki::new("name");
    let server = TlsServer::start(&pki, &pki.server("other", &["other.example"]), false);
    for host in ["127.0.0.1", "localhost"] {
        let s = store(&format!("rediss://{host}:{}/", server.port), Some(&pki.ca), false);
        let err = ping(&s).await.expect_err("a certificate for another name was accepted");
        println!("another name, {host}: {err}");
        assert!(
            err.contains("invalid peer certificate") && err.contains("not valid for name"),
            "unclear error for {host}: {err}"
        );
    }
    no_process_provider();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_tls_with_a_private_ca() {
    let pki = Pki::new("cluster");
    let cert = pki.server("node", &["localhost", "127.0.0.1"]);
    let nodes: Vec<TlsServer> = (0..3).map(|_| TlsServer::start(&pki, &cert, true)).collect();
    let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
    let out = Command::new("redis-cli")
        .arg("--tls")
        .arg("--cacert")
        .arg(&pki.ca)
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli --cluster create");
    assert!(
        out.status.success(),
        "cluster create failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    for n in &nodes {
        while !n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok") {
            assert!(Instant::now() < deadline, "cluster did not become ok");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let url = format!("rediss://127.0.0.1:{}/", nodes[0].port);
    let s = store(&url, Some(&pki.ca), true);
    ping(&s).await.expect("a PING round on the TLS cluster");
    // 16 shards, one per slot: the round reaches every node.
    let clock = ManualClock::new();
    let gate = FleetGate::new(
        GateSettings::new(b"fleet secret for the tests, 32 B").with_window(Duration::from_secs(10)),
        &clock,
    )
    .expect("gate");
    let limiter = Limiter::new(MemoryStore::default(), clock.clone());
    let ids: Vec<u64> = (0..64u32).map(|k| gate.fleet_id(1, &k)).collect();
    gate.mark_hot(&s, &clock, &ids)
        .await
        .expect("hot marks on the TLS cluster");
    gate.sync_once(&s, &clock).await.expect("a round on the TLS cluster");
    for k in 0..64u32 {
        assert!(gate.check(&limiter, 1, &k, &Quota::per_minute(600), 1).is_allowed());
    }
    let report = gate
        .sync_once(&s, &clock)
        .await
        .expect("a gate round on the TLS cluster");
    assert_eq!((report.keys, report.pushed), (64, 64));
    // Another ca_file for a second cluster store in this process is refused
    // (node connections share one TLS setup), with the reason.
    let other = Pki::new("cluster-other");
    let refused = RedisStore::new(
        &url,
        RedisSettings::default()
            .with_cluster(true)
            .with_ca_file(other.ca.clone()),
    )
    .expect_err("two cluster trust settings in one process");
    println!("second cluster ca_file: {refused}");
    assert!(refused.to_string().contains("another ca_file"), "{refused}");
    // The same one is fine.
    ping(&store(&url, Some(&pki.ca), true))
        .await
        .expect("a second cluster store");
    // Without it, the cluster's CA is unknown.
    drop(s);
    let untrusted = RedisStore::new(&url, RedisSettings::default().with_cluster(true)).expect("a store");
    let err = ping(&untrusted).await.expect_err("an unknown CA was trusted");
    println!("cluster without ca_file: {err}");
    assert!(err.contains("UnknownIssuer"), "unclear error: {err}");
    no_process_provider();
}

/// An application that installed its own provider keeps it, and TLS works.
/// Run in a child process: installing a provider here would spoil the
/// other tests' check that the library installs none.
#[test]
fn an_application_provider_is_kept() {
    const CHILD: &str = "RATELIMIT_TLS_TEST_CHILD";
    if std::env::var_os(CHILD).is_none() {
        // This test's name in the suite: its module path without the crate.
        let module = module_path!().split_once("::").map_or("", |(_, m)| m);
        let name = format!("{module}::an_application_provider_is_kept");
        let out = Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", name.as_str(), "--nocapture", "--test-threads", "1"])
            .env(CHILD, "1")
            .output()
            .expect("run the test binary");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "child failed:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    #[allow(deprecated)] // *ring*, as the library (rustls 0.23.48 deprecates it)
    let installed = rustls::crypto::ring::default_provider().install_default();
    assert!(installed.is_ok(), "a provider was installed before the application's");
    let before = CryptoProvider::get_default().map(std::sync::Arc::as_ptr);
    let pki = Pki::new("app");
    let server = TlsServer::start(&pki, &pki.server("server", &["127.0.0.1"]), false);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let s = store(&format!("rediss://127.0.0.1:{}/", server.port), Some(&pki.ca), false);
        ping(&s).await.expect("TLS with the application's provider");
    });
    let after = CryptoProvider::get_default().map(std::sync::Arc::as_ptr);
    assert_eq!(before, after, "the application's provider was replaced");
}

/// `[global] ca_file`: checked when the configuration is loaded, with the
/// field and the reason.
#[test]
fn ca_file_is_checked_at_startup() {
    let pki = Pki::new("config");
    let (cert, key) = pki.server("server", &["127.0.0.1"]);
    let bad_der = pki.dir.join("bad.pem");
    std::fs::write(
        &bad_der,
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    )
    .expect("write");
    let toml = |url: &str, path: &Path| {
        format!(
            "[profiles.a]\nrate = \"1/s\"\n[global]\nredis_url = \"{url}\"\nkey_secret_env = \"S\"\nca_file = {:?}\n",
            path.display().to_string()
        )
    };
    let ok = Config::from_toml_str(&toml("rediss://h:1/", &pki.ca)).expect("a valid ca_file");
    assert_eq!(ok.global.and_then(|g| g.ca_file), Some(pki.ca.clone()));
    // A server certificate is a certificate too: it parses (trusting it is
    // the operator's choice).
    assert!(Config::from_toml_str(&toml("rediss://h:1/", &cert)).is_ok());

    let missing = pki.dir.join("nope.pem");
    let cases: [(String, &str); 4] = [
        (toml("rediss://h:1/", &missing), "No such file"),
        (toml("rediss://h:1/", &key), "no PEM certificate"),
        (toml("rediss://h:1/", &bad_der), "certificate 1"),
        (toml("redis://h:1/", &pki.ca), "for rediss://"),
    ];
    for (text, words) in &cases {
        let err = Config::from_toml_str(text).expect_err(words);
        let message = err.to_string();
        println!("config: {message}");
        assert_eq!(err.field(), Some("global.ca_file"), "{message}");
        assert_eq!(err.line(), Some(6), "{message}");
        assert!(message.contains(words), "{message} (expected {words:?})");
    }
    // The same checks when a store is made in code.
    let in_code =
        |url: &str, path: &Path| RedisStore::new(url, RedisSettings::default().with_ca_file(path.to_path_buf()));
    let err = in_code("rediss://127.0.0.1:1/", &missing).expect_err("a missing ca_file");
    assert!(err.to_string().contains("nope.pem"), "{err}");
    assert!(in_code("redis://127.0.0.1:1/", &pki.ca).is_err(), "ca_file without TLS");
    assert!(in_code("rediss://127.0.0.1:1/#insecure", &pki.ca).is_err(), "#insecure");
    assert!(in_code("rediss://127.0.0.1:1/", &pki.ca).is_ok());
}

#[ratelimit::rate_limit(key = header("x-user"), resolve = [default])]
async fn fleet_limited() -> &'static str {
    "ok"
}

/// A runtime with `[global]` on `server` (key prefix `prefix`), `[tls]
/// ca_file = tls_ca` and `[global] ca_file = global_ca`: whether one
/// request's key reached Redis within `wait` (a sync round over TLS).
async fn runtime_syncs(
    server: &TlsServer,
    prefix: &str,
    tls_ca: Option<&Path>,
    global_ca: Option<&Path>,
    wait: Duration,
) -> bool {
    use tower::ServiceExt;
    let path = |p: &Path| format!("{:?}", p.display().to_string());
    let mut text = format!(
        "default_profile = \"d\"\n[profiles.d]\nrate = \"600/min\"\n\
         [global]\nredis_url = \"rediss://localhost:{}/\"\nkey_prefix = {prefix:?}\nwindow = \"2s\"\n\
         sync_interval = \"50ms\"\nconnect_timeout = \"1s\"\n",
        server.port
    );
    if let Some(ca) = global_ca {
        text.push_str(&format!("ca_file = {}\n", path(ca)));
    }
    if let Some(ca) = tls_ca {
        text.push_str(&format!("[tls]\nca_file = {}\n", path(ca)));
    }
    let mut config = Config::from_toml_str(&text).expect("a valid config");
    config.global.as_mut().expect("[global]").key_secret = Some(ratelimit::config::FleetSecret(
        b"fleet secret for the tests, 32 B".to_vec(),
    ));
    let rate_limit = ratelimit::axum::RateLimit::builder(config)
        .routes_in(module_path!())
        .build()
        .await
        .expect("a runtime (Redis is off the startup path)");
    let app = axum::Router::new()
        .route("/x", axum::routing::get(fleet_limited))
        .with_state(rate_limit);
    let request = http::Request::get("/x")
        .header("x-user", "tls-user")
        .body(axum::body::Body::empty())
        .expect("request");
    // A clone: the runtime (and its sync task) lives as long as `app`.
    let response = app.clone().oneshot(request).await.expect("a response");
    assert_eq!(response.status(), 200);
    let deadline = Instant::now() + wait;
    loop {
        if !server
            .cli(&["--scan", "--pattern", &format!("{{{prefix}:*")])
            .trim()
            .is_empty()
        {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `[tls] ca_file` applies to the runtime's Redis client too, and `[global]
/// ca_file`, more specific, wins over it for Redis (either way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_ca_file_applies_to_redis_and_global_ca_file_wins() {
    let pki = Pki::new("tls-section");
    let other = Pki::new("tls-section-other");
    let server = TlsServer::start(&pki, &pki.server("server", &["localhost", "127.0.0.1"]), false);
    let long = Duration::from_secs(10);
    // [tls] alone: trusted.
    assert!(
        runtime_syncs(&server, "tls-only", Some(&pki.ca), None, long).await,
        "[tls] ca_file did not apply to Redis"
    );
    // [global] ca_file wins over another [tls] ca_file.
    assert!(
        runtime_syncs(&server, "global-wins", Some(&other.ca), Some(&pki.ca), long).await,
        "[global] ca_file did not win over [tls] ca_file"
    );
    // ... and refuses when it is the wrong one, whatever [tls] says.
    assert!(
        !runtime_syncs(
            &server,
            "global-wrong",
            Some(&pki.ca),
            Some(&other.ca),
            Duration::from_millis(1500)
        )
        .await,
        "[tls] ca_file won over [global] ca_file"
    );
    // Neither: the webpki roots, which do not know the test CA.
    assert!(
        !runtime_syncs(&server, "neither", None, None, Duration::from_millis(1500)).await,
        "an unknown CA was trusted"
    );
    no_process_provider();
}
