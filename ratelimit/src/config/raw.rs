//! The TOML shape of a configuration, its parsing, environment overrides and
//! validation into [`Config`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer};

use super::error::{field_at_line, line_col, locate_key};
use super::rules::{self, PathPattern, ResolverSpec, RuleConfig};
use super::GlobalConfig;
use super::{
    Config, ConfigError, HeaderStyle, JwtKeySource, JwtLimits, JwtVerification, Profile, ResponseConfig, RouteConfig,
    ServiceConfig, StoreConfig, ENV_PREFIX,
};
use crate::key::{ClientIpConfig, ForwardedHeader};
use crate::store::OverflowPolicy;
use crate::Quota;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    default_profile: Option<String>,
    #[serde(default)]
    profiles: BTreeMap<String, RawProfile>,
    #[serde(default)]
    routes: BTreeMap<String, RawRoute>,
    #[serde(default)]
    store: RawStore,
    #[serde(default)]
    ip: RawIp,
    #[serde(default)]
    headers: RawHeaders,
    jwt: Option<RawJwt>,
    service: Option<RawService>,
    #[serde(default)]
    header_keys: RawHeaderKeys,
    #[serde(default)]
    rules: Vec<RawRule>,
    global: Option<RawGlobal>,
    #[serde(default)]
    responses: RawResponses,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGlobal {
    redis_url: String,
    #[serde(default)]
    cluster: bool,
    #[serde(default = "hundred_ms", deserialize_with = "duration")]
    sync_interval: Duration,
    #[serde(default = "ten_seconds", deserialize_with = "duration")]
    window: Duration,
    #[serde(default = "default_prefix")]
    key_prefix: String,
    #[serde(default = "two_hundred_fifty_ms", deserialize_with = "duration")]
    timeout: Duration,
    #[serde(default = "one_second", deserialize_with = "duration")]
    connect_timeout: Duration,
    #[serde(default = "fifty_thousand", deserialize_with = "max_keys")]
    max_keys: usize,
    key_secret_env: Option<String>,
    sub_epochs: Option<u32>,
    ca_file: Option<PathBuf>,
}

