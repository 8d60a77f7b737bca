//! The process's allocator: jemalloc, with its options and the one call the gateway makes to
//! it (giving freed memory back after a long replay).
//!
//! glibc's `malloc`/`free` were 13 % of the user-space instructions of a request through the
//! proxy; with jemalloc a plain request costs 0.90× the instructions and an idle SSE
//! subscriber holds less (docs/benchmarks.md, "The allocator"; docs/decisions.md, H1). Python
//! inside the process keeps its own allocator.

use std::ffi::c_char;

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read once when it starts: pages freed and not reused go back to the
/// system after one second instead of ten, none wait in the lazily freed ("muzzy") state,
/// and one background thread does it on time, so an idle gateway returns what a burst left
/// (without it jemalloc only purges when the process allocates again).
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: Conf = Conf(
    c"background_thread:true,max_background_threads:1,dirty_decay_ms:1000,muzzy_decay_ms:0"
        .as_ptr(),
);

/// jemalloc reads `malloc_conf` as a C `const char *`: a thin pointer to a NUL-terminated
/// string that never changes.
#[repr(transparent)]
pub struct Conf(*const c_char);

// SAFETY: the pointer is to a static, immutable byte string.
unsafe impl Sync for Conf {}

/// Gives every arena's unused pages back to the system now; false if jemalloc refused.
/// Blocking (it walks the arenas): call it from a blocking thread.
pub fn release_free() -> bool {
    // 4096 is `MALLCTL_ARENAS_ALL`, the arena index that names every arena.
    // SAFETY: a NUL-terminated mallctl name; purge reads and writes no value.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"arena.4096.purge".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    rc == 0
}

/// An option jemalloc runs with (`opt.<name>`, of the option's own type: `bool` or a signed
/// size), or None if it has no such one.
#[cfg(test)]
fn option<T: Copy + Default>(name: &str) -> Option<T> {
    let name = format!("opt.{name}\0");
    let mut value = T::default();
    let mut len = std::mem::size_of::<T>();
    // SAFETY: a NUL-terminated name; `value` and `len` are valid for jemalloc to write, and
    // jemalloc refuses (EINVAL) a length that is not the option's.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr().cast::<c_char>(),
            (&mut value as *mut T).cast::<std::ffi::c_void>(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    (rc == 0).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_runs_on_jemalloc_with_the_options_set_here() {
        // a misspelt options symbol would be ignored silently: jemalloc's defaults are 10 s / 0
        assert_eq!(option::<isize>("dirty_decay_ms"), Some(1000));
        assert_eq!(option::<isize>("muzzy_decay_ms"), Some(0));
        assert_eq!(option::<bool>("background_thread"), Some(true));
    }

    #[test]
    fn freed_memory_is_given_back_on_request() {
        let big: Vec<u8> = vec![7; 64 << 20];
        assert_eq!(big.iter().map(|b| *b as u64).sum::<u64>(), 7 * (64 << 20));
        drop(big);
        assert!(release_free());
    }
}
