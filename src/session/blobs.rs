//! Content-addressed blob store for images (`docs/format.md`, "Blob references").
//!
//! Before an entry is written, large inline images are moved into
//! `<agent-dir>/blobs/<sha256>` (64 lowercase hex of the SHA-256 of the
//! decoded bytes, no extension) and their `data` becomes
//! `blob:sha256:<hex>` ([`BlobStore::externalize_images`]), at every place
//! the agent does (docs/engine.md, "Blob refs in entries"). Refs are
//! resolved on read by [`crate::session::blobrefs`]; a missing blob leaves
//! the ref in place and is logged.
//!
//! Only a string that is exactly [`BLOB_REF_PREFIX`] + 64 lowercase hex is a
//! usable ref ([`parse_blob_ref`], kept with the other ref rules in
//! [`crate::session::blobrefs`]); nothing else is ever turned into a path,
//! so a ref such as `blob:sha256:../../etc/passwd` is inert.
//!
//! Only canonical standard base64 (standard alphabet, padding, no whitespace,
//! zero trailing bits) is externalised. Canonical base64 is the only encoding
//! of its bytes, so resolving a ref gives back exactly the string that was
//! stored; anything else stays inline, untouched.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::Value;
use sha2::{Digest, Sha256};

pub(crate) use crate::session::blobrefs::{blob_ref, parse_blob_ref, BLOB_REF_PREFIX};
use crate::session::blobrefs::{is_image_data_url, is_image_position, HEX_LEN};
use crate::session::error::{Error, IoContext, Result};
use crate::session::ids::{hex, is_lower_hex};
use crate::session::persistence::atomic_write;
use crate::session::sizecontrol::{is_verbatim_block, utf16_len};
use crate::session::storage::Storage;

/// Images whose base64 `data` is shorter than this (in characters) stay
/// inline.
pub(crate) const MIN_EXTERNALIZE_BASE64: usize = 1024;

/// Lowercase hex SHA-256 of `bytes` (a blob's name).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// At most the first 80 characters of `s`, for log lines about values that
/// may be huge or hostile.
fn preview(s: &str) -> &str {
    match s.char_indices().nth(80) {
        Some((end, _)) => &s[..end],
        None => s,
    }
}

/// How a slot's string becomes blob bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotKind {
    /// Base64 image data: the blob holds the decoded bytes.
    Base64,
    /// A `data:image/…;base64,` URL: the blob holds the URL's UTF-8 bytes.
    DataUrl,
}

/// True when `s` is base64 data long enough to externalise and not a ref.
fn externalizable_base64(s: &str) -> bool {
    !s.starts_with(BLOB_REF_PREFIX) && utf16_len(s) >= MIN_EXTERNALIZE_BASE64
}

/// The member of `map` (the value of, or an element of, the member `key`)
/// that holds an image payload the agent externalises, if it is one: the
/// `result` of an `image_generation_call`, or the `data` of an image
/// payload (see `for_each_blob_slot`). The agent replaces that member and
/// keeps the rest of the object as it is, without entering it
/// (`sizecontrol::apply_size_controls` follows).
pub(crate) fn payload_slot(
    map: &serde_json::Map<String, Value>,
    key: Option<&str>,
) -> Option<&'static str> {
    let str_of = |k: &str| map.get(k).and_then(Value::as_str);
    let type_name = str_of("type");
    if type_name == Some("image_generation_call")
        && str_of("result").is_some_and(externalizable_base64)
    {
        return Some("result");
    }
    (str_of("data").is_some_and(externalizable_base64)
        && is_image_position(key, type_name, str_of("mimeType")))
    .then_some("data")
}

/// True for a string under `key` that the agent externalises whole: an
/// image data URL under `image_url` that is not a ref yet.
pub(crate) fn is_data_url_slot(key: Option<&str>, s: &str) -> bool {
    key == Some("image_url") && is_image_data_url(s) && !s.starts_with(BLOB_REF_PREFIX)
}

/// True for a value (the member `key` of its object, or an element of it)
/// that [`BlobStore::externalize_images`] replaces: an object holding an
/// image payload ([`payload_slot`]) or an image data URL
/// ([`is_data_url_slot`]). The size controls leave these alone
/// (`sizecontrol::apply_size_controls`).
pub(crate) fn becomes_blob(value: &Value, key: Option<&str>) -> bool {
    match value {
        Value::String(s) => is_data_url_slot(key, s),
        Value::Object(map) => payload_slot(map, key).is_some(),
        _ => false,
    }
}

