//! The one-network flood of issue 11 (item 8), measured from outside: the
//! quickstart demo as a real process behind a "proxy" (this test, on
//! loopback, which the demo's config trusts), 20,000 requests over a real
//! socket, each claiming a new /64 of one /48 in `X-Forwarded-For`, then ten
//! clients of other networks, each with its first requests.

use crate::support::quickstart;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The issue's setup: 2,000 keys, 6/min with a burst of 5 on `/public`.
const CONFIG: &str = r#"
default_profile = "anonymous"

[profiles.anonymous]
rate = "6/min"
burst = 5

[profiles.standard]
rate = "120/min"
burst = 10

[store]
max_keys = 2000

[ip]
trusted_proxies = ["127.0.0.1/32"]
"#;

/// The demo, killed on drop.
struct Demo {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(config: &str) -> Demo {
    let bin = quickstart::quickstart_binary();
    let dir = std::env::temp_dir().join(format!("ratelimit-networks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("networks.toml");
    std::fs::write(&path, config).unwrap();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let child = Command::new(bin)
        .arg("--addr")
        .arg(addr.to_string())
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the quickstart demo");
    let demo = Demo { child, addr };
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "the demo did not listen on {addr} within 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    demo
}

/// One keep-alive connection to the demo.
struct Connection {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Connection {
    fn open(addr: SocketAddr) -> Connection {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Connection {
            writer: stream.try_clone().unwrap(),
            reader: BufReader::new(stream),
        }
    }

    /// `GET /public` forwarded for `client`; the status.
    fn get(&mut self, client: &str) -> u16 {
        write!(
            self.writer,
            "GET /public HTTP/1.1\r\nHost: demo\r\nX-Forwarded-For: {client}\r\n\r\n"
        )
        .unwrap();
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let status: u16 = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("status line {line:?}"));
        let mut length = 0usize;
        loop {
            line.clear();
            self.reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap();
                }
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).unwrap();
        status
    }
}

#[test]
fn a_flood_from_one_network_leaves_other_networks_their_whole_burst() {
    let demo = start(CONFIG);
    let mut conn = Connection::open(demo.addr);
    let started = Instant::now();
    let mut flood_admitted = 0;
    for i in 0..20_000u32 {
        flood_admitted += u32::from(conn.get(&format!("2001:db8:aaaa:{:x}::1", i % 65_536)) == 200);
    }
    let took = started.elapsed();
    let others = [
        "2001:db8:bbbb:1::1",
        "2001:db8:cccc:2::1",
        "2001:db9::1",
        "2a00:1450:4001::1",
        "2606:4700::1",
        "203.0.113.7",
        "198.51.100.1",
        "192.0.2.200",
        "100.64.0.1",
        "8.8.4.4",
    ];
    let mut report = Vec::new();
    for client in others {
        let statuses: Vec<u16> = (0..6).map(|_| conn.get(client)).collect();
        report.push((client, statuses));
    }
    eprintln!("flood: 20000 requests in {took:.1?}, {flood_admitted} admitted");
    for (client, statuses) in &report {
        eprintln!("{client:>20}: {statuses:?}");
    }
    // The network's budget: 256 new clients at once, 256 more a minute;
    // then one shared bucket of 5, 6 more a minute (real time passed).
    let refilled = took.as_secs_f64() / 60.0 * (256.0 + 6.0);
    let bound = 256 + 5 + refilled.ceil() as u32;
    assert!(
        flood_admitted <= bound,
        "the flooding /48 was admitted {flood_admitted} times (bound {bound})"
    );
    for (client, statuses) in &report {
        assert_eq!(statuses, &[200, 200, 200, 200, 200, 429], "{client}");
    }
}
