//! A service served without connect info, as an OS process of its own (this
//! test binary started again in server mode): a route keyed by address
//! answers 500 naming the fix, over a real socket, and the process logs the
//! mistake once under the `ratelimit` target.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use ratelimit::axum::RateLimit;
use ratelimit::config::Config;
use ratelimit::rate_limit;

const SERVER_MODE: &str = "RATELIMIT_TEST_SERVE_WITHOUT_CONNECT_INFO";
const TEST: &str = "wiring::a_process_served_without_connect_info_answers_500_and_logs_it_once";

#[rate_limit(key = ip, resolve = [default], name = "wiring.process")]
async fn by_address() -> &'static str {
    "by address"
}

/// The child: serves `by_address` as an application that forgot
/// `into_make_service_with_connect_info` does, logging to stdout.
fn serve() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stdout)
        .with_ansi(false)
        .with_env_filter("ratelimit=warn")
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let config = Config::from_toml_str("[profiles.standard]\nrate = \"60/min\"\nburst = 2\n").unwrap();
        let rl = RateLimit::builder(config)
            .routes_in(module_path!())
            .build()
            .await
            .unwrap();
        let app = Router::new().route("/", get(by_address)).with_state(rl);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("listening on {}", listener.local_addr().unwrap());
        axum::serve(listener, app).await.unwrap();
    });
}

/// The child process, killed on drop.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn get_root(addr: SocketAddr) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: wiring\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let status = text.split(' ').nth(1).unwrap().parse().unwrap();
    (status, text)
}

#[test]
fn a_process_served_without_connect_info_answers_500_and_logs_it_once() {
    if std::env::var_os(SERVER_MODE).is_some() {
        serve();
        return;
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(SERVER_MODE, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the server process");
    let stdout = child.stdout.take().unwrap();
    let _server = Server(child);
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let addr: SocketAddr = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(30))
            .expect("the server's address");
        // After the harness's `test ... ` on the same line.
        if let Some(addr) = line.split("listening on ").nth(1) {
            break addr.trim().parse().unwrap();
        }
    };
    for _ in 0..3 {
        let (status, text) = get_root(addr);
        assert_eq!(status, 500, "{text}");
        assert!(text.contains("into_make_service_with_connect_info"), "{text}");
        assert!(!text.to_ascii_lowercase().contains("ratelimit-remaining"), "{text}");
    }
    // The log: one ERROR line with the fix, for three requests.
    let mut logged = Vec::new();
    while let Ok(line) = lines.recv_timeout(Duration::from_millis(500)) {
        if line.contains("needs the client's address") {
            logged.push(line);
        }
    }
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(
        logged[0].contains("ERROR") && logged[0].contains("ratelimit"),
        "{}",
        logged[0]
    );
    assert!(
        logged[0].contains("into_make_service_with_connect_info"),
        "{}",
        logged[0]
    );
}
