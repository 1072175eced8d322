//! `qrelgen review` and `qrelgen validate` on sets built from the sample corpus: every export
//! format filled in and applied, the all-or-nothing rule, idempotence, agreement, the estimate.

use super::{Run, build, path_str, qrelgen, sample_corpus, str_field, tempdir, write};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Runs `qrelgen ARGS…` for the set `out`.
fn cli(out: &Path, args: &[&str]) -> Run {
    let output = qrelgen(args);
    Run {
        out: out.to_owned(),
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A set built from the sample corpus (100 queries, 50 to review) in `dir/out`.
fn built(dir: &Path) -> Run {
    let run = build(dir, &sample_corpus(), &["--quiet"]);
    run.assert_code(0);
    run
}

fn export(set: &Run, format: &str, to: &Path) {
    cli(
        &set.out,
        &["review", "export", "--set", path_str(&set.out), "--format", format, "--to", path_str(to)],
    )
    .assert_code(0);
}

fn apply(set: &Run, decisions: &Path, extra: &[&str]) -> Run {
    let mut args = vec!["review", "apply", "--set", path_str(&set.out), "--decisions", path_str(decisions)];
    args.extend_from_slice(extra);
    cli(&set.out, &args)
}

/// JSON values, one per line.
fn jsonl(values: &[Value]) -> String {
    values.iter().map(|v| v.to_string() + "\n").collect()
}

/// Every file of the set except the index, as bytes.
fn snapshot(out: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    walkdir::WalkDir::new(out)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file() && !e.path().starts_with(out.join("index")))
        .map(|e| {
            (
                e.path().strip_prefix(out).unwrap_or(e.path()).to_owned(),
                fs_err::read(e.path()).unwrap_or_default(),
            )
        })
        .collect()
}

/// `(query, chunk) → (grade, provenance)` of `qrels/provenance.tsv`.
fn provenance(run: &Run) -> HashMap<(String, String), (u8, String)> {
    run.file("qrels/provenance.tsv")
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            ((f[0].to_owned(), f[1].to_owned()), (f[2].parse().unwrap_or(99), f[3].to_owned()))
        })
        .collect()
}

fn trec_grade(run: &Run, query: &str, chunk: &str) -> Option<u8> {
    run.trec().into_iter().find(|(q, c, _)| q == query && c == chunk).map(|(_, _, g)| g)
}

fn query<'a>(queries: &'a [Value], id: &str) -> Option<&'a Value> {
    queries.iter().find(|q| str_field(q, "/_id") == id)
}

fn manifest(run: &Run) -> Value {
    serde_json::from_str(&run.file("manifest.json")).unwrap()
}

/// The TSV and TREC files hold the same rows, and a query's rows graded 0 (judged not
/// relevant) only beside a relevant one.
fn assert_tsv_matches_trec(run: &Run) {
    let tsv: Vec<String> = run.file("qrels/test.tsv").lines().skip(1).map(str::to_owned).collect();
    let trec = run.trec();
    let rows: Vec<String> = trec.iter().map(|(q, c, g)| format!("{q}\t{c}\t{g}")).collect();
    assert_eq!(tsv, rows);
    for (query, chunk, _) in trec.iter().filter(|(_, _, g)| *g == 0) {
        assert!(
            trec.iter().any(|(q, _, g)| q == query && *g >= 1),
            "{query} {chunk}: a 0 without a relevant row"
        );
    }
}

struct Csv {
    header: Vec<String>,
    rows: Vec<BTreeMap<String, String>>,
}

impl Csv {
    fn read(path: &Path) -> Self {
        let mut reader = csv::Reader::from_path(path).unwrap();
        let header: Vec<String> = reader.headers().unwrap().iter().map(str::to_owned).collect();
        let rows = reader
            .records()
            .map(|r| header.iter().cloned().zip(r.unwrap().iter().map(str::to_owned)).collect())
            .collect();
        Self { header, rows }
    }

    fn write(&self, path: &Path) {
        let mut writer = csv::Writer::from_path(path).unwrap();
        writer.write_record(&self.header).unwrap();
        for row in &self.rows {
            writer.write_record(self.header.iter().map(|h| row[h].as_str())).unwrap();
        }
        writer.flush().unwrap();
    }

    /// Index of the `n`-th row (0-based) of `query_type` with a non-empty `needs` column.
    fn find(&self, query_type: &str, n: usize, needs: &str) -> usize {
        let mut matching = (0..self.rows.len())
            .filter(|&i| self.rows[i]["type"] == query_type && !self.rows[i][needs].is_empty());
        matching.nth(n).unwrap_or_else(|| panic!("no {query_type} row {n} with {needs}"))
    }

    fn set(&mut self, row: usize, fields: &[(&str, &str)]) {
        for (name, value) in fields {
            assert!(self.header.iter().any(|h| h == name), "no column {name}");
            self.rows[row].insert((*name).to_owned(), (*value).to_owned());
        }
    }
}

