//! Corpus input: folders with bad files, JSONL, pre-chunked input, empty corpora.

use super::{build, sample_corpus, str_field, tempdir, write};
use std::path::Path;

/// Copies the sample corpus into `dir` (so tests can add bad files to it).
fn copy_sample(dir: &Path) {
    for entry in
        walkdir::WalkDir::new(sample_corpus()).into_iter().flatten().filter(|e| e.file_type().is_file())
    {
        let relative = entry.path().strip_prefix(sample_corpus()).unwrap();
        write(&dir.join(relative), fs_err::read(entry.path()).unwrap());
    }
}

#[test]
fn bad_files_are_skipped_with_one_warning_each() {
    let dir = tempdir();
    let corpus = dir.path().join("corpus");
    copy_sample(&corpus);
    write(&corpus.join("bad/latin1.md"), b"caf\xe9 menu");
    write(&corpus.join("bad/blob.txt"), b"\x00\x01\x02binary");
    write(&corpus.join("bad/empty.html"), b"<html><body><script>x()</script></body></html>");
    write(&corpus.join("notes.pdf"), b"%PDF");
    write(&corpus.join("notes.odt"), b"PK");
    let run = build(dir.path(), &corpus, &[]);
    run.assert_code(0);
    assert_eq!(run.stderr.matches("warning: skipped ").count(), 4, "{}", run.stderr);
    assert!(run.stderr.contains("latin1.md: invalid UTF-8 at byte 3"), "{}", run.stderr);
    assert!(run.stderr.contains("notes.pdf: unreadable PDF"), "{}", run.stderr);
    assert!(run.stdout.contains("4 input(s) skipped"));
    let manifest: serde_json::Value = serde_json::from_str(&run.file("manifest.json")).unwrap();
    assert_eq!(manifest["corpus"]["skipped"], 4);
    assert_eq!(manifest["corpus"]["ignored"], 1);
    assert!(run.file("report.md").contains("blob.txt: binary file"));
}

/// Builds from a corpus folder of the one file `name` holding `bytes`, expecting exit `code`
/// and each of `said` in stderr; the folder the run worked in, and the run.
#[track_caller]
fn build_one_file(name: &str, bytes: &[u8], code: i32, said: &[&str]) -> (tempfile::TempDir, super::Run) {
    let dir = tempdir();
    let corpus = dir.path().join("corpus");
    write(&corpus.join(name), bytes);
    let run = build(dir.path(), &corpus, &[]);
    run.assert_code(code);
    for text in said {
        assert!(run.stderr.contains(text), "{text:?} not in:\n{}", run.stderr);
    }
    (dir, run)
}

#[test]
fn empty_corpus_is_a_clear_error() {
    let (dir, _) = build_one_file("empty.md", b"  \n", 2, &["no usable documents", "hint:"]);
    let missing = build(dir.path(), &dir.path().join("nope"), &[]);
    missing.assert_code(2);
    assert!(missing.stderr.contains("cannot read the corpus"), "{}", missing.stderr);
}

#[test]
fn a_one_chunk_corpus_is_a_clear_error_not_a_panic() {
    // No term in two chunks: the topic space has no dimensions (its fit once panicked here).
    let page = b"# One\n\nA single short page about nothing much.\n";
    let (_dir, run) = build_one_file("only.md", page, 1, &["no query could be planned"]);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
}

#[test]
fn jsonl_and_prechunked_input() {
    // First build from the folder; its corpus.jsonl (BEIR, "_id") is then a JSONL corpus.
    let dir = tempdir();
    let first = build(dir.path(), &sample_corpus(), &[]);
    first.assert_code(0);
    let beir = dir.path().join("beir-corpus.jsonl");
    fs_err::copy(first.out.join("corpus.jsonl"), &beir).unwrap();

    let pre = tempdir();
    let prechunked = build(pre.path(), &beir, &["--prechunked"]);
    prechunked.assert_code(0);
    let ids = |run: &super::Run| -> Vec<String> {
        run.jsonl("corpus.jsonl").iter().map(|c| str_field(c, "/_id").to_owned()).collect()
    };
    assert_eq!(ids(&prechunked), ids(&first), "pre-chunked input must keep its ids");
    let doc_ids = |run: &super::Run| -> Vec<String> {
        run.jsonl("corpus.jsonl").iter().map(|c| str_field(c, "/metadata/doc_id").to_owned()).collect()
    };
    assert_eq!(doc_ids(&prechunked), doc_ids(&first), "metadata.doc_id must group chunks into documents");

    let docs = tempdir();
    let as_documents = build(docs.path(), &beir, &["--chunk-size", "400", "--chunk-overlap", "50"]);
    as_documents.assert_code(0);
    let rechunked = ids(&as_documents);
    assert!(rechunked.len() > ids(&first).len(), "smaller chunks, more of them");
    assert!(rechunked.iter().all(|id| !id.contains(' ') && !id.contains('#')));

    let folder = build(docs.path(), &sample_corpus(), &["--prechunked"]);
    folder.assert_code(2);
    assert!(folder.stderr.contains("--prechunked needs a JSONL file"), "{}", folder.stderr);
}

