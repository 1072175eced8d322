//! Command-line parsing (clap) and dispatch. The library never sees flags: each command maps its
//! arguments onto the library's config structs.

mod batch;
mod build;
mod eval;
mod json;
mod pool;
mod refresh;
mod review;
mod run;
mod settings;
mod validate;

use clap::{Parser, Subcommand};
use std::io::Write as _;
use std::process::ExitCode;

/// Exit codes, as documented in docs/formats.md.
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// Finished, but the set falls short of what was asked (or is empty).
    pub const SHORTFALL: u8 = 1;
    /// `validate` found problems.
    pub const PROBLEMS: u8 = 1;
    /// Usage error or fatal problem.
    pub const FATAL: u8 = 2;
    /// The token or cost budget ran out; rerunning with a higher limit resumes.
    pub const BUDGET: u8 = 3;
}

/// Build synthetic retrieval test sets (queries, qrels, review queue) from a corpus.
#[derive(Debug, Parser)]
#[command(
    name = "qrelgen",
    version,
    about,
    long_about = None,
    after_help = "Examples:
  qrelgen build --corpus corpora/harbor-sync --out out
  qrelgen review export --set out --format label-studio
  qrelgen validate --set out

Run `qrelgen <COMMAND> --help` for a command's options and examples."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build a test set: chunk the corpus, index it, write queries, filter them by a BM25 round
    /// trip, sample a review queue, and write a BEIR dataset with TREC qrels.
    #[command(
        override_usage = "qrelgen build --corpus <PATH> --out <DIR> [OPTIONS]\n       qrelgen build --print-prompts [OPTIONS]",
        after_help = "Examples:
  # The bundled sample corpus with the offline generator (no API key needed):
  qrelgen build --corpus corpora/harbor-sync --out out/harbor-sync

  # An LLM behind an OpenAI-compatible endpoint (the key comes from OPENAI_API_KEY):
  qrelgen build --corpus docs --out out --base-url https://api.openai.com/v1 --model gpt-4o-mini

  # What would that cost? Plan the calls, send nothing:
  qrelgen build --corpus docs --out out --base-url http://127.0.0.1:8080/v1 --model m --dry-run"
    )]
    Build(Box<build::BuildArgs>),
    /// The human review loop: export the review queue to annotators, apply their decisions as a
    /// new version of the set, compare two reviewers, estimate the share of good queries.
    #[command(after_help = "Examples:
  qrelgen review export --set out --format csv --to queue.csv
  qrelgen review apply --set out --decisions queue.csv --reviewer ann
  qrelgen review status --set out")]
    Review(review::ReviewArgs),
    /// The next version of a set from a changed corpus: map old chunks to new ones, keep every
    /// label that still holds, relabel or retire the rest, write queries for new documents, and
    /// queue what changed for review, before what the review queue still held
    /// (refresh/changelog.jsonl says what changed and why).
    #[command(
        mut_arg("review_size", |arg| arg.hide(true)),
        mut_arg("review_min_per_type", |arg| arg.hide(true)),
        override_usage = "qrelgen refresh --set <DIR> --corpus <PATH> [--new-queries auto|N] [--dry-run] [OPTIONS]",
        after_help = "Examples:
  qrelgen refresh --set out/harbor-sync --corpus corpora/harbor-sync
  # What would change, and the LLM calls it would make; nothing written:
  qrelgen refresh --set out --corpus docs-v2 --dry-run
  # Then review what changed first:
  qrelgen review export --set out --only changed --format csv --to changed.csv

