//! Tests of the chunk index: BM25 ranking and its ties, pages of the ordering, texts and term
//! statistics, and when an index is built again, reused or refused.

use super::*;

fn build_index(dir: &Path, texts: &[&str]) -> (ChunkIndex, IndexOrigin) {
    from_chunks(dir, &test_chunks(texts))
}

#[test]
fn ranks_by_bm25_and_breaks_ties_by_position() {
    let dir = tempfile::tempdir().unwrap();
    let (index, _) = build_index(
        dir.path(),
        &["quota exceeded error", "apple banana", "quota", "apple banana", "quota quota"],
    );
    let hits: Vec<_> = index.search("Quotas", 10).unwrap();
    let order: Vec<_> = hits.iter().map(|h| h.chunk).collect();
    assert_eq!(order, [4, 2, 0]);
    let ties: Vec<_> = index.search("banana", 1).unwrap();
    assert_eq!(ties.iter().map(|h| h.chunk).collect::<Vec<_>>(), [1]);
    assert_eq!(index.doc_freq("quota").unwrap_or_default(), 3);
    assert!(index.search("the of", 5).unwrap().is_empty());
}

#[test]
fn serves_texts_and_positions() {
    let dir = tempfile::tempdir().unwrap();
    let (index, _) = build_index(dir.path(), &["first text", "second text", "third"]);
    assert_eq!(index.text(1).unwrap_or_default(), "second text");
    assert_eq!(index.chunk_id(2).as_str(), "c2");
    let id = ChunkId::parse("c2").unwrap();
    assert_eq!(index.position(&id), Some(2));
    assert_eq!(index.position(&ChunkId::parse("c9").unwrap()), None);
}

#[test]
fn an_eight_character_chinese_substring_finds_its_chunk_first() {
    let dir = tempfile::tempdir().unwrap();
    let texts = [
        "当工作区的存储用量达到配额的百分之九十时，管理员会收到提醒邮件。",
        "分享链接默认在三十天后过期，可以在链接设置里设置访问密码。",
        "桌面客户端在后台同步文件，冲突时会生成冲突副本文件。",
        "Mixed text: run harbor sync --pause 暂停同步，恢复时运行 resume 命令。",
    ];
    for segmenter in [Segmenter::Jieba, Segmenter::Bigram] {
        let path = dir.path().join(segmenter.label());
        let chunks = test_chunks(&texts);
        let metas = chunks.iter().collect();
        let (index, _) = ChunkIndex::open_or_build(
            &path,
            metas,
            "zh",
            Analyzer::new(segmenter),
            2,
            &StageProgress::hidden(),
            |add| chunks.iter().try_for_each(add),
        )
        .unwrap();
        for (i, text) in texts.iter().enumerate().take(3) {
            let substring: String = text.chars().skip(5).take(8).collect();
            let hits = index.search(&substring, 3).unwrap();
            assert_eq!(hits.first().map(|h| h.chunk), Some(i), "{segmenter:?}: {substring}");
        }
        for query in ["暂停同步", "harbor pause"] {
            let hits = index.search(query, 1).unwrap();
            assert_eq!(hits.first().map(|h| h.chunk), Some(3), "{segmenter:?}: {query}");
        }
    }
}

#[test]
fn rebuilds_only_when_chunks_change() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index");
    assert_eq!(build_index(&path, &["one", "two"]).1, IndexOrigin::Built);
    assert_eq!(build_index(&path, &["one", "two"]).1, IndexOrigin::Reused);
    let (index, provenance) = build_index(&path, &["one", "two", "three"]);
    assert_eq!(provenance, IndexOrigin::Built);
    assert_eq!(index.len(), 3);
}

/// Builds an index in `dir` for `chunks`, feeding it only the first `fed` of them.
fn build_fed(dir: &Path, chunks: &[Chunk], fed: usize) -> Result<(ChunkIndex, IndexOrigin)> {
    let metas = chunks.iter().collect();
    ChunkIndex::open_or_build(dir, metas, "f", Analyzer::default(), 1, &StageProgress::hidden(), |add| {
        chunks.iter().take(fed).try_for_each(add)
    })
}

#[test]
fn refuses_to_wipe_a_foreign_folder() {
    let dir = tempfile::tempdir().unwrap();
    fs_err::write(dir.path().join("notes.txt"), "mine").unwrap();
    let result = build_fed(dir.path(), &test_chunks(&["x"]), 1);
    assert!(result.is_err());
    assert!(dir.path().join("notes.txt").exists());
}

#[test]
fn rejects_a_feed_that_does_not_match_the_chunk_list() {
    let dir = tempfile::tempdir().unwrap();
    let result = build_fed(dir.path(), &test_chunks(&["a", "b"]), 1);
    assert!(result.is_err_and(|e| {
        matches!(e, IndexError::Mismatch { chunks: 2, .. })
            && e.to_string().contains("does not hold the 2 chunks")
    }));
}

#[test]
fn tied_chunks_share_one_score_and_rank_by_position() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (index, _) = build_index(dir.path(), &["apple pie", "quota", "apple pie", "apple pie", "apple"]);
    let hits = index.search("apple pie", 3).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(hits.iter().map(|h| h.chunk).collect::<Vec<_>>(), [0, 2, 3]);
    assert!(hits.iter().all(|h| h.score.to_bits() == hits[0].score.to_bits()), "{hits:?}");
}

/// An index of `texts` built with `threads` writer threads, and its folder.
fn built_with(texts: &[&str], threads: usize) -> (tempfile::TempDir, ChunkIndex) {
    let dir = tempfile::tempdir().unwrap();
    let chunks = test_chunks(texts);
    let metas = chunks.iter().collect();
    let (index, _) = ChunkIndex::open_or_build(
        dir.path(),
        metas,
        "t",
        Analyzer::default(),
        threads,
        &StageProgress::hidden(),
        |add| chunks.iter().try_for_each(add),
    )
    .unwrap();
    (dir, index)
}

