//! What the binary writes: warnings on stderr (control characters shown,
//! never obeyed), text on stdout, and files written whole or not at all.

use std::path::Path;
use vramtrace::command::Warning;
use vramtrace::print::{printable, printable_cut};

/// The most characters of a message quoting the input: a value of
/// megabytes (an allocator setting) is cut, so that the message stays one
/// line.
pub(super) const MESSAGE_CHARS: usize = 1000;

/// Prints a warning line on stderr, its control characters shown, not
/// obeyed (they may come from the input).
pub(super) fn warn(message: impl std::fmt::Display) {
    eprintln!(
        "warning: {}",
        printable_cut(&message.to_string(), MESSAGE_CHARS)
    );
}

/// Prints a pass's warnings about an input, in the CLI's terms. Phases of
/// other threads are no warning: every pass of a DDP trace has them, and
/// `summary` tells of them once, in its header.
pub(super) fn warn_about(path: &Path, warnings: &[Warning]) {
    for w in warnings {
        match w {
            Warning::EmptyWindow => warn(format_args!(
                "{}: no event lies inside --from/--to",
                path.display()
            )),
            Warning::OtherThreadPhases { .. } => {}
            w => warn(format_args!("{}: {w}", path.display())),
        }
    }
}

/// Prints the warnings of a result's passes, each about its input (see
/// [`warn_about`]), less what converting a snapshot found: that was told as
/// the input opened (`common::open`).
pub(super) fn warn_inputs(warnings: &[vramtrace::command::InputWarning]) {
    for w in warnings {
        if !matches!(w.warning, Warning::Conversion(_)) {
            warn_about(&w.path, std::slice::from_ref(&w.warning));
        }
    }
}

/// Writes text to stdout, names from the input with their control
/// characters shown, not obeyed (JSON is already so). A closed pipe
/// (`| head`) is not an error: the reader has what it wanted.
pub(super) fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let text = printable(text);
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Writes a chart, page or trace whole or not at all: to a temporary file
/// beside it, renamed over it once complete, so that a failure (a full disk,
/// a kill) never leaves a partial file or destroys the one there.
pub(super) fn write_file(path: &Path, content: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    write_with(path, |out| out.write_all(content))
}

/// [`write_file`] for content written as it is made (`synth`).
pub(super) fn write_with(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let context = || format!("cannot write {}", path.display());
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        // A device or a pipe (`-o /dev/stdout`): there is nothing to replace.
        let mut out = std::io::BufWriter::new(std::fs::File::create(path).with_context(context)?);
        return write(&mut out)
            .and_then(|()| out.into_inner().map(drop).map_err(|e| e.into_error()))
            .with_context(context);
    }
    let name = path.file_name().with_context(context)?;
    let mut temporary_name = std::ffi::OsString::from(".");
    temporary_name.push(name);
    temporary_name.push(format!(".{}.tmp", std::process::id()));
    let temporary = path.with_file_name(temporary_name);
    let result = (|| {
        // A file without a name while it is written (O_TMPFILE), so that a
        // kill (SIGKILL) leaves nothing behind: it is named only once
        // whole. Where the file system has no such files, a new file under
        // the temporary name.
        let anonymous = anonymous_file_beside(path);
        let file = match &anonymous {
            Some(file) => file.try_clone()?,
            // A new file, or none: a file or a symlink planted at the
            // temporary name is neither followed nor overwritten (O_EXCL).
            None => std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&temporary)?,
        };
        let mut out = std::io::BufWriter::with_capacity(4 << 20, file);
        write(&mut out)?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        if let Some(file) = anonymous {
            name_file(file, &temporary)?;
        }
        std::fs::rename(&temporary, path)
    })();
    if let Err(e) = &result
        && e.kind() != std::io::ErrorKind::AlreadyExists
    {
        let _ = std::fs::remove_file(&temporary);
    }
    result.with_context(context)
}

/// A new file without a name, in the folder of `path` (Linux's
/// `O_TMPFILE`); `None` where the file system cannot make one.
#[cfg(target_os = "linux")]
pub(super) fn anonymous_file_beside(path: &Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = (path.parent())
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o666)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
        .ok()
}

#[cfg(not(target_os = "linux"))]
pub(super) fn anonymous_file_beside(_path: &Path) -> Option<std::fs::File> {
    None
}

/// Gives a file made by [`anonymous_file_beside`] the name `name`, which
/// must be free: a file or a link planted there is left as it is (EEXIST).
/// Without `/proc` to link it through, its content is copied to a new file
/// of that name.
#[cfg(target_os = "linux")]
pub(super) fn name_file(mut file: std::fs::File, name: &Path) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom};
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let from = std::ffi::CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
    let to = std::ffi::CString::new(name.as_os_str().as_bytes())?;
    // SAFETY: two valid NUL-terminated paths; linkat reads them only.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.kind() == std::io::ErrorKind::AlreadyExists {
        return Err(e);
    }
    let mut copy = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(name)?;
    file.seek(SeekFrom::Start(0))?;
    std::io::copy(&mut file, &mut copy)?;
    copy.sync_all()
}

#[cfg(not(target_os = "linux"))]
pub(super) fn name_file(_file: std::fs::File, _name: &Path) -> std::io::Result<()> {
    unreachable!("no file is made without a name here")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_symlink_planted_at_the_temporary_name_is_not_followed() {
        let dir = std::env::temp_dir().join(format!("vramtrace-planted-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim.txt");
        std::fs::write(&victim, b"precious").unwrap();
        let out = dir.join("report.html");
        // The name write_file gives its temporary file in this process.
        let temporary = dir.join(format!(".report.html.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&victim, &temporary).unwrap();
        assert!(write_file(&out, b"<html>").is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(!out.exists());
        // Without the plant, the file is written whole and nothing is left.
        std::fs::remove_file(&temporary).unwrap();
        write_file(&out, b"<html>").unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"<html>");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
