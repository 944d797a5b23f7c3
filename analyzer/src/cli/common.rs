//! What the replaying commands share: their common flags, opening inputs,
//! and printing one result per input.

use super::progress::Bars;
use super::{emit, warn, warn_about, write_file};
use std::path::{Path, PathBuf};
use vramtrace::analysis::window::{BoundSpec, WindowSpec};
use vramtrace::command::InputWarning;
use vramtrace::command::ranks::IN_FLIGHT;
use vramtrace::command::ranks::set::{self, SetOptions};
use vramtrace::command::{ByDevice, ReplayOptions};
use vramtrace::input::folders::expand_folders;
use vramtrace::input::{Input, InputOptions};
use vramtrace::sites::{Attribution, FoldRules};

/// Flags shared by the replaying commands.
#[derive(clap::Args, Clone, Debug)]
pub struct CommonArgs {
    /// The traces (or PyTorch snapshots) to analyze, each on its own; a
    /// chart (-o) draws one.
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    /// Print JSON instead of text (one object, or an array with several
    /// traces).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub replay: ReplayArgs,
    #[command(flatten)]
    pub input: InputArgs,
}

/// The text beside the JSON: a notebook shows a result as its tables, and
/// making them from the same run spares it a second.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct TextArgs {
    /// With --json: also write the tables, as printed without --json, to
    /// FILE (from the same run).
    #[arg(long, value_name = "FILE", requires = "json")]
    pub text_to: Option<PathBuf>,
}

impl TextArgs {
    /// The file the tables go to, if any.
    pub fn output(&self) -> Option<&Path> {
        self.text_to.as_deref()
    }

    /// Prints a result: as `text` when not `json`; else as `json`, the
    /// text going to the file asked for, if any.
    pub fn print(
        &self,
        json: bool,
        as_json: impl FnOnce() -> String,
        text: impl FnOnce() -> String,
    ) -> anyhow::Result<()> {
        if !json {
            return emit(&text());
        }
        emit(&as_json())?;
        match &self.text_to {
            Some(path) => write_file(path, text().as_bytes()),
            None => Ok(()),
        }
    }
}

/// How every command opens its inputs.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct InputArgs {
    /// How many times its size a compressed input may expand to (past 64
    /// MiB), or `none`: more is refused as a decompression bomb.
    #[arg(long, value_name = "RATIO|none", default_value = "1000", value_parser = parse_expansion)]
    pub max_expansion: Expansion,
}

/// An expansion limit, or none.
#[derive(Clone, Copy, Debug)]
pub struct Expansion(Option<u64>);

impl InputArgs {
    /// The library's options.
    pub fn options(&self) -> InputOptions {
        InputOptions {
            max_expansion: self.max_expansion.0,
        }
    }
}

fn parse_expansion(s: &str) -> Result<Expansion, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(Expansion(None));
    }
    match s.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(Expansion(Some(n))),
        _ => Err(format!("'{s}' is not a ratio of 1 or more, nor 'none'")),
    }
}

impl CommonArgs {
    /// A chart (`-o`) draws one trace: asking for one with several is a
    /// usage error. (An output over an input is refused for every command
    /// at once: [`check_files`].)
    pub fn check_one_chart(&self, output: Option<&Path>) -> anyhow::Result<()> {
        if output.is_some() && self.traces.len() > 1 {
            anyhow::bail!("-o takes one trace; draw several traces one at a time");
        }
        Ok(())
    }

    /// What the command reads (its traces) and writes (`outputs`).
    pub fn files<'a>(&'a self, outputs: impl IntoIterator<Item = Option<&'a Path>>) -> Files<'a> {
        Files {
            inputs: self.traces.iter().map(PathBuf::as_path).collect(),
            outputs: outputs.into_iter().flatten().collect(),
        }
    }
}

/// Every file a command reads and every file it writes, as its arguments
/// name them: each command lists its own (`Args::files`), and
/// [`check_files`] checks them all before any work.
#[derive(Debug, Default)]
pub struct Files<'a> {
    /// Inputs: files, or folders standing for the traces in them.
    pub inputs: Vec<&'a Path>,
    /// Outputs: charts, pages, traces, tables.
    pub outputs: Vec<&'a Path>,
}

