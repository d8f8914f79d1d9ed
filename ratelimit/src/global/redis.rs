//! [`GlobalStore`] on Redis: native commands only (`INCRBY`, `PEXPIRE`,
//! `MGET`), pipelined, one pipeline per key shard sent concurrently, with a
//! timeout on the connection and on every round. Works against a single
//! server (through a `ConnectionManager`, which reconnects) and against Redis
//! Cluster (keys are hash-tagged by shard, so a pipeline never crosses
//! slots). Authentication and TLS come from the URL (`redis://user:pass@host`;
//! `rediss://` needs the `redis-tls` feature).

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Pipeline, Value};
use tokio::sync::Mutex;

use super::store::{GlobalError, GlobalStore, ItemResult, SyncItem, Totals};

/// How to reach Redis, beyond the URL.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// Prefix of every key (`{prefix:route:shard}:key:epoch`).
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
}

impl Default for RedisSettings {
    fn default() -> Self {
        RedisSettings {
            prefix: "rl".to_owned(),
            cluster: false,
            connect_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_millis(250),
            shards: 16,
        }
    }
}

enum Client {
    Single(redis::Client),
    Cluster(ClusterClient),
}

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// The Redis [`GlobalStore`]. Creating it checks the URL only; it connects
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
    pub fn new(url: &str, settings: RedisSettings) -> Result<RedisStore, GlobalError> {
        if url.starts_with("rediss://") {
            #[cfg(not(feature = "redis-tls"))]
            return Err(GlobalError::new(
                "rediss:// (TLS) needs the `redis-tls` feature of ratelimit",
            ));
            // The process-wide rustls provider; already installed is fine.
            #[cfg(feature = "redis-tls")]
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let bad = |e: redis::RedisError| GlobalError::new(format!("redis url {:?}: {e}", redact(url)));
        let client = if settings.cluster {
            Client::Cluster(
                // No retries: a retried pipeline could apply its INCRBYs twice.
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
            return Err(GlobalError::new("redis shards must be at least 1"));
        }
        Ok(RedisStore {
            client,
            conn: Mutex::new(None),
            settings,
        })
    }

    /// The Redis key of (route, key, epoch): `{prefix:shard}:route:key:epoch`.
    /// The hash tag is the shard alone, so every key of a round's pipeline
    /// (one per shard, whatever the routes) is in one cluster slot; `key` is
    /// a keyed hash, never the raw client value.
    pub fn key(&self, route: u32, key: u64, epoch: u64) -> String {
        let shard = self.shard(key);
        format!("{{{}:{shard:x}}}:{route:08x}:{key:016x}:{epoch}", self.settings.prefix)
    }

    /// The shard of a fleet id: from its high half (the low bit is fixed).
    fn shard(&self, key: u64) -> u64 {
        (key >> 32) % u64::from(self.settings.shards)
    }

    async fn connection(&self) -> Result<Conn, GlobalError> {
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
                .map_err(|_| GlobalError::unsent(format!("redis: no connection within {timeout:?}")))?
                .map_err(|e| GlobalError::unsent(format!("redis: {e}")))?;
                Conn::Single(manager)
            }
            Client::Cluster(client) => {
                let conn = tokio::time::timeout(timeout.saturating_mul(2), client.get_async_connection())
                    .await
                    .map_err(|_| GlobalError::unsent(format!("redis cluster: no connection within {timeout:?}")))?
                    .map_err(|e| GlobalError::unsent(format!("redis cluster: {e}")))?;
                Conn::Cluster(conn)
            }
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
    }
}

/// An integer reply, or the integer a bulk string holds.
fn integer(v: &Value) -> Option<u64> {
    match v {
        Value::Nil => Some(0),
        Value::Int(n) => u64::try_from(*n).ok(),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.trim().parse().ok(),
        Value::SimpleString(s) => s.trim().parse().ok(),
        _ => None,
    }
}

