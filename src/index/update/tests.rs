//! Tests of updating an index in place: an updated index searches exactly as a rebuilt one, its
//! deleted documents and their counts, merges, and the side files that make it be built again.

use super::*;
use crate::id::ChunkId;
use crate::index::{Hit, test_chunks};

/// Chunks named by their text's first word, so that one text keeps its id in every list.
fn named(texts: &[&str]) -> Vec<Chunk> {
    let mut chunks = test_chunks(texts);
    for (chunk, text) in chunks.iter_mut().zip(texts) {
        let name = text.split(' ').next().unwrap_or_default();
        chunk.id = ChunkId::parse(name).unwrap();
    }
    chunks
}

fn fingerprint(chunks: &[Chunk]) -> String {
    let parts: Vec<String> = chunks.iter().map(|c| format!("{}\n{}\n{}", c.id, c.title, c.text)).collect();
    crate::id::content_hash(&parts.iter().map(String::as_str).collect::<Vec<_>>())
}

fn index(dir: &Path, chunks: &[Chunk], earlier: Option<Earlier<'_>>) -> (ChunkIndex, IndexOrigin) {
    let metas: ChunkList = chunks.iter().collect();
    let feed = |add: &mut dyn FnMut(&Chunk) -> Result<()>| chunks.iter().try_for_each(add);
    let (analyzer, stage, print) = (Analyzer::default(), StageProgress::hidden(), fingerprint(chunks));
    match earlier {
        Some(earlier) => {
            let (index, origin, unchanged) =
                ChunkIndex::update_or_build(dir, metas, &print, earlier, analyzer, 2, &stage, feed).unwrap();
            assert_eq!(unchanged.is_some(), origin == IndexOrigin::Updated);
            if let Some(unchanged) = unchanged {
                for (position, chunk) in chunks.iter().enumerate() {
                    let was = earlier.chunks.iter().find(|old| *old.id == chunk.id);
                    let same = was.is_some_and(|old| old.title == chunk.title && old.text == chunk.text);
                    assert_eq!(unchanged.at(position), same, "{}", chunk.id);
                }
            }
            (index, origin)
        }
        None => ChunkIndex::open_or_build(dir, metas, &print, analyzer, 2, &stage, feed).unwrap(),
    }
}

fn olds(chunks: &[Chunk]) -> Vec<OldChunk<'_>> {
    chunks.iter().map(OldChunk::from).collect()
}

fn bits(hits: &[Hit]) -> Vec<(usize, u32)> {
    hits.iter().map(|h| (h.chunk, h.score.to_bits())).collect()
}

const QUERIES: [&str; 5] = ["quota storage", "sync error links", "password", "folder upload quota", "kidney"];

#[test]
fn an_updated_index_searches_exactly_as_a_rebuilt_one() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = named(&[
        "alpha quota storage sync error",
        "bravo storage links password links",
        "charlie sync sync error folder",
        "delta upload folder quota quota quota",
        "echo password upload links",
        "foxtrot quota error",
    ]);
    // bravo and echo deleted; golf and hotel added between the kept ones.
    let v2 = named(&[
        "golf storage quota kidney",
        "alpha quota storage sync error",
        "charlie sync sync error folder",
        "hotel links links links password error upload",
        "delta upload folder quota quota quota",
        "foxtrot quota error",
    ]);
    // And again: charlie deleted, india added (an update of an updated index).
    let v3: Vec<Chunk> = v2
        .iter()
        .filter(|c| c.id.as_str() != "charlie")
        .cloned()
        .chain(named(&["india kidney quota sync"]))
        .collect();
    let live = dir.path().join("live");
    index(&live, &v1, None);
    for (before, after) in [(&v1, &v2), (&v2, &v3)] {
        let earlier = Earlier { fingerprint: &fingerprint(before), chunks: &olds(before) };
        let (updated, origin) = index(&live, after, Some(earlier));
        assert_eq!(origin, IndexOrigin::Updated);
        let rebuilt_dir = tempfile::tempdir().unwrap();
        let (rebuilt, _) = index(rebuilt_dir.path(), after, None);
        assert_eq!(updated.len(), after.len());
        for query in QUERIES {
            for limit in [1, 2, 3, 10] {
                let got = bits(&updated.search(query, limit).unwrap());
                assert_eq!(got, bits(&rebuilt.search(query, limit).unwrap()), "{query} @{limit}");
            }
            let term = &updated.analyzer().terms(query)[0];
            assert_eq!(updated.doc_freq(term).unwrap(), rebuilt.doc_freq(term).unwrap(), "{term}");
        }
        for (position, chunk) in after.iter().enumerate() {
            assert_eq!(updated.text(position).unwrap(), chunk.text);
            assert_eq!(updated.position(&chunk.id), Some(position));
        }
    }
    // The index as it stands opens again as these chunks (reused, not rebuilt).
    assert_eq!(index(&live, &v3, None).1, IndexOrigin::Reused);
}

