//! Whether the set judged what each run retrieves: a run that `qrelgen pool` pooled into the
//! set (its file's digest, or else its file name, in `manifest.json` → `pools`) had its top
//! chunks judged; one that was not is scored on the chunks other systems found, and a
//! comparison with it says more about the set than about the systems.
//!
//! The rule: a comparison of two runs is decidable on the set only when both were pooled and
//! their Judged@10 differ by at most [`JUDGED_GAP`]; otherwise it reads "not decidable on this
//! set", with the `qrelgen pool` command that makes it decidable.

use super::Role;
use super::metrics::Measure;
use super::report::{Evaluation, RunReport};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// Two runs whose Judged@10 differ by more than this are not compared on the set: the one
/// judged less is scored on fewer labels.
pub const JUDGED_GAP: f64 = 0.2;

/// A run's place in the set's pools.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunPooling {
    /// The run's name.
    pub name: String,
    /// Whether `qrelgen pool` pooled it into the set.
    pub pooled: bool,
    /// Its mean Judged@10 over the answerable queries.
    pub judged_at_10: f64,
}

/// Whether a comparison of two runs can be decided on the set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decidability {
    /// The first run.
    pub a: String,
    /// The second run.
    pub b: String,
    /// Whether it can.
    pub decidable: bool,
    /// Why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What makes it decidable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

/// The runs' pooling and the decidability of each pair of compared runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pooling {
    /// Every run that is scored (`--run`, `--baseline`).
    pub runs: Vec<RunPooling>,
    /// Every pair of them.
    pub comparisons: Vec<Decidability>,
    /// How the machine judges of the pools agree with the reviewers, when they graded pooled
    /// pairs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judge_agreement: Option<crate::review::judge_agreement::JudgeAgreement>,
}

#[derive(Deserialize)]
struct PoolFields {
    run: String,
    blake3: String,
}

/// The pooling of the runs of `evaluation` on the set in `dir`.
#[must_use]
pub fn check(dir: &Path, evaluation: &Evaluation) -> Pooling {
    let pools = read_pools(dir);
    let scored: Vec<&RunReport> = evaluation.runs.iter().filter(|r| r.role != Role::Candidates).collect();
    let runs: Vec<RunPooling> = scored
        .iter()
        .map(|r| RunPooling {
            name: r.name.clone(),
            pooled: was_pooled(&r.file, &pools),
            judged_at_10: r.means.get(&Measure::Judged(10)).copied().unwrap_or(0.0),
        })
        .collect();
    let mut comparisons = Vec::new();
    for (i, a) in runs.iter().enumerate() {
        for (b, file_b) in runs.iter().zip(&scored).skip(i + 1) {
            comparisons.push(decide(dir, (a, &scored[i].file), (b, &file_b.file)));
        }
    }
    // A ledger that cannot be read is `review status`'s to report; here it only hides the check.
    let judge_agreement = crate::review::judge_agreement::agreement(dir).ok().flatten();
    Pooling { runs, comparisons, judge_agreement }
}

/// Whether a comparison of `a` and `b` can be decided, and if not why and what to run.
fn decide(dir: &Path, (a, file_a): (&RunPooling, &Path), (b, file_b): (&RunPooling, &Path)) -> Decidability {
    let unpooled: Vec<&Path> =
        [(a, file_a), (b, file_b)].iter().filter(|(r, _)| !r.pooled).map(|(_, f)| *f).collect();
    let gap = (a.judged_at_10 - b.judged_at_10).abs();
    let (reason, files) = if !unpooled.is_empty() {
        let names: Vec<String> = [a, b].iter().filter(|r| !r.pooled).map(|r| r.name.clone()).collect();
        (Some(format!("{} not pooled into the set", names.join(" and "))), unpooled)
    } else if gap > JUDGED_GAP + 1e-9 {
        let less = if a.judged_at_10 < b.judged_at_10 { (a, file_a) } else { (b, file_b) };
        let reason =
            format!("judged@10 {:.2} vs {:.2}: a gap over {JUDGED_GAP}", a.judged_at_10, b.judged_at_10);
        (Some(format!("{reason} ({} judged less; pool it deeper)", less.0.name)), vec![less.1])
    } else {
        (None, Vec::new())
    };
    let command = (!files.is_empty()).then(|| {
        let runs: Vec<String> = files.iter().map(|f| format!("--run {}", f.display())).collect();
        format!("qrelgen pool --set {} {}", dir.display(), runs.join(" "))
    });
    Decidability { a: a.name.clone(), b: b.name.clone(), decidable: reason.is_none(), reason, command }
}

/// The set's pool records (none without a manifest or `pools`).
fn read_pools(dir: &Path) -> Vec<PoolFields> {
    let Ok(text) = fs_err::read_to_string(dir.join(super::files::MANIFEST)) else { return Vec::new() };
    let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else { return Vec::new() };
    let Some(pools) = value.get("pools").cloned() else { return Vec::new() };
    serde_json::from_value(pools).unwrap_or_default()
}

/// Whether the run file at `file` is one of `pools`: by the digest of its bytes, else by name.
fn was_pooled(file: &Path, pools: &[PoolFields]) -> bool {
    let digest = fs_err::read(file).ok().map(|b| blake3::hash(&b).to_hex().to_string());
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
    pools.iter().any(|p| Some(&p.blake3) == digest.as_ref())
        || pools.iter().any(|p| Some(&p.run) == name.as_ref())
}

/// The lines `eval` prints after its table.
#[must_use]
pub fn render(pooling: &Pooling) -> String {
    let mut out = String::from("\npooled into the set (qrelgen pool), judged@10:\n");
    for r in &pooling.runs {
        let pooled = if r.pooled { "pooled" } else { "not pooled" };
        let _ = writeln!(out, "  {:<24} {pooled:<10} judged@10 {:.3}", r.name, r.judged_at_10);
    }
    if let Some(judge) = &pooling.judge_agreement {
        out.push_str(&crate::review::judge_agreement::render(judge));
    }
    for c in pooling.comparisons.iter().filter(|c| !c.decidable) {
        let _ = writeln!(
            out,
            "{} vs {}: not decidable on this set ({}): {}",
            c.a,
            c.b,
            c.reason.as_deref().unwrap_or(""),
            c.command.as_deref().unwrap_or("")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, pooled: bool, judged: f64) -> RunPooling {
        RunPooling { name: name.into(), pooled, judged_at_10: judged }
    }

    #[test]
    fn a_comparison_needs_both_runs_pooled_and_judged_alike() {
        let dir = Path::new("set");
        let (fa, fb) = (Path::new("a.run"), Path::new("b.run"));
        let ok = decide(dir, (&run("a", true, 0.9), fa), (&run("b", true, 0.75), fb));
        assert!(ok.decidable && ok.command.is_none());
        let unpooled = decide(dir, (&run("a", true, 0.9), fa), (&run("b", false, 0.9), fb));
        assert!(!unpooled.decidable);
        assert_eq!(unpooled.command.as_deref(), Some("qrelgen pool --set set --run b.run"));
        let gap = decide(dir, (&run("a", true, 0.9), fa), (&run("b", true, 0.6), fb));
        assert!(!gap.decidable, "0.3 > 0.2");
        assert_eq!(gap.command.as_deref(), Some("qrelgen pool --set set --run b.run"));
        let edge = decide(dir, (&run("a", true, 0.8), fa), (&run("b", true, 0.6), fb));
        assert!(edge.decidable, "a gap of 0.2 is allowed: {edge:?}");
    }
}
