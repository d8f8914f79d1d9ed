//! [`FleetStore`] on Redis: native commands only (`HINCRBY`, `PEXPIRE`,
//! `HMGET`; one hash per key and epoch, one field per slice), pipelined, one pipeline per key shard sent concurrently, with a
//! timeout on the connection and on every round. Works against a single
//! server (through a `ConnectionManager`, which reconnects) and against Redis
//! Cluster (keys are hash-tagged by shard, so a pipeline never crosses
//! slots). Authentication and TLS come from the URL (`redis://user:pass@host`;
//! `rediss://` needs the `redis-tls` feature, and is done in `tls.rs`, with
//! a private CA from [`RedisSettings::ca_file`]).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Pipeline, Value};
use tokio::sync::Mutex;

use super::store::{FleetError, FleetStore, OpResult, SyncOp};
#[cfg(feature = "redis-tls")]
use super::tls::{TlsClient, TlsConn, TlsSettings};

/// How to reach Redis, beyond the URL.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedisSettings {
    /// Prefix of every key (`{prefix:shard}:route:key:epoch`).
    pub prefix: String,
    /// The URL is a seed node of a Redis Cluster.
    pub cluster: bool,
    /// Time to establish a connection.
    pub connect_timeout: Duration,
    /// Time for each round's replies.
    pub response_timeout: Duration,
    /// Key shards: each is one hash slot in a cluster, and one pipeline
    /// per round.
    pub shards: u32,
    /// `rediss://` only: a PEM file of the CA certificates to trust (a
    /// private CA) instead of the webpki roots.
    pub ca_file: Option<PathBuf>,
}

impl Default for RedisSettings {
    fn default() -> Self {
        RedisSettings {
            prefix: crate::shared::defaults::GLOBAL_KEY_PREFIX.to_owned(),
            cluster: false,
            connect_timeout: crate::shared::defaults::GLOBAL_CONNECT_TIMEOUT,
            response_timeout: crate::shared::defaults::GLOBAL_TIMEOUT,
            shards: 16,
            ca_file: None,
        }
    }
}

crate::shared::setters::with!(RedisSettings {
    with_prefix => prefix: impl Into<String> as into,
    with_cluster => cluster: bool,
    with_connect_timeout => connect_timeout: Duration,
    with_response_timeout => response_timeout: Duration,
    with_shards => shards: u32,
    with_ca_file => ca_file: impl Into<PathBuf> as some_into,
});

enum Client {
    Single(redis::Client),
    Cluster(ClusterClient),
    /// `rediss://`, single or cluster, with our TLS (`tls.rs`).
    #[cfg(feature = "redis-tls")]
    Tls(TlsClient),
}

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    #[cfg(feature = "redis-tls")]
    Tls(TlsConn),
}

