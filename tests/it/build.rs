//! `qrelgen build` on the sample corpus: the invariants of its outputs.

use super::{Run, build, qrelgen, sample_corpus, str_field, tempdir};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;

const TYPES: [&str; 4] = ["direct", "paraphrase", "multi_hop", "no_answer"];

#[test]
fn sample_build_meets_every_invariant() {
    let dir = tempdir();
    let run = build(dir.path(), &sample_corpus(), &["--queries", "80"]);
    run.assert_code(0);
    assert!(run.stdout.starts_with("80 queries ("), "{}", run.stdout);

    let corpus: HashSet<String> =
        run.jsonl("corpus.jsonl").iter().map(|c| str_field(c, "/_id").to_owned()).collect();
    let queries = run.jsonl("queries.jsonl");
    assert_eq!(queries.len(), 80);
    let ids: HashSet<&str> = queries.iter().map(|q| str_field(q, "/_id")).collect();
    assert_eq!(ids.len(), queries.len(), "query ids repeat");
    for id in corpus.iter().map(String::as_str).chain(ids.iter().copied()) {
        assert!(!id.is_empty() && !id.contains(char::is_whitespace) && !id.contains('#'), "bad id {id:?}");
    }

    // Every type present, in its quota (80 × 0.4/0.3/0.15/0.15).
    let mut per_type: BTreeMap<&str, usize> = BTreeMap::new();
    for q in &queries {
        *per_type.entry(str_field(q, "/metadata/type")).or_default() += 1;
    }
    assert_eq!(
        per_type,
        BTreeMap::from([("direct", 32), ("multi_hop", 12), ("no_answer", 12), ("paraphrase", 24)])
    );

    // Every kept query's sources rank within the top 10, unless a chunk on its topic does
    // (topical direct and paraphrase queries, reason topic_in_top_n).
    for q in queries.iter().filter(|q| str_field(q, "/metadata/type") != "no_answer") {
        let ranks =
            q.pointer("/metadata/ranks").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        assert!(!ranks.is_empty());
        if str_field(q, "/metadata/reason") == "topic_in_top_n" {
            assert_ne!(str_field(q, "/metadata/type"), "multi_hop", "{q}");
            continue;
        }
        for rank in ranks {
            assert!(rank.as_u64().is_some_and(|r| (1..=10).contains(&r)), "rank {rank} in {q}");
        }
    }

    // qrels: no dangling ids, no repeated pairs, no_answer has none, TSV equals TREC.
    let trec = run.trec();
    let pairs: BTreeSet<(&str, &str)> = trec.iter().map(|(q, c, _)| (q.as_str(), c.as_str())).collect();
    assert_eq!(pairs.len(), trec.len(), "repeated qrels pairs");
    let by_id: BTreeMap<&str, &Value> = queries.iter().map(|q| (str_field(q, "/_id"), q)).collect();
    // Offline queries are topical: their sources and the chunks on their topic, all grade 1.
    let provenance = run.file("qrels/provenance.tsv");
    let origin: BTreeMap<(&str, &str), &str> = provenance
        .lines()
        .skip(1)
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('\t').collect();
            Some(((*cells.first()?, *cells.get(1)?), *cells.get(3)?))
        })
        .collect();
    for (q, c, grade) in &trec {
        assert!(corpus.contains(c), "dangling chunk {c}");
        assert!(by_id.contains_key(q.as_str()), "dangling query {q}");
        assert_eq!(*grade, 1, "{q}");
        assert!(["source", "duplicate", "topic"].contains(&origin[&(q.as_str(), c.as_str())]), "{q} {c}");
    }
    for q in &queries {
        let id = str_field(q, "/_id");
        let relevant = trec.iter().filter(|(qid, _, _)| qid == id).count();
        let sources =
            trec.iter().filter(|(qid, c, _)| qid == id && origin[&(qid.as_str(), c.as_str())] == "source");
        match str_field(q, "/metadata/type") {
            "no_answer" => assert_eq!(relevant, 0, "{id}"),
            "multi_hop" => assert_eq!(sources.count(), 2, "{id}"),
            _ => assert_eq!(sources.count(), 1, "{id}"),
        }
    }
    let topical =
        queries.iter().filter(|q| trec.iter().filter(|(qid, _, _)| qid == str_field(q, "/_id")).count() > 2);
    assert!(topical.count() * 2 > queries.len() / 2, "most answerable queries have chunks on their topic");
    let tsv = run.file("qrels/test.tsv");
    let tsv_rows: Vec<&str> = tsv.lines().collect();
    assert_eq!(tsv_rows[0], "query-id\tcorpus-id\tscore");
    let trec_file = run.file("qrels.trec");
    let from_trec: Vec<String> =
        trec_file.lines().map(|l| l.replacen(" 0 ", "\t", 1).replace(' ', "\t")).collect();
    assert_eq!(tsv_rows[1..], from_trec.iter().map(String::as_str).collect::<Vec<_>>());

    // Every candidate has a status and a reason; the set is exactly the kept and flagged ones.
    let candidates = run.jsonl("candidates.jsonl");
    let in_set: HashSet<&str> = candidates
        .iter()
        .filter(|c| str_field(c, "/status") != "dropped")
        .map(|c| str_field(c, "/id"))
        .collect();
    assert_eq!(in_set, ids);
    assert!(candidates.iter().all(|c| !str_field(c, "/reason").is_empty()));

    // The review queue covers every type and holds only queries of the set.
    let queue = run.jsonl("review_queue.jsonl");
    assert_eq!(queue.len(), 50);
    let queue_types: BTreeSet<&str> = queue.iter().map(|r| str_field(r, "/type")).collect();
    assert_eq!(queue_types, TYPES.into_iter().collect());
    assert!(queue.iter().all(|r| ids.contains(str_field(r, "/query_id"))));
    assert!(queue.iter().all(|r| r.get("sources").and_then(Value::as_array).is_some_and(|s| !s.is_empty())));

    let manifest: Value = serde_json::from_str(&run.file("manifest.json")).unwrap();
    assert_eq!(manifest["seed"], 42);
    assert_eq!(manifest["corpus"]["documents"], 42);
    assert_eq!(manifest["counts"]["paraphrase"]["requested"], 24);
    assert!(run.file("report.md").contains("| multi_hop | 12 |"));
}

