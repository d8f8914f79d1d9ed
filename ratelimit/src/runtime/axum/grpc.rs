//! gRPC refusals. A refused request whose `content-type` is gRPC's is not
//! answered with a 429 and a problem+json body, which a gRPC client cannot
//! read (it reports a bare `UNAVAILABLE` or a protocol error), but with a
//! gRPC "Trailers-Only" response: HTTP 200, `content-type:
//! application/grpc`, `grpc-status: 8` (`RESOURCE_EXHAUSTED`), a
//! percent-encoded `grpc-message`, and the retry delay twice:
//!
//! * `grpc-status-details-bin`: a `google.rpc.Status` (code 8, the message)
//!   with one `google.rpc.RetryInfo` detail, the rich error model that
//!   tonic-types, grpc-go's `status.Details()` and grpc-java's
//!   `StatusProto` decode;
//! * `retry-after`: whole seconds, as HTTP's `Retry-After` (added by the
//!   runtime, with the rate-limit headers, to every refusal).
//!
//! The protobuf is encoded here by hand (three small messages) rather than
//! with prost, so the library takes no protobuf dependency.

use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Response, StatusCode};

use super::outcome::{ceil_secs, Outcome};
use crate::Denial;

/// `grpc-status`.
static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// `grpc-message`.
static GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
/// `grpc-status-details-bin`.
static GRPC_STATUS_DETAILS: HeaderName = HeaderName::from_static("grpc-status-details-bin");

/// `RESOURCE_EXHAUSTED`, gRPC's code for "some resource has been exhausted,
/// perhaps a per-user quota".
const RESOURCE_EXHAUSTED: u64 = 8;

/// The type URL of a `google.rpc.RetryInfo` in a `google.protobuf.Any`.
const RETRY_INFO_URL: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// The largest `google.protobuf.Duration` (seconds): about 10,000 years.
const MAX_DURATION_SECS: u64 = 315_576_000_000;

static HOOK_LOGGED: super::log_gate::Once = super::log_gate::Once::new();

/// Whether a request is a gRPC call: its `content-type` is
/// `application/grpc`, alone or followed by `+<format>` (`+proto`,
/// `+json`) or parameters, in any case. `application/grpc-web` is not
/// (see docs/http.md, gRPC-Web), nor is `application/grpcfoo`.
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers.get(CONTENT_TYPE).is_some_and(|v| is_grpc_type(v.as_bytes()))
}

/// Whether a request is a gRPC call: a `POST` (the only method gRPC uses)
/// with a gRPC `content-type`. A `GET` or `HEAD` that claims the type gets
/// the HTTP 429: answered `200` with an empty body, it would be a cacheable
/// blank page that a client could plant in a shared cache for every user
/// of the URL.
pub(crate) fn is_grpc_request(parts: &http::request::Parts) -> bool {
    parts.method == http::Method::POST && is_grpc(&parts.headers)
}

fn is_grpc_type(value: &[u8]) -> bool {
    const GRPC: &[u8] = b"application/grpc";
    let value = value.trim_ascii_start();
    value.len() >= GRPC.len()
        && value[..GRPC.len()].eq_ignore_ascii_case(GRPC)
        && matches!(value.get(GRPC.len()), None | Some(b'+' | b';' | b' ' | b'\t'))
}

/// Whether a response (a hook's) is a gRPC refusal: a gRPC `content-type`
/// and a `grpc-status` that is a number other than 0 (`OK`).
fn is_grpc_refusal(headers: &HeaderMap) -> bool {
    is_grpc(headers)
        && headers
            .get(&GRPC_STATUS)
            .and_then(|v| v.to_str().ok()?.trim().parse::<u32>().ok())
            .is_some_and(|code| code != 0)
}

