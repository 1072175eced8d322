//! `qrelgen refresh`: scenario tests on a copy of the sample corpus (edit a sentence, delete a
//! document, rename one, add one that answers a `no_answer` query, split a section, refresh after
//! `review apply`), the identity on an unchanged corpus, `--dry-run`, and the LLM path against
//! the mock server.

use super::llm;
use super::mock::{self, Behaviour};
use super::review::fixture as label_studio_fixture;
use super::{Run, build, path_str, qrelgen, qrelgen_with_env, sample_corpus, str_field, tempdir, write};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A set built from a copy of a corpus, and the copy, which tests change.
struct Fixture {
    _dir: tempfile::TempDir,
    corpus: PathBuf,
    set: Run,
}

/// `(query, chunk, grade, provenance)` rows of `qrels/provenance.tsv`, in file order.
type Rows = Vec<(String, String, String, String)>;

fn fixture(source: &Path, args: &[&str]) -> Fixture {
    let dir = tempdir();
    let corpus = dir.path().join("corpus");
    copy_tree(source, &corpus);
    let mut all = vec!["--quiet"];
    all.extend_from_slice(args);
    let set = build(dir.path(), &corpus, &all);
    set.assert_code(0);
    Fixture { _dir: dir, corpus, set }
}

pub(crate) fn copy_tree(from: &Path, to: &Path) {
    for entry in walkdir::WalkDir::new(from).into_iter().flatten().filter(|e| e.file_type().is_file()) {
        let relative = entry.path().strip_prefix(from).unwrap_or_else(|e| panic!("{e}"));
        write(&to.join(relative), fs_err::read(entry.path()).unwrap_or_else(|e| panic!("{e}")));
    }
}

impl Fixture {
    fn refresh(&self, extra: &[&str]) -> Run {
        let mut args =
            vec!["refresh", "--set", path_str(&self.set.out), "--corpus", path_str(&self.corpus), "-q"];
        args.extend_from_slice(extra);
        finished(&self.set.out, &qrelgen(&args))
    }

    fn doc(&self, name: &str) -> PathBuf {
        self.corpus.join(name)
    }

    fn write_doc(&self, name: &str, text: &str) {
        write(&self.doc(name), text);
    }

    fn edit(&self, name: &str, from: &str, to: &str) {
        let text = fs_err::read_to_string(self.doc(name)).unwrap_or_else(|e| panic!("{e}"));
        assert!(text.contains(from), "{name} has no {from:?}");
        write(&self.doc(name), text.replacen(from, to, 1));
    }
}

/// The run of a refresh of the set in `out` that ended with `output`.
fn finished(out: &Path, output: &std::process::Output) -> Run {
    Run {
        out: out.to_owned(),
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Every file under `dir`, as bytes.
pub(super) fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            (
                e.path().strip_prefix(dir).unwrap_or(e.path()).to_owned(),
                fs_err::read(e.path()).unwrap_or_default(),
            )
        })
        .collect()
}

fn rows(run: &Run) -> Rows {
    run.file("qrels/provenance.tsv")
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].to_owned(), f[1].to_owned(), f[2].to_owned(), f[3].to_owned())
        })
        .collect()
}

fn rows_of<'a>(rows: &'a Rows, query: &str) -> Vec<&'a (String, String, String, String)> {
    rows.iter().filter(|r| r.0 == query).collect()
}

/// Query id → its line in `queries.jsonl`.
fn lines(run: &Run) -> BTreeMap<String, String> {
    run.file("queries.jsonl")
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}"));
            (str_field(&v, "/_id").to_owned(), l.to_owned())
        })
        .collect()
}

fn parse(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}"))
}

/// Query id → (change, the changelog line).
fn query_changes(run: &Run) -> BTreeMap<String, (String, Value)> {
    run.jsonl("refresh/changelog.jsonl")
        .into_iter()
        .filter(|l| l["kind"] == "query")
        .map(|l| (str_field(&l, "/query_id").to_owned(), (str_field(&l, "/change").to_owned(), l)))
        .collect()
}

/// The rows of `refresh/chunk_map.tsv` that are not `unchanged`: (old, new, change).
fn chunk_changes(run: &Run) -> Vec<(String, String, String)> {
    run.file("refresh/chunk_map.tsv")
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].to_owned(), f[1].to_owned(), f[2].to_owned())
        })
        .filter(|r| r.2 != "unchanged")
        .collect()
}

/// The id of the chunk of `corpus.jsonl` whose text contains `needle`.
fn chunk_with(run: &Run, needle: &str) -> String {
    let found: Vec<Value> =
        run.jsonl("corpus.jsonl").into_iter().filter(|c| str_field(c, "/text").contains(needle)).collect();
    assert_eq!(found.len(), 1, "chunks holding {needle:?}");
    str_field(&found[0], "/_id").to_owned()
}