/// Every output file except the timings, as bytes.
fn outputs(run: &Run) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for name in [
        "corpus.jsonl",
        "queries.jsonl",
        "qrels/test.tsv",
        "qrels.trec",
        "candidates.jsonl",
        "review_queue.jsonl",
        "report.md",
        "report.html",
    ] {
        files.insert(name.to_owned(), run.file(name).into_bytes());
    }
    let mut manifest: Value = serde_json::from_str(&run.file("manifest.json")).unwrap();
    let timings =
        manifest.as_object_mut().and_then(|m| m.remove("run")).and_then(|r| r.get("timings_ms").cloned());
    assert!(timings.is_some_and(|t| t.get("index").is_some()), "manifest has no index timing");
    files.insert("manifest.json".to_owned(), manifest.to_string().into_bytes());
    files
}

#[test]
fn same_corpus_flags_and_seed_give_identical_files() {
    let (a, b, c) = (tempdir(), tempdir(), tempdir());
    let first = build(a.path(), &sample_corpus(), &["--seed", "7"]);
    let second = build(b.path(), &sample_corpus(), &["--seed", "7"]);
    let other_seed = build(c.path(), &sample_corpus(), &["--seed", "8"]);
    for run in [&first, &second, &other_seed] {
        run.assert_code(0);
    }
    let (one, two) = (outputs(&first), outputs(&second));
    for (name, bytes) in &one {
        assert!(bytes == &two[name], "{name} differs between identical runs");
    }
    assert_ne!(one["queries.jsonl"], outputs(&other_seed)["queries.jsonl"], "the seed changes nothing");
    assert_eq!(one["corpus.jsonl"], outputs(&other_seed)["corpus.jsonl"], "chunk ids depend on the seed");
}

#[test]
fn rerun_reuses_the_index_and_gives_the_same_files() {
    let dir = tempdir();
    let first = build(dir.path(), &sample_corpus(), &[]);
    first.assert_code(0);
    let before = outputs(&first);
    assert!(first.stderr.contains("index built"), "{}", first.stderr);
    let second = build(dir.path(), &sample_corpus(), &[]);
    second.assert_code(0);
    assert!(second.stderr.contains("index reused"), "{}", second.stderr);
    assert_eq!(before, outputs(&second));
}

