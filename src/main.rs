//! The `ringraft` binary: parse the command line and hand over to the library.

use clap::Parser;

/// Large DMA buffers are kept and reused instead of faulted in afresh on every read
/// (`ringraft::dma_alloc`).
#[global_allocator]
static ALLOCATOR: ringraft::dma_alloc::KeepDmaBlocks = ringraft::dma_alloc::KeepDmaBlocks;

fn main() {
    let cli = ringraft::cli::Cli::parse();
    if let Err(error) = ringraft::cli::run(cli) {
        if let Some(message) = &error.message {
            eprintln!("ringraft: {message}");
        }
        std::process::exit(error.code);
    }
}
