//! Training iterations as phases: `iter<N>`, begun and ended at the first
//! optimizer's steps.

use super::*;

/// Each training iteration is a phase `iter<N>`, numbered from 0 in each
/// recording as the training loop counts them: `iter0` begins when
/// recording does if an optimizer exists by then, else when the first one
/// is made ([`vramtrace_iteration_begin`]); the N-th step of the first
/// optimizer to step (N from 1) ends `iter<N-1>` and begins `iter<N>`
/// ([`vramtrace_iteration_end`]); stopping ends the open one. So
/// `for i in range(n): ...; opt.step()` runs loop index `i` in `iter<i>`.
/// (The analyzer groups them as `iter#`, and a peak names its iteration.)
pub(super) const ITERATION: &str = "iter";

/// The start of the `record_function` name PyTorch gives an optimizer's
/// `step` (`Optimizer.step#AdamW.step`).
pub(super) const OPTIMIZER_STEP: &[u8] = b"Optimizer.step#";

/// An iteration ends when the step's `record_function` range does.
pub(super) static ITERATION_PENDING: AtomicBool = AtomicBool::new(false);

/// The thread whose `iter` phase is open (the thread that steps the
/// optimizer), so that stopping ends it from any thread; `u32::MAX` while
/// none is.
pub(super) static ITERATION_THREAD: AtomicU32 = AtomicU32::new(u32::MAX);

/// The number of the open iteration, or of the next to begin while none
/// is open: the steps counted so far in this recording.
pub(super) static ITERATION_NUMBER: AtomicU64 = AtomicU64::new(0);

/// Serializes the iteration calls (the optimizer's thread and the one that
/// stops may differ).
pub(super) static ITERATION_LOCK: Mutex<()> = Mutex::new(());

/// A step ended: the open iteration ends (if one is) and the next begins,
/// numbered by the steps counted so far (a step with no iteration open, as
/// when no optimizer was known at its making, begins `iter1` after the
/// first step: the numbers stay the loop's).
pub(super) fn next_iteration() {
    let _serial = lock(&ITERATION_LOCK);
    let previous = ITERATION_THREAD.swap(thread_id(), Ordering::Relaxed);
    let n = ITERATION_NUMBER.load(Ordering::Relaxed);
    if previous != u32::MAX {
        traces::end_phase_of(previous, &format!("{ITERATION}{n}"));
    }
    ITERATION_NUMBER.store(n + 1, Ordering::Relaxed);
    traces::begin_phase(format!("{ITERATION}{}", n + 1));
}

/// Begins the first iteration, `iter0`, on the calling thread, if none has
/// begun in this recording. Returns whether it began one.
pub(super) fn begin_first_iteration() -> bool {
    let _serial = lock(&ITERATION_LOCK);
    if ITERATION_THREAD.load(Ordering::Relaxed) != u32::MAX
        || ITERATION_NUMBER.load(Ordering::Relaxed) != 0
        || session().is_none()
    {
        return false;
    }
    ITERATION_THREAD.store(thread_id(), Ordering::Relaxed);
    traces::begin_phase(format!("{ITERATION}0"));
    true
}

/// Ends the open iteration (at stop) and forgets the count.
pub(super) fn reset_iterations() {
    let _serial = lock(&ITERATION_LOCK);
    ITERATION_PENDING.store(false, Ordering::Relaxed);
    let iterating = ITERATION_THREAD.swap(u32::MAX, Ordering::Relaxed);
    if iterating != u32::MAX {
        let n = ITERATION_NUMBER.load(Ordering::Relaxed);
        traces::end_phase_of(iterating, &format!("{ITERATION}{n}"));
    }
    ITERATION_NUMBER.store(0, Ordering::Relaxed);
}

/// The training loop's first iteration begins now (the Python package
/// calls it when recording begins while an optimizer exists, or when the
/// first optimizer is made): `iter0` begins on the calling thread, unless
/// an iteration has begun already in this recording or none is in
/// progress. Returns 1 if it began, else 0.
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_iteration_begin() -> c_int {
    catch_unwind(begin_first_iteration).unwrap_or_else(|_| {
        report("internal error (panic) in vramtrace_iteration_begin");
        false
    }) as c_int
}

/// An optimizer step of the training loop ended (called from torch's
/// global optimizer-step hook): the open `iter` phase ends and the next
/// begins. With `deferred`, that happens when the step's `record_function`
/// range ends, which encloses the hook (so that the phases nest); else now.
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_iteration_end(deferred: c_int) {
    if deferred != 0 {
        ITERATION_PENDING.store(true, Ordering::Relaxed);
    } else if catch_unwind(next_iteration).is_err() {
        report("internal error (panic) in vramtrace_iteration_end");
    }
}
