//! [`BiasedMutex`]: a mutex that the thread using it most takes without an
//! atomic read-modify-write instruction.
//!
//! Why: the recorder's lock is taken twice per alloc+free pair, nearly always
//! by the same thread. An uncontended `std::sync::Mutex` costs two locked
//! instructions per call (the compare-exchange that takes it and the exchange
//! that releases it), which are cheap on their own but wait for every earlier
//! instruction, the time-stamp counter read among them: on the KVM hosts we
//! measured, a `RDTSC` costs 1 to 30 ns with no locked instruction near it and
//! 20 to 60 ns with one (`docs/performance-history.md`, recorder section). Two of
//! each per pair took most of the recording budget.
//!
//! How: once one thread has taken the lock [`BIAS_AFTER`] times in a row, the
//! lock is *biased* to it. The owner then enters by writing the lock's
//! address in a word of its own ([`Slot::inside`]) and checking that the lock
//! is still biased to it: plain stores and loads, no fence. Any other thread
//! takes the inner mutex and *revokes* the bias first: it clears the bias,
//! then issues `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, which runs a
//! full memory barrier on every CPU running a thread of this process, so
//! that either the owner sees the bias gone or the revoker sees the owner
//! inside (and waits for it to leave). This is the asymmetric form of
//! Dekker's mutual exclusion that liburcu and folly use: the rare side pays
//! a system call (a few microseconds) so that the common side pays nothing.
//!
//! Revocations are rare by construction: a thread must take the lock
//! [`BIAS_AFTER`] times in a row to be biased, and a bias that served fewer
//! than [`BREAK_EVEN_ENTRIES`] entries before being revoked doubles that
//! streak for the next one (up to [`MAX_BIAS_AFTER`]), so two threads that
//! take turns cannot make every call a system call.
//!
//! Where `membarrier` is missing (other systems, old kernels, sandboxes that
//! filter it) the lock is never biased: it is the inner mutex.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering, compiler_fence, fence};
use std::sync::{Arc, Mutex, MutexGuard};

/// Slow-path acquisitions in a row by one thread before the lock is biased
/// to it.
const BIAS_AFTER: u32 = 256;
/// The longest streak asked for after unprofitable biases.
const MAX_BIAS_AFTER: u32 = 1 << 16;
/// A bias that served at least this many fast entries paid for its
/// revocation (a system call of a few microseconds against tens of
/// nanoseconds saved per entry).
const BREAK_EVEN_ENTRIES: u64 = 1024;

/// A thread's mark, shared by every biased lock it uses: which one it is
/// inside through the fast path, and how often it entered that way.
#[derive(Debug, Default)]
struct Slot {
    /// The address of the lock the thread holds through the fast path, 0
    /// when none. Only one at a time: a thread inside one biased lock takes
    /// any other through the slow path, so that a revoker waits for the
    /// owner to leave its own lock only, never for a lock the owner might
    /// be waiting on.
    inside: AtomicUsize,
    /// Fast-path entries so far (written by the owning thread only).
    entries: AtomicU64,
}

thread_local! {
    static SLOT: Arc<Slot> = Arc::new(Slot::default());
}

/// A mutex biased toward the thread that takes it most. See the
/// [module docs](self).
pub(crate) struct BiasedMutex<T> {
    /// The biased owner's slot, compared by address on the fast path; null
    /// when the lock is not biased.
    bias: AtomicPtr<Slot>,
    slow: Mutex<SlowPath>,
    data: UnsafeCell<T>,
}

// SAFETY: the data is reached only through a guard, and guards exclude each
// other (see the module docs), as a `Mutex<T>`'s do.
unsafe impl<T: Send> Send for BiasedMutex<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for BiasedMutex<T> {}

