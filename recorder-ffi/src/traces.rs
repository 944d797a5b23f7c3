//! Every trace the process writes, in either mode: phases and annotations
//! broadcast to all of them (and replayed into traces begun later), flush,
//! finish, and finishing at exit or on a fatal signal.

use crate::{c_str, report, write_c};
use recorder::device::CudaDevice;
use recorder::{Observer, PartLeftOut, Recorder, RecorderError, Trace, suffixed, thread_id};
use std::ffi::{c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, OnceLock};

/// A trace the process writes, whichever mode writes it: the recorder's
/// [`Trace`] (phases, notes, flushing, dumps), and finishing it.
pub(crate) trait Written: Trace + Send + Sync {
    fn finish(&self) -> Result<(), RecorderError>;
}

impl Written for Recorder<CudaDevice> {
    fn finish(&self) -> Result<(), RecorderError> {
        Recorder::finish(self).map(|s| report_left_out(&s.trace.parts_left_out))
    }
}

impl Written for Observer {
    fn finish(&self) -> Result<(), RecorderError> {
        Observer::finish(self).map(|s| report_left_out(&s.parts_left_out))
    }
}

/// Names on standard error each part of a bounded recording's ring that a
/// join left out (they stay in the ring folder).
fn report_left_out(parts: &[PartLeftOut]) {
    for part in parts {
        report(&part.to_string());
    }
}

/// Process-wide markers: phases open now (each thread's, in the order they
/// began) and annotations so far, replayed into a trace begun later, plus
/// every trace being written (to broadcast markers to). One lock, so a
/// trace being begun cannot miss a marker.
pub(crate) struct Markers {
    open_phases: Vec<(u32, String)>,
    annotations: Vec<(String, String)>,
    traces: Vec<Arc<dyn Written>>,
    /// Why a trace could not be begun (its file not created, say), the first
    /// time: flush and finish fail while it stands, since what was to be
    /// recorded is lost.
    not_begun: Option<String>,
}

static MARKERS: Mutex<Markers> = Mutex::new(Markers {
    open_phases: Vec::new(),
    annotations: Vec::new(),
    traces: Vec::new(),
    not_begun: None,
});

fn markers() -> MutexGuard<'static, Markers> {
    MARKERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Adds a trace just begun: the open phases and the annotations so far are
/// replayed into it, and markers reach it from now on. Installs the exit
/// hooks on first use.
pub(crate) fn register(trace: Arc<dyn Written>) {
    let mut m = markers();
    for (k, v) in &m.annotations {
        trace.annotate(k, v);
    }
    for (thread, name) in &m.open_phases {
        trace.phase_begin_for(*thread, name);
    }
    m.traces.push(trace);
    drop(m);
    install_exit_hooks();
}

/// Notes a trace that could not be begun: [`vramtrace_flush`] and
/// [`vramtrace_finish`] return -1 from now on, naming it.
pub(crate) fn not_begun(why: &str) {
    markers().not_begun.get_or_insert_with(|| why.to_string());
}

/// Removes finished traces (by identity) from the broadcast list.
pub(crate) fn unregister(finished: &[Arc<dyn Written>]) {
    markers()
        .traces
        .retain(|t| !finished.iter().any(|f| Arc::ptr_eq(f, t)));
}

/// Runs `f` on the markers, under their lock, and reports a panic instead
/// of letting it out.
fn broadcast(what: &str, f: impl FnOnce(&mut Markers)) {
    if forked_child() {
        return;
    }
    if catch_unwind(AssertUnwindSafe(|| f(&mut markers()))).is_err() {
        report(&format!("internal error (panic) in {what}"));
    }
}

/// Begins a phase named `name` of the calling thread on every device (each
/// thread's phases nest, apart from other threads').
///
/// # Safety
/// `name` is NULL or a valid NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_phase_begin(name: *const c_char) {
    // SAFETY: forwarded contract.
    begin_phase(unsafe { c_str(name) });
}