#[test]
fn csv_round_trip_applies_every_kind_of_decision() {
    let dir = tempdir();
    let set = built(dir.path());
    let before = snapshot(&set.out);
    let path = dir.path().join("queue.csv");
    export(&set, "csv", &path);
    let mut csv = Csv::read(&path);
    assert_eq!(csv.rows.len(), 50);
    let (d1, d2, d3) = (
        csv.find("direct", 0, "pool_1_id"),
        csv.find("direct", 1, "pool_1_id"),
        csv.find("direct", 2, "pool_1_id"),
    );
    let (p1, m1, n1) = (
        csv.find("paraphrase", 0, "query"),
        csv.find("multi_hop", 0, "source_2_id"),
        csv.find("no_answer", 0, "source_1_id"),
    );
    let id = |csv: &Csv, row: usize, column: &str| csv.rows[row][column].clone();
    let added = set.jsonl("corpus.jsonl").iter().map(|c| str_field(c, "/_id").to_owned()).find(|c| {
        (1..=2).all(|i| csv.rows[d3][&format!("source_{i}_id")] != *c)
            && (1..=5).all(|i| csv.rows[d3][&format!("pool_{i}_id")] != *c)
    });
    let added = added.unwrap_or_else(|| panic!("a chunk not shown with the item"));
    for row in 0..csv.rows.len() {
        csv.set(row, &[("decision", "accept")]);
    }
    csv.set(d1, &[("decision", "reject"), ("reject_reason", "too vague to answer")]);
    csv.set(p1, &[("decision", "edit"), ("edited_text", "how long does a sharing link last")]);
    csv.set(d2, &[("source_1_grade", "3"), ("pool_1_grade", "2")]);
    csv.set(m1, &[("source_2_grade", "0")]);
    let answer = id(&csv, n1, "source_1_id");
    csv.set(n1, &[("decision", "answerable"), ("add", &answer)]);
    csv.set(d3, &[("add", &format!("{added}=1"))]);
    let filled = dir.path().join("ann.csv");
    csv.write(&filled);

    let applied = apply(&set, &filled, &[]);
    applied.assert_code(0);
    assert!(applied.stdout.starts_with("version 2 of "), "{}", applied.stdout);

    let queries = set.jsonl("queries.jsonl");
    assert_eq!(queries.len(), 99);
    assert!(query(&queries, &id(&csv, d1, "query_id")).is_none(), "the rejected query is gone");
    let edited = query(&queries, &id(&csv, p1, "query_id")).unwrap_or_else(|| panic!("edited query kept"));
    assert_eq!(str_field(edited, "/text"), "how long does a sharing link last");
    assert_eq!(str_field(edited, "/metadata/review/decision"), "edit");
    assert_eq!(str_field(edited, "/metadata/review/reviewer"), "ann");
    assert_eq!(str_field(edited, "/metadata/review/original_text"), csv.rows[p1]["query"]);
    assert_eq!(str_field(edited, "/metadata/type"), "paraphrase");

    let rows = provenance(&set);
    let row = |r: usize, column: &str| rows.get(&(id(&csv, r, "query_id"), id(&csv, r, column))).cloned();
    let graded = |r: usize, column: &str| trec_grade(&set, &id(&csv, r, "query_id"), &id(&csv, r, column));
    assert!(
        set.trec().iter().all(|(qid, _, _)| *qid != id(&csv, d1, "query_id")),
        "rejected query has no qrels"
    );
    assert_eq!(row(d2, "source_1_id"), Some((3, "human".into())), "same grade, now the human's");
    assert_eq!(row(d2, "pool_1_id"), Some((2, "human".into())));
    assert_eq!(graded(d2, "pool_1_id"), Some(2));
    assert_eq!(row(m1, "source_2_id"), Some((0, "human".into())), "grade 0 is kept in provenance.tsv");
    assert_eq!(graded(m1, "source_2_id"), Some(0), "and is a judged non-relevant row of the qrels");
    assert_eq!(row(m1, "source_1_id"), Some((1, "source".into())), "the other hop is untouched");
    assert_eq!(row(n1, "source_1_id"), Some((3, "human".into())), "the no_answer query is answerable");
    assert_eq!(rows.get(&(id(&csv, d3, "query_id"), added.clone())), Some(&(1, "human".into())));
    let other_no_answer = csv.find("no_answer", 1, "source_1_id");
    assert!(
        set.trec().iter().all(|(qid, _, _)| *qid != id(&csv, other_no_answer, "query_id")),
        "accepted no_answer has none"
    );
    assert_tsv_matches_trec(&set);

    // The previous version is kept, and the manifest says how the new one was made.
    for name in ["queries.jsonl", "qrels.trec", "qrels/test.tsv", "qrels/provenance.tsv", "manifest.json"] {
        let kept = fs_err::read(set.out.join("versions/v1").join(name)).unwrap_or_default();
        assert!(kept == before[Path::new(name)], "versions/v1/{name} is not version 1");
    }
    let log = &manifest(&set)["review"];
    assert_eq!((log["version"].as_u64(), log["parent"].as_u64()), (Some(2), Some(1)));
    let record = &log["history"][0];
    let hash = blake3::hash(&fs_err::read(&filled).unwrap_or_default()).to_hex().to_string();
    assert_eq!(record["inputs"][0]["blake3"], hash.as_str());
    assert_eq!(record["reviewers"], json!(["ann"]));
    let counts = &record["counts"];
    assert_eq!(
        [
            &counts["rejected"],
            &counts["edited"],
            &counts["answerable"],
            &counts["accepted"],
            &counts["queries"]
        ],
        [&json!(1), &json!(1), &json!(1), &json!(47), &json!(99)]
    );
    let stored = str_field(&record["inputs"][0], "/stored");
    assert_eq!(
        fs_err::read(set.out.join(stored)).unwrap_or_default(),
        fs_err::read(&filled).unwrap_or_default()
    );
    cli(&set.out, &["validate", "--set", path_str(&set.out)]).assert_code(0);
}

