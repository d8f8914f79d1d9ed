//! The one-network flood of issue 11 (item 8), measured from outside: the
//! quickstart demo as a real process behind a "proxy" (this test, on
//! loopback, which the demo's config trusts), 20,000 requests over a real
//! socket, each claiming a new /64 of one /48 in `X-Forwarded-For`, then ten
//! clients of other networks, each with its first requests.

use crate::support::quickstart;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
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

# The quickstart's /export names it (startup checks every route).
[profiles.exports]
rate = "60/min"

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
    let mut child = Command::new(bin)
        .arg("--addr")
        .arg("127.0.0.1:0")
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the quickstart demo");
    // Its startup line names the port it bound (port 0: see
    // `serving_addr`); the rest of its output is drained.
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let addr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| quickstart::serving_addr(&l))
        .unwrap_or_else(|| panic!("the demo exited before serving ({:?})", child.try_wait()));
    std::thread::spawn(move || lines.for_each(drop));
    Demo { child, addr }
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
        self.request("/public", client, None).status
    }

    /// `GET path` forwarded for `client`, with a bearer token when given.
    fn request(&mut self, path: &str, client: &str, token: Option<&str>) -> Response {
        let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        write!(
            self.writer,
            "GET {path} HTTP/1.1\r\nHost: demo\r\nX-Forwarded-For: {client}\r\n{auth}\r\n"
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
        let mut limit = String::new();
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
                if name.eq_ignore_ascii_case("ratelimit-limit") {
                    limit = value.trim().to_owned();
                }
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).unwrap();
        Response {
            status,
            limit,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }
}

/// What a test reads of a response: the status, `RateLimit-Limit` (which
/// says which limit applied) and the body.
struct Response {
    status: u16,
    limit: String,
    body: String,
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

/// Issue 26, item 4: a tenant of a shared /48 (a cloud provider gives a
/// VPC a /56) cycling the /64s of its own /56 spent the whole /48's budget
/// of new keys, and the first request of a newcomer in another /56 of that
/// /48 was refused. A subnet (/56) now brings in at most a quarter of its
/// network's new keys.
#[test]
fn a_tenants_flood_from_its_56_leaves_other_56s_of_the_48_their_burst() {
    let demo = start(CONFIG);
    let mut conn = Connection::open(demo.addr);
    // The 256 /64s of 2001:db8:aaaa:100::/56, each with its whole burst.
    let mut attacker = 0;
    for i in 0..256u32 {
        for _ in 0..5 {
            attacker += u32::from(conn.get(&format!("2001:db8:aaaa:1{i:02x}::1")) == 200);
        }
    }
    // Newcomers in other /56s of the same /48, and one outside it.
    for client in ["2001:db8:aaaa:200::1", "2001:db8:aaaa:ff00::1", "2001:db8:bbbb::1"] {
        let statuses: Vec<u16> = (0..6).map(|_| conn.get(client)).collect();
        assert_eq!(statuses, [200, 200, 200, 200, 200, 429], "{client}");
    }
    // The attacker's /56: its share of new keys (a quarter of 256, and what
    // refilled) with their bursts, then one shared bucket.
    assert!(
        attacker <= 70 * 5 + 5,
        "the attacker's /56 was admitted {attacker} times"
    );
}

/// The quickstart with RS256 tokens (a public key: failed checks are
/// budgeted), behind a trusted loopback proxy.
fn rs256_config() -> String {
    let pem = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/rsa_public.pem");
    format!(
        r#"
default_profile = "anonymous"
[profiles.anonymous]
rate = "30/min"
burst = 5
[profiles.standard]
rate = "120/min"
burst = 10
[profiles.premium]
rate = "1200/min"
burst = 50
[profiles.exports]
rate = "60/min"
[jwt]
max_rate = "6000/min"
max_burst = 200
pem_file = "{pem}"
algorithm = "RS256"
# Small, so that a test's flood is a flood for it.
max_failed_per_second = 60
[ip]
trusted_proxies = ["127.0.0.1/32"]
"#
    )
}

fn rs256_token(sub: &str, tier: &str) -> String {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(include_bytes!("../fixtures/rsa_private.pem")).unwrap();
    let claims = serde_json::json!({"sub": sub, "exp": exp, "ratelimit_tier": tier});
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
        &claims,
        &key,
    )
    .unwrap()
}

