//! A stub HTTP server on a free loopback port, for the tests that talk to a
//! limit service or a JWKS endpoint: it counts requests and answers what the
//! test sets, after an optional delay, one connection per request.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the stub answers.
#[derive(Clone)]
pub(crate) enum Reply {
    /// 200 with this JSON body.
    Json(String),
    /// This status, empty body.
    Status(u16),
    /// Never answers.
    Hang,
}

pub(crate) struct Stub {
    pub(crate) url: String,
    hits: Arc<AtomicUsize>,
    paths: Arc<Mutex<Vec<String>>>,
    reply: Arc<Mutex<(Reply, Duration)>>,
}

impl Stub {
    /// Serves `path` (any path is answered the same) on 127.0.0.1.
    pub(crate) async fn start(path: &str, reply: Reply, delay: Duration) -> Stub {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}{path}", listener.local_addr().unwrap());
        let hits = Arc::new(AtomicUsize::new(0));
        let reply = Arc::new(Mutex::new((reply, delay)));
        let paths = Arc::new(Mutex::new(Vec::new()));
        let (h, r, p) = (hits.clone(), reply.clone(), paths.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let (h, r, p) = (h.clone(), r.clone(), p.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let mut n = 0;
                    while !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                        match sock.read(&mut buf[n..]).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => n += k,
                        }
                    }
                    // The request line: `GET /path HTTP/1.1`.
                    let head = String::from_utf8_lossy(&buf[..n]);
                    if let Some(path) = head.split(' ').nth(1) {
                        p.lock().unwrap().push(path.to_owned());
                    }
                    h.fetch_add(1, Ordering::SeqCst);
                    let (reply, delay) = r.lock().unwrap().clone();
                    tokio::time::sleep(delay).await;
                    let response = match reply {
                        Reply::Hang => {
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                            return;
                        }
                        Reply::Json(body) => format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        ),
                        Reply::Status(code) => {
                            format!("HTTP/1.1 {code} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                        }
                    };
                    let _ = sock.write_all(response.as_bytes()).await;
                });
            }
        });
        Stub {
            url,
            hits,
            paths,
            reply,
        }
    }

    /// Changes the answer for the next requests.
    pub(crate) fn set(&self, reply: Reply) {
        self.reply.lock().unwrap().0 = reply;
    }

    /// The paths of the requests received so far, in order.
    pub(crate) fn paths(&self) -> Vec<String> {
        self.paths.lock().unwrap().clone()
    }

    /// Requests received so far.
    pub(crate) fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}