/// Calls `f` on every string the agent externalises (docs/engine.md, "Blob
/// refs in entries"), in document order, with how it is stored:
/// - the `data` of an image payload under `content`, `images` or `frames`
///   (see [`is_image_position`]) with at least [`MIN_EXTERNALIZE_BASE64`]
///   characters that is not already a ref;
/// - the `result` of an `image_generation_call` of that length;
/// - a string `image_url` that is an image data URL (any length).
///
/// Signed blocks ([`is_verbatim_block`]) are stored whole and not entered;
/// neither are the payloads found.
fn for_each_blob_slot(
    value: &mut Value,
    key: Option<&str>,
    f: &mut dyn FnMut(&mut String, SlotKind) -> Result<()>,
) -> Result<()> {
    match value {
        Value::Object(map) => {
            if let Some(slot) = payload_slot(map, key) {
                if let Some(Value::String(data)) = map.get_mut(slot) {
                    f(data, SlotKind::Base64)?;
                }
                return Ok(());
            }
            if is_verbatim_block(map, key) {
                return Ok(());
            }
            for (child_key, child) in map.iter_mut() {
                match child {
                    Value::String(url) if is_data_url_slot(Some(child_key), url) => {
                        f(url, SlotKind::DataUrl)?;
                    }
                    _ => for_each_blob_slot(child, Some(child_key), f)?,
                }
            }
        }
        Value::Array(items) => {
            for item in items.iter_mut() {
                for_each_blob_slot(item, key, f)?;
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
    Ok(())
}

/// The blob store in `<agent-dir>/blobs`.
#[derive(Debug, Clone)]
pub struct BlobStore {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
}

impl BlobStore {
    /// A blob store in `dir` (normally `<agent-dir>/blobs`). Nothing is
    /// created until the first [`put`](Self::put).
    pub fn new(storage: Arc<dyn Storage>, dir: impl Into<PathBuf>) -> Self {
        BlobStore {
            storage,
            dir: dir.into(),
        }
    }

    /// The blob directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of the blob named `hex`, or `None` unless `hex` is exactly 64
    /// lowercase hex digits.
    pub fn path_for(&self, hex: &str) -> Option<PathBuf> {
        is_lower_hex(hex, HEX_LEN).then(|| self.dir.join(hex))
    }

    /// Stores `bytes` under their SHA-256 and returns the lowercase hex
    /// digest. A blob that already exists and passes [`get`](Self::get)'s
    /// checks is not rewritten; otherwise (missing, a symlink, wrong
    /// content) the directory is created (mode 0700) and the blob written
    /// atomically (temp file, fsync, rename over whatever was there,
    /// directory fsync).
    pub fn put(&self, bytes: &[u8]) -> Result<String> {
        let hex = sha256_hex(bytes);
        let path = self.dir.join(&hex);
        match self.get(&hex) {
            Ok(Some(_)) => return Ok(hex),
            Ok(None) => {}
            Err(e) => {
                // Remove what is there first: the atomic rewrite keeps a
                // symlink and would write through it.
                log::warn!("{e}; replacing it");
                if let Err(e) = self.storage.unlink(&path) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        return Err(Error::io(path, e));
                    }
                }
            }
        }
        self.storage.ensure_dir(&self.dir).at(&self.dir)?;
        atomic_write(&*self.storage, &path, bytes)?;
        log::debug!("stored blob {hex} ({} bytes)", bytes.len());
        Ok(hex)
    }

    /// The bytes of blob `hex`, or `None` when it does not exist. A `hex` that
    /// is not exactly 64 lowercase hex digits is never used as a path: it is
    /// logged and reported as missing.
    ///
    /// The blob is opened only directly inside the blob directory and
    /// without following symlinks (neither the directory nor the file may be
    /// one: `Storage::read_in_dir`), and served only when the SHA-256 of its
    /// bytes is its name; a symlink, a special file or content that does not
    /// match is an error (see "Security" in `docs/reliability.md`).
    pub fn get(&self, hex: &str) -> Result<Option<Vec<u8>>> {
        if self.path_for(hex).is_none() {
            log::warn!("refusing malformed blob name {:?}", preview(hex));
            return Ok(None);
        }
        let bytes = match self.storage.read_in_dir(&self.dir, hex) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(self.dir.join(hex), e)),
        };
        let actual = sha256_hex(&bytes);
        if actual != hex {
            return Err(Error::Invalid(format!(
                "blob {hex} in {} does not match its name (its SHA-256 is {actual})",
                self.dir.display()
            )));
        }
        Ok(Some(bytes))
    }

    /// Moves large inline images into the blob store (`docs/format.md`, "Blob references"), at every
    /// place the agent does (see `for_each_blob_slot`): base64 data is
    /// decoded, stored with [`put`](Self::put), and replaced by
    /// `blob:sha256:<hex>`; an image data URL is stored as its UTF-8 bytes.
    /// The other keys of each object stay, in order. Base64 that is not
    /// canonical standard base64 stays inline (logged at debug level).
    ///
    /// Returns whether anything changed. All blobs are written before the
    /// value is touched: on error (a blob could not be written) `value` is
    /// left unchanged, and the caller must not persist the entry. Run this
    /// before the size controls (`sizecontrol::apply_size_controls`),
    /// on the copy of the entry that is about to be written.
    pub fn externalize_images(&self, value: &mut Value) -> Result<bool> {
        // Pass 1: store, recording the outcome of each slot in document
        // order (None: not canonical base64, stays inline).
        let mut refs: Vec<Option<String>> = Vec::new();
        for_each_blob_slot(value, None, &mut |slot, kind| {
            let bytes = match kind {
                SlotKind::DataUrl => Some(slot.as_bytes().to_vec()),
                SlotKind::Base64 => match STANDARD.decode(slot.as_bytes()) {
                    Ok(bytes) => Some(bytes),
                    Err(e) => {
                        log::debug!(
                            "image data of {} characters is not canonical base64 ({e}); keeping it inline",
                            slot.len()
                        );
                        None
                    }
                },
            };
            refs.push(match bytes {
                Some(bytes) => Some(blob_ref(&self.put(&bytes)?)),
                None => None,
            });
            Ok(())
        })?;
        if refs.iter().all(Option::is_none) {
            return Ok(false);
        }
        // Pass 2: the value is unchanged since pass 1, so the same slots are
        // visited in the same order.
        let mut refs = refs.into_iter();
        for_each_blob_slot(value, None, &mut |slot, _| {
            if let Some(Some(r)) = refs.next() {
                *slot = r;
            }
            Ok(())
        })?;
        Ok(true)
    }
}

