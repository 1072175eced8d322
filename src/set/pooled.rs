//! `qrels/pooled.tsv`: every pair a run pooled (`qrelgen pool`), with the runs and ranks that
//! pooled it and who graded it; the record, its reader and its text.

use crate::error::{Error, Result};
use crate::id::{ChunkId, QueryId};
use std::fmt::Write as _;
use std::path::Path;

/// The header of `qrels/pooled.tsv`.
pub const POOLED_HEADER: &str = "query-id\tcorpus-id\tgrade\tgraded-by\truns";

/// A pooled pair: one line of `qrels/pooled.tsv`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PooledPair {
    /// The query.
    pub query: QueryId,
    /// The chunk.
    pub chunk: ChunkId,
    /// Its grade, if judged.
    pub grade: Option<u8>,
    /// Who graded it (a provenance label), if judged.
    pub graded_by: Option<String>,
    /// The runs that pooled it, with its rank in each, in the order they were pooled.
    pub runs: Vec<(String, u32)>,
}

impl PooledPair {
    /// Takes in `other`, the same pair pooled again: the runs this one lacks, and its grade
    /// when this one has none.
    pub fn absorb(&mut self, other: Self) {
        for run in other.runs {
            if !self.runs.contains(&run) {
                self.runs.push(run);
            }
        }
        if self.grade.is_none() {
            (self.grade, self.graded_by) = (other.grade, other.graded_by);
        }
    }

    /// Its line in `qrels/pooled.tsv`.
    #[must_use]
    pub fn line(&self) -> String {
        let grade = self.grade.map(|g| g.to_string()).unwrap_or_default();
        let runs: Vec<String> = self.runs.iter().map(|(r, k)| format!("{r}:{k}")).collect();
        let by = self.graded_by.as_deref().unwrap_or("");
        format!("{}\t{}\t{grade}\t{by}\t{}", self.query, self.chunk, runs.join(","))
    }
}

/// The text of `qrels/pooled.tsv`.
#[must_use]
pub fn pooled_text(pooled: &[PooledPair]) -> String {
    let mut text = format!("{POOLED_HEADER}\n");
    for pair in pooled {
        let _ = writeln!(text, "{}", pair.line());
    }
    text
}

/// Reads `qrels/pooled.tsv` (no file: no pools yet).
///
/// # Errors
/// [`Error::Input`] for an unreadable file, [`Error::Malformed`] naming the line of a bad row.
pub fn read_pooled(path: &Path) -> Result<Vec<PooledPair>> {
    let text = match fs_err::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(Error::Input { path: path.to_owned(), source }),
    };
    let bad = |line: usize, message: String| Error::Malformed { path: path.to_owned(), line, message };
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate().skip(1) {
        let fields: Vec<&str> = line.split('\t').collect();
        let [query, chunk, grade, by, runs] = fields[..] else {
            return Err(bad(n + 1, format!("expected 5 tab-separated fields ({POOLED_HEADER})")));
        };
        let query = QueryId::parse(query).map_err(|e| bad(n + 1, e.to_string()))?;
        let chunk = ChunkId::parse(chunk).map_err(|e| bad(n + 1, e.to_string()))?;
        let grade = match grade {
            "" => None,
            g => Some(
                g.parse::<u8>()
                    .ok()
                    .filter(|g| *g <= 3)
                    .ok_or_else(|| bad(n + 1, format!("grade {g:?} is not 0–3")))?,
            ),
        };
        let runs = runs
            .split(',')
            .filter(|r| !r.is_empty())
            .map(|r| {
                let (run, rank) =
                    r.rsplit_once(':').ok_or_else(|| bad(n + 1, format!("{r:?} is not run:rank")))?;
                let rank = rank.parse().map_err(|_| bad(n + 1, format!("rank {rank:?} is not a number")))?;
                Ok((run.to_owned(), rank))
            })
            .collect::<Result<_>>()?;
        out.push(PooledPair {
            query,
            chunk,
            grade,
            graded_by: (!by.is_empty()).then(|| by.to_owned()),
            runs,
        });
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn pair(query: &str, chunk: &str, grade: Option<u8>, runs: &[(&str, u32)]) -> PooledPair {
        PooledPair {
            query: QueryId::parse(query).unwrap(),
            chunk: ChunkId::parse(chunk).unwrap(),
            grade,
            graded_by: grade.map(|_| "one_shot".to_owned()),
            runs: runs.iter().map(|(r, k)| ((*r).to_owned(), *k)).collect(),
        }
    }

    #[test]
    fn pooled_pairs_read_back_as_written() {
        let pairs = vec![
            pair("q1", "d:a", Some(1), &[("dense", 1), ("bm25", 4)]),
            pair("q2", "d:b", None, &[("dense", 2)]),
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pooled.tsv");
        fs_err::write(&path, pooled_text(&pairs)).unwrap();
        assert_eq!(read_pooled(&path).unwrap(), pairs);
        assert_eq!(pairs[0].line(), "q1\td:a\t1\tone_shot\tdense:1,bm25:4");
        fs_err::write(&path, format!("{POOLED_HEADER}\nq1\td:a\t7\t\tdense:1\n")).unwrap();
        assert!(read_pooled(&path).unwrap_err().to_string().contains("pooled.tsv:2: grade \"7\" is not 0–3"));
    }
}
