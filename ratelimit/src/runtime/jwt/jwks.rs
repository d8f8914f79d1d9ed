//! A JWKS fetched from a URL, refreshed in the background (feature
//! `service`, which brings the HTTP client): the fetcher, its settings, and
//! the verifier's constructors that use it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use super::keys::same_keys;
use super::{err, parse_jwks, JwtConfigError, JwtVerifier, Keys, PinnedKey};
use crate::shared::net::http::{http_client, http_get, is_http_or_https, HttpClient as Client};

async fn fetch(
    client: &Client,
    url: &http::Uri,
    timeout: Duration,
) -> Result<HashMap<String, PinnedKey>, JwtConfigError> {
    let (status, body) = http_get(client, url.clone(), 1 << 20, timeout)
        .await
        .map_err(|e| err(format!("JWKS {}: {e}", shown(url))))?;
    if status != http::StatusCode::OK {
        return Err(err(format!("JWKS {}: status {status}", shown(url))));
    }
    let text = std::str::from_utf8(&body).map_err(|_| err(format!("JWKS {}: not UTF-8", shown(url))))?;
    parse_jwks(text)
}

/// Counts one fetch in `ratelimit_jwks_fetches_total`.
fn count_fetch(ok: bool) {
    let result = if ok { "ok" } else { "error" };
    metrics::counter!(crate::shared::metrics::JWKS_FETCHES, "result" => result).increment(1);
}

/// The URL as logs show it: scheme, host, port and path, never the
/// query (where a provider may put an API key).
pub(super) fn shown(url: &http::Uri) -> String {
    let scheme = url.scheme_str().unwrap_or("");
    let authority = url.authority().map_or("", |a| a.as_str());
    // `user:password@` is refused at load; drop it here too, whatever.
    let host = authority.rsplit('@').next().unwrap_or("");
    format!("{scheme}://{host}{}", url.path())
}

/// Refresh failures are logged at most once per this long (with the
/// number of failures since the last success): a provider down for an
/// hour is a handful of lines, not one per cooldown.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// Tries of startup's fetch.
const STARTUP_TRIES: usize = 3;

/// Startup's fetch, and how many requests it took: an identity provider
/// restarting or briefly overloaded at deploy time (refused, timed out,
/// a 5xx or 429) is asked again, up to [`STARTUP_TRIES`] times with
/// 250 ms and then 750 ms between, before startup is refused with the
/// last reason. A JWKS that does not parse is not asked again.
async fn fetch_at_startup(
    client: &Client,
    url: &http::Uri,
    timeout: Duration,
) -> Result<(HashMap<String, PinnedKey>, usize), JwtConfigError> {
    let mut wait = Duration::from_millis(250);
    let mut tries = 0;
    loop {
        tries += 1;
        let reason = match http_get(client, url.clone(), 1 << 20, timeout).await {
            Ok((http::StatusCode::OK, body)) => {
                let parsed = std::str::from_utf8(&body)
                    .map_err(|_| err(format!("JWKS {}: not UTF-8", shown(url))))
                    .and_then(parse_jwks);
                count_fetch(parsed.is_ok());
                return parsed.map(|keys| (keys, tries));
            }
            Ok((status, _)) if !(status.is_server_error() || status == http::StatusCode::TOO_MANY_REQUESTS) => {
                count_fetch(false);
                return Err(err(format!("JWKS {}: status {status}", shown(url))));
            }
            Ok((status, _)) => format!("status {status}"),
            Err(e) => e,
        };
        count_fetch(false);
        if tries == STARTUP_TRIES {
            return Err(err(format!("JWKS {}: {reason} (tried {tries} times)", shown(url))));
        }
        tokio::time::sleep(wait).await;
        wait *= 3;
    }
}

/// A key set and its generation: a counter, bumped by each refresh that
/// installs a different set (a `kid` added or removed, or one whose
/// algorithm or key material changed), swapped together with the keys (a
/// heap address could be reused by a later set and revive verifications
/// made under a removed key). A refresh that fetches the same set keeps
/// the generation, so the tokens verified under it stay cached: an unknown
/// `kid` forces a refresh every cooldown, and a client sending one must not
/// empty every other client's cache with it.
pub(super) struct KeySet {
    generation: usize,
    pub(super) keys: HashMap<String, PinnedKey>,
}

