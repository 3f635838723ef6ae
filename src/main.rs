//! The `clusternet` executable: parse the command line, install the TLS provider, hand over to the library.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    clusternet::main_entry()
}
