//! What the process does on signals and panics: quiet on a closed pipe, one
//! line on a `SIGBUS` from a mapped file or on a panic.

use super::EXIT_USAGE;

/// `vramtrace summary x | head` should end quietly when `head` exits, as
/// Unix tools do, rather than fail on the write to the closed pipe.
pub(super) fn restore_default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called once at start-up, before any other thread exists;
    // setting a signal's disposition to its default is always sound.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// A plain snapshot is parsed from a mapping of its file (`input`): if another
/// process truncates the file meanwhile, reading a page past its new end raises
/// `SIGBUS`, which would kill the process with the shell's bare "Bus error".
/// Say what happened in one line instead, and exit with the status of any
/// other error. Only a mapped file can raise it in this program.
pub(super) fn report_sigbus() {
    #[cfg(unix)]
    {
        extern "C" fn on_sigbus(_: libc::c_int) {
            const MESSAGE: &[u8] =
                b"error: an input file was truncated or changed while it was being read\n";
            // SAFETY: write(2) and _exit(2) are async-signal-safe; MESSAGE is static.
            unsafe {
                libc::write(2, MESSAGE.as_ptr().cast(), MESSAGE.len());
                libc::_exit(EXIT_USAGE as libc::c_int);
            }
        }
        // SAFETY: called once at start-up, before any other thread exists; the
        // handler only calls async-signal-safe functions.
        unsafe {
            libc::signal(libc::SIGBUS, on_sigbus as *const () as libc::sighandler_t);
        }
    }
}

/// A panic is a bug; report it in one line rather than with a backtrace.
pub(super) fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        eprintln!("error: internal error{location}: {message} (please report this)");
    }));
}