#[test]
fn jsonl_round_trip_regrades_and_leaves_the_rest_pending() {
    let dir = tempdir();
    let set = built(dir.path());
    let path = dir.path().join("queue.jsonl");
    export(&set, "jsonl", &path);
    let mut items: Vec<Value> = fs_err::read_to_string(&path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(items.len(), 50);
    for item in &items {
        assert!(
            item["decision"].is_null() && item["reject_reason"].is_null() && item["edited_text"].is_null()
        );
        let chunks = item["sources"].as_array().into_iter().chain(item["pool"].as_array()).flatten();
        assert!(chunks.into_iter().all(|c| c["grade"].is_null() && c.get("machine_grade").is_some()));
    }
    let hop =
        items.iter().position(|i| i["type"] == "multi_hop").unwrap_or_else(|| panic!("a multi_hop item"));
    items[0]["decision"] = json!("reject");
    items[0]["reject_reason"] = json!("not a real question");
    items[hop]["decision"] = json!("accept");
    items[hop]["sources"][0]["grade"] = json!(1);
    let filled = dir.path().join("filled.jsonl");
    write(&filled, jsonl(&items));

    apply(&set, &filled, &["--reviewer", "bob"]).assert_code(0);
    let (rejected, hop_id) = (str_field(&items[0], "/query_id"), str_field(&items[hop], "/query_id"));
    let source = str_field(&items[hop], "/sources/0/chunk_id");
    assert!(query(&set.jsonl("queries.jsonl"), rejected).is_none());
    assert_eq!(trec_grade(&set, hop_id, source), Some(1));
    assert_eq!(provenance(&set)[&(hop_id.to_owned(), source.to_owned())], (1, "human".to_owned()));
    assert_tsv_matches_trec(&set);

    let status = cli(&set.out, &["review", "status", "--set", path_str(&set.out), "--json"]);
    status.assert_code(0);
    let status: Value = serde_json::from_str(&status.stdout).unwrap();
    let reviewed: u64 =
        status["types"].as_array().into_iter().flatten().filter_map(|t| t["reviewed"].as_u64()).sum();
    assert_eq!(reviewed, 2, "the other 48 items are pending");
    assert!(status["overall"].is_null(), "not every type has a review yet");
}

/// Every `$name` the labeling config refers to, and every control's `name`.
fn config_fields(xml: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let doc =
        roxmltree::Document::parse(xml).unwrap_or_else(|e| panic!("the labeling config is not XML: {e}"));
    let mut vars = BTreeSet::new();
    let mut controls = BTreeSet::new();
    for node in doc.descendants().filter(roxmltree::Node::is_element) {
        for attribute in node.attributes() {
            vars.extend(attribute.value().strip_prefix('$').map(str::to_owned));
        }
        if node.attribute("toName").is_some() {
            controls.insert(
                node.attribute("name").unwrap_or_else(|| panic!("a control without a name")).to_owned(),
            );
        }
    }
    (vars, controls)
}

/// A Label Studio result region for `control`.
fn region(control: &str, value: &str) -> Value {
    if control == "decision" || control.ends_with("_grade") {
        json!({"from_name": control, "to_name": "query", "type": "choices", "value": {"choices": [value]}})
    } else {
        json!({"from_name": control, "to_name": "query", "type": "textarea", "value": {"text": [value]}})
    }
}

#[test]
fn label_studio_config_and_tasks_agree_and_its_export_applies() {
    let dir = tempdir();
    let set = built(dir.path());
    let tasks_path = dir.path().join("ls/tasks.json");
    export(&set, "label-studio", &tasks_path);
    let xml = fs_err::read_to_string(tasks_path.with_extension("xml")).unwrap_or_default();
    let (vars, controls) = config_fields(&xml);
    let tasks: Vec<Value> =
        serde_json::from_str(&fs_err::read_to_string(&tasks_path).unwrap_or_default()).unwrap();
    assert_eq!(tasks.len(), 50);
    for task in &tasks {
        for var in &vars {
            // Text, or (a slot's grade options) a list.
            let value = task["data"].get(var);
            assert!(value.is_some_and(|v| v.is_string() || v.is_array()), "task lacks ${var}: {task}");
        }
    }
    let mut expected: BTreeSet<String> =
        ["decision", "reject_reason", "edited_text", "add"].map(String::from).into();
    expected.extend(
        (1..=2).map(|i| format!("source_{i}_grade")).chain((1..=5).map(|i| format!("pool_{i}_grade"))),
    );
    assert_eq!(controls, expected, "the config's controls are the decision fields and one grade per slot");

    // Annotate: every control is used at least once, and apply must read them all.
    let data = |t: usize, key: &str| tasks[t]["data"][key].as_str().unwrap_or_default().to_owned();
    let of_type =
        |t: &str| tasks.iter().position(|task| data_type(task) == t).unwrap_or_else(|| panic!("no {t}"));
    let full = tasks.iter().position(|task| {
        data_type(task) == "multi_hop" && !task["data"]["pool_5_id"].as_str().unwrap_or_default().is_empty()
    });
    let full = full.unwrap_or_else(|| panic!("a multi_hop task with every slot filled"));
    let (direct, paraphrase, no_answer) = (of_type("direct"), of_type("paraphrase"), of_type("no_answer"));
    let grades: Vec<Value> =
        controls.iter().filter(|c| c.ends_with("_grade")).map(|c| region(c, "1")).collect();
    let mut annotated: Vec<Value> = tasks.clone();
    let annotate = |task: &mut Value, result: Vec<Value>| {
        task["annotations"] =
            json!([{"id": 1, "completed_by": {"id": 7, "email": "cy@example.org"}, "result": result}]);
    };
    annotate(&mut annotated[full], [vec![region("decision", "accept")], grades].concat());
    annotate(
        &mut annotated[direct],
        vec![region("decision", "reject"), region("reject_reason", "duplicate topic")],
    );
    annotate(
        &mut annotated[paraphrase],
        vec![region("decision", "edit"), region("edited_text", "rotate an api token")],
    );
    let answer = data(no_answer, "source_1_id");
    annotate(
        &mut annotated[no_answer],
        vec![region("decision", "answerable"), region("add", &format!("{answer}=2"))],
    );
    let export_path = dir.path().join("ls-export.json");
    write(&export_path, serde_json::to_string(&annotated).unwrap_or_default());

    let applied = apply(&set, &export_path, &[]);
    applied.assert_code(0);
    let rows = provenance(&set);
    let query_id = |t: usize| data(t, "query_id");
    for slot in ["source_1", "source_2", "pool_1", "pool_2", "pool_3", "pool_4", "pool_5"] {
        let chunk = data(full, &format!("{slot}_id"));
        assert_eq!(rows.get(&(query_id(full), chunk)), Some(&(1, "human".to_owned())), "{slot}");
    }
    let queries = set.jsonl("queries.jsonl");
    assert!(query(&queries, &query_id(direct)).is_none());
    let edited = query(&queries, &query_id(paraphrase)).unwrap_or_else(|| panic!("kept"));
    assert_eq!(str_field(edited, "/text"), "rotate an api token");
    assert_eq!(str_field(edited, "/metadata/review/reviewer"), "cy@example.org");
    assert_eq!(rows.get(&(query_id(no_answer), answer)), Some(&(2, "human".to_owned())));
    assert_tsv_matches_trec(&set);
}

fn data_type(task: &Value) -> &str {
    task["data"]["heading"].as_str().and_then(|h| h.split(" · ").next()).unwrap_or_default()
}

#[test]
fn a_file_with_one_bad_row_applies_nothing() {
    let dir = tempdir();
    let set = built(dir.path());
    let before = snapshot(&set.out);
    let path = dir.path().join("queue.csv");
    export(&set, "csv", &path);
    let mut csv = Csv::read(&path);
    for row in 0..csv.rows.len() {
        csv.set(row, &[("decision", "accept")]);
    }
    csv.set(4, &[("source_1_grade", "7")]);
    let bad = dir.path().join("bad-grade.csv");
    csv.write(&bad);
    let refused = apply(&set, &bad, &[]);
    refused.assert_code(2);
    assert!(refused.stderr.contains("1 problem(s), nothing applied"), "{}", refused.stderr);
    assert!(refused.stderr.contains("row 6: source_1_grade: bad grade \"7\" (0–3)"), "{}", refused.stderr);
    assert_eq!(snapshot(&set.out), before, "nothing was written");

    csv.set(4, &[("source_1_grade", "")]);
    csv.set(9, &[("query_id", "direct-000000000000")]);
    csv.set(12, &[("pool_1_id", "nowhere.md:000000000000"), ("pool_1_grade", "2")]);
    let unknown = dir.path().join("unknown-ids.csv");
    csv.write(&unknown);
    let refused = apply(&set, &unknown, &[]);
    refused.assert_code(2);
    assert!(refused.stderr.contains("row 11: unknown query id direct-000000000000"), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("row 14: unknown chunk id nowhere.md:000000000000"),
        "{}",
        refused.stderr
    );
    assert_eq!(snapshot(&set.out), before, "nothing was written");
}

#[test]
fn applying_the_same_decisions_twice_changes_nothing() {
    let dir = tempdir();
    let set = built(dir.path());
    let queue = set.jsonl("review_queue.jsonl");
    let (first, second) = (str_field(&queue[0], "/query_id"), str_field(&queue[1], "/query_id"));
    let decisions = dir.path().join("ann.jsonl");
    write(
        &decisions,
        jsonl(&[
            json!({"query_id": first, "decision": "reject", "reject_reason": "off topic"}),
            json!({"query_id": second, "decision": "accept"}),
        ]),
    );
    apply(&set, &decisions, &[]).assert_code(0);
    let after_first = snapshot(&set.out);
    let again = apply(&set, &decisions, &[]);
    again.assert_code(0);
    assert!(again.stdout.contains("was already applied as version 2: nothing changed"), "{}", again.stdout);
    assert_eq!(snapshot(&set.out), after_first);

    // Other bytes, same decisions: no new version either.
    let same = dir.path().join("ann-again.jsonl");
    write(&same, jsonl(&[json!({"query_id": second, "decision": "accept", "reviewer": "ann"})]));
    let unchanged = apply(&set, &same, &[]);
    unchanged.assert_code(0);
    assert!(unchanged.stdout.contains("change nothing"), "{}", unchanged.stdout);
    assert_eq!(snapshot(&set.out), after_first);

    // A later decision overrides: the rejected query comes back, as version 3.
    let undo = dir.path().join("undo.jsonl");
    write(&undo, jsonl(&[json!({"query_id": first, "decision": "accept"})]));
    apply(&set, &undo, &[]).assert_code(0);
    assert!(query(&set.jsonl("queries.jsonl"), first).is_some());
    assert_eq!(manifest(&set)["review"]["version"], 3);
    assert!(set.out.join("versions/v2/queries.jsonl").exists());
}

#[test]
fn two_reviewers_kappa_and_strict_resolution() {
    let dir = tempdir();
    let set = built(dir.path());
    let queue = set.jsonl("review_queue.jsonl");
    let ids: Vec<&str> = queue.iter().take(10).map(|q| str_field(q, "/query_id")).collect();
    // The worked example of the unit test: κ = (0.8 − 0.58) / (1 − 0.58) = 0.524.
    let ann = "aaaaaaarrr";
    let bob = "aaaaaarrra";
    let file = |name: &str, pattern: &str| {
        let lines: Vec<Value> = ids
            .iter()
            .zip(pattern.chars())
            .map(|(id, d)| match d {
                'a' => json!({"query_id": id, "decision": "accept"}),
                _ => {
                    json!({"query_id": id, "decision": "reject", "reject_reason": format!("{name} says no")})
                }
            })
            .collect();
        let path = dir.path().join(format!("{name}.jsonl"));
        write(&path, jsonl(&lines));
        path
    };
    let (a, b) = (file("ann", ann), file("bob", bob));
    let args = [
        "review",
        "agree",
        "--set",
        path_str(&set.out),
        "--decisions",
        path_str(&a),
        "--decisions",
        path_str(&b),
    ];
    let report = cli(&set.out, &args);
    report.assert_code(0);
    assert!(
        report.stdout.contains(
            "kappa, decisions: 0.524 over 10 items (observed agreement 0.800, expected by chance 0.580)"
        ),
        "{}",
        report.stdout
    );
    assert!(report.stdout.contains("2 disagreement(s)"), "{}", report.stdout);
    assert!(
        report.stdout.contains(&format!("{}  decision: ann accept, bob reject", ids[6])),
        "{}",
        report.stdout
    );
    assert!(
        report.stdout.contains(&format!("{}  decision: ann reject, bob accept", ids[9])),
        "{}",
        report.stdout
    );
    assert!(!set.out.join("versions").exists(), "without --resolve nothing is applied");

    let resolved = cli(&set.out, &[&args[..], &["--resolve", "strict"]].concat());
    resolved.assert_code(0);
    let queries = set.jsonl("queries.jsonl");
    assert_eq!(queries.len(), 96, "strict: a reject by either reviewer wins");
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(query(&queries, id).is_none(), i >= 6, "{id}");
    }
    let accepted = query(&queries, ids[0]).unwrap_or_else(|| panic!("kept"));
    assert_eq!(str_field(accepted, "/metadata/review/reviewer"), "ann+bob");
    let record = &manifest(&set)["review"]["history"][0];
    assert_eq!(record["resolve"], "strict");
    assert_eq!(record["reviewers"], json!(["ann", "bob"]));
    assert_eq!(record["inputs"].as_array().map(Vec::len), Some(2));
    let again = cli(&set.out, &[&args[..], &["--resolve", "strict"]].concat());
    assert!(again.stdout.contains("already applied"), "{}", again.stdout);
}