pub(super) struct RemoteJwks {
    pub(super) url: http::Uri,
    client: Client,
    keys: ArcSwap<KeySet>,
    /// When the keys in force were fetched, in nanoseconds since
    /// `base`: an atomic, read on every verification (a mutex here
    /// would be a global lock on the request path).
    loaded_at_ns: AtomicU64,
    base: Instant,
    last_attempt: Mutex<Instant>,
    in_flight: AtomicBool,
    pub(super) fetches: AtomicUsize,
    /// Refreshes failed since the last success, and when one was last
    /// logged.
    failing: Mutex<(u64, Option<Instant>)>,
    settings: JwksSettings,
    runtime: tokio::runtime::Handle,
}

impl RemoteJwks {
    pub(super) async fn load(
        url: &str,
        settings: JwksSettings,
        tls: &crate::shared::net::TlsConfig,
    ) -> Result<Arc<Self>, JwtConfigError> {
        let url: http::Uri = url.parse().map_err(|e| err(format!("JWKS URL {url:?}: {e}")))?;
        if !is_http_or_https(&url) {
            return Err(err(format!(
                "JWKS URL {}: expected an http:// or https:// URL",
                shown(&url)
            )));
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| err("a JWKS URL needs a tokio runtime"))?;
        let client = http_client(tls).map_err(|e| err(format!("JWKS URL {}: {e}", shown(&url))))?;
        let (keys, tries) = fetch_at_startup(&client, &url, settings.timeout).await?;
        let now = Instant::now();
        Ok(Arc::new(RemoteJwks {
            url,
            client,
            keys: ArcSwap::from_pointee(KeySet { generation: 1, keys }),
            loaded_at_ns: AtomicU64::new(0),
            base: now,
            last_attempt: Mutex::new(now),
            in_flight: AtomicBool::new(false),
            fetches: AtomicUsize::new(tries),
            failing: Mutex::new((0, None)),
            settings,
            runtime,
        }))
    }

    /// The keys in force; starts a background refresh when they are older
    /// than the refresh interval.
    /// Changes whenever new keys are installed.
    pub(super) fn generation(&self) -> usize {
        self.keys.load().generation
    }

    /// Keys in force.
    pub(super) fn key_count(&self) -> usize {
        self.keys.load().keys.len()
    }

    pub(super) fn current(self: &Arc<Self>) -> Arc<KeySet> {
        self.refresh_if_stale();
        self.keys.load_full()
    }

    /// Starts a background refresh when the keys in force are older than
    /// the refresh interval: on every verification, cache hits included,
    /// so a key removed upstream stops verifying within an interval
    /// (plus the cooldown) however hot its tokens are.
    pub(super) fn refresh_if_stale(self: &Arc<Self>) {
        let now = nanos(self.base.elapsed());
        let loaded = self.loaded_at_ns.load(Ordering::Relaxed);
        if now.saturating_sub(loaded) >= nanos(self.settings.refresh_every) {
            self.refresh_soon();
        }
    }

    /// One background fetch, unless one is running or the last attempt
    /// was within the cooldown. Failures keep the keys in force.
    pub(super) fn refresh_soon(self: &Arc<Self>) {
        if self
            .in_flight
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let due = match self.last_attempt.lock() {
            Ok(mut last) if last.elapsed() >= self.settings.cooldown => {
                *last = Instant::now();
                true
            }
            _ => false,
        };
        if !due {
            self.in_flight.store(false, Ordering::Release);
            return;
        }
        /// Clears `in_flight` however the fetch ends: done, panicked, or
        /// dropped unrun by a runtime that has shut down.
        struct InFlight(Arc<RemoteJwks>);
        impl Drop for InFlight {
            fn drop(&mut self) {
                self.0.in_flight.store(false, Ordering::Release);
            }
        }
        let guard = InFlight(Arc::clone(self));
        self.runtime.spawn(async move {
            let this = &guard.0;
            let result = fetch(&this.client, &this.url, this.settings.timeout).await;
            count_fetch(result.is_ok());
            match result {
                Ok(keys) => {
                    let count = keys.len();
                    let current = this.keys.load_full();
                    if !same_keys(&current.keys, &keys) {
                        // One refresh at a time (`in_flight`): the counter
                        // only grows.
                        let generation = current.generation.wrapping_add(1);
                        this.keys.store(Arc::new(KeySet { generation, keys }));
                    }
                    this.loaded_at_ns.store(nanos(this.base.elapsed()), Ordering::Relaxed);
                    // Counted once the outcome is in force, so whoever
                    // sees the count grow sees the keys it brought.
                    this.fetches.fetch_add(1, Ordering::Relaxed);
                    // Reset whole: the next incident's first failure
                    // is logged at once.
                    let failed = this.failing.lock().map_or(0, |mut f| std::mem::take(&mut *f).0);
                    if failed > 0 {
                        tracing::info!(
                            target: "ratelimit",
                            url = %shown(&this.url),
                            failed,
                            keys = count,
                            "JWKS refresh succeeded again"
                        );
                    }
                }
                // The first failure, then at most one line a minute: a
                // certificate that stopped verifying is seen, not silent,
                // and a provider down for hours is not a flood.
                Err(e) => {
                    this.fetches.fetch_add(1, Ordering::Relaxed);
                    let due = this.failing.lock().ok().and_then(|mut f| {
                        f.0 += 1;
                        let due = f.1.is_none_or(|at| at.elapsed() >= LOG_EVERY);
                        due.then(|| {
                            f.1 = Some(Instant::now());
                            f.0
                        })
                    });
                    if let Some(failed) = due {
                        tracing::warn!(
                            target: "ratelimit",
                            url = %shown(&this.url),
                            failed,
                            keys_in_force = this.keys.load().keys.len(),
                            "JWKS refresh failed, the keys in force stay: {e}"
                        );
                    }
                }
            }
            drop(guard);
        });
    }
}

