//! Fleet ids: keyed, fleet-stable hashes of client keys, the only form in
//! which a key leaves the process (Redis keys are built from them).

use std::hash::Hasher;

/// Set in every fleet id, so none is 0 (an empty slot); the table places
/// keys by the high half.
pub(crate) const NONZERO: u64 = 1;

/// Keyed, fleet-stable hashing of keys: the folded-multiply construction of
/// ahash's portable path (and foldhash), under four 64-bit keys derived from
/// the shared secret with SipHash. Pure integer arithmetic, so every
/// instance computes the same id whatever its CPU; without the secret, ids
/// cannot be computed (or a client value guessed from one). A few
/// nanoseconds, where SipHash would be four times that on the request path.
#[derive(Clone)]
pub(crate) struct FleetHasher {
    keys: [u64; 4],
}

impl FleetHasher {
    pub(crate) fn new(secret: &[u8]) -> FleetHasher {
        let derive = |label: &[u8]| {
            let mut h = siphasher::sip::SipHasher24::new_with_keys(0, 0);
            h.write(label);
            h.write(secret);
            h.finish()
        };
        FleetHasher {
            keys: [
                derive(b"ratelimit fleet k0"),
                derive(b"ratelimit fleet k1"),
                derive(b"ratelimit fleet k2"),
                derive(b"ratelimit fleet k3"),
            ],
        }
    }

    pub(crate) fn hasher(&self) -> FleetHash {
        FleetHash {
            state: self.keys[0],
            pad: self.keys[1],
            extra: [self.keys[2], self.keys[3]],
        }
    }
}

const MULTIPLE: u64 = 6_364_136_223_846_793_005;

#[inline(always)]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    (full as u64) ^ ((full >> 64) as u64)
}

/// The hasher of a fleet id (see [`FleetHasher`]).
pub(crate) struct FleetHash {
    state: u64,
    pad: u64,
    extra: [u64; 2],
}

impl FleetHash {
    #[inline(always)]
    fn update(&mut self, v: u64) {
        self.state = folded_multiply(v ^ self.state, MULTIPLE);
    }

    #[inline(always)]
    fn large_update(&mut self, v: u128) {
        let combined = folded_multiply((v as u64) ^ self.extra[0], ((v >> 64) as u64) ^ self.extra[1]);
        self.state = (self.state.wrapping_add(self.pad) ^ combined).rotate_left(23);
    }
}

/// `bytes` (1 to 16 of them) as a little-endian number, zero-padded: two
/// overlapping loads, where copying them into a zeroed buffer called
/// `memcpy` (a key's fields are a few bytes: `ip:`, an address).
#[inline(always)]
fn read_short(bytes: &[u8]) -> u128 {
    let len = bytes.len();
    debug_assert!((1..=16).contains(&len));
    let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap_or_default());
    let u32_at = |i: usize| u64::from(u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap_or_default()));
    if len > 8 {
        // The last eight bytes, shifted down past the ones the first
        // eight already hold.
        u128::from(u64_at(0)) | u128::from(u64_at(len - 8) >> (8 * (16 - len))) << 64
    } else if len == 8 {
        u128::from(u64_at(0))
    } else if len >= 4 {
        // (The overlapping bytes are the same bytes at the same places.)
        u128::from(u32_at(0) | u32_at(len - 4) << (8 * (len - 4)))
    } else {
        let byte = |i: usize| u128::from(bytes[i]) << (8 * i);
        byte(0) | byte(len / 2) | byte(len - 1)
    }
}

impl Hasher for FleetHash {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // Little-endian chunks of 16, then the tail, then the length: the
        // same on every platform.
        if bytes.len() <= 16 {
            if !bytes.is_empty() {
                self.large_update(read_short(bytes));
            }
            self.update(bytes.len() as u64);
            return;
        }
        let mut chunks = bytes.chunks_exact(16);
        for c in &mut chunks {
            let mut b = [0u8; 16];
            b.copy_from_slice(c);
            self.large_update(u128::from_le_bytes(b));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 16];
            b[..rest.len()].copy_from_slice(rest);
            self.large_update(u128::from_le_bytes(b));
        }
        self.update(bytes.len() as u64);
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.update(u64::from(i));
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.update(u64::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.update(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.update(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.update(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        let rot = (self.state & 63) as u32;
        folded_multiply(self.state, self.pad).rotate_left(rot)
    }
}

/// A map keyed by fleet ids, for the sync loop. Fleet ids are already keyed
/// hashes (a client cannot choose them without the fleet secret), so the
/// map mixes them with a multiply instead of SipHash: the loop looks up
/// every active key several times a round, and at 100,000 keys SipHash was
/// most of the round's own time.
pub(super) type IdMap<V> = std::collections::HashMap<u64, V, std::hash::BuildHasherDefault<IdHash>>;

/// A set of fleet ids (see [`IdMap`]).
pub(super) type IdSet = std::collections::HashSet<u64, std::hash::BuildHasherDefault<IdHash>>;

/// [`IdMap`]'s hasher: the id's halves swapped. An id is already uniform
/// (a keyed hash, whose low bit alone is always set), and the swap puts its
/// high half in the low bits that pick the map's bucket, the bits the
/// gate's tables place a key by: a round that visits keys in table order
/// then walks its maps in order too, where a mixing hash made every lookup
/// at a million keys a cache miss.
#[derive(Default, Clone, Copy)]
pub(super) struct IdHash(u64);

impl std::hash::Hasher for IdHash {
    fn finish(&self) -> u64 {
        self.0.rotate_left(32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash as written before `read_short`: chunks copied into a
    /// zeroed buffer.
    fn reference(keys: &FleetHasher, bytes: &[u8]) -> u64 {
        let mut h = keys.hasher();
        let mut chunks = bytes.chunks_exact(16);
        for c in &mut chunks {
            let mut b = [0u8; 16];
            b.copy_from_slice(c);
            h.large_update(u128::from_le_bytes(b));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 16];
            b[..rest.len()].copy_from_slice(rest);
            h.large_update(u128::from_le_bytes(b));
        }
        h.update(bytes.len() as u64);
        h.finish()
    }

    /// Fleet ids name keys in Redis, shared by every instance: a faster
    /// `write` must give every id it gave before (a fleet mid-upgrade
    /// would otherwise count one key under two ids).
    #[test]
    fn write_gives_the_ids_it_always_gave() {
        let keys = FleetHasher::new(b"unit test fleet secret, 32 bytes");
        let mut bytes = [0u8; 40];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(151).wrapping_add(7);
        }
        for len in 0..=bytes.len() {
            for start in 0..3 {
                let field = &bytes[start..(start + len).min(bytes.len())];
                let mut h = keys.hasher();
                h.write(field);
                assert_eq!(h.finish(), reference(&keys, field), "{} bytes", field.len());
            }
        }
        // And a pinned id: the same whatever the platform or the version.
        let mut h = keys.hasher();
        h.write(b"ip:");
        h.write(&[192, 0, 2, 7]);
        assert_eq!(h.finish(), 11_568_723_023_209_927_840);
    }
}
