//! The batches the cache records (its batch tables, which `cache.rs` makes): a batch and its
//! lines before its create call, its status at each poll, its replies, the calls exported, and
//! the records `qrelgen batch` lists and forgets.

use super::wire::BatchObject;
use crate::llm::creator::Process;
use crate::llm::{Cache, CachedReply};
use rusqlite::{OptionalExtension as _, params};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// A submitted batch as the cache records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BatchRecord {
    /// The provider's batch id (or `file:` and the name of an imported file).
    pub id: String,
    /// The stage whose calls it holds.
    pub stage: String,
    /// Its status at the last poll.
    pub status: String,
    /// Lines.
    pub total: u64,
    /// Lines done, at the last poll.
    pub completed: u64,
    /// Lines failed, at the last poll.
    pub failed: u64,
    /// Its results are in the cache.
    pub imported: bool,
    /// Unix time of submission.
    pub created: u64,
}

/// A batch record forgotten by [`Cache::forget_record`], and what became of its lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forgotten {
    /// The record as it was.
    pub record: BatchRecord,
    /// Its lines whose replies are in the cache: they stay, and a rerun uses them unpaid.
    pub cached: u64,
    /// Its lines without a reply: the next run submits them again.
    pub missing: u64,
}

/// run stops before the answer is recorded, the next run looks the batch up by its file.
pub(super) const CREATING: &str = "creating";

/// A batch not imported yet, as the cache holds it.
#[derive(Debug)]
pub(super) struct OpenBatch {
    /// The batch id, or the input file's id while the batch is being created.
    pub(super) id: String,
    /// The create call may or may not have gone through: `id` is the input file's.
    pub(super) creating: bool,
    /// Unix time of the record.
    pub(super) created: u64,
    /// The process that made the record, if it says.
    pub(super) creator: Option<Process>,
}

