//! `examples/grpc.rs` as a real process, called by a real tonic client:
//! the health service's `Check`, limited by a `[[rules]]` entry with its
//! own profile, answers three calls and refuses the fourth with
//! `RESOURCE_EXHAUSTED` and a retry delay.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_types::StatusExt;

use crate::support::quickstart::example_binary;

/// The example, killed on drop.
struct Example(Child);

impl Drop for Example {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_grpc_example_answers_three_checks_then_resource_exhausted() {
    let mut child = Command::new(example_binary("grpc"))
        .arg("127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start examples/grpc");
    let stdout = child.stdout.take().expect("piped stdout");
    let _example = Example(child);
    // The log of the rules in force comes first, then the address.
    let mut before = Vec::new();
    let mut line = String::new();
    for l in BufReader::new(stdout).lines().map_while(Result::ok) {
        if l.contains("service on ") {
            line = l;
            break;
        }
        before.push(l);
    }
    assert!(
        before
            .iter()
            .any(|l| l.contains("[[rules]] entry in force") && l.contains("/grpc.health.v1.Health/Check")),
        "the rules in force are logged at startup: {before:?}"
    );
    let addr: SocketAddr = line
        .split("service on ")
        .nth(1)
        .and_then(|rest| rest.split(':').take(2).collect::<Vec<_>>().join(":").parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("an endpoint")
            .connect()
            .await
            .expect("connect");
        let mut client = HealthClient::new(channel);
        let check = || HealthCheckRequest { service: String::new() };
        for i in 1..=3 {
            let response = client
                .check(check())
                .await
                .unwrap_or_else(|s| panic!("call {i}: {s:?}"));
            assert_eq!(response.get_ref().status, 1, "SERVING");
            let limit = response.metadata().get("ratelimit-limit").expect("rate-limit headers");
            assert_eq!(limit, "3", "the health profile's burst");
        }
        let refused = client.check(check()).await.expect_err("the fourth call");
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");
        let retry = refused
            .get_details_retry_info()
            .and_then(|info| info.retry_delay)
            .expect("a RetryInfo detail");
        assert!(retry.as_secs() >= 1, "{retry:?}");
    });
}