Settings: the set's manifest.json supplies every setting above (chunking, generator, model, seed,
top-n, …); the defaults shown are a build's. A flag given overrides the recorded value and is
recorded in the new version's manifest; with an unchanged corpus nothing is written, the flag
included."
    )]
    Refresh(Box<refresh::RefreshArgs>),
    /// Check a set folder or a qrels file: ids, duplicate pairs, dangling ids, grades; exit 1 and
    /// one line per problem.
    #[command(
        override_usage = "qrelgen validate --set <DIR>\n       qrelgen validate --qrels <FILE> [--corpus <FILE>] [--queries <FILE>]",
        after_help = "Examples:
  qrelgen validate --set out/harbor-sync
  qrelgen validate --qrels run/qrels.trec --corpus out/corpus.jsonl --queries out/queries.jsonl"
    )]
    Validate(validate::ValidateArgs),
    /// Write a baseline run: every query of a set searched in the set's own BM25 index (TREC
    /// format), so a first number needs no retriever of your own.
    #[command(after_help = "Examples:
  qrelgen run --set out --to out/runs/bm25.run
  # Only the top 10 hits of each query:
  qrelgen run --set out --to out/runs/bm25-10.run --k 10")]
    Run(run::RunArgs),
    /// Judge the pools of the systems you compare: each run's top chunks join each answerable
    /// query's pool, the pairs nobody judged are graded (LLM judge, one-shot labeller, or not at
    /// all), and the set gets a new version (queries and human judgments untouched).
    #[command(
        override_usage = "qrelgen pool --set <DIR> --run <FILE>... [--depth N] [--judge llm|one-shot|none] [OPTIONS]",
        after_help = "Examples:
  # Offline: grade the new pairs by their closeness to each query's known relevant chunks:
  qrelgen pool --set out --run dense.run --run hybrid.run --judge one-shot
  # With the LLM judge the build used (cache, --max-tokens-total and --batch apply):
  qrelgen pool --set out --run dense.run --run out/bm25.run --base-url http://127.0.0.1:8080/v1 --model m
  # Then compare them on the set:
  qrelgen eval --set out --run dense.run --run out/bm25.run"
    )]
    Pool(Box<pool::PoolArgs>),
    /// Score runs against a set (or any qrels): metrics per query and by slice, no_answer
    /// abstention, layers, paired statistics, agreement with human judgments; writes
    /// eval.json, per_query.tsv and eval.html.
    #[command(
        override_usage = "qrelgen eval --set <DIR> --run <FILE>... [OPTIONS]\n       qrelgen eval --qrels <FILE> --run <FILE>... [--queries <FILE>] [--no-answer <FILE>] [--corpus <FILE>] [OPTIONS]",
        after_help = "Examples:
  qrelgen eval --set out --run out/runs/bm25.run
  # Two retrievers, each compared with the baseline:
  qrelgen eval --set out --run dense.run --run hybrid.run --baseline out/runs/bm25.run
  # Any TREC qrels, scored at document level:
  qrelgen eval --qrels qrels.trec --corpus corpus.jsonl --run dense.run --level doc"
    )]
    Eval(Box<eval::EvalArgs>),
    /// Batch inference (`build --batch submit|export|import`): where a set's batches stand, and
    /// dropping the record of one that can never be looked up again.
    #[command(after_help = batch::STATUS_EXAMPLES)]
    Batch(batch::BatchCommand),
    /// Print a shell completion script for bash, zsh, fish, elvish or PowerShell.
    #[command(after_help = "Examples:
  qrelgen completions bash > ~/.local/share/bash-completion/completions/qrelgen
  qrelgen completions zsh > ~/.zfunc/_qrelgen    # with fpath+=(~/.zfunc) before compinit
  qrelgen completions fish > ~/.config/fish/completions/qrelgen.fish")]
    Completions {
        /// The shell to complete in.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) of qrelgen, or of one of its commands.
    #[command(after_help = "Examples:
  mkdir -p ~/.local/share/man/man1
  qrelgen man > ~/.local/share/man/man1/qrelgen.1
  qrelgen man build > ~/.local/share/man/man1/qrelgen-build.1
  man qrelgen-build")]
    Man {
        /// The command whose page to print (`build`, `eval`, …); the overview without one.
        command: Option<String>,
    },
}

/// Parses the command line, runs the command and maps the outcome to an exit code. Every
/// command writes its output through one writer, stdout; a closed stdout (`| head`) ends the
/// command quietly with exit code 0, as the reader has what it wanted.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = std::io::stdout().lock();
    let result = match cli.command {
        Command::Build(args) => build::run(*args, &mut out),
        Command::Review(args) => review::run(args, &mut out),
        Command::Refresh(args) => refresh::run(*args, &mut out),
        Command::Validate(args) => validate::run(&args, &mut out),
        Command::Run(args) => run::run(&args, &mut out),
        Command::Eval(args) => eval::run(&args, &mut out),
        Command::Pool(args) => pool::run(*args, &mut out),
        Command::Batch(args) => batch::run(&args, &mut out),
        Command::Completions { shell } => completions(shell, &mut out),
        Command::Man { command } => man(command.as_deref(), &mut out),
    }
    .and_then(|code| {
        out.flush()?;
        Ok(code)
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) if is_broken_pipe(&err) => ExitCode::from(exit::OK),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(exit::FATAL)
        }
    }
}

/// Writes the completion script of `shell`.
fn completions(shell: clap_complete::Shell, out: &mut impl std::io::Write) -> anyhow::Result<u8> {
    // Written whole, so that a closed stdout is an error here, not a panic in clap_complete.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "qrelgen", &mut script);
    out.write_all(&script)?;
    Ok(exit::OK)
}