/// A well-formed RS256 token no key signed (distinct per `i`).
fn forged_rs256(i: u32) -> String {
    use base64::Engine as _;
    let b64 = |v: serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([i as u8; 256]);
    format!(
        "{}.{}.{sig}",
        b64(serde_json::json!({"alg": "RS256", "typ": "JWT"})),
        b64(serde_json::json!({"sub": format!("forged-{i}"), "exp": 9_999_999_999u64, "ratelimit_tier": "premium"}))
    )
}

/// Issue 26, item 1, against the quickstart's own configuration (HS256):
/// forged and expired tokens from one address made the next valid token
/// from there anonymous (keyed by address, with the fallback's limit). An
/// HMAC check is never budgeted: the valid token gets its tier. (`/me`
/// falls back to `profile("standard")`, burst 10, for anonymous traffic;
/// the token asks for premium, burst 50.)
#[test]
fn a_valid_token_after_forgeries_from_its_address_gets_its_tier() {
    let config = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/quickstart.toml")).unwrap()
        + "\n[ip]\ntrusted_proxies = [\"127.0.0.1/32\"]\n";
    let demo = start(&config);
    let mut conn = Connection::open(demo.addr);
    let client = "203.0.113.5";
    for i in 0..30u32 {
        // Signed with another secret, and (every third) expired.
        let exp = if i % 3 == 0 { 1_000_000_000u64 } else { 9_999_999_999 };
        let claims = serde_json::json!({"sub": format!("mallory-{i}"), "exp": exp, "ratelimit_tier": "premium"});
        let key = jsonwebtoken::EncodingKey::from_secret(b"not-the-demo-secret-at-all").unwrap();
        let forged = jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).unwrap();
        conn.request("/me", client, Some(&forged));
    }
    // A valid standard token, minted by the demo itself.
    let token = conn
        .request("/token?sub=alice&tier=standard", "198.51.100.1", None)
        .body;
    let r = conn.request("/me", client, Some(token.trim()));
    assert_eq!(
        (r.status, r.limit.as_str()),
        (200, "10"),
        "the standard tier's burst, not the anonymous 5"
    );
}

/// Issue 26, items 1 and 4 with public-key tokens: 10 forged tokens from
/// each of 10 /64s of one /56 spent the /48's whole failed-check budget,
/// and a fresh valid premium token from another /56 of that /48 was
/// unverified (`RateLimit-Limit: 10`, `/me`'s fallback). Now a /56 spends at most a quarter of
/// its /48's share, and a valid token from the flooding address itself
/// still verifies once the flood is over (the process budget recovers).
#[test]
fn forged_tokens_from_one_56_leave_another_56_its_tier() {
    let demo = start(&rs256_config());
    let mut conn = Connection::open(demo.addr);
    let mut i = 0;
    for host in 0..10u32 {
        for _ in 0..10 {
            i += 1;
            let r = conn.request("/me", &format!("2001:db8:aaaa:1{host:02x}::1"), Some(&forged_rs256(i)));
            assert_eq!(
                r.limit, "10",
                "forged: anonymous, /me's fallback profile ({})",
                r.status
            );
        }
    }
    let victim = rs256_token("victim", "premium");
    let r = conn.request("/me", "2001:db8:aaaa:200::1", Some(&victim));
    assert_eq!(
        (r.status, r.limit.as_str()),
        (200, "50"),
        "another /56 of the /48 keeps its tier"
    );
    let elsewhere = rs256_token("elsewhere", "premium");
    assert_eq!(
        conn.request("/me", "2001:db8:bbbb::1", Some(&elsewhere)).limit,
        "50",
        "another /48"
    );
    // The flood is over: a second later the process budget has recovered,
    // and a valid token from an address that sent ten forgeries verifies.
    std::thread::sleep(Duration::from_secs(1));
    let nat = rs256_token("behind-the-nat", "premium");
    assert_eq!(
        conn.request("/me", "2001:db8:aaaa:100::1", Some(&nat)).limit,
        "50",
        "the flooding address, after the flood"
    );
}