#[test]
fn an_index_of_another_chunk_list_is_built_again() {
    let dir = tempfile::tempdir().unwrap();
    let (v1, v2) = (named(&["alpha quota", "bravo sync"]), named(&["alpha quota", "charlie links"]));
    index(dir.path(), &v1, None);
    let wrong = Earlier { fingerprint: "not the index's", chunks: &olds(&v1) };
    assert_eq!(index(dir.path(), &v2, Some(wrong)).1, IndexOrigin::Built);
}

/// Updates the index in `dir` of `before` to `after`, and checks it against a rebuild.
fn update_and_compare(dir: &Path, before: &[Chunk], after: &[Chunk]) -> ChunkIndex {
    let earlier = Earlier { fingerprint: &fingerprint(before), chunks: &olds(before) };
    let (updated, origin) = index(dir, after, Some(earlier));
    assert_eq!(origin, IndexOrigin::Updated);
    let rebuilt_dir = tempfile::tempdir().unwrap();
    let (rebuilt, _) = index(rebuilt_dir.path(), after, None);
    // Limits below the chunk count too: the top-k heap fills and MaxScore prunes.
    for query in QUERIES.iter().chain(&["renamed title", "bravo", "kidney kidney"]) {
        for limit in [1, 2, 3, 10] {
            let got = bits(&updated.search(query, limit).unwrap());
            assert_eq!(got, bits(&rebuilt.search(query, limit).unwrap()), "{query} @{limit}");
        }
    }
    // Every term of either list, those only deleted chunks held included.
    for chunk in before.iter().chain(after) {
        for term in updated.analyzer().terms(&format!("{} {}", chunk.title, chunk.text)) {
            assert_eq!(updated.doc_freq(&term).unwrap(), rebuilt.doc_freq(&term).unwrap(), "{term}");
            for limit in [1, 2, 3, 10] {
                let got = updated.search(&term, limit).unwrap();
                assert_eq!(got, rebuilt.search(&term, limit).unwrap(), "{term} @{limit}");
            }
        }
    }
    for (position, chunk) in after.iter().enumerate() {
        let stored = updated.stored(position).unwrap();
        assert_eq!(
            (stored.title.as_str(), stored.text.as_str()),
            (chunk.title.as_str(), chunk.text.as_str())
        );
    }
    updated
}

fn segments(dir: &Path) -> usize {
    Index::open_in_dir(dir).unwrap().searchable_segment_ids().unwrap().len()
}

const V1: [&str; 4] =
    ["alpha quota storage sync", "bravo storage links password", "charlie sync error", "delta upload folder"];

#[test]
fn a_deleted_chunk_counts_the_tokens_and_terms_of_its_title_and_text() {
    let analyzer = Analyzer::default();
    let (title, text) = ("Quota sync", "the quota stops syncs, quota links");
    let (mut deleted, mut words) = (SegmentDeletions::default(), WordTerms::new(&analyzer));
    let tokens = deleted.add(&mut words, title, text);
    assert_eq!(tokens, analyzer.chunk_tokens(title, text).len() as u64);
    assert_eq!(token_count(&mut words, title, text), tokens);
    assert_eq!(
        (deleted.documents, deleted.terms.get("quota"), deleted.terms.get("link")),
        (1, Some(&1), Some(&1))
    );
    deleted.add(&mut words, "", "quota");
    assert_eq!((deleted.documents, deleted.terms.get("quota"), deleted.terms.len()), (2, Some(&2), 4));
}

#[test]
fn a_title_changed_under_kept_ids_is_updated_as_a_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = named(&V1);
    let mut v2 = v1.clone();
    v2[1].title = "renamed title".to_owned();
    v2[2].title = "renamed".to_owned();
    index(dir.path(), &v1, None);
    update_and_compare(dir.path(), &v1, &v2);
}

#[test]
fn a_text_changed_under_a_kept_id_is_updated_as_a_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = named(&V1);
    let v2 = named(&[
        "alpha quota storage sync",
        "bravo kidney kidney quota",
        "charlie sync error",
        "delta upload",
    ]);
    index(dir.path(), &v1, None);
    update_and_compare(dir.path(), &v1, &v2);
    // And an update of that updated index, with one more change.
    let v3 = named(&["alpha quota", "bravo kidney kidney quota", "charlie sync error", "delta upload"]);
    update_and_compare(dir.path(), &v2, &v3);
}