impl<'a> Files<'a> {
    /// Files read from these inputs and written to these outputs (`None`:
    /// an optional one not given).
    pub fn new(
        inputs: impl IntoIterator<Item = &'a Path>,
        outputs: impl IntoIterator<Item = Option<&'a Path>>,
    ) -> Files<'a> {
        Files {
            inputs: inputs.into_iter().collect(),
            outputs: outputs.into_iter().flatten().collect(),
        }
    }
}

/// The one check of every output path, made for every command before it
/// opens anything: no output may be an input (under any name: a link, a
/// trace of an input folder), and no two outputs may be one file (the
/// second would replace the first).
pub fn check_files(files: &Files<'_>) -> anyhow::Result<()> {
    for (i, a) in files.outputs.iter().enumerate() {
        if let Some(b) = files.outputs[..i].iter().find(|b| same_file(a, b)) {
            anyhow::bail!(
                "two outputs name one file ({} and {}): the second would replace the first; choose another output",
                b.display(),
                a.display()
            );
        }
    }
    check_outputs(files.outputs.iter().copied(), files.inputs.iter().copied())
}

/// How the traces are replayed: the window and site folding.
#[derive(clap::Args, Clone, Debug)]
pub struct ReplayArgs {
    /// Start of the analysis: a time since the trace start (1.5s, 300ms) or
    /// a phase name (its first begin).
    #[arg(long, value_name = "TIME|PHASE")]
    pub from: Option<String>,
    /// End of the analysis: a time since the trace start or a phase name
    /// (its last end).
    #[arg(long, value_name = "TIME|PHASE")]
    pub to: Option<String>,
    /// Show sites as whole stacks instead of folding them to their most
    /// telling frame.
    #[arg(long)]
    pub full_stacks: bool,
    /// Also skip frames matching this regular expression when folding
    /// stacks to sites (matched against `function (file:line)`); repeatable.
    #[arg(long, value_name = "REGEX")]
    pub skip_frames: Vec<String>,
    /// Name each site by its innermost frame past the framework's
    /// machinery, library code included. By default a site in library code
    /// (site-packages, the standard library, C++) is named by the user's
    /// own innermost line first: `train_step (train.py:90) via forward
    /// (transformers/...:608)`.
    #[arg(long)]
    pub innermost: bool,
    /// Show the phases of this thread (as the trace numbers threads; 0 is
    /// the main thread). Each thread's phases nest among themselves.
    #[arg(long, value_name = "THREAD", default_value_t = vramtrace::replay::MAIN_THREAD)]
    pub phase_thread: u32,
    /// Analyze only this device (its index in the trace). Without it, each
    /// device is analyzed apart, in turn; a chart or a report shows the one
    /// with the highest allocated peak.
    #[arg(long, value_name = "N")]
    pub device: Option<u32>,
}

impl ReplayArgs {
    /// The library's options; a bad window or pattern is a usage error.
    /// Starts compiling the built-in frame patterns too, on a thread of
    /// their own: the command reads its inputs meanwhile, and folds stacks
    /// only once it replays them.
    pub fn options(&self) -> anyhow::Result<ReplayOptions> {
        vramtrace::sites::compile_in_background();
        // Each bound alone first, so that a bad one is named by its flag.
        for (flag, bound) in [("--from", &self.from), ("--to", &self.to)] {
            if let Some(b) = bound {
                BoundSpec::parse(b).map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
            }
        }
        Ok(ReplayOptions {
            window: WindowSpec::parse(self.from.as_deref(), self.to.as_deref())?,
            fold: FoldRules::with_extra(&self.skip_frames)?.attributing(if self.innermost {
                Attribution::Innermost
            } else {
                Attribution::User
            }),
            full_stacks: self.full_stacks,
            phase_thread: self.phase_thread,
            device: self.device,
        })
    }
}

/// Opens an input once for the command, with a progress bar while a snapshot
/// is parsed, and warns about what its conversion found.
pub fn open(path: &Path, args: &InputArgs, progress: &Bars) -> anyhow::Result<Input> {
    let input = Input::open_with(path, args.options(), progress)?;
    // Told here, as the input opens: the results' warnings leave them out
    // (`warn_inputs`).
    if let Some(report) = input.import_report() {
        for warning in &report.warnings {
            warn(format_args!("{}: {warning}", path.display()));
        }
    }
    Ok(input)
}