#[test]
fn status_estimates_the_share_of_good_queries() {
    let dir = tempdir();
    let set = built(dir.path());
    let queue = set.jsonl("review_queue.jsonl");
    // The first item of each type is rejected, the rest accepted.
    let mut seen = BTreeSet::new();
    let lines: Vec<Value> = queue
        .iter()
        .map(|item| {
            let (id, t) = (str_field(item, "/query_id"), str_field(item, "/type"));
            if seen.insert(t) {
                json!({"query_id": id, "decision": "reject", "reject_reason": "bad"})
            } else {
                json!({"query_id": id, "decision": "accept"})
            }
        })
        .collect();
    let decisions = dir.path().join("all.jsonl");
    write(&decisions, jsonl(&lines));
    apply(&set, &decisions, &[]).assert_code(0);

    let status = cli(&set.out, &["review", "status", "--set", path_str(&set.out), "--json"]);
    status.assert_code(0);
    let status: Value = serde_json::from_str(&status.stdout).unwrap();
    let types = status["types"].as_array().cloned().unwrap_or_default();
    assert_eq!(types.len(), 4);
    // Strata are (type, status) pairs weighted by their size in version 1: θ = Σ W_{h,s} p_{h,s}.
    let mut expected = 0.0;
    for t in &types {
        let (queue, reviewed) = (t["queue"].as_f64().unwrap_or_default(), t["reviewed"].as_f64());
        assert_eq!(Some(queue), reviewed);
        let strata = t["strata"].as_array().cloned().unwrap_or_default();
        let mut of_type = 0.0;
        for s in &strata {
            let (in_set, reviewed, good) =
                (s["in_set"].as_f64(), s["reviewed"].as_f64(), s["good_count"].as_f64());
            let (in_set, reviewed, good) =
                (in_set.unwrap_or_default(), reviewed.unwrap_or_default(), good.unwrap_or_default());
            expected += in_set / 100.0 * good / reviewed;
            of_type += in_set / t["in_set"].as_f64().unwrap_or_default() * good / reviewed;
        }
        assert!((t["good"]["estimate"].as_f64().unwrap_or_default() - of_type).abs() < 1e-9, "{t}");
    }
    let overall = &status["overall"];
    let (estimate, low, high) =
        (overall["estimate"].as_f64(), overall["low"].as_f64(), overall["high"].as_f64());
    let (estimate, low, high) =
        (estimate.unwrap_or_default(), low.unwrap_or_default(), high.unwrap_or_default());
    assert!((estimate - expected).abs() < 1e-9, "{estimate} ≠ Σ W_h p_h = {expected}");
    assert!(0.0 < low && low < estimate && estimate < high && high < 1.0, "{overall}");

    let table = cli(&set.out, &["review", "status", "--set", path_str(&set.out)]);
    table.assert_code(0);
    assert!(
        table.stdout.contains("(version 2)") && table.stdout.lines().any(|l| l.starts_with("overall ")),
        "{}",
        table.stdout
    );
    assert!(table.stdout.contains(&format!("{estimate:.3}  [{low:.3}, {high:.3}]")), "{}", table.stdout);
}

#[test]
fn validate_reports_each_planted_problem_on_its_own_line() {
    let dir = tempdir();
    let set = built(dir.path());
    let trec = set.file("qrels.trec");
    let first = trec.lines().next().unwrap_or_default().to_owned();
    let rows = set.trec();
    let (query_id, chunk_id) =
        (&rows[0].0, &rows.iter().find(|r| r.0 != rows[0].0).unwrap_or_else(|| panic!("two queries")).1);
    let planted = format!(
        "{trec}{first}\ndirect-doesnotexist 0 {chunk_id} 3\n{query_id} 0 {chunk_id} 7\ndirect-a b 0 {chunk_id} 3\n"
    );
    let path = dir.path().join("planted.trec");
    write(&path, &planted);
    let n = trec.lines().count();
    let (corpus, queries) = (set.out.join("corpus.jsonl"), set.out.join("queries.jsonl"));
    let args = [
        "validate",
        "--qrels",
        path_str(&path),
        "--corpus",
        path_str(&corpus),
        "--queries",
        path_str(&queries),
    ];
    let run = cli(&set.out, &args);
    run.assert_code(1);
    let lines: Vec<&str> = run.stdout.lines().collect();
    let at = |line: usize, message: &str| format!("{}:{line}: {message}", path.display());
    assert_eq!(
        lines,
        [
            at(n + 1, &format!("duplicate pair ({}, {}), first on line 1", rows[0].0, rows[0].1)),
            at(n + 2, &format!("dangling query id direct-doesnotexist (not in {})", queries.display())),
            at(n + 3, "grade 7 is out of range 0–3"),
            at(n + 4, "expected 4 fields (query 0 doc grade), found 5: ids cannot hold whitespace"),
        ]
    );
    assert!(run.stderr.contains("4 problem(s)"), "{}", run.stderr);

    // In a set folder: a query id that is also a corpus id (fine: BEIR collections have them),
    // and a TSV row with a space in an id.
    let chunk_line = set.file("corpus.jsonl").lines().next().map(str::to_owned).unwrap_or_default();
    let chunk: Value = serde_json::from_str(&chunk_line).unwrap();
    let clash = json!({"_id": chunk["_id"], "text": "q", "metadata": {"type": "direct", "status": "kept"}});
    write(&queries, set.file("queries.jsonl") + &format!("{clash}\n"));
    write(&set.out.join("qrels/test.tsv"), set.file("qrels/test.tsv") + &format!("{query_id}\tdoc x\t3\n"));
    let run = cli(&set.out, &["validate", "--set", path_str(&set.out)]);
    run.assert_code(1);
    assert!(!run.stdout.contains("is also a corpus id"), "{}", run.stdout);
    assert!(
        run.stdout.contains("qrels/test.tsv:")
            && run.stdout.contains("corpus id \"doc x\" contains whitespace"),
        "{}",
        run.stdout
    );
}