fn sources(line: &str) -> Vec<String> {
    let v = parse(line);
    v.pointer("/metadata/sources")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The checks every refresh must pass, given the set before (`lines`, `rows`) and the old → new
/// chunk ids: queries that touch no changed chunk (by a row or a source) keep their line and rows
/// byte for byte; the
/// others are retired (gone, with a reason) or flagged with rows moved to the new ids
/// (provenance `refresh`, human rows carried) and their old ids in the changelog.
fn assert_refreshed(
    after: &Run,
    before: (&BTreeMap<String, String>, &Rows),
    moved: &BTreeMap<String, String>,
    gone: &BTreeSet<String>,
) {
    let (old_lines, old_rows) = before;
    let (new_lines, new_rows) = (lines(after), rows(after));
    let changes = query_changes(after);
    assert_eq!(changes.len(), new_lines.len() + changes.values().filter(|c| c.0 == "retired").count());
    for (id, line) in old_lines {
        let old = rows_of(old_rows, id);
        let in_change = |chunk: &String| moved.contains_key(chunk) || gone.contains(chunk);
        // A no_answer query has no rows, but its sources are mapped as any other query's.
        let touched = old.iter().any(|r| in_change(&r.1)) || sources(line).iter().any(in_change);
        let (change, log) = &changes[id];
        if !touched {
            assert!(["kept", "pool", "may_be_answerable"].contains(&change.as_str()), "{id}: {change}");
            if change != "may_be_answerable" {
                assert_eq!(&new_lines[id], line, "{id} is untouched");
            }
            assert_eq!(rows_of(&new_rows, id), old, "{id} is untouched");
            continue;
        }
        if change == "retired" {
            assert!(!new_lines.contains_key(id) && rows_of(&new_rows, id).is_empty(), "{id} retired");
            assert!(!str_field(log, "/reason").is_empty());
            continue;
        }
        if change == "remapped" {
            assert_eq!(&new_lines[id], line, "{id}: its sources are unchanged");
            assert!(
                old.iter()
                    .all(|r| !sources(line).contains(&r.1)
                        || !(moved.contains_key(&r.1) || gone.contains(&r.1)))
            );
        } else {
            let line = parse(&new_lines[id]);
            assert_eq!(str_field(&line, "/metadata/status"), "flagged", "{id}");
            assert_eq!(str_field(&line, "/metadata/refresh/change"), change, "{id}");
        }
        let expected: Vec<(String, String, String, String)> = old
            .iter()
            .filter(|r| !gone.contains(&r.1))
            .map(|r| match moved.get(&r.1) {
                Some(new) => {
                    let provenance = if r.3 == "human" { "human" } else { "refresh" };
                    (r.0.clone(), new.clone(), r.2.clone(), provenance.to_owned())
                }
                None => (*r).clone(),
            })
            .collect();
        let got: Vec<_> = rows_of(&new_rows, id).into_iter().cloned().collect();
        // A human row whose chunk changed without its evidence found turns `refresh`.
        let lost: BTreeSet<&str> = log["human_not_carried"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| l["chunk"].as_str())
            .collect();
        let expected: Vec<_> = expected
            .into_iter()
            .map(|mut r| {
                let old_id = moved.iter().find(|(_, n)| **n == r.1).map(|(o, _)| o.as_str());
                if old_id.is_some_and(|o| lost.contains(o)) {
                    "refresh".clone_into(&mut r.3);
                }
                r
            })
            .collect();
        assert_eq!(got, expected, "{id}: rows moved to the new ids");
        let logged: BTreeSet<(String, String)> = log["moved"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| (str_field(m, "/old").to_owned(), str_field(m, "/new").to_owned()))
            .collect();
        let want: BTreeSet<(String, String)> =
            old.iter().filter_map(|r| moved.get(&r.1).map(|n| (r.1.clone(), n.clone()))).collect();
        assert_eq!(logged, want, "{id}: the changelog records the old ids");
    }
    assert_queue(after, &changes);
}

/// The ids of a review queue's items, in order.
fn queue_ids(queue: &[Value]) -> Vec<String> {
    queue.iter().map(|i| str_field(i, "/query_id").to_owned()).collect()
}

/// The refresh's review queue: first every query it changed and queued, each with its change
/// and the new version in `refresh`; then the previous version's queue items whose queries are
/// still in the set, in their order (a retired query's item goes).
fn assert_queue(after: &Run, changes: &BTreeMap<String, (String, Value)>) {
    let version = parse(&after.file("manifest.json"))["review"]["version"].as_u64().unwrap_or_default();
    let previous = queue_ids(&after.jsonl(&format!("versions/v{}/review_queue.jsonl", version - 1)));
    let queue = after.jsonl("review_queue.jsonl");
    let queued: BTreeSet<String> = changes
        .iter()
        .filter(|(_, (c, _))| !["kept", "remapped", "pool_judged", "retired"].contains(&c.as_str()))
        .map(|(id, _)| id.clone())
        .collect();
    let (first, rest) = queue.split_at(queued.len().min(queue.len()));
    assert_eq!(queue_ids(first).into_iter().collect::<BTreeSet<_>>(), queued, "what changed comes first");
    for item in first {
        let id = str_field(item, "/query_id");
        assert_eq!(item["refresh"]["version"], version, "{id}");
        assert_eq!(str_field(item, "/refresh/change"), changes[id].0, "{id}");
    }
    let in_set = lines(after);
    let carried: Vec<String> =
        previous.into_iter().filter(|id| in_set.contains_key(id) && !queued.contains(id)).collect();
    assert_eq!(queue_ids(rest), carried, "then the previous queue's items still in the set");
}

#[test]
fn editing_a_sentence_retargets_the_queries_of_its_chunk() {
    let f = fixture(&sample_corpus(), &[]);
    let before = (lines(&f.set), rows(&f.set));
    let kept = snapshot(&f.set.out);
    let old = chunk_with(&f.set, "events are kept for 90 days");
    f.edit(
        "admin/audit-log.md",
        "events are kept for 90 days",
        "events are kept for 120 days, then archived",
    );
    let run = f.refresh(&[]);
    run.assert_code(0);
    let new = chunk_with(&run, "events are kept for 120 days, then archived");
    assert_eq!(chunk_changes(&run), [(old.clone(), new.clone(), "edited".to_owned())]);
    let moved = BTreeMap::from([(old.clone(), new)]);
    assert_refreshed(&run, (&before.0, &before.1), &moved, &BTreeSet::new());
    // The offline generator writes no evidence quotes: a query whose source changed is decided
    // by the round trip (retargeted), one whose topic chunk changed keeps its sources and its line
    // (remapped).
    let changes = query_changes(&run);
    let mut touched = 0;
    for (id, line) in &before.0 {
        if rows_of(&before.1, id).iter().any(|r| r.1 == old) && changes[id].0 != "retired" {
            touched += 1;
            let expected = if sources(line).contains(&old) { "retargeted" } else { "remapped" };
            assert_eq!(changes[id].0, expected, "{id}");
        }
    }
    assert!(touched > 0, "some query used the edited chunk");
    // The previous version is kept byte for byte.
    for name in [
        "queries.jsonl",
        "qrels/provenance.tsv",
        "qrels/test.tsv",
        "qrels.trec",
        "corpus.jsonl",
        "manifest.json",
    ] {
        assert_eq!(
            fs_err::read(f.set.out.join("versions/v1").join(name)).ok().as_ref(),
            kept.get(Path::new(name)),
            "{name}"
        );
    }
    let manifest = parse(&run.file("manifest.json"));
    assert_eq!(manifest["review"]["version"], 2);
    assert_eq!(manifest["review"]["history"][0]["made_by"], "refresh");
    let report = run.file("report.md");
    let section = report.split("## Refresh").nth(1).unwrap_or_else(|| panic!("no Refresh section: {report}"));
    assert!(section.contains("Version 2 of the set"), "{section}");
    // The set the refresh made, by type, as its queries.jsonl holds it.
    let mut by_type = std::collections::BTreeMap::<String, usize>::new();
    for line in run.file("queries.jsonl").lines() {
        *by_type.entry(parse(line)["metadata"]["type"].as_str().unwrap_or("?").to_owned()).or_default() += 1;
    }
    let total: usize = by_type.values().sum();
    let row = section.lines().find_map(|l| l.strip_prefix("| queries in the set | ")).unwrap_or_default();
    let listed = row.split_once(" (").and_then(|(_, rest)| rest.strip_suffix(") |")).unwrap_or_default();
    let listed: std::collections::BTreeMap<String, usize> = listed
        .split(", ")
        .filter_map(|pair| pair.split_once(' '))
        .map(|(t, n)| (t.to_owned(), n.parse().unwrap_or(0)))
        .collect();
    assert_eq!((row.split(' ').next(), listed), (Some(total.to_string().as_str()), by_type), "{section}");
    assert_eq!(manifest["refresh"]["in_set"], total);
    let html = run.file("report.html");
    assert!(html.contains("<section id=\"refresh\">"));
    assert!(
        html.contains("<code>review export --only changed</code>") && !html.contains("`review"),
        "{html}"
    );
}

#[test]
fn deleting_a_document_retires_its_queries_with_a_reason() {
    let f = fixture(&sample_corpus(), &[]);
    let before = (lines(&f.set), rows(&f.set));
    let doc = "billing/changing-your-plan.md";
    let doc_chunks: BTreeSet<String> = f
        .set
        .jsonl("corpus.jsonl")
        .iter()
        .map(|c| str_field(c, "/_id").to_owned())
        .filter(|id| id.starts_with(&format!("{doc}:")))
        .collect();
    fs_err::remove_file(f.doc(doc)).unwrap_or_else(|e| panic!("{e}"));
    let run = f.refresh(&[]);
    run.assert_code(0);
    let expected: Vec<(String, String, String)> =
        doc_chunks.iter().map(|c| (c.clone(), "-".to_owned(), "deleted".to_owned())).collect();
    let mut got = chunk_changes(&run);
    got.sort();
    assert_eq!(got, expected);
    assert_refreshed(&run, (&before.0, &before.1), &BTreeMap::new(), &doc_chunks);
    let changes = query_changes(&run);
    let mut retired = 0;
    for (id, line) in &before.0 {
        if sources(line).iter().any(|s| doc_chunks.contains(s)) {
            retired += 1;
            assert_eq!(changes[id].0, "retired", "{id}");
            // The offline generator writes no evidence quotes: nothing to search the new corpus for.
            let source = sources(line).into_iter().find(|s| doc_chunks.contains(s)).unwrap_or_default();
            assert_eq!(
                str_field(&changes[id].1, "/reason"),
                format!(
                    "its source {source} was deleted, and it has no evidence quotes to look for in the new corpus"
                ),
                "{id}"
            );
        } else if rows_of(&before.1, id).iter().any(|r| doc_chunks.contains(&r.1)) {
            assert_eq!(changes[id].0, "remapped", "{id}: only its topic rows went");
        }
    }
    assert!(retired > 0);
    assert_eq!(
        lines(&run).len(),
        before.0.len() - retired + changes.values().filter(|c| c.0 == "new").count()
    );
}

#[test]
fn deleting_the_chunk_a_no_answer_query_was_modelled_on_keeps_it_for_review() {
    let f = fixture(&sample_corpus(), &[]);
    let before = lines(&f.set);
    let modelled = |doc: &str| {
        let on = |id: &&String| {
            before[*id].contains("\"type\":\"no_answer\"") && sources(&before[*id])[0].starts_with(doc)
        };
        before.keys().filter(on).cloned().collect::<Vec<_>>()
    };
    let ids = modelled("admin/audit-log.md");
    assert!(!ids.is_empty(), "a no_answer query modelled on the audit log");
    fs_err::remove_file(f.doc("admin/audit-log.md")).unwrap_or_else(|e| panic!("{e}"));
    let run = f.refresh(&[]);
    run.assert_code(0);
    let (changes, now) = (query_changes(&run), lines(&run));
    let queued = queue_ids(&exported(&run, &["--only", "changed"]));
    for id in &ids {
        let (change, log) = &changes[id];
        assert_eq!(change, "relabelled", "{log}");
        assert!(str_field(log, "/reason").starts_with("the chunk it was modelled on was deleted"), "{log}");
        assert!(sources(&now[id]).is_empty(), "{}", now[id]);
        assert!(queued.contains(id), "{id} is queued for review");
    }
}

#[test]
fn a_line_end_change_carries_human_labels() {
    let f = fixture(&sample_corpus(), &[]);
    let mut items = exported(&f.set, &[]);
    for item in items.iter_mut().filter(|i| i["type"] == "direct") {
        item["sources"][0]["grade"] = json!(2);
    }
    accept(&f.set, &items, "graded");
    let human = |run: &Run| rows(run).into_iter().filter(|r| r.3 == "human").count();
    let before = human(&f.set);
    let first = rows(&f.set).into_iter().find(|r| r.3 == "human").unwrap_or_else(|| panic!("a human row"));
    let doc = first.1.split(':').next().unwrap_or_default();
    let text = fs_err::read_to_string(f.doc(doc)).unwrap_or_else(|e| panic!("{e}"));
    f.write_doc(doc, &text.replace('\n', "\r\n"));
    let run = f.refresh(&[]);
    run.assert_code(0);
    assert!(chunk_changes(&run).iter().all(|c| c.2 == "edited"), "{:?}", chunk_changes(&run));
    assert_eq!(human(&run), before, "every human row carried");
    for (id, (change, log)) in query_changes(&run) {
        assert!(log.get("human_not_carried").is_none(), "{id}: {log}");
        assert!(change == "kept" || change == "relabelled" || change == "remapped", "{id}: {log}");
    }
}

#[test]
fn renaming_a_document_relabels_every_label_and_retires_nothing() {
    let f = fixture(&sample_corpus(), &[]);
    let before = (lines(&f.set), rows(&f.set));
    let text = fs_err::read(f.doc("sharing/guest-access.md")).unwrap_or_else(|e| panic!("{e}"));
    fs_err::remove_file(f.doc("sharing/guest-access.md")).unwrap_or_else(|e| panic!("{e}"));
    write(&f.doc("sharing/guests.md"), text);
    let run = f.refresh(&[]);
    run.assert_code(0);
    let changes = chunk_changes(&run);
    assert!(!changes.is_empty());
    for (old, new, change) in &changes {
        assert_eq!(change, "moved");
        assert_eq!(old.replacen("guest-access.md", "guests.md", 1).split(':').next(), new.split(':').next());
    }
    let moved: BTreeMap<String, String> = changes.into_iter().map(|(o, n, _)| (o, n)).collect();
    assert_refreshed(&run, (&before.0, &before.1), &moved, &BTreeSet::new());
    let query_changes = query_changes(&run);
    assert!(query_changes.values().all(|c| c.0 != "retired" && c.0 != "retargeted"));
    for (id, (change, _)) in &query_changes {
        let moved_source = sources(&before.0[id]).iter().any(|s| moved.contains_key(s));
        if ["relabelled", "remapped"].contains(&change.as_str()) {
            assert_eq!(change == "relabelled", moved_source, "{id}: relabelled iff a source moved");
        }
    }
    assert!(query_changes.values().any(|c| c.0 == "relabelled"));
    assert_eq!(rows(&run).len(), before.1.len(), "every row kept");
    let validate = qrelgen(&["validate", "--set", path_str(&run.out)]);
    assert_eq!(validate.status.code(), Some(0), "{}", String::from_utf8_lossy(&validate.stdout));
}

#[test]
fn a_new_document_that_answers_a_no_answer_query_flags_it_first_and_gets_new_queries() {
    let f = fixture(&sample_corpus(), &[]);
    let before = (lines(&f.set), rows(&f.set));
    let no_answer =
        f.set.file("no_answer.txt").lines().next().unwrap_or_else(|| panic!("a no_answer query")).to_owned();
    let candidate = f
        .set
        .jsonl("candidates.jsonl")
        .into_iter()
        .find(|c| str_field(c, "/id") == no_answer)
        .unwrap_or_else(|| panic!("{no_answer} in candidates.jsonl"));
    let term = str_field(&candidate, "/absent_term");
    let query = str_field(&candidate, "/text");
    write(
        &f.doc("admin/new-integrations.md"),
        format!(
            "# The {term} integration\n\nHarbor Sync now works with {term}: {query}. Administrators connect {term} \
             from the admin console under Integrations, choose which shared folders it may read, and can revoke \
             its access at any time. Every change {term} makes shows in the audit log.\n"
        ),
    );
    let dry = f.refresh(&["--dry-run"]);
    dry.assert_code(0);
    assert!(
        dry.stdout.contains("dry run, nothing written") && dry.stdout.contains("may_be_answerable 1"),
        "{}",
        dry.stdout
    );
    assert!(
        !f.set.out.join("refresh").exists() && !f.set.out.join("versions").exists(),
        "a dry run writes nothing"
    );

    let run = f.refresh(&[]);
    run.assert_code(0);
    let added = chunk_changes(&run);
    assert_eq!(added.len(), 1);
    assert_eq!((added[0].0.as_str(), added[0].2.as_str()), ("-", "added"));
    assert_refreshed(&run, (&before.0, &before.1), &BTreeMap::new(), &BTreeSet::new());
    let changes = query_changes(&run);
    assert_eq!(changes[&no_answer].0, "may_be_answerable");
    let line = parse(&lines(&run)[&no_answer]);
    assert_eq!(str_field(&line, "/metadata/status"), "flagged");
    let queue = run.jsonl("review_queue.jsonl");
    assert_eq!(str_field(&queue[0], "/query_id"), no_answer, "flagged first in the queue");
    let new: Vec<&String> = changes.iter().filter(|(_, c)| c.0 == "new").map(|(id, _)| id).collect();
    assert!(!new.is_empty(), "--new-queries auto writes queries for the new document");
    for id in new {
        let srcs = sources(&lines(&run)[id]);
        assert!(
            !srcs.is_empty() && srcs.iter().all(|s| s.starts_with("admin/new-integrations.md:")),
            "{id}: {srcs:?}"
        );
    }
    let none = f.refresh(&[]);
    none.assert_code(0);
    assert!(none.stdout.contains("nothing changed"), "{}", none.stdout);
}

#[test]
fn splitting_a_section_maps_the_chunk_to_both_parts() {
    let f = fixture(&sample_corpus(), &[]);
    let before = (lines(&f.set), rows(&f.set));
    let old = chunk_with(&f.set, "To delete the workspace immediately instead of waiting");
    f.edit(
        "billing/cancelling-your-subscription.md",
        "\n\nTo delete the workspace immediately instead of waiting",
        "\n\n## Deleting the workspace immediately\n\nTo delete the workspace immediately instead of waiting",
    );
    let run = f.refresh(&["--new-queries", "0"]);
    run.assert_code(0);
    let changes = chunk_changes(&run);
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert!(changes.iter().all(|c| c.0 == old && c.2 == "split"));
    let first = chunk_with(&run, "Reactivate");
    let second = chunk_with(&run, "## Deleting the workspace immediately");
    assert_eq!(
        changes.iter().map(|c| c.1.as_str()).collect::<Vec<_>>(),
        [first.as_str(), second.as_str()],
        "the biggest part first"
    );
    // Without evidence quotes a label goes to the biggest part.
    let moved = BTreeMap::from([(old, first)]);
    assert_refreshed(&run, (&before.0, &before.1), &moved, &BTreeSet::new());
    assert!(query_changes(&run).values().all(|c| c.0 != "new"), "--new-queries 0");
}

#[test]
fn human_decisions_are_carried_or_kept_in_the_changelog_with_a_reason() {
    let f = fixture(&sample_corpus(), &[]);
    let export = f.set.out.join("../queue.jsonl");
    let out = path_str(&f.set.out).to_owned();
    let ran = qrelgen(&["review", "export", "--set", &out, "--format", "jsonl", "--to", path_str(&export)]);
    assert_eq!(ran.status.code(), Some(0));
    let mut items: Vec<Value> =
        fs_err::read_to_string(&export).unwrap_or_default().lines().map(parse).collect();
    // Three accepted direct queries from three documents: one renamed, one edited, one untouched.
    let doc =
        |i: &Value| str_field(i, "/sources/0/chunk_id").split(':').next().unwrap_or_default().to_owned();
    let mut picked: Vec<usize> = Vec::new();
    for (at, item) in items.iter().enumerate() {
        let single = item["sources"].as_array().is_some_and(|s| s.len() == 1);
        if item["type"] == "direct" && single && picked.iter().all(|&p| doc(&items[p]) != doc(item)) {
            picked.push(at);
        }
    }
    assert!(picked.len() >= 3);
    for &at in &picked[..3] {
        items[at]["decision"] = json!("accept");
        items[at]["sources"][0]["grade"] = json!(2);
    }
    let filled = f.set.out.join("../filled.jsonl");
    write(&filled, items.iter().map(|v| v.to_string() + "\n").collect::<String>());
    let applied =
        qrelgen(&["review", "apply", "--set", &out, "--decisions", path_str(&filled), "--reviewer", "ann"]);
    assert_eq!(applied.status.code(), Some(0), "{}", String::from_utf8_lossy(&applied.stderr));
    let before = (lines(&f.set), rows(&f.set));
    let [renamed, edited, untouched] = [0, 1, 2].map(|i| &items[picked[i]]);
    let (renamed_id, edited_id, untouched_id) =
        (str_field(renamed, "/query_id"), str_field(edited, "/query_id"), str_field(untouched, "/query_id"));
    let edited_chunk = str_field(edited, "/sources/0/chunk_id").to_owned();
    for (id, chunk) in
        [(renamed_id, str_field(renamed, "/sources/0/chunk_id")), (edited_id, edited_chunk.as_str())]
    {
        assert!(before.1.contains(&(id.to_owned(), chunk.to_owned(), "2".to_owned(), "human".to_owned())));
    }
    // Rename the first document; add a sentence after the first paragraph of the second's chunk.
    let renamed_doc = doc(renamed);
    let text = fs_err::read(f.doc(&renamed_doc)).unwrap_or_else(|e| panic!("{e}"));
    fs_err::remove_file(f.doc(&renamed_doc)).unwrap_or_else(|e| panic!("{e}"));
    write(&f.doc(&renamed_doc.replace(".md", "-renamed.md")), text);
    let chunk_text = str_field(edited, "/sources/0/text");
    let sentence = chunk_text
        .split("\n\n")
        .find(|p| !p.starts_with('#') && p.len() > 30)
        .unwrap_or_else(|| panic!("a paragraph"));
    f.edit(&doc(edited), sentence, &format!("{sentence} This sentence is new."));

    let run = f.refresh(&["--new-queries", "0"]);
    run.assert_code(0);
    let moved: BTreeMap<String, String> =
        chunk_changes(&run).into_iter().filter(|c| c.1 != "-").map(|(o, n, _)| (o, n)).collect();
    assert_refreshed(&run, (&before.0, &before.1), &moved, &BTreeSet::new());
    let after = rows(&run);
    let changes = query_changes(&run);
    // Moved with the same text: the human grade is carried to the new id.
    let new_id = &moved[str_field(renamed, "/sources/0/chunk_id")];
    assert!(after.contains(&(renamed_id.to_owned(), new_id.clone(), "2".to_owned(), "human".to_owned())));
    // Untouched: as it was.
    assert_eq!(rows_of(&after, untouched_id), rows_of(&before.1, untouched_id));
    // Edited, no evidence to look up (offline): the decision no longer applies, and says why.
    let lost = &changes[edited_id].1["human_not_carried"];
    assert_eq!(lost[0]["chunk"], edited_chunk.as_str(), "{}", changes[edited_id].1);
    assert!(rows_of(&after, edited_id).iter().all(|r| r.3 != "human"));
    let manifest = parse(&run.file("manifest.json"));
    assert_eq!(manifest["review"]["version"], 3);
    assert!(manifest["refresh"]["human_share"].as_f64().is_some_and(|s| s > 0.0));
    assert!(
        f.set.out.join("versions/v2/queries.jsonl").is_file()
            && f.set.out.join("review/decisions.jsonl").is_file()
    );
    // The queue's changed part is what `review export --only changed` gives.
    let only = qrelgen(&["review", "export", "--set", &out, "--format", "jsonl", "--only", "changed"]);
    assert_eq!(only.status.code(), Some(0));
    let exported: Vec<String> = String::from_utf8_lossy(&only.stdout)
        .lines()
        .map(|l| str_field(&parse(l), "/query_id").to_owned())
        .collect();
    let queued = run.jsonl("review_queue.jsonl").into_iter().filter(|i| i.get("refresh").is_some());
    assert_eq!(exported, queue_ids(&queued.collect::<Vec<_>>()));
}

/// Runs `qrelgen review ARGS…` on the set in `set`, expecting exit 0; returns its stdout.
fn review(set: &Run, args: &[&str]) -> String {
    let mut all = vec!["review", args[0], "--set", path_str(&set.out)];
    all.extend_from_slice(&args[1..]);
    let ran = finished(&set.out, &qrelgen(&all));
    ran.assert_code(0);
    ran.stdout
}

/// Applies `items` (exported JSONL items) with the decision `accept`, as reviewer `ann`.
fn accept(set: &Run, items: &[Value], name: &str) {
    let path = set.out.join(format!("../{name}.jsonl"));
    let lines: String = items
        .iter()
        .map(|item| {
            let mut item = item.clone();
            item["decision"] = json!("accept");
            item.to_string() + "\n"
        })
        .collect();
    write(&path, lines);
    review(set, &["apply", "--decisions", path_str(&path), "--reviewer", "ann"]);
}

/// The items of `review export --format jsonl ARGS…` of the set in `set` (through a file: a
/// pipe the test does not read while the binary runs holds 64 KiB).
fn exported(set: &Run, args: &[&str]) -> Vec<Value> {
    let path = set.out.join("../export.jsonl");
    let mut all = vec!["export", "--format", "jsonl", "--to", path_str(&path)];
    all.extend_from_slice(args);
    review(set, &all);
    fs_err::read_to_string(&path).unwrap_or_else(|e| panic!("{e}")).lines().map(parse).collect()
}

#[test]
fn the_refreshs_queue_is_what_changed_then_the_previous_queue_and_decisions_still_count() {
    let f = fixture(&sample_corpus(), &[]);
    let previous = f.set.jsonl("review_queue.jsonl");
    let doc =
        |i: &Value| str_field(i, "/sources/0/chunk_id").split(':').next().unwrap_or_default().to_owned();
    let edited = "admin/audit-log.md";
    // Offline queries carry no evidence to find elsewhere: a direct query whose one source goes
    // with its document is retired.
    let single = |i: &&Value| i["type"] == "direct" && i["sources"].as_array().is_some_and(|s| s.len() == 1);
    let deleted = previous.iter().filter(single).map(doc).rfind(|d| d != edited).unwrap_or_default();
    let untouched = |i: &&Value| {
        let docs: Vec<String> = i["sources"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| str_field(s, "/chunk_id").split(':').next().unwrap_or_default().to_owned())
            .collect();
        !docs.iter().any(|d| d == edited || *d == deleted)
    };
    let decided: Vec<Value> = previous.iter().filter(untouched).take(3).cloned().collect();
    accept(&f.set, &decided, "before");
    fs_err::remove_file(f.doc(&deleted)).unwrap_or_else(|e| panic!("{e}"));
    f.edit(edited, "events are kept for 90 days", "events are kept for 120 days, then archived");
    let run = f.refresh(&["--new-queries", "0"]);
    run.assert_code(0);
    let changes = query_changes(&run);
    assert_queue(&run, &changes);
    let queue = run.jsonl("review_queue.jsonl");
    let ids = queue_ids(&queue);
    let retired: Vec<&String> = changes.iter().filter(|(_, c)| c.0 == "retired").map(|(id, _)| id).collect();
    let retired_queued: Vec<&String> =
        retired.iter().copied().filter(|id| queue_ids(&previous).contains(id)).collect();
    assert!(!retired_queued.is_empty(), "a query of the previous queue retired with {deleted}");
    assert!(retired_queued.iter().all(|id| !ids.contains(id)), "a retired query leaves the queue");
    let queued: Vec<Value> = queue.iter().filter(|i| i["refresh"]["version"] == 3).cloned().collect();
    assert!(queued.iter().any(|i| i["refresh"]["change"] == "retargeted"), "{queued:?}");
    let carried_decided: Vec<&Value> = decided
        .iter()
        .filter(|d| ids[queued.len()..].iter().any(|id| id == str_field(d, "/query_id")))
        .collect();
    assert_eq!(carried_decided.len(), 3, "the decided items the refresh did not change stay queued");

    // Decisions applied before the refresh still count for the items it carried over; the
    // queries it queued are strata of their own, every one of them in the queue.
    let status = parse(&review(&run, &["status", "--json"]));
    assert_eq!((total_of(&status, "queue"), total_of(&status, "reviewed")), (queue.len() as u64, 3));
    assert_eq!(status["refreshed"], true);
    let refreshed: Vec<&Value> = status["types"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["strata"].as_array().into_iter().flatten())
        .filter(|s| s["refreshed"] == true)
        .collect();
    assert_eq!(refreshed.iter().map(|s| s["queue"].as_u64().unwrap_or(0)).sum::<u64>(), queued.len() as u64);
    assert!(refreshed.iter().all(|s| s["queue"] == s["in_set"]), "{refreshed:?}");

    // `--only changed` exports exactly the changed part, with what the refresh did; a decision
    // applied since takes an item out of it, not out of the whole queue.
    let only = exported(&run, &["--only", "changed"]);
    assert_eq!(queue_ids(&only), queue_ids(&queued));
    for (exported, queued) in only.iter().zip(&queued) {
        assert_eq!(exported["refresh"], queued["refresh"]);
        assert_eq!(str_field(exported, "/refresh/change"), changes[str_field(exported, "/query_id")].0);
    }
    accept(&run, &only[..1], "after");
    let only_now = exported(&run, &["--only", "changed"]);
    assert_eq!(queue_ids(&only_now), queue_ids(&queued[1..]), "the decided one is skipped");
    let all = exported(&run, &[]);
    assert_eq!(queue_ids(&all), ids, "the whole queue keeps every item");
    let status = parse(&review(&run, &["status", "--json"]));
    assert_eq!(total_of(&status, "reviewed"), 4);
}

/// The sum of `key` over the types of a `review status --json`.
fn total_of(status: &Value, key: &str) -> u64 {
    status["types"].as_array().into_iter().flatten().map(|t| t[key].as_u64().unwrap_or(0)).sum()
}

/// The queue of a refresh of the sample set, reviewed as `tests/interop/label-studio.sh` does:
/// the build's queue decided in a real Label Studio and applied, then the corpus changed.
fn label_studio_reviewed_and_refreshed() -> Fixture {
    let f = fixture(&sample_corpus(), &[]);
    let map = label_studio_fixture("annotators.txt");
    let decisions = label_studio_fixture("export.json");
    review(&f.set, &["apply", "--decisions", path_str(&decisions), "--reviewer-map", path_str(&map)]);
    f.edit("admin/audit-log.md", "events are kept for 90 days", "events are kept for 120 days");
    f.edit(
        "api/api-tokens.md",
        "Each person can hold up to 20 active",
        "Each person can hold up to 50 active",
    );
    fs_err::remove_file(f.doc("billing/changing-your-plan.md")).unwrap_or_else(|e| panic!("{e}"));
    f.refresh(&[]).assert_code(0);
    f
}

#[test]
fn a_real_label_studio_export_of_the_refreshs_queue_applies_and_settles_it() {
    let f = label_studio_reviewed_and_refreshed();
    let export = label_studio_fixture("refresh-export.json");
    let tasks: Vec<Value> = serde_json::from_str(&fs_err::read_to_string(&export).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}"));
    let ids = |items: &[Value], pointer: &str| -> Vec<String> {
        items.iter().map(|t| str_field(t, pointer).to_owned()).collect()
    };
    let hint = "the fixture no longer fits: rerun tests/interop/label-studio.sh --update-fixtures";
    let queued = exported(&f.set, &["--only", "changed"]);
    assert_eq!(ids(&tasks, "/data/query_id"), ids(&queued, "/query_id"), "{hint}");
    for task in &tasks {
        assert!(str_field(task, "/data/heading").contains(" · refresh: "), "{task}");
        assert!(str_field(task, "/data/refresh").contains("Changed by the refresh to version 3"), "{task}");
    }

    let map = label_studio_fixture("annotators.txt");
    let applied =
        review(&f.set, &["apply", "--decisions", path_str(&export), "--reviewer-map", path_str(&map)]);
    assert!(
        applied.starts_with("version 4 of ")
            && applied.contains(
                ": 2 accepted, 0 edited, 0 answerable, 1 rejected, 1 grades; 94 queries, 261 qrels rows"
            ),
        "{applied}"
    );
    assert!(exported(&f.set, &["--only", "changed"]).is_empty(), "every changed item is settled");
    let graded = &tasks[2]["data"];
    let (query, chunk) = (str_field(graded, "/query_id"), str_field(graded, "/source_1_id"));
    let row = rows(&f.set).into_iter().find(|r| r.0 == query && r.1 == chunk);
    assert_eq!(row.map(|r| (r.2, r.3)), Some(("2".to_owned(), "human".to_owned())), "{query} {chunk}");
    let rejected = str_field(&tasks[1]["data"], "/query_id");
    assert!(!lines(&f.set).contains_key(rejected), "{rejected} was rejected");
}

#[test]
fn every_export_format_shows_what_the_refresh_changed() {
    let f = fixture(&sample_corpus(), &[]);
    let old = chunk_with(&f.set, "events are kept for 90 days");
    f.edit(
        "admin/audit-log.md",
        "events are kept for 90 days",
        "events are kept for 120 days, then archived",
    );
    let run = f.refresh(&["--new-queries", "0"]);
    run.assert_code(0);
    let changes = query_changes(&run);
    let (id, (_, log)) = changes
        .iter()
        .find(|(_, c)| c.0 == "retargeted")
        .unwrap_or_else(|| panic!("a retargeted query: {changes:?}"));
    let reason = str_field(log, "/reason");
    let csv_path = run.out.join("../changed.csv");
    review(&run, &["export", "--format", "csv", "--only", "changed", "--to", path_str(&csv_path)]);
    let mut csv = csv::Reader::from_path(&csv_path).unwrap_or_else(|e| panic!("{e}"));
    let header: Vec<String> =
        csv.headers().unwrap_or_else(|e| panic!("{e}")).iter().map(str::to_owned).collect();
    assert_eq!(
        header[..7],
        ["query_id", "type", "status", "reason", "refresh_change", "refresh_reason", "refresh_old_sources"]
    );
    let rows: Vec<csv::StringRecord> = csv.records().map(|r| r.unwrap_or_else(|e| panic!("{e}"))).collect();
    let row = rows.iter().find(|r| &r[0] == id.as_str()).unwrap_or_else(|| panic!("{id} in the CSV"));
    assert_eq!([&row[4], &row[5], &row[6]], ["retargeted", reason, old.as_str()]);

    let tasks_path = run.out.join("../changed.json");
    review(&run, &["export", "--format", "label-studio", "--only", "changed", "--to", path_str(&tasks_path)]);
    let tasks: Vec<Value> = serde_json::from_str(&fs_err::read_to_string(&tasks_path).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}"));
    let task = tasks
        .iter()
        .find(|t| t["data"]["query_id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} in the tasks"));
    assert!(str_field(task, "/data/heading").ends_with(&format!(" · refresh: retargeted · {id}")), "{task}");
    assert_eq!(
        str_field(task, "/data/refresh"),
        format!(
            "<div style=\"background: #fff4e5; padding: 4px 8px; margin-top: 8px\"><b>Changed by the refresh to version 2: retargeted</b><div>{reason}</div><div>old sources: {old}</div></div>"
        )
    );
    let config = fs_err::read_to_string(tasks_path.with_extension("xml")).unwrap_or_default();
    assert!(config.contains("  <Text name=\"query\" value=\"$query\"/>\n  <HyperText name=\"refresh\" value=\"$refresh\" inline=\"true\"/>\n"), "{config}");

    // The whole queue: the items the refresh carried over show no change, and their tasks an
    // empty one.
    let all = exported(&run, &[]);
    assert!(all.iter().any(|i| i.get("refresh").is_none()));
    for item in &all {
        let change = changes[str_field(item, "/query_id")].0.as_str();
        let carried = ["kept", "remapped", "pool_judged"].contains(&change);
        assert_eq!(item.get("refresh").is_none(), carried, "{change}: {item}");
    }
}

#[test]
fn only_changed_on_a_set_no_refresh_made_says_so_and_refresh_takes_no_review_size() {
    let f = fixture(&sample_corpus(), &[]);
    let out = path_str(&f.set.out).to_owned();
    let ran = finished(
        &f.set.out,
        &qrelgen(&["review", "export", "--set", &out, "--format", "jsonl", "--only", "changed"]),
    );
    ran.assert_code(2);
    assert!(ran.stdout.is_empty(), "{}", ran.stdout);
    assert!(
        ran.stderr.contains("no refresh has run on this set since it was built")
            && ran.stderr.contains("hint: drop --only changed to export the whole review queue"),
        "{}",
        ran.stderr
    );
    assert!(!ran.stderr.contains("changelog.jsonl"), "{}", ran.stderr);
    // A plain export of a set never refreshed has no refresh fields.
    let all = exported(&f.set, &[]);
    assert!(all.iter().all(|i| i.get("refresh").is_none()));
    let before = snapshot(&f.set.out);
    f.edit("admin/audit-log.md", "events are kept for 90 days", "events are kept for 120 days");
    for flag in ["--review-size", "--review-min-per-type"] {
        let run = f.refresh(&[flag, "10"]);
        run.assert_code(2);
        assert!(run.stderr.contains(&format!("{flag} does not apply to a refresh")), "{}", run.stderr);
    }
    assert_eq!(snapshot(&f.set.out), before, "nothing written");
}

#[test]
fn an_unchanged_corpus_is_the_identity_on_every_file() {
    for corpus in [sample_corpus(), sample_corpus().with_file_name("haigang-zh")] {
        let f = fixture(&corpus, &[]);
        // The corpus hash, taken while chunking, tells: no index is needed.
        fs_err::remove_dir_all(f.set.out.join("index")).unwrap_or_else(|e| panic!("{e}"));
        let before = snapshot(&f.set.out);
        let run = f.refresh(&[]);
        run.assert_code(0);
        assert!(run.stdout.starts_with("nothing changed"), "{}", run.stdout);
        assert_eq!(snapshot(&f.set.out), before, "{}", corpus.display());
        assert!(!f.set.out.join("index").exists(), "no index was built");
        let dry = f.refresh(&["--dry-run"]);
        dry.assert_code(0);
        assert_eq!(snapshot(&f.set.out), before);
    }
}

/// Every entry under `dir` (`dir` itself too): its kind, size and modification time.
fn listing(dir: &Path) -> BTreeMap<PathBuf, (bool, u64, std::time::SystemTime)> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        // The writer's lock file records each writer: the one file every refresh writes.
        .filter(|e| !super::is_lock_file(e.path()))
        .map(|e| {
            let meta = e.metadata().unwrap_or_else(|e| panic!("{e}"));
            let modified = meta.modified().unwrap_or_else(|e| panic!("{e}"));
            (e.path().strip_prefix(dir).unwrap_or(e.path()).to_owned(), (meta.is_dir(), meta.len(), modified))
        })
        .collect()
}