#[test]
fn misses_are_flagged_first_in_the_review_queue() {
    let dir = tempdir();
    let run =
        build(dir.path(), &sample_corpus(), &["--top-n", "1", "--on-miss", "flag", "--review-size", "30"]);
    run.assert_code(0);
    let queries = run.jsonl("queries.jsonl");
    let flagged = queries.iter().filter(|q| str_field(q, "/metadata/status") == "flagged").count();
    assert!(flagged > 0, "with --top-n 1 some sources must miss");
    let queue = run.jsonl("review_queue.jsonl");
    let statuses: Vec<&str> = queue.iter().map(|r| str_field(r, "/status")).collect();
    let first_kept = statuses.iter().position(|s| *s == "kept").unwrap_or(statuses.len());
    assert!(first_kept > 0 && statuses[first_kept..].iter().all(|s| *s == "kept"), "{statuses:?}");
    // Within a type, flagged queries are drawn before kept ones: a type with a kept query in
    // the queue has all its flagged queries there.
    for t in TYPES {
        let of_type = |status: &str| {
            queries
                .iter()
                .filter(|q| str_field(q, "/metadata/type") == t && str_field(q, "/metadata/status") == status)
                .count()
        };
        let in_queue = |status: &str| {
            queue.iter().filter(|r| str_field(r, "/type") == t && str_field(r, "/status") == status).count()
        };
        if in_queue("kept") > 0 {
            assert_eq!(in_queue("flagged"), of_type("flagged"), "{t}");
        }
    }
}

#[test]
fn drop_policy_drops_misses_and_any_rule_relaxes_multi_hop() {
    let dir = tempdir();
    let strict = build(dir.path(), &sample_corpus(), &["--top-n", "1", "--allow-shortfall"]);
    strict.assert_code(0);
    let candidates = strict.jsonl("candidates.jsonl");
    let hop_misses = candidates.iter().filter(|c| str_field(c, "/reason") == "hop_not_in_top_n").count();
    assert!(hop_misses > 0, "at top 1 both hops rarely rank first");
    assert!(candidates.iter().filter(|c| str_field(c, "/status") == "dropped").count() >= hop_misses);
    let other = tempdir();
    let any = build(
        other.path(),
        &sample_corpus(),
        &["--top-n", "1", "--multi-hop-rule", "any", "--allow-shortfall"],
    );
    any.assert_code(0);
    let hops_kept = |run: &Run| {
        run.jsonl("queries.jsonl").iter().filter(|q| str_field(q, "/metadata/type") == "multi_hop").count()
    };
    assert!(hops_kept(&any) > hops_kept(&strict), "any: {}, all: {}", hops_kept(&any), hops_kept(&strict));
}

#[test]
fn shortfall_fails_unless_allowed() {
    let dir = tempdir();
    let run = build(dir.path(), &sample_corpus(), &["--queries", "400", "--max-rounds", "1"]);
    run.assert_code(1);
    assert!(run.stderr.contains("warning: shortfall: "), "{}", run.stderr);
    assert!(run.file("report.md").contains("**Shortfall**"));
    let allowed =
        build(dir.path(), &sample_corpus(), &["--queries", "400", "--max-rounds", "1", "--allow-shortfall"]);
    allowed.assert_code(0);
    assert!(allowed.stderr.contains("warning: shortfall: "));
}