#[test]
fn jsonl_bad_lines_are_skipped_by_line_number() {
    let dir = tempdir();
    let path = dir.path().join("docs.jsonl");
    let mut lines = String::new();
    for doc in super::build::sample_docs_as_jsonl() {
        lines.push_str(&doc);
        lines.push('\n');
    }
    lines.push_str("{broken\n");
    write(&path, lines);
    let run = build(dir.path(), &path, &[]);
    run.assert_code(0);
    assert!(run.stderr.contains("docs.jsonl:43: invalid JSON"), "{}", run.stderr);
}

#[cfg(unix)]
#[test]
fn symlink_loop_does_not_hang() {
    let dir = tempdir();
    let corpus = dir.path().join("corpus");
    copy_sample(&corpus);
    std::os::unix::fs::symlink(&corpus, corpus.join("loop")).unwrap();
    let run = build(dir.path(), &corpus, &[]);
    run.assert_code(0);
    assert!(run.stderr.contains("File system loop found"), "{}", run.stderr);
}

#[test]
fn a_failed_run_leaves_the_previous_set_whole() {
    let dir = tempdir();
    let good = build(dir.path(), &sample_corpus(), &[]);
    good.assert_code(0);
    let before = good.file("qrels.trec");
    let empty = dir.path().join("empty");
    write(&empty.join("blank.md"), "\n");
    build(dir.path(), &empty, &[]).assert_code(2);
    assert_eq!(good.file("qrels.trec"), before);
    let corpus: std::collections::HashSet<String> =
        good.jsonl("corpus.jsonl").iter().map(|c| str_field(c, "/_id").to_owned()).collect();
    assert!(
        good.trec().iter().all(|(_, chunk, _)| corpus.contains(chunk)),
        "qrels point outside corpus.jsonl"
    );
    assert!(!good.out.join(".staging").exists());
}

#[test]
fn an_output_folder_inside_the_corpus_is_not_read() {
    let dir = tempdir();
    let corpus = dir.path().join("corpus");
    copy_sample(&corpus);
    for _ in 0..2 {
        let out = corpus.join("out");
        let output = super::qrelgen(&[
            "build",
            "--corpus",
            super::path_str(&corpus),
            "--out",
            super::path_str(&out),
            "-q",
        ]);
        assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
        let manifest: serde_json::Value =
            serde_json::from_str(&fs_err::read_to_string(out.join("manifest.json")).unwrap_or_default())
                .unwrap();
        assert_eq!(manifest["corpus"]["documents"], 42);
    }
}

#[test]
fn title_only_documents_are_indexed_by_their_title() {
    // The sample corpus as JSONL; every other document keeps its words only in its title.
    let dir = tempdir();
    let (mut full, mut half) = (String::new(), String::new());
    for (i, line) in super::build::sample_docs_as_jsonl().iter().enumerate() {
        let doc: serde_json::Value = serde_json::from_str(line).unwrap();
        full.push_str(line);
        full.push('\n');
        let edited = if i % 2 == 0 {
            serde_json::json!({"_id": doc["id"], "title": doc["text"], "text": ""})
        } else {
            doc.clone()
        };
        half.push_str(&edited.to_string());
        half.push('\n');
    }
    write(&dir.path().join("full.jsonl"), full);
    write(&dir.path().join("half.jsonl"), half);
    let (a, b) = (tempdir(), tempdir());
    let with_text = build(a.path(), &dir.path().join("full.jsonl"), &["-q"]);
    with_text.assert_code(0);
    let title_only = build(b.path(), &dir.path().join("half.jsonl"), &["-q"]);
    title_only.assert_code(0);
    assert!(!title_only.stderr.contains("no text"), "{}", title_only.stderr);
    let manifest: serde_json::Value = serde_json::from_str(&title_only.file("manifest.json")).unwrap();
    assert_eq!(
        (manifest["corpus"]["documents"].as_u64(), manifest["corpus"]["skipped"].as_u64()),
        (Some(42), Some(0))
    );
    // The title is the text of a title-only document: the same chunks (the title slot falls back
    // to the id, as for any untitled document), and the same ids as when it is the text.
    let chunks = |run: &super::Run| -> Vec<(String, String)> {
        run.jsonl("corpus.jsonl")
            .iter()
            .map(|c| (str_field(c, "/_id").to_owned(), str_field(c, "/text").to_owned()))
            .collect()
    };
    assert_eq!(chunks(&title_only), chunks(&with_text));
    let titles: Vec<String> =
        title_only.jsonl("corpus.jsonl").iter().map(|c| str_field(c, "/title").to_owned()).collect();
    assert!(titles.iter().all(|t| !t.is_empty() && t.len() < 80), "{titles:?}");
    let queries = title_only.jsonl("queries.jsonl");
    assert_eq!(queries.len(), 100);
}