/// Begins a phase of the calling thread on every device.
pub(crate) fn begin_phase(name: String) {
    broadcast("vramtrace_phase_begin", |m| {
        for r in &m.traces {
            r.phase_begin(&name);
        }
        m.open_phases.push((thread_id(), name));
    });
}

/// Ends the calling thread's innermost open phase. Returns 0, or -1 when the
/// thread has no open phase.
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_phase_end() -> c_int {
    let mut status = -1;
    broadcast("vramtrace_phase_end", |m| {
        let thread = thread_id();
        if let Some(i) = m.open_phases.iter().rposition(|(t, _)| *t == thread) {
            m.open_phases.remove(i);
            status = 0;
            for r in &m.traces {
                let _ = r.phase_end();
            }
        }
    });
    status
}

/// Records a key/value annotation on every device.
///
/// # Safety
/// `key` and `value` are NULL or valid NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_annotate(key: *const c_char, value: *const c_char) {
    // SAFETY: forwarded contract.
    let (key, value) = unsafe { (c_str(key), c_str(value)) };
    broadcast("vramtrace_annotate", |m| {
        for r in &m.traces {
            r.annotate(&key, &value);
        }
        m.annotations.push((key, value));
    });
}

/// Ends the calling thread's innermost open phase named `name` on every
/// device, leaving the phases opened inside it open (for phases that
/// interleave with others, such as the iterations vramtrace marks at each
/// optimizer step). Returns 0, or -1 when the thread has no open phase of
/// that name. Another thread's phase of that name stays open.
///
/// # Safety
/// `name` is NULL or a valid NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_phase_end_named(name: *const c_char) -> c_int {
    // SAFETY: forwarded contract.
    let name = unsafe { c_str(name) };
    end_phase_of(thread_id(), &name)
}

/// Ends `thread`'s innermost open phase named `name` on every device: the
/// calling thread's, or (for vramtrace's own `iter` phase, at stop) the
/// thread that began it. Returns 0, or -1 when there is none.
pub(crate) fn end_phase_of(thread: u32, name: &str) -> c_int {
    let mut status = -1;
    broadcast("vramtrace_phase_end_named", |m| {
        if let Some(i) = m
            .open_phases
            .iter()
            .rposition(|(t, p)| *t == thread && p == name)
        {
            m.open_phases.remove(i);
            status = 0;
            for r in &m.traces {
                r.phase_end_named_for(thread, name);
            }
        }
    });
    status
}

/// Writes everything recorded so far to the trace files. Returns 0, or -1
/// if a trace could not be written, or could not be begun (reported on
/// standard error).
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_flush() -> c_int {
    let mut status = 0;
    broadcast("vramtrace_flush", |m| {
        if let Some(why) = &m.not_begun {
            report(&format!("flush: a trace could not be begun: {why}"));
            status = -1;
        }
        for r in &m.traces {
            if let Err(e) = r.flush() {
                report(&format!("flush: {e}"));
                status = -1;
            }
        }
    });
    status
}

/// Finishes every trace (footer written, file complete); allocation goes on
/// unrecorded. Called at exit and on a fatal SIGTERM/SIGINT; a second call
/// does nothing. Returns 0, or -1 if a trace could not be finished.
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_finish() -> c_int {
    let mut status = 0;
    broadcast("vramtrace_finish", |m| {
        if let Some(why) = &m.not_begun {
            report(&format!("finish: a trace could not be begun: {why}"));
            status = -1;
        }
        for r in &m.traces {
            match r.finish() {
                Ok(()) | Err(RecorderError::Finished) => {}
                Err(e) => {
                    report(&format!("finish: {e}"));
                    status = -1;
                }
            }
        }
    });
    status
}

