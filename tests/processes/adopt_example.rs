//! `examples/adopt.rs` as a real process, over real sockets: tenants
//! verified by its middleware are limited per tenant whatever address they
//! use, a token from its test identity provider (whose JWKS the service
//! fetched over HTTPS, trusting the IdP's private CA through `[tls]
//! ca_file`) gets its plan's limit while a forged one is anonymous, the
//! global route is one bucket for every client, and refusals come in the
//! service's own envelope with `Retry-After` and the rate-limit headers.

use crate::support::quickstart as examples;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use jsonwebtoken::{encode, get_current_timestamp, Algorithm, EncodingKey, Header};

struct Service {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the example on a port it picks itself (`--addr 127.0.0.1:0`) and
/// reads the address from its first line. A port picked here and freed
/// before the example binds it can be taken first by the example's own
/// identity provider, which binds a port of its own before the service
/// does: the test then spoke HTTP to the IdP's TLS listener (a reset).
fn start() -> Service {
    let bin = examples::example_binary("adopt");
    let mut child = Command::new(bin)
        .arg("--addr")
        .arg("127.0.0.1:0")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the service example");
    let stdout = child.stdout.take().expect("the example's stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    // Reads the address, then drains what the example prints after it.
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.strip_prefix("service listening on http://") {
                let addr = rest.split_whitespace().next().unwrap_or_default().to_owned();
                if let Some(tx) = tx.take() {
                    let _ = tx.send(addr);
                }
            }
        }
    });
    let mut service = Service {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
    };
    let addr = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(addr) => addr,
        Err(_) => match service.child.try_wait() {
            Ok(Some(status)) => panic!("the service example exited before listening: {status}"),
            _ => panic!("the service example did not say where it listens within 30 s"),
        },
    };
    service.addr = addr.parse().unwrap_or_else(|_| panic!("the example printed {addr:?}"));
    service
}

struct Reply {
    status: u16,
    headers: HashMap<String, String>,
    body: String,
}

/// One request on its own connection.
fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: service\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_owned(),
    }
}

/// A token signed with the test IdP's key (the fixture the example's IdP
/// serves in its JWKS), minted here with jsonwebtoken.
fn token(sub: &str, plan: &str, key: &[u8]) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("key-1".to_owned());
    let claims = serde_json::json!({
        "sub": sub, "plan": plan, "iss": "https://idp.example.test", "aud": "orders-api",
        "exp": get_current_timestamp() + 600,
    });
    encode(&header, &claims, &EncodingKey::from_rsa_pem(key).unwrap()).unwrap()
}

const IDP_KEY: &[u8] = include_bytes!("../fixtures/rsa_private.pem");
const OTHER_KEY: &[u8] = include_bytes!("../fixtures/rsa2_private.pem");

#[test]
fn the_service_example_limits_tenants_users_and_its_global_route() {
    let service = start();
    let addr = service.addr;
    assert_eq!(get(addr, "/healthz", &[]).status, 200);

    // No verified tenant: the middleware refuses before any limit.
    assert_eq!(get(addr, "/orders", &[]).status, 401);

    // Tenant acme: 20 at once (profile "tenant"), however it connects.
    let first = get(addr, "/orders", &[("x-api-key", "key-acme")]);
    assert_eq!(first.status, 200, "{}", first.body);
    assert!(first.body.contains("\"tenant\":\"acme\""), "{}", first.body);
    // Two limits applied (the edge rule and the tenant's): the structured
    // fields list both; the -06 triple reports the tighter, the tenant's.
    assert_eq!(first.headers["ratelimit-limit"], "20");
    assert_eq!(first.headers["ratelimit-remaining"], "19");
    assert!(
        first.headers["ratelimit-policy"].contains("\"orders.list/tenant\";q=20"),
        "{:?}",
        first.headers
    );
    assert!(
        first.headers["ratelimit-policy"].contains("\"@edge/edge\";q=60"),
        "{:?}",
        first.headers
    );
    // The rest of the burst, then a refusal. The tenant's rate gives a unit
    // back every 100 ms, which a loaded machine can take between two
    // requests: a refusal must come, after at least the burst's 19 more.
    let mut statuses = Vec::new();
    let refused = loop {
        let r = get(addr, "/orders", &[("x-api-key", "key-acme")]);
        statuses.push(r.status);
        if r.status == 429 {
            break r;
        }
        assert!(statuses.len() <= 40, "never refused: {statuses:?}");
    };
    assert!(statuses.len() >= 20, "refused inside the burst: {statuses:?}");
    assert_eq!(refused.headers["content-type"], "application/json");
    assert!(
        refused.body.contains("\"code\":\"rate_limited\"")
            && refused.body.contains("\"policy\":\"orders.list/tenant\""),
        "the service's own envelope: {}",
        refused.body
    );
    let retry: u64 = refused.headers["retry-after"].parse().unwrap();
    assert!((1..=3).contains(&retry), "Retry-After {retry}");
    assert!(
        refused.body.contains(&format!("\"retry_after\":{retry}")),
        "{}",
        refused.body
    );
    assert_eq!(refused.headers["ratelimit-remaining"], "0");
    assert!(refused.headers["ratelimit-policy"].contains("\"orders.list/tenant\";q=20"));
    // Another tenant, from the same address: its own bucket.
    assert_eq!(get(addr, "/orders", &[("x-api-key", "key-globex")]).status, 200);

    // A token of the IdP: verified against the JWKS fetched over HTTPS at
    // startup, and its plan applies (premium: burst 50).
    let premium = get(
        addr,
        "/me",
        &[(
            "authorization",
            &format!("Bearer {}", token("alice", "premium", IDP_KEY)),
        )],
    );
    assert_eq!(premium.status, 200, "{}", premium.body);
    assert!(premium.body.contains("\"sub\":\"alice\""), "{}", premium.body);
    assert!(
        premium.headers["ratelimit-policy"].contains("\"me/premium\";q=50"),
        "{:?}",
        premium.headers
    );
    // Signed with another key: unverified, so keyed by address with the
    // next step's profile ("standard", burst 10).
    let forged = get(
        addr,
        "/me",
        &[(
            "authorization",
            &format!("Bearer {}", token("alice", "premium", OTHER_KEY)),
        )],
    );
    assert_eq!(forged.status, 200);
    assert!(forged.body.contains("no verified token"), "{}", forged.body);
    assert_eq!(
        forged.headers["ratelimit-limit"], "10",
        "the standard profile, keyed by address"
    );

    // /reports: one bucket of 2 for everyone, tenants and anonymous alike.
    let reports: Vec<u16> = [
        vec![("x-api-key", "key-acme")],
        vec![],
        vec![("x-api-key", "key-globex")],
    ]
    .iter()
    .map(|h| get(addr, "/reports", h).status)
    .collect();
    assert_eq!(reports, [200, 200, 429]);

    // Guessing API keys: 401s, until the address's edge budget (60 at once)
    // is spent, then 429s before the middleware looks at the key.
    let mut unauthorized = 0;
    let mut refused = None;
    for i in 0..100 {
        let r = get(addr, "/orders", &[("x-api-key", &format!("guess-{i}"))]);
        match r.status {
            401 => unauthorized += 1,
            429 => {
                refused = Some(r);
                break;
            }
            other => panic!("guess {i}: status {other}"),
        }
    }
    let refused = refused.expect("key guessing is limited");
    assert!(
        (1..60).contains(&unauthorized),
        "{unauthorized} guesses reached the middleware"
    );
    assert!(refused.body.contains("\"policy\":\"@edge/edge\""), "{}", refused.body);
    assert!(refused.headers.contains_key("retry-after"));
}
