//! The `ringraft` binary: parse the command line and hand over to the library.

use clap::Parser;

fn main() {
    let cli = ringraft::cli::Cli::parse();
    if let Err(error) = ringraft::cli::run(cli) {
        if let Some(message) = &error.message {
            eprintln!("ringraft: {message}");
        }
        std::process::exit(error.code);
    }
}