/// Writes the kept window of every bounded recording (one begun with a
/// `keep_last`), each joined into one trace: to `path` (`%d` stands for the
/// device; without it, several devices' dumps are told apart by a
/// `-devN` suffix), or, when `path` is NULL or empty, beside each trace,
/// numbered (`serve-dump-1.vtrace`). Waits for the dumps; recording goes
/// on meanwhile. The paths written go to `out` (NUL-terminated lines,
/// truncated to `len`). Returns how many were written, or -1 when one
/// could not be (reported on standard error) or no recording is bounded.
///
/// # Safety
/// `path` is NULL or a valid NUL-terminated string; `out` is NULL or
/// points to `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_dump(
    path: *const c_char,
    out: *mut c_char,
    len: usize,
) -> c_int {
    // SAFETY: forwarded contract.
    let pattern = unsafe { c_str(path) };
    let r = catch_unwind(AssertUnwindSafe(|| {
        // Not under the markers' lock: a dump takes a while, and phases
        // must not wait for it.
        let traces = markers().traces.clone();
        if traces.is_empty() {
            return Err("dump: nothing is being recorded".to_string());
        }
        let several = traces.len() > 1;
        let mut written = Vec::new();
        let mut failed = None;
        for t in &traces {
            let path = dump_path(&pattern, t.device(), several);
            match t.dump(path.as_deref()) {
                Ok(summary) => {
                    report_left_out(&summary.left_out);
                    written.push(summary.path.display().to_string());
                }
                Err(e) => {
                    failed.get_or_insert_with(|| format!("dump of device {}: {e}", t.device()));
                }
            }
        }
        Ok((written, failed))
    }));
    match r {
        Ok(Ok((written, failed))) => {
            // SAFETY: the caller's contract: `out` is NULL or `len` writable bytes.
            unsafe { write_c(&written.join("\n"), out, len) };
            match failed {
                Some(why) => {
                    report(&why);
                    -1
                }
                None => written.len() as c_int,
            }
        }
        Ok(Err(why)) => {
            report(&why);
            -1
        }
        Err(_) => {
            report("internal error (panic) in vramtrace_dump");
            -1
        }
    }
}

/// Where device `device`'s dump goes: `pattern` with `%d` expanded (or a
/// `-devN` suffix when several devices dump and it has none); `None`: the
/// default, beside the trace.
fn dump_path(pattern: &str, device: u32, several: bool) -> Option<PathBuf> {
    if pattern.is_empty() {
        return None;
    }
    if pattern.contains("%d") {
        return Some(PathBuf::from(pattern.replace("%d", &device.to_string())));
    }
    let path = PathBuf::from(pattern);
    Some(if several {
        suffixed(&path, &format!("-dev{device}"))
    } else {
        path
    })
}

/// The number of traces being written (for tests and the Python side).
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_device_count() -> c_int {
    markers().traces.len() as c_int
}

extern "C" fn finish_at_exit() {
    vramtrace_finish();
}

/// Set in a child process made by fork(): the traces, their writer threads
/// and the locks around them are the parent's (a DataLoader worker is such
/// a child), so the child records nothing and finishes nothing.
static FORKED_CHILD: AtomicBool = AtomicBool::new(false);

extern "C" fn in_forked_child() {
    FORKED_CHILD.store(true, Ordering::Relaxed);
}

/// Whether this process is a fork of the one that began the traces.
#[inline]
pub(crate) fn forked_child() -> bool {
    FORKED_CHILD.load(Ordering::Relaxed)
}

/// Signals whose default action kills the process without running atexit.
const SIGNALS: [c_int; 2] = [libc::SIGTERM, libc::SIGINT];

/// The dispositions our handlers replaced, by index into [`SIGNALS`].
static PREVIOUS: [OnceLock<libc::sigaction>; 2] = [const { OnceLock::new() }; 2];

/// Write end of the pipe to the thread that finishes traces on a signal
/// (a signal handler may only do async-signal-safe things such as write()).
static SIGNAL_PIPE: AtomicI64 = AtomicI64::new(-1);

