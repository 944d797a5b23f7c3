//! No output may replace an input (issue #46, item 1): every output flag of
//! every command, pointed at one of the command's own inputs, is refused
//! before any work, and the input is left as it was. The flags come from
//! each command's `--help`, so that a new output flag without a case here
//! fails this test.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use vramtrace_e2e::{fixture, scratch, vramtrace};

/// The commands' names, from `vramtrace --help`.
fn commands() -> Vec<String> {
    let help = vramtrace(["--help"]).success().stdout;
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // A command's line, not a description's continuation.
        .filter(|l| !l[2..].starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// A command's flags that name a file it writes: `--output`, `--text-to`,
/// and any whose value is a FILE.
fn output_flags(command: &str) -> Vec<String> {
    let help = vramtrace([command, "--help"]).success().stdout;
    help.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| {
            let long = l
                .split([' ', ','])
                .find(|w| w.starts_with("--"))?
                .to_string();
            let value = l.split_once('<').map(|(_, v)| v).unwrap_or("");
            let writes = long == "--output" || long == "--text-to" || value.contains("FILE");
            writes.then_some(long)
        })
        .collect()
}

/// One invocation whose `flag` names `victim`, one of its inputs.
struct Case {
    command: &'static str,
    flag: &'static str,
    args: Vec<OsString>,
    victim: PathBuf,
}

fn case(command: &'static str, flag: &'static str, args: &[&Path], victim: &Path) -> Case {
    let mut all: Vec<OsString> = vec![command.into()];
    all.extend(args.iter().map(|a| a.as_os_str().to_owned()));
    all.push(flag.into());
    all.push(victim.as_os_str().to_owned());
    Case {
        command,
        flag,
        args: all,
        victim: victim.to_path_buf(),
    }
}

#[test]
fn no_output_flag_of_any_command_replaces_its_input() {
    let dir = scratch("outputs-every-flag");
    let trace = dir.join("run.vtrace");
    let other = dir.join("other.vtrace");
    std::fs::copy(fixture("leak.vtrace"), &trace).unwrap();
    std::fs::copy(fixture("clean.vtrace"), &other).unwrap();
    let profiler = dir.join("torch.json");
    std::fs::write(&profiler, br#"{"traceEvents": []}"#).unwrap();
    let ring = dir.join("run.vtrace.ring");
    std::fs::create_dir_all(&ring).unwrap();
    let part = ring.join("part-000000.vtrace");
    std::fs::copy(fixture("leak.vtrace"), &part).unwrap();
    // Another name for the trace: the check is by file, not by spelling.
    let link = dir.join("link.vtrace");
    std::os::unix::fs::symlink(&trace, &link).unwrap();
    let (t, o) = (trace.as_path(), other.as_path());
    let json: &Path = "--json".as_ref();
    let cases = vec![
        case("info", "--text-to", &[t, json], t),
        case("import", "--output", &[t], t),
        case("summary", "--text-to", &[o, t, json], t),
        case("summary", "--text-to", &[t, json], &link),
        case("fragmentation", "--output", &[t], t),
        case("fragmentation", "--text-to", &[t, json], t),
        case("leaks", "--output", &[t], t),
        case("leaks", "--text-to", &[t, json], t),
        case("timeline", "--output", &[t], t),
        case("flamegraph", "--output", &[t], t),
        case(
            "export",
            "--output",
            &[t, "--format".as_ref(), "pprof".as_ref()],
            t,
        ),
        case(
            "export",
            "--output",
            &[
                t,
                "--format".as_ref(),
                "perfetto".as_ref(),
                "--beside".as_ref(),
                &profiler,
            ],
            &profiler,
        ),
        case("report", "--output", &[t], t),
        case("report", "--output", &[o, "--baseline".as_ref(), t], t),
        case("report", "--output", &[o, "--ranks".as_ref(), t], t),
        case("compare", "--output", &[o, t], t),
        case("compare", "--text-to", &[o, t, json], o),
        case("simulate", "--output", &[t], t),
        case("simulate", "--text-to", &[t, json], t),
        case(
            "plan",
            "--text-to",
            &[o, t, json, "--batch".as_ref(), "4,8".as_ref()],
            t,
        ),
        case("join", "--output", &[&ring], &part),
        case("join", "--output", &[&part], &part),
    ];
    let originals: Vec<(PathBuf, Vec<u8>)> = [&trace, &other, &profiler, &part]
        .into_iter()
        .map(|p| (p.clone(), std::fs::read(p).unwrap()))
        .collect();
    let mut covered = BTreeSet::new();
    for c in &cases {
        let run = vramtrace(&c.args).fails_with(2);
        assert!(
            run.stderr.contains("would destroy the input"),
            "{:?}: {}",
            c.args,
            run.stderr
        );
        for (path, bytes) in &originals {
            assert_eq!(&std::fs::read(path).unwrap(), bytes, "{:?}", c.args);
        }
        assert!(c.victim.exists());
        covered.insert((c.command.to_string(), c.flag.to_string()));
    }
    // Every output flag of every command that reads a file has a case.
    let mut flags = BTreeSet::new();
    // `run` hands every argument, --help included, to Python.
    for command in commands().into_iter().filter(|c| c != "run") {
        for flag in output_flags(&command) {
            flags.insert((command.clone(), flag));
        }
    }
    // `synth` reads no file its output could replace.
    flags.remove(&("synth".to_string(), "--output".to_string()));
    let missing: Vec<_> = flags.difference(&covered).collect();
    assert!(
        missing.is_empty(),
        "output flags without a case: {missing:?}"
    );
    // The help was read: 17 output flags when this test was written.
    assert!(flags.len() >= 17, "{flags:?}");
}

#[test]
fn commands_without_tables_take_no_text_to() {
    // `timeline`, `flamegraph` and `export` print no tables: a `--text-to`
    // they would leave unwritten is a usage error, not a silent no-op.
    let dir = scratch("outputs-no-text-to");
    let trace = fixture("leak.vtrace");
    let tables = dir.join("tables.txt");
    let t = trace.as_os_str();
    let out = dir.join("out.bin");
    let cases: [Vec<&std::ffi::OsStr>; 3] = [
        vec!["timeline".as_ref(), t, "--json".as_ref()],
        vec!["flamegraph".as_ref(), t, "--json".as_ref()],
        vec![
            "export".as_ref(),
            t,
            "--format".as_ref(),
            "pprof".as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
            "--json".as_ref(),
        ],
    ];
    for mut args in cases {
        args.extend(["--text-to".as_ref(), tables.as_os_str()]);
        let run = vramtrace(&args).fails_with(2);
        assert!(run.stderr.contains("--text-to"), "{args:?}: {}", run.stderr);
        assert!(!tables.exists());
    }
}

#[test]
fn two_outputs_naming_one_file_are_refused() {
    let dir = scratch("outputs-twice");
    let trace = fixture("leak.vtrace");
    let out = dir.join("both.txt");
    for command in ["leaks", "fragmentation", "simulate"] {
        let run = vramtrace([
            command.as_ref(),
            trace.as_os_str(),
            "--json".as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
            "--text-to".as_ref(),
            dir.join(".").join("both.txt").as_os_str(),
        ])
        .fails_with(2);
        assert!(
            run.stderr.contains("two outputs name one file"),
            "{}",
            run.stderr
        );
        assert!(!out.exists());
    }
}