impl Cache {
    /// Records a batch and its lines, in one transaction, with `status` and the process that
    /// made the record (`creator`): under its input file's id and [`CREATING`] before the
    /// create call, so no batch exists that the cache does not know of.
    pub(super) fn record_batch(
        &self,
        id: &str,
        stage: &str,
        status: &str,
        keys: &[&String],
        creator: Option<&Process>,
    ) -> Result<(), crate::llm::CacheError> {
        let created = unix_now();
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            tx.execute(
                "INSERT OR REPLACE INTO batches (id, stage, status, total, created, creator) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    id,
                    stage,
                    status,
                    i64::try_from(keys.len()).unwrap_or(i64::MAX),
                    i64::try_from(created).unwrap_or(0),
                    creator.map(Process::to_text)
                ],
            )?;
            for key in keys {
                tx.execute(
                    "INSERT OR IGNORE INTO batch_lines (batch, key) VALUES (?1, ?2)",
                    params![id, key],
                )?;
            }
            tx.commit()
        })
    }

    /// Records the calls whose request lines were written to the request file `file`: an
    /// import takes replies for these (and for submitted batches' lines) only.
    pub(super) fn record_exported(
        &self,
        keys: &[&String],
        file: &Path,
    ) -> Result<(), crate::llm::CacheError> {
        let file = file.display().to_string();
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            for key in keys {
                tx.execute(
                    "INSERT OR REPLACE INTO exported (key, file) VALUES (?1, ?2)",
                    params![key, file],
                )?;
            }
            tx.commit()
        })
    }

    /// Whether the cache records any call as exported (a cache an earlier qrelgen made records
    /// none: its imports are checked by the ids' shape only).
    pub(super) fn any_exported(&self) -> Result<bool, crate::llm::CacheError> {
        self.with(|c| c.query_row("SELECT EXISTS (SELECT 1 FROM exported)", [], |row| row.get(0)))
    }

    /// Whether `key` is a call this cache asked for: exported to a request file or sent in a batch.
    pub(super) fn asked_for(&self, key: &str) -> Result<bool, crate::llm::CacheError> {
        self.with(|c| {
            c.query_row(
                "SELECT EXISTS (SELECT 1 FROM exported WHERE key = ?1) \
                 OR EXISTS (SELECT 1 FROM batch_lines WHERE key = ?1)",
                params![key],
                |row| row.get(0),
            )
        })
    }

    pub(super) fn update_batch(
        &self,
        batch: &BatchObject,
        imported: bool,
    ) -> Result<(), crate::llm::CacheError> {
        let counts = batch.request_counts.unwrap_or_default();
        self.with(|c| {
            c.execute(
                "UPDATE batches SET status = ?2, completed = ?3, failed = ?4, imported = ?5 WHERE id = ?1",
                params![
                    batch.id,
                    batch.status,
                    i64::try_from(counts.completed).unwrap_or(i64::MAX),
                    i64::try_from(counts.failed).unwrap_or(i64::MAX),
                    i64::from(imported)
                ],
            )
            .map(drop)
        })
    }

    /// The batch recorded under its input file `file` (being created) is `id`: its record
    /// and lines move to that id, in one transaction. Whether there was a record to move
    /// (another run sharing the cache may have moved it first).
    pub(super) fn adopt_batch(&self, file: &str, id: &str) -> Result<bool, crate::llm::CacheError> {
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            let moved = tx.execute(
                "UPDATE OR REPLACE batches SET id = ?2, status = 'validating' WHERE id = ?1",
                params![file, id],
            )?;
            tx.execute("UPDATE OR REPLACE batch_lines SET batch = ?2 WHERE batch = ?1", params![file, id])?;
            tx.commit()?;
            Ok(moved > 0)
        })
    }

    /// Forgets the record of a batch being created under input file `file`, if it is still
    /// [`CREATING`] (its lines are submitted again), in one transaction.
    pub(super) fn forget_batch(&self, file: &str) -> Result<(), crate::llm::CacheError> {
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            let gone =
                tx.execute("DELETE FROM batches WHERE id = ?1 AND status = ?2", params![file, CREATING])?;
            if gone > 0 {
                tx.execute("DELETE FROM batch_lines WHERE batch = ?1", params![file])?;
            }
            tx.commit()
        })
    }

    /// Batches not imported yet that hold any of `keys`, by id.
    pub(super) fn open_batches(&self, keys: &[&String]) -> Result<Vec<OpenBatch>, crate::llm::CacheError> {
        let mut open = BTreeMap::new();
        self.with(|c| {
            let mut query = c.prepare(
                "SELECT b.id, b.status, b.created, b.creator FROM batch_lines l JOIN batches b ON b.id = l.batch \
                 WHERE l.key = ?1 AND b.imported = 0",
            )?;
            for key in keys {
                let rows = query.query_map(params![key], |r| {
                    Ok(OpenBatch {
                        id: r.get(0)?,
                        creating: r.get::<_, String>(1)? == CREATING,
                        created: r.get::<_, i64>(2)?.unsigned_abs(),
                        creator: Process::from_text(r.get::<_, Option<String>>(3)?.as_deref()),
                    })
                })?;
                for row in rows {
                    let row = row?;
                    open.entry(row.id.clone()).or_insert(row);
                }
            }
            Ok(())
        })?;
        Ok(open.into_values().collect())
    }

    /// Stores a reply that came through a batch, marked so its price is the batch price: both
    /// rows in one transaction (a crash between them must not leave a batch reply priced as
    /// an online one).
    pub(super) fn put_batched(
        &self,
        key: &str,
        reply: &CachedReply,
        batch: &str,
    ) -> Result<(), crate::llm::CacheError> {
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            crate::llm::cache::insert_reply(&tx, key, reply)?;
            tx.execute(
                "INSERT OR REPLACE INTO batch_replies (key, batch) VALUES (?1, ?2)",
                params![key, batch],
            )?;
            tx.commit()
        })
    }

    /// Forgets the record of batch `id` (a batch id, or the input file id of one being
    /// created) and its lines, in one transaction, so the next run submits its lines that have
    /// no reply again. The replies in the cache stay, whichever way they came. `None` if no
    /// batch `id` is recorded.
    ///
    /// # Errors
    /// [`crate::llm::CacheError`] when SQLite fails.
    pub fn forget_record(&self, id: &str) -> Result<Option<Forgotten>, crate::llm::CacheError> {
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            let record = tx
                .query_row(
                    &format!("SELECT {RECORD_COLUMNS} FROM batches WHERE id = ?1"),
                    params![id],
                    record_of,
                )
                .optional()?;
            let Some(record) = record else { return Ok(None) };
            let (lines, cached) = tx.query_row(
                "SELECT COUNT(*), COUNT(r.key) FROM batch_lines l LEFT JOIN replies r ON r.key = l.key \
                 WHERE l.batch = ?1",
                params![id],
                |r| Ok((r.get::<_, i64>(0)?.unsigned_abs(), r.get::<_, i64>(1)?.unsigned_abs())),
            )?;
            tx.execute("DELETE FROM batch_lines WHERE batch = ?1", params![id])?;
            tx.execute("DELETE FROM batches WHERE id = ?1", params![id])?;
            tx.commit()?;
            Ok(Some(Forgotten { record, cached, missing: lines.saturating_sub(cached) }))
        })
    }

    /// Every batch recorded, oldest first.
    ///
    /// # Errors
    /// [`crate::llm::CacheError`] when SQLite fails.
    pub fn batches(&self) -> Result<Vec<BatchRecord>, crate::llm::CacheError> {
        self.with(|c| {
            let mut query =
                c.prepare(&format!("SELECT {RECORD_COLUMNS} FROM batches ORDER BY created, id"))?;
            let rows = query.query_map([], record_of)?;
            rows.collect()
        })
    }

    /// Replies in the cache that came through a batch.
    ///
    /// # Errors
    /// [`crate::llm::CacheError`] when SQLite fails.
    pub fn batched_replies(&self) -> Result<u64, crate::llm::CacheError> {
        self.with(|c| c.query_row("SELECT COUNT(*) FROM batch_replies", [], |r| r.get::<_, i64>(0)))
            .map(i64::unsigned_abs)
    }
}

/// The columns of `batches` that [`record_of`] reads, in its order.
pub(super) const RECORD_COLUMNS: &str = "id, stage, status, total, completed, failed, imported, created";

pub(super) fn record_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<BatchRecord> {
    Ok(BatchRecord {
        id: r.get(0)?,
        stage: r.get(1)?,
        status: r.get(2)?,
        total: r.get::<_, i64>(3)?.unsigned_abs(),
        completed: r.get::<_, i64>(4)?.unsigned_abs(),
        failed: r.get::<_, i64>(5)?.unsigned_abs(),
        imported: r.get::<_, i64>(6)? != 0,
        created: r.get::<_, i64>(7)?.unsigned_abs(),
    })
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub(super) fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