#[test]
fn bad_flags_are_usage_errors() {
    let dir = tempdir();
    let run = build(dir.path(), &sample_corpus(), &["--mix", "direct=0.5"]);
    run.assert_code(2);
    assert!(run.stderr.contains("add up to 0.5"), "{}", run.stderr);
    let run = build(dir.path(), &sample_corpus(), &["--chunk-size", "100", "--chunk-overlap", "100"]);
    run.assert_code(2);
    assert!(run.stderr.contains("--chunk-overlap"), "{}", run.stderr);
    let run = build(dir.path(), &sample_corpus(), &["--gate", "judge"]);
    run.assert_code(2);
    assert!(run.stderr.contains("--gate judge need the LLM judge"), "{}", run.stderr);
    let llm =
        ["--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--judge-pool", "8", "--pool-depth", "5"];
    let run = build(dir.path(), &sample_corpus(), &llm);
    run.assert_code(2);
    assert!(
        run.stderr
            .contains("invalid --judge-pool 8: it grades the first K chunks of a pool of --pool-depth 5"),
        "{}",
        run.stderr
    );
    let help = qrelgen(&["build", "--help"]);
    let text = String::from_utf8_lossy(&help.stdout);
    for flag in
        ["--corpus", "--on-miss", "--multi-hop-rule", "--review-size", "--allow-shortfall", "--prechunked"]
    {
        assert!(text.contains(flag), "--help lacks {flag}");
    }
}

/// The sample corpus as JSONL lines, one document each (`{"id","title","text"}`).
pub fn sample_docs_as_jsonl() -> Vec<String> {
    let mut paths: Vec<_> = walkdir::WalkDir::new(sample_corpus())
        .sort_by_file_name()
        .into_iter()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "md"))
        .map(|e| e.path().to_owned())
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let text = fs_err::read_to_string(p).unwrap();
            let id = p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            serde_json::json!({"id": id, "title": "", "text": text}).to_string()
        })
        .collect()
}

#[test]
fn a_config_file_sets_defaults_and_flags_override_it() {
    let dir = tempdir();
    let config = dir.path().join("qrelgen.toml");
    fs_err::write(&config, "schema_version = 1\nqueries = 20\nseed = 9\nreview_size = 7\n")
        .unwrap_or_default();
    let run =
        build(dir.path(), &sample_corpus(), &["--config", super::path_str(&config), "--review-size", "8"]);
    run.assert_code(0);
    let manifest: Value = serde_json::from_str(&run.file("manifest.json")).unwrap();
    assert_eq!(manifest["config"]["queries"], 20);
    assert_eq!(manifest["seed"], 9);
    assert_eq!(manifest["config"]["review"]["size"], 8, "the flag overrides the file");

    fs_err::write(&config, "schema_version = 1\nquerys = 20\n").unwrap_or_default();
    let typo = build(dir.path(), &sample_corpus(), &["--config", super::path_str(&config)]);
    typo.assert_code(2);
    assert!(typo.stderr.contains("unknown field `querys`"), "{}", typo.stderr);
    fs_err::write(&config, "queries = 20\n").unwrap_or_default();
    let unversioned = build(dir.path(), &sample_corpus(), &["--config", super::path_str(&config)]);
    unversioned.assert_code(2);
    assert!(unversioned.stderr.contains("schema_version = 1"), "{}", unversioned.stderr);
}

#[test]
fn print_prompts_shows_the_effective_templates() {
    let output = qrelgen(&["build", "--print-prompts", "--language", "zh"]);
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.starts_with("# prompts from bundled (zh)"), "{text}");
    assert!(text.contains("## paraphrase") && text.contains("同义词"), "{text}");
    let offline = qrelgen(&["build", "--corpus", "x", "--out", "y", "--generator", "llm"]);
    assert_eq!(offline.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&offline.stderr).contains("--generator llm needs an endpoint"));
}

