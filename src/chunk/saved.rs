//! The chunking of a corpus, saved for the next refresh: per corpus item (a document, or a
//! pre-chunked unit) a digest of everything its chunks derive from, where its chunks' texts lie
//! in it, each chunk's near-duplicate signature, and the length and digest of the item's
//! `corpus.jsonl` lines. A refresh chunks again only the items whose digest changed; the others
//! get their chunks back from the spans (ids, ordinals, titles derived as the chunker derives
//! them), their signatures replayed into the near-duplicate groups and their lines copied from
//! the set's `corpus.jsonl` (where they still have their digest), so the chunk list,
//! `corpus.jsonl` and the groups are exactly what chunking the whole corpus gives.
//!
//! The file (`index/qrelgen-chunking`) names the chunking settings and qrelgen version it was
//! made with and the chunk list it describes (the manifest's `corpus.chunks_hash`), and ends
//! with a checksum of its bytes: one for other settings, another chunk list, cut short or
//! damaged is not used, and the refresh chunks the whole corpus.

use crate::chunk::ChunkConfig;
use crate::codec::Decoder;
use crate::dedup::Signature;
use crate::record::Document;
use crate::text::Language;
use std::collections::HashMap;
use std::io::Write as _;
use std::ops::Range;
use std::path::Path;

/// The file in the index folder.
pub const CHUNKING_FILE: &str = "qrelgen-chunking";
/// The first bytes of that file (the format's version).
/// How the temporary files of [`CHUNKING_FILE`] are named.
const TEMP_PREFIX: &str = ".qrelgen-chunking";

const MAGIC: &[u8] = b"qrelgen-chunking v2\n";
/// Before each item's entry, and after the last one.
const ENTRY: u8 = 1;
const END: u8 = 0;
/// Bytes of a digest and of the checksum.
const DIGEST: usize = 32;

/// A digest of everything an item's chunks derive from.
pub type Digest = [u8; DIGEST];

/// What names the chunking an item's spans come from: the settings, whether the corpus is
/// pre-chunked, and the qrelgen version (whose splitter made them).
#[must_use]
pub fn settings_stamp(config: ChunkConfig, prechunked: bool) -> String {
    let settings = serde_json::to_string(&config).unwrap_or_default();
    format!("{} {}\n{settings}\n{prechunked}\n", env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"))
}

/// The digest of a document: its id, source id, title, text and format.
#[must_use]
pub fn document_digest(doc: &Document) -> Digest {
    let mut hasher = blake3::Hasher::new();
    for part in [doc.id.as_str(), doc.source_id.as_deref().unwrap_or_default(), &doc.title, &doc.text] {
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.update(&[u8::from(doc.source_id.is_some()), u8::from(doc.markdown)]);
    *hasher.finalize().as_bytes()
}

/// The digest of a pre-chunked unit: its text (all its signature derives from).
#[must_use]
pub fn text_digest(text: &str) -> Digest {
    *blake3::hash(text.as_bytes()).as_bytes()
}

/// One item's chunks, as an earlier run made them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedItem {
    /// The item's language ([`Language::detect`] of its text).
    pub language: Language,
    /// The byte range of each chunk's text in the item's text.
    pub spans: Vec<Range<usize>>,
    /// Each chunk's near-duplicate signature.
    pub signatures: Vec<Option<Signature>>,
    /// Its chunks' `corpus.jsonl` lines.
    pub lines: Lines,
}

/// The length and digest of an item's `corpus.jsonl` lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lines {
    /// Their bytes.
    pub len: usize,
    /// The BLAKE3 hash of those bytes.
    pub digest: Digest,
}

impl Lines {
    /// The length and digest of `lines`.
    #[must_use]
    pub fn of(lines: &[u8]) -> Self {
        Self { len: lines.len(), digest: *blake3::hash(lines).as_bytes() }
    }
}

/// An item of a saved chunking: its digest and chunks, and where it was in the corpus.
#[derive(Debug)]
struct Entry {
    digest: Digest,
    item: SavedItem,
    /// Its place among the items (0-based).
    place: usize,
    /// Where its lines start in the earlier run's `corpus.jsonl`.
    at: usize,
}

