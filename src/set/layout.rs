//! The set folder's layout: every path a build, the review loop, `eval` and `validate` read or
//! write inside it, relative to the folder, and the header rows of its TSV files. Nothing else
//! names them.

/// `corpus.jsonl`: every chunk, in BEIR's corpus format.
pub const CORPUS: &str = "corpus.jsonl";
/// `queries.jsonl`: the queries of the set.
pub const QUERIES: &str = "queries.jsonl";
/// The BEIR qrels file.
pub const QRELS_TSV: &str = "qrels/test.tsv";
/// The header of [`QRELS_TSV`].
pub const QRELS_HEADER: &str = "query-id\tcorpus-id\tscore";
/// The TREC qrels file.
pub const QRELS_TREC: &str = "qrels.trec";
/// Every judgment with its provenance (grade 0 included).
pub const PROVENANCE_TSV: &str = "qrels/provenance.tsv";
/// The header of [`PROVENANCE_TSV`].
pub const PROVENANCE_HEADER: &str = "query-id\tcorpus-id\tscore\tprovenance";
/// The judging pools of a set built with `--pool-run`.
pub const POOL_TSV: &str = "qrels/pool.tsv";
/// Every pair `qrelgen pool` pooled from the runs: which runs at which rank, its grade and who
/// gave it.
pub const POOLED_TSV: &str = "qrels/pooled.tsv";
/// The ids of the `no_answer` queries, one per line.
pub const NO_ANSWER: &str = "no_answer.txt";
/// The near-identical chunk groups.
pub const CHUNK_GROUPS: &str = "chunk_groups.jsonl";
/// Every candidate with its verdict.
pub const CANDIDATES: &str = "candidates.jsonl";
/// Requests that yielded no usable query, and grades the judge could not give.
pub const REJECTS: &str = "rejects.jsonl";
/// The review queue.
pub const QUEUE: &str = "review_queue.jsonl";
/// The build's report.
pub const REPORT_MD: &str = "report.md";
/// The build's report as a page.
pub const REPORT_HTML: &str = "report.html";
/// Published last: its presence says the files beside it belong together.
pub const MANIFEST: &str = "manifest.json";

/// Every file a build publishes.
pub const BUILD_FILES: [&str; 13] = [
    CANDIDATES,
    CHUNK_GROUPS,
    CORPUS,
    MANIFEST,
    NO_ANSWER,
    PROVENANCE_TSV,
    QRELS_TSV,
    QRELS_TREC,
    QUERIES,
    REJECTS,
    REPORT_HTML,
    REPORT_MD,
    QUEUE,
];

/// The search index's folder.
pub const INDEX_DIR: &str = "index";
/// The LLM reply cache (unless `--cache` names another file).
pub const LLM_CACHE: &str = "llm-cache.sqlite";
/// Where a build (or a review version) writes its files before publishing them together.
pub const STAGING: &str = ".staging";
/// While a publish is under way: its journal and the files it replaced. A leftover (a killed
/// publish) is rolled back by the next command that opens the folder.
pub const ROLLBACK: &str = ".rollback";
/// In [`ROLLBACK`]: the files the publish creates (they had no previous version), one per line.
/// While it exists, the publish is not complete.
pub const JOURNAL: &str = "journal";
/// In [`ROLLBACK`]: the files the publish replaced, at their paths in the output folder.
pub const REPLACED: &str = "replaced";
/// In [`ROLLBACK`], for a publish that keeps the files it replaces in a folder of the output
/// folder (a version's files, under `versions/`): that folder (first line), then the files
/// moved there, one per line, each followed by a tab and `copy` when a file was already where it
/// is kept (a rollback moves back only the file the publish moved, not one that was there
/// already). Written before anything moves.
pub const KEPT: &str = "kept";

/// The writers' lock file in a set folder; it holds the current holder as JSON
/// ([`super::Holder`]).
pub const WRITER: &str = ".qrelgen.lock";
/// The publish lock file in a set folder: exclusive while files move, shared while a reader reads.
pub const PUBLISH: &str = ".qrelgen.publish";

/// What else a build keeps in the output folder: the lock files, the index, the reply cache (and
/// the journal files SQLite puts beside it), the staging and rollback folders.
pub const BUILD_STATE: [&str; 9] = [
    WRITER,
    PUBLISH,
    INDEX_DIR,
    LLM_CACHE,
    "llm-cache.sqlite-journal",
    "llm-cache.sqlite-wal",
    "llm-cache.sqlite-shm",
    STAGING,
    ROLLBACK,
];

/// The folder of the review ledger and the applied decisions files.
pub const REVIEW_DIR: &str = "review";
/// Every review judgment applied so far, one per line.
pub const LEDGER: &str = "review/decisions.jsonl";
/// Copies of the applied decisions files, named by their hash.
pub const APPLIED_DIR: &str = "review/applied";
/// Earlier versions, `versions/v1/` (what the build wrote) and on.
pub const VERSIONS_DIR: &str = "versions";
/// The files a version consists of (kept for every earlier version), in the order they are
/// published (`manifest.json` last). `no_answer.txt` and `qrels/pooled.tsv` are kept when the
/// set has them.
pub const VERSION_FILES: [&str; 7] =
    [QUERIES, QRELS_TSV, QRELS_TREC, PROVENANCE_TSV, NO_ANSWER, POOLED_TSV, MANIFEST];
/// What a forced rebuild also keeps of the version it replaces: the build's other files (the
/// versions derived from that build by review share them).
pub const BUILD_ONLY_FILES: [&str; 6] = [CORPUS, QUEUE, CHUNK_GROUPS, CANDIDATES, REJECTS, REPORT_MD];

/// Where `eval` writes by default, inside the set folder.
pub const EVAL_DIR: &str = "eval";
/// In `eval`'s output folder: everything `eval` found, machine-readable.
pub const EVAL_JSON: &str = "eval.json";
/// In `eval`'s output folder: every metric of every run on every query.
pub const PER_QUERY_TSV: &str = "per_query.tsv";
/// In `eval`'s output folder: the page a person reads.
pub const EVAL_HTML: &str = "eval.html";