/// The live files of a set (all but `versions/` and `review/`).
fn live(out: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    snapshot(out)
        .into_iter()
        .filter(|(p, _)| !p.starts_with("versions") && !p.starts_with("review"))
        .collect()
}

/// Queue items of `query_type`, in queue order.
fn of_type<'a>(queue: &'a [Value], query_type: &str) -> Vec<&'a Value> {
    queue.iter().filter(|q| str_field(q, "/type") == query_type).collect()
}

#[test]
fn a_failed_publish_leaves_the_set_as_it_was() {
    let dir = tempdir();
    let set = built(dir.path());
    let original = snapshot(&set.out);
    let queue = set.jsonl("review_queue.jsonl");
    let first = str_field(&queue[0], "/query_id");
    let decisions = dir.path().join("ann.jsonl");
    write(
        &decisions,
        jsonl(&[json!({"query_id": first, "decision": "reject", "reject_reason": "off topic"})]),
    );

    // no_answer.txt is a folder: publishing fails after queries.jsonl and the qrels were
    // replaced; they are put back from versions/v1.
    let moved = dir.path().join("no_answer.txt");
    fs_err::rename(set.out.join("no_answer.txt"), &moved).unwrap();
    write(&set.out.join("no_answer.txt/in-the-way"), "x");
    let before = live(&set.out);
    let failed = apply(&set, &decisions, &[]);
    failed.assert_code(2);
    assert!(
        failed.stderr.contains("version 2 was not published: the set is left as version 1"),
        "{}",
        failed.stderr
    );
    assert!(failed.stderr.contains("no_answer.txt"), "{}", failed.stderr);
    assert_eq!(live(&set.out), before, "the live files are restored");
    assert!(manifest(&set).get("review").is_none(), "still version 1");
    fs_err::remove_dir_all(set.out.join("no_answer.txt")).unwrap();
    fs_err::rename(&moved, set.out.join("no_answer.txt")).unwrap();

    // review/applied is a file: publishing fails before any live file is replaced.
    fs_err::remove_dir_all(set.out.join("review/applied")).unwrap();
    write(&set.out.join("review/applied"), "in the way");
    let before = live(&set.out);
    let failed = apply(&set, &decisions, &[]);
    failed.assert_code(2);
    assert!(failed.stderr.contains("review/applied"), "{}", failed.stderr);
    assert_eq!(live(&set.out), before, "no live file was touched");
    let kept = fs_err::read(set.out.join("versions/v1/queries.jsonl")).unwrap_or_default();
    assert!(kept == original[Path::new("queries.jsonl")], "version 1 is on disk before anything moves");
    let status = cli(&set.out, &["review", "status", "--set", path_str(&set.out)]);
    status.assert_code(0);
    assert!(status.stdout.contains("(version 1)"), "{}", status.stdout);
    fs_err::remove_file(set.out.join("review/applied")).unwrap();

    // A versions/v1 that differs from the files in place may be the only copy: it is not
    // overwritten.
    let stale = set.out.join("versions/v1/qrels.trec");
    write(&stale, "stale\n");
    let refused = apply(&set, &decisions, &[]);
    refused.assert_code(2);
    assert!(refused.stderr.contains("a publish failed part way"), "{}", refused.stderr);
    assert_eq!(fs_err::read_to_string(&stale).unwrap_or_default(), "stale\n");
    write(&stale, &original[Path::new("qrels.trec")]);

    // Out of the way: the same file applies as version 2, with its ledger alone.
    apply(&set, &decisions, &[]).assert_code(0);
    assert!(query(&set.jsonl("queries.jsonl"), first).is_none());
    assert_eq!(manifest(&set)["review"]["version"], 2);
    assert_eq!(set.file("review/decisions.jsonl").lines().count(), 1);
    for name in ["queries.jsonl", "qrels.trec", "qrels/provenance.tsv", "no_answer.txt", "manifest.json"] {
        let kept = fs_err::read(set.out.join("versions/v1").join(name)).unwrap_or_default();
        assert!(kept == original[Path::new(name)], "versions/v1/{name} is not version 1");
    }
}

#[test]
fn no_answer_txt_follows_the_review() {
    let dir = tempdir();
    let set = built(dir.path());
    let original = set.file("no_answer.txt");
    let queue = set.jsonl("review_queue.jsonl");
    let no_answer = of_type(&queue, "no_answer");
    let id = |i: usize| str_field(no_answer[i], "/query_id");
    let source = |i: usize| str_field(no_answer[i], "/sources/0/chunk_id");
    let decisions = dir.path().join("ann.jsonl");
    write(
        &decisions,
        jsonl(&[
            json!({"query_id": id(0), "decision": "reject", "reject_reason": "nonsense"}),
            json!({"query_id": id(1), "decision": "answerable", "add": source(1)}),
            json!({"query_id": id(2), "decision": "accept", "add": format!("{}=0", source(2))}),
        ]),
    );
    apply(&set, &decisions, &[]).assert_code(0);

    let listed: Vec<String> = set.file("no_answer.txt").lines().map(str::to_owned).collect();
    assert_eq!(listed.len(), original.lines().count() - 2);
    assert!(!listed.iter().any(|l| l == id(0) || l == id(1)), "rejected and answerable queries leave it");
    assert!(listed.iter().any(|l| l == id(2)), "a confirmed no_answer query stays");
    assert_eq!(
        fs_err::read_to_string(set.out.join("versions/v1/no_answer.txt")).unwrap_or_default(),
        original
    );
    let queries = set.jsonl("queries.jsonl");
    let answerable = query(&queries, id(1)).unwrap_or_else(|| panic!("kept"));
    assert_eq!(str_field(answerable, "/metadata/type"), "direct");
    assert_eq!(str_field(answerable, "/metadata/generated_as"), "no_answer");
    let rows = provenance(&set);
    assert_eq!(rows.get(&(id(2).to_owned(), source(2).to_owned())), Some(&(0, "human".into())));
    assert_eq!(trec_grade(&set, id(2), source(2)), None);
    cli(&set.out, &["validate", "--set", path_str(&set.out)]).assert_code(0);

    // A later grade 0 cannot take away the answer of the answerable query.
    let regrade = dir.path().join("regrade.jsonl");
    write(&regrade, jsonl(&[json!({"query_id": id(1), "add": format!("{}=0", source(1))})]));
    let refused = apply(&set, &regrade, &[]);
    refused.assert_code(2);
    assert!(
        refused.stderr.contains(&format!("line 1: {} would be left with no relevant chunk", id(1))),
        "{}",
        refused.stderr
    );

    let n = listed.len();
    write(
        &set.out.join("no_answer.txt"),
        set.file("no_answer.txt") + &format!("{}\nno_answer-nope\n", id(1)),
    );
    let run = cli(&set.out, &["validate", "--set", path_str(&set.out)]);
    run.assert_code(1);
    assert!(
        run.stdout.contains(&format!(
            "no_answer.txt:{}: {} is listed as no_answer but has a relevant chunk ({} in qrels.trec)",
            n + 1,
            id(1),
            source(1)
        )),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(&format!("no_answer.txt:{}: no_answer-nope is not in queries.jsonl", n + 2)),
        "{}",
        run.stdout
    );
}