/// The response to a refused gRPC request on `route`, refused by `outcome`
/// for `retry` seconds: `own` (a hook's answer) when it is a gRPC refusal,
/// else the default one; then `retry-after` and the
/// rate-limit headers, as on every refusal. A hook's answer that is not a
/// gRPC refusal (an HTTP 429 written for browsers, a `grpc-status: 0`) is
/// replaced, and the first such replacement is logged: a gRPC client can
/// read neither, nor would it learn when to retry.
pub(crate) fn refuse<B: From<Bytes>>(
    route: &str,
    outcome: &Outcome,
    retry: u64,
    own: Option<Response<B>>,
) -> Response<B> {
    let mut refusal = match own {
        Some(own) if is_grpc_refusal(own.headers()) => normalised(outcome, retry, own),
        Some(own) => {
            if HOOK_LOGGED.first() {
                tracing::warn!(
                    target: "ratelimit",
                    route,
                    status = own.status().as_u16(),
                    "a rejection hook answered a refused gRPC request with a response that is not a gRPC refusal \
                     (content-type application/grpc and a grpc-status other than 0); sending the default gRPC \
                     refusal instead (see Rejection::is_grpc and Rejection::grpc_response)"
                );
            }
            response(outcome, retry).map(B::from)
        }
        None => response(outcome, retry).map(B::from),
    };
    outcome.finish_rejection(refusal.headers_mut(), retry);
    // Never stored by a cache: a refusal is for this client, now.
    refusal
        .headers_mut()
        .insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    refusal
}

/// A hook's gRPC refusal, made well-formed: Trailers-Only (HTTP 200, no
/// body: clients such as grpc-go read an HTTP error status as UNAVAILABLE,
/// and a body after headers that carry `grpc-status` is malformed), and a
/// `grpc-status-details-bin` that says the code and message the headers
/// say (a hook that changed them in `grpc_response()`'s answer leaves the
/// default details behind; clients that read the details would see code 8
/// and the default message).
fn normalised<B: From<Bytes>>(outcome: &Outcome, retry: u64, own: Response<B>) -> Response<B> {
    let (mut parts, _body) = own.into_parts();
    parts.status = StatusCode::OK;
    let code = parts
        .headers
        .get(&GRPC_STATUS)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
        .unwrap_or(RESOURCE_EXHAUSTED);
    let message = parts
        .headers
        .get(&GRPC_MESSAGE)
        .and_then(|v| v.to_str().ok())
        .map(percent_decode)
        .unwrap_or_default();
    let default_message = self::message(outcome, retry);
    if code != RESOURCE_EXHAUSTED || message != default_message {
        let details = status_details(code, &message, retry_delay(outcome, retry));
        match HeaderValue::from_str(&base64(&details)) {
            Ok(v) => {
                parts.headers.insert(GRPC_STATUS_DETAILS.clone(), v);
            }
            Err(_) => {
                parts.headers.remove(&GRPC_STATUS_DETAILS);
            }
        }
    }
    Response::from_parts(parts, B::from(Bytes::new()))
}

/// The text of a percent-encoded `grpc-message` (invalid escapes kept as
/// they are, as the gRPC spec asks of receivers).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The default gRPC refusal (without `retry-after` and the rate-limit
/// headers, which the runtime adds to every refusal).
pub(crate) fn response(outcome: &Outcome, retry: u64) -> Response<Bytes> {
    let message = message(outcome, retry);
    let details = status_details(RESOURCE_EXHAUSTED, &message, retry_delay(outcome, retry));
    let mut response = Response::new(Bytes::new());
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS.clone(), HeaderValue::from_static("8"));
    // Both are visible ASCII by construction.
    if let Ok(v) = HeaderValue::from_str(&percent_encode(&message)) {
        headers.insert(GRPC_MESSAGE.clone(), v);
    }
    if let Ok(v) = HeaderValue::from_str(&base64(&details)) {
        headers.insert(GRPC_STATUS_DETAILS.clone(), v);
    }
    response
}

/// The status message: what the problem+json's `detail` says, with the
/// policy's name; configuration values only, nothing of the client's.
fn message(outcome: &Outcome, retry: u64) -> String {
    let policy = outcome.violated_policy();
    match outcome.decision().denial() {
        None if outcome.refused_in_flight() => {
            format!("rate limit {policy}: too many calls of this client in flight; retry when one of them has finished")
        }
        Some(Denial::CostExceedsBurst) => {
            format!("rate limit {policy}: this request costs more than the limit's burst, so it can never be admitted")
        }
        Some(Denial::FleetLimited) => {
            format!("rate limit {policy}: the fleet-wide limit for this client is exhausted; retry in {retry} s")
        }
        Some(Denial::StoreFull) => {
            format!("rate limit {policy}: the rate limiter is at capacity for new clients; retry in {retry} s")
        }
        _ => format!("rate limit {policy} exceeded; retry in {retry} s"),
    }
}