#[test]
fn a_damaged_index_is_built_again() {
    let dir = tempfile::tempdir().unwrap();
    let (v1, v2) = (named(&V1), named(&["alpha quota", "echo links"]));
    index(dir.path(), &v1, None);
    for entry in fs_err::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "term") {
            fs_err::remove_file(path).unwrap();
        }
    }
    let earlier = Earlier { fingerprint: &fingerprint(&v1), chunks: &olds(&v1) };
    let (rebuilt, origin) = index(dir.path(), &v2, Some(earlier));
    assert_eq!(origin, IndexOrigin::Built);
    assert_eq!(rebuilt.text(1).unwrap(), "echo links");
}

#[test]
fn an_index_whose_documents_do_not_fit_its_chunks_is_built_again_not_reused() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = named(&V1);
    index(dir.path(), &v1, None);
    // Every key at position 0: the stamp fits, the documents do not.
    let now = opstamp(dir.path());
    write_side(&dir.path().join(POSITIONS_FILE), now, &[0u8; 16]).unwrap();
    write_side(&dir.path().join(TOKENS_FILE), now, &9u64.to_le_bytes()).unwrap();
    assert_eq!(index(dir.path(), &v1, None).1, IndexOrigin::Built);
    assert_eq!(index(dir.path(), &v1, None).1, IndexOrigin::Reused);
}

#[test]
fn an_updated_index_without_its_token_count_is_built_again() {
    let dir = tempfile::tempdir().unwrap();
    let (v1, v2) = (named(&V1), named(&["alpha quota storage sync", "charlie sync error", "echo links"]));
    index(dir.path(), &v1, None);
    update_and_compare(dir.path(), &v1, &v2);
    assert!(!dir.path().join(format!("{TOKENS_FILE}.partial")).exists());
    fs_err::remove_file(dir.path().join(TOKENS_FILE)).unwrap();
    let v3 = named(&["alpha quota storage sync", "echo links"]);
    let earlier = Earlier { fingerprint: &fingerprint(&v2), chunks: &olds(&v2) };
    assert_eq!(index(dir.path(), &v3, Some(earlier)).1, IndexOrigin::Built);
    fs_err::remove_file(dir.path().join(TOKENS_FILE)).ok();
    assert_eq!(index(dir.path(), &v3, None).1, IndexOrigin::Reused, "an index as built has none");
}

#[test]
fn additions_only_add_segments_and_are_never_merged() {
    let dir = tempfile::tempdir().unwrap();
    let mut chunks = named(&["alpha quota"]);
    index(dir.path(), &chunks, None);
    let start = segments(dir.path());
    // More updates than tantivy's default merge policy lets stand unmerged (8).
    for (n, name) in ["b", "c", "d", "e", "f", "g", "h", "i", "j", "k"].iter().enumerate() {
        let before = chunks.clone();
        chunks.extend(named(&[&format!("{name} quota sync")]));
        update_and_compare(dir.path(), &before, &chunks);
        assert_eq!(segments(dir.path()), start + n + 1);
    }
}

/// The opstamp of the index in `dir`'s commit.
fn opstamp(dir: &Path) -> u64 {
    Index::open_in_dir(dir).unwrap().load_metas().unwrap().opstamp
}

/// The deletions recorded for the index in `dir` as it stands.
fn deleted_now(dir: &Path) -> Option<Deletions> {
    read_deleted(dir, opstamp(dir))
}

fn deleted_documents(dir: &Path) -> u32 {
    let index = Index::open_in_dir(dir).unwrap();
    let searcher = index.reader().unwrap().searcher();
    searcher.segment_readers().iter().map(tantivy::SegmentReader::num_deleted_docs).sum()
}

/// The index of `chunks` in one segment (one writer thread), which no single deletion empties.
fn one_segment(dir: &Path, chunks: &[Chunk]) {
    let metas: ChunkList = chunks.iter().collect();
    let feed = |add: &mut dyn FnMut(&Chunk) -> Result<()>| chunks.iter().try_for_each(add);
    let (analyzer, stage, print) = (Analyzer::default(), StageProgress::hidden(), fingerprint(chunks));
    ChunkIndex::open_or_build(dir, metas, &print, analyzer, 1, &stage, feed).unwrap();
    assert_eq!(segments(dir), 1);
}