/// The saved chunking of an earlier run, by item id.
#[derive(Debug, Default)]
pub struct SavedChunking {
    items: HashMap<String, Entry>,
}

impl SavedChunking {
    /// The chunking saved in the index folder `dir` by the run that made the chunk list
    /// `fingerprint` with the settings `stamp` ([`settings_stamp`]); `None` when there is none,
    /// it is for other settings or another chunk list, or it is damaged.
    #[must_use]
    pub fn load(dir: &Path, stamp: &str, fingerprint: &str) -> Option<Self> {
        let bytes = fs_err::read(dir.join(CHUNKING_FILE)).ok()?;
        decode(&bytes, stamp, fingerprint)
    }

    /// The chunks of item `id` if its digest is still `digest` and its spans fit `text`, and
    /// where its lines lay in the earlier run's `corpus.jsonl`.
    #[must_use]
    pub fn get(&self, id: &str, digest: &Digest, text: &str) -> Option<(&SavedItem, Range<usize>)> {
        let entry = self.items.get(id)?;
        let fits = |s: &Range<usize>| s.start < s.end && text.get(s.clone()).is_some();
        let lines = entry.at..entry.at.checked_add(entry.item.lines.len)?;
        (entry.digest == *digest && entry.item.spans.iter().all(fits)).then_some((&entry.item, lines))
    }

    /// Whether the earlier run's item number `at` (0-based, in corpus order) was `id`, its
    /// digest `digest`: a corpus whose items all are, and no more, is the earlier run's.
    #[must_use]
    pub fn holds_at(&self, at: usize, id: &str, digest: &Digest) -> bool {
        self.items.get(id).is_some_and(|entry| entry.place == at && entry.digest == *digest)
    }

    /// Items saved.
    #[must_use]
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether no item is saved.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// Writes the chunking of a run as its items are chunked, into a temporary file (in the
/// staging folder: gone with it when the run fails) or into memory, put in the index folder
/// once the index is there ([`ChunkingFile::place`]).
pub struct ChunkingWriter {
    out: Sink,
    hasher: blake3::Hasher,
    /// Bytes not yet hashed and written: hashed [`PENDING`] bytes at a time (BLAKE3 hashes
    /// large inputs several blocks at once, small ones a block at a time).
    pending: Vec<u8>,
}

/// Bytes a [`ChunkingWriter`] gathers before it hashes and writes them.
const PENDING: usize = 64 << 10;

/// Where a [`ChunkingWriter`] writes.
enum Sink {
    File(std::io::BufWriter<tempfile::NamedTempFile>),
    /// The bytes, in the pieces they were gathered in (never copied into a larger buffer).
    Memory(Vec<Vec<u8>>),
}

impl ChunkingWriter {
    /// Starts the file in `folder` for chunking with the settings `stamp`.
    ///
    /// # Errors
    /// When the file cannot be made or written.
    pub fn create(folder: &Path, stamp: &str) -> std::io::Result<Self> {
        let file = tempfile::Builder::new().prefix(TEMP_PREFIX).tempfile_in(folder)?;
        Ok(Self::start(Sink::File(std::io::BufWriter::new(file)), stamp))
    }

    /// Starts the record in memory, for a run that writes no file before it knows it has a
    /// change to publish (a refresh; it holds every chunk in memory anyway, and the record is
    /// a small part of their size).
    #[must_use]
    pub fn in_memory(stamp: &str) -> Self {
        Self::start(Sink::Memory(Vec::new()), stamp)
    }

    fn start(out: Sink, stamp: &str) -> Self {
        let mut writer = Self { out, hasher: blake3::Hasher::new(), pending: Vec::with_capacity(PENDING) };
        writer.bytes(MAGIC);
        writer.text(stamp);
        writer
    }