/// Writes the man page of qrelgen, or of `command` (named `qrelgen-<command>`).
fn man(command: Option<&str>, out: &mut impl std::io::Write) -> anyhow::Result<u8> {
    let mut cli = <Cli as clap::CommandFactory>::command();
    cli.build();
    let page = match command {
        None => cli,
        Some(name) => {
            let Some(sub) = cli.find_subcommand(name) else {
                let names: Vec<&str> = cli.get_subcommands().map(clap::Command::get_name).collect();
                anyhow::bail!("no command {name:?}\nhint: one of {}", names.join(", "));
            };
            sub.clone().name(format!("qrelgen-{name}")).version(env!("CARGO_PKG_VERSION"))
        }
    };
    clap_mangen::Man::new(page).render(out)?;
    Ok(exit::OK)
}

/// Whether `err`, or any error behind it, is a write to a closed pipe.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every command and subcommand, with the words that run it (`["review", "apply"]`).
    fn commands() -> Vec<(Vec<String>, clap::Command)> {
        fn walk(path: &[String], cmd: &clap::Command, all: &mut Vec<(Vec<String>, clap::Command)>) {
            for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
                let mut path = path.to_vec();
                path.push(sub.get_name().to_owned());
                walk(&path, sub, all);
                all.push((path, sub.clone()));
            }
        }
        let mut all = Vec::new();
        let mut root = Cli::command();
        root.build();
        walk(&[], &root, &mut all);
        all
    }

    #[test]
    fn every_subcommand_has_examples_that_parse() {
        for (path, mut cmd) in commands() {
            let help = cmd.render_long_help().to_string();
            let name = format!("qrelgen {}", path.join(" "));
            let (_, after) = help.split_once("Examples:").unwrap_or_default();
            let examples: Vec<&str> =
                after.lines().map(str::trim).filter(|l| l.starts_with(&format!("{name} "))).collect();
            assert!(
                (2..=3).contains(&examples.len()),
                "{name}: two or three examples, not {examples:?}\n{help}"
            );
            for example in examples {
                // The command itself, without the shell's redirection and comment.
                let command = example.split(['>', '#']).next().unwrap_or_default();
                let words: Vec<&str> = command.split_whitespace().collect();
                if let Err(e) = Cli::try_parse_from(&words) {
                    panic!("{name}: the example {example:?} does not parse: {e}");
                }
            }
        }
    }

    #[test]
    fn completions_and_man_pages_cover_every_command() {
        let mut script = Vec::new();
        completions(clap_complete::Shell::Bash, &mut script).unwrap_or_default();
        let script = String::from_utf8_lossy(&script);
        assert!(script.contains("_qrelgen()"), "{script}");
        for (path, _) in commands() {
            let state = format!("qrelgen__subcmd__{}", path.join("__subcmd__"));
            assert!(script.contains(&state), "no completion for {path:?}");
        }
        let mut page = Vec::new();
        man(None, &mut page).unwrap_or_default();
        let page = String::from_utf8_lossy(&page);
        assert!(page.starts_with(".ie \\n(.g .ds Aq") && page.contains(".TH qrelgen 1"), "{page}");
        let mut build = Vec::new();
        man(Some("build"), &mut build).unwrap_or_default();
        let build = String::from_utf8_lossy(&build);
        assert!(build.contains(".TH qrelgen-build 1") && build.contains("\\-\\-corpus"), "{build}");
        assert!(man(Some("nope"), &mut Vec::new()).is_err());
    }

    #[test]
    fn build_usage_names_its_inputs_and_hides_empty_env_values() {
        let mut cmd = Cli::command();
        let build = cmd.find_subcommand_mut("build").unwrap_or_else(|| panic!("no build"));
        let usage = build.render_usage().to_string();
        assert!(usage.contains("--corpus <PATH> --out <DIR>"), "{usage}");
        let help = build.render_long_help().to_string();
        assert!(help.contains("[env: OPENAI_BASE_URL]"), "{help}");
        assert!(!help.contains("OPENAI_BASE_URL=") && !help.contains("QRELGEN_MODEL="), "{help}");
    }

    #[test]
    fn every_option_without_a_default_says_what_its_absence_means() {
        for (path, mut cmd) in commands() {
            let usage = cmd.render_usage().to_string();
            for arg in cmd.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                let takes_value = arg.get_action().takes_values();
                if !takes_value || arg.is_required_set() || !arg.get_default_values().is_empty() {
                    continue;
                }
                let help = arg
                    .get_long_help()
                    .or_else(|| arg.get_help())
                    .map(ToString::to_string)
                    .unwrap_or_default();
                assert!(
                    help.contains("[default: ") || usage.contains(&format!("--{long} ")),
                    "qrelgen {} --{long}: say what happens without it ({help:?})",
                    path.join(" ")
                );
            }
        }
    }
}
