//! `rediss://` for [`RedisStore`](super::RedisStore) (feature `redis-tls`),
//! without touching the process-wide rustls `CryptoProvider`.
//!
//! redis-rs 0.32 builds its rustls config with `ClientConfig::builder()`
//! (`create_rustls_config` in its `connection.rs`), which takes the
//! process-default provider and, when the application installed none,
//! installs the one rustls's crate features name (or panics when they name
//! two, as with `ring` and `aws-lc-rs` both in the build). It takes no
//! provider and no ready `ClientConfig`. A library must not install one, so
//! the TLS here is ours: a `ClientConfig` built with an explicit provider
//! (`crate::tls`, shared with the HTTPS clients of the `service` feature), a
//! `tokio-rustls` handshake on our TCP stream, and redis-rs's
//! `MultiplexedConnection` on top (AUTH and SELECT included). The provider is
//! the application's process default if it installed one when the store was
//! made (read, never set), ring otherwise (owned by this config alone).
//!
//! Trust: the certificates of `ca_file` when set (a private CA, and only
//! it), the webpki roots otherwise. Certificates are always verified,
//! hostname included (`#insecure` is refused).
//!
//! A cluster's node connections are opened by redis-rs through
//! [`Connect::connect_with_config`], a function without `self`: the TLS setup
//! cannot travel with the client, so cluster stores share one, kept here for
//! as long as one of them lives (its connect timeout applies to every node
//! connection). Two cluster stores with different `ca_file`s in one process
//! are refused. The custom node type goes through
//! `ClusterClient::get_async_generic_connection`, public but `#[doc(hidden)]`
//! in redis-rs 0.32.

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::{ClusterConnection, Connect};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo, Pipeline, RedisError,
    RedisFuture, RedisResult, Value,
};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::TlsConnector;

use super::store::FleetError;

/// What a TLS client needs beyond its `rediss://` URL (the server name to
/// verify is the URL's host).
#[derive(Debug, Clone, Copy)]
pub(super) struct TlsSettings<'a> {
    /// A PEM file of the CA certificates to trust, alone (a private CA);
    /// `None`: the webpki roots.
    pub(super) ca_file: Option<&'a Path>,
    /// The URL is a seed node of a Redis Cluster.
    pub(super) cluster: bool,
    /// Time to establish a connection (TCP and handshake).
    pub(super) connect_timeout: Duration,
    /// Time for each round's replies.
    pub(super) response_timeout: Duration,
}

/// How to open a TLS connection to a node.
struct Tls {
    connector: TlsConnector,
    /// `ca_file`'s certificates (`None`: the webpki roots).
    roots: Option<Vec<CertificateDer<'static>>>,
    connect_timeout: Duration,
}

impl Tls {
    fn new(ca_file: Option<&Path>, connect_timeout: Duration) -> Result<Tls, String> {
        // The runtime's one rustls setup (`crate::tls`): the application's
        // provider or ring, never installed; `ca_file` or the webpki roots.
        let tls = crate::shared::net::tls::client_config(ca_file)?;
        Ok(Tls {
            connector: TlsConnector::from(Arc::new(tls.config)),
            roots: tls.roots,
            connect_timeout,
        })
    }

    /// TCP, the TLS handshake (certificate and hostname verified), then
    /// redis-rs's connection setup (AUTH, SELECT) on the stream.
    async fn connect(&self, info: ConnectionInfo, config: AsyncConnectionConfig) -> RedisResult<Node> {
        let (host, port) = match &info.addr {
            ConnectionAddr::Tcp(host, port) => (host.clone(), *port),
            _ => {
                return Err(RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "TLS: not a TCP address",
                )))
            }
        };
        let name = ServerName::try_from(host.clone())
            .map_err(|e| RedisError::from((ErrorKind::InvalidClientConfig, "TLS: bad server name", e.to_string())))?;
        let timeout = self.connect_timeout;
        let connect = async {
            let handshake = async {
                let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
                tcp.set_nodelay(true)?;
                self.connector.connect(name, tcp).await
            };
            // The kind is kept: a refused connection still reads as one.
            let stream = handshake
                .await
                .map_err(|e| io::Error::new(e.kind(), format!("TLS to {host}:{port}: {e}")))?;
            MultiplexedConnection::new_with_config(&info.redis, stream, config).await
        };
        let (conn, driver) = tokio::time::timeout(timeout, connect).await.map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("TLS to {host}:{port}: no connection within {timeout:?}"),
            )
        })??;
        Ok(Node {
            conn,
            _driver: Arc::new(Driver(tokio::spawn(driver).abort_handle())),
        })
    }
}

/// Stops a connection's driver task when the last clone of the connection
/// is dropped (what redis-rs does for the connections it spawns itself).
struct Driver(tokio::task::AbortHandle);

