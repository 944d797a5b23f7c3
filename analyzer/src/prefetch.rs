//! Hints to the CPU's caches.

/// Asks the CPU to bring the cache line at `p` into its caches, without waiting
/// for it (a no-op where no such instruction is known): for reads whose
/// address is known long before their value is needed (the parser's frames
/// lookups, the replay's live blocks).
#[inline(always)]
pub(crate) fn prefetch_read<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing, and faults on no address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