/// Texts of a few words from a small vocabulary: many chunks share a score exactly.
fn tied_texts(chunks: usize) -> Vec<String> {
    let words = ["quota", "storage", "sync", "error", "links", "password", "upload", "folder"];
    (0..chunks)
        .map(|i| {
            (0..6).map(|j| words[(i * 7 + j * j * 3 + i / 11) % words.len()]).collect::<Vec<_>>().join(" ")
        })
        .collect()
}

#[test]
fn scores_and_rankings_do_not_depend_on_the_writer_threads() {
    // Many exact ties (repeated texts) spread over the segments of several writer threads.
    let texts = tied_texts(600);
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (_one, serial) = built_with(&texts, 1);
    let (_many, parallel) = built_with(&texts, 4);
    assert_eq!(serial.searcher.segment_readers().len(), 1);
    assert!(parallel.searcher.segment_readers().len() > 1, "the test needs several segments");
    for query in ["quota", "sync error", "links password upload", "folder quota storage sync"] {
        for limit in [1, 3, 10, 40, 600] {
            let hits = |index: &ChunkIndex| -> Vec<(usize, u32)> {
                index.search(query, limit).unwrap().iter().map(|h| (h.chunk, h.score.to_bits())).collect()
            };
            let expected = hits(&serial);
            assert!(expected.len() == limit || limit == 600, "{query} top {limit}");
            assert_eq!(hits(&parallel), expected, "{query} top {limit}");
        }
    }
}

#[test]
fn scores_are_tantivys_bm25() {
    let texts = tied_texts(300);
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (_dir, index) = built_with(&texts, 3);
    for query in ["quota", "sync error", "links password upload folder"] {
        let ours = index.search(query, texts.len()).unwrap();
        let terms = index.analyzer().terms(query);
        let clauses: Vec<(Occur, Box<dyn Query>)> = terms
            .iter()
            .map(|t| {
                let term = Term::from_field_text(index.fields.search, t);
                (
                    Occur::Should,
                    Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs)) as Box<dyn Query>,
                )
            })
            .collect();
        let collector = TopDocs::with_limit(texts.len()).order_by_score();
        let theirs = index.searcher.search(&BooleanQuery::new(clauses), &collector).unwrap();
        let mut theirs: Vec<(usize, f32)> =
            theirs.into_iter().map(|(score, addr)| (index.position_of(addr), score)).collect();
        theirs.sort_by_key(|&(chunk, _)| chunk);
        let mut by_chunk: Vec<(usize, f32)> = ours.iter().map(|h| (h.chunk, h.score)).collect();
        by_chunk.sort_by_key(|&(chunk, _)| chunk);
        assert_eq!(by_chunk.len(), theirs.len(), "{query}: the same chunks match");
        for ((chunk, mine), (other, score)) in by_chunk.into_iter().zip(theirs) {
            assert_eq!(chunk, other);
            assert!((mine - score).abs() <= 1e-6 * score, "{query}: chunk {chunk}: {mine} vs {score}");
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// The oracle of tantivy's collector tests: every page of results, whatever its depth,
    /// is a slice of the full ordering, which is by score then position, even when far
    /// more chunks tie than any margin (hundreds of copies of a few texts over several
    /// segments).
    #[test]
    fn every_page_is_a_slice_of_the_full_ordering(
        picks in proptest::collection::vec(0..4usize, 40..300),
        threads in 1..4usize,
        query in 0..3usize,
    ) {
        let templates = ["quota storage", "quota storage sync", "sync error links", "quota"];
        let texts: Vec<&str> = picks.iter().map(|&p| templates[p]).collect();
        let (_dir, index) = built_with(&texts, threads);
        let query = ["quota", "storage sync", "quota links error"][query];
        let full = index.search(query, texts.len()).unwrap();
        for pair in full.windows(2) {
            let ordered = pair[0].score > pair[1].score
                || (pair[0].score.to_bits() == pair[1].score.to_bits() && pair[0].chunk < pair[1].chunk);
            proptest::prop_assert!(ordered, "{pair:?}");
        }
        for offset in [0, 1, 7, 33] {
            for size in [1, 5, 16, 17, 100] {
                let page: Vec<Hit> = index.search(query, offset + size).unwrap().into_iter().skip(offset).collect();
                let expected: Vec<Hit> = full.iter().skip(offset).take(size).copied().collect();
                proptest::prop_assert_eq!(page, expected, "offset {} size {}", offset, size);
            }
        }
    }
}

#[test]
fn containing_all_finds_the_chunks_with_every_term() {
    let dir = tempfile::tempdir().unwrap();
    let (index, _) = build_index(dir.path(), &["quota error", "quota", "error quota full", "full"]);
    let terms = |s: &str| index.analyzer().terms(s);
    assert_eq!(index.containing_all(&terms("quota error"), 5).unwrap_or_default(), [0, 2]);
    assert_eq!(index.containing_all(&terms("full error"), 5).unwrap_or_default(), [2]);
    assert!(index.containing_all(&[], 5).unwrap_or_default().is_empty());
}

#[test]
fn term_stats_count_tf_and_df() {
    let dir = tempfile::tempdir().unwrap();
    let (index, _) = build_index(dir.path(), &["sync files", "sync"]);
    let stats = index.term_stats("Syncing files and syncs").unwrap();
    let got: Vec<_> = stats.iter().map(|s| (s.term.as_str(), s.surface.as_str(), s.tf, s.df)).collect();
    assert_eq!(got, [("file", "files", 1, 1), ("sync", "syncing", 2, 2)]);
}