impl Drop for Driver {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One TLS connection to one node.
#[derive(Clone)]
pub(super) struct Node {
    conn: MultiplexedConnection,
    _driver: Arc<Driver>,
}

impl ConnectionLike for Node {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.conn.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.conn.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

/// The TLS setup of cluster node connections (see the module docs).
static CLUSTER_TLS: Mutex<Weak<Tls>> = Mutex::new(Weak::new());

impl Connect for Node {
    fn connect_with_config<'a, T>(info: T, config: AsyncConnectionConfig) -> RedisFuture<'a, Self>
    where
        T: IntoConnectionInfo + Send + 'a,
    {
        Box::pin(async move {
            let info = info.into_connection_info()?;
            let tls = CLUSTER_TLS.lock().unwrap_or_else(PoisonError::into_inner).upgrade();
            let tls = tls.ok_or_else(|| RedisError::from((ErrorKind::ClientError, "TLS: no cluster store")))?;
            tls.connect(info, config).await
        })
    }
}

/// The first cluster store's setup, or `tls` if none lives; an error if the
/// living one trusts other roots.
fn share_cluster_tls(tls: Tls) -> Result<Arc<Tls>, String> {
    let mut slot = CLUSTER_TLS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(living) = slot.upgrade() {
        return if living.roots == tls.roots {
            Ok(living)
        } else {
            Err("ca_file: a cluster store with another ca_file lives in this process (one per process)".to_owned())
        };
    }
    let tls = Arc::new(tls);
    *slot = Arc::downgrade(&tls);
    Ok(tls)
}

enum Target {
    Single(ConnectionInfo),
    Cluster(ClusterClient),
}

/// The client of a `rediss://` URL.
pub(super) struct TlsClient {
    target: Target,
    tls: Arc<Tls>,
    response_timeout: Duration,
}

/// A connection of a [`TlsClient`].
#[derive(Clone)]
pub(super) enum TlsConn {
    Single(Node),
    Cluster(ClusterConnection<Node>),
}

impl TlsClient {
    /// Checks the URL and reads `ca_file`; connects on [`TlsClient::connect`].
    pub(super) fn new(url: &str, settings: &TlsSettings<'_>) -> Result<TlsClient, String> {
        let rest = url.strip_prefix("rediss://").ok_or("not a rediss:// URL")?;
        if url.contains('#') {
            return Err("no URL fragment (#insecure is refused: certificates are always verified)".to_owned());
        }
        // The URL as redis-rs would read it without TLS: host, port, user,
        // password, db. The TLS is ours.
        let plain = format!("redis://{rest}");
        let tls = Tls::new(settings.ca_file, settings.connect_timeout)?;
        let (target, tls) = if settings.cluster {
            // No retries: a retried pipeline could apply its INCRBYs twice.
            let client = ClusterClient::builder(vec![plain])
                .retries(0)
                .connection_timeout(settings.connect_timeout)
                .response_timeout(settings.response_timeout)
                .build()
                .map_err(|e| e.to_string())?;
            (Target::Cluster(client), share_cluster_tls(tls)?)
        } else {
            let info = plain.as_str().into_connection_info().map_err(|e| e.to_string())?;
            (Target::Single(info), Arc::new(tls))
        };
        Ok(TlsClient {
            target,
            tls,
            response_timeout: settings.response_timeout,
        })
    }

    /// A new connection (the first round, and after a failed one).
    pub(super) async fn connect(&self) -> Result<TlsConn, FleetError> {
        let config = AsyncConnectionConfig::new().set_response_timeout(self.response_timeout);
        match &self.target {
            Target::Single(info) => {
                let node = self.tls.connect(info.clone(), config).await;
                node.map(TlsConn::Single)
                    .map_err(|e| FleetError::unsent(format!("redis: {e}")).timed_out_if(&e))
            }
            Target::Cluster(client) => {
                let timeout = self.tls.connect_timeout;
                tokio::time::timeout(timeout.saturating_mul(2), client.get_async_generic_connection::<Node>())
                    .await
                    .map_err(|_| {
                        FleetError::unsent(format!("redis cluster: no connection within {timeout:?}")).timed_out()
                    })?
                    .map(TlsConn::Cluster)
                    .map_err(|e| FleetError::unsent(format!("redis cluster: {e}")).timed_out_if(&e))
            }
        }
    }
}

impl ConnectionLike for TlsConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            TlsConn::Single(c) => c.req_packed_command(cmd),
            TlsConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            TlsConn::Single(c) => c.req_packed_commands(cmd, offset, count),
            TlsConn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            TlsConn::Single(c) => c.get_db(),
            TlsConn::Cluster(c) => c.get_db(),
        }
    }
}
