//! Versions of a reviewed set: the review log in `manifest.json`, the ledger of applied
//! judgments (`review/decisions.jsonl`), and the writing of the next version.
//!
//! Invariants: version 1 is what the build wrote (a `build --force` into the set keeps the current
//! version under `versions/v<N>/`, with the build's other files, and becomes version N + 1, the
//! base that later versions derive from; the ledger keeps the judgments of the earlier builds but
//! applies only those made since); applying decisions keeps the current files under
//! `versions/v<N>/` and writes version N + 1 in their place, together with the ledger, a copy of
//! each decisions file (`review/applied/`) and the manifest. Everything is staged first, then
//! published in an order that never loses a version: `versions/v<N>/` (synced to disk), then
//! `review/` (ledger entries newer than the manifest's version are ignored when the set is
//! read), then the live files, `manifest.json` last, all or none ([`Staging::publish`]: if
//! moving a live file fails, the files it replaced are put back). Nothing that differs between identical applies (times,
//! paths) is recorded, so the same decisions give byte-identical files.

use super::set::{ReviewSet, SetManifest, Version, read_all, read_manifest};
use crate::error::Result;
use crate::output::layout::{
    BUILD_ONLY_FILES, LEDGER, MANIFEST, NO_ANSWER, QRELS_TREC, QUERIES, REVIEW_DIR, VERSION_FILES,
    VERSIONS_DIR,
};
use crate::output::{self, Staging};
use crate::set::ledger::{self, Seal};
use std::path::Path;

pub use super::log::{Counts, Entry, InputFile, MadeBy, ReviewLog, VersionRecord, version_dir};

/// A decisions file to keep beside the version it makes.
pub struct Input<'a> {
    /// How it is recorded.
    pub file: InputFile,
    /// Its bytes.
    pub bytes: &'a [u8],
}

