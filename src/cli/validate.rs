//! `qrelgen validate`: checks a set folder or a qrels file and prints one line per problem.

use super::exit;
use super::json::JsonFlag;
use anyhow::Context as _;
use clap::Args;
use qrelgen::validate::Finding;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// A set folder: corpus.jsonl, queries.jsonl, qrels.trec, qrels/test.tsv, qrels/provenance.tsv.
    #[arg(long, value_name = "DIR", conflicts_with = "qrels", required_unless_present = "qrels")]
    set: Option<PathBuf>,
    /// A qrels file instead: TREC (`qid 0 docid grade`) or BEIR TSV (with its header).
    #[arg(long, value_name = "FILE")]
    qrels: Option<PathBuf>,
    /// With --qrels: the corpus.jsonl its corpus ids must be in.
    #[arg(long, value_name = "FILE", requires = "qrels")]
    corpus: Option<PathBuf>,
    /// With --qrels: the queries.jsonl its query ids must be in.
    #[arg(long, value_name = "FILE", requires = "qrels")]
    queries: Option<PathBuf>,
    #[command(flatten)]
    json: JsonFlag,
}

/// `validate --json`: what was checked and the problems found (exit 1 when there are any).
#[derive(Debug, Serialize)]
struct ValidateJson<'a> {
    /// The set folder or qrels file checked.
    target: &'a Path,
    /// Whether it has no problem.
    valid: bool,
    /// Problems found.
    count: usize,
    /// One per problem, as the text lines `file:line: message`.
    problems: Vec<ProblemJson<'a>>,
}

/// One problem.
#[derive(Debug, Serialize)]
struct ProblemJson<'a> {
    /// The file, as named to the user.
    file: &'a Path,
    /// 1-based line, if the problem has one.
    line: Option<usize>,
    /// What is wrong.
    message: &'a str,
}

impl<'a> From<&'a Finding> for ProblemJson<'a> {
    fn from(f: &'a Finding) -> Self {
        Self { file: &f.file, line: f.line, message: &f.message }
    }
}

/// Runs the checks; exit 1 when there are problems.
pub fn run(args: &ValidateArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    // A set is read whole, as one version (a publish cut short is put back first).
    let _read = match &args.set {
        Some(set) => Some(
            qrelgen::set::ReadGuard::open_any_format(set, "validate")
                .with_context(|| format!("validating {}", set.display()))?,
        ),
        None => None,
    };
    // clap requires one of --set and --qrels, and refuses both.
    let (target, findings) = match (&args.set, &args.qrels) {
        (Some(set), _) => (set, qrelgen::validate::check_set(set)),
        (None, qrels) => {
            let qrels = qrels.as_ref().unwrap_or_else(|| unreachable!("clap requires --set or --qrels"));
            (qrels, qrelgen::validate::check_qrels(qrels, args.corpus.as_deref(), args.queries.as_deref()))
        }
    };
    let findings = findings.with_context(|| format!("validating {}", target.display()))?;
    if args.json.json {
        let problems = findings.iter().map(ProblemJson::from).collect();
        let json = ValidateJson { target, valid: findings.is_empty(), count: findings.len(), problems };
        JsonFlag::write(out, &json)?;
    } else {
        for finding in &findings {
            writeln!(out, "{finding}")?;
        }
    }
    if findings.is_empty() {
        eprintln!("{}: no problems", target.display());
        Ok(exit::OK)
    } else {
        eprintln!("{}: {} problem(s)", target.display(), findings.len());
        Ok(exit::PROBLEMS)
    }
}