fn hundred_ms() -> Duration {
    GlobalConfig::DEFAULT_SYNC_INTERVAL
}
fn ten_seconds() -> Duration {
    GlobalConfig::DEFAULT_WINDOW
}
fn two_hundred_fifty_ms() -> Duration {
    GlobalConfig::DEFAULT_TIMEOUT
}
fn one_second() -> Duration {
    GlobalConfig::DEFAULT_CONNECT_TIMEOUT
}
fn fifty_thousand() -> usize {
    GlobalConfig::DEFAULT_MAX_KEYS
}
fn default_prefix() -> String {
    GlobalConfig::DEFAULT_KEY_PREFIX.to_owned()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: String,
    path: String,
    #[serde(default)]
    methods: Vec<String>,
    key: String,
    resolve: Vec<String>,
    #[serde(default, deserialize_with = "opt_positive_u32")]
    cost: Option<u32>,
    #[serde(default)]
    shadow: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawResponses {
    problem_type: String,
    problem_title: String,
}

impl Default for RawResponses {
    fn default() -> Self {
        let d = ResponseConfig::default();
        RawResponses {
            problem_type: d.problem_type,
            problem_title: d.problem_title,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    #[serde(deserialize_with = "quota")]
    rate: Quota,
    #[serde(default, deserialize_with = "opt_positive_u32")]
    burst: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    profile: Option<String>,
    shadow: Option<bool>,
    #[serde(default, deserialize_with = "opt_positive_u32")]
    cost: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawStore {
    #[serde(deserialize_with = "max_keys")]
    max_keys: usize,
    #[serde(deserialize_with = "duration")]
    sweep_interval: Duration,
    #[serde(deserialize_with = "overflow")]
    overflow: OverflowPolicy,
}

impl Default for RawStore {
    fn default() -> Self {
        let d = StoreConfig::default();
        RawStore {
            max_keys: d.max_keys,
            sweep_interval: d.sweep_interval,
            overflow: d.overflow,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawIp {
    #[serde(default, deserialize_with = "cidrs")]
    trusted_proxies: Vec<IpNet>,
    #[serde(default, deserialize_with = "forwarded_header")]
    forwarded_header: ForwardedHeader,
    #[serde(default, deserialize_with = "opt_prefix::<128, _>")]
    ipv6_prefix: Option<u8>,
    #[serde(default, deserialize_with = "opt_prefix::<32, _>")]
    ipv4_prefix: Option<u8>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHeaders {
    #[serde(default, deserialize_with = "header_style")]
    style: HeaderStyle,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJwt {
    #[serde(default = "tier_claim", deserialize_with = "claim_name")]
    tier_claim: String,
    #[serde(default = "rate_claim", deserialize_with = "claim_name")]
    rate_claim: String,
    #[serde(default = "burst_claim", deserialize_with = "claim_name")]
    burst_claim: String,
    #[serde(deserialize_with = "quota")]
    max_rate: Quota,
    #[serde(deserialize_with = "positive_u32")]
    max_burst: u32,
    hmac_secret_env: Option<String>,
    pem_file: Option<String>,
    jwks_file: Option<String>,
    #[serde(default, deserialize_with = "opt_http_url")]
    jwks_url: Option<String>,
    #[serde(default, deserialize_with = "opt_algorithm")]
    algorithm: Option<String>,
    #[serde(default)]
    issuer: Vec<String>,
    #[serde(default)]
    audience: Vec<String>,
    #[serde(default = "leeway", deserialize_with = "duration")]
    leeway: Duration,
    #[serde(default = "ten_minutes", deserialize_with = "duration")]
    jwks_refresh: Duration,
    #[serde(default = "jwks_cooldown", deserialize_with = "duration")]
    jwks_cooldown: Duration,
}

fn leeway() -> Duration {
    JwtVerification::DEFAULT_LEEWAY
}
fn jwks_cooldown() -> Duration {
    JwtVerification::DEFAULT_JWKS_COOLDOWN
}
fn ten_minutes() -> Duration {
    JwtVerification::DEFAULT_JWKS_REFRESH
}

const ALGORITHMS: &[&str] = &[
    "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

fn opt_algorithm<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let alg = String::deserialize(d)?;
    if !ALGORITHMS.contains(&alg.as_str()) {
        return Err(serde::de::Error::custom(format!(
            "unknown algorithm {alg:?}: expected one of {}",
            ALGORITHMS.join(", ")
        )));
    }
    Ok(Some(alg))
}

fn opt_http_url<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    http_url(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawHeaderKeys {
    #[serde(deserialize_with = "positive_u32")]
    per_ip: u32,
    #[serde(deserialize_with = "duration")]
    window: Duration,
    #[serde(deserialize_with = "max_keys")]
    max_tracked: usize,
}

impl Default for RawHeaderKeys {
    fn default() -> Self {
        let d = crate::key::HeaderCardinality::default();
        RawHeaderKeys {
            per_ip: d.per_ip,
            window: d.window,
            max_tracked: d.max_tracked,
        }
    }
}

fn tier_claim() -> String {
    JwtLimits::DEFAULT_TIER_CLAIM.to_owned()
}
fn rate_claim() -> String {
    JwtLimits::DEFAULT_RATE_CLAIM.to_owned()
}
fn burst_claim() -> String {
    JwtLimits::DEFAULT_BURST_CLAIM.to_owned()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawService {
    #[serde(deserialize_with = "http_url")]
    url: String,
    #[serde(default = "sixty_seconds", deserialize_with = "duration")]
    ttl: Duration,
    #[serde(default = "five_seconds", deserialize_with = "duration")]
    negative_ttl: Duration,
    #[serde(default = "two_hundred_ms", deserialize_with = "duration")]
    timeout: Duration,
    #[serde(default = "ten_thousand", deserialize_with = "max_keys")]
    max_entries: usize,
}

fn sixty_seconds() -> Duration {
    ServiceConfig::DEFAULT_TTL
}
fn five_seconds() -> Duration {
    ServiceConfig::DEFAULT_NEGATIVE_TTL
}
fn two_hundred_ms() -> Duration {
    ServiceConfig::DEFAULT_TIMEOUT
}
fn ten_thousand() -> usize {
    ServiceConfig::DEFAULT_MAX_ENTRIES
}

// ---- field deserializers: each error lands on the field's span ---------------

fn quota<'de, D: Deserializer<'de>>(d: D) -> Result<Quota, D::Error> {
    let text = String::deserialize(d)?;
    text.parse().map_err(serde::de::Error::custom)
}

/// A whole number in `1..=max`, or an error naming the range (`what`: "a
/// whole number", "a prefix length").
fn ranged<'de, D: Deserializer<'de>>(d: D, max: i64, what: &str) -> Result<i64, D::Error> {
    let n = i64::deserialize(d)?;
    if !(1..=max).contains(&n) {
        return Err(serde::de::Error::custom(format!(
            "expected {what} from 1 to {max}, got {n}"
        )));
    }
    Ok(n)
}

fn positive_u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    ranged(d, i64::from(u32::MAX), "a whole number").map(|n| n as u32)
}

fn opt_positive_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    positive_u32(d).map(Some)
}

fn max_keys<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    ranged(d, 1 << 32, "a whole number").map(|n| n as usize)
}

fn opt_prefix<'de, const MAX: u8, D: Deserializer<'de>>(d: D) -> Result<Option<u8>, D::Error> {
    ranged(d, i64::from(MAX), "a prefix length").map(|n| Some(n as u8))
}

/// `"250ms"`, `"10s"`, `"5min"`, `"1h"`; must be longer than zero.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let (n, unit) = t.split_at(digits);
    let n: u64 = n.parse().map_err(|_| {
        format!("invalid duration {text:?}: expected a number and a unit, such as \"250ms\" or \"10s\"")
    })?;
    let unit_ns: u64 = match unit.trim() {
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "min" | "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => {
            return Err(format!(
                "invalid duration {text:?}: unknown unit; expected ms, s, min or h"
            ))
        }
    };
    let ns = n
        .checked_mul(unit_ns)
        .ok_or_else(|| format!("invalid duration {text:?}: too long"))?;
    if ns == 0 {
        return Err(format!("invalid duration {text:?}: must be longer than zero"));
    }
    Ok(Duration::from_nanos(ns))
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

fn cidrs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
    let items = Vec::<String>::deserialize(d)?;
    items
        .iter()
        .map(|s| {
            let s = s.trim();
            // A bare address means that one host.
            s.parse::<IpNet>()
                .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    serde::de::Error::custom(format!(
                        "invalid CIDR {s:?}: expected an address or network such as \"10.0.0.0/8\" or \"2001:db8::/32\""
                    ))
                })
        })
        .collect()
}

fn overflow<'de, D: Deserializer<'de>>(d: D) -> Result<OverflowPolicy, D::Error> {
    match String::deserialize(d)?.as_str() {
        "shared" => Ok(OverflowPolicy::SharedBucket),
        "refuse" => Ok(OverflowPolicy::Refuse),
        other => Err(serde::de::Error::custom(format!(
            "unknown overflow policy {other:?}: expected \"shared\" or \"refuse\""
        ))),
    }
}

fn forwarded_header<'de, D: Deserializer<'de>>(d: D) -> Result<ForwardedHeader, D::Error> {
    match String::deserialize(d)?.to_ascii_lowercase().as_str() {
        "x-forwarded-for" => Ok(ForwardedHeader::XForwardedFor),
        "forwarded" => Ok(ForwardedHeader::Forwarded),
        other => Err(serde::de::Error::custom(format!(
            "unknown forwarded header {other:?}: expected \"x-forwarded-for\" or \"forwarded\""
        ))),
    }
}

fn header_style<'de, D: Deserializer<'de>>(d: D) -> Result<HeaderStyle, D::Error> {
    match String::deserialize(d)?.as_str() {
        "draft-06" => Ok(HeaderStyle::Draft06),
        "draft-11" => Ok(HeaderStyle::Draft11),
        "both" => Ok(HeaderStyle::Both),
        "none" => Ok(HeaderStyle::None),
        other => Err(serde::de::Error::custom(format!(
            "unknown header style {other:?}: expected \"draft-06\", \"draft-11\", \"both\" or \"none\""
        ))),
    }
}

fn claim_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let name = String::deserialize(d)?;
    rules::check_claim_path(&name).map_err(serde::de::Error::custom)?;
    Ok(name)
}

fn http_url<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let url = String::deserialize(d)?;
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(host) if !host.is_empty() && !host.starts_with('/') => Ok(url),
        _ => Err(serde::de::Error::custom(format!(
            "invalid URL {url:?}: expected http:// or https:// and a host"
        ))),
    }
}

// ---- loading ------------------------------------------------------------------

/// The `RATELIMIT__*` variables of the process environment. Variables that
/// are not valid Unicode are skipped unless they are ours, which is an error.
pub(super) fn env_overrides() -> Result<Vec<(String, String)>, ConfigError> {
    let mut out = Vec::new();
    for (name, value) in std::env::vars_os() {
        let ours = name.as_encoded_bytes().starts_with(ENV_PREFIX.as_bytes());
        if !ours {
            continue;
        }
        match (name.into_string(), value.into_string()) {
            (Ok(n), Ok(v)) => out.push((n, v)),
            (Ok(n), Err(_)) => {
                return Err(ConfigError::new(
                    "environment",
                    format!("{n}: the value is not valid UTF-8"),
                ));
            }
            (Err(n), _) => {
                return Err(ConfigError::new(
                    "environment",
                    format!("{}: the name is not valid UTF-8", n.to_string_lossy()),
                ));
            }
        }
    }
    Ok(out)
}

pub(super) fn load(
    text: &str,
    path: Option<&Path>,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<Config, ConfigError> {
    let source = path.map_or_else(|| "<config>".to_owned(), |p| p.display().to_string());
    let raw: RawConfig = toml::from_str(text).map_err(|e| toml_error(&source, text, &e))?;

    let overrides: Vec<(String, String)> = vars.into_iter().filter(|(k, _)| k.starts_with(ENV_PREFIX)).collect();
    if overrides.is_empty() {
        return validate(raw, text, &source);
    }
    let (raw, paths) = apply_env(text, &overrides)?;
    let names: Vec<&str> = overrides.iter().map(|(k, _)| k.as_str()).collect();
    validate(raw, text, &source).map_err(|e| {
        // An error on an overridden field is the environment's, not the file's.
        let overridden = e
            .field()
            .is_some_and(|f| paths.iter().any(|p| f == p || f.starts_with(&format!("{p}."))));
        if overridden {
            let mut env = ConfigError::new(&format!("environment overrides ({})", names.join(", ")), e.message());
            if let Some(f) = e.field() {
                env = env.with_field(f);
            }
            env
        } else {
            e
        }
    })
}

/// `[global] ca_file`: readable, and PEM CA certificates (checked at
/// startup, so a bad file fails there rather than at the first connection).
#[cfg(feature = "redis-tls")]
fn check_ca_file(path: &Path) -> Result<(), String> {
    crate::global::tls::read_ca_file(path).map(drop)
}

#[cfg(not(feature = "redis-tls"))]
fn check_ca_file(path: &Path) -> Result<(), String> {
    Err(format!(
        "{}: TLS needs the `redis-tls` feature of ratelimit",
        path.display()
    ))
}

fn toml_error(source: &str, text: &str, e: &toml::de::Error) -> ConfigError {
    let message = e.message().trim().to_owned();
    let mut err = ConfigError::new(source, message);
    if let Some(span) = e.span() {
        let (line, col) = line_col(text, span.start);
        err = err.at(line, col);
        if let Some(field) = field_at_line(text, line) {
            err = err.with_field(field);
        }
    }
    err
}

/// Applies the overrides; returns the configuration and the dotted paths
/// (as spelled in the file) that were overridden.
fn apply_env(text: &str, overrides: &[(String, String)]) -> Result<(RawConfig, Vec<String>), ConfigError> {
    let names: Vec<&str> = overrides.iter().map(|(k, _)| k.as_str()).collect();
    let source = format!("environment overrides ({})", names.join(", "));
    let mut table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::new(&source, e.message().to_owned()))?;
    let mut paths = Vec::new();
    for (name, value) in overrides {
        let wanted: Vec<&str> = name[ENV_PREFIX.len()..].split("__").collect();
        if wanted.iter().any(|s| s.is_empty()) {
            return Err(ConfigError::new(&source, format!("{name}: empty path segment")));
        }
        // Match each segment against the keys present, ignoring case; inside
        // `profiles` and `routes` (names chosen in the file) a segment must
        // name an existing entry.
        let mut path: Vec<String> = Vec::new();
        {
            let mut node: Option<&toml::Table> = Some(&table);
            for (depth, seg) in wanted.iter().enumerate() {
                let existing: Vec<&String> = node
                    .map(|t| t.keys().filter(|k| k.eq_ignore_ascii_case(seg)).collect())
                    .unwrap_or_default();
                let in_named_map = depth == 1 && matches!(path[0].as_str(), "profiles" | "routes");
                let key = match existing.as_slice() {
                    [one] => (*one).clone(),
                    [] if in_named_map => {
                        return Err(ConfigError::new(
                            &source,
                            format!("{name}: there is no {} named {seg:?} in the file; overrides change existing entries only", path[0].trim_end_matches('s')),
                        ));
                    }
                    [] => seg.to_ascii_lowercase(),
                    _ => {
                        return Err(ConfigError::new(
                            &source,
                            format!("{name}: {seg:?} matches several keys that differ only in case"),
                        ));
                    }
                };
                node = node.and_then(|t| t.get(&key)).and_then(toml::Value::as_table);
                path.push(key);
            }
        }
        paths.push(path.join("."));
        let value = format!("v = {value}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(value.clone()));
        let (last, parents) = path.split_last().expect("non-empty: split yields one item at least");
        let mut node = &mut table;
        for seg in parents {
            let entry = node
                .entry(seg.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            node = match entry {
                toml::Value::Table(t) => t,
                _ => {
                    return Err(
                        ConfigError::new(&source, format!("{name}: {seg} is not a table")).with_field(path.join("."))
                    );
                }
            };
        }
        node.insert(last.clone(), value);
    }
    let raw = toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| ConfigError::new(&source, e.message().trim().to_owned()))?;
    Ok((raw, paths))
}

fn validate(raw: RawConfig, text: &str, source: &str) -> Result<Config, ConfigError> {
    let located = |path: &[&str], key: &str, message: String| {
        let field = path
            .iter()
            .chain(std::iter::once(&key))
            .copied()
            .collect::<Vec<_>>()
            .join(".");
        let err = ConfigError::new(source, message).with_field(field);
        match locate_key(text, path, key) {
            Some((line, col)) => err.at(line, col),
            None => err,
        }
    };

    if raw.profiles.is_empty() {
        return Err(ConfigError::new(
            source,
            "no profiles: define at least one, e.g. [profiles.standard] rate = \"600/min\"",
        )
        .with_field("profiles"));
    }
    let profiles: BTreeMap<String, Profile> = raw
        .profiles
        .into_iter()
        .map(|(name, p)| {
            let quota = match p.burst {
                Some(b) => p.rate.with_burst(b),
                None => p.rate,
            };
            let profile = Profile {
                name: std::sync::Arc::from(name.as_str()),
                quota,
            };
            (name, profile)
        })
        .collect();
    let known = || profiles.keys().cloned().collect::<Vec<_>>().join(", ");

    let default_profile = match raw.default_profile {
        Some(name) if profiles.contains_key(&name) => name,
        Some(name) => {
            return Err(located(
                &[],
                "default_profile",
                format!("unknown profile {name:?}; defined profiles: {}", known()),
            ))
        }
        None if profiles.len() == 1 => profiles.keys().next().cloned().unwrap_or_default(),
        None => {
            return Err(ConfigError::new(
                source,
                format!(
                    "missing: name the profile used when nothing else applies; defined profiles: {}",
                    known()
                ),
            )
            .with_field("default_profile"))
        }
    };

    let mut routes = BTreeMap::new();
    for (name, r) in raw.routes {
        if let Some(p) = &r.profile {
            if !profiles.contains_key(p) {
                return Err(located(
                    &["routes", &name],
                    "profile",
                    format!("unknown profile {p:?}; defined profiles: {}", known()),
                ));
            }
        }
        let profile = r.profile.as_deref().unwrap_or(&default_profile);
        let cost = r.cost.unwrap_or(1);
        if let Some(p) = profiles.get(profile) {
            if cost > p.quota.burst() {
                return Err(located(
                    &["routes", &name],
                    "cost",
                    format!(
                        "cost {cost} is above the burst {} of profile {profile:?}: every request would be refused",
                        p.quota.burst()
                    ),
                ));
            }
        }
        routes.insert(
            name,
            RouteConfig {
                profile: r.profile,
                shadow: r.shadow,
                cost: r.cost,
            },
        );
    }

    if let Some(all) = raw.ip.trusted_proxies.iter().find(|n| n.prefix_len() == 0) {
        return Err(located(
            &["ip"],
            "trusted_proxies",
            format!("{all} trusts every address: any client could choose its own key with a forwarded header"),
        ));
    }
    let mut ip = ClientIpConfig::default()
        .trust_proxies(raw.ip.trusted_proxies)
        .forwarded_header(raw.ip.forwarded_header);
    if let Some(p) = raw.ip.ipv6_prefix {
        ip = ip
            .ipv6_prefix(p)
            .map_err(|e| located(&["ip"], "ipv6_prefix", e.to_string()))?;
    }
    if let Some(p) = raw.ip.ipv4_prefix {
        ip = ip
            .ipv4_prefix(p)
            .map_err(|e| located(&["ip"], "ipv4_prefix", e.to_string()))?;
    }

    let jwt = match raw.jwt {
        None => None,
        Some(j) => {
            let sources: Vec<(&str, JwtKeySource)> = [
                j.hmac_secret_env
                    .clone()
                    .map(|v| ("hmac_secret_env", JwtKeySource::HmacSecretEnv(v))),
                j.pem_file.clone().map(|v| ("pem_file", JwtKeySource::PemFile(v))),
                j.jwks_file.clone().map(|v| ("jwks_file", JwtKeySource::JwksFile(v))),
                j.jwks_url.clone().map(|v| ("jwks_url", JwtKeySource::JwksUrl(v))),
            ]
            .into_iter()
            .flatten()
            .collect();
            let keys = match sources.as_slice() {
                [] => None,
                [(name, source)] => {
                    let needs_alg = matches!(source, JwtKeySource::HmacSecretEnv(_) | JwtKeySource::PemFile(_));
                    match (&j.algorithm, needs_alg) {
                        (None, true) => {
                            return Err(located(
                                &["jwt"],
                                name,
                                format!("{name} needs `algorithm` (the key's algorithm is pinned)"),
                            ));
                        }
                        (Some(a), true) => {
                            let hmac = a.starts_with("HS");
                            let is_hmac_source = matches!(source, JwtKeySource::HmacSecretEnv(_));
                            if hmac != is_hmac_source {
                                return Err(located(
                                    &["jwt"],
                                    "algorithm",
                                    format!("algorithm {a:?} does not fit {name}"),
                                ));
                            }
                        }
                        (Some(_), false) => {
                            return Err(located(
                                &["jwt"],
                                "algorithm",
                                format!("a JWKS pins the algorithm per key; remove `algorithm` with {name}"),
                            ));
                        }
                        (None, false) => {}
                    }
                    Some(source.clone())
                }
                [_, (second, _), ..] => {
                    return Err(located(
                        &["jwt"],
                        second,
                        "more than one key source: use exactly one of hmac_secret_env, pem_file, jwks_file, jwks_url"
                            .to_owned(),
                    ));
                }
            };
            Some(JwtLimits {
                tier_claim: j.tier_claim,
                rate_claim: j.rate_claim,
                burst_claim: j.burst_claim,
                max_rate: j.max_rate,
                max_burst: j.max_burst,
                verification: keys.map(|keys| JwtVerification {
                    keys,
                    algorithm: j.algorithm,
                    issuer: j.issuer,
                    audience: j.audience,
                    leeway: j.leeway,
                    jwks_refresh: j.jwks_refresh,
                    jwks_cooldown: j.jwks_cooldown,
                }),
            })
        }
    };
    let mut rules = Vec::with_capacity(raw.rules.len());
    let mut names = std::collections::HashSet::new();
    for (i, r) in raw.rules.into_iter().enumerate() {
        let at = |key: &str, message: String| {
            let err = ConfigError::new(source, message).with_field(format!("rules[{i}].{key}"));
            match locate_array_key(text, "rules", i, key) {
                Some((line, col)) => err.at(line, col),
                None => err,
            }
        };
        if r.name.trim().is_empty() {
            return Err(at("name", "empty rule name".to_owned()));
        }
        if !names.insert(r.name.clone()) {
            return Err(at("name", format!("rule name {:?} is used twice", r.name)));
        }
        let path = PathPattern::parse(&r.path).map_err(|e| at("path", e))?;
        let methods = r
            .methods
            .iter()
            .map(|m| {
                http::Method::from_bytes(m.to_ascii_uppercase().as_bytes())
                    .map_err(|_| at("methods", format!("invalid method {m:?}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let key = rules::parse_key(&r.key).map_err(|e| at("key", e))?;
        let resolve = rules::parse_chain(&r.resolve).map_err(|e| at("resolve", e))?;
        for step in &resolve {
            match step {
                ResolverSpec::Profile(p) if !profiles.contains_key(&**p) => {
                    return Err(at(
                        "resolve",
                        format!("unknown profile {p:?}; defined profiles: {}", known()),
                    ));
                }
                ResolverSpec::Jwt if jwt.is_none() => {
                    return Err(at(
                        "resolve",
                        "\"jwt\" needs a [jwt] section (claim names and caps)".to_owned(),
                    ));
                }
                ResolverSpec::Service if raw.service.is_none() => {
                    return Err(at("resolve", "\"service\" needs a [service] section".to_owned()));
                }
                _ => {}
            }
        }
        // The cost in force: a `[routes."<name>"] cost` replaces the rule's.
        let cost = routes
            .get(&r.name)
            .and_then(|rc: &RouteConfig| rc.cost)
            .unwrap_or(r.cost.unwrap_or(1));
        // Every profile the chain can name must admit the cost, or every
        // request would be refused (token and service limits are checked
        // when they arrive, and logged).
        let route_profile = routes
            .get(&r.name)
            .and_then(|rc: &RouteConfig| rc.profile.clone())
            .unwrap_or_else(|| default_profile.clone());
        let named = resolve.iter().filter_map(|step| match step {
            ResolverSpec::Profile(p) => Some(p.to_string()),
            ResolverSpec::Default => Some(route_profile.clone()),
            _ => None,
        });
        for name in named {
            if let Some(p) = profiles.get(&name).filter(|p| cost > p.quota.burst()) {
                return Err(at(
                    "cost",
                    format!(
                        "cost {cost} is above the burst {} of profile {name:?}: every request would be refused",
                        p.quota.burst()
                    ),
                ));
            }
        }
        rules.push(RuleConfig {
            name: std::sync::Arc::from(r.name.as_str()),
            path,
            methods,
            key,
            resolve,
            cost: r.cost.unwrap_or(1),
            shadow: r.shadow,
        });
    }
    if raw.responses.problem_title.trim().is_empty() {
        return Err(located(&["responses"], "problem_title", "empty title".to_owned()));
    }

    let global = match raw.global {
        None => None,
        Some(g) => {
            let at = |key: &str, message: String| located(&["global"], key, message);
            // The fleet gate counts bursts up to MAX_FLEET_BURST: above, a
            // limit would silently be local only.
            let most = crate::window::MAX_FLEET_BURST;
            if let Some((name, p)) = profiles.iter().find(|(_, p)| p.quota.burst() > most) {
                return Err(located(
                    &["profiles", name.as_str()],
                    "burst",
                    format!(
                        "{} is above {most}, the largest burst the fleet gate ([global]) counts",
                        p.quota.burst()
                    ),
                ));
            }
            if let Some(j) = jwt.as_ref().filter(|j| j.max_burst > most) {
                return Err(located(
                    &["jwt"],
                    "max_burst",
                    format!(
                        "{} is above {most}, the largest burst the fleet gate ([global]) counts",
                        j.max_burst
                    ),
                ));
            }
            let scheme_ok = g.redis_url.starts_with("redis://") || g.redis_url.starts_with("rediss://");
            if !scheme_ok {
                return Err(at(
                    "redis_url",
                    "expected redis://[user:password@]host:port[/db] (or rediss:// for TLS)".to_owned(),
                ));
            }
            if g.window < Duration::from_secs(1) || g.window > Duration::from_secs(3600) {
                return Err(at("window", "from 1s to 1h".to_owned()));
            }
            if g.sync_interval < Duration::from_millis(10) || g.sync_interval * 2 > g.window {
                return Err(at(
                    "sync_interval",
                    format!("from 10ms to half the window ({:?})", g.window / 2),
                ));
            }
            if g.timeout.is_zero() || g.timeout > g.window {
                return Err(at("timeout", "above zero and at most the window".to_owned()));
            }
            if g.connect_timeout.is_zero() || g.connect_timeout > Duration::from_secs(60) {
                return Err(at("connect_timeout", "above zero and at most 60s".to_owned()));
            }
            if g.key_prefix.is_empty() || g.key_prefix.contains(['{', '}', ' ']) {
                return Err(at(
                    "key_prefix",
                    "non-empty, without braces or spaces (keys are hash-tagged)".to_owned(),
                ));
            }
            if g.max_keys > 1 << 26 {
                return Err(at("max_keys", "at most 67108864".to_owned()));
            }
            if let Some(k) = g.sub_epochs {
                let most = (g.window.as_nanos() / (g.sync_interval.as_nanos() * 2)).min(100) as u32;
                if k == 0 || k > most {
                    return Err(at(
                        "sub_epochs",
                        format!(
                            "from 1 to {most}: each sub-epoch must span at least two sync intervals ({:?}), and at most 100",
                            g.sync_interval * 2
                        ),
                    ));
                }
            }
            if g.key_secret_env.as_deref().is_some_and(|v| v.trim().is_empty()) {
                return Err(at("key_secret_env", "empty variable name".to_owned()));
            }
            if let Some(path) = &g.ca_file {
                if !g.redis_url.starts_with("rediss://") {
                    return Err(at(
                        "ca_file",
                        "for rediss:// (TLS) only; redis_url is not rediss://".to_owned(),
                    ));
                }
                check_ca_file(path).map_err(|e| at("ca_file", e))?;
            }
            Some(GlobalConfig {
                redis_url: g.redis_url,
                cluster: g.cluster,
                sync_interval: g.sync_interval,
                window: g.window,
                key_prefix: g.key_prefix,
                timeout: g.timeout,
                connect_timeout: g.connect_timeout,
                max_keys: g.max_keys,
                sub_epochs: g.sub_epochs,
                key_secret_env: g.key_secret_env,
                key_secret: None,
                ca_file: g.ca_file,
            })
        }
    };

    let service = raw.service.map(|s| ServiceConfig {
        url: s.url,
        ttl: s.ttl,
        negative_ttl: s.negative_ttl,
        timeout: s.timeout,
        max_entries: s.max_entries,
    });

    let Some(default) = profiles.get(&default_profile).cloned() else {
        return Err(ConfigError::new(source, "default profile missing").with_field("default_profile"));
    };
    Ok(Config {
        default_profile,
        default,
        profiles,
        routes,
        store: StoreConfig {
            max_keys: raw.store.max_keys,
            sweep_interval: raw.store.sweep_interval,
            overflow: raw.store.overflow,
        },
        ip,
        headers: raw.headers.style,
        header_keys: crate::key::HeaderCardinality {
            per_ip: raw.header_keys.per_ip,
            window: raw.header_keys.window,
            max_tracked: raw.header_keys.max_tracked,
        },
        jwt,
        service,
        rules,
        global,
        responses: ResponseConfig {
            problem_type: raw.responses.problem_type,
            problem_title: raw.responses.problem_title,
        },
    })
}

/// The line and column of `key` in the `index`-th `[[array]]` table.
fn locate_array_key(text: &str, array: &str, index: usize, key: &str) -> Option<(usize, usize)> {
    let header = format!("[[{array}]]");
    // How many `[[array]]` headers have been seen, and whether the lines
    // now belong to the last of them (another table header ends it).
    let mut count = 0usize;
    let mut inside = false;
    for (i, l) in text.lines().enumerate() {
        let t = l.trim();
        if t.starts_with('[') {
            inside = t.replace(' ', "") == header;
            if inside {
                count += 1;
            }
            continue;
        }
        if inside && count == index + 1 {
            if let Some((k, _)) = t.split_once('=') {
                if k.trim() == key {
                    let col = l.chars().count() - l.trim_start().chars().count() + 1;
                    return Some((i + 1, col));
                }
            }
        }
    }
    None
}
