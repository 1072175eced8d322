//! The quality controls, one worked example each: the LLM judge is played by the mock server
//! (`mock::judge` grades by the share of the query's words a passage holds).

use super::llm::{manifest, run_with};
use super::mock::{self, Behaviour};
use super::{Run, build, path_str, str_field, tempdir, write};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// `(query id, chunk id) → (grade, provenance)` from `qrels/provenance.tsv`.
fn provenance(run: &Run) -> BTreeMap<(String, String), (u8, String)> {
    let text = run.file("qrels/provenance.tsv");
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("query-id\tcorpus-id\tscore\tprovenance"));
    lines
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 4, "{l:?}");
            let grade = f[2].parse().unwrap_or_else(|e| panic!("{e}: {l}"));
            ((f[0].to_owned(), f[1].to_owned()), (grade, f[3].to_owned()))
        })
        .collect()
}

fn of_type<'a>(lines: &'a [Value], pointer: &str, query_type: &str) -> Vec<&'a Value> {
    lines.iter().filter(|q| str_field(q, pointer) == query_type).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copying_paraphrase_is_relabelled_direct_or_dropped() {
    let dir = tempdir();
    let args = ["--queries", "12", "--mix", "direct=0.5,paraphrase=0.5", "--allow-shortfall"];
    let (model, _) = mock::model(Behaviour::CopiedParaphrases);
    let run = run_with(model, &dir.path().join("relabel"), &args).await;
    run.assert_code(0);
    // Every copying paraphrase is relabelled direct; the direct queries written as such come
    // first for the direct places, so the copies that find no place left are over quota.
    let candidates = run.jsonl("candidates.jsonl");
    let relabelled: Vec<&Value> = candidates
        .iter()
        .filter(|c| str_field(c, "/type") == "paraphrase" && c.pointer("/relabelled").is_some())
        .collect();
    assert!(!relabelled.is_empty(), "no paraphrase was relabelled");
    for c in &relabelled {
        assert_eq!(str_field(c, "/relabelled"), "direct");
        assert!(
            ["source_in_top_n", "over_quota", "near_duplicate"].contains(&str_field(c, "/reason")),
            "{c}"
        );
        let overlap = c.pointer("/overlap").and_then(Value::as_f64).unwrap_or_default();
        assert!(overlap > 0.6, "relabelled at overlap {overlap}: {c}");
        // The mock copies the source's longer words (skipping short ones), so it shares terms
        // but not always runs of them.
        assert!(c.pointer("/longest_shared").and_then(Value::as_u64).unwrap_or_default() >= 1, "{c}");
    }
    let queries = run.jsonl("queries.jsonl");
    assert!(of_type(&queries, "/metadata/type", "paraphrase").is_empty());
    for q in of_type(&queries, "/metadata/type", "direct") {
        let relabelled = q.pointer("/metadata/generated_as").is_some();
        assert!(!relabelled || str_field(q, "/metadata/generated_as") == "paraphrase", "{q}");
    }
    // The report counts each of them once, as relabelled by the copy control.
    let report = run.file("report.md");
    let row = format!("| copy (paraphrase overlap) | paraphrase | {0} | 0 | 0 | {0} | 0 |", relabelled.len());
    assert!(report.contains(&row), "no {row:?} in\n{report}");

    let (model, _) = mock::model(Behaviour::CopiedParaphrases);
    let run = run_with(model, &dir.path().join("drop"), &[&args[..], &["--on-copy", "drop"]].concat()).await;
    run.assert_code(0);
    let candidates = run.jsonl("candidates.jsonl");
    let copies = of_type(&candidates, "/reason", "copies_source");
    assert!(!copies.is_empty() && copies.iter().all(|c| str_field(c, "/status") == "dropped"));
    assert!(run.jsonl("queries.jsonl").iter().all(|q| q.pointer("/metadata/generated_as").is_none()));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_multi_hop_query_that_one_chunk_answers_is_rejected() {
    let dir = tempdir();
    // `--multi-hop-rule any`: a query about its first hop passes the round trip, so the judge
    // must catch it.
    let args = [
        "--queries",
        "6",
        "--mix",
        "multi_hop=1",
        "--allow-shortfall",
        "--max-rounds",
        "1",
        "--multi-hop-rule",
        "any",
    ];
    let (model, _) = mock::model(Behaviour::OneChunkMultiHop);
    let run = run_with(model, &dir.path().join("one"), &args).await;
    run.assert_code(1); // an empty set
    let candidates = run.jsonl("candidates.jsonl");
    let judged: Vec<&Value> = candidates.iter().filter(|c| str_field(c, "/reason") != "duplicate").collect();
    assert!(!judged.is_empty());
    // Every hop-1-only query is caught by the judge (its first hop grades 3).
    for c in &judged {
        assert_eq!(
            (str_field(c, "/status"), str_field(c, "/reason")),
            ("dropped", "one_chunk_answers"),
            "{c}"
        );
    }
    assert!(run.jsonl("queries.jsonl").is_empty());

    // A true multi_hop query (words of both hops) passes: neither hop alone grades 3.
    let (model, _) = mock::model(Behaviour::Good);
    let run = run_with(model, &dir.path().join("good"), &args).await;
    run.assert_code(0);
    assert!(!run.jsonl("queries.jsonl").is_empty());
    let candidates = run.jsonl("candidates.jsonl");
    assert!(candidates.iter().all(|c| str_field(c, "/reason") != "one_chunk_answers"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_no_answer_query_the_corpus_answers_is_caught_and_reclassified_on_request() {
    let dir = tempdir();
    let args = ["--queries", "4", "--mix", "no_answer=1", "--allow-shortfall", "--max-rounds", "1"];
    let (model, _) = mock::model(Behaviour::AnswerableNoAnswer);
    let run = run_with(model, &dir.path().join("drop"), &args).await;
    run.assert_code(1); // an empty set
    let candidates = run.jsonl("candidates.jsonl");
    let judged: Vec<&Value> = candidates.iter().filter(|c| str_field(c, "/reason") != "duplicate").collect();
    assert!(!judged.is_empty());
    for c in &judged {
        assert_eq!(
            (str_field(c, "/status"), str_field(c, "/reason")),
            ("dropped", "answered_in_corpus"),
            "{c}"
        );
        // The chunk it was written from is in its pool, graded 3 by the judge.
        let graded = c.pointer("/pool").and_then(Value::as_array).cloned().unwrap_or_default();
        let source = c.pointer("/sources/0").cloned().unwrap_or_default();
        assert!(graded.iter().any(|p| p["chunk_id"] == source && p["grade"] == 3), "{c}");
    }

    let (model, _) = mock::model(Behaviour::AnswerableNoAnswer);
    let run = run_with(model, &dir.path().join("keep"), &[&args[..], &["--reclassify"]].concat()).await;
    run.assert_code(0);
    let queries = run.jsonl("queries.jsonl");
    assert!(!queries.is_empty());
    let candidates = run.jsonl("candidates.jsonl");
    for c in &candidates {
        assert!(
            ["reclassified", "duplicate", "over_quota", "near_duplicate"].contains(&str_field(c, "/reason")),
            "{c}"
        );
    }
    let qrels = provenance(&run);
    for q in &queries {
        assert_eq!(str_field(q, "/metadata/type"), "direct");
        assert_eq!(str_field(q, "/metadata/generated_as"), "no_answer");
        assert_eq!(str_field(q, "/metadata/reason"), "reclassified");
        let id = str_field(q, "/_id");
        // Its sources are the chunks the judge found answering it (grade ≥ 2, judge rows); the
        // chunk it was written from answers it fully.
        let sources = q.pointer("/metadata/sources").and_then(Value::as_array).cloned().unwrap_or_default();
        assert!(!sources.is_empty(), "{q}");
        for source in sources.iter().filter_map(Value::as_str) {
            let (grade, provenance) =
                qrels.get(&(id.to_owned(), source.to_owned())).cloned().unwrap_or_default();
            assert!(grade >= 2 && provenance == "judge", "{q}: {source} graded {grade} ({provenance})");
        }
        let model = str_field(q, "/metadata/modelled_on/0");
        assert_eq!(qrels.get(&(id.to_owned(), model.to_owned())), Some(&(3, "judge".to_owned())), "{q}");
    }
    assert!(run.file("no_answer.txt").is_empty());
    // Kept beyond the quota: the no_answer places stay empty, and the shortfall says so.
    let m = manifest(&run);
    assert_eq!(m["shortfalls"][0]["type"], "no_answer", "{}", m["shortfalls"]);
    assert_eq!(m["counts"]["direct"]["beyond_quota"], queries.len());

    // A real no_answer query (about a walrus) survives the judge and is listed for abstention.
    let (model, _) = mock::model(Behaviour::Good);
    let run = run_with(model, &dir.path().join("good"), &args).await;
    run.assert_code(0);
    let ids: Vec<String> =
        run.jsonl("queries.jsonl").iter().map(|q| str_field(q, "/_id").to_owned()).collect();
    assert_eq!(run.file("no_answer.txt").lines().collect::<Vec<_>>(), ids);
    assert!(run.trec().is_empty(), "no_answer queries have no positive qrels");
    // Checked by the judge: confirmed, not left unchecked.
    for q in run.jsonl("queries.jsonl") {
        assert_eq!(
            (str_field(&q, "/metadata/status"), str_field(&q, "/metadata/reason")),
            ("kept", "no_answer_confirmed")
        );
    }
}

/// Three one-line documents, only `keys.md` long enough to be planned: the query the mock
/// writes from it (its first 4–6 words longer than three letters) shares three words with
/// `sharing.md` (half or more: grade 2) and none with `billing.md` (not retrieved).
pub(super) fn pool_corpus(dir: &Path) -> std::path::PathBuf {
    let corpus = dir.join("pool-corpus");
    write(
        &corpus.join("keys.md"),
        "# Recovery keys\n\nEncrypted folders require recovery keys before sharing externally with partners.\n",
    );
    write(&corpus.join("sharing.md"), "# Folders\n\nEncrypted folders require approval.\n");
    write(&corpus.join("billing.md"), "# Post\n\nInvoices come by post.\n");
    corpus
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pooled_chunk_graded_2_becomes_a_qrels_row_with_grade_2() {
    let dir = tempdir();
    let corpus = pool_corpus(dir.path());
    let args = [
        "--corpus",
        path_str(&corpus),
        "--queries",
        "1",
        "--mix",
        "direct=1",
        "--judge-pool",
        "2",
        "--per-doc-cap",
        "1",
    ];
    let (model, counters) = mock::model(Behaviour::Good);
    let run = run_with(model, &dir.path().join("out"), &args).await;
    run.assert_code(0);
    let queries = run.jsonl("queries.jsonl");
    assert_eq!(queries.len(), 1);
    let id = str_field(&queries[0], "/_id");
    let source = str_field(&queries[0], "/metadata/sources/0");
    let qrels = provenance(&run);
    let rows: Vec<(&str, u8, &str)> =
        qrels.iter().map(|((_, c), (g, p))| (c.split(':').next().unwrap_or(""), *g, p.as_str())).collect();
    let expected = match source.split(':').next() {
        // Written from keys.md: sharing.md holds half its words (grade 2), billing.md none.
        Some("keys.md") => vec![("keys.md", 3, "source"), ("sharing.md", 2, "judge")],
        other => panic!("the mock wrote from {other:?}; the corpus is built for keys.md"),
    };
    let mut sorted = rows.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, expected, "{qrels:?}");
    assert!(qrels.keys().all(|(q, _)| q == id));
    assert!(run.trec().contains(&(
        id.to_owned(),
        qrels.keys().map(|(_, c)| c.clone()).find(|c| c.starts_with("sharing.md")).unwrap_or_default(),
        2
    )));
    // The gate's ask about the source, and the pool's one other chunk the query retrieves.
    assert_eq!(counters.judge_requests(), 2);
    let m = manifest(&run);
    assert_eq!(m["config"]["judge"]["pool"], 2);
    assert_eq!(m["filter_checks"]["hop_terms"], false, "the judge checks multi_hop hops, not hop terms");
}

#[test]
fn duplicate_chunks_are_relevant_together_and_reported() {
    let dir = tempdir();
    let corpus = dir.path().join("corpus");
    let page = "# Retention\n\nDeleted files stay in the trash for thirty days, then the nightly purge \
                removes them for good; administrators can extend retention to ninety days.\n";
    write(&corpus.join("v1/retention.md"), page);
    write(&corpus.join("v2/retention.md"), page.replace("good;", "good,"));
    write(&corpus.join("quota.md"), "# Quota\n\nUploads pause when the workspace quota is full.\n");
    let run = build(dir.path(), &corpus, &["--queries", "4", "--mix", "direct=1", "--allow-shortfall"]);
    run.assert_code(0);
    let groups = run.jsonl("chunk_groups.jsonl");
    assert_eq!(groups.len(), 1, "{groups:?}");
    let group: Vec<&str> = groups[0].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert!(group[0].starts_with("v1/retention.md:") && group[1].starts_with("v2/retention.md:"));
    let qrels = provenance(&run);
    let retention = run
        .jsonl("queries.jsonl")
        .into_iter()
        .find(|q| str_field(q, "/metadata/sources/0").contains("retention"))
        .unwrap_or_else(|| panic!("no query from the retention page"));
    let id = str_field(&retention, "/_id");
    let source = str_field(&retention, "/metadata/sources/0");
    let copy = group.iter().find(|c| **c != source).copied().unwrap_or_default();
    // Offline queries are topical: the source and its copy share the topical grade.
    assert_eq!(qrels.get(&(id.to_owned(), source.to_owned())), Some(&(1, "source".to_owned())));
    assert_eq!(qrels.get(&(id.to_owned(), copy.to_owned())), Some(&(1, "duplicate".to_owned())));
    assert!(run.file("report.md").contains("## Near-identical chunks"));
}

#[tokio::test(flavor = "multi_thread")]
async fn near_identical_queries_collapse_onto_the_first() {
    // The mock's direct queries from one chunk differ only in their style word and number, so
    // at a threshold of 0.6 the later ones repeat the first.
    let dir = tempdir();
    let args = ["--queries", "12", "--mix", "direct=1", "--dedup-threshold", "0.6", "--allow-shortfall"];
    let (model, _) = mock::model(Behaviour::Good);
    let run = run_with(model, dir.path(), &args).await;
    run.assert_code(0);
    let in_set: BTreeMap<String, String> = run
        .jsonl("queries.jsonl")
        .iter()
        .map(|q| (str_field(q, "/_id").to_owned(), str_field(q, "/text").to_owned()))
        .collect();
    let repeats = of_type(&run.jsonl("candidates.jsonl"), "/reason", "near_duplicate")
        .into_iter()
        .cloned()
        .collect::<Vec<_>>();
    assert!(!repeats.is_empty(), "nothing collapsed");
    for r in &repeats {
        let survivor = str_field(r, "/duplicate_of");
        let kept = in_set.get(survivor).unwrap_or_else(|| panic!("survivor {survivor} is not in the set"));
        let words =
            |t: &str| t.split_whitespace().map(str::to_lowercase).collect::<std::collections::BTreeSet<_>>();
        let (a, b) = (words(kept), words(str_field(r, "/text")));
        let jaccard = a.intersection(&b).count() as f64 / a.union(&b).count() as f64;
        assert!(jaccard >= 0.6, "{jaccard}: {kept:?} vs {r}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_judge_without_a_grade_flags_the_query_and_says_why() {
    let dir = tempdir();
    let args = [
        "--queries",
        "4",
        "--mix",
        "multi_hop=1",
        "--max-rounds",
        "1",
        "--repairs",
        "1",
        "--allow-shortfall",
    ];
    let (model, counters) = mock::model(Behaviour::JudgeBabbles);
    let run = run_with(model, dir.path(), &args).await;
    run.assert_code(0);
    let queries = run.jsonl("queries.jsonl");
    assert!(!queries.is_empty());
    for q in &queries {
        assert_eq!(
            (str_field(q, "/metadata/status"), str_field(q, "/metadata/reason")),
            ("flagged", "judge_failed")
        );
    }
    // Every hop of every query was asked twice (one repair), and each failure is in rejects.jsonl.
    let failures: Vec<Value> = run
        .jsonl("rejects.jsonl")
        .into_iter()
        .filter(|r| str_field(r, "/reason").starts_with("the judge gave no grade for multi_hop-"))
        .collect();
    assert_eq!(failures.len(), 2 * queries.len(), "{failures:?}");
    assert!(failures.iter().all(|r| str_field(r, "/reason").contains("unusable reply after 1 repair(s)")));
    assert!(failures.iter().all(|r| str_field(r, "/reply").starts_with("I think")));
    assert_eq!(counters.judge_requests(), 2 * failures.len());
}
