//! The `qrelgen` command line.

mod cli;

/// mimalloc gives freed memory back to the system within milliseconds; glibc's allocator kept
/// what the index writer's threads and the corpus reader had freed (about 80 MiB of the heap's
/// peak on techdocs ×8, `bench/memory.sh`). Built without transparent huge pages (`no_thp`):
/// with them, a partly used 2 MiB page is resident whole (peak RSS 220 → 198 MB on techdocs,
/// 105 → 78 MB for a refresh of pgdocs). mimalloc 2 (`v2`): mimalloc 3 returns freed pages only
/// after a second (its `purge_delay`), so each stage's freed buffers stayed resident into the
/// next (techdocs ×8, the rounds' peaks 25–30 MiB higher; the same code with
/// `MIMALLOC_PURGE_DELAY=0` matched mimalloc 2).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
