//! The request `explain` is asked about: method, path, headers, peer.

use std::fmt;
use std::net::IpAddr;

use http::{HeaderMap, HeaderName, HeaderValue, Method};

/// A request to explain.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Request {
    /// The method.
    pub method: Method,
    /// The path (a query is ignored, as by the rules).
    pub path: String,
    /// The request's headers.
    pub headers: HeaderMap,
    /// The connection's peer address.
    pub peer: Option<IpAddr>,
}

/// Why a header line was refused: the line, and what HTTP refuses in it.
#[derive(Clone, PartialEq, Eq)]
pub struct HeaderLineError(String);

crate::engine::errors::debug_as_display!(HeaderLineError);

impl fmt::Display for HeaderLineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HeaderLineError {}

impl Request {
    /// A request without headers or peer address.
    pub fn new(method: Method, path: impl Into<String>) -> Request {
        Request {
            method,
            path: path.into(),
            headers: HeaderMap::new(),
            peer: None,
        }
    }

    /// Adds a header from `"name: value"`, refusing what HTTP refuses.
    ///
    /// ```
    /// use ratelimit::config::check::Request;
    ///
    /// let request = Request::new(http::Method::GET, "/").with_header_line("x-api-key: k1").unwrap();
    /// # let _ = request;
    /// let err = Request::new(http::Method::GET, "/").with_header_line("no colon").unwrap_err();
    /// assert_eq!(err.to_string(), "header \"no colon\": expected \"name: value\"");
    /// ```
    pub fn with_header_line(self, line: &str) -> Result<Request, HeaderLineError> {
        self.add_header_line(line).map_err(HeaderLineError)
    }

    fn add_header_line(mut self, line: &str) -> Result<Request, String> {
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("header {line:?}: expected \"name: value\""));
        };
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| format!("header {line:?}: invalid header name {:?}", name.trim()))?;
        let value = HeaderValue::from_str(value.trim()).map_err(|_| format!("header {line:?}: invalid value"))?;
        self.headers.append(name, value);
        Ok(self)
    }

    /// Sets the peer address.
    #[must_use]
    pub fn with_peer(mut self, peer: IpAddr) -> Request {
        self.peer = Some(peer);
        self
    }
}