#[test]
fn a_bom_and_renamed_ids_in_jsonl() {
    let dir = tempdir();
    let path = dir.path().join("docs.jsonl");
    let mut lines = String::from("\u{feff}");
    for (i, line) in super::build::sample_docs_as_jsonl().iter().enumerate() {
        let mut doc: serde_json::Value = serde_json::from_str(line).unwrap();
        match i {
            0 => doc["id"] = "doc one".into(),
            1 => doc["id"] = "doc#2".into(),
            _ => {}
        }
        lines.push_str(&doc.to_string());
        lines.push('\n');
    }
    write(&path, lines);
    let run = build(dir.path(), &path, &["-q"]);
    run.assert_code(0);
    let manifest: serde_json::Value = serde_json::from_str(&run.file("manifest.json")).unwrap();
    assert_eq!(
        (manifest["corpus"]["documents"].as_u64(), manifest["corpus"]["skipped"].as_u64()),
        (Some(42), Some(0)),
        "{}",
        run.stderr
    );
    assert_eq!(run.stderr.matches("warning: ").count(), 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("docs.jsonl:1: document id \"doc one\" is written as doc_one-f1193e6e"),
        "{}",
        run.stderr
    );
    // A renamed id carries 8 hex digits of its original's hash, so no two ids become one.
    assert!(
        run.stderr.contains("docs.jsonl:2: document id \"doc#2\" is written as doc_2-"),
        "{}",
        run.stderr
    );
    for chunk in run.jsonl("corpus.jsonl") {
        let source = chunk.pointer("/metadata/source_id").and_then(serde_json::Value::as_str);
        match str_field(&chunk, "/metadata/doc_id") {
            "doc_one-f1193e6e" => assert_eq!(source, Some("doc one")),
            id if id.starts_with("doc_2-") && id.len() == 14 => assert_eq!(source, Some("doc#2")),
            _ => assert_eq!(source, None, "{chunk}"),
        }
    }
}

#[test]
fn input_messages_say_what_is_wrong() {
    let dir = tempdir();
    // A single Markdown file is read as Markdown, not as JSONL.
    let single = dir.path().join("guide.md");
    let text: String = walkdir::WalkDir::new(sample_corpus())
        .sort_by_file_name()
        .into_iter()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "md"))
        .filter_map(|e| fs_err::read_to_string(e.path()).ok())
        .collect::<Vec<_>>()
        .join("\n\n");
    write(&single, text);
    let one = build(dir.path(), &single, &["-q", "--queries", "20"]);
    one.assert_code(0);
    assert!(one.jsonl("corpus.jsonl").iter().all(|c| str_field(c, "/metadata/doc_id") == "guide.md"));

    // Every file skipped: each reason is printed, the first 10, then a count.
    let bad = dir.path().join("bad");
    for i in 0..12 {
        write(&bad.join(format!("empty{i:02}.md")), " \n");
    }
    write(&bad.join("a.rst"), "Title\n=====\n");
    write(&bad.join("b.rst"), "Title\n=====\n");
    write(&bad.join("c.epub"), "PK");
    let empty = build(dir.path(), &bad, &["-q"]);
    empty.assert_code(2);
    assert!(
        empty.stderr.contains("empty00.md: empty file") && empty.stderr.contains("empty09.md: empty file"),
        "{}",
        empty.stderr
    );
    assert!(!empty.stderr.contains("empty10.md") && empty.stderr.contains("and 2 more"), "{}", empty.stderr);
    assert!(empty.stderr.contains(".rst (2), .epub (1)"), "{}", empty.stderr);

    // Unread extensions are named in one warning.
    let corpus = dir.path().join("corpus");
    copy_sample(&corpus);
    write(&corpus.join("notes.rst"), "x");
    write(&corpus.join("spec.odt"), "x");
    let run = build(dir.path(), &corpus, &["-q"]);
    run.assert_code(0);
    let warnings: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("warning:")).collect();
    assert_eq!(warnings.len(), 1, "{}", run.stderr);
    assert!(
        warnings[0].contains("2 file(s) with extensions qrelgen does not read")
            && warnings[0].contains(".odt (1), .rst (1)"),
        "{}",
        warnings[0]
    );

    // --out equal to --corpus.
    let same = super::qrelgen(&[
        "build",
        "--corpus",
        super::path_str(&corpus),
        "--out",
        super::path_str(&corpus),
        "-q",
    ]);
    assert_eq!(same.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&same.stderr);
    assert!(
        stderr.contains("--out is the corpus folder") && !stderr.contains("no usable documents"),
        "{stderr}"
    );
}