#[test]
fn every_problem_of_a_file_is_reported_at_once() {
    let dir = tempdir();
    let set = built(dir.path());
    let before = snapshot(&set.out);
    let queue = set.jsonl("review_queue.jsonl");
    let direct = of_type(&queue, "direct");
    let id = |i: usize| str_field(direct[i], "/query_id");
    let relevant: Vec<String> =
        set.trec().into_iter().filter(|(q, _, _)| q == id(1)).map(|(_, c, _)| c).collect();
    let all_zero: Vec<String> = relevant.iter().map(|c| format!("{c}=0")).collect();
    let path = dir.path().join("ann.jsonl");
    write(
        &path,
        jsonl(&[
            json!({"query_id": "direct-000000000000", "decision": "accept"}),
            json!({"query_id": id(0), "decision": "acept"}),
            json!({"query_id": id(1), "decision": "accept", "add": all_zero.join(" ")}),
            json!({"query_id": id(2), "decision": "accept", "text": "a text typed over"}),
            json!({"query_id": id(3), "decision": "accept", "text": str_field(direct[3], "/text")}),
        ]),
    );
    let refused = apply(&set, &path, &[]);
    refused.assert_code(2);
    let expected = [
        "4 problem(s), nothing applied".to_owned(),
        "line 1: unknown query id direct-000000000000".to_owned(),
        "line 2: unknown decision \"acept\"".to_owned(),
        format!(
            "line 3: {} would be left with no relevant chunk: grade a chunk 1–3, add one, or reject",
            id(1)
        ),
        format!("line 4: the query text of {} was changed here but the decision is not edit", id(2)),
        "hint: fix the rows named and run the command again".to_owned(),
    ];
    for line in expected {
        assert!(refused.stderr.contains(&line), "{line:?} not in {}", refused.stderr);
    }
    assert_eq!(snapshot(&set.out), before, "nothing was written");

    // A file of pending rows says so; a Label Studio tasks file is recognised.
    write(&path, jsonl(&[json!({"query_id": id(0), "decision": null})]));
    let pending = apply(&set, &path, &[]);
    pending.assert_code(2);
    assert!(pending.stderr.contains("0 judgments read: every row is pending"), "{}", pending.stderr);
    let tasks = dir.path().join("tasks.json");
    export(&set, "label-studio", &tasks);
    let mixed_up = apply(&set, &tasks, &[]);
    mixed_up.assert_code(2);
    assert!(
        mixed_up.stderr.contains("is it the tasks file that review export wrote?"),
        "{}",
        mixed_up.stderr
    );

    // The row's reviewer wins over --reviewer, which fills in the others.
    write(
        &path,
        jsonl(&[
            json!({"query_id": id(0), "decision": "accept", "reviewer": "bob"}),
            json!({"query_id": id(1), "decision": "accept"}),
        ]),
    );
    apply(&set, &path, &["--reviewer", "ann"]).assert_code(0);
    let queries = set.jsonl("queries.jsonl");
    let reviewer = |i: usize| {
        str_field(query(&queries, id(i)).unwrap_or_else(|| panic!("kept")), "/metadata/review/reviewer")
            .to_owned()
    };
    assert_eq!((reviewer(0), reviewer(1)), ("bob".to_owned(), "ann".to_owned()));
}

#[test]
fn resolved_judgments_are_checked_and_agree_json_holds_the_outcome() {
    let dir = tempdir();
    let set = built(dir.path());
    let before = snapshot(&set.out);
    let queue = set.jsonl("review_queue.jsonl");
    let no_answer = of_type(&queue, "no_answer");
    let (id, source) = (str_field(no_answer[0], "/query_id"), str_field(no_answer[0], "/sources/0/chunk_id"));
    let corpus = set.jsonl("corpus.jsonl");
    let other = corpus.iter().map(|c| str_field(c, "/_id")).find(|c| *c != source).unwrap_or_default();
    let file = |name: &str, line: &Value| {
        let path = dir.path().join(format!("{name}.jsonl"));
        write(&path, jsonl(std::slice::from_ref(line)));
        path
    };
    // Each answers by a chunk the other grades 0: strict keeps the lower grade of both.
    let a = file(
        "ann",
        &json!({"query_id": id, "decision": "answerable", "add": format!("{source}=3 {other}=0")}),
    );
    let b = file(
        "bob",
        &json!({"query_id": id, "decision": "answerable", "add": format!("{source}=0 {other}=3")}),
    );
    let agree = |a: &Path, b: &Path, extra: &[&str]| {
        let mut args = vec![
            "review",
            "agree",
            "--set",
            path_str(&set.out),
            "--decisions",
            path_str(a),
            "--decisions",
            path_str(b),
        ];
        args.extend_from_slice(extra);
        cli(&set.out, &args)
    };
    let refused = agree(&a, &b, &["--resolve", "strict"]);
    refused.assert_code(2);
    assert!(
        refused.stderr.contains(&format!("resolved: {id}: answerable needs the chunk that answers it")),
        "{}",
        refused.stderr
    );
    assert_eq!(snapshot(&set.out), before, "nothing was written");

    let resolved = agree(&a, &b, &["--resolve", "lenient", "--json"]);
    resolved.assert_code(0);
    let json: Value =
        serde_json::from_str(&resolved.stdout).unwrap_or_else(|e| panic!("{e}: {}", resolved.stdout));
    assert_eq!(json["resolved"]["outcome"], "applied");
    assert_eq!(json["resolved"]["version"], 2);
    assert_eq!(json["decisions"]["items"], 1);
    assert_eq!(json["disagreements"][0]["about"], "grade");
    assert_eq!(manifest(&set)["review"]["version"], 2);
}