/// The `RetryInfo` delay: the decision's own (to the nanosecond) when
/// `retry-after` is that wait rounded up, else `retry-after`'s seconds (an
/// enclosing rule's longer wait, a request that can never conform).
fn retry_delay(outcome: &Outcome, retry: u64) -> Duration {
    let exact = outcome.decision().retry_after();
    if exact > Duration::ZERO && ceil_secs(exact) == retry {
        exact
    } else {
        Duration::from_secs(retry)
    }
}

/// `grpc-message`'s encoding (the gRPC HTTP/2 protocol: "Percent-Byte-
/// Unencoded → 1*( %x20-%x24 / %x26-%x7E )"): every other byte of the
/// UTF-8 text, `%` included, as `%XX`.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A `google.rpc.Status { code, message, details: [Any(RetryInfo { retry_delay })] }`,
/// protobuf-encoded.
fn status_details(code: u64, message: &str, delay: Duration) -> Vec<u8> {
    // google.protobuf.Duration { int64 seconds = 1; int32 nanos = 2; }
    let mut duration = Vec::with_capacity(16);
    varint_field(&mut duration, 1, delay.as_secs().min(MAX_DURATION_SECS));
    varint_field(&mut duration, 2, u64::from(delay.subsec_nanos()));
    // google.rpc.RetryInfo { google.protobuf.Duration retry_delay = 1; }
    let mut retry_info = Vec::with_capacity(duration.len() + 2);
    len_field(&mut retry_info, 1, &duration);
    // google.protobuf.Any { string type_url = 1; bytes value = 2; }
    let mut any = Vec::with_capacity(RETRY_INFO_URL.len() + retry_info.len() + 4);
    len_field(&mut any, 1, RETRY_INFO_URL.as_bytes());
    len_field(&mut any, 2, &retry_info);
    // google.rpc.Status { int32 code = 1; string message = 2; repeated google.protobuf.Any details = 3; }
    let mut status = Vec::with_capacity(message.len() + any.len() + 8);
    varint_field(&mut status, 1, code);
    if !message.is_empty() {
        len_field(&mut status, 2, message.as_bytes());
    }
    len_field(&mut status, 3, &any);
    status
}

/// A varint field (wire type 0); a zero is left out, as proto3 does.
fn varint_field(out: &mut Vec<u8>, field: u64, value: u64) {
    if value != 0 {
        varint(out, field << 3);
        varint(out, value);
    }
}