#[test]
fn pdf_and_docx_files_are_read_with_pages_and_headings_and_bad_ones_skipped_with_a_reason() {
    let dir = tempdir();
    let corpus = dir.path().join("docs");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/documents");
    for name in ["billing.pdf", "keys.docx", "scanned.pdf", "locked.pdf", "broken.pdf"] {
        let bytes = fs_err::read(fixtures.join(name)).unwrap_or_default();
        fs_err::create_dir_all(&corpus).unwrap_or_else(|e| panic!("{e}"));
        fs_err::write(corpus.join(name), bytes).unwrap_or_else(|e| panic!("{e}"));
    }
    let run = build(dir.path(), &corpus, &["--queries", "4", "--allow-shortfall"]);
    run.assert_code(0);
    let chunks = run.jsonl("corpus.jsonl");
    let text_of = |doc: &str| -> String {
        let texts =
            chunks.iter().filter(|c| str_field(c, "/metadata/doc_id") == doc).map(|c| str_field(c, "/text"));
        texts.collect::<Vec<_>>().join("\n")
    };
    let billing = text_of("billing.pdf");
    assert!(billing.starts_with("## Page 1\n\nInvoices are emailed to the billing contact"), "{billing}");
    assert!(billing.contains("## Page 2\n\nPayment methods can be changed"), "{billing}");
    let keys = text_of("keys.docx");
    assert!(keys.contains("## Recovery keys\n\nEncrypted folders require recovery keys"), "{keys}");
    assert!(keys.contains("### Rotating keys\n\nAdministrators rotate"), "{keys}");
    assert!(
        chunks.iter().any(|c| str_field(c, "/title") == "Recovery keys"),
        "the first heading is the title"
    );
    // Each chunk knows its page (PDF) or heading (Word), in the corpus, the queue and the tasks.
    for chunk in chunks.iter().filter(|c| str_field(c, "/metadata/doc_id") == "billing.pdf") {
        let text = str_field(chunk, "/text");
        let page = if text.contains("Invoices are emailed") { "Page 1" } else { "Page 2" };
        assert_eq!(str_field(chunk, "/metadata/section"), page, "{chunk}");
    }
    let rotating = chunks.iter().find(|c| str_field(c, "/text").contains("Administrators rotate")).unwrap();
    // One chunk, under the heading that is the document's title: no section beside the title.
    assert!(rotating["metadata"].get("section").is_none(), "{rotating}");
    let sections: Vec<String> = run
        .jsonl("review_queue.jsonl")
        .iter()
        .flat_map(|item| item["sources"].as_array().cloned().unwrap_or_default())
        .filter_map(|s| Some(s["section"].as_str()?.to_owned()))
        .collect();
    assert!(!sections.is_empty() && sections.iter().all(|s| s.starts_with("Page ")), "{sections:?}");
    let tasks = dir.path().join("tasks.json");
    let export = super::qrelgen(&[
        "review",
        "export",
        "--set",
        super::path_str(&run.out),
        "--format",
        "label-studio",
        "--to",
        super::path_str(&tasks),
    ]);
    assert_eq!(export.status.code(), Some(0), "{}", String::from_utf8_lossy(&export.stderr));
    let tasks = fs_err::read_to_string(&tasks).unwrap();
    assert!(tasks.contains("source 1 · billing › Page 1 · billing.pdf:"), "{tasks}");
    let report = run.file("report.md");
    for said in [
        "scanned.pdf: no text layer in its 1 page(s) (a scanned PDF?)",
        "locked.pdf: encrypted PDF",
        "broken.pdf: unreadable PDF",
    ] {
        assert!(report.contains(said), "{said}\n{report}");
    }
    assert!(report.contains("(2 documents, 3 skipped, 0 ignored)"), "{report}");
}