    /// Records the chunks and lines of item `id` (its digest `digest`).
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn item(&mut self, id: &str, digest: &Digest, item: &SavedItem) -> std::io::Result<()> {
        self.bytes(&[ENTRY]);
        self.text(id);
        self.bytes(digest);
        self.bytes(&[u8::from(item.language == Language::Zh)]);
        self.number(item.spans.len() as u64);
        for (span, signature) in item.spans.iter().zip(&item.signatures) {
            self.number(span.start as u64);
            self.number(span.end as u64);
            match signature {
                None => self.bytes(&[0]),
                Some(signature) => {
                    self.bytes(&[1]);
                    let mut slots = [0u8; 4 * crate::dedup::HASHES];
                    for (slot, value) in slots.chunks_exact_mut(4).zip(signature) {
                        slot.copy_from_slice(&value.to_le_bytes());
                    }
                    self.bytes(&slots);
                }
            }
        }
        self.number(item.lines.len as u64);
        self.bytes(&item.lines.digest);
        if self.pending.len() >= PENDING {
            self.flush()?;
        }
        Ok(())
    }

    /// Ends the file with the fingerprint of the chunk list it describes and its checksum.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn finish(mut self, fingerprint: &str) -> std::io::Result<ChunkingFile> {
        self.bytes(&[END]);
        self.text(fingerprint);
        self.hasher.update(&self.pending);
        let checksum = *self.hasher.finalize().as_bytes();
        self.pending.extend_from_slice(&checksum);
        self.write()?;
        match self.out {
            Sink::File(out) => {
                out.into_inner().map(ChunkingFile::File).map_err(std::io::IntoInnerError::into_error)
            }
            Sink::Memory(pieces) => Ok(ChunkingFile::Memory(pieces)),
        }
    }