/// Writes the next version of `set`: keeps the current files under `versions/v<N>/`, writes
/// `next` in their place, the ledger, the inputs and the manifest with `record` added to its log.
///
/// # Errors
/// [`crate::Error::Output`] naming the file while staging; [`crate::Error::Unpublished`] when
/// publishing fails (if it failed while moving the live files, the files it replaced were put
/// back); [`crate::Error::PublishRestore`] if putting them back failed too.
pub fn write_next(
    set: &ReviewSet,
    next: &Version,
    ledger: &[Entry],
    record: VersionRecord,
    inputs: &[Input<'_>],
) -> Result<()> {
    check_archive(&set.dir, set.version())?;
    let staging = Staging::create(&set.dir)?;
    stage_archive(&set.dir, set.version(), &staging, &VERSION_FILES)?;
    output::write_text(&staging.path(QUERIES), &queries_text(next))?;
    output::write_qrels(|name| staging.path(name), &next.qrels)?;
    output::write_text(&staging.path(NO_ANSWER), &no_answer_text(next))?;
    output::write_jsonl(&staging.path(LEDGER), set.earlier_ledger.iter().chain(ledger))?;
    let seal = seal_ledger(&staging, record.version)?;
    for input in inputs {
        output::write_atomic(&staging.path(&input.file.stored), |w| w.write_all(input.bytes))?;
    }
    publish_version(set, staging, set.manifest.clone(), record, seal)
}

/// Stages `manifest` with `record` as its newest version and `seal` as its ledger's, then
/// publishes `staging`: the previous version first (`versions/`, `review/`), on disk, before
/// any live file is replaced, the live files last, all or none.
fn publish_version(
    set: &ReviewSet,
    mut staging: Staging,
    mut manifest: SetManifest,
    record: VersionRecord,
    seal: Seal,
) -> Result<()> {
    super::judge_agreement::stage_report(&set.dir, &staging, record.version)?;
    let mut log = next_log(manifest.review.take(), record);
    log.ledger = Some(seal);
    manifest.review = Some(log);
    output::write_json(&staging.path(MANIFEST), &manifest)?;
    let unpublished = |source: crate::Error| crate::Error::Unpublished {
        next: set.version() + 1,
        current: set.version(),
        kept: version_dir(&set.dir, set.version()),
        source: Box::new(source),
    };
    staging.publish_part(&[VERSIONS_DIR, REVIEW_DIR]).map_err(unpublished)?;
    match staging.publish(&VERSION_FILES) {
        Err(crate::Error::Publish { source, .. }) => Err(unpublished(*source)),
        other => other,
    }
}

/// How a machine step (not a review) made the next version.
pub struct Made {
    /// The new manifest, but its review log (added here).
    pub manifest: SetManifest,
    /// What made it.
    pub made_by: MadeBy,
    /// What makes two such steps the same (recorded).
    pub key: String,
}

/// Writes the next version of `set` made by a machine step that keeps its queries and adds
/// judgments (`qrelgen pool`): the current files kept under `versions/v<N>/`, `next` in their
/// place, the files `extra` stages, and the manifest with the step as version N + 1, the new
/// base (its files hold every judgment applied so far; the ledger stays as it is, sealed
/// again and kept as this version's copy). Published as
/// [`write_next`] publishes, all or none. Returns the new version's number.
///
/// # Errors
/// As [`write_next`].
pub fn write_made(
    set: &ReviewSet,
    next: &Version,
    made: Made,
    extra: impl FnOnce(&Staging) -> Result<()>,
) -> Result<u32> {
    check_archive(&set.dir, set.version())?;
    let staging = Staging::create(&set.dir)?;
    stage_archive(&set.dir, set.version(), &staging, &VERSION_FILES)?;
    output::write_text(&staging.path(QUERIES), &queries_text(next))?;
    output::write_qrels(|name| staging.path(name), &next.qrels)?;
    output::write_text(&staging.path(NO_ANSWER), &no_answer_text(next))?;
    extra(&staging)?;
    let live_ledger = set.dir.join(LEDGER);
    if live_ledger.is_file() {
        output::copy_atomic(&live_ledger, &staging.path(LEDGER))?;
    } else {
        output::write_jsonl(&staging.path(LEDGER), set.earlier_ledger.iter().chain(&set.ledger))?;
    }
    let version = set.version() + 1;
    let seal = seal_ledger(&staging, version)?;
    let counts = Counts {
        queries: next.queries.len(),
        qrels: output::trec_rows(&next.qrels).len(),
        ..Counts::default()
    };
    let record = VersionRecord {
        version,
        parent: set.version(),
        made_by: made.made_by,
        key: made.key,
        inputs: Vec::new(),
        reviewers: Vec::new(),
        resolve: None,
        counts,
    };
    publish_version(set, staging, made.manifest, record, seal)?;
    Ok(version)
}

/// The seal of the ledger staged in `staging`, and its copy staged for version `version`
/// (`versions/ledger-v<N>.jsonl`, what a damaged ledger is restored from).
fn seal_ledger(staging: &Staging, version: u32) -> Result<Seal> {
    let staged = staging.staged_path(LEDGER);
    let bytes =
        fs_err::read(&staged).map_err(|source| crate::Error::Input { path: staged.clone(), source })?;
    let copy = ledger::archived_copy(version);
    output::copy_atomic(&staged, &staging.path(&copy.to_string_lossy()))?;
    Ok(Seal::of_bytes(&bytes))
}

/// The log with `record` as its newest version.
fn next_log(log: Option<ReviewLog>, record: VersionRecord) -> ReviewLog {
    let mut log =
        log.unwrap_or(ReviewLog { version: 1, parent: 0, base: 1, history: Vec::new(), ledger: None });
    log.parent = log.version;
    log.version = record.version;
    if record.made_by != MadeBy::Review {
        log.base = record.version;
    }
    log.history.push(record);
    log
}

/// Stages a copy of the files `names` of the set in `dir` (those it has) as `versions/v<current>/`.
fn stage_archive(dir: &Path, current: u32, staging: &Staging, names: &[&str]) -> Result<()> {
    let kept = version_dir(Path::new(""), current);
    for name in names.iter().filter(|name| dir.join(name).is_file()) {
        output::copy_atomic(&dir.join(name), &staging.path(&kept.join(name).to_string_lossy()))?;
    }
    Ok(())
}

/// What a rebuild keeps of the current version N under `versions/v<N>/`: the files staged
/// there as copies, and those the new version replaces, which its publish moves there.
#[must_use = "publish the rebuild with `publish_rebuild`, which moves the files it keeps"]
pub struct Previous {
    /// `versions/v<N>`, relative to the set folder.
    dir: std::path::PathBuf,
    /// The files the publish moves there.
    moved: Vec<String>,
}

/// What a rebuild of the reviewed set in `dir` keeps of its current version N under
/// `versions/v<N>/`: its version files, the build's other files, and the files `also` (those
/// it has). Call it once the new version's files are staged in `staging`: the files it
/// replaces are moved there when it is published ([`publish_rebuild`]), the others are staged
/// there as copies now.
///
/// # Errors
/// [`crate::Error::ReviewHistory`] if a `versions/v<N>/` that differs from the files in place is
/// in the way; [`crate::Error::Input`]/[`crate::Error::Malformed`] for an unreadable manifest;
/// [`crate::Error::Output`] naming the file that could not be staged.
pub fn stage_previous(dir: &Path, staging: &Staging, also: &[&str]) -> Result<Previous> {
    let current = read_manifest(dir)?.version();
    check_archive(dir, current)?;
    let names = [&VERSION_FILES[..], &BUILD_ONLY_FILES, also].concat();
    let (moved, copied): (Vec<&str>, Vec<&str>) = names
        .iter()
        .filter(|name| dir.join(name).is_file())
        .partition(|name| staging.staged_path(name).is_file());
    stage_archive(dir, current, staging, &copied)?;
    let moved = moved.into_iter().map(str::to_owned).collect();
    Ok(Previous { dir: version_dir(Path::new(""), current), moved })
}

/// Publishes the build staged in `staging` as the next version of the reviewed set in `dir`,
/// keeping the current one under `versions/v<N>/` as [`stage_previous`] staged it: records the
/// build as version N + 1 in the staged manifest's review log (see `stage_rebuild`), then
/// publishes it, moving the files it replaces into `versions/v<N>/` (put back if the publish
/// fails or is cut short). Returns the new version's number.
///
/// # Errors
/// Those of `stage_rebuild` and [`Staging::publish`].
pub fn publish_rebuild(
    dir: &Path,
    mut staging: Staging,
    previous: &Previous,
    made_by: MadeBy,
) -> Result<u32> {
    let version = stage_rebuild(dir, &mut staging, made_by)?;
    let names: Vec<&str> = previous.moved.iter().map(String::as_str).collect();
    staging.publish_keeping(&[], Some(&output::Keep { dir: &previous.dir, names: &names }))?;
    Ok(version)
}

/// Makes the build staged in `staging` the next version of the reviewed set in `dir`, once
/// [`stage_previous`] has staged what it keeps of the current version N: records the build as
/// version N + 1 in the staged manifest's review log (its base from now on), and publishes the
/// copies kept, synced, before any live file is replaced. The ledger and the applied decisions
/// files stay as they are. Returns the new version's number.
///
/// # Errors
/// [`crate::Error::Input`]/[`crate::Error::Malformed`] for an unreadable manifest;
/// [`crate::Error::Output`] naming the file that could not be staged or published.
fn stage_rebuild(dir: &Path, staging: &mut Staging, made_by: MadeBy) -> Result<u32> {
    let live = read_manifest(dir)?;
    let current = live.version();
    let built = staging.staged_path(MANIFEST);
    let bytes = fs_err::read(&built).map_err(|source| crate::Error::Input { path: built.clone(), source })?;
    let mut manifest: SetManifest = serde_json::from_slice(&bytes).map_err(|e| crate::Error::Malformed {
        path: built.clone(),
        line: e.line(),
        message: e.to_string(),
    })?;
    let lines =
        |name: &str| fs_err::read_to_string(staging.staged_path(name)).map_or(0, |t| t.lines().count());
    let counts = Counts { queries: lines(QUERIES), qrels: lines(QRELS_TREC), ..Counts::default() };
    let record = VersionRecord {
        version: current + 1,
        parent: current,
        made_by,
        key: format!("{}:{}", made_by.label(), blake3::hash(&bytes).to_hex()),
        inputs: Vec::new(),
        reviewers: Vec::new(),
        resolve: None,
        counts,
    };
    // Entries a failed apply left (newer than the current version) would read as the new
    // version's: they go. A set with a review log has a ledger (empty when only an export was
    // made); a damaged one is refused before anything is published.
    if let Some(seal) = live.review.as_ref().and_then(|log| log.ledger.as_ref()) {
        crate::set::ledger::check(dir, seal, current)?;
    }
    let ledger = dir.join(LEDGER);
    let mut entries: Vec<Entry> = if ledger.is_file() { read_all(&ledger)? } else { Vec::new() };
    entries.retain(|e| e.version <= current);
    output::write_jsonl(&staging.path(LEDGER), &entries)?;
    let mut log = next_log(live.review, record);
    log.ledger = Some(seal_ledger(staging, current + 1)?);
    manifest.review = Some(log);
    output::write_json(&staging.path(MANIFEST), &manifest)?;
    staging.publish_part(&[VERSIONS_DIR, REVIEW_DIR])?;
    Ok(current + 1)
}

/// `versions/v<N>/` of the current version exists only when publishing version N + 1 failed: its
/// files must then be the ones in place (they are rewritten), or it may hold the only copy of
/// some of them.
fn check_archive(dir: &Path, current: u32) -> Result<()> {
    let kept = version_dir(dir, current);
    for name in VERSION_FILES {
        let Ok(bytes) = fs_err::read(kept.join(name)) else { continue };
        if fs_err::read(dir.join(name)).ok() != Some(bytes) {
            return Err(crate::Error::ReviewHistory {
                path: kept.join(name),
                message: format!(
                    "differs from the {name} in place, and version {current} is the current one: a publish failed part way"
                ),
                hint: "copy the files of that versions/ folder back into the set folder (or, if the files in place are right, remove the folder) and apply again",
            });
        }
    }
    Ok(())
}

/// The text of `no_answer.txt` for a version: its `no_answer` queries without a relevant chunk.
#[must_use]
pub fn no_answer_text(version: &Version) -> String {
    let answered: std::collections::HashSet<&crate::id::QueryId> =
        version.qrels.iter().filter(|q| q.grade >= 1).map(|q| &q.query_id).collect();
    version
        .queries
        .iter()
        .filter(|q| q.query_type == crate::record::QueryType::NoAnswer && !answered.contains(&q.id))
        .flat_map(|q| [q.id.as_str(), "\n"])
        .collect()
}

/// The text of `queries.jsonl` for a version.
#[must_use]
pub fn queries_text(version: &Version) -> String {
    version.queries.iter().flat_map(|q| [q.raw.as_str(), "\n"]).collect()
}
