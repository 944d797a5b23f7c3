//! `vramtrace merge`: one rank table from the JSON of per-rank summaries
//! (or of rank tables), made anywhere.

use super::emit;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace::command::ranks::merge;
use vramtrace::print;

/// The largest JSON file read: summaries are kilobytes, a table of a
/// hundred thousand ranks tens of megabytes.
const MAX_JSON_BYTES: u64 = 1 << 30;

/// Arguments of `vramtrace merge`.
#[derive(clap::Args)]
pub struct Args {
    /// JSON files written by `vramtrace summary --json` (of one trace, or
    /// the rank table of several).
    #[arg(required = true, value_name = "JSON")]
    files: Vec<PathBuf>,
    /// Print the merged table as JSON (which merges again).
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut documents = Vec::with_capacity(args.files.len());
    for path in &args.files {
        let file = std::fs::File::open(path)
            .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
        let mut text = String::new();
        file.take(MAX_JSON_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        if text.len() as u64 > MAX_JSON_BYTES {
            anyhow::bail!("{}: larger than 1 GiB: not a summary", path.display());
        }
        documents.push((path.clone(), text));
    }
    let table = merge(&documents)?;
    if args.json {
        emit(&print::json(&table))?;
    } else {
        emit(&print::text::ranks(&table))?;
    }
    Ok(ExitCode::SUCCESS)
}