extern "C" fn on_signal(sig: c_int) {
    let Some(i) = SIGNALS.iter().position(|&s| s == sig) else {
        return;
    };
    let Some(prev) = PREVIOUS[i].get() else {
        return;
    };
    match prev.sa_sigaction {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // The process is about to die: let the finishing thread write the
            // footers, then re-raise with the default action.
            let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
            if fd >= 0 {
                let byte = sig as u8;
                // SAFETY: write() is async-signal-safe; one byte from a local.
                unsafe { libc::write(fd as c_int, (&byte as *const u8).cast(), 1) };
            }
        }
        handler => {
            // The program handles this signal (Python's SIGINT handler raises
            // KeyboardInterrupt): pass it on; the process is not dying, and
            // exit will finish the traces.
            if prev.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous handler was installed as a three-argument
                // one; it gets no siginfo from us, which it must tolerate
                // (as for a raise()d signal it may read fields of NULL...):
                // rare, since Python and most runtimes install one-argument ones.
                let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { std::mem::transmute(handler) };
                f(sig, std::ptr::null_mut(), std::ptr::null_mut());
            } else {
                // SAFETY: a one-argument handler was installed at this address.
                let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(handler) };
                f(sig);
            }
        }
    }
}

/// Registers the exit hook and the signal handlers, once per process.
fn install_exit_hooks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain function with no captured state.
        if unsafe { libc::atexit(finish_at_exit) } != 0 {
            report("cannot register the exit hook: traces may lack their footer");
        }
        // SAFETY: registers a plain function, run in the child after fork().
        if unsafe { libc::pthread_atfork(None, None, Some(in_forked_child)) } != 0 {
            report("cannot register the fork hook: a forked child could write to the traces");
        }
        if let Err(e) = install_signal_handlers() {
            report(&format!("cannot install signal handlers: {e}"));
        }
    });
}

fn install_signal_handlers() -> std::io::Result<()> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let read_fd = fds[0];
    SIGNAL_PIPE.store(fds[1] as i64, Ordering::Relaxed);
    std::thread::Builder::new()
        .name("vramtrace-signals".into())
        .spawn(move || {
            loop {
                let mut byte = 0u8;
                // SAFETY: reads one byte into a local from our own pipe.
                let n = unsafe { libc::read(read_fd, (&mut byte as *mut u8).cast(), 1) };
                if n == 1 {
                    let sig = byte as c_int;
                    vramtrace_finish();
                    // SAFETY: restores the default action, then re-raises to
                    // die of the signal as the process would have.
                    unsafe {
                        libc::signal(sig, libc::SIG_DFL);
                        libc::raise(sig);
                    }
                } else if n == 0
                    || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
                {
                    return;
                }
            }
        })?;
    for (i, &sig) in SIGNALS.iter().enumerate() {
        // SAFETY: all-zero is a valid sigaction (empty mask, no flags).
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_signal as extern "C" fn(c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        // SAFETY: valid pointers to a local action and an out-parameter.
        let mut prev: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above: the mask is a valid sigset_t.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // PREVIOUS must be set before the handler can run: install in two
        // steps, reading the old action first.
        // SAFETY: valid out-pointer; a NULL new action only reads.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut prev) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let _ = PREVIOUS[i].set(prev);
        // SAFETY: installs our handler; `on_signal` only does
        // async-signal-safe work or calls the previous handler.
        if unsafe { libc::sigaction(sig, &action, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::dump_path;
    use std::path::Path;

    #[test]
    fn dump_paths_tell_devices_apart() {
        assert_eq!(dump_path("", 0, false), None, "beside the trace");
        assert_eq!(
            dump_path("w.vtrace", 3, false).unwrap(),
            Path::new("w.vtrace")
        );
        assert_eq!(
            dump_path("w-%d.vtrace", 3, true).unwrap(),
            Path::new("w-3.vtrace")
        );
        assert_eq!(
            dump_path("out/w.vtrace", 1, true).unwrap(),
            Path::new("out/w-dev1.vtrace")
        );
    }
}