#[test]
fn deleted_documents_stay_until_they_are_a_quarter_of_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = named(&V1);
    // bravo deleted, echo added: 1 deleted of 5 documents.
    let mut v2: Vec<Chunk> = v1.iter().filter(|c| c.id.as_str() != "bravo").cloned().collect();
    v2.extend(named(&["echo links quota"]));
    // charlie deleted: 2 of 5, past a quarter.
    let v3: Vec<Chunk> = v2.iter().filter(|c| c.id.as_str() != "charlie").cloned().collect();
    let mut v4 = v3.clone();
    v4.extend(named(&["foxtrot sync password"]));
    one_segment(dir.path(), &v1);
    let start = segments(dir.path());
    update_and_compare(dir.path(), &v1, &v2);
    assert_eq!((segments(dir.path()), deleted_documents(dir.path())), (start + 1, 1), "no merge");
    assert_eq!(deleted_terms(deleted_now(dir.path()).unwrap()).get("bravo"), Some(&1));
    update_and_compare(dir.path(), &v2, &v3);
    assert_eq!((segments(dir.path()), deleted_documents(dir.path())), (1, 0), "merged");
    assert_eq!(deleted_now(dir.path()), Some(Deletions::new()));
    update_and_compare(dir.path(), &v3, &v4);
    assert_eq!(segments(dir.path()), 2, "an addition only adds a segment");
}

#[test]
fn a_segment_whose_documents_all_went_takes_its_counts_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = named(&V1);
    let mut v2 = v1.clone();
    v2.extend(named(&["echo quota links"]));
    // echo (alone in the second update's segment) and alpha go: the segment goes with echo.
    let v3: Vec<Chunk> = v2[1..4].to_vec();
    one_segment(dir.path(), &v1);
    update_and_compare(dir.path(), &v1, &v2);
    assert_eq!(segments(dir.path()), 2);
    update_and_compare(dir.path(), &v2, &v3);
    assert_eq!((segments(dir.path()), deleted_documents(dir.path())), (1, 1));
    let deleted = deleted_terms(deleted_now(dir.path()).unwrap());
    assert_eq!((deleted.get("alpha"), deleted.get("echo")), (Some(&1), None));
}

#[test]
fn an_index_with_deleted_documents_but_not_their_terms_is_built_again() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = named(&V1);
    let v2: Vec<Chunk> = v1[1..].to_vec();
    one_segment(dir.path(), &v1);
    update_and_compare(dir.path(), &v1, &v2);
    assert_eq!(deleted_documents(dir.path()), 1);
    fs_err::remove_file(dir.path().join(DELETED_FILE)).unwrap();
    let v3: Vec<Chunk> = v2[1..].to_vec();
    let earlier = Earlier { fingerprint: &fingerprint(&v2), chunks: &olds(&v2) };
    assert_eq!(index(dir.path(), &v3, Some(earlier)).1, IndexOrigin::Built);
    assert_eq!(deleted_documents(dir.path()), 0);
}

#[test]
fn a_damaged_deleted_terms_file_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let terms: DeletedTerms = [("quota".to_owned(), 2), ("sync".to_owned(), 1)].into_iter().collect();
    let deletions: Deletions = [
        ("a".to_owned(), SegmentDeletions { documents: 2, terms }),
        ("b".to_owned(), SegmentDeletions::default()),
    ]
    .into_iter()
    .collect();
    let path = dir.path().join(DELETED_FILE);
    write_side(&path, 7, &encode_deleted(&deletions)).unwrap();
    assert_eq!(read_deleted(dir.path(), 7), Some(deletions));
    let bytes = fs_err::read(&path).unwrap();
    // Into the content, into the opstamp, into the mark.
    for cut in [bytes.len() - 1, SIDE_MARK.len() + 8 + 9, SIDE_MARK.len() + 3, 5, 0] {
        fs_err::write(&path, &bytes[..cut]).unwrap();
        assert_eq!(read_deleted(dir.path(), 7), None, "cut at {cut}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    fs_err::write(&path, &longer).unwrap();
    assert_eq!(read_deleted(dir.path(), 7), None);
}

/// Eight chunks in one segment; `quota` is in most, and `hotel` (short, `quota` three
/// times) would be `quota`'s best score.
const EIGHT: [&str; 8] = [
    "alpha quota storage sync error links",
    "bravo storage links password upload",
    "charlie sync error folder quota",
    "delta upload folder quota storage links",
    "echo password upload links quota sync",
    "foxtrot quota error storage",
    "golf quota kidney",
    "hotel quota quota quota",
];

#[test]
fn a_deleted_short_chunk_that_repeats_a_term_is_not_its_best_score() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = named(&EIGHT);
    let v2: Vec<Chunk> = v1.iter().filter(|c| c.id.as_str() != "hotel").cloned().collect();
    one_segment(dir.path(), &v1);
    let updated = update_and_compare(dir.path(), &v1, &v2);
    assert_eq!(deleted_documents(dir.path()), 1, "not merged");
    let rebuilt_dir = tempfile::tempdir().unwrap();
    let (rebuilt, _) = index(rebuilt_dir.path(), &v2, None);
    for query in ["quota", "quota quota", "hotel quota", "quota kidney", "quota storage sync"] {
        for limit in [1, 2, 3] {
            let got = bits(&updated.search(query, limit).unwrap());
            assert_eq!(got, bits(&rebuilt.search(query, limit).unwrap()), "{query} @{limit}");
        }
    }
}

