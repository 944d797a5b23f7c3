use std::process::ExitCode;

fn main() -> ExitCode {
    vramtrace::cli::main()
}
