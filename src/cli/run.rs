//! `qrelgen run`: a BM25 baseline run in TREC format, over a set's own index (`--set`) or over a
//! collection the user brought (`--corpus` and `--queries`, e.g. a BEIR dataset).

use super::exit;
use super::json::JsonFlag;
use super::settings::SegmenterArg;
use anyhow::Context as _;
use clap::Args;
use qrelgen::chunk::ChunkConfig;
use qrelgen::eval::baseline;
use qrelgen::eval::corpus_run::{self, CorpusRunConfig};
use qrelgen::index::Segmenter;
use qrelgen::progress::Progress;
use qrelgen::set::{Overwrite, RUNS_DIR, ReadGuard, ensure_outside_set, set_around};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  qrelgen run --set out --to bm25.run
  qrelgen run --corpus scifact/corpus.jsonl --queries scifact/queries.jsonl --to bm25.run
  qrelgen eval --qrels scifact/qrels/test.tsv --run bm25.run")]
pub struct RunArgs {
    /// The set folder (the --out of qrelgen build): its queries are searched in its index
    /// (index/, rebuilt from corpus.jsonl if missing or stale); the run names chunks
    /// [default: none: give --corpus and --queries instead].
    #[arg(long, value_name = "DIR", conflicts_with = "corpus", required_unless_present = "corpus")]
    set: Option<PathBuf>,
    /// A collection of your own instead of a set: a BEIR corpus.jsonl (`_id`, `title`, `text`),
    /// any JSONL or folder `qrelgen build --corpus` reads. Documents are chunked as the build
    /// chunks them and a document scores as its best chunk (MaxP): the run names document ids,
    /// as the collection's qrels do [default: none: give --set instead].
    #[arg(long, value_name = "PATH", requires = "queries")]
    corpus: Option<PathBuf>,
    /// With --corpus: the queries, a BEIR queries.jsonl (`_id`, `text`) [default: none: required
    /// with --corpus].
    #[arg(long, value_name = "FILE", requires = "corpus")]
    queries: Option<PathBuf>,
    /// With --corpus: keep the index in this folder (reused by the next run on the same corpus
    /// and settings; never inside a set) [default: a temporary folder, removed afterwards].
    #[arg(long, value_name = "DIR", requires = "corpus")]
    index: Option<PathBuf>,
    /// With --corpus: largest chunk in characters, for English and Chinese documents alike
    /// [default: 1000; 400 for Chinese documents, as the build].
    #[arg(long, value_name = "N", requires = "corpus")]
    chunk_size: Option<usize>,
    /// With --corpus: overlap between neighbouring chunks [default: 100; 40 for Chinese
    /// documents].
    #[arg(long, value_name = "N", requires = "corpus")]
    chunk_overlap: Option<usize>,
    /// With --corpus: how Chinese text is split into BM25 terms (with --set, the set's own).
    #[arg(long, value_enum, default_value = "jieba", requires = "corpus")]
    cjk_segmenter: SegmenterArg,
    /// Hits per query: chunks with --set, documents with --corpus.
    #[arg(long, default_value_t = 100, value_name = "N")]
    k: usize,
    /// The run file to write (TREC: `qid Q0 docid rank score qrelgen-bm25`): outside any set
    /// folder, or in a set's runs/ folder; an existing file must be a run qrelgen wrote.
    #[arg(long, value_name = "FILE")]
    to: PathBuf,
    /// Replace --to even if it is not a run qrelgen wrote (never a file of a set).
    #[arg(long)]
    force: bool,
    /// No progress output.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    json: JsonFlag,
}

/// `run --json`: the run written.
#[derive(Debug, Serialize)]
struct RunJson<'a> {
    /// The set whose queries were searched (`--set`); absent for `--corpus`.
    #[serde(skip_serializing_if = "Option::is_none")]
    set: Option<&'a Path>,
    /// The corpus searched (`--corpus`); absent for `--set`.
    #[serde(skip_serializing_if = "Option::is_none")]
    corpus: Option<&'a Path>,
    /// The run file written.
    to: &'a Path,
    /// Hits per query at most.
    k: usize,
    /// Queries searched (every query of the set, one result list each).
    queries: usize,
    /// Hits written, over all queries.
    hits: usize,
}

