//! glibc allocator settings (`mallopt`), the one place the program tunes
//! its allocator: the mount limits the arenas (`docs/filesystem.md`,
//! "Memory"), `sessionfs context`'s lean path fixes the mmap threshold
//! (`docs/benchmarks.md`). Elsewhere (another libc) these do nothing.

/// Keeps glibc to at most `n` malloc arenas: every thread that allocates
/// otherwise gets its own, and freed memory stays in each of them.
pub(crate) fn limit_arenas(n: i32) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    set(libc::M_ARENA_MAX, n);
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = n;
}

/// Serves blocks of at least `bytes` from `mmap`, always: glibc otherwise
/// raises its threshold after the first big block is freed.
pub(crate) fn fixed_mmap_threshold(bytes: i32) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    set(libc::M_MMAP_THRESHOLD, bytes);
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = bytes;
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set(param: libc::c_int, value: libc::c_int) {
    // SAFETY: mallopt only sets an allocator parameter; both callers call
    // it before their threads start.
    unsafe {
        libc::mallopt(param, value);
    }
}