/// The Redis [`FleetStore`]. Creating it checks the URL only; it connects
/// on the first round (and again after failures), so a service starts, local
/// only, while Redis is down.
pub struct RedisStore {
    client: Client,
    conn: Mutex<Option<Conn>>,
    settings: RedisSettings,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("cluster", &self.settings.cluster)
            .field("prefix", &self.settings.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store for `url` (`redis://[user:password@]host:port[/db]`).
    pub fn new(url: &str, settings: RedisSettings) -> Result<RedisStore, FleetError> {
        let bad = |e: redis::RedisError| FleetError::new(format!("redis url {:?}: {e}", redact(url)));
        let client = if url.starts_with("rediss://") {
            tls_client(url, &settings)?
        } else if settings.ca_file.is_some() {
            return Err(FleetError::new("redis ca_file: for rediss:// (TLS) URLs only"));
        } else if settings.cluster {
            Client::Cluster(
                // No retries: a retried pipeline could apply its increments twice.
                ClusterClient::builder(vec![url])
                    .retries(0)
                    .connection_timeout(settings.connect_timeout)
                    .response_timeout(settings.response_timeout)
                    .build()
                    .map_err(bad)?,
            )
        } else {
            Client::Single(redis::Client::open(url).map_err(bad)?)
        };
        if settings.shards == 0 {
            return Err(FleetError::new("redis shards must be at least 1"));
        }
        Ok(RedisStore {
            client,
            conn: Mutex::new(None),
            settings,
        })
    }

    /// The Redis key (a hash, one field per slice) of (route, key, epoch):
    /// `{prefix:shard}:route:key:epoch`.
    /// The hash tag is the shard alone, so every key of a round's pipeline
    /// (one per shard, whatever the routes) is in one cluster slot; `key` is
    /// a keyed hash, never the raw client value.
    /// The fleet's own keys have fleet id 0, which no client key has: the
    /// roster of live instances is `{prefix:0}:instances:epoch` (one
    /// field), the list of hot keys `{prefix:0}:hot:epoch`.
    pub fn key(&self, route: u32, key: u64, epoch: u64) -> String {
        let mut name = String::new();
        self.write_key(&mut name, route, key, epoch);
        name
    }

    /// [`key`](Self::key), written into `name` (a round formats thousands:
    /// one buffer for all of them).
    fn write_key(&self, name: &mut String, route: u32, key: u64, epoch: u64) {
        use std::fmt::Write;
        name.clear();
        let prefix = &self.settings.prefix;
        // (Writing to a String cannot fail.)
        let _ = if key == 0 {
            let what = if route == super::marks::HOT_LIST_ROUTE {
                "hot"
            } else {
                "instances"
            };
            write!(name, "{{{prefix}:0}}:{what}:{epoch}")
        } else {
            let shard = self.shard(key);
            write!(name, "{{{prefix}:{shard:x}}}:{route:08x}:{key:016x}:{epoch}")
        };
    }

    /// The shard of a fleet id: from its high half (the low bit is fixed).
    fn shard(&self, key: u64) -> u64 {
        (key >> 32) % u64::from(self.settings.shards)
    }

    async fn connection(&self) -> Result<Conn, FleetError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let timeout = self.settings.connect_timeout;
        let conn = match &self.client {
            Client::Single(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(timeout)
                    .set_response_timeout(self.settings.response_timeout)
                    .set_number_of_retries(1)
                    .set_max_delay(1000);
                let manager = tokio::time::timeout(
                    timeout.saturating_mul(2),
                    ConnectionManager::new_with_config(client.clone(), config),
                )
                .await
                .map_err(|_| FleetError::unsent(format!("redis: no connection within {timeout:?}")).timed_out())?
                .map_err(|e| FleetError::unsent(format!("redis: {e}")).timed_out_if(&e))?;
                Conn::Single(manager)
            }
            Client::Cluster(client) => {
                let conn = tokio::time::timeout(timeout.saturating_mul(2), client.get_async_connection())
                    .await
                    .map_err(|_| {
                        FleetError::unsent(format!("redis cluster: no connection within {timeout:?}")).timed_out()
                    })?
                    .map_err(|e| FleetError::unsent(format!("redis cluster: {e}")).timed_out_if(&e))?;
                Conn::Cluster(conn)
            }
            #[cfg(feature = "redis-tls")]
            Client::Tls(client) => Conn::Tls(client.connect().await?),
        };
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Drops the connection after a failed round: the next round connects
    /// afresh (under the connect timeout), so a server that is gone shows as
    /// a refused connection, before anything is sent.
    async fn forget(&self) {
        *self.conn.lock().await = None;
    }
}

async fn send(conn: &mut Conn, pipe: &Pipeline, count: usize) -> redis::RedisResult<Vec<Value>> {
    match conn {
        Conn::Single(c) => c.req_packed_commands(pipe, 0, count).await,
        Conn::Cluster(c) => c.req_packed_commands(pipe, 0, count).await,
        #[cfg(feature = "redis-tls")]
        Conn::Tls(c) => c.req_packed_commands(pipe, 0, count).await,
    }
}

/// The client of a `rediss://` URL: TLS with an explicit rustls provider,
/// never a process-wide one (see `tls.rs`).
#[cfg(feature = "redis-tls")]
fn tls_client(url: &str, settings: &RedisSettings) -> Result<Client, FleetError> {
    let tls = TlsSettings {
        ca_file: settings.ca_file.as_deref(),
        cluster: settings.cluster,
        connect_timeout: settings.connect_timeout,
        response_timeout: settings.response_timeout,
    };
    TlsClient::new(url, &tls)
        .map(Client::Tls)
        .map_err(|e| FleetError::new(format!("redis url {:?}: {e}", redact(url))))
}

#[cfg(not(feature = "redis-tls"))]
fn tls_client(_: &str, _: &RedisSettings) -> Result<Client, FleetError> {
    Err(FleetError::new(
        "rediss:// (TLS) needs the `redis-tls` feature of ratelimit",
    ))
}

/// An integer reply, or the integer a bulk string holds; a missing field is 0.
fn integer(v: &Value) -> Option<u64> {
    match v {
        Value::Nil => Some(0),
        Value::Int(n) => u64::try_from(*n).ok(),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.trim().parse().ok(),
        Value::SimpleString(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// An error reply, as the gate reports it: the server refused the command,
/// so nothing was applied.
fn refused(code: &str, detail: Option<&str>) -> FleetError {
    FleetError::unsent(format!("redis: {code} {}", detail.unwrap_or("")).trim_end().to_owned())
}

/// Error replies that refuse every write of a server (so none of a failed
/// cluster pipeline's increments applied).
fn refuses_all_writes(code: &str) -> bool {
    matches!(
        code,
        "OOM" | "READONLY" | "MISCONF" | "MASTERDOWN" | "LOADING" | "CLUSTERDOWN"
    )
}

/// One shard's share of a round: the ops' indices and their commands.
struct ShardPipeline {
    indices: Vec<usize>,
    pipe: Pipeline,
    replies: usize,
}

impl RedisStore {
    /// The commands of one op: `HINCRBY` (+ `PEXPIRE`) for an add, `HMGET`
    /// for a read.
    fn encode(&self, op: &SyncOp, ttl_ms: u64, pipe: &mut Pipeline, key: &mut String) -> usize {
        let c = op.counter();
        self.write_key(key, c.route, c.key, c.epoch);
        // A command sized for its arguments up front (a round encodes
        // thousands; grown an argument at a time, each reallocated).
        let sized = |name: &str, args: usize| {
            let mut cmd = redis::Cmd::with_capacity(args + 2, name.len() + key.len() + 12 * args);
            cmd.arg(name).arg(key.as_str());
            cmd
        };
        match op {
            SyncOp::Add {
                slice, delta, expire, ..
            } => {
                let mut incr = sized("HINCRBY", 2);
                incr.arg(*slice).arg(*delta);
                pipe.add_command(incr);
                if *expire {
                    let mut expire = sized("PEXPIRE", 1);
                    expire.arg(ttl_ms);
                    pipe.add_command(expire);
                    2
                } else {
                    1
                }
            }
            SyncOp::Read { slices, .. } => {
                let mut cmd = sized("HMGET", slices.len());
                for s in slices.clone() {
                    cmd.arg(s);
                }
                pipe.add_command(cmd);
                1
            }
            SyncOp::Append { ids, expire, .. } => {
                pipe.cmd("RPUSH").arg(key.as_str()).arg(ids.as_slice());
                if *expire {
                    pipe.cmd("PEXPIRE").arg(key.as_str()).arg(ttl_ms);
                    2
                } else {
                    1
                }
            }
            SyncOp::ReadList { from, .. } => {
                pipe.cmd("LRANGE").arg(key.as_str()).arg(*from).arg(-1);
                1
            }
        }
    }

    /// Reads an op's result from its replies (single server: one reply per
    /// command, error replies in place).
    fn decode(op: &SyncOp, replies: &mut std::slice::Iter<'_, Value>) -> OpResult {
        match op {
            SyncOp::Add { expire, .. } | SyncOp::Append { expire, .. } => {
                let incr = replies.next();
                let expired = if *expire { replies.next() } else { None };
                if let (Some(Value::Int(_)), Some(Value::ServerError(e))) = (incr, expired) {
                    // Applied, but the counter may be left without a TTL
                    // (an ACL refusing PEXPIRE): the key fails, visibly.
                    return OpResult::Failed(refused(e.code(), e.details()).maybe_applied());
                }
                match incr {
                    Some(Value::Int(n)) => OpResult::Added(u64::try_from(*n).ok()),
                    Some(Value::ServerError(e)) => OpResult::Failed(refused(e.code(), e.details())),
                    _ => OpResult::Failed(FleetError::new("redis: unusable HINCRBY reply")),
                }
            }
            SyncOp::Read { slices, .. } => match replies.next() {
                Some(Value::Array(values)) if values.len() == slices.len() => {
                    match values.iter().map(integer).collect::<Option<Vec<u64>>>() {
                        Some(v) => OpResult::Read(v),
                        None => OpResult::Failed(FleetError::unsent(
                            "redis: a counter holds something else than an integer",
                        )),
                    }
                }
                Some(Value::ServerError(e)) => OpResult::Failed(refused(e.code(), e.details())),
                _ => OpResult::Failed(FleetError::unsent("redis: unusable HMGET reply")),
            },
            SyncOp::ReadList { .. } => match replies.next() {
                Some(Value::Array(values)) => match values.iter().map(integer).collect::<Option<Vec<u64>>>() {
                    Some(v) => OpResult::Read(v),
                    None => OpResult::Failed(FleetError::unsent("redis: the hot-key list holds something else")),
                },
                Some(Value::ServerError(e)) => OpResult::Failed(refused(e.code(), e.details())),
                _ => OpResult::Failed(FleetError::unsent("redis: unusable LRANGE reply")),
            },
        }
    }

    /// A cluster pipeline failed on an error reply: the node ran every
    /// command, but the connection reports only the first error. Tell which
    /// ops it concerns without running any increment again: `TYPE` of every
    /// key (never an error), then the reads alone.
    async fn recover_cluster_pipeline(
        &self,
        conn: &mut Conn,
        ops: &[SyncOp],
        indices: &[usize],
        error: &redis::RedisError,
    ) -> Vec<(usize, OpResult)> {
        let code = error.code().unwrap_or("ERR");
        let reason = refused(code, error.detail());
        let timeout = self.settings.response_timeout;
        let mut types = redis::pipe();
        for &i in indices {
            let c = ops[i].counter();
            types.cmd("TYPE").arg(self.key(c.route, c.key, c.epoch));
        }
        let types = match tokio::time::timeout(timeout, send(conn, &types, indices.len())).await {
            Ok(Ok(t)) if t.len() == indices.len() => t,
            _ => {
                return indices
                    .iter()
                    .map(|&i| (i, OpResult::Failed(reason.clone().maybe_applied())))
                    .collect()
            }
        };
        let wrong_type: Vec<bool> = types
            .iter()
            .map(|t| !matches!(t, Value::SimpleString(s) if s == "hash" || s == "list" || s == "none"))
            .collect();
        let mut reads = redis::pipe();
        let mut read_at = Vec::new();
        let mut key = String::new();
        for (n, &i) in indices.iter().enumerate() {
            if let (SyncOp::Read { .. } | SyncOp::ReadList { .. }, false) = (&ops[i], wrong_type[n]) {
                self.encode(&ops[i], 0, &mut reads, &mut key);
                read_at.push(i);
            }
        }
        let mut read_results = std::collections::HashMap::new();
        if !read_at.is_empty() {
            if let Ok(Ok(values)) = tokio::time::timeout(timeout, send(conn, &reads, read_at.len())).await {
                let mut it = values.iter();
                for &i in &read_at {
                    read_results.insert(i, Self::decode(&ops[i], &mut it));
                }
            }
        }
        let all_writes_refused = refuses_all_writes(code);
        indices
            .iter()
            .enumerate()
            .map(|(n, &i)| {
                let result = match &ops[i] {
                    _ if wrong_type[n] => {
                        OpResult::Failed(refused("WRONGTYPE", Some("a counter key holds another type")))
                    }
                    SyncOp::Add { .. } | SyncOp::Append { .. } if all_writes_refused => {
                        OpResult::Failed(reason.clone())
                    }
                    // The increment ran (the error was another key's).
                    SyncOp::Add { .. } | SyncOp::Append { .. } if code == "WRONGTYPE" => OpResult::Added(None),
                    SyncOp::Add { .. } | SyncOp::Append { .. } => OpResult::Failed(reason.clone().maybe_applied()),
                    _ => read_results
                        .remove(&i)
                        .unwrap_or_else(|| OpResult::Failed(reason.clone().maybe_applied())),
                };
                (i, result)
            })
            .collect()
    }
}

impl FleetStore for RedisStore {
    /// Connects if not connected: a connection is made while the round
    /// awaits it, never while the round does its own work.
    async fn ready(&self) -> Result<(), FleetError> {
        self.connection().await.map(drop)
    }

    async fn sync(&self, ops: &[SyncOp], ttl: Duration) -> Result<Vec<OpResult>, FleetError> {
        let conn = self.connection().await?;
        if ops.is_empty() {
            // Nothing to push or pull: check the store is there, so an idle
            // instance still knows (and says) whether it is degraded.
            let mut conn = conn;
            let ping = tokio::time::timeout(self.settings.response_timeout, async {
                let pipe = redis::pipe().cmd("PING").to_owned();
                send(&mut conn, &pipe, 1).await
            })
            .await;
            return match ping {
                Ok(Ok(_)) => Ok(Vec::new()),
                Ok(Err(e)) => {
                    self.forget().await;
                    Err(FleetError::unsent(format!("redis: {e}")).timed_out_if(&e))
                }
                Err(_) => {
                    self.forget().await;
                    Err(FleetError::unsent(format!(
                        "redis: no PING reply within {:?}",
                        self.settings.response_timeout
                    ))
                    .timed_out())
                }
            };
        }
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        // One pipeline per non-empty shard.
        let mut shards: Vec<Option<ShardPipeline>> = (0..self.settings.shards).map(|_| None).collect();
        let mut key = String::new();
        // Sized for an even spread (fleet ids are keyed hashes).
        let per_shard = ops.len() / self.settings.shards.max(1) as usize + 1;
        for (i, op) in ops.iter().enumerate() {
            let shard = shards[self.shard(op.counter().key) as usize].get_or_insert_with(|| ShardPipeline {
                indices: Vec::with_capacity(per_shard),
                pipe: redis::Pipeline::with_capacity(per_shard),
                replies: 0,
            });
            shard.replies += self.encode(op, ttl_ms, &mut shard.pipe, &mut key);
            shard.indices.push(i);
        }
        let mut tasks = tokio::task::JoinSet::new();
        let timeout = self.settings.response_timeout;
        for shard in shards.into_iter().flatten() {
            let mut conn = conn.clone();
            tasks.spawn(async move {
                let replies = tokio::time::timeout(timeout, send(&mut conn, &shard.pipe, shard.replies)).await;
                (shard.indices, replies, conn)
            });
        }
        let mut results: Vec<Option<OpResult>> = vec![None; ops.len()];
        let (mut pipelines, mut failed, mut unsent) = (0usize, 0usize, 0usize);
        let mut first_failure: Option<FleetError> = None;
        while let Some(joined) = tasks.join_next().await {
            let (indices, replies, mut conn) = joined.map_err(|e| FleetError::new(format!("redis round task: {e}")))?;
            pipelines += 1;
            let failure = match replies {
                Ok(Ok(values)) => {
                    let mut it = values.iter();
                    for &i in &indices {
                        results[i] = Some(Self::decode(&ops[i], &mut it));
                    }
                    continue;
                }
                Err(_) => FleetError::new(format!("redis: no reply within {timeout:?}")).timed_out(),
                Ok(Err(e)) if e.kind() != redis::ErrorKind::IoError && e.code().is_some() => {
                    // A cluster pipeline with an error reply in it.
                    for (i, r) in self.recover_cluster_pipeline(&mut conn, ops, &indices, &e).await {
                        results[i] = Some(r);
                    }
                    continue;
                }
                // A refused connection (the manager reconnecting, a node
                // down): this pipeline was not written.
                Ok(Err(e)) if e.is_connection_refusal() => FleetError::unsent(format!("redis: {e}")),
                Ok(Err(e)) => FleetError::new(format!("redis: {e}")).timed_out_if(&e),
            };
            failed += 1;
            if failure.is_unsent() {
                unsent += 1;
            }
            for &i in &indices {
                results[i] = Some(OpResult::Failed(failure.clone()));
            }
            first_failure.get_or_insert(failure);
        }
        if failed > 0 {
            // The next round connects afresh.
            self.forget().await;
        }
        if failed == pipelines && (unsent == 0 || unsent == failed) {
            // Nothing went through: the whole round failed. (With some
            // pipelines certainly unsent and others maybe applied, the
            // per-operation results below say which deltas to send again.)
            let e = first_failure.unwrap_or_else(|| FleetError::new("redis: no pipeline"));
            return Err(e);
        }
        Ok(results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| OpResult::Failed(FleetError::new("redis: no reply for an operation"))))
            .collect())
    }
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***@{}", &url[..s], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_tagged_hashed_and_prefixed() {
        let store = RedisStore::new("redis://127.0.0.1:1/", RedisSettings::default()).unwrap();
        assert_eq!(
            store.key(0xab, 0x0000_0005_0000_1234, 7),
            "{rl:5}:000000ab:0000000500001234:7"
        );
        assert_eq!(redact("redis://u:secret@host:1/"), "redis://***@host:1/");
        assert!(RedisStore::new("nope://", RedisSettings::default()).is_err());
        assert_eq!(integer(&Value::BulkString(b"12".to_vec())), Some(12));
        assert_eq!(integer(&Value::BulkString(b"x".to_vec())), None);
        assert_eq!(integer(&Value::Nil), Some(0));
        // TLS from the URL, with the feature; a clear refusal without it.
        let tls = RedisStore::new("rediss://user:pw@127.0.0.1:1/", RedisSettings::default());
        assert_eq!(tls.is_ok(), cfg!(feature = "redis-tls"));
    }
}