/// Writes the baseline run.
pub fn run(args: &RunArgs, stdout: &mut dyn Write) -> anyhow::Result<u8> {
    if args.k == 0 {
        anyhow::bail!("invalid --k: at least 1 hit per query");
    }
    let overwrite = if args.force { Overwrite::Force } else { Overwrite::Ours };
    ensure_outside_set(&args.to, "--to", &[RUNS_DIR], overwrite, baseline::is_our_run)?;
    let progress = Progress::stderr(args.quiet);
    match (&args.set, &args.corpus, &args.queries) {
        (Some(set), _, _) => set_run(args, set, progress, stdout),
        (None, Some(corpus), Some(queries)) => collection_run(args, corpus, queries, progress, stdout),
        _ => anyhow::bail!("give --set DIR, or --corpus and --queries"),
    }
}

/// The set's queries in the set's index: chunks.
fn set_run(args: &RunArgs, set: &Path, progress: Progress, stdout: &mut dyn Write) -> anyhow::Result<u8> {
    let _read =
        ReadGuard::open(set, "run").with_context(|| format!("reading the set in {}", set.display()))?;
    let run = baseline::bm25_run(set, args.k, &progress)
        .with_context(|| format!("searching the queries of {}", set.display()))?;
    qrelgen::output::write_atomic(&args.to, |w| baseline::write_trec(w, &run))?;
    let hits: usize = run.results.iter().map(|r| r.hits.len()).sum();
    if args.json.json {
        let json = RunJson {
            set: Some(set),
            corpus: None,
            to: &args.to,
            k: args.k,
            queries: run.results.len(),
            hits,
        };
        JsonFlag::write(stdout, &json)?;
    } else {
        writeln!(
            stdout,
            "{} queries, {hits} hits (top {}) in {}",
            run.results.len(),
            args.k,
            args.to.display()
        )?;
    }
    if !args.quiet {
        eprintln!("next: qrelgen eval --set {} --run {}", set.display(), args.to.display());
    }
    Ok(exit::OK)
}

/// A collection's queries in an index of its corpus: documents.
fn collection_run(
    args: &RunArgs,
    corpus: &Path,
    queries: &Path,
    progress: Progress,
    stdout: &mut dyn Write,
) -> anyhow::Result<u8> {
    let config = CorpusRunConfig {
        corpus: corpus.to_owned(),
        queries: queries.to_owned(),
        k: args.k,
        chunking: ChunkConfig::with_sizes(args.chunk_size, args.chunk_overlap),
        segmenter: match args.cjk_segmenter {
            SegmenterArg::Jieba => Segmenter::Jieba,
            SegmenterArg::Bigram => Segmenter::Bigram,
        },
    };
    // The temporary folder lives until the run is written.
    let mut temporary = None;
    let index_dir = if let Some(dir) = &args.index {
        check_index_dir(dir)?;
        dir.clone()
    } else {
        let made = tempfile::Builder::new()
            .prefix("qrelgen-run-")
            .tempdir()
            .context("making a temporary folder for the index (or give --index DIR)")?;
        temporary.insert(made).path().to_owned()
    };
    let run = corpus_run::bm25_documents(&config, &index_dir, &progress)
        .with_context(|| format!("searching {} in {}", queries.display(), corpus.display()))?;
    qrelgen::output::write_atomic(&args.to, |w| baseline::write_ranked(w, &run.results))?;
    let hits: usize = run.results.iter().map(|r| r.hits.len()).sum();
    if args.json.json {
        let json = RunJson {
            set: None,
            corpus: Some(corpus),
            to: &args.to,
            k: args.k,
            queries: run.results.len(),
            hits,
        };
        JsonFlag::write(stdout, &json)?;
        return Ok(exit::OK);
    }
    writeln!(
        stdout,
        "{} queries, {hits} hits (top {} documents, each scored by its best of {} chunks of {} documents) in {}",
        run.results.len(),
        args.k,
        run.chunks,
        run.documents,
        args.to.display()
    )?;
    if !args.quiet {
        eprintln!(
            "next: qrelgen eval --qrels QRELS --run {} (QRELS: the collection's, e.g. qrels/test.tsv)",
            args.to.display()
        );
    }
    Ok(exit::OK)
}

/// `--index DIR`: outside every set, and new, empty or an index this command kept.
fn check_index_dir(dir: &Path) -> anyhow::Result<()> {
    if let Some(set) = set_around(dir) {
        anyhow::bail!(
            "--index {} lies inside the test set in {}: a command never writes into a set from outside; \
             give a folder outside it",
            dir.display(),
            set.display()
        );
    }
    if dir.exists() {
        let ours = dir.join(corpus_run::CHUNKS_FILE).is_file();
        let empty = fs_err::read_dir(dir)?.next().is_none();
        if !ours && !empty {
            anyhow::bail!(
                "--index {} holds files qrelgen run did not write; give a new or empty folder",
                dir.display()
            );
        }
    }
    Ok(())
}
