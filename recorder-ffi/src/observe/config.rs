//! The start request: [`vramtrace_observe_start`]'s text read into a
//! [`Config`], and the trace folder checked before anything is recorded.

use super::*;

/// What a recording is set up with ([`vramtrace_observe_start`]).
pub(super) struct Config {
    pub(super) pattern: String,
    pub(super) options: RecorderOptions,
    pub(super) allocator: AllocatorConfig,
    pub(super) devices: BTreeMap<u32, DeviceInfo>,
}

/// What [`vramtrace_observe_start`]'s text says.
pub(super) struct StartRequest {
    pub(super) config: Config,
    pub(super) pending_state: bool,
}

/// Parses the start configuration: `key=value` lines (see
/// [`vramtrace_observe_start`]).
pub(super) fn parse_start(text: &str) -> Result<StartRequest, String> {
    let mut pattern = "vramtrace-%p.vtrace".to_string();
    let mut stacks = None;
    let mut keep_last = None;
    let mut pending_state = false;
    let mut settings = BTreeMap::new();
    let mut devices = BTreeMap::new();
    let mut metadata = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| format!("invalid configuration line {line:?}"))?;
        match key {
            "out" => pattern = value.to_string(),
            "stacks" => stacks = Some(value.to_string()),
            "keep_last" => keep_last = Some(value.parse::<KeepLast>()?),
            "state" => {
                pending_state = match value {
                    "pending" => true,
                    "empty" => false,
                    _ => return Err(format!("invalid state {value:?}")),
                }
            }
            "device" => {
                let mut parts = value.splitn(3, '\t');
                let index = parts.next().and_then(|v| v.parse().ok());
                let total = parts.next().and_then(|v| v.parse().ok());
                let name = parts.next().unwrap_or("").to_string();
                let (Some(index), Some(total_memory)) = (index, total) else {
                    return Err(format!("invalid device {value:?}"));
                };
                devices.insert(
                    index,
                    DeviceInfo {
                        index,
                        name,
                        total_memory,
                    },
                );
            }
            _ => {
                if let Some(k) = key.strip_prefix("setting.") {
                    settings.insert(k.to_string(), value.to_string());
                } else if let Some(k) = key.strip_prefix("meta.") {
                    metadata.insert(k.to_string(), value.to_string());
                } else {
                    return Err(format!("unknown configuration key {key:?}"));
                }
            }
        }
    }
    let allocator = match AllocatorConfig::from_settings(&settings) {
        Ok((config, _ignored)) => config,
        Err(e) => {
            report(&format!(
                "PyTorch's allocator settings could not be read ({e}): block sizes assume the defaults"
            ));
            AllocatorConfig::default()
        }
    };
    let (native, python) = stack_setting(stacks.as_deref())?;
    let frame_source = if python {
        match nogil::source() {
            Ok(s) => {
                // Here, called from Python and not under the allocator's
                // lock, the GIL may be taken.
                s.watch_codes();
                Some(s as Arc<dyn FrameSource>)
            }
            Err(e) => {
                report(&format!("no Python stacks: {e}"));
                None
            }
        }
    } else {
        None
    };
    metadata.insert("recorded_by".into(), "libvramtrace_recorder".into());
    metadata.insert("mode".into(), "observe".into());
    let options = RecorderOptions {
        stacks: native,
        frame_source,
        metadata,
        keep_last,
        ..RecorderOptions::default()
    };
    Ok(StartRequest {
        config: Config {
            pattern,
            options,
            allocator,
            devices,
        },
        pending_state,
    })
}

/// Refuses a trace file pattern whose folder does not exist or cannot be
/// written: the traces are created at each device's first event, too late
/// to tell the program that started the recording.
pub(super) fn writable_folder(pattern: &str) -> Result<(), String> {
    let folder = std::path::Path::new(pattern)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    if folder.to_string_lossy().contains('%') {
        // A folder per rank or device: made by whoever names it so.
        return Ok(());
    }
    if !folder.is_dir() {
        return Err(format!(
            "cannot write traces to {}: no such folder",
            folder.display()
        ));
    }
    let c = std::ffi::CString::new(folder.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("cannot write traces to {}", folder.display()))?;
    // SAFETY: `c` is a NUL-terminated path; access() only reads it.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
        return Err(format!(
            "cannot write traces to {}: {}",
            folder.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}