/// Runs the binary with a stdout whose reading end is already closed, so its first write fails
/// with a broken pipe (as `| head -1` does once head has its line).
fn with_closed_stdout(args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_qrelgen"))
        .args(args)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[test]
fn a_closed_stdout_exits_0_quietly_in_every_command() {
    let dir = tempdir();
    let set = built(dir.path());
    let queue = set.jsonl("review_queue.jsonl");
    let (a, b) = (dir.path().join("ann.jsonl"), dir.path().join("bob.jsonl"));
    for path in [&a, &b] {
        let lines: Vec<Value> = queue
            .iter()
            .map(|q| json!({"query_id": str_field(q, "/query_id"), "decision": "accept"}))
            .collect();
        write(path, jsonl(&lines));
    }
    // A set with a problem, so validate prints it.
    let broken = dir.path().join("broken");
    fs_err::create_dir_all(broken.join("qrels")).unwrap();
    for name in ["corpus.jsonl", "queries.jsonl", "qrels.trec", "qrels/test.tsv", "no_answer.txt"] {
        fs_err::copy(set.out.join(name), broken.join(name)).unwrap();
    }
    let mut trec = fs_err::read_to_string(broken.join("qrels.trec")).unwrap_or_default();
    trec.push_str("nobody 0 nothing 3\n");
    write(&broken.join("qrels.trec"), trec);

    let run_file = dir.path().join("bm25.run");
    let (set_dir, corpus, out) = (path_str(&set.out), sample_corpus(), dir.path().join("again"));
    let commands: Vec<Vec<&str>> = vec![
        vec!["validate", "--set", path_str(&broken)],
        vec!["--help"],
        vec!["review", "apply", "--help"],
        vec!["build", "--corpus", path_str(&corpus), "--out", path_str(&out), "--quiet"],
        vec!["build", "--print-prompts"],
        vec!["build", "--corpus", path_str(&corpus), "--out", path_str(&out), "--dry-run", "--quiet"],
        vec!["review", "export", "--set", set_dir, "--format", "jsonl"],
        vec!["review", "status", "--set", set_dir],
        vec!["review", "status", "--set", set_dir, "--json"],
        vec!["review", "agree", "--set", set_dir, "--decisions", path_str(&a), "--decisions", path_str(&b)],
        vec!["run", "--set", set_dir, "--to", path_str(&run_file), "--quiet"],
        vec!["eval", "--set", set_dir, "--run", path_str(&run_file), "--resamples", "100"],
        vec!["run", "--set", set_dir, "--to", path_str(&run_file), "--quiet", "--json"],
        vec!["eval", "--set", set_dir, "--run", path_str(&run_file), "--resamples", "100", "--json"],
        vec!["validate", "--set", path_str(&broken), "--json"],
        vec!["review", "apply", "--set", set_dir, "--decisions", path_str(&a)],
    ];
    for args in &commands {
        let (code, stderr) = with_closed_stdout(args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked") && !stderr.contains("error"), "{args:?}: {stderr}");
    }
    assert_eq!(manifest(&set)["review"]["version"], 2, "apply did its work before its report failed");
}

/// The sample set built in `dir`, and its Label Studio tasks and config.
fn label_studio_export(dir: &Path) -> (Run, Vec<Value>, String) {
    let set = built(dir);
    let tasks_path = dir.join("ls/tasks.json");
    export(&set, "label-studio", &tasks_path);
    let xml = fs_err::read_to_string(tasks_path.with_extension("xml")).unwrap_or_default();
    let tasks = serde_json::from_str(&fs_err::read_to_string(&tasks_path).unwrap_or_default()).unwrap();
    (set, tasks, xml)
}

#[test]
fn empty_label_studio_slots_show_nothing_and_a_grade_there_is_ignored_with_a_warning() {
    let dir = tempdir();
    let (set, tasks, xml) = label_studio_export(dir.path());
    let doc = roxmltree::Document::parse(&xml).unwrap();
    // Each slot's grades come from the task (Label Studio's dynamic choices): none for an empty
    // slot, so it shows no buttons; its chunk is inline HTML, so an empty one shows no box.
    for slot in ["source_1", "source_2", "pool_1", "pool_5"] {
        let grade = doc
            .descendants()
            .find(|n| n.attribute("name") == Some(&format!("{slot}_grade")))
            .unwrap_or_else(|| panic!("no {slot}_grade control"));
        assert_eq!(grade.attribute("value"), Some(format!("${slot}_grades").as_str()), "{xml}");
        let text =
            doc.descendants().find(|n| n.attribute("name") == Some(slot)).unwrap_or_else(|| panic!("{slot}"));
        assert_eq!((text.tag_name().name(), text.attribute("inline")), ("HyperText", Some("true")));
    }
    let one_source = tasks
        .iter()
        .position(|t| t["data"]["source_2_id"] == "" && data_type(t) == "direct")
        .unwrap_or_else(|| panic!("a direct task (one source)"));
    let data = &tasks[one_source]["data"];
    assert_eq!(
        (data["source_2"].as_str(), data["source_2_grades"].as_array().map(Vec::len)),
        (Some(""), Some(0))
    );
    let options = data["source_1_grades"].as_array().cloned().unwrap_or_default();
    let aliases: Vec<&str> = options.iter().filter_map(|o| o["alias"].as_str()).collect();
    assert_eq!(aliases, ["0", "1", "2", "3"], "what Label Studio stores is the grade");
    assert!(
        options.iter().all(|o| o["value"].as_str().is_some_and(|v| v.len() > 1)),
        "each grade says what it means"
    );

    // An annotation that grades the empty slot anyway (an old config, or a slip) still applies.
    let mut annotated = tasks.clone();
    annotated[one_source]["annotations"] = json!([{"id": 1, "completed_by": {"id": 7, "email": "cy@example.org"}, "result": [
        region("decision", "accept"), region("source_2_grade", "2"), region("source_1_grade", "3")]}]);
    let path = dir.path().join("ls-export.json");
    write(&path, serde_json::to_string(&annotated).unwrap_or_default());
    let applied = apply(&set, &path, &[]);
    applied.assert_code(0);
    assert!(
        applied.stderr.contains("warning:")
            && applied.stderr.contains("source_2_grade: a grade on an empty slot"),
        "{}",
        applied.stderr
    );
    let query_id = data["query_id"].as_str().unwrap_or_default();
    let source = data["source_1_id"].as_str().unwrap_or_default();
    assert_eq!(
        provenance(&set).get(&(query_id.to_owned(), source.to_owned())),
        Some(&(3, "human".to_owned()))
    );
}

#[test]
fn the_label_studio_config_explains_grades_and_decisions_in_plain_words() {
    let dir = tempdir();
    let (_, _, xml) = label_studio_export(dir.path());
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let view = doc
        .descendants()
        .find(|n| n.attribute("name").is_some_and(|name| name.starts_with("instructions")))
        .and_then(|n| n.parent())
        .unwrap_or_else(|| panic!("no instructions in {xml}"));
    let text: String = view.descendants().filter_map(|n| n.attribute("value")).collect::<Vec<_>>().join("\n");
    for grade in ["0 =", "1 =", "2 =", "3 ="] {
        assert!(text.contains(grade), "grade {grade} explained: {text}");
    }
    for decision in ["Accept", "Edit", "Answerable", "Reject"] {
        assert!(text.contains(decision), "{decision} explained: {text}");
    }
    for internal in ["source_in_top_n", "no_answer_confirmed", "flagged", "kept", "_grade", "provenance"] {
        assert!(!text.contains(internal), "{internal:?} is an internal name: {text}");
    }
    // The instructions come before the query, and the decisions show words, store our labels.
    let first = doc.root_element().first_element_child().unwrap_or_else(|| panic!("empty config"));
    assert_eq!(Some(first), Some(view));
    let choices: Vec<(String, String)> = doc
        .descendants()
        .filter(|n| {
            n.tag_name().name() == "Choice"
                && n.parent().and_then(|p| p.attribute("name")) == Some("decision")
        })
        .map(|n| {
            (
                n.attribute("alias").unwrap_or_default().to_owned(),
                n.attribute("value").unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        choices.iter().map(|(a, _)| a.as_str()).collect::<Vec<_>>(),
        ["accept", "edit", "answerable", "reject"]
    );
    assert!(choices.iter().all(|(alias, shown)| shown.len() > alias.len()), "{choices:?}");
}

#[test]
fn label_studio_user_ids_are_named_by_reviewer_or_reviewer_map_and_json_min_is_read() {
    let dir = tempdir();
    let (set, tasks, _) = label_studio_export(dir.path());
    let direct: Vec<usize> = (0..tasks.len()).filter(|&t| data_type(&tasks[t]) == "direct").take(2).collect();
    let query_id = |t: usize| tasks[t]["data"]["query_id"].as_str().unwrap_or_default().to_owned();
    let reviewer_of = |id: &str| {
        let queries = set.jsonl("queries.jsonl");
        query(&queries, id).map(|q| str_field(q, "/metadata/review/reviewer").to_owned())
    };
    // Label Studio's JSON export names annotators by number only.
    let mut annotated = tasks.clone();
    annotated[direct[0]]["annotations"] =
        json!([{"id": 1, "completed_by": 1, "result": [region("decision", "accept")]}]);
    let path = dir.path().join("ls-export.json");
    write(&path, serde_json::to_string(&annotated).unwrap_or_default());
    apply(&set, &path, &["--reviewer", "ann"]).assert_code(0);
    assert_eq!(reviewer_of(&query_id(direct[0])).as_deref(), Some("ann"), "--reviewer names the one user id");

    // Two annotators: --reviewer cannot name both; a map can.
    annotated[direct[1]]["annotations"] =
        json!([{"id": 2, "completed_by": 2, "result": [region("decision", "accept")]}]);
    write(&path, serde_json::to_string(&annotated).unwrap_or_default());
    let ambiguous = apply(&set, &path, &["--reviewer", "ann"]);
    ambiguous.assert_code(2);
    assert!(ambiguous.stderr.contains("--reviewer-map"), "{}", ambiguous.stderr);
    let map = dir.path().join("annotators.txt");
    write(&map, "# Label Studio user id = name\n1=ann\n");
    let missing = apply(&set, &path, &["--reviewer-map", path_str(&map)]);
    missing.assert_code(2);
    assert!(
        missing.stderr.contains("user 2") && missing.stderr.contains("annotators.txt"),
        "{}",
        missing.stderr
    );
    write(&map, "1 = ann\n2 = bob\n");
    apply(&set, &path, &["--reviewer-map", path_str(&map)]).assert_code(0);
    assert_eq!(reviewer_of(&query_id(direct[1])).as_deref(), Some("bob"));

    // Unnamed user ids still apply, with a warning that says how to name them.
    let unnamed = apply(&set, &path, &[]);
    unnamed.assert_code(0);
    assert!(
        unnamed.stderr.contains("warning:") && unnamed.stderr.contains("--reviewer-map"),
        "{}",
        unnamed.stderr
    );

    // JSON-MIN: one flat record per annotation, the task's data beside the controls.
    let mut record = tasks[direct[0]]["data"].clone();
    record["id"] = json!(17);
    record["decision"] = json!("reject");
    record["reject_reason"] = json!({"text": ["off", "topic"]});
    record["annotator"] = json!(2);
    record["annotation_id"] = json!(9);
    let min = dir.path().join("ls-export-min.json");
    write(&min, serde_json::to_string(&json!([record])).unwrap_or_default());
    apply(&set, &min, &["--reviewer-map", path_str(&map)]).assert_code(0);
    assert!(reviewer_of(&query_id(direct[0])).is_none(), "rejected by bob");
    let queries = set.jsonl("queries.jsonl");
    assert!(query(&queries, &query_id(direct[0])).is_none());
}

/// A file of `tests/fixtures/label-studio/`: exports from a real Label Studio (the version in
/// `label-studio-version.txt`), made by `tests/interop/label-studio.sh --update-fixtures` from the
/// sample set this suite builds.
pub(super) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/label-studio").join(name)
}

#[test]
fn real_label_studio_json_and_json_min_exports_apply_alike() {
    let version = fs_err::read_to_string(fixture("label-studio-version.txt")).unwrap_or_default();
    assert!(version.starts_with("1.23"), "fixtures from Label Studio {version}");
    let map = fixture("annotators.txt");
    let (dir_json, dir_min) = (tempdir(), tempdir());
    let (json_set, min_set) = (built(dir_json.path()), built(dir_min.path()));
    let hint =
        "the fixtures no longer fit the sample set: rerun tests/interop/label-studio.sh --update-fixtures";

    let applied = apply(&json_set, &fixture("export.json"), &["--reviewer-map", path_str(&map)]);
    assert_eq!(applied.code, Some(0), "{hint}\n{}", applied.stderr);
    assert!(
        applied.stdout.contains("4 accepted, 1 edited, 1 answerable, 1 rejected, 5 grades"),
        "{}",
        applied.stdout
    );
    assert!(applied.stderr.contains("source_2_grade: a grade on an empty slot"), "{}", applied.stderr);
    let min = apply(&min_set, &fixture("export-min.json"), &["--reviewer-map", path_str(&map)]);
    assert_eq!(min.code, Some(0), "{hint}\n{}", min.stderr);
    assert_eq!(json_set.file("queries.jsonl"), min_set.file("queries.jsonl"), "JSON-MIN reads as JSON");
    assert_eq!(json_set.file("qrels/provenance.tsv"), min_set.file("qrels/provenance.tsv"));

    // Every annotator is named through the map, as Label Studio numbered them.
    let export: Vec<Value> =
        serde_json::from_str(&fs_err::read_to_string(fixture("export.json")).unwrap_or_default()).unwrap();
    let names = BTreeMap::from([(1, "ann"), (2, "bob")]);
    let queries = json_set.jsonl("queries.jsonl");
    let mut seen = BTreeSet::new();
    for task in &export {
        let annotation = &task["annotations"][0];
        let user = annotation["completed_by"].as_u64().unwrap_or_else(|| panic!("a numeric completed_by"));
        let id = task["data"]["query_id"].as_str().unwrap_or_default();
        if let Some(q) = query(&queries, id) {
            assert_eq!(str_field(q, "/metadata/review/reviewer"), names[&user], "{id}");
            seen.insert(names[&user]);
        }
    }
    assert_eq!(seen, BTreeSet::from(["ann", "bob"]));
    // The grade clicked in the real UI (task 7: "3 = answers fully", "Accept as it is") is a 3.
    let clicked = export.iter().find(|t| t["id"] == 7).unwrap_or_else(|| panic!("the UI task"));
    let (id, chunk) = (str_field(&clicked["data"], "/query_id"), str_field(&clicked["data"], "/source_1_id"));
    assert_eq!(provenance(&json_set).get(&(id.to_owned(), chunk.to_owned())), Some(&(3, "human".to_owned())));
}

#[test]
fn real_label_studio_user_ids_without_names_are_kept_with_a_warning() {
    let dir = tempdir();
    let set = built(dir.path());
    let applied = apply(&set, &fixture("export.json"), &[]);
    applied.assert_code(0);
    assert!(
        applied.stderr.contains("annotators are known only as Label Studio users 1, 2"),
        "{}",
        applied.stderr
    );
    let reviewers: BTreeSet<String> = set
        .jsonl("queries.jsonl")
        .iter()
        .filter_map(|q| q.pointer("/metadata/review/reviewer").and_then(Value::as_str).map(str::to_owned))
        .collect();
    assert_eq!(
        reviewers,
        BTreeSet::from(["label-studio-user-1".to_owned(), "label-studio-user-2".to_owned()])
    );
}

#[test]
fn real_label_studio_agreement_exports_compare_two_named_reviewers() {
    let dir = tempdir();
    let set = built(dir.path());
    let map = fixture("annotators.txt");
    for file in ["agree.json", "agree-min.json"] {
        let decisions = fixture(file);
        let mut args = vec!["review", "agree", "--set", path_str(&set.out), "--json"];
        args.extend(["--decisions", path_str(&decisions), "--reviewer-map", path_str(&map)]);
        let run = cli(&set.out, &args);
        run.assert_code(0);
        let json: Value = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout));
        let mut reviewers: Vec<&str> =
            json["reviewers"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        reviewers.sort_unstable();
        assert_eq!(reviewers, ["ann", "bob"], "{file}");
        assert_eq!(json["decisions"]["items"], 3, "{file}");
        assert_eq!(json["disagreements"].as_array().map(Vec::len), Some(2), "{file}");
    }
}
