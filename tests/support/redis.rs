//! `redis-server` processes started by the tests on free loopback ports
//! (never the shared 6379), stopped when dropped. A test that cannot start
//! one fails.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) struct RedisServer {
    pub(crate) port: u16,
    child: Option<Child>,
    dir: PathBuf,
    cluster: bool,
}

pub(crate) fn free_port() -> u16 {
    // Cluster nodes also listen on port + 10000.
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("bind a free port")
            .local_addr()
            .expect("local addr")
            .port();
        if port < 55000 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
}

impl RedisServer {
    pub(crate) fn start() -> RedisServer {
        Self::start_fresh(false)
    }

    /// A server on a free port. The port is free when picked, but another
    /// process (a parallel test's server or client) may take it before
    /// `redis-server` binds it: then the server exits, and another port is
    /// tried.
    fn start_fresh(cluster: bool) -> RedisServer {
        let mut tried = Vec::new();
        for _ in 0..5 {
            let port = free_port();
            let dir = std::env::temp_dir().join(format!("ratelimit-redis-{port}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("redis temp dir");
            let mut server = RedisServer {
                port,
                child: None,
                dir,
                cluster,
            };
            match server.try_spawn() {
                Ok(()) => return server,
                Err(e) => tried.push(e),
            }
        }
        panic!("redis-server did not start: {tried:?}");
    }

    fn spawn(&mut self) {
        if let Err(e) = self.try_spawn() {
            panic!("{e}");
        }
    }

    /// Starts `redis-server` on `self.port` and waits until it answers as
    /// this process's child (its `INFO` names the child's pid: a server of
    /// another test that took the port would answer `PING` too).
    fn try_spawn(&mut self) -> Result<(), String> {
        let mut cmd = Command::new("redis-server");
        cmd.args([
            "--port",
            &self.port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(&self.dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        if self.cluster {
            // A node down leaves the others serving their slots.
            cmd.args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-require-full-coverage",
                "no",
            ]);
        }
        let child = cmd
            .spawn()
            .expect("start redis-server (scripts/test installs it; the test fails rather than skip)");
        let ours = format!("process_id:{}", child.id());
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.cli(&["INFO", "server"]).lines().any(|l| l.trim() == ours) {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                return Err(format!("redis-server on port {} exited ({status})", self.port));
            }
            if Instant::now() > deadline {
                return Err(format!("redis-server on port {} did not answer", self.port));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Runs `redis-cli` against this server.
    pub(crate) fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let status = Command::new("kill").args([sig, &pid]).status().expect("kill");
        assert!(status.success(), "kill {sig} {pid}");
    }

    pub(crate) fn pause(&self) {
        self.signal("-STOP");
    }

    pub(crate) fn resume(&self) {
        self.signal("-CONT");
    }

    pub(crate) fn kill(&mut self) {
        self.signal("-KILL");
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }

    pub(crate) fn restart(&mut self) {
        self.spawn();
    }

    /// Every key (SCAN).
    pub(crate) fn keys(&self) -> Vec<String> {
        self.cli(&["--scan"])
            .lines()
            .map(str::to_owned)
            .filter(|l| !l.is_empty())
            .collect()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill").args(["-CONT", &c.id().to_string()]).status();
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A 3-master Redis Cluster on free ports.
pub(crate) struct RedisCluster {
    pub(crate) nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub(crate) fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_fresh(true)).collect();
        let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
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
        RedisCluster { nodes }
    }

    pub(crate) fn url(&self) -> String {
        self.nodes[0].url()
    }

    /// Every key of every node.
    pub(crate) fn keys(&self) -> Vec<String> {
        self.nodes.iter().flat_map(RedisServer::keys).collect()
    }

    /// TTL of a key, asked of the node that holds it (`-c` follows redirects).
    pub(crate) fn ttl(&self, key: &str) -> i64 {
        let out = Command::new("redis-cli")
            .args(["-c", "-p", &self.nodes[0].port.to_string(), "PTTL", key])
            .output()
            .expect("redis-cli PTTL");
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(-3)
    }
}