/// How a JWKS URL is fetched and refreshed.
#[cfg_attr(docsrs, doc(cfg(feature = "jwt")))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JwksSettings {
    /// Refresh in the background after this long (default 10 min).
    pub refresh_every: Duration,
    /// Fetch at most once per this long, however many unknown `kid`s
    /// arrive (default 30 s).
    pub cooldown: Duration,
    /// Per-fetch timeout (default 2 s).
    pub timeout: Duration,
}

impl Default for JwksSettings {
    fn default() -> Self {
        JwksSettings {
            refresh_every: crate::shared::defaults::JWKS_REFRESH,
            cooldown: crate::shared::defaults::JWKS_COOLDOWN,
            timeout: Duration::from_secs(2),
        }
    }
}

impl JwtVerifier {
    /// A JWKS fetched from `url` (`http://` or `https://`), now, and
    /// refreshed in the background: every `refresh_every`, and when a token
    /// names an unknown `kid` (a key rotation), at most once per `cooldown`
    /// however many such tokens arrive. A failed refresh keeps the keys in
    /// force (and logs a `WARN` line with the URL and the reason). Fails
    /// when the first fetch fails (a verifier without keys would make every
    /// client anonymous), with the URL and the reason.
    ///
    /// `https://` verifies the server's certificate, hostname included,
    /// against the webpki roots; [`JwtVerifier::jwks_url_with_tls`] trusts a
    /// private CA instead.
    pub async fn jwks_url(url: &str, settings: JwksSettings) -> Result<Self, JwtConfigError> {
        Self::jwks_url_with_tls(url, settings, &crate::shared::net::TlsConfig::default()).await
    }

    /// [`JwtVerifier::jwks_url`] whose `https://` trusts the CAs of
    /// `tls.ca_file` (and only them) when set, the webpki roots otherwise
    /// (what [`JwtVerifier::from_settings`] does with `[tls]`). The crypto provider is the application's process
    /// default if it installed one, else ring, never installed process-wide.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use ratelimit::config::TlsConfig;
    /// use ratelimit::jwt::{JwksSettings, JwtVerifier};
    ///
    /// let tls = TlsConfig::with_ca_file("/nonexistent/idp-ca.pem");
    /// let url = "https://idp.internal/.well-known/jwks.json";
    /// let err = JwtVerifier::jwks_url_with_tls(url, JwksSettings::default(), &tls)
    ///     .await
    ///     .unwrap_err();
    /// // The URL and the reason (here: the CA file is missing).
    /// assert!(err.to_string().contains(url) && err.to_string().contains("idp-ca.pem"), "{err}");
    /// # }
    /// ```
    pub async fn jwks_url_with_tls(
        url: &str,
        settings: JwksSettings,
        tls: &crate::shared::net::TlsConfig,
    ) -> Result<Self, JwtConfigError> {
        Ok(Self::with_keys(Keys::Remote(
            RemoteJwks::load(url, settings, tls).await?,
        )))
    }

    /// How many times the JWKS URL was fetched (for monitoring and tests),
    /// each counted once its outcome is in force (the keys it brought
    /// installed, or the keys in force kept); 0 for other key sources.
    pub fn jwks_fetches(&self) -> usize {
        match &self.keys {
            Keys::Remote(r) => r.fetches.load(std::sync::atomic::Ordering::Relaxed),
            _ => 0,
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