/// The names in `dir`.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs_err::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn an_unchanged_corpus_creates_deletes_and_writes_nothing_in_the_set() {
    let f = fixture(&sample_corpus(), &[]);
    // A killed run's staging folder: left alone by a refresh that stages nothing.
    write(&f.set.out.join(".staging/corpus.jsonl"), "a killed run's\n");
    // Every mtime read below must differ from a rewrite's.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let before = listing(&f.set.out);
    let parent = f.set.out.parent().unwrap_or_else(|| panic!("no parent"));
    let beside = names(parent);
    let run = f.refresh(&[]);
    run.assert_code(0);
    assert!(run.stdout.starts_with("nothing changed"), "{}", run.stdout);
    assert_eq!(listing(&f.set.out), before);
    assert_eq!(names(parent), beside, "nothing made beside the set");
    // A refresh that changes something stages in the set, clearing the leftover first, and
    // publishes as before.
    f.edit("admin/audit-log.md", "events are kept for 90 days", "events are kept for 120 days");
    let changed = f.refresh(&[]);
    changed.assert_code(0);
    assert_eq!(names(parent), beside);
    assert_eq!(parse(&changed.file("manifest.json"))["review"]["version"], 2);
    assert!(changed.file("corpus.jsonl").contains("events are kept for 120 days"));
    assert!(!changed.file("corpus.jsonl").contains("a killed run's"));
    assert!(!f.set.out.join(".staging").exists(), "the leftover is cleared");
}