    fn bytes(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// Hashes and writes the pending bytes.
    fn flush(&mut self) -> std::io::Result<()> {
        self.hasher.update(&self.pending);
        self.write()
    }

    /// Writes the pending bytes (in memory, they become a piece of their own).
    fn write(&mut self) -> std::io::Result<()> {
        match &mut self.out {
            Sink::File(out) => {
                let written = out.write_all(&self.pending);
                self.pending.clear();
                written
            }
            Sink::Memory(pieces) => {
                pieces.push(std::mem::replace(&mut self.pending, Vec::with_capacity(PENDING)));
                Ok(())
            }
        }
    }

    fn number(&mut self, n: u64) {
        self.bytes(&n.to_le_bytes());
    }

    fn text(&mut self, text: &str) {
        self.number(text.len() as u64);
        self.bytes(text.as_bytes());
    }
}

/// A finished chunking file, not yet in the index folder (or its bytes, from
/// [`ChunkingWriter::in_memory`]).
pub enum ChunkingFile {
    /// The temporary file.
    File(tempfile::NamedTempFile),
    /// The bytes, in pieces.
    Memory(Vec<Vec<u8>>),
}

impl ChunkingFile {
    /// Moves the file into the index folder `dir`, as [`CHUNKING_FILE`] (the bytes are written to
    /// a temporary file there first, once the temporary files a killed run left there are gone).
    ///
    /// # Errors
    /// When it cannot be moved or written there.
    pub fn place(self, dir: &Path) -> std::io::Result<()> {
        let file = match self {
            Self::File(file) => file,
            Self::Memory(pieces) => {
                clear_leftovers(dir)?;
                let mut file = tempfile::Builder::new().prefix(TEMP_PREFIX).tempfile_in(dir)?;
                pieces.iter().try_for_each(|piece| file.write_all(piece))?;
                file
            }
        };
        file.persist(dir.join(CHUNKING_FILE)).map(drop).map_err(|e| e.error)
    }
}

/// Removes the temporary files of [`CHUNKING_FILE`] in `dir` (a run killed while it wrote one
/// there leaves it).
fn clear_leftovers(dir: &Path) -> std::io::Result<()> {
    for entry in fs_err::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX) && entry.file_type()?.is_file() {
            fs_err::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// A chunk's near-duplicate signature as [`ChunkingWriter`] wrote it: a flag, then the slots.
#[expect(clippy::option_option, reason = "outer: readable; inner: a chunk without shingles has none")]
fn signature(input: &mut Decoder<'_>) -> Option<Option<Signature>> {
    match input.byte()? {
        0 => Some(None),
        1 => {
            let mut signature = [0u32; crate::dedup::HASHES];
            for (slot, bytes) in
                signature.iter_mut().zip(input.take(4 * crate::dedup::HASHES)?.chunks_exact(4))
            {
                *slot = u32::from_le_bytes(bytes.try_into().ok()?);
            }
            Some(Some(signature))
        }
        _ => None,
    }
}

fn decode(bytes: &[u8], stamp: &str, fingerprint: &str) -> Option<SavedChunking> {
    let (body, checksum) = bytes.split_at_checked(bytes.len().checked_sub(DIGEST)?)?;
    if blake3::hash(body).as_bytes() != checksum {
        return None;
    }
    let mut input = Decoder::new(body);
    if input.take(MAGIC.len())? != MAGIC || input.text()? != stamp {
        return None;
    }
    let mut items = HashMap::new();
    let (mut entries, mut at) = (0, 0usize);
    while input.byte()? == ENTRY {
        let place = entries;
        entries += 1;
        let id = input.text()?.to_owned();
        let digest: Digest = input.take(DIGEST)?.try_into().ok()?;
        let language = match input.byte()? {
            0 => Language::En,
            1 => Language::Zh,
            _ => return None,
        };
        let chunks = input.size()?;
        // A span takes at least 17 bytes: a bad count reserves no more than the file holds.
        let mut item = SavedItem {
            language,
            spans: Vec::with_capacity(chunks.min(input.rest().len() / 17)),
            signatures: Vec::with_capacity(chunks.min(input.rest().len() / 17)),
            lines: Lines::default(),
        };
        for _ in 0..chunks {
            item.spans.push(input.size()?..input.size()?);
            item.signatures.push(signature(&mut input)?);
        }
        item.lines = Lines { len: input.size()?, digest: input.take(DIGEST)?.try_into().ok()? };
        let next = at.checked_add(item.lines.len)?;
        // An id twice (a corpus with a repeated id) keeps its last place: the first one is
        // then not where `holds_at` finds it.
        items.insert(id, Entry { digest, item, place, at });
        at = next;
    }
    (input.text()? == fingerprint && input.rest().is_empty()).then_some(SavedChunking { items })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::SizeUnit;
    use crate::dedup::chunk_signature;

    const CONFIG: ChunkConfig =
        ChunkConfig { size: 40, overlap: 0, size_zh: 40, overlap_zh: 0, unit: SizeUnit::Chars };

    fn item(text: &str, spans: &[Range<usize>]) -> SavedItem {
        let signatures = spans.iter().map(|s| chunk_signature(&text[s.clone()])).collect();
        let lines = Lines::of(format!("{{\"text\":{text:?}}}\n").as_bytes());
        SavedItem { language: Language::detect(text), spans: spans.to_vec(), signatures, lines }
    }

    /// A file of two items in `dir`, for the chunk list "print".
    fn written(dir: &Path, stamp: &str) -> (Digest, SavedItem, SavedItem) {
        written_by(dir, ChunkingWriter::create(dir, stamp).unwrap())
    }

    /// [`written`] by `writer`, placed in `dir`.
    fn written_by(dir: &Path, mut writer: ChunkingWriter) -> (Digest, SavedItem, SavedItem) {
        let (a, b) = ("Alpha beta gamma delta. Epsilon zeta eta theta.", "-- --");
        let (one, two) = (item(a, &[0..23, 24..a.len()]), item(b, std::slice::from_ref(&(0..b.len()))));
        let digest = text_digest(a);
        writer.item("a.md", &digest, &one).unwrap();
        writer.item("b.md", &text_digest(b), &two).unwrap();
        writer.finish("print").unwrap().place(dir).unwrap();
        (digest, one, two)
    }

    #[test]
    fn a_record_held_in_memory_is_placed_as_the_same_file() {
        let (file, memory) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let stamp = settings_stamp(CONFIG, false);
        written(file.path(), &stamp);
        written_by(memory.path(), ChunkingWriter::in_memory(&stamp));
        let bytes = |dir: &Path| fs_err::read(dir.join(CHUNKING_FILE)).unwrap();
        assert_eq!(bytes(memory.path()), bytes(file.path()));
        let left = fs_err::read_dir(memory.path()).unwrap().count();
        assert_eq!(left, 1, "no temporary file left");
        let leftover = memory.path().join(format!("{TEMP_PREFIX}.killed"));
        fs_err::write(&leftover, "half written").unwrap();
        written_by(memory.path(), ChunkingWriter::in_memory(&stamp));
        assert!(!leftover.exists(), "a killed run's temporary file is cleared");
        assert_eq!(bytes(memory.path()), bytes(file.path()));
    }

    #[test]
    fn items_come_back_as_written_for_their_own_settings_and_chunk_list_only() {
        let dir = tempfile::tempdir().unwrap();
        let stamp = settings_stamp(CONFIG, false);
        let (digest, one, two) = written(dir.path(), &stamp);
        let text = "Alpha beta gamma delta. Epsilon zeta eta theta.";
        let saved = SavedChunking::load(dir.path(), &stamp, "print").unwrap();
        assert_eq!(saved.len(), 2);
        assert!(saved.holds_at(0, "a.md", &digest) && saved.holds_at(1, "b.md", &text_digest("-- --")));
        assert!(!saved.holds_at(1, "a.md", &digest), "another place");
        assert!(!saved.holds_at(0, "a.md", &text_digest("changed")), "another digest");
        assert!(!saved.holds_at(0, "c.md", &digest), "another id");
        assert_eq!(one.signatures.iter().filter(|s| s.is_some()).count(), 2, "the test needs signatures");
        assert_eq!(two.signatures, [None], "and a text without shingles");
        assert_eq!(saved.get("a.md", &text_digest("changed"), text), None, "another digest");
        assert_eq!(saved.get("a.md", &digest, "Alpha"), None, "spans past the text");
        // Each item's lines follow the earlier items' in the earlier `corpus.jsonl`.
        let (a, b) = (one.lines.len, two.lines.len);
        assert_eq!(saved.get("a.md", &digest, text), Some((&one, 0..a)));
        assert_eq!(saved.get("b.md", &text_digest("-- --"), "-- --"), Some((&two, a..a + b)));
        let other = settings_stamp(ChunkConfig { size: 41, ..CONFIG }, false);
        assert!(SavedChunking::load(dir.path(), &other, "print").is_none(), "other settings");
        assert!(SavedChunking::load(dir.path(), &settings_stamp(CONFIG, true), "print").is_none());
        assert!(SavedChunking::load(dir.path(), &stamp, "another list").is_none());
    }

    #[test]
    fn a_damaged_or_cut_file_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let stamp = settings_stamp(CONFIG, false);
        written(dir.path(), &stamp);
        let path = dir.path().join(CHUNKING_FILE);
        let bytes = fs_err::read(&path).unwrap();
        for at in [0, MAGIC.len() + 9, bytes.len() / 2, bytes.len() - 1] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x20;
            fs_err::write(&path, &damaged).unwrap();
            assert!(SavedChunking::load(dir.path(), &stamp, "print").is_none(), "byte {at} changed");
        }
        for len in [0, 10, bytes.len() - 1] {
            fs_err::write(&path, &bytes[..len]).unwrap();
            assert!(SavedChunking::load(dir.path(), &stamp, "print").is_none(), "cut at {len}");
        }
        fs_err::write(&path, &bytes).unwrap();
        assert!(SavedChunking::load(dir.path(), &stamp, "print").is_some());
    }

    #[test]
    fn the_digest_covers_everything_chunks_derive_from() {
        let doc = Document {
            id: crate::id::DocId::sanitized("a.md"),
            source_id: None,
            title: "T".into(),
            text: "Text.".into(),
            markdown: true,
        };
        let digest = document_digest(&doc);
        let variants = [
            Document { id: crate::id::DocId::sanitized("b.md"), ..doc.clone() },
            Document { source_id: Some("a.md".into()), ..doc.clone() },
            Document { title: "U".into(), ..doc.clone() },
            Document { text: "Text!".into(), ..doc.clone() },
            Document { markdown: false, ..doc.clone() },
        ];
        for variant in variants {
            assert_ne!(document_digest(&variant), digest, "{variant:?}");
        }
        assert_eq!(document_digest(&doc.clone()), digest);
    }
}
