//! Compiles the C++ half of the PyTorch hook: the one function that throws a
//! C++ exception, since Rust cannot (see src/throw.cpp).

fn main() {
    println!("cargo:rerun-if-changed=src/throw.cpp");
    cc::Build::new()
        .cpp(true)
        .file("src/throw.cpp")
        .flag_if_supported("-std=c++17")
        .compile("vramtrace_throw");
}
