//! The `vramtrace` command line: parses arguments, calls the library, and
//! picks a printer. Everything it computes comes from the `vramtrace`
//! library; see `cli/` for the commands.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