/// Bookkeeping of the slow path, under the inner mutex.
#[derive(Debug)]
struct SlowPath {
    /// The biased owner's slot: the reference keeps it alive after its
    /// thread exits, so the address in `bias` stays unique.
    owner: Option<Arc<Slot>>,
    /// The owner's entry count when it was biased.
    entries_at_bias: u64,
    /// The thread (slot address) that took the slow path last, and how many
    /// times in a row.
    last: usize,
    streak: u32,
    /// The streak that earns a bias now.
    bias_after: u32,
    /// The streak asked for after a profitable bias, and the most asked for.
    base_bias_after: u32,
    max_bias_after: u32,
    /// Biases revoked so far.
    revocations: u64,
}

/// Holds a [`BiasedMutex`]; releases it when dropped.
pub(crate) struct BiasedGuard<'a, T> {
    lock: &'a BiasedMutex<T>,
    /// The owner's slot when entered through the fast path.
    fast: Option<&'a Slot>,
    /// The inner mutex when entered through the slow path.
    _slow: Option<MutexGuard<'a, SlowPath>>,
}

impl<T> BiasedMutex<T> {
    /// A lock holding `value`, biased to no thread yet.
    pub fn new(value: T) -> Self {
        Self::with_streaks(value, BIAS_AFTER, MAX_BIAS_AFTER)
    }

    /// A lock biased after `bias_after` slow-path entries in a row, and at
    /// most after `max_bias_after` (tests revoke often with small ones).
    fn with_streaks(value: T, bias_after: u32, max_bias_after: u32) -> Self {
        BiasedMutex {
            bias: AtomicPtr::new(ptr::null_mut()),
            slow: Mutex::new(SlowPath {
                owner: None,
                entries_at_bias: 0,
                last: 0,
                streak: 0,
                bias_after,
                base_bias_after: bias_after,
                max_bias_after,
                revocations: 0,
            }),
            data: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, waiting for it if another thread holds it. Not
    /// reentrant: a thread that holds it and takes it again deadlocks, as
    /// with a `Mutex`.
    #[inline]
    pub fn lock(&self) -> BiasedGuard<'_, T> {
        // During thread teardown the slot may be gone: take the slow path.
        let slot = SLOT.try_with(Arc::as_ptr).unwrap_or(ptr::null());
        if !slot.is_null() && ptr::eq(self.bias.load(Ordering::Relaxed), slot) {
            // SAFETY: `slot` is this thread's own, alive while it runs.
            let s = unsafe { &*slot };
            if s.inside.load(Ordering::Relaxed) == 0
                && let Some(guard) = self.enter_fast(s, slot)
            {
                return guard;
            }
        }
        self.lock_slow(slot)
    }

    /// The owner's way in: announce, then check the bias again.
    #[inline(always)]
    fn enter_fast<'a>(&'a self, s: &'a Slot, slot: *const Slot) -> Option<BiasedGuard<'a, T>> {
        s.inside.store(self.addr(), Ordering::Relaxed);
        // The light half of the asymmetric fence: the revoker's
        // membarrier orders this store before the load below as seen
        // from its side; only the compiler must not reorder them here.
        compiler_fence(Ordering::SeqCst);
        if ptr::eq(self.bias.load(Ordering::Relaxed), slot) {
            s.entries
                .store(s.entries.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            return Some(BiasedGuard {
                lock: self,
                fast: Some(s),
                _slow: None,
            });
        }
        s.inside.store(0, Ordering::Release);
        None
    }

    /// This lock's identity in [`Slot::inside`].
    #[inline(always)]
    fn addr(&self) -> usize {
        self as *const Self as usize
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self, slot: *const Slot) -> BiasedGuard<'_, T> {
        let mut g = self.slow.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(owner) = g.owner.take() {
            self.revoke(&owner);
            g.revocations += 1;
            // (`entries` counts the owner's entries into every biased lock:
            // near enough, as a thread seldom holds the bias of two.)
            let served = owner.entries.load(Ordering::Relaxed) - g.entries_at_bias;
            g.bias_after = if served < BREAK_EVEN_ENTRIES {
                (g.bias_after * 2).min(g.max_bias_after)
            } else {
                g.base_bias_after
            };
        }
        if g.last == slot as usize {
            g.streak += 1;
        } else {
            g.last = slot as usize;
            g.streak = 1;
        }
        if g.streak >= g.bias_after && !slot.is_null() && membarrier::available() {
            // Bias to this thread: from its next call on it enters without
            // the inner mutex. It holds the mutex now, so no other thread is
            // inside, and any that comes next revokes first.
            let owner = SLOT.with(Arc::clone);
            g.entries_at_bias = owner.entries.load(Ordering::Relaxed);
            g.owner = Some(owner);
            g.streak = 0;
            self.bias.store(slot as *mut Slot, Ordering::Release);
        }
        BiasedGuard {
            lock: self,
            fast: None,
            _slow: Some(g),
        }
    }

    /// Ends the bias to `owner` and waits until it is outside the lock.
    /// Called with the inner mutex held.
    fn revoke(&self, owner: &Slot) {
        self.bias.store(ptr::null_mut(), Ordering::Relaxed);
        fence(Ordering::SeqCst);
        // The heavy half: a full barrier on the owner's CPU (if it is
        // running), after which it either sees the bias gone or has made
        // `inside` visible. The lock is biased only where this works.
        membarrier::private_expedited();
        fence(Ordering::SeqCst);
        let mut spins = 0u32;
        while owner.inside.load(Ordering::Acquire) == self.addr() {
            // The owner is inside for the length of one allocator call,
            // unless it was preempted there.
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Whether the lock is biased to the calling thread now (for tests).
    #[cfg(test)]
    fn biased_to_me(&self) -> bool {
        SLOT.with(|s| ptr::eq(self.bias.load(Ordering::Relaxed), Arc::as_ptr(s)))
    }
}

impl<T> Drop for BiasedGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if let Some(s) = self.fast {
            // Pairs with the revoker's acquire load: what was done inside
            // is visible to it.
            s.inside.store(0, Ordering::Release);
        }
        // A slow-path guard releases the inner mutex as `_slow` drops.
    }
}

impl<T> Deref for BiasedGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> DerefMut for BiasedGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the lock, exclusively.
        unsafe { &mut *self.lock.data.get() }
    }
}

