//! What the replaying commands (`summary`, `fragmentation`, `leaks`) share:
//! their common flags, opening and windowing a trace, and running one pass.

use super::{Input, open_input, warn};
use crate::analysis::summary::{SummaryReport, free_space_at};
use crate::analysis::window::{Window, WindowSpec};
use crate::analysis::{Analysis, PassInfo, run_pass};
use crate::progress;
use crate::replay::ReplayState;
use crate::sites::{FoldRules, SiteDescription, SiteFolder};
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};

/// Flags shared by the replaying commands.
#[derive(clap::Args, Clone, Debug)]
pub struct CommonArgs {
    /// The traces to analyze (each is analyzed on its own).
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    /// Print JSON instead of tables (an array with several traces).
    #[arg(long)]
    pub json: bool,
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
}

/// A trace opened for a pass, with its window resolved.
pub struct Prepared {
    /// The trace's path.
    pub path: PathBuf,
    /// The reader, before the first event.
    pub input: Input,
    /// The resolved window.
    pub window: Window,
    /// A fresh replay state with the requested site rules.
    pub state: ReplayState,
}

impl CommonArgs {
    /// Checks the flags that do not depend on a trace: bad ones are usage errors.
    pub fn validate(&self) -> anyhow::Result<(WindowSpec, FoldRules)> {
        let spec = WindowSpec::parse(self.from.as_deref(), self.to.as_deref())
            .map_err(anyhow::Error::msg)?;
        let rules = FoldRules::with_extra(&self.skip_frames).map_err(anyhow::Error::msg)?;
        Ok((spec, rules))
    }

    /// Opens a trace and resolves the window against it.
    pub fn prepare(&self, path: &Path) -> anyhow::Result<Prepared> {
        let (spec, rules) = self.validate()?;
        let window = if spec.needs_phases() {
            let mut scan = open_input(path)?;
            match spec
                .resolve(Some(&mut scan))
                .with_context(|| format!("cannot read {}", path.display()))?
            {
                Ok(w) => w,
                Err(e) => bail!("{}: {e}", path.display()),
            }
        } else {
            spec.resolve::<Input>(None)?.map_err(anyhow::Error::msg)?
        };
        Ok(Prepared {
            path: path.to_path_buf(),
            input: open_input(path)?,
            window,
            state: ReplayState::new(SiteFolder::new(rules, self.full_stacks)),
        })
    }
}

impl Prepared {
    /// Runs one pass with these analyses, with a progress bar on a terminal,
    /// and warns about a truncated or unfinished trace.
    pub fn run(&mut self, analyses: &mut [&mut dyn Analysis]) -> anyhow::Result<PassInfo> {
        let bar = progress::replay_bar(&self.input, &self.path);
        let info = run_pass(
            &mut self.input,
            &mut self.state,
            analyses,
            &self.window,
            Some(&bar),
        )
        .with_context(|| format!("cannot read {}", self.path.display()))?;
        bar.finish_and_clear();
        if let Some(t) = &info.truncation {
            warn(format!("{}: {t}", self.path.display()));
        } else if !info.complete && !info.stopped_early {
            warn(format!(
                "{}: the trace has no footer: the recording process did not close it (killed?)",
                self.path.display()
            ));
        }
        if info.events_in_window == 0 && !self.window.is_all() {
            warn(format!(
                "{}: no event lies inside --from/--to",
                self.path.display()
            ));
        }
        Ok(info)
    }
}

/// Analyzes every trace of `common` in turn: each result is printed as text
/// as soon as it is ready (a blank line between traces), or, with `--json`,
/// all of them at the end as one object or an array.
pub fn for_each_trace<T: serde::Serialize>(
    common: &CommonArgs,
    mut analyze: impl FnMut(&Path) -> anyhow::Result<T>,
    render: impl Fn(&T) -> String,
) -> anyhow::Result<()> {
    let mut outputs = Vec::new();
    for path in &common.traces {
        let output = analyze(path)?;
        if !common.json {
            if !outputs.is_empty() {
                emit("\n")?;
            }
            emit(&render(&output))?;
        }
        outputs.push(output);
    }
    if common.json {
        print_reports(&outputs)?;
    }
    Ok(())
}

/// Prints reports as JSON: one object for one trace, an array for several.
pub fn print_reports<T: serde::Serialize>(reports: &[T]) -> anyhow::Result<()> {
    let mut text = if reports.len() == 1 {
        serde_json::to_string_pretty(&reports[0])?
    } else {
        serde_json::to_string_pretty(reports)?
    };
    text.push('\n');
    emit(&text)
}

/// Writes text to stdout. A closed pipe (`| head`) is not an error: the
/// reader has what it wanted.
pub fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// A site's cell in a table: its frames joined by ` <- ` (the telling frame
/// and a few callers), or only the telling frame with `--full-stacks`, whose
/// stacks [`full_stacks`] lists below the table.
pub fn site_cell(site: &SiteDescription, full: bool) -> String {
    if full {
        site.site.clone()
    } else {
        site.frames.join(" <- ")
    }
}

/// The whole stacks of a table's sites, for `--full-stacks`.
pub fn full_stacks<'a>(
    sites: impl IntoIterator<Item = &'a SiteDescription>,
    indent: usize,
) -> String {
    let pad = " ".repeat(indent);
    let mut text = String::new();
    for site in sites {
        text.push_str(&format!("{pad}{}:\n", site.site));
        for frame in &site.frames {
            text.push_str(&format!("{pad}    {frame}\n"));
        }
    }
    text
}

/// Fills in the free space at the peak when the summary left it out (see
/// [`crate::analysis::summary`]): a second replay, up to the peak.
pub fn add_free_space(summary: &mut SummaryReport, path: &Path) -> anyhow::Result<()> {
    if summary.peak_allocated_bytes > 0 && summary.at_peak.largest_free_block.is_none() {
        let mut input = open_input(path)?;
        let space = free_space_at(
            &mut input,
            ReplayState::default(),
            summary.peak_allocated.replayed_events,
        )?;
        summary.set_free_space_at_peak(space);
    }
    Ok(())
}