impl GlobalStore for RedisStore {
    async fn sync(&self, items: &[SyncItem], ttl: Duration) -> Result<Vec<ItemResult>, GlobalError> {
        let mut conn = self.connection().await?;
        if items.is_empty() {
            // Nothing to push or pull: check the store is there, so an idle
            // instance still knows (and says) whether it is degraded.
            let ping = tokio::time::timeout(self.settings.response_timeout, async {
                let pipe = redis::pipe().cmd("PING").to_owned();
                send(&mut conn, &pipe, 1).await
            })
            .await;
            return match ping {
                Ok(Ok(_)) => Ok(Vec::new()),
                Ok(Err(e)) => {
                    self.forget().await;
                    Err(GlobalError::unsent(format!("redis: {e}")))
                }
                Err(_) => {
                    self.forget().await;
                    Err(GlobalError::unsent(format!(
                        "redis: no PING reply within {:?}",
                        self.settings.response_timeout
                    )))
                }
            };
        }
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let shards = self.settings.shards;
        // Item indices by shard; one pipeline per non-empty shard.
        let mut by_shard: Vec<Vec<usize>> = vec![Vec::new(); shards as usize];
        for (i, item) in items.iter().enumerate() {
            by_shard[self.shard(item.key) as usize].push(i);
        }
        let mut tasks = tokio::task::JoinSet::new();
        for indices in by_shard.into_iter().filter(|v| !v.is_empty()) {
            let mut pipe = redis::pipe();
            let mut count = 0;
            // Each item's (current, previous) keys, kept for a read-back.
            let mut keys = Vec::with_capacity(indices.len());
            for &i in &indices {
                let item = &items[i];
                let key = self.key(item.route, item.key, item.epoch);
                let previous = self.key(item.route, item.key, item.epoch.saturating_sub(1));
                if item.delta > 0 {
                    pipe.cmd("INCRBY").arg(&key).arg(item.delta);
                    pipe.cmd("PEXPIRE").arg(&key).arg(ttl_ms);
                    count += 2;
                }
                if item.pull {
                    pipe.cmd("MGET").arg(&key).arg(&previous);
                    count += 1;
                }
                keys.push((key, previous));
            }
            let mut conn = conn.clone();
            let timeout = self.settings.response_timeout;
            tasks.spawn(async move {
                let replies = tokio::time::timeout(timeout, send(&mut conn, &pipe, count)).await;
                // A cluster connection turns one error reply (a key holding
                // garbage) into an error for the whole pipeline, though the
                // server ran every command. Read the keys back to tell which.
                let rechecked = match &replies {
                    Ok(Err(e)) if e.kind() == redis::ErrorKind::ResponseError => {
                        let mut recheck = redis::pipe();
                        for (key, previous) in &keys {
                            recheck.cmd("MGET").arg(key).arg(previous);
                        }
                        match tokio::time::timeout(timeout, send(&mut conn, &recheck, keys.len())).await {
                            Ok(Ok(values)) => Some(values),
                            _ => None,
                        }
                    }
                    _ => None,
                };
                (indices, replies, rechecked)
            });
        }
        let mut results = vec![
            ItemResult {
                pushed: false,
                totals: Totals::Unknown,
            };
            items.len()
        ];
        let mut failure = None;
        while let Some(joined) = tasks.join_next().await {
            let (indices, replies, rechecked) =
                joined.map_err(|e| GlobalError::new(format!("redis round task: {e}")))?;
            if let Some(values) = rechecked {
                // Every INCRBY ran except on keys that hold something other
                // than an integer; those, and only those, did not count.
                for (&i, value) in indices.iter().zip(&values) {
                    let item = &items[i];
                    let pair = match value {
                        Value::Array(pair) => Some(pair),
                        _ => None,
                    };
                    let current = pair.and_then(|p| p.first()).and_then(integer_or_missing);
                    let previous = pair.and_then(|p| p.get(1)).map_or(Some(Some(0)), integer_or_missing);
                    results[i] = match (current, previous) {
                        (Some(Some(current)), Some(Some(previous))) => ItemResult {
                            pushed: true,
                            totals: if item.pull {
                                Totals::Known { previous, current }
                            } else {
                                Totals::Unknown
                            },
                        },
                        // Garbage, or a key of another type (nil after an
                        // INCRBY): not counted, totals unknown.
                        _ => ItemResult {
                            pushed: item.delta == 0,
                            totals: Totals::Unknown,
                        },
                    };
                }
                continue;
            }
            let replies = match replies {
                Err(_) => {
                    failure = Some(GlobalError::new(format!(
                        "redis: no reply within {:?}",
                        self.settings.response_timeout
                    )));
                    continue;
                }
                // A refused connection (the manager reconnecting): this
                // pipeline was not written. Unsent only if no pipeline was.
                Ok(Err(e)) if e.is_connection_refusal() => {
                    failure.get_or_insert(GlobalError::unsent(format!("redis: {e}")));
                    continue;
                }
                Ok(Err(e)) => {
                    failure = Some(GlobalError::new(format!("redis: {e}")));
                    continue;
                }
                Ok(Ok(r)) => r,
            };
            let mut replies = replies.iter();
            for i in indices {
                let item = &items[i];
                let mut result = ItemResult {
                    pushed: true,
                    totals: Totals::Unknown,
                };
                if item.delta > 0 {
                    let incr = replies.next();
                    let _expire = replies.next();
                    result.pushed = matches!(incr, Some(Value::Int(_)));
                }
                if item.pull {
                    let reply = replies.next();
                    // A key whose INCRBY failed holds something else (MGET
                    // reads it as nil): its totals are unknown, not zero.
                    let usable = result.pushed || item.delta == 0;
                    if let (true, Some(Value::Array(pair))) = (usable, reply) {
                        let current = pair.first().and_then(integer);
                        let previous = pair.get(1).map_or(Some(0), integer);
                        if let (Some(current), Some(previous)) = (current, previous) {
                            result.totals = Totals::Known { previous, current };
                        }
                    }
                }
                results[i] = result;
            }
        }
        let any_sent = results.iter().any(|r| r.pushed || r.totals != Totals::Unknown);
        let failure = failure.map(|f| {
            if f.is_unsent() && any_sent {
                GlobalError::new(f.to_string())
            } else {
                f
            }
        });
        match failure {
            // Any shard failing fails the round: the gate goes local-only
            // rather than trust a partial view. The round's deltas are then
            // treated as maybe applied (never sent again), unless nothing
            // at all was sent.
            Some(e) => {
                self.forget().await;
                Err(e)
            }
            None => Ok(results),
        }
    }
}

/// An integer reply (`Some(Some(n))`), a missing key where one was just
/// incremented cannot be (`Some(None)` for nil), or garbage (`None`).
fn integer_or_missing(v: &Value) -> Option<Option<u64>> {
    match v {
        Value::Nil => Some(None),
        other => integer(other).map(Some),
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