/// The manifest records what ran: each stage's settings as the stage used them, and what the
/// pipeline derived for the filter (no placeholders).
#[test]
fn the_manifest_records_what_each_stage_used() {
    let dir = tempdir();
    let args =
        ["--queries", "40", "--top-n", "4", "--pool-depth", "3", "--review-size", "12", "--per-doc-cap", "3"];
    let run = build(dir.path(), &sample_corpus(), &args);
    run.assert_code(0);
    let manifest: Value = serde_json::from_str(&run.file("manifest.json")).unwrap();
    let filter = &manifest["config"]["filter"];
    let keys: BTreeSet<&str> =
        filter.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
    assert_eq!(
        keys,
        BTreeSet::from([
            "top_n",
            "on_miss",
            "multi_hop_rule",
            "pool_depth",
            "max_paraphrase_overlap",
            "on_copy"
        ]),
        "settings only: what the pipeline derives is not config ({filter})"
    );
    // The offline generator has no judge: the filter checked hop terms, and the corpus language.
    assert_eq!(manifest["filter_checks"], serde_json::json!({"language": "en", "hop_terms": true}));
    assert_eq!(manifest["language"], "en");

    // What the stages did agrees with the settings recorded.
    let top_n = filter["top_n"].as_u64().unwrap_or_default();
    assert_eq!(top_n, 4);
    let queries = run.jsonl("queries.jsonl");
    for q in queries.iter().filter(|q| str_field(q, "/metadata/type") != "no_answer") {
        let ranks = q.pointer("/metadata/ranks").and_then(Value::as_array).cloned().unwrap_or_default();
        // A topical query may pass on a chunk of its topic instead of its source.
        let topical = str_field(q, "/metadata/reason") == "topic_in_top_n";
        assert!(ranks.iter().all(|r| r.as_u64().map_or(topical, |r| r <= top_n)), "{q}");
    }
    let pool_depth = filter["pool_depth"].as_u64().unwrap_or_default();
    assert_eq!(pool_depth, 3);
    let queue = run.jsonl("review_queue.jsonl");
    assert_eq!(Some(queue.len() as u64), manifest["config"]["review"]["size"].as_u64());
    assert!(queue.iter().any(|r| r["pool"].as_array().is_some_and(|p| p.len() as u64 == pool_depth)));
    assert!(queue.iter().all(|r| r["pool"].as_array().is_some_and(|p| p.len() as u64 <= pool_depth)));
    let mut per_doc: BTreeMap<String, u64> = BTreeMap::new();
    for q in &queries {
        let source = str_field(q, "/metadata/sources/0");
        *per_doc.entry(source.split(':').next().unwrap_or_default().to_owned()).or_default() += 1;
    }
    let cap = manifest["per_doc_cap"].as_u64().unwrap_or_default();
    assert_eq!(cap, 3);
    assert!(per_doc.values().all(|&n| n <= cap), "{per_doc:?}");
    assert_eq!(manifest["config"]["per_doc_cap"], 3);
}

/// Every file a build wrote (the index folder aside), as bytes; the manifest without its timings.
fn every_file(run: &Run) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut folders = vec![run.out.clone()];
    while let Some(folder) = folders.pop() {
        for entry in fs_err::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            let name = path.strip_prefix(&run.out).unwrap().display().to_string();
            if path.is_dir() {
                if name != "index" {
                    folders.push(path);
                }
            } else if name == "manifest.json" {
                let mut manifest: Value = serde_json::from_slice(&fs_err::read(&path).unwrap()).unwrap();
                manifest.as_object_mut().and_then(|m| m.remove("run"));
                files.insert(name, manifest.to_string().into_bytes());
            } else {
                files.insert(name, fs_err::read(&path).unwrap());
            }
        }
    }
    files
}

#[test]
fn the_number_of_threads_changes_no_output_file() {
    let zh = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpora/haigang-zh");
    for (corpus, queries) in [(sample_corpus(), "80"), (zh, "40")] {
        let (one, many) = (tempdir(), tempdir());
        let serial =
            build(one.path(), &corpus, &["--threads", "1", "--queries", queries, "--allow-shortfall"]);
        let parallel =
            build(many.path(), &corpus, &["--threads", "3", "--queries", queries, "--allow-shortfall"]);
        serial.assert_code(0);
        parallel.assert_code(0);
        let (a, b) = (every_file(&serial), every_file(&parallel));
        assert!(a.len() >= 10 && a.contains_key("candidates.jsonl"), "{:?}", a.keys());
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
        for (name, bytes) in &a {
            assert!(
                bytes == &b[name],
                "{}: {name} differs between --threads 1 and --threads 3",
                corpus.display()
            );
        }
        let manifest = serial.file("manifest.json");
        assert!(!manifest.contains("\"threads\""), "the manifest records the thread count");
        let manifest: Value = serde_json::from_str(&manifest).unwrap();
        let timings = &manifest["run"]["timings_ms"];
        for stage in ["chunk", "index", "connect", "plan", "generate", "filter", "sample", "write"] {
            assert!(timings[stage].is_u64(), "no {stage} timing in {timings}");
        }
    }
}