/// Analyzes every trace in turn: each result is printed as text as soon as
/// it is ready (a blank line between traces), or, with `json`, all of them
/// at the end as one object or an array.
pub fn for_each_trace<T: serde::Serialize>(
    common: &CommonArgs,
    tables: &TextArgs,
    traces: &[PathBuf],
    mut analyze: impl FnMut(&Input, &Bars) -> anyhow::Result<T>,
    text: impl Fn(&T) -> String,
) -> anyhow::Result<()> {
    let json = common.json;
    let progress = Bars::new();
    let mut results = Vec::new();
    for path in traces {
        let input = open(path, &common.input, &progress)?;
        let result = analyze(&input, &progress)?;
        if !json {
            if !results.is_empty() {
                emit("\n")?;
            }
            emit(&text(&result))?;
        }
        results.push(result);
    }
    if json {
        print_json(&results)?;
        if let Some(path) = &tables.text_to {
            let texts: Vec<String> = results.iter().map(text).collect();
            write_file(path, texts.join("\n").as_bytes())?;
        }
    }
    Ok(())
}

/// Prints results as JSON: one object for one input, an array for several.
pub fn print_json<T: serde::Serialize>(results: &[T]) -> anyhow::Result<()> {
    match results {
        [one] => emit(&vramtrace::print::json(one)),
        all => emit(&vramtrace::print::json_each(all)),
    }
}

/// How several traces are read: as the ranks of one distributed run, or
/// each on its own.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct RankArgs {
    /// Read the traces (several, or a folder's) as the ranks of one
    /// distributed run, in a rank table. Without it they are one run's ranks
    /// only when their headers say so (each records its rank of the same
    /// world size, as the recorder writes under torchrun); other traces are
    /// analyzed each on its own.
    #[arg(long)]
    pub ranks: bool,
    /// With a rank set: how many traces are read at once, which bounds
    /// memory.
    #[arg(long, value_name = "N", default_value_t = IN_FLIGHT as u16, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub in_flight: u16,
}

/// The traces named on the command line (files, and each folder's traces),
/// and whether they are a rank set: asked for (`--ranks`), or several whose
/// headers say they are the ranks of one run. A folder's file that is no
/// trace is left out with a warning.
pub fn rank_inputs(
    paths: &[PathBuf],
    ranks: &RankArgs,
    input: &InputArgs,
) -> anyhow::Result<(Vec<PathBuf>, bool)> {
    let traces = rank_traces(paths, ranks, input)?;
    Ok((traces.paths, traces.rank_set))
}

/// [`rank_inputs`], with the distributed jobs found among traces that are
/// not one run's ranks.
pub fn rank_traces(
    paths: &[PathBuf],
    ranks: &RankArgs,
    input: &InputArgs,
) -> anyhow::Result<set::Traces> {
    let traces = set::resolve(paths, ranks.ranks, input.options())?;
    for e in &traces.left_out {
        warn(format_args!("{e}: left out of its folder's traces"));
    }
    Ok(traces)
}

impl RankArgs {
    /// How the library reads the set.
    pub fn set_options(&self, input: &InputArgs) -> SetOptions {
        SetOptions {
            input: input.options(),
            in_flight: self.in_flight.into(),
        }
    }
}

/// Tells what the traces of a set told besides its result, in the traces'
/// order: each once, what converting a snapshot found included (the
/// library opened them, so nothing was told at the opening).
pub fn warn_about_set(warnings: &[InputWarning]) {
    for w in warnings {
        warn_about(&w.path, std::slice::from_ref(&w.warning));
    }
}

/// The device a chart shows (see [`ByDevice::shown`]), and what its title
/// adds: with several devices, its name, and a warning naming the others.
pub fn shown<'a, T>(path: &Path, result: &'a ByDevice<T>) -> anyhow::Result<(&'a T, String)> {
    let shown = result
        .shown()
        .ok_or_else(|| anyhow::anyhow!("{}: no device to draw", path.display()))?;
    if result.devices.len() == 1 {
        return Ok((&shown.result, String::new()));
    }
    let device = shown.peaks.device;
    let others: Vec<String> = result
        .devices
        .iter()
        .map(|d| d.peaks.device)
        .filter(|&d| d != device)
        .map(|d| d.to_string())
        .collect();
    warn(format_args!(
        "{}: drew device {device}, whose allocated peak is highest; --device N draws another ({})",
        path.display(),
        others.join(", ")
    ));
    Ok((&shown.result, format!(", device {device}")))
}

