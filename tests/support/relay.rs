//! A TCP relay on loopback that adds a fixed delay each way: a Redis "far
//! away" for one instance of a fleet (a slow network, a distant region).
//! Each chunk read is written on after the delay, in order, so the relay
//! adds latency without limiting throughput. Stopped when dropped.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

pub(crate) struct Relay {
    pub(crate) port: u16,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Relay {
    /// Relays `127.0.0.1:<port>` to `127.0.0.1:<upstream>`, `delay` each way.
    pub(crate) fn start(upstream: u16, delay: Duration) -> Relay {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("relay")
            .enable_all()
            .build()
            .expect("a runtime for the relay");
        let listener = runtime
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("bind the relay on loopback");
        let port = listener.local_addr().expect("the relay's address").port();
        let to = SocketAddr::from(([127, 0, 0, 1], upstream));
        runtime.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(to).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::spawn(pipe(cr, sw, delay));
                    tokio::spawn(pipe(sr, cw, delay));
                });
            }
        });
        Relay {
            port,
            runtime: Some(runtime),
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

/// Copies `from` to `to`, each chunk `delay` after it was read.
async fn pipe(mut from: tokio::net::tcp::OwnedReadHalf, mut to: tokio::net::tcp::OwnedWriteHalf, delay: Duration) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if tx
                    .send((tokio::time::Instant::now() + delay, buf[..n].to_vec()))
                    .is_err()
                {
                    break;
                }
            }
        }
    }
    drop(tx);
    let _ = writer.await;
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}