/// A length-delimited field (wire type 2).
fn len_field(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    varint(out, (field << 3) | 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A base-128 varint: seven bits a byte, least significant first, the high
/// bit set on every byte but the last.
fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Standard base64 without padding, as gRPC asks of `-bin` metadata
/// ("implementations ... should emit un-padded values").
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (u32::from(b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 0x3f) as usize]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(content_type: &[u8]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_bytes(content_type).unwrap());
        h
    }

    #[test]
    fn grpc_content_types() {
        for yes in [
            &b"application/grpc"[..],
            b"application/grpc+proto",
            b"application/grpc+json",
            b"application/grpc+my-codec",
            b"APPLICATION/GRPC",
            b"Application/Grpc+Proto",
            b"application/grpc; charset=utf-8",
            b"application/grpc;x=1",
        ] {
            assert!(is_grpc(&headers(yes)), "{}", String::from_utf8_lossy(yes));
        }
        for no in [
            &b"application/grpcfoo"[..],
            b"application/grpc-web",
            b"application/grpc-web+proto",
            b"application/grpc-web-text",
            b"application/json",
            b"application/grp",
            b"text/grpc",
            b"",
            b"\xffapplication/grpc",
        ] {
            assert!(!is_grpc(&headers(no)), "{}", String::from_utf8_lossy(no));
        }
        assert!(!is_grpc(&HeaderMap::new()));
    }

    #[test]
    fn grpc_refusals_need_a_nonzero_status() {
        let mut h = headers(b"application/grpc");
        assert!(!is_grpc_refusal(&h));
        h.insert(&GRPC_STATUS, HeaderValue::from_static("0"));
        assert!(!is_grpc_refusal(&h));
        h.insert(&GRPC_STATUS, HeaderValue::from_static("x"));
        assert!(!is_grpc_refusal(&h));
        h.insert(&GRPC_STATUS, HeaderValue::from_static("14"));
        assert!(is_grpc_refusal(&h));
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        assert!(!is_grpc_refusal(&h));
    }

    #[test]
    fn varints() {
        let enc = |v| {
            let mut out = Vec::new();
            varint(&mut out, v);
            out
        };
        assert_eq!(enc(0), [0x00]);
        assert_eq!(enc(1), [0x01]);
        assert_eq!(enc(127), [0x7f]);
        assert_eq!(enc(128), [0x80, 0x01]);
        assert_eq!(enc(300), [0xac, 0x02]);
        // A day.
        assert_eq!(enc(86_400), [0x80, 0xa3, 0x05]);
        assert_eq!(
            enc(u64::MAX),
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
    }

    #[test]
    fn base64_without_padding() {
        // RFC 4648's test vectors, padding removed.
        for (input, output) in [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), output);
        }
        assert_eq!(base64(&[0xff, 0xfe, 0xfd]), "//79");
    }

    /// The bytes protoc's encoder gives for the same messages (worked out
    /// by hand from the encoding's specification).
    #[test]
    fn status_with_retry_info() {
        let bytes = status_details(8, "slow", Duration::new(3, 500_000_000));
        let mut expected = vec![0x08, 0x08, 0x12, 0x04];
        expected.extend_from_slice(b"slow");
        // details: Any { type_url, value: RetryInfo { Duration { 3 s, 0.5e9 ns } } }
        let duration = [0x08, 0x03, 0x10, 0x80, 0xca, 0xb5, 0xee, 0x01];
        let mut retry_info = vec![0x0a, duration.len() as u8];
        retry_info.extend_from_slice(&duration);
        let mut any = vec![0x0a, RETRY_INFO_URL.len() as u8];
        any.extend_from_slice(RETRY_INFO_URL.as_bytes());
        any.extend_from_slice(&[0x12, retry_info.len() as u8]);
        any.extend_from_slice(&retry_info);
        expected.extend_from_slice(&[0x1a, any.len() as u8]);
        expected.extend_from_slice(&any);
        assert_eq!(bytes, expected);
    }

    #[test]
    fn long_and_absurd_delays() {
        // A day: seconds as a three-byte varint, no nanos.
        let bytes = status_details(8, "", Duration::from_secs(86_400));
        assert!(bytes.windows(4).any(|w| w == [0x08, 0x80, 0xa3, 0x05]));
        assert!(
            !bytes.windows(2).any(|w| w == [0x12, 0x00]),
            "an empty message is left out"
        );
        // Past Duration's range: capped at its largest value.
        let capped = status_details(8, "m", Duration::from_secs(u64::MAX));
        assert_eq!(capped, status_details(8, "m", Duration::from_secs(MAX_DURATION_SECS)));
        // A zero delay is an empty Duration, still present.
        let zero = status_details(8, "m", Duration::ZERO);
        assert!(zero.ends_with(&[0x12, 0x02, 0x0a, 0x00]));
    }

    #[test]
    fn grpc_message_is_percent_encoded() {
        assert_eq!(
            percent_encode("rate limit a/b exceeded; retry in 3 s"),
            "rate limit a/b exceeded; retry in 3 s"
        );
        assert_eq!(percent_encode("100%"), "100%25");
        assert_eq!(percent_encode("caf\u{e9}\n\u{7f}~ $&"), "caf%C3%A9%0A%7F~ $&");
        // Every byte that is left is one HeaderValue accepts.
        let all: String = (0u8..=0x7f).map(char::from).chain("\u{1f600}".chars()).collect();
        let encoded = percent_encode(&all);
        assert!(HeaderValue::from_str(&encoded).is_ok());
        assert!(encoded.bytes().all(|b| (0x20..=0x7e).contains(&b)));
    }
}
