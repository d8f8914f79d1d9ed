//! The ids a limit service sees: keyed hashes of a client's key, never the
//! client's value.

use super::{ServiceError, ServiceErrorKind};

/// The shortest secret [`ServiceIdKey`] accepts, in bytes.
pub const MIN_ID_SECRET_LEN: usize = 32;

/// The secret the limit service's client ids are computed under, shared
/// with the service: an id is the first 8 bytes, big-endian, of
/// HMAC-SHA256(secret, message), where the message is the key's fields
/// (what [`KeySource::write_id`](crate::key::KeySource::write_id) writes,
/// one field per `write` call), each as its length (a `u32`, big-endian)
/// followed by its bytes. `docs/http.md` lists the fields of each key kind
/// and test vectors.
///
/// ```
/// use ratelimit::service::ServiceIdKey;
///
/// let ids = ServiceIdKey::new(b"ratelimit-service-id-test-secret").unwrap();
/// // A header key `x-api-key: key-a`: the fields `header:` and `key-a`.
/// assert_eq!(ids.id_of_fields(&[b"header:", b"key-a"]), 0x0a6f_1060_5e8d_eccc);
/// assert!(ServiceIdKey::new(b"too short").is_err());
/// ```
#[derive(Clone)]
pub struct ServiceIdKey {
    mac: hmac::Hmac<sha2::Sha256>,
}

impl std::fmt::Debug for ServiceIdKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServiceIdKey(<redacted>)")
    }
}

impl ServiceIdKey {
    /// The key for `secret`, at least [`MIN_ID_SECRET_LEN`] bytes.
    pub fn new(secret: &[u8]) -> Result<Self, ServiceError> {
        use hmac::KeyInit;
        if secret.len() < MIN_ID_SECRET_LEN {
            return Err(ServiceError::of(
                ServiceErrorKind::Setup,
                format!(
                    "the client id secret is {} bytes; at least {MIN_ID_SECRET_LEN} are needed",
                    secret.len()
                ),
            ));
        }
        let mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret)
            .map_err(|e| ServiceError::of(ServiceErrorKind::Setup, format!("client id secret: {e}")))?;
        Ok(ServiceIdKey { mac })
    }

    /// The id of the key `source` found for a request (`key`, in the
    /// context `cx` it was extracted in).
    pub fn client_id<K: crate::runtime::key::KeySource + ?Sized>(
        &self,
        source: &K,
        cx: &crate::runtime::key::KeyContext<'_>,
        key: &crate::runtime::key::ClientKey,
    ) -> u64 {
        // The source's name follows the kind tag, for the key's own value
        // only: an address fallback is the address's id, whatever the rule.
        let name = match key {
            crate::runtime::key::ClientKey::Ip(_) | crate::runtime::key::ClientKey::UnknownPeer => None,
            _ => source.id_name(),
        };
        let mut fields = IdFields {
            mac: self.mac.clone(),
            name: name.map(str::as_bytes),
        };
        source.write_id(cx, key, &mut fields);
        std::hash::Hasher::finish(&fields)
    }

    /// The id of a message made of `fields` (for a service computing the ids
    /// of its own clients, and for tests).
    pub fn id_of_fields(&self, fields: &[&[u8]]) -> u64 {
        let mut h = IdFields {
            mac: self.mac.clone(),
            name: None,
        };
        for f in fields {
            std::hash::Hasher::write(&mut h, f);
        }
        std::hash::Hasher::finish(&h)
    }
}

/// The message of an id: each `write` is one field, length-prefixed, so no
/// two different sequences of fields give the same bytes. Integers are
/// written big-endian (never in the platform's order), one field each.
/// The source's name (see `KeySource::id_name`) is written as the second
/// field, right after the first (the kind tag).
struct IdFields<'a> {
    mac: hmac::Hmac<sha2::Sha256>,
    name: Option<&'a [u8]>,
}

impl IdFields<'_> {
    fn field(&mut self, bytes: &[u8]) {
        use hmac::Mac;
        // A field is a header value, a claim or an address: far below 4 GiB
        // (the HTTP server bounds them); a longer one would still be hashed,
        // with a saturated length.
        let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        self.mac.update(&len.to_be_bytes());
        self.mac.update(bytes);
    }
}

impl std::hash::Hasher for IdFields<'_> {
    fn write(&mut self, bytes: &[u8]) {
        self.field(bytes);
        if let Some(name) = self.name.take() {
            self.field(name);
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.write(&[n]);
    }
    fn write_u16(&mut self, n: u16) {
        self.write(&n.to_be_bytes());
    }
    fn write_u32(&mut self, n: u32) {
        self.write(&n.to_be_bytes());
    }
    fn write_u64(&mut self, n: u64) {
        self.write(&n.to_be_bytes());
    }
    fn write_u128(&mut self, n: u128) {
        self.write(&n.to_be_bytes());
    }
    fn write_usize(&mut self, n: usize) {
        self.write(&(n as u64).to_be_bytes());
    }
    fn write_i8(&mut self, n: i8) {
        self.write(&n.to_be_bytes());
    }
    fn write_i16(&mut self, n: i16) {
        self.write(&n.to_be_bytes());
    }
    fn write_i32(&mut self, n: i32) {
        self.write(&n.to_be_bytes());
    }
    fn write_i64(&mut self, n: i64) {
        self.write(&n.to_be_bytes());
    }
    fn write_i128(&mut self, n: i128) {
        self.write(&n.to_be_bytes());
    }
    fn write_isize(&mut self, n: isize) {
        self.write(&(n as i64).to_be_bytes());
    }
    fn finish(&self) -> u64 {
        use hmac::Mac;
        let tag = self.mac.clone().finalize().into_bytes();
        let mut first = [0u8; 8];
        first.copy_from_slice(&tag[..8]);
        u64::from_be_bytes(first)
    }
}
