//! The crate's ways of running work on threads: joining one (its panic goes on), a panic's
//! message, items mapped in order on a rayon pool, a slice filled in parts, blocks worked ahead
//! and taken in order, and a fallible step run on many items at once (syncs). Every helper
//! joins each thread it starts before it returns, so no panic is left for the scope to raise.

use rayon::iter::{IndexedParallelIterator as _, IntoParallelIterator as _, ParallelIterator as _};
use std::any::Any;
use std::ops::Range;
use std::thread::ScopedJoinHandle;

/// What a scoped thread returned; its panic is raised again here, with its own payload.
pub(crate) fn join<T>(thread: ScopedJoinHandle<'_, T>) -> T {
    thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// What `first` returns on this thread and what `second`, if any, returns on another one
/// meanwhile; a panic of `second` goes on once `first` is done.
pub(crate) fn beside<A, B: Send>(
    first: impl FnOnce() -> A,
    second: Option<impl FnOnce() -> B + Send>,
) -> (A, Option<B>) {
    std::thread::scope(|scope| {
        let other = second.map(|work| scope.spawn(work));
        (first(), other.map(join))
    })
}

/// Values [`ahead`]'s producer may make before the consumer takes them.
const AHEAD: usize = 1;

/// `produce` on another thread, handing what it makes over one by one, and `consume` taking
/// them on this one, in order, while the next are made (at most [`AHEAD`] of them waiting).
/// A `consume` error stops the producer: its next hand-over fails with that error, which is
/// the result (a `produce` error is, when `consume` did not fail first). After a panic of
/// `consume`, the producer runs to its end, what it hands over dropped.
pub(crate) fn ahead<T: Send, R: Send, E: Send>(
    produce: impl FnOnce(&mut dyn FnMut(T) -> Result<(), E>) -> Result<R, E> + Send,
    consume: impl FnMut(T) -> Result<(), E>,
) -> Result<R, E> {
    let failed: std::sync::Mutex<Option<E>> = std::sync::Mutex::new(None);
    let take_failure = || failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    std::thread::scope(|scope| {
        let (send, receive) = std::sync::mpsc::sync_channel(AHEAD);
        let take_failure = &take_failure;
        let making = scope.spawn(move || {
            // The consumer stores its error before it lets go of the channel.
            let mut hand = |value| send.send(value).or_else(|_| take_failure().map_or(Ok(()), Err));
            produce(&mut hand)
        });
        if let Err(error) = receive.iter().try_for_each(consume) {
            *failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(error);
        }
        drop(receive);
        let made = join(making);
        take_failure().map_or(made, Err)
    })
}

/// Drops what it is given on a thread of its own while its owner goes on: freeing many small
/// allocations (a corpus's chunk records) takes a core for a while. Dropping the `Discard`
/// waits for that thread.
pub(crate) struct Discard {
    bin: Option<std::sync::mpsc::Sender<Box<dyn Any + Send>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Discard {
    /// The thread, waiting for what to drop.
    pub(crate) fn new() -> Self {
        let (bin, taken) = std::sync::mpsc::channel::<Box<dyn Any + Send>>();
        let thread =
            std::thread::Builder::new().name("discard".to_owned()).spawn(move || taken.iter().for_each(drop));
        // Without a thread (none could be started), what it is given is dropped at once.
        Self { bin: thread.is_ok().then_some(bin), thread: thread.ok() }
    }

    /// Drops `value` on the thread.
    pub(crate) fn later<T: Send + 'static>(&self, value: T) {
        if let Some(bin) = &self.bin {
            // The thread ends only once `bin` is gone: the value is sent.
            drop(bin.send(Box::new(value)));
        }
    }
}

impl Drop for Discard {
    fn drop(&mut self) {
        self.bin = None;
        if let Some(thread) = self.thread.take() {
            // A panic while dropping (none is expected) is not raised again inside a drop.
            drop(thread.join());
        }
    }
}

/// The message a thread panicked with.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// `f` of each of `items`, in order, on up to `threads` threads (a rayon pool of its own; on
/// this thread with one thread or one item). Every item is a task an idle thread may take, so
/// an item that takes long (a large document) holds up its own thread only. A panic of `f`
/// goes on here once the pool is done with the items.
pub(crate) fn map_in_order<T: Send, U: Send>(
    items: Vec<T>,
    threads: usize,
    f: impl Fn(T) -> U + Sync + Send,
) -> Vec<U> {
    let pool = (threads > 1 && items.len() > 1)
        .then(|| rayon::ThreadPoolBuilder::new().num_threads(threads).build().ok())
        .flatten();
    match pool {
        Some(pool) => pool.install(|| items.into_par_iter().with_max_len(1).map(f).collect()),
        // One thread, or none to be had from the system: this one.
        None => items.into_iter().map(f).collect(),
    }
}

/// Fills `out` (rows of `width` values) in up to `threads` parts of consecutive rows, one
/// thread each (on this thread alone below `min_rows` rows): `work` gets a part's row range and
/// its values. A part's panic goes on once every part is joined.
pub(crate) fn in_parts<T: Send>(
    out: &mut [T],
    width: usize,
    threads: usize,
    min_rows: usize,
    work: impl Fn(Range<usize>, &mut [T]) + Sync,
) {
    let width = width.max(1);
    let rows = out.len() / width;
    let per_part = rows.div_ceil(threads.max(1)).max(1);
    if threads <= 1 || rows < min_rows {
        work(0..rows, out);
        return;
    }
    let work = &work;
    std::thread::scope(|scope| {
        let parts: Vec<_> = out
            .chunks_mut(per_part * width)
            .enumerate()
            .map(|(part, values)| {
                let from = part * per_part;
                scope.spawn(move || work(from..from + values.len() / width, values))
            })
            .collect();
        parts.into_iter().for_each(join);
    });
}

/// Why [`blocks_in_order`] stopped taking blocks.
enum Stop<E> {
    /// A worker's error, or `take`'s.
    Failed(E),
    /// The worker on this thread went without handing on its block: it panicked.
    Lost(usize),
}

/// The results of `blocks` blocks, handed to `take` in block order: block `b` is worked on
/// thread `b % threads` by the worker `start` makes on that thread, at most a few blocks ahead
/// of `take`. A worker's error stops its thread and is handed on in its block's place; a
/// worker that panics is `lost` with its panic's message (every thread is joined first).
///
/// # Errors
/// The first failure in block order: a worker's error, `take`'s, or a lost worker (a panic
/// past the block where `take` stopped, of a worker that ran ahead, does not hide what stopped
/// it). A worker that panicked although every block was taken is lost too.
pub(crate) fn blocks_in_order<A: Send, E: Send, W: FnMut(usize) -> Result<A, E>>(
    blocks: usize,
    threads: usize,
    start: impl Fn(usize) -> W + Sync,
    mut take: impl FnMut(A) -> Result<(), E>,
    lost: impl Fn(&str) -> E,
) -> Result<(), E> {
    let start = &start;
    std::thread::scope(|scope| {
        let (receivers, workers): (Vec<_>, Vec<_>) = (0..threads)
            .map(|thread| {
                let (send, receive) = std::sync::mpsc::sync_channel(2);
                let worker = scope.spawn(move || {
                    let mut work = start(thread);
                    for block in (thread..blocks).step_by(threads) {
                        let done = work(block);
                        let failed = done.is_err();
                        if send.send(done).is_err() || failed {
                            break;
                        }
                    }
                });
                (receive, worker)
            })
            .unzip();
        let taken = (0..blocks).try_for_each(|block| match receivers[block % threads].recv() {
            Ok(done) => done.and_then(&mut take).map_err(Stop::Failed),
            Err(_) => Err(Stop::Lost(block % threads)),
        });
        drop(receivers);
        let joined: Vec<Option<Box<dyn Any + Send>>> =
            workers.into_iter().map(|worker| worker.join().err()).collect();
        let message = |thread: usize| joined[thread].as_deref().map_or("it stopped", panic_message);
        match taken {
            Err(Stop::Failed(error)) => Err(error),
            Err(Stop::Lost(thread)) => Err(lost(message(thread))),
            Ok(()) => match joined.iter().position(Option::is_some) {
                Some(thread) => Err(lost(message(thread))),
                None => Ok(()),
            },
        }
    })
}

/// Files synced at once, at most ([`sync_together`]).
pub(crate) const SYNCS_AT_ONCE: usize = 16;

/// Runs `sync` on each of `items`, [`SYNCS_AT_ONCE`] threads at once: a file system commits
/// syncs that wait together in one go, where one after the other each waits for its own.
/// `lost` is the error of a sync thread that panicked, from its panic's message. (The index's
/// files, and the output files in `output`.)
///
/// # Errors
/// The first error of a thread, in the order of `items`.
pub(crate) fn sync_together<T: Sync, E: Send>(
    items: &[T],
    sync: impl Fn(&T) -> Result<(), E> + Sync,
    lost: impl Fn(&str) -> E,
) -> Result<(), E> {
    let per_thread = items.len().div_ceil(SYNCS_AT_ONCE).max(1);
    let sync = &sync;
    std::thread::scope(|scope| {
        let threads: Vec<_> = items
            .chunks(per_thread)
            .map(|part| scope.spawn(move || part.iter().try_for_each(sync)))
            .collect();
        // Every thread is joined (a panic left unjoined would panic the scope), then the first
        // error taken.
        let joined: Vec<_> = threads
            .into_iter()
            .map(|thread| thread.join().unwrap_or_else(|panic| Err(lost(panic_message(panic.as_ref())))))
            .collect();
        joined.into_iter().collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_item_holds_up_one_thread_while_the_others_map_the_rest() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        // The first item waits for all the others: with runs of as many items each, those in
        // its own run never start.
        let small = 9;
        let finished = AtomicUsize::new(0);
        let start = std::time::Instant::now();
        let mapped = map_in_order((0..=small).collect(), 2, |i: usize| {
            if i == 0 {
                while finished.load(Ordering::SeqCst) < small {
                    if start.elapsed() > std::time::Duration::from_secs(10) {
                        return None;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            } else {
                finished.fetch_add(1, Ordering::SeqCst);
            }
            Some(i * 3)
        });
        assert_eq!(mapped, (0..=small).map(|i| Some(i * 3)).collect::<Vec<_>>());
    }

    #[test]
    fn map_in_order_keeps_the_order_on_at_most_its_threads() {
        let here = std::thread::current().id();
        for threads in [1, 2, 3, 8] {
            for len in [0, 1, 2, 5, 100] {
                let items: Vec<usize> = (0..len).collect();
                let mapped = map_in_order(items, threads, |i| (i * 3, std::thread::current().id()));
                assert_eq!(
                    mapped.iter().map(|m| m.0).collect::<Vec<_>>(),
                    (0..len).map(|i| i * 3).collect::<Vec<_>>()
                );
                let used: std::collections::BTreeSet<String> =
                    mapped.iter().map(|m| format!("{:?}", m.1)).collect();
                assert!(used.len() <= threads, "{threads} threads, {len} items: {used:?}");
                let on_this_thread = mapped.iter().all(|m| m.1 == here);
                assert_eq!(on_this_thread, threads == 1 || len < 2, "{threads} threads, {len} items");
            }
        }
    }

    #[test]
    fn work_beside_runs_on_another_thread_and_none_is_none() {
        let here = std::thread::current().id();
        let (first, second) = beside(|| std::thread::current().id(), Some(|| std::thread::current().id()));
        assert_eq!(first, here);
        assert_ne!(second, Some(here));
        assert!(second.is_some());
        let (first, second) = beside(|| 1, None::<fn() -> u8>);
        assert_eq!((first, second), (1, None));
    }

    #[test]
    fn values_made_ahead_are_taken_in_order_and_the_first_failure_is_the_result() {
        let made = |count: usize| {
            move |hand: &mut dyn FnMut(usize) -> Result<(), String>| {
                (0..count).try_for_each(&mut *hand).map(|()| count)
            }
        };
        let mut taken = Vec::new();
        let got = ahead(made(50), |i| {
            taken.push(i);
            Ok(())
        });
        assert_eq!((got, taken), (Ok(50), (0..50).collect()));
        // A consumer error stops the producer, which fails with it.
        let handed = std::sync::atomic::AtomicUsize::new(0);
        let producer = |hand: &mut dyn FnMut(usize) -> Result<(), String>| -> Result<usize, String> {
            for i in 0..1000 {
                hand(i)?;
                handed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Err("the producer ran to its end".to_owned())
        };
        let got = ahead(producer, |i| if i == 3 { Err(format!("consumer failed at {i}")) } else { Ok(()) });
        assert_eq!(got, Err("consumer failed at 3".to_owned()));
        assert!(handed.into_inner() < 10, "the producer stopped");
        // A consumer failing on the last value, after the producer is done.
        let got = ahead(made(3), |i| if i == 2 { Err(format!("last {i}")) } else { Ok(()) });
        assert_eq!(got, Err("last 2".to_owned()));
        // A producer error once its values are taken.
        let failing = |hand: &mut dyn FnMut(usize) -> Result<(), String>| -> Result<usize, String> {
            hand(1)?;
            Err("unreadable".to_owned())
        };
        let mut taken = Vec::new();
        let got = ahead(failing, |i| {
            taken.push(i);
            Ok(())
        });
        assert_eq!((got, taken), (Err("unreadable".to_owned()), vec![1]));
    }

    #[test]
    fn a_value_discarded_is_dropped_on_another_thread_before_the_discard_is_gone() {
        struct Noted(std::sync::Arc<std::sync::Mutex<Vec<std::thread::ThreadId>>>);
        impl Drop for Noted {
            fn drop(&mut self) {
                self.0.lock().unwrap().push(std::thread::current().id());
            }
        }
        let dropped = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let discard = Discard::new();
        discard.later(Noted(std::sync::Arc::clone(&dropped)));
        discard.later(Noted(std::sync::Arc::clone(&dropped)));
        drop(discard);
        let dropped = dropped.lock().unwrap();
        assert_eq!(dropped.len(), 2, "both dropped once the discard is gone");
        assert!(dropped.iter().all(|id| *id != std::thread::current().id()));
    }

    #[test]
    fn a_joined_thread_gives_its_value_and_its_panic_goes_on_with_its_message() {
        let value = std::thread::scope(|scope| join(scope.spawn(|| 7)));
        assert_eq!(value, 7);
        let panic = std::panic::catch_unwind(|| {
            std::thread::scope(|scope| join(scope.spawn(|| -> usize { panic!("thread {} failed", 3) })))
        })
        .unwrap_err();
        assert_eq!(panic_message(panic.as_ref()), "thread 3 failed");
        assert_eq!(panic_message(&"plain"), "plain");
        assert_eq!(panic_message(&5_u8), "(no message)");
    }

    #[test]
    fn parts_fill_their_own_rows_and_a_panic_in_a_part_goes_on_with_its_own_message() {
        let mut out = vec![0_usize; 2 * 10];
        let used = std::sync::Mutex::new(std::collections::HashSet::new());
        in_parts(&mut out, 2, 3, 4, |rows, values| {
            used.lock().unwrap().insert(std::thread::current().id());
            for (row, pair) in rows.zip(values.chunks_exact_mut(2)) {
                pair.copy_from_slice(&[row, 2 * row]);
            }
        });
        let expected: Vec<usize> = (0..10).flat_map(|row| [row, 2 * row]).collect();
        assert_eq!(out, expected);
        assert_eq!(used.into_inner().unwrap().len(), 3, "one thread per part");
        let mut out = vec![0.0; 40];
        let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            in_parts(&mut out, 1, 2, 4, |rows, _| assert!(rows.start == 0, "part at row {}", rows.start));
        }))
        .unwrap_err();
        assert_eq!(panic_message(panic.as_ref()), "part at row 20");
        // Below `min_rows`, one part on this thread.
        in_parts(&mut out, 1, 2, 41, |rows, _| assert_eq!(rows, 0..40));
    }

    #[test]
    fn a_panicking_worker_is_lost_with_its_message_and_the_blocks_before_it_are_taken() {
        for threads in [2, 3] {
            let start = |_thread| {
                |block: usize| {
                    assert!(block != 5, "block {block} is bad");
                    Ok::<_, String>(block)
                }
            };
            let mut taken = Vec::new();
            let got = blocks_in_order(
                40,
                threads,
                start,
                |block| {
                    taken.push(block);
                    Ok(())
                },
                |panic| format!("lost: {panic}"),
            );
            assert_eq!(got, Err("lost: block 5 is bad".to_owned()), "{threads} threads");
            assert_eq!(taken, (0..5).collect::<Vec<_>>());
        }
        let failing =
            |_thread| |block: usize| if block == 2 { Err(format!("bad {block}")) } else { Ok(block) };
        let got = blocks_in_order(9, 2, failing, |_| Ok(()), str::to_owned);
        assert_eq!(got, Err("bad 2".to_owned()), "an error is handed on in its block's place");
    }

    #[test]
    fn a_take_error_is_not_hidden_by_a_later_blocks_panic() {
        // Thread 1 sends block 1 (its channel has room) and then works block 3, which panics,
        // whatever `take` does: `take` fails at block 1, and that is the first failure.
        let start = |_thread| {
            |block: usize| {
                assert!(block != 3, "block {block} panics");
                Ok::<_, String>(block)
            }
        };
        let take = |block: usize| if block == 1 { Err(format!("take failed at {block}")) } else { Ok(()) };
        let got = blocks_in_order(8, 2, start, take, |panic| format!("lost: {panic}"));
        assert_eq!(got, Err("take failed at 1".to_owned()));
        // A worker's error before a later block's panic likewise.
        let start = |_thread| {
            |block: usize| {
                assert!(block != 3, "block {block} panics");
                if block == 2 { Err(format!("bad {block}")) } else { Ok(block) }
            }
        };
        let got = blocks_in_order(8, 2, start, |_| Ok(()), |panic| format!("lost: {panic}"));
        assert_eq!(got, Err("bad 2".to_owned()));
    }

    #[test]
    fn a_worker_that_panics_after_every_block_was_taken_is_lost() {
        let start = |thread: usize| {
            assert!(thread != 2, "thread {thread} cannot start");
            |block: usize| Ok::<_, String>(block)
        };
        let got = blocks_in_order(2, 3, start, |_| Ok(()), |panic| format!("lost: {panic}"));
        assert_eq!(got, Err("lost: thread 2 cannot start".to_owned()));
    }

    #[test]
    fn sync_together_joins_every_thread_before_it_gives_the_first_error() {
        let items: Vec<usize> = (0..2 * SYNCS_AT_ONCE).collect();
        let final_item = items.len() - 1;
        let sync = |&item: &usize| match item {
            0 => Err(format!("item {item} failed")),
            _ if item == final_item => panic!("item {item} panicked"),
            _ => Ok(()),
        };
        let lost = |panic: &str| format!("lost: {panic}");
        let got = std::panic::catch_unwind(|| sync_together(&items, sync, lost));
        assert_eq!(got.ok(), Some(Err("item 0 failed".to_owned())), "no panic of the scope");
        let got = sync_together(&items[1..], sync, lost);
        assert_eq!(got, Err(format!("lost: item {final_item} panicked")));
    }

    #[test]
    fn syncing_together_syncs_every_item_and_fails_with_the_first_error() {
        let synced = std::sync::atomic::AtomicUsize::new(0);
        let items: Vec<usize> = (0..40).collect();
        let sync = |&i: &usize| {
            synced.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if i % 10 == 7 { Err(i) } else { Ok(()) }
        };
        assert_eq!(sync_together(&items, sync, |_| usize::MAX), Err(7));
        let fine = sync_together(&items, |_| Ok::<(), usize>(()), |_| usize::MAX);
        assert_eq!(fine, Ok(()));
        assert!(synced.into_inner() >= 4, "each thread stops at its own first error");
        let lost = sync_together(&[0], |_| -> Result<(), usize> { panic!("a sync thread panics") }, |_| 99);
        assert_eq!(lost, Err(99));
    }
}