/// The `membarrier` system call, where there is one.
mod membarrier {
    /// Whether private expedited barriers work in this process (registered
    /// on first use).
    #[cfg(target_os = "linux")]
    pub fn available() -> bool {
        static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AVAILABLE.get_or_init(|| {
            const QUERY: libc::c_long = 0;
            const PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
            const REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;
            // SAFETY: membarrier takes integer arguments and touches no
            // memory of ours.
            let supported = unsafe { libc::syscall(libc::SYS_membarrier, QUERY, 0, 0) };
            supported >= 0
                && supported & PRIVATE_EXPEDITED != 0
                && supported & REGISTER_PRIVATE_EXPEDITED != 0
                // SAFETY: as above.
                && unsafe {
                    libc::syscall(libc::SYS_membarrier, REGISTER_PRIVATE_EXPEDITED, 0, 0)
                } == 0
        })
    }

    #[cfg(not(target_os = "linux"))]
    pub fn available() -> bool {
        false
    }

    /// A full memory barrier on every CPU running a thread of this process.
    /// Only called once [`available`] said yes.
    #[cfg(target_os = "linux")]
    pub fn private_expedited() {
        const GLOBAL: libc::c_long = 1;
        const PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
        const REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;
        let call = |cmd: libc::c_long| {
            // SAFETY: as in `available`.
            unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) == 0 }
        };
        // A child process after fork may have to register again; failing
        // that, the global barrier (milliseconds, but every kernel with
        // membarrier has it) does the same job.
        if call(PRIVATE_EXPEDITED)
            || (call(REGISTER_PRIVATE_EXPEDITED) && call(PRIVATE_EXPEDITED))
            || call(GLOBAL)
        {
            return;
        }
        // Without the barrier the owner could still be inside: going on
        // would let two threads into the allocator at once.
        eprintln!(
            "vramtrace: membarrier stopped working; aborting rather than corrupt the allocator"
        );
        std::process::abort();
    }

    #[cfg(not(target_os = "linux"))]
    pub fn private_expedited() {
        unreachable!("never biased without membarrier")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

    #[test]
    fn a_thread_that_keeps_the_lock_is_biased_to() {
        let m = BiasedMutex::new(0u64);
        for _ in 0..BIAS_AFTER + 10 {
            *m.lock() += 1;
        }
        assert_eq!(*m.lock(), u64::from(BIAS_AFTER) + 10);
        assert_eq!(m.biased_to_me(), membarrier::available());
    }

    #[test]
    fn another_thread_revokes_the_bias_and_sees_the_owners_writes() {
        let m = BiasedMutex::new(Vec::new());
        for i in 0..BIAS_AFTER + 10 {
            m.lock().push(i);
        }
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut g = m.lock();
                assert_eq!(g.len(), BIAS_AFTER as usize + 10);
                g.push(u32::MAX);
            });
        });
        assert!(!m.biased_to_me());
        assert_eq!(m.lock().last(), Some(&u32::MAX));
    }

    /// A thread inside one biased lock that takes another (biased to it too)
    /// and leaves it still holds the first: a third thread waits for it.
    #[test]
    fn leaving_a_nested_lock_keeps_the_outer_one_held() {
        use std::sync::atomic::AtomicBool;
        let (a, b) = (BiasedMutex::new(0u32), BiasedMutex::new(0u32));
        for _ in 0..BIAS_AFTER + 1 {
            *a.lock() += 1;
            *b.lock() += 1;
        }
        let entered = AtomicBool::new(false);
        std::thread::scope(|s| {
            let mut outer = a.lock();
            *b.lock() += 1;
            s.spawn(|| {
                *a.lock() += 1;
                entered.store(true, Ordering::SeqCst);
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(!entered.load(Ordering::SeqCst), "another thread got in");
            *outer += 1;
        });
        assert!(entered.load(Ordering::SeqCst));
        assert_eq!(*a.lock(), BIAS_AFTER + 3);
    }

    /// Threads take turns in bursts of varying length (so the lock is biased
    /// and revoked many times) while others cut in now and then, and each
    /// increments a plain counter in a critical section long enough to be
    /// caught in: any overlap would lose increments.
    #[test]
    fn threads_in_bursts_never_overlap() {
        const THREADS: usize = 4;
        const ROUNDS: usize = 40;
        const CUT_INS: usize = 2000;
        let m = BiasedMutex::with_streaks((0u64, 0u64), 4, 4);
        let barrier = Barrier::new(THREADS);
        let mut expected = (THREADS * CUT_INS) as u64;
        for t in 0..THREADS {
            for r in 0..ROUNDS {
                expected += burst(t, r) as u64;
            }
        }
        let increment = |m: &BiasedMutex<(u64, u64)>| {
            let mut g = m.lock();
            let v = g.0;
            for _ in 0..20 {
                std::hint::black_box(&mut *g);
            }
            g.0 = v + 1;
            g.1 += 1;
        };
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (m, barrier) = (&m, &barrier);
                s.spawn(move || {
                    for r in 0..ROUNDS {
                        if r % 10 == 0 {
                            barrier.wait();
                        }
                        for _ in 0..burst(t, r) {
                            increment(m);
                        }
                    }
                });
                // A thread that cuts in on whichever thread holds the bias.
                s.spawn(move || {
                    for i in 0..CUT_INS {
                        increment(m);
                        for _ in 0..(i % 7) * 50 {
                            std::hint::spin_loop();
                        }
                    }
                });
            }
        });
        let g = m.lock();
        assert_eq!(g.0, expected);
        assert_eq!(g.1, expected);
        drop(g);
        if membarrier::available() {
            let revocations = m.slow.lock().unwrap().revocations;
            assert!(revocations >= 5, "only {revocations} revocations");
        }
    }

    fn burst(thread: usize, round: usize) -> usize {
        // From a handful of entries to several biases' worth.
        1 + (thread * 7919 + round * 104_729) % 4000
    }
}
