//! `vramtrace merge`: one rank table from the JSON of per-rank summaries
//! (or of rank tables), made anywhere.

use super::emit;
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace::print;
use vramtrace::print::merge::merge_from;

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
    // One file open at a time, read as a stream.
    let table = merge_from(&args.files, |path| {
        std::fs::File::open(path).map(std::io::BufReader::new)
    })?;
    if args.json {
        emit(&print::json(&table))?;
    } else {
        emit(&print::text::ranks(&table))?;
    }
    Ok(ExitCode::SUCCESS)
}
