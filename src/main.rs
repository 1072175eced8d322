//! The `qrelgen` command line.

mod cli;

/// mimalloc gives freed memory back to the system within milliseconds; glibc's allocator kept
/// what the index writer's threads and the corpus reader had freed (about 80 MiB of the heap's
/// peak on techdocs ×8, `bench/memory.sh`). Built without transparent huge pages (`no_thp`):
/// with them, a partly used 2 MiB page is resident whole (peak RSS 220 → 198 MB on techdocs,
/// 105 → 78 MB for a refresh of pgdocs).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