#[test]
fn a_refresh_chunks_chinese_documents_with_the_recorded_chinese_size_and_overlap() {
    // `--chunk-overlap` alone: the Chinese size keeps its default (400), the overlap is 10 for
    // both; the refresh must not fall back to the defaults (overlap 100, Chinese 40).
    let f = fixture(&sample_corpus().with_file_name("haigang-zh"), &["--chunk-overlap", "10"]);
    let chunking = |run: &Run| parse(&run.file("manifest.json"))["config"]["chunking"].clone();
    let built = chunking(&f.set);
    assert_eq!((built["size"].clone(), built["size_zh"].clone()), (json!(1000), json!(400)), "{built}");
    assert_eq!((built["overlap"].clone(), built["overlap_zh"].clone()), (json!(10), json!(10)), "{built}");
    let first = walkdir::WalkDir::new(&f.corpus)
        .sort_by_file_name()
        .into_iter()
        .flatten()
        .find(|e| e.file_type().is_file())
        .map_or_else(|| panic!("an empty corpus"), |e| e.path().to_owned());
    let append = |line: &str| {
        let text = fs_err::read_to_string(&first).unwrap_or_else(|e| panic!("{e}"));
        write(&first, format!("{text}\n\n{line}\n"));
    };
    append("港口的新规定从下个月开始执行，所有船只都必须提前申请靠泊时间。");
    let run = f.refresh(&["--new-queries", "0"]);
    run.assert_code(0);
    assert_eq!(chunking(&run), built, "the recorded chunking, Chinese size and overlap included");
    let fresh_dir = tempdir();
    let fresh = build(fresh_dir.path(), &f.corpus, &["--quiet", "--chunk-overlap", "10"]);
    fresh.assert_code(0);
    assert_eq!(
        chunking_files(&f.set.out),
        chunking_files(&fresh.out),
        "the chunks of a build with those settings"
    );
    // A --chunk-size given to the refresh sets both sizes, over the recorded Chinese one.
    append("码头的开放时间也有调整。");
    let run = f.refresh(&["--new-queries", "0", "--chunk-size", "300"]);
    run.assert_code(0);
    let now = chunking(&run);
    assert_eq!((now["size"].clone(), now["size_zh"].clone()), (json!(300), json!(300)), "{now}");
    assert_eq!(now["overlap_zh"], json!(10), "{now}");
}