#[test]
fn two_updates_in_a_row_with_deletions_in_two_segments_search_as_rebuilds() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = named(&EIGHT);
    // hotel deleted (quota), india and juliet added: 1 deleted of 10.
    let mut v2: Vec<Chunk> = v1.iter().filter(|c| c.id.as_str() != "hotel").cloned().collect();
    v2.extend(named(&["india quota quota sync", "juliet links password quota"]));
    // india deleted from the second segment (quota again), kilo added: 2 deleted of 11.
    let mut v3: Vec<Chunk> = v2.iter().filter(|c| c.id.as_str() != "india").cloned().collect();
    v3.extend(named(&["kilo storage quota"]));
    one_segment(dir.path(), &v1);
    update_and_compare(dir.path(), &v1, &v2);
    assert_eq!((segments(dir.path()), deleted_documents(dir.path())), (2, 1));
    update_and_compare(dir.path(), &v2, &v3);
    assert_eq!((segments(dir.path()), deleted_documents(dir.path())), (3, 2), "not merged");
    let deletions = deleted_now(dir.path()).unwrap();
    assert_eq!(deletions.len(), 2, "deletions in two segments");
    let deleted = deleted_terms(deletions);
    assert_eq!((deleted.get("quota"), deleted.get("sync")), (Some(&2), Some(&1)));
}

#[test]
fn side_files_of_another_commit_are_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = named(&V1);
    let v2: Vec<Chunk> = v1[1..].to_vec();
    one_segment(dir.path(), &v1);
    update_and_compare(dir.path(), &v1, &v2);
    let now = opstamp(dir.path());
    assert!(read_positions(dir.path(), now).unwrap().is_some());
    assert!(read_tokens(dir.path(), now).is_some());
    assert_eq!(read_deleted(dir.path(), now).map(|d| d.len()), Some(1));
    for other in [now - 1, now + 1] {
        assert_eq!(read_positions(dir.path(), other), Err(()), "{other}");
        assert_eq!(read_tokens(dir.path(), other), None, "{other}");
        assert_eq!(read_deleted(dir.path(), other), None, "{other}");
    }
    // A file without the mark (of an older qrelgen) is no file of this commit either.
    fs_err::write(dir.path().join(TOKENS_FILE), 9u64.to_le_bytes()).unwrap();
    assert_eq!(read_tokens(dir.path(), now), None);
}

#[test]
fn a_token_count_left_from_the_commit_before_is_refused_and_the_index_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = named(&V1);
    let v2 = named(&["alpha quota storage sync", "bravo kidney kidney quota", "charlie sync error"]);
    let v3 = named(&["alpha quota", "bravo kidney kidney quota", "charlie sync error", "echo links"]);
    index(dir.path(), &v1, None);
    update_and_compare(dir.path(), &v1, &v2);
    let tokens = dir.path().join(TOKENS_FILE);
    let before = fs_err::read(&tokens).unwrap();
    update_and_compare(dir.path(), &v2, &v3);
    assert_ne!(fs_err::read(&tokens).unwrap(), before);
    // tantivy's commit reached the disk, the new count's rename did not.
    fs_err::write(&tokens, &before).unwrap();
    let (opened, origin) = index(dir.path(), &v3, None);
    assert_eq!(origin, IndexOrigin::Built, "the count of the commit before is not used");
    let rebuilt_dir = tempfile::tempdir().unwrap();
    let (rebuilt, _) = index(rebuilt_dir.path(), &v3, None);
    for query in QUERIES {
        assert_eq!(bits(&opened.search(query, 10).unwrap()), bits(&rebuilt.search(query, 10).unwrap()));
    }
}
