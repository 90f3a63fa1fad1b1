//! Identifiers (`docs/format.md`): time-ordered 16-hex session ids, random 8-hex entry
//! ids, and random suffixes for temp files.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds of 2015-01-01T00:00:00Z since the Unix epoch.
const SESSION_ID_EPOCH_MS: u64 = 1_420_070_400_000;

/// Fills `buf` with random bytes from the kernel (the `getrandom` crate),
/// falling back to a time-and-counter mix if that is unavailable.
pub(crate) fn random_bytes(buf: &mut [u8]) {
    if let Err(e) = getrandom::fill(buf) {
        log::debug!("no random bytes from the kernel ({e}); using the time-and-counter mix");
        fallback_bytes(buf);
    }
}

fn fallback_bytes(buf: &mut [u8]) {
    static COUNTER: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);
    for chunk in buf.chunks_mut(8) {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let mut x = nanos ^ COUNTER.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        // splitmix64 finaliser
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 31;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

/// `n` random bytes as lowercase hex.
pub(crate) fn random_hex(n_bytes: usize) -> String {
    let mut buf = vec![0u8; n_bytes];
    random_bytes(&mut buf);
    hex(&buf)
}

/// Lowercase hex of bytes.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

/// A fresh random entry id: 8 lowercase hex characters. Callers retry on a
/// collision within the session.
pub(crate) fn new_entry_id() -> String {
    random_hex(4)
}

/// A new session id: milliseconds since 2015-01-01 shifted left 22 bits plus
/// a 22-bit counter, as 16 lowercase hex characters.
pub(crate) fn new_session_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let ms = now_ms.saturating_sub(SESSION_ID_EPOCH_MS);
    let counter = COUNTER.fetch_add(1, Ordering::Relaxed) & ((1 << 22) - 1);
    format!("{:016x}", (ms << 22) | counter)
}

/// True for a string of exactly `len` lowercase hex digits.
pub(crate) fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_ids_are_8_hex() {
        for _ in 0..100 {
            assert!(is_lower_hex(&new_entry_id(), 8));
        }
    }

    #[test]
    fn session_ids_are_16_hex_and_ordered() {
        let a = new_session_id();
        let b = new_session_id();
        assert!(is_lower_hex(&a, 16));
        assert!(a < b, "{a} < {b}");
    }
}