/// A mock model answering after `delay_ms`, and a folder with a copy of the sample corpus
/// (`corpus`) and a set built from it with that model (`set`).
async fn llm_scene(
    delay_ms: u64,
) -> (wiremock::MockServer, std::sync::Arc<mock::Counters>, tempfile::TempDir) {
    let (mut model, counters) = mock::model(Behaviour::Good);
    model.delay = std::time::Duration::from_millis(delay_ms);
    let server = mock::start(model).await;
    let dir = tempdir();
    let corpus = dir.path().join("corpus");
    copy_tree(&sample_corpus(), &corpus);
    build_llm(&corpus, &dir.path().join("set"), &format!("{}/v1", server.uri())).await;
    (server, counters, dir)
}

/// Adds a page on a new feature to `corpus`.
fn add_kiosk_page(corpus: &Path) {
    write(
        &corpus.join("admin/kiosks.md"),
        "# Kiosk mode\n\nKiosk mode locks the Harbor Sync desktop app to one shared folder and hides account \
         settings from visitors. An administrator enables it in the admin console under Devices, then pairs the \
         computer with a one-time code shown on its screen.\n",
    );
}

/// Builds a set of 12 queries from `corpus` into `set` with the mock model at `base_url`.
async fn build_llm(corpus: &Path, set: &Path, base_url: &str) {
    let (c, s, u) = (path_str(corpus).to_owned(), path_str(set).to_owned(), base_url.to_owned());
    let built = tokio::task::spawn_blocking(move || {
        let args = ["build", "--corpus", &c, "--out", &s, "--base-url", &u, "--model", "mock-model"];
        let sizes = ["--queries", "12", "--review-size", "6", "-q"];
        qrelgen_with_env(&[&args[..], &sizes].concat(), &[("OPENAI_API_KEY", "sk-test")])
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(built.status.code(), Some(0), "{}", String::from_utf8_lossy(&built.stderr));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_llm_path_calls_only_for_new_material_and_never_twice() {
    let (_server, counters, dir) = llm_scene(0).await;
    let (corpus, set, spare) = (dir.path().join("corpus"), dir.path().join("set"), dir.path().join("spare"));
    let env = [("OPENAI_API_KEY", "sk-test")];
    copy_tree(&set, &spare);
    add_kiosk_page(&corpus);
    let before = counters.requests();
    let refresh = |set: PathBuf| {
        let c = path_str(&corpus).to_owned();
        tokio::task::spawn_blocking(move || {
            qrelgen_with_env(
                &["refresh", "--set", path_str(&set), "--corpus", &c, "--new-queries", "2", "-q"],
                &env,
            )
        })
    };
    let first = refresh(set.clone()).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(first.status.code(), Some(0), "{}", String::from_utf8_lossy(&first.stderr));
    let spent = counters.requests() - before;
    assert!(spent > 0, "new queries for the new document are written by the LLM");
    let changelog = fs_err::read_to_string(set.join("refresh/changelog.jsonl")).unwrap_or_default();
    let new: Vec<Value> = changelog.lines().map(parse).filter(|l| l["change"] == "new").collect();
    assert!(!new.is_empty(), "{changelog}");
    // A refresh killed after its calls (the cache holds them, nothing was published) resumes
    // without calling again.
    fs_err::copy(set.join("llm-cache.sqlite"), spare.join("llm-cache.sqlite"))
        .unwrap_or_else(|e| panic!("{e}"));
    let after_first = counters.requests();
    let resumed = refresh(spare.clone()).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert_eq!(counters.requests(), after_first, "every call came from the cache");
    assert_eq!(
        fs_err::read_to_string(spare.join("queries.jsonl")).ok(),
        fs_err::read_to_string(set.join("queries.jsonl")).ok(),
        "the resumed refresh writes the same set"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refresh_killed_mid_way_resumes_without_paying_twice() {
    let (_server, counters, dir) = llm_scene(150).await;
    let (corpus, set, reference) =
        (dir.path().join("corpus"), dir.path().join("set"), dir.path().join("reference"));
    copy_tree(&set, &reference);
    add_kiosk_page(&corpus);
    let args = ["--new-queries", "8", "--queries-per-call", "2", "--concurrency", "1"];
    let before = counters.requests();
    refresh_llm(&reference, &corpus, &args, "sk-test").await.assert_code(0);
    let total = counters.requests() - before;

    let cache = set.join("llm-cache.sqlite");
    let paid_by_the_build = llm::cached_replies(&cache);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_qrelgen"))
        .args(["refresh", "--set", path_str(&set), "--corpus", path_str(&corpus), "-q"])
        .args(args)
        .env("OPENAI_API_KEY", "sk-test")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let started = counters.requests();
    // Four requests seen: the first two replies (150 ms each) are stored.
    llm::wait_for(&counters, started + 4).await;
    child.kill().unwrap_or_else(|e| panic!("{e}"));
    let _ = child.wait();
    let paid = llm::cached_replies(&cache) - paid_by_the_build;
    assert!(paid >= 2 && paid < total, "{paid} of {total} calls were paid before the kill");
    assert!(
        !set.join("refresh").exists() && !set.join("versions").exists(),
        "a killed refresh publishes nothing"
    );
    assert_eq!(
        fs_err::read(set.join("queries.jsonl")).ok(),
        fs_err::read(reference.join("versions/v1/queries.jsonl")).ok()
    );

    let before_rerun = counters.requests();
    let rerun = refresh_llm(&set, &corpus, &args, "sk-test").await;
    rerun.assert_code(0);
    assert_eq!(
        counters.requests() - before_rerun,
        total - paid,
        "the rerun makes only the calls not yet paid"
    );
    for file in [
        "queries.jsonl",
        "qrels.trec",
        "qrels/provenance.tsv",
        "refresh/changelog.jsonl",
        "review_queue.jsonl",
    ] {
        assert_eq!(
            fs_err::read_to_string(set.join(file)).ok(),
            fs_err::read_to_string(reference.join(file)).ok(),
            "{file}: the resumed refresh writes what an uninterrupted one does"
        );
    }
}

/// Runs `qrelgen refresh --set SET --corpus CORPUS ARGS…` off the async runtime, with `key` in
/// `OPENAI_API_KEY`.
async fn refresh_llm(set: &Path, corpus: &Path, args: &[&str], key: &str) -> Run {
    let mut all: Vec<String> =
        ["refresh", "--set", path_str(set), "--corpus", path_str(corpus), "-q"].map(str::to_owned).to_vec();
    all.extend(args.iter().map(|a| (*a).to_owned()));
    let (out, key) = (set.to_owned(), key.to_owned());
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = all.iter().map(String::as_str).collect();
        finished(&out, &qrelgen_with_env(&args, &[("OPENAI_API_KEY", &key)]))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn with_judge_pool_the_judge_grades_the_chunks_new_to_a_pool_and_only_once() {
    let dir = tempdir();
    let corpus = super::controls::pool_corpus(dir.path());
    let (model, counters) = mock::model(Behaviour::Good);
    let server = mock::start(model).await;
    let (set, spare) = (dir.path().join("set"), dir.path().join("spare"));
    let args = ["--corpus", path_str(&corpus), "--queries", "1", "--mix", "direct=1", "--judge-pool", "2"];
    let built = super::llm::run_on(&server, &set, &[&args[..], &["--per-doc-cap", "1"]].concat()).await;
    built.assert_code(0);
    copy_tree(&set, &spare);
    let query = str_field(&built.jsonl("queries.jsonl")[0], "/_id").to_owned();
    assert!(
        str_field(&built.jsonl("queries.jsonl")[0], "/metadata/sources/0").starts_with("keys.md:"),
        "the mock writes from keys.md"
    );
    // Every word of keys.md: the judge (the mock) grades the new chunk 3.
    write(
        &corpus.join("recovery.md"),
        "# Recovery keys\n\nEncrypted folders require recovery keys before sharing externally with partners, \
         and partners keep them.\n",
    );
    let (requests, judged) = (counters.requests(), counters.judge_requests());
    let dry = refresh_llm(&set, &corpus, &["--new-queries", "0", "--dry-run"], "sk-refresh").await;
    dry.assert_code(0);
    assert!(dry.stdout.contains("LLM calls it would make: 1 "), "the one ask: {}", dry.stdout);
    assert_eq!(counters.requests(), requests, "a dry run asks nothing");
    let run = refresh_llm(&set, &corpus, &["--new-queries", "0"], "sk-refresh").await;
    run.assert_code(0);
    assert_eq!(counters.judge_requests() - judged, 1, "one ask: the one chunk new to the pool");
    assert_eq!(counters.requests() - requests, 1, "and no other call");
    let new_chunk = chunk_with(&run, "partners keep them");
    let after = rows(&run);
    assert_eq!(
        rows_of(&after, &query).into_iter().filter(|r| r.3 == "judge").cloned().collect::<Vec<_>>(),
        [
            rows_of(&rows(&built), &query).into_iter().find(|r| r.3 == "judge").cloned().unwrap_or_default(),
            (query.clone(), new_chunk.clone(), "3".to_owned(), "judge".to_owned())
        ],
        "the build's judge row, then the new one"
    );
    assert!(run.trec().contains(&(query.clone(), new_chunk.clone(), 3)));
    let (change, log) = &query_changes(&run)[&query];
    assert_eq!(change, "pool_judged", "{log}");
    assert_eq!(log["pool_grades"], json!([{"chunk": new_chunk, "grade": 3}]));
    assert!(log.get("new_pool").is_none(), "nothing left unjudged: {log}");
    // A judged pool is not queued: the build's item stays, made again with the new chunk in its
    // pool and the judge's grade.
    let queue = run.jsonl("review_queue.jsonl");
    assert_eq!(queue_ids(&queue), std::slice::from_ref(&query));
    assert!(queue[0].get("refresh").is_none(), "{}", queue[0]);
    let pooled =
        queue[0]["pool"].as_array().into_iter().flatten().find(|p| p["chunk_id"] == new_chunk.as_str());
    assert_eq!(pooled.map(|p| p["grade"].clone()), Some(json!(3)), "{}", queue[0]);
    assert_eq!(parse(&run.file("manifest.json"))["refresh"]["llm_calls"], 1);

    // The same refresh again (a copy of the set before it, with the cache it filled): no call.
    fs_err::copy(set.join("llm-cache.sqlite"), spare.join("llm-cache.sqlite"))
        .unwrap_or_else(|e| panic!("{e}"));
    let requests = counters.requests();
    let again = refresh_llm(&spare, &corpus, &["--new-queries", "0"], "sk-refresh").await;
    again.assert_code(0);
    assert_eq!(counters.requests(), requests, "every grade came from the cache");
    assert_eq!(again.file("qrels/provenance.tsv"), run.file("qrels/provenance.tsv"));
}

#[tokio::test(flavor = "multi_thread")]
async fn llm_settings_come_from_the_manifest_and_flags_override_them() {
    let (model, _) = mock::model(Behaviour::Good);
    let server = mock::start(model).await;
    let dir = tempdir();
    let corpus = dir.path().join("corpus");
    copy_tree(&sample_corpus(), &corpus);
    let set = dir.path().join("set");
    let settings = [
        "--concurrency",
        "2",
        "--rpm",
        "100000",
        "--tpm",
        "90000000",
        "--timeout",
        "60",
        "--temperature",
        "0.3",
        "--max-tokens",
        "900",
        "--queries-per-call",
        "3",
        "--repairs",
        "1",
        "--styles",
        "question=0.6,keyword=0.4",
        "--json-mode",
        "json_object",
        "--max-tokens-total",
        "50000000",
        "--price-prompt",
        "0.5",
        "--price-completion",
        "1.5",
        "--max-cost",
        "100",
    ];
    let built =
        super::llm::run_on(&server, &set, &[&["--corpus", path_str(&corpus)], &settings[..]].concat()).await;
    built.assert_code(0);
    let recorded = parse(&built.file("manifest.json"))["config"]["generator"].clone();
    assert_eq!(recorded["llm"]["limits"]["concurrency"], 2, "{recorded}");
    let key = "sk-refresh-SECRET-4b1e";
    write(
        &corpus.join("admin/kiosks.md"),
        "# Kiosk mode\n\nKiosk mode locks the desktop app to one shared folder.\n",
    );
    let first = refresh_llm(&set, &corpus, &["--new-queries", "1"], key).await;
    first.assert_code(0);
    assert_eq!(
        parse(&first.file("manifest.json"))["config"]["generator"],
        recorded,
        "every LLM setting restored"
    );

    write(
        &corpus.join("admin/kiosks.md"),
        "# Kiosk mode\n\nKiosk mode locks the desktop app to two shared folders.\n",
    );
    let second = refresh_llm(
        &set,
        &corpus,
        &["--new-queries", "1", "--temperature", "0.2", "--concurrency", "3"],
        key,
    )
    .await;
    second.assert_code(0);
    let mut expected = recorded.clone();
    expected["llm"]["temperature"] = json!(0.2);
    expected["llm"]["limits"]["concurrency"] = json!(3);
    let now = parse(&second.file("manifest.json"))["config"]["generator"].clone();
    assert_eq!(now["llm"]["temperature"].as_f64().map(|t| (t * 100.0).round()), Some(20.0), "{now}");
    expected["llm"]["temperature"] = now["llm"]["temperature"].clone();
    assert_eq!(now, expected, "the flags override and are recorded, the rest stays");
    for (path, bytes) in snapshot(&set) {
        assert!(!String::from_utf8_lossy(&bytes).contains(key), "{} holds the API key", path.display());
    }
}

/// The files of a set's current version (not its index, cache, review ledger or kept versions).
fn version_files(set: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = snapshot(set);
    files.retain(|path, _| {
        !["index", "versions", "review"].iter().any(|d| path.starts_with(d))
            && !path.to_string_lossy().starts_with("llm-cache")
            && !super::is_lock_file(path)
    });
    files
}

#[test]
fn the_previous_version_stays_whole_and_byte_identical_under_versions() {
    let f = fixture(&sample_corpus(), &[]);
    let v1 = version_files(&f.set.out);
    f.edit("billing/cancelling-your-subscription.md", "Reactivate", "Reactivate it");
    f.refresh(&["--new-queries", "0"]).assert_code(0);
    let v2 = version_files(&f.set.out);
    assert!(
        v2.contains_key(Path::new("refresh/changelog.jsonl")) && v2.contains_key(Path::new("report.html"))
    );
    let kept = |n: u32| {
        let dir = f.set.out.join(format!("versions/v{n}"));
        snapshot(&dir)
    };
    assert_eq!(kept(1), v1, "version 1, every file");
    f.write_doc(
        "admin/kiosks.md",
        "# Kiosk mode\n\nKiosk mode locks the desktop app to one shared folder.\n",
    );
    f.refresh(&["--new-queries", "0"]).assert_code(0);
    assert_eq!(kept(2), v2, "version 2, its refresh files and report.html included");
    assert_eq!(kept(1), v1, "version 1 untouched");
    assert_ne!(
        version_files(&f.set.out)[Path::new("refresh/changelog.jsonl")],
        v2[Path::new("refresh/changelog.jsonl")]
    );
}

/// `(query, chunk, pooled-by, rank, grade)` rows of `qrels/pool.tsv`.
fn pool_rows(run: &Run) -> BTreeSet<(String, String, String, String, String)> {
    let text = run.file("qrels/pool.tsv");
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("query-id\tcorpus-id\tpooled-by\trank\tgrade"));
    lines
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 5, "{l:?}");
            (f[0].to_owned(), f[1].to_owned(), f[2].to_owned(), f[3].to_owned(), f[4].to_owned())
        })
        .collect()
}

#[test]
fn a_refresh_rewrites_the_pools_of_qrels_pool_tsv() {
    let dir = tempdir();
    let corpus = dir.path().join("corpus");
    copy_tree(&sample_corpus(), &corpus);
    let first = build(&dir.path().join("first"), &corpus, &["-q"]);
    first.assert_code(0);
    let queries = first.jsonl("queries.jsonl");
    let direct: Vec<&Value> = queries.iter().filter(|q| q["metadata"]["type"] == "direct").collect();
    let doc =
        |q: &Value| str_field(q, "/metadata/sources/0").split(':').next().unwrap_or_default().to_owned();
    let (kept, kept_doc) = (str_field(direct[0], "/_id"), doc(direct[0]));
    let retired = direct.iter().find(|q| doc(q) != kept_doc).unwrap_or_else(|| panic!("two documents"));
    let retired_doc = doc(retired);
    let run_file = dir.path().join("mine.run");
    write(&run_file, format!("{kept} Q0 {kept_doc} 1 9.0 mine\n"));
    let set = build(dir.path(), &corpus, &["-q"]);
    set.assert_code(0);
    let f = Fixture { _dir: dir, corpus, set };
    // A refresh given --pool-run pools the run in its re-check (and records it for later ones).
    f.write_doc("zz-aside.md", "# Aside\n\nA page on nothing the queries ask about.\n");
    let pooled = f.refresh(&["--new-queries", "0", "--pool-run", path_str(&run_file)]);
    pooled.assert_code(0);
    let before = pool_rows(&pooled);
    assert!(before.iter().any(|r| r.0 == str_field(retired, "/_id")));
    // A new page made of the kept query's words enters its pool; the other query's source goes.
    let text = str_field(direct[0], "/text");
    f.write_doc("zz-new.md", &format!("# {text}\n\n{text}. {text}. {text}.\n"));
    fs_err::remove_file(f.doc(&retired_doc)).unwrap_or_else(|e| panic!("{e}"));
    let run = f.refresh(&["--new-queries", "0"]);
    run.assert_code(0);
    let after = pool_rows(&run);
    let new_chunk = chunk_with(&run, &format!("{text}. {text}."));
    let entered: Vec<_> = after.iter().filter(|r| r.0 == kept && r.1 == new_chunk).collect();
    assert_eq!(entered.len(), 1, "{after:?}");
    assert_eq!(
        (entered[0].2.as_str(), entered[0].4.as_str()),
        ("round_trip", ""),
        "pooled by the round trip, unjudged"
    );
    assert!(after.iter().any(|r| r.0 == kept && r.2 == "mine"), "the run's pool is kept");
    let in_set: BTreeSet<String> = lines(&run).into_keys().collect();
    assert!(after.iter().all(|r| in_set.contains(&r.0)), "only queries of the new version");
    assert!(!after.iter().any(|r| r.0 == str_field(retired, "/_id")), "the retired query's pool went");
    let corpus_ids: BTreeSet<String> =
        run.jsonl("corpus.jsonl").iter().map(|c| str_field(c, "/_id").to_owned()).collect();
    assert!(after.iter().all(|r| corpus_ids.contains(&r.1)), "no chunk of the old corpus only");
    assert_ne!(after, before);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dry_run_counts_the_judge_calls_of_new_queries_too() {
    let dir = tempdir();
    let corpus = super::controls::pool_corpus(dir.path());
    let (model, counters) = mock::model(Behaviour::Good);
    let server = mock::start(model).await;
    let set = dir.path().join("set");
    let args = ["--corpus", path_str(&corpus), "--queries", "1", "--mix", "direct=1", "--judge-pool", "2"];
    super::llm::run_on(&server, &set, &[&args[..], &["--per-doc-cap", "1"]].concat()).await.assert_code(0);
    write(
        &corpus.join("recovery.md"),
        "# Recovery keys\n\nEncrypted folders require recovery keys before sharing externally with partners, \
         and partners keep them.\n",
    );
    let requests = counters.requests();
    let calls = |run: &Run| -> u64 {
        // The low end of the range: round 1 with every query kept.
        let after = run.stdout.split("LLM calls it would make: ").nth(1).unwrap_or_default();
        let low = after.split([' ', '–']).next();
        low.and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{}", run.stdout))
    };
    let pool_only = refresh_llm(&set, &corpus, &["--new-queries", "0", "--dry-run"], "sk-refresh").await;
    pool_only.assert_code(0);
    let with_new = refresh_llm(&set, &corpus, &["--new-queries", "1", "--dry-run"], "sk-refresh").await;
    with_new.assert_code(0);
    assert!(with_new.stdout.contains("\n1 new query wanted; "), "{}", with_new.stdout);
    assert!(pool_only.stdout.contains("\n0 new queries wanted; "), "{}", pool_only.stdout);
    // The new query's generation call, the gate's ask about its source, and the judge's
    // --judge-pool 2 asks about its pool.
    assert_eq!(calls(&with_new) - calls(&pool_only), 1 + 1 + 2, "{}", with_new.stdout);

    assert_eq!(counters.requests(), requests, "a dry run asks nothing");
}

#[test]
fn a_rewritten_chunk_gets_new_queries_as_an_added_one_does() {
    let f = fixture(&sample_corpus(), &[]);
    let old = chunk_with(&f.set, "events are kept for 90 days");
    // Some two fifths of its 3-word shingles new.
    f.edit(
        "admin/audit-log.md",
        "and can be streamed to your own security tools through the API.",
        "and can be exported as signed monthly archives for auditors.",
    );
    let run = f.refresh(&["--new-queries", "2"]);
    run.assert_code(0);
    let new = chunk_with(&run, "exported as signed monthly archives for auditors");
    assert_eq!(chunk_changes(&run), [(old.clone(), new.clone(), "edited".to_owned())]);
    let similarity: f64 = run
        .file("refresh/chunk_map.tsv")
        .lines()
        .find(|l| l.starts_with(&format!("{old}\t")))
        .and_then(|l| l.rsplit('\t').next()?.parse().ok())
        .unwrap_or(1.0);
    assert!(similarity < 0.8, "rewritten, not touched up: {similarity}");
    // Both new queries are written for the rewritten chunk, the only new material.
    let changes = query_changes(&run);
    let lines = lines(&run);
    let new_queries: Vec<&String> = changes.iter().filter(|(_, c)| c.0 == "new").map(|(id, _)| id).collect();
    assert_eq!(new_queries.len(), 2, "{changes:?}");
    for id in new_queries {
        assert_eq!(sources(&lines[id]), std::slice::from_ref(&new), "{id}");
    }
}

#[test]
fn flags_a_refresh_cannot_apply_are_told_not_dropped() {
    let f = fixture(&sample_corpus(), &[]);
    let run = f.refresh(&["--top-n", "5", "--seed", "7"]);
    run.assert_code(0);
    assert!(run.stdout.starts_with("nothing changed"), "{}", run.stdout);
    assert!(
        run.stderr.contains("nothing was written and --seed, --top-n took no effect"),
        "a note names the flags: {}",
        run.stderr
    );
    let run = f.refresh(&["--queries", "7"]);
    run.assert_code(2);
    assert!(run.stderr.contains("--queries does not apply to a refresh"), "{}", run.stderr);
    let run = f.refresh(&["--new-queries", "-3"]);
    run.assert_code(2);
    assert!(run.stderr.contains("expected auto or a number, got \"-3\""), "{}", run.stderr);
}

/// The set's files that the chunking decides: the chunks and the near-duplicate groups.
fn chunking_files(set: &Path) -> (String, String) {
    let read = |name: &str| fs_err::read_to_string(set.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    (read("corpus.jsonl"), read("chunk_groups.jsonl"))
}

/// The number of documents a refresh's `chunk` line says reused their chunks (0 when it says none).
fn reused_documents(run: &Run) -> usize {
    let line = run.stderr.lines().find(|l| l.trim_start().starts_with("chunk:")).unwrap_or_default();
    // `chunk: 40 documents → 120 chunks (37 unchanged, their chunks reused) (0.05s)`
    let count = line.split(" (").nth(1).filter(|rest| rest.contains(" unchanged, their chunks reused"));
    count
        .and_then(|rest| rest.split(' ').next())
        .map_or(0, |n| n.parse().unwrap_or_else(|e| panic!("{line}: {e}")))
}

#[test]
fn unchanged_documents_keep_their_chunks_and_the_chunks_are_a_fresh_chunkings() {
    for corpus in [sample_corpus(), sample_corpus().with_file_name("haigang-zh")] {
        let f = fixture(&corpus, &[]);
        let documents = walkdir::WalkDir::new(&f.corpus)
            .into_iter()
            .flatten()
            .filter(|e| e.file_type().is_file())
            .count();
        // One of each change: an edit, a deletion, a rename, a new document, a near-copy (so
        // that a new chunk joins a near-duplicate group of kept ones).
        let mut names: Vec<PathBuf> = walkdir::WalkDir::new(&f.corpus)
            .sort_by_file_name()
            .into_iter()
            .flatten()
            .filter(|e| e.file_type().is_file())
            .map(|e| e.path().to_owned())
            .collect();
        let (edited, deleted, renamed, copied) =
            (names.remove(0), names.remove(0), names.remove(0), names.remove(0));
        let text = fs_err::read_to_string(&edited).unwrap_or_else(|e| panic!("{e}"));
        write(&edited, format!("{text}\n\nOne more paragraph, added for the refresh.\n"));
        fs_err::remove_file(&deleted).unwrap_or_else(|e| panic!("{e}"));
        fs_err::rename(&renamed, renamed.with_file_name("renamed.md")).unwrap_or_else(|e| panic!("{e}"));
        let copy = fs_err::read_to_string(&copied).unwrap_or_else(|e| panic!("{e}"));
        write(&f.doc("copy-of-a-page.md"), format!("{copy}\n"));
        let run = finished(
            &f.set.out,
            &qrelgen(&["refresh", "--set", path_str(&f.set.out), "--corpus", path_str(&f.corpus)]),
        );
        run.assert_code(0);
        // Reused: every document but the edited, deleted and renamed ones (the copy is new).
        assert_eq!(reused_documents(&run), documents - 3, "{}", run.stderr);
        let fresh_dir = tempdir();
        let fresh = build(fresh_dir.path(), &f.corpus, &["--quiet"]);
        fresh.assert_code(0);
        let (chunks, groups) = chunking_files(&f.set.out);
        assert_eq!(
            (&chunks, &groups),
            (&chunking_files(&fresh.out).0, &chunking_files(&fresh.out).1),
            "{}",
            corpus.display()
        );
        assert!(groups.lines().count() > 0, "the copy makes a group");
        let summary = |run: &Run| parse(&run.file("manifest.json"))["corpus"].clone();
        assert_eq!(summary(&run), summary(&fresh));

        // The next refresh reads what this one kept: a damaged record, a missing one and other
        // chunking settings each chunk every document, with the same result as a build.
        let record = f.set.out.join("index/qrelgen-chunking");
        assert!(record.is_file());
        let mut bytes = fs_err::read(&record).unwrap_or_else(|e| panic!("{e}"));
        let middle = bytes.len() / 2;
        bytes[middle] ^= 1;
        fs_err::write(&record, &bytes).unwrap_or_else(|e| panic!("{e}"));
        for (round, settings) in [(1, &[][..]), (2, &[][..]), (3, &["--chunk-size", "300"][..])] {
            if round == 2 {
                fs_err::remove_file(&record).unwrap_or_else(|e| panic!("{e}"));
            }
            let text = fs_err::read_to_string(f.doc("copy-of-a-page.md")).unwrap_or_else(|e| panic!("{e}"));
            write(&f.doc("copy-of-a-page.md"), format!("{text}\nRound {round}.\n"));
            let mut args = vec!["refresh", "--set", path_str(&f.set.out), "--corpus", path_str(&f.corpus)];
            args.extend_from_slice(settings);
            let run = finished(&f.set.out, &qrelgen(&args));
            run.assert_code(0);
            assert_eq!(reused_documents(&run), 0, "round {round}: {}", run.stderr);
            let fresh_dir = tempdir();
            let mut build_args = vec!["--quiet"];
            build_args.extend_from_slice(settings);
            let fresh = build(fresh_dir.path(), &f.corpus, &build_args);
            assert_eq!(chunking_files(&f.set.out), chunking_files(&fresh.out), "round {round}");
        }
        // And the record of a refresh is used by the next one (after one more refresh: the settings
        // a refresh records are those the next one runs with).
        for text in ["A new text for the copy, short and plain.\n", "Another text for the copy.\n"] {
            write(&f.doc("copy-of-a-page.md"), text);
            let args = ["refresh", "--set", path_str(&f.set.out), "--corpus", path_str(&f.corpus)];
            finished(&f.set.out, &qrelgen(&args)).assert_code(0);
        }
        write(&f.doc("copy-of-a-page.md"), "And a last one.\n");
        let args = ["refresh", "--set", path_str(&f.set.out), "--corpus", path_str(&f.corpus)];
        let run = finished(&f.set.out, &qrelgen(&args));
        run.assert_code(0);
        assert_eq!(reused_documents(&run), documents - 1, "{}", run.stderr);

        // A kept document's lines are copied from the set's `corpus.jsonl` only as they were
        // written: one changed there (in place, so every other line stays where it was) is
        // made again.
        let set_corpus = f.set.out.join("corpus.jsonl");
        let mut lines = fs_err::read(&set_corpus).unwrap_or_else(|e| panic!("{e}"));
        let metadata =
            lines.windows(10).position(|w| w == b"\"metadata\"").unwrap_or_else(|| panic!("no metadata"));
        let letter =
            metadata + 10 + lines[metadata + 10..].iter().position(u8::is_ascii_lowercase).unwrap_or(0);
        lines[letter] = lines[letter].to_ascii_uppercase();
        fs_err::write(&set_corpus, &lines).unwrap_or_else(|e| panic!("{e}"));
        write(&f.doc("copy-of-a-page.md"), "Changed once more.\n");
        let run = finished(&f.set.out, &qrelgen(&args));
        run.assert_code(0);
        assert_eq!(reused_documents(&run), documents - 1, "{}", run.stderr);
        let fresh_dir = tempdir();
        // The set's settings since round 3.
        let fresh = build(fresh_dir.path(), &f.corpus, &["--quiet", "--chunk-size", "300"]);
        assert_eq!(chunking_files(&f.set.out).0, chunking_files(&fresh.out).0, "{}", corpus.display());
    }
}

/// The page the mock writes the judge tests' queries from: the longest of [`judge_corpus`]; its
/// evidence quote is the start of the second paragraph.
const KEYS_PAGE: &str = "# Recovery keys\n\nEncrypted folders require recovery keys before sharing externally with \
     partners.\n\nEach partner keeps the keys in a vault, rotates them every quarter and reports a lost one to \
     the workspace owner.\n\nOwners can revoke a key from the admin console, and the audit log records every \
     revocation.\n";

/// A set the mock LLM built with one query of the type `mix` names from three short pages (its
/// query is written from `keys.md`), the corpus it was built from and the mock that built it.
struct LlmSet {
    dir: tempfile::TempDir,
    corpus: PathBuf,
    set: PathBuf,
    counters: std::sync::Arc<mock::Counters>,
    /// Keeps the mock serving: the set's recorded base URL points at it.
    _server: wiremock::MockServer,
    /// The build.
    built: Run,
    /// The query's id and its line.
    query: (String, String),
}

async fn llm_set(mix: &str) -> LlmSet {
    let dir = tempdir();
    let corpus = dir.path().join("corpus");
    write(&corpus.join("keys.md"), KEYS_PAGE);
    write(&corpus.join("sharing.md"), "# Folders\n\nEncrypted folders require approval.\n");
    write(&corpus.join("billing.md"), "# Post\n\nInvoices come by post.\n");
    let (model, counters) = mock::model(Behaviour::Good);
    let server = mock::start(model).await;
    let set = dir.path().join("set");
    let args = ["--corpus", path_str(&corpus), "--queries", "1", "--mix", mix, "--per-doc-cap", "1"];
    let built = super::llm::run_on(&server, &set, &args).await;
    built.assert_code(0);
    let query = lines(&built).into_iter().next().unwrap_or_else(|| panic!("no query"));
    assert!(sources(&query.1).iter().all(|s| s.starts_with("keys.md:")), "written from keys.md: {}", query.1);
    LlmSet { dir, corpus, set, counters, _server: server, built, query }
}

impl LlmSet {
    async fn refresh(&self, set: &Path, args: &[&str]) -> Run {
        let mut all = vec!["--new-queries", "0"];
        all.extend_from_slice(args);
        let run = refresh_llm(set, &self.corpus, &all, "sk-refresh").await;
        run.assert_code(0);
        run
    }

    /// Edits `keys.md`, replacing each `from` with its `to`.
    fn edit_keys(&self, edits: &[(&str, &str)]) {
        let mut text = KEYS_PAGE.to_owned();
        for (from, to) in edits {
            assert!(text.contains(from), "{from:?}");
            text = text.replacen(from, to, 1);
        }
        write(&self.corpus.join("keys.md"), text);
    }

    /// A copy of the set as built, beside it.
    fn spare(&self) -> PathBuf {
        let spare = self.dir.path().join("spare");
        copy_tree(&self.set, &spare);
        spare
    }
}

/// The LLM calls a dry run of `run` says it would make.
fn planned_calls(run: &Run) -> u64 {
    let after = run.stdout.split("LLM calls it would make: ").nth(1).unwrap_or_default();
    after.split(' ').next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{}", run.stdout))
}

fn row(query: &str, chunk: &str, grade: &str, provenance: &str) -> (String, String, String, String) {
    (query.to_owned(), chunk.to_owned(), grade.to_owned(), provenance.to_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rename_keeps_an_llm_no_answer_query_a_no_answer_query_and_asks_nothing() {
    let s = llm_set("no_answer=1").await;
    let (id, line) = &s.query;
    let old = sources(line)[0].clone();
    assert_eq!(str_field(&parse(line), "/metadata/type"), "no_answer");
    fs_err::rename(s.corpus.join("keys.md"), s.corpus.join("vault-keys.md"))
        .unwrap_or_else(|e| panic!("{e}"));
    let requests = s.counters.requests();
    let run = s.refresh(&s.set, &[]).await;
    let new = chunk_with(&run, "Each partner keeps the keys");
    assert_eq!(chunk_changes(&run), [(old.clone(), new.clone(), "moved".to_owned())]);
    let (change, log) = &query_changes(&run)[id];
    assert_eq!(change, "relabelled", "{log}");
    assert_eq!(log["reason"], "its chunks moved or changed, and still hold its text or evidence");
    let now = parse(&lines(&run)[id]);
    assert_eq!(now["metadata"]["sources"], json!([new]));
    assert_eq!(now["metadata"]["refresh"], json!({"change": "relabelled", "old_sources": [old]}));
    assert_eq!(now["metadata"]["status"], "flagged");
    assert_eq!(now["metadata"]["type"], "no_answer");
    assert_eq!(rows(&run), Rows::new(), "a no_answer query has no qrels rows");
    assert_eq!(run.file("no_answer.txt"), format!("{id}\n"));
    assert_eq!(s.counters.requests(), requests, "the moved chunk's grade is carried: no call");
    let record = run.jsonl("candidates.jsonl").into_iter().find(|c| c["id"] == id.as_str());
    let record = record.unwrap_or_else(|| panic!("{id} in candidates.jsonl"));
    assert_eq!((&record["sources"], &record["reason"]), (&json!([new]), &json!("no_answer_confirmed")));

    // The next refresh (a page that does not touch it added) keeps it as it is, asking nothing.
    write(&s.corpus.join("calendar.md"), "# Calendar\n\nHolidays are listed in the calendar.\n");
    let next = s.refresh(&s.set, &[]).await;
    assert_eq!(query_changes(&next)[id].0, "kept", "{}", query_changes(&next)[id].1);
    assert_eq!(lines(&next)[id], lines(&run)[id]);
    assert_eq!(s.counters.requests(), requests);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_edited_source_whose_evidence_is_gone_is_graded_by_the_judge_once() {
    let s = llm_set("direct=1").await;
    let spare = s.spare();
    let (id, line) = &s.query;
    let old = sources(line)[0].clone();
    assert_eq!(rows(&s.built), [row(id, &old, "3", "source")]);
    // The evidence quote ("… rotates them every quarter and reports") is gone; every word of the
    // query is still there, so the judge (the mock) grades the new chunk 3.
    s.edit_keys(&[("rotates them every quarter", "rotates them twice a year")]);
    let (requests, judged) = (s.counters.requests(), s.counters.judge_requests());
    let dry = s.refresh(&s.set, &["--dry-run"]).await;
    assert_eq!(planned_calls(&dry), 1, "the one ask: {}", dry.stdout);
    assert_eq!(s.counters.requests(), requests, "a dry run asks nothing");
    let run = s.refresh(&s.set, &[]).await;
    let new = chunk_with(&run, "rotates them twice a year");
    assert_eq!(chunk_changes(&run), [(old.clone(), new.clone(), "edited".to_owned())]);
    assert_eq!(s.counters.judge_requests() - judged, 1, "the judge graded the new chunk");
    assert_eq!(s.counters.requests() - requests, 1, "and nothing else was asked");
    let (change, log) = &query_changes(&run)[id];
    assert_eq!(change, "retargeted");
    assert_eq!(
        log["reason"],
        format!(
            "its chunks changed; the round trip on the new corpus kept it (source_in_top_n); the judge graded {new} 3"
        )
    );
    assert_eq!(log["moved"], json!([{"old": old, "new": new, "provenance": "refresh"}]));
    assert_eq!(rows(&run), [row(id, &new, "3", "refresh")]);
    let now = parse(&lines(&run)[id]);
    assert_eq!((&now["metadata"]["status"], &now["metadata"]["sources"]), (&json!("flagged"), &json!([new])));
    assert_eq!(now["metadata"]["refresh"]["change"], "retargeted");
    let queue: Vec<Value> = run.jsonl("review_queue.jsonl");
    assert_eq!(queue.iter().map(|q| str_field(q, "/query_id")).collect::<Vec<_>>(), [id.as_str()]);
    let outcome = &parse(&run.file("manifest.json"))["refresh"];
    assert_eq!((&outcome["llm_calls"], &outcome["llm_cache_hits"]), (&json!(1), &json!(0)), "{outcome}");

    // The same refresh again (the set as it was, with the cache the first one filled): no call.
    fs_err::copy(s.set.join("llm-cache.sqlite"), spare.join("llm-cache.sqlite"))
        .unwrap_or_else(|e| panic!("{e}"));
    let requests = s.counters.requests();
    let again = s.refresh(&spare, &[]).await;
    assert_eq!(s.counters.requests(), requests, "the grade came from the cache");
    let outcome = &parse(&again.file("manifest.json"))["refresh"];
    assert_eq!((&outcome["llm_calls"], &outcome["llm_cache_hits"]), (&json!(0), &json!(1)), "{outcome}");
    assert_eq!(again.file("qrels/provenance.tsv"), run.file("qrels/provenance.tsv"));
    assert_eq!(again.file("refresh/changelog.jsonl"), run.file("refresh/changelog.jsonl"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_edited_source_that_still_holds_its_evidence_is_relabelled_without_a_call() {
    let s = llm_set("direct=1").await;
    let (id, line) = &s.query;
    let old = sources(line)[0].clone();
    let evidence = parse(line)["metadata"]["evidence"].clone();
    // A sentence of the page edited, the evidence quote (the second paragraph) left as it was.
    s.edit_keys(&[("from the admin console", "from the admin console or the command line")]);
    let requests = s.counters.requests();
    let run = s.refresh(&s.set, &[]).await;
    let new = chunk_with(&run, "or the command line");
    assert_eq!(chunk_changes(&run), [(old.clone(), new.clone(), "edited".to_owned())]);
    assert_eq!(s.counters.requests(), requests, "the evidence decided: no call");
    let (change, log) = &query_changes(&run)[id];
    assert_eq!(change, "relabelled", "{log}");
    assert_eq!(log["reason"], "its chunks moved or changed, and still hold its text or evidence");
    assert_eq!(rows(&run), [row(id, &new, "3", "refresh")]);
    let now = parse(&lines(&run)[id]);
    assert_eq!(now["metadata"]["evidence"], evidence, "the quote is kept");
    assert_eq!(now["metadata"]["refresh"], json!({"change": "relabelled", "old_sources": [old]}));
    let outcome = &parse(&run.file("manifest.json"))["refresh"];
    assert_eq!((&outcome["llm_calls"], &outcome["llm_cache_hits"]), (&json!(0), &json!(0)), "{outcome}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_edited_source_the_judge_grades_too_low_retires_its_query() {
    let s = llm_set("direct=1").await;
    let (id, line) = &s.query;
    let old = sources(line)[0].clone();
    // The query's words but "keys" (in the title) gone from the page: the round trip still finds
    // it, the judge (the mock) grades it 1.
    s.edit_keys(&[
        ("Each partner keeps the keys", "Every firm stores the keys"),
        ("with partners.", "with other firms."),
    ]);
    let judged = s.counters.judge_requests();
    let run = s.refresh(&s.set, &[]).await;
    let new = chunk_with(&run, "Every firm stores the keys");
    assert_eq!(chunk_changes(&run), [(old.clone(), new.clone(), "edited".to_owned())]);
    assert_eq!(s.counters.judge_requests() - judged, 1);
    let (change, log) = &query_changes(&run)[id];
    assert_eq!(change, "retired");
    assert_eq!(
        log["reason"],
        format!(
            "its chunks changed and its evidence is not in {new}, where its source went; the judge graded {new} \
             1 (below 2): it no longer answers it"
        )
    );
    assert!(lines(&run).is_empty() && rows(&run).is_empty(), "out of the set");
    assert_eq!(parse(&run.file("manifest.json"))["refresh"]["llm_calls"], 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_no_answer_query_a_new_page_answers_is_may_be_answerable_through_the_judge() {
    let s = llm_set("no_answer=1").await;
    let (id, line) = &s.query;
    let text = str_field(&parse(line), "/text").to_owned();
    assert!(text.contains("walrus"), "the mock's no_answer queries are about a walrus: {text}");
    // A page about the walrus with every word of the query: the judge (the mock) grades it 3.
    write(
        &s.corpus.join("walrus.md"),
        format!("# The walrus programme\n\n{text}: partners see the walrus vault.\n"),
    );
    let judged = s.counters.judge_requests();
    let dry = s.refresh(&s.set, &["--dry-run"]).await;
    assert_eq!(planned_calls(&dry), 1, "the one chunk new to its pool: {}", dry.stdout);
    let run = s.refresh(&s.set, &[]).await;
    let new = chunk_with(&run, "partners see the walrus vault");
    assert_eq!(chunk_changes(&run), [("-".to_owned(), new.clone(), "added".to_owned())]);
    assert_eq!(s.counters.judge_requests() - judged, 1, "the judge graded the new chunk, and only it");
    let (change, log) = &query_changes(&run)[id];
    assert_eq!(change, "may_be_answerable");
    assert_eq!(
        log["reason"],
        format!(
            "the judge graded a chunk of its new pool as answering it ({new} 3): the new corpus may answer it"
        )
    );
    assert_eq!(log["pool_grades"], json!([{"chunk": new, "grade": 3}]));
    let now = parse(&lines(&run)[id]);
    assert_eq!(
        (&now["metadata"]["status"], &now["metadata"]["refresh"]),
        (&json!("flagged"), &json!({"change": "may_be_answerable"}))
    );
    assert_eq!(rows(&run), Rows::new());
    let queue = run.jsonl("review_queue.jsonl");
    assert_eq!(str_field(&queue[0], "/query_id"), id, "first in the review queue");
    assert_eq!(parse(&run.file("manifest.json"))["refresh"]["llm_calls"], 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_sources_evidence_found_elsewhere_retargets_its_query_there() {
    let s = llm_set("direct=1").await;
    let (id, line) = &s.query;
    let old = sources(line)[0].clone();
    fs_err::remove_file(s.corpus.join("keys.md")).unwrap_or_else(|e| panic!("{e}"));
    // Its evidence quote and its answer (the mock answers "an answer") in a page too unlike the
    // deleted one to be its new version.
    write(
        &s.corpus.join("handbook.md"),
        "# Partner handbook\n\nSupport gives an answer within a day. Each partner keeps the keys in a vault, rotates \
         them every quarter and reports incidents by mail.\n",
    );
    let judged = s.counters.judge_requests();
    let run = s.refresh(&s.set, &[]).await;
    let new = chunk_with(&run, "Partner handbook");
    assert_eq!(
        chunk_changes(&run),
        [
            (old.clone(), "-".to_owned(), "deleted".to_owned()),
            ("-".to_owned(), new.clone(), "added".to_owned())
        ]
    );
    let (change, log) = &query_changes(&run)[id];
    assert_eq!(change, "retargeted");
    assert_eq!(
        log["reason"],
        format!(
            "a deleted source's evidence was found in {new}; the round trip on the new corpus kept it (source_in_top_n)"
        )
    );
    assert_eq!(log["moved"], json!([{"old": old, "new": new, "provenance": "refresh"}]));
    assert_eq!(rows(&run), [row(id, &new, "3", "refresh")]);
    assert_eq!(parse(&lines(&run)[id])["metadata"]["sources"], json!([new]));
    assert_eq!(s.counters.judge_requests(), judged, "the evidence decides: no ask");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_query_the_judge_gives_no_grade_for_is_flagged_never_kept() {
    // The same model behind another address (so nothing comes from the cache), whose judge
    // answers in prose.
    let (model, _) = mock::model(Behaviour::JudgeBabbles);
    let babbler = mock::start(model).await;
    let base_url = format!("{}/v1", babbler.uri());

    let s = llm_set("no_answer=1").await;
    let (id, line) = &s.query;
    let text = str_field(&parse(line), "/text").to_owned();
    write(
        &s.corpus.join("walrus.md"),
        format!("# The walrus programme\n\n{text}: partners see the walrus vault.\n"),
    );
    let run = s.refresh(&s.set, &["--base-url", &base_url]).await;
    let new = chunk_with(&run, "partners see the walrus vault");
    let (change, log) = &query_changes(&run)[id];
    assert_eq!(change, "may_be_answerable", "{log}");
    let reason = str_field(log, "/reason");
    assert!(
        reason.starts_with(&format!("the judge could not grade a chunk of its new pool ({new}: "))
            && reason.ends_with("): the new corpus may answer it"),
        "{reason}"
    );
    assert!(log.get("pool_grades").is_none(), "{log}");
    assert_eq!(str_field(&run.jsonl("review_queue.jsonl")[0], "/query_id"), id);

    let d = llm_set("direct=1").await;
    let (id, line) = &d.query;
    let old = sources(line)[0].clone();
    d.edit_keys(&[("rotates them every quarter", "rotates them twice a year")]);
    let run = d.refresh(&d.set, &["--base-url", &base_url]).await;
    let new = chunk_with(&run, "rotates them twice a year");
    let (change, log) = &query_changes(&run)[id];
    assert_eq!(change, "retargeted", "{log}");
    let reason = str_field(log, "/reason");
    let kept = "its chunks changed; the round trip on the new corpus kept it (source_in_top_n)";
    assert!(reason.starts_with(&format!("{kept}; the judge could not grade {new} (")), "{reason}");
    assert_eq!(log["moved"], json!([{"old": old, "new": new, "provenance": "refresh"}]));
    assert_eq!(rows(&run), [row(id, &new, "3", "refresh")], "the row as it was, for a reviewer to grade");
    let record = run.jsonl("candidates.jsonl").into_iter().find(|c| c["id"] == id.as_str());
    let record = record.unwrap_or_else(|| panic!("{id} in candidates.jsonl"));
    assert_eq!((&record["status"], &record["reason"]), (&json!("flagged"), &json!("judge_failed")));
    assert_eq!(run.jsonl("review_queue.jsonl").len(), 1);
}
