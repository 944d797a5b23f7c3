//! The traces a command was given: files as named, and each folder's traces
//! and snapshots. A distributed run leaves a folder of rank traces, so a
//! folder stands for the traces in it.

use super::InputError;
use std::path::{Path, PathBuf};

/// Whether a folder's file is taken as a trace or snapshot: its name holds
/// `.vtrace`, `.pickle` or `.pkl` (`run-3.vtrace`, `rank0.pickle.xz`) and is
/// not hidden. Hidden files are left out: a write in progress (or one a kill
/// left behind) is `.NAME.PID.tmp`.
pub fn is_trace_name(name: &str) -> bool {
    !name.starts_with('.')
        && (name.contains(".vtrace") || name.contains(".pickle") || name.contains(".pkl"))
}

/// Files as given, and each folder's traces and snapshots (see
/// [`is_trace_name`]), sorted by name. A folder that cannot be listed, or
/// holds none, is an error.
pub fn expand_folders(paths: &[PathBuf]) -> Result<Vec<PathBuf>, InputError> {
    let mut traces = Vec::new();
    for path in paths {
        if !path.is_dir() {
            traces.push(path.clone());
            continue;
        }
        let mut inside = traces_in(path)?;
        if inside.is_empty() {
            return Err(InputError::EmptyFolder { path: path.clone() });
        }
        inside.sort();
        traces.extend(inside);
    }
    Ok(traces)
}

fn traces_in(folder: &Path) -> Result<Vec<PathBuf>, InputError> {
    let entries = std::fs::read_dir(folder).map_err(|source| InputError::Folder {
        path: folder.to_owned(),
        source,
    })?;
    Ok(entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.file_name()
                    .is_some_and(|n| is_trace_name(&n.to_string_lossy()))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_and_snapshots_are_taken_hidden_files_not() {
        assert!(is_trace_name("run-3.vtrace"));
        assert!(is_trace_name("rank0.pickle.xz"));
        assert!(is_trace_name("snap.pkl"));
        assert!(!is_trace_name(".run-3.vtrace.123.tmp"));
        assert!(!is_trace_name("notes.txt"));
    }

    #[test]
    fn a_folder_stands_for_its_traces_sorted() {
        let dir = std::env::temp_dir().join(format!("vramtrace-folders-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["b.vtrace", "a.pickle", "c.txt", ".d.vtrace"] {
            std::fs::write(dir.join(name), b"").unwrap();
        }
        let file = PathBuf::from("given.vtrace");
        let found = expand_folders(&[file.clone(), dir.clone()]).unwrap();
        assert_eq!(
            found,
            vec![file, dir.join("a.pickle"), dir.join("b.vtrace")]
        );
        let empty = dir.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let e = expand_folders(&[empty]).unwrap_err();
        assert!(e.to_string().contains("holds no trace"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