/// The last component of a path, for chart titles.
pub fn file_name(path: &Path) -> String {
    vramtrace::command::file_name(path)
}

/// What a chart's x axis measures (`--x`); without it, the input's
/// default ([`vramtrace::command::default_axis`]).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum XArg {
    /// Time since the first event.
    Time,
    /// The event index, as PyTorch's viewer counts.
    Events,
    /// Time with idle gaps cut short.
    Busy,
}

impl From<XArg> for vramtrace::analysis::pauses::XAxis {
    fn from(x: XArg) -> Self {
        use vramtrace::analysis::pauses::XAxis;
        match x {
            XArg::Time => XAxis::Time,
            XArg::Events => XAxis::Events,
            XArg::Busy => XAxis::Busy,
        }
    }
}

/// The x axis asked for, else the input's default: busy time for a
/// snapshot, time for a trace.
pub fn x_axis(x: Option<XArg>, input: &Input) -> vramtrace::analysis::pauses::XAxis {
    x.map_or_else(|| vramtrace::command::default_axis(input), Into::into)
}

/// The x axis asked for, else the one a timeline chart of the input opens
/// on ([`vramtrace::command::chart_axis`]: busy time when start-up and
/// pauses would squeeze the steps on a time axis).
pub fn chart_x_axis(
    x: Option<XArg>,
    input: &Input,
    timeline: &vramtrace::analysis::timeline::Timeline,
) -> vramtrace::analysis::pauses::XAxis {
    x.map_or_else(
        || vramtrace::command::chart_axis(input, timeline),
        Into::into,
    )
}

/// Refuses an output that is one of the inputs (the same file, under any
/// name): writing it would destroy what is being read. Checked before any
/// work, so nothing is lost.
fn check_outputs<'a>(
    outputs: impl IntoIterator<Item = &'a Path>,
    inputs: impl IntoIterator<Item = &'a Path>,
) -> anyhow::Result<()> {
    // A folder's inputs are the traces in it: an output over one of them
    // destroys it as surely as one named on the command line.
    let inputs: Vec<PathBuf> = inputs
        .into_iter()
        .flat_map(|input| {
            if input.is_dir() {
                expand_folders(&[input.to_path_buf()]).unwrap_or_default()
            } else {
                vec![input.to_path_buf()]
            }
        })
        .collect();
    for output in outputs {
        for input in &inputs {
            if same_file(output, input) {
                anyhow::bail!(
                    "the output {} is the input {}: writing it would destroy the input; choose another output",
                    output.display(),
                    input.display()
                );
            }
        }
    }
    Ok(())
}

/// Whether two paths name one file: the same device and inode when both
/// exist, else the same absolute path.
fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    if let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        use std::os::unix::fs::MetadataExt;
        return (ma.dev(), ma.ino()) == (mb.dev(), mb.ino());
    }
    let absolute = |p: &Path| {
        let parent = p.parent().filter(|d| !d.as_os_str().is_empty());
        let dir = parent
            .map_or_else(std::env::current_dir, std::fs::canonicalize)
            .ok();
        dir.zip(p.file_name()).map(|(d, n)| d.join(n))
    };
    match (absolute(a), absolute(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// A chart's `-o` name: charts are SVG, so a name with another format's
/// extension (`out.png`) is refused rather than given SVG that an image
/// viewer then fails to open. A name without an extension (a device such
/// as `/dev/stdout`) is taken as it is.
pub fn check_svg_name(output: Option<&Path>) -> anyhow::Result<()> {
    let Some(path) = output else { return Ok(()) };
    match path.extension() {
        Some(ext) if !ext.eq_ignore_ascii_case("svg") => anyhow::bail!(
            "charts are SVG: {} would hold SVG under a .{} name; name it {} \
             (a browser, or rsvg-convert, turns it into a PNG)",
            path.display(),
            ext.to_string_lossy(),
            path.with_extension("svg").display()
        ),
        _ => Ok(()),
    }
}