/// Resolves the blob refs of `json` (the value of the entry member `key`,
/// or a whole entry for `None`) from `blobs`; a missing or unreadable blob
/// keeps its ref (logged). `None` when nothing changed.
pub(crate) fn resolve_from_store(
    blobs: &BlobStore,
    key: Option<&str>,
    json: &str,
) -> Option<String> {
    crate::session::blobrefs::resolve_refs(json, key, &|hex| match blobs.get(hex) {
        Ok(Some(bytes)) => Some(bytes),
        Ok(None) => {
            log::warn!(
                "blob {hex} is missing from {}; keeping the reference",
                blobs.dir().display()
            );
            None
        }
        Err(e) => {
            log::warn!("cannot read blob {hex}: {e}; keeping the reference");
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::storage::{FaultOp, FileStorage, MemoryStorage};
    use serde_json::json;

    /// The reference corpus blob: 6000 bytes of 0x07.
    const CORPUS_BLOB: &str = "62358cfb66e60510d29ccd6d81b7ca157d648fb89b4d75ca4ac5b92db60d9350";

    /// A blob store on one storage, with what the test needs to inspect it.
    struct Fixture {
        store: BlobStore,
        storage: Arc<dyn Storage>,
        /// The agent directory (parent of the blob directory).
        root: PathBuf,
        memory: Option<MemoryStorage>,
        _tmp: Option<tempfile::TempDir>,
    }

    impl Fixture {
        fn memory() -> Self {
            let mem = MemoryStorage::new();
            let storage: Arc<dyn Storage> = Arc::new(mem.clone());
            let root = PathBuf::from("/agent");
            Fixture {
                store: BlobStore::new(storage.clone(), root.join("blobs")),
                storage,
                root,
                memory: Some(mem),
                _tmp: None,
            }
        }

        fn file() -> Self {
            let tmp = tempfile::tempdir().unwrap();
            let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
            let root = tmp.path().join("agent");
            Fixture {
                store: BlobStore::new(storage.clone(), root.join("blobs")),
                storage,
                root,
                memory: None,
                _tmp: Some(tmp),
            }
        }

        /// Names in the blob directory (empty if it does not exist).
        fn blob_names(&self) -> Vec<String> {
            self.storage
                .list(self.store.dir())
                .map(|items| items.into_iter().map(|i| i.name).collect())
                .unwrap_or_default()
        }
    }

    /// Runs `test` against a memory storage and a real directory.
    fn with_each_storage(test: impl Fn(&Fixture)) {
        test(&Fixture::memory());
        test(&Fixture::file());
    }

    /// Resolves the refs in `v` (an entry, or the value of member `key`)
    /// as a session read does; whether anything changed.
    fn resolved(fx: &Fixture, v: &mut Value, key: Option<&str>) -> bool {
        let text = v.to_string();
        let fetch = |hex: &str| fx.store.get(hex).ok().flatten();
        match crate::session::blobrefs::resolve_refs(&text, key, &fetch) {
            Some(out) => {
                *v = serde_json::from_str(&out).unwrap();
                true
            }
            None => false,
        }
    }

    fn image(data: &str) -> Value {
        json!({"type": "image", "data": data, "mimeType": "image/png"})
    }

    fn bytes_of_len(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[test]
    fn parse_blob_ref_accepts_only_exact_refs() {
        let good = format!("{BLOB_REF_PREFIX}{CORPUS_BLOB}");
        assert_eq!(parse_blob_ref(&good), Some(CORPUS_BLOB));
        for bad in [
            "blob:sha256:../x".to_string(),
            "blob:sha256:../../etc/passwd".to_string(),
            format!("{BLOB_REF_PREFIX}{}", CORPUS_BLOB.to_uppercase()),
            format!("{BLOB_REF_PREFIX}{}", &CORPUS_BLOB[..63]),
            format!("{BLOB_REF_PREFIX}{CORPUS_BLOB}0"),
            format!("{BLOB_REF_PREFIX}{CORPUS_BLOB}/"),
            format!("blob:sha1:{CORPUS_BLOB}"),
            CORPUS_BLOB.to_string(),
            format!(" {good}"),
            String::new(),
        ] {
            assert_eq!(parse_blob_ref(&bad), None, "{bad}");
        }
    }

    #[test]
    fn reference_corpus_blob_name() {
        let bytes = vec![7u8; 6000];
        assert_eq!(sha256_hex(&bytes), CORPUS_BLOB);
        assert!(STANDARD.encode(&bytes).starts_with("BwcH"));
        // Cross-check with the corpus file when it is around.
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/reference-corpus/blobs")
            .join(CORPUS_BLOB);
        if let Ok(on_disk) = std::fs::read(corpus) {
            assert_eq!(on_disk, bytes);
        }
        with_each_storage(|fx| {
            assert_eq!(fx.store.put(&bytes).unwrap(), CORPUS_BLOB);
            assert_eq!(fx.store.get(CORPUS_BLOB).unwrap().unwrap(), bytes);
            let mut content = json!([image(&blob_ref(CORPUS_BLOB))]);
            assert!(resolved(fx, &mut content, Some("content")));
            assert!(content[0]["data"].as_str().unwrap().starts_with("BwcH"));
        });
    }

    #[test]
    fn put_and_get() {
        with_each_storage(|fx| {
            assert!(!fx.storage.exists(fx.store.dir()));
            let hex = fx.store.put(b"hello").unwrap();
            assert_eq!(
                hex,
                "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
            );
            assert_eq!(fx.store.get(&hex).unwrap().unwrap(), b"hello");
            assert_eq!(fx.blob_names(), vec![hex.clone()]);
            // Same bytes again: same name, one file.
            assert_eq!(fx.store.put(b"hello").unwrap(), hex);
            assert_eq!(fx.blob_names(), vec![hex]);
            assert_eq!(fx.store.get(&"0".repeat(64)).unwrap(), None);
            assert_eq!(fx.store.get("../x").unwrap(), None);
        });
    }

    #[test]
    fn put_does_not_rewrite_an_existing_blob() {
        let fx = Fixture::memory();
        let hex = fx.store.put(b"abc").unwrap();
        let path = fx.store.path_for(&hex).unwrap();
        let before = fx.storage.stat(&path).unwrap().identity;
        // Writes would fail now; an existing blob needs none.
        fx.memory.as_ref().unwrap().inject_fault(FaultOp::Write);
        assert_eq!(fx.store.put(b"abc").unwrap(), hex);
        assert_eq!(fx.storage.stat(&path).unwrap().identity, before);
    }

    #[test]
    fn put_repairs_a_blob_of_the_wrong_size() {
        with_each_storage(|fx| {
            let hex = sha256_hex(b"full content");
            fx.storage.ensure_dir(fx.store.dir()).unwrap();
            fx.storage
                .write(&fx.store.dir().join(&hex), b"full")
                .unwrap();
            assert_eq!(fx.store.put(b"full content").unwrap(), hex);
            assert_eq!(fx.store.get(&hex).unwrap().unwrap(), b"full content");
        });
    }

    #[cfg(unix)]
    #[test]
    fn blob_dir_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let fx = Fixture::file();
        fx.store.put(b"x").unwrap();
        let mode = std::fs::metadata(fx.store.dir())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn externalize_big_image() {
        with_each_storage(|fx| {
            let bytes = bytes_of_len(3000);
            let b64 = STANDARD.encode(&bytes);
            let hex = sha256_hex(&bytes);
            let mut entry = json!({
                "type": "message",
                "message": {"role": "user", "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image", "data": b64, "mimeType": "image/png", "extra": 1},
                ]},
            });
            assert!(fx.store.externalize_images(&mut entry).unwrap());
            let block = &entry["message"]["content"][1];
            assert_eq!(
                serde_json::to_string(block).unwrap(),
                format!(
                    r#"{{"type":"image","data":"blob:sha256:{hex}","mimeType":"image/png","extra":1}}"#
                )
            );
            assert_eq!(entry["message"]["content"][0]["text"], "look");
            assert_eq!(fx.store.get(&hex).unwrap().unwrap(), bytes);
            assert_eq!(fx.blob_names(), vec![hex]);
            // Idempotent: a ref is not externalised again.
            let snapshot = entry.clone();
            assert!(!fx.store.externalize_images(&mut entry).unwrap());
            assert_eq!(entry, snapshot);
        });
    }

    #[test]
    fn externalize_threshold_is_1024_characters() {
        with_each_storage(|fx| {
            let b64_1020 = STANDARD.encode(bytes_of_len(765)); // 1020 chars
            let b64_1024 = STANDARD.encode(bytes_of_len(768)); // 1024 chars
            assert_eq!((b64_1020.len(), b64_1024.len()), (1020, 1024));
            let mut v = json!({"content": [image(&b64_1020)]});
            let before = v.clone();
            assert!(!fx.store.externalize_images(&mut v).unwrap());
            assert_eq!(v, before);
            assert!(fx.blob_names().is_empty());
            let mut v = json!({"content": [image(&b64_1024)]});
            assert!(fx.store.externalize_images(&mut v).unwrap());
            assert!(parse_blob_ref(v["content"][0]["data"].as_str().unwrap()).is_some());
        });
    }

    #[test]
    fn externalize_leaves_other_blocks_alone() {
        with_each_storage(|fx| {
            let b64 = STANDARD.encode(bytes_of_len(2000));
            let not_base64 = "!".repeat(2000);
            let unpadded = b64.trim_end_matches('=').to_string(); // padding required
            let with_newlines = format!("{}\n{}", &b64[..1000], &b64[1000..]);
            let long_malformed_ref = format!("{BLOB_REF_PREFIX}{}", "z".repeat(2000));
            let mut v = json!({
                "type": "custom_message",
                "content": [
                    image(&not_base64),
                    image(&unpadded),
                    image(&with_newlines),
                    image(&long_malformed_ref),
                    {"type": "text", "data": b64},        // not an image
                    {"type": "image", "data": 12345},     // data not a string
                ],
                "images": [{"data": b64, "mimeType": "text/plain"}], // not an image
                "details": {"image": image(&b64), "content": {"data": b64, "mimeType": "image/png"}},
                "content2": [image(&b64)],
                // Signed blocks are stored whole.
                "signed": {"type": "thinking", "thinkingSignature": "s", "content": [image(&b64)]},
                "image_url": "https://example.com/a.png",
            });
            let before = v.clone();
            assert!(!fx.store.externalize_images(&mut v).unwrap());
            assert_eq!(v, before);
            assert!(fx.blob_names().is_empty());
        });
    }

    #[test]
    fn externalize_at_any_depth_and_deduplicates() {
        with_each_storage(|fx| {
            let bytes = bytes_of_len(5000);
            let b64 = STANDARD.encode(&bytes);
            let other = STANDARD.encode(bytes_of_len(4000));
            let mut v = json!({
                "type": "message",
                "message": {"role": "toolResult", "content": [
                    image(&b64),
                    {"type": "wrapper", "content": [image(&b64), image(&other)]},
                ]},
                "details": [{"content": [image(&b64)]}],
            });
            assert!(fx.store.externalize_images(&mut v).unwrap());
            let r = blob_ref(&sha256_hex(&bytes));
            assert_eq!(v["message"]["content"][0]["data"], r.as_str());
            assert_eq!(v["message"]["content"][1]["content"][0]["data"], r.as_str());
            assert_eq!(v["details"][0]["content"][0]["data"], r.as_str());
            assert!(parse_blob_ref(
                v["message"]["content"][1]["content"][1]["data"]
                    .as_str()
                    .unwrap()
            )
            .is_some());
            let mut names = fx.blob_names();
            names.sort();
            let mut expected = vec![sha256_hex(&bytes), sha256_hex(&bytes_of_len(4000))];
            expected.sort();
            assert_eq!(names, expected);
        });
    }

    #[test]
    fn failed_blob_write_is_an_error_and_changes_nothing() {
        for fault in [FaultOp::Write, FaultOp::Rename] {
            let fx = Fixture::memory();
            let mem = fx.memory.as_ref().unwrap();
            mem.inject_fault(fault);
            let b64 = STANDARD.encode(bytes_of_len(3000));
            let mut v = json!({"type": "message", "message": {"content": [image(&b64)]}});
            let before = v.clone();
            assert!(fx.store.externalize_images(&mut v).is_err());
            assert_eq!(v, before);
            assert!(
                mem.file_paths().is_empty(),
                "{fault:?}: {:?}",
                mem.file_paths()
            );
        }
    }

    #[test]
    fn failure_after_a_first_blob_leaves_the_value_unchanged() {
        let fx = Fixture::memory();
        let first = STANDARD.encode(bytes_of_len(3000));
        // Store the first blob, then fail writes: the second image cannot be
        // stored, and the first block must not be rewritten either.
        fx.store.put(&bytes_of_len(3000)).unwrap();
        fx.memory.as_ref().unwrap().inject_fault(FaultOp::Write);
        let second = STANDARD.encode(bytes_of_len(3001));
        let mut v = json!({"content": [image(&first), image(&second)]});
        let before = v.clone();
        assert!(fx.store.externalize_images(&mut v).is_err());
        assert_eq!(v, before);
        // Only the pre-existing blob, no temp file.
        assert_eq!(fx.blob_names(), vec![sha256_hex(&bytes_of_len(3000))]);
    }

    #[test]
    fn failed_blob_dir_on_a_real_disk_is_an_error() {
        let fx = Fixture::file();
        // A regular file where the blob directory should be.
        std::fs::create_dir_all(&fx.root).unwrap();
        std::fs::write(fx.store.dir(), b"not a dir").unwrap();
        let b64 = STANDARD.encode(bytes_of_len(3000));
        let mut v = json!({"content": [image(&b64)]});
        let before = v.clone();
        assert!(fx.store.externalize_images(&mut v).is_err());
        assert_eq!(v, before);
    }

    #[test]
    fn round_trip_gives_back_the_original() {
        with_each_storage(|fx| {
            let b64 = STANDARD.encode(bytes_of_len(2500)); // ends with '='
            assert!(b64.ends_with('='));
            let original = json!({
                "type": "message",
                "id": "abcd1234",
                "message": {"role": "user", "content": [
                    {"type": "text", "text": "see"},
                    image(&b64),
                    image(&b64),
                ]},
            });
            let mut entry = original.clone();
            assert!(fx.store.externalize_images(&mut entry).unwrap());
            assert_ne!(entry, original);
            // Through the serialized form, as on disk.
            let mut loaded: Value =
                serde_json::from_str(&serde_json::to_string(&entry).unwrap()).unwrap();
            assert!(resolved(fx, &mut loaded, None));
            assert_eq!(
                serde_json::to_string(&loaded).unwrap(),
                serde_json::to_string(&original).unwrap()
            );
            // Nothing left to resolve.
            assert!(!resolved(fx, &mut loaded, None));
        });
    }

    #[test]
    fn refs_resolve_at_image_positions_of_any_entry() {
        with_each_storage(|fx| {
            let bytes = bytes_of_len(1500);
            let r = blob_ref(&fx.store.put(&bytes).unwrap());
            let b64 = STANDARD.encode(&bytes);
            for (mut entry, pointer) in [
                (
                    json!({"type": "custom_message", "content": [image(&r)]}),
                    "/content/0/data",
                ),
                (
                    json!({"type": "custom", "content": [image(&r)]}),
                    "/content/0/data",
                ),
                (
                    json!({"type": "message", "message": {"content": {"type": "image", "data": r}}}),
                    "/message/content/data",
                ),
                (
                    json!({"type": "message", "message": {"details": {"images": [{"data": r, "mimeType": "image/png"}]}}}),
                    "/message/details/images/0/data",
                ),
            ] {
                assert!(resolved(fx, &mut entry, None), "{entry}");
                assert_eq!(entry.pointer(pointer).unwrap(), b64.as_str());
            }
            for other in [
                json!({"type": "custom_message", "message": {"stuff": [image(&r)]}}),
                json!({"type": "message", "message": {"content": [{"type": "text", "data": r}]}}),
                json!({"message": {"frames": [image(&r)]}}),
            ] {
                let mut v = other.clone();
                assert!(!resolved(fx, &mut v, None), "{other}");
                assert_eq!(v, other);
            }
        });
    }

    #[test]
    fn externalize_nested_positions_and_data_urls() {
        with_each_storage(|fx| {
            let bytes = bytes_of_len(3000);
            let b64 = STANDARD.encode(&bytes);
            let r = blob_ref(&sha256_hex(&bytes));
            let url = "data:image/png;base64,AAAA";
            let url_ref = blob_ref(&sha256_hex(url.as_bytes()));
            let original = json!({
                "type": "message",
                "message": {
                    "role": "toolResult",
                    "content": [{"type": "text", "text": "x"}],
                    "details": {"images": [{"data": b64, "mimeType": "image/png"}]},
                    "images": [image(&b64)],
                    "payload": [{"type": "input_image", "image_url": url}],
                    "gen": {"type": "image_generation_call", "result": b64},
                },
            });
            let mut v = original.clone();
            assert!(fx.store.externalize_images(&mut v).unwrap());
            let m = &v["message"];
            assert_eq!(m["details"]["images"][0]["data"], r.as_str());
            assert_eq!(m["images"][0]["data"], r.as_str());
            assert_eq!(m["payload"][0]["image_url"], url_ref.as_str());
            assert_eq!(m["gen"]["result"], r.as_str());
            assert_eq!(
                fx.store.get(&sha256_hex(url.as_bytes())).unwrap().unwrap(),
                url.as_bytes()
            );
            // Reading resolves every one of them back.
            assert!(resolved(fx, &mut v, None));
            assert_eq!(v, original);
        });
    }

    #[test]
    fn missing_blob_keeps_the_ref() {
        with_each_storage(|fx| {
            let r = blob_ref(&"ab".repeat(32));
            let mut content = json!([image(&r), {"type": "text", "text": "t"}]);
            let before = content.clone();
            assert!(!resolved(fx, &mut content, Some("content")));
            assert_eq!(content, before);
        });
    }

    #[test]
    fn unreadable_blob_keeps_the_ref() {
        let fx = Fixture::memory();
        let hex = fx.store.put(b"some image").unwrap();
        fx.memory.as_ref().unwrap().inject_fault(FaultOp::Read);
        let mut content = json!([image(&blob_ref(&hex))]);
        let before = content.clone();
        assert!(!resolved(&fx, &mut content, Some("content")));
        assert_eq!(content, before);
        assert!(fx.store.get(&hex).is_err());
    }

    #[test]
    fn malformed_refs_are_never_read() {
        with_each_storage(|fx| {
            let hex = sha256_hex(b"decoy");
            let upper = hex.to_uppercase();
            let short = &hex[..63];
            let malformed = [
                (
                    "../../etc/passwd".to_string(),
                    fx.store.dir().join("../../etc/passwd"),
                ),
                ("../secret".to_string(), fx.store.dir().join("../secret")),
                (upper.clone(), fx.store.dir().join(&upper)),
                (short.to_string(), fx.store.dir().join(short)),
                (format!("{hex}/"), fx.store.dir().join(&hex)),
            ];
            // Put tempting files at every path a careless resolver would open
            // (on the real disk `..` resolves to real files; in memory the
            // literal joined path is the key).
            for (_, path) in &malformed {
                fx.storage.ensure_dir(path.parent().unwrap()).unwrap();
                fx.storage.write(path, b"secret").unwrap();
            }
            for sibling in [fx.root.join("secret"), fx.root.join("../etc/passwd")] {
                fx.storage.ensure_dir(sibling.parent().unwrap()).unwrap();
                fx.storage.write(&sibling, b"secret").unwrap();
            }
            let mut content = Value::Array(
                malformed
                    .iter()
                    .map(|(suffix, _)| image(&format!("{BLOB_REF_PREFIX}{suffix}")))
                    .collect(),
            );
            let before = content.clone();
            assert!(!resolved(fx, &mut content, Some("content")));
            assert_eq!(content, before);
            for (suffix, _) in &malformed {
                assert_eq!(fx.store.get(suffix).unwrap(), None, "{suffix}");
            }
        });
    }

    #[test]
    fn resolve_ignores_non_arrays_and_inline_data() {
        with_each_storage(|fx| {
            let mut s = json!("blob:sha256:x");
            assert!(!resolved(fx, &mut s, Some("content")));
            let mut content = json!([image("aGVsbG8="), "str", 3, null]);
            let before = content.clone();
            assert!(!resolved(fx, &mut content, Some("content")));
            assert_eq!(content, before);
        });
    }

    #[test]
    fn no_temp_files_remain_after_puts() {
        with_each_storage(|fx| {
            for n in 0..5 {
                fx.store.put(&bytes_of_len(100 + n)).unwrap();
            }
            let names = fx.blob_names();
            assert_eq!(names.len(), 5);
            // Temp files (`.<name>.<random>.tmp`) would not be 64 hex.
            assert!(names.iter().all(|n| is_lower_hex(n, 64)), "{names:?}");
        });
    }
    #[cfg(unix)]
    #[test]
    fn blobs_are_not_read_through_symlinks() {
        let fx = Fixture::file();
        let secret = fx.root.join("secret");
        fx.storage.ensure_dir(&fx.root).unwrap();
        std::fs::write(&secret, b"outside").unwrap();
        // A link named after the content's own hash: matching content is
        // not enough, the link itself is refused.
        let hex = sha256_hex(b"outside");
        fx.storage.ensure_dir(fx.store.dir()).unwrap();
        std::os::unix::fs::symlink(&secret, fx.store.dir().join(&hex)).unwrap();
        assert!(fx.store.get(&hex).is_err());
        let mut content = json!([image(&blob_ref(&hex))]);
        assert!(!resolved(&fx, &mut content, Some("content")));
        assert_eq!(content[0]["data"], blob_ref(&hex));
        // Storing the same bytes replaces the link with a real file.
        assert_eq!(fx.store.put(b"outside").unwrap(), hex);
        let meta = std::fs::symlink_metadata(fx.store.dir().join(&hex)).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(std::fs::read(&secret).unwrap(), b"outside");
        assert_eq!(fx.store.get(&hex).unwrap().unwrap(), b"outside");
    }

    #[cfg(unix)]
    #[test]
    fn a_symlinked_blob_dir_is_not_followed() {
        let fx = Fixture::file();
        let elsewhere = fx.root.join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        let hex = sha256_hex(b"img");
        std::fs::write(elsewhere.join(&hex), b"img").unwrap();
        std::os::unix::fs::symlink(&elsewhere, fx.store.dir()).unwrap();
        assert!(fx.store.get(&hex).is_err());
    }

    #[test]
    fn blobs_whose_content_does_not_match_their_name_are_not_served() {
        with_each_storage(|fx| {
            let hex = sha256_hex(b"the real image");
            fx.storage.ensure_dir(fx.store.dir()).unwrap();
            fx.storage
                .write(&fx.store.dir().join(&hex), b"something else")
                .unwrap();
            let err = fx.store.get(&hex).unwrap_err();
            assert!(err.to_string().contains("does not match"), "{err}");
            let mut content = json!([image(&blob_ref(&hex))]);
            let before = content.clone();
            assert!(!resolved(fx, &mut content, Some("content")));
            assert_eq!(content, before);
        });
    }

    #[cfg(unix)]
    #[test]
    fn special_files_are_refused_without_blocking() {
        let fx = Fixture::file();
        let hex = sha256_hex(b"x");
        fx.storage.ensure_dir(fx.store.dir()).unwrap();
        let fifo = fx.store.dir().join(&hex);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(fx.store.get(&hex).is_err());
    }
}
