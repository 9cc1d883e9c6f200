//! The background spiller: when the pool crosses the threshold, write the largest partitions to
//! disk as one run, release their memory once their segments are complete, and stop at the target.
//!
//! One thread per buffer, fed through a crossbeam channel of [`Job`]s:
//! - `Wake` after a write that left the pool at or above the threshold, or a write that did not
//!   fit (with the bytes it needs, so the round frees at least that much);
//! - `Direct` for a write that cannot fit even in an empty budget (a batch, or the parts of a
//!   scattered batch, see [`direct`]): it is written to disk at once, each part after its
//!   partition's batches in memory (which the spiller commits), and its segments are sent back
//!   for the *writer* to commit, so a write whose future was dropped never lands;
//! - `Shutdown` from `close()` or the last handle's drop.
//!
//! A failed round (an I/O error writing the run) keeps its batches in memory and is tried again
//! after a back-off (10 ms, doubling), up to five failures in a row. Then the error is recorded:
//! waiting writers get it with their batch back, and so do later writes that would have to wait,
//! while later wakes still try a round (at most once a second); the first round that succeeds
//! clears the error and spilling goes on. A disk that stays full therefore fails writes with
//! `Error::Spill` and loses nothing; a transient error costs a short wait.
//!
//! Buffers sharing a pool spill the largest partition across all of them: each spiller is a
//! member of the pool's [`SpillPeers`](arrow_shards_memory::SpillPeers) ([`peer`]). A round first
//! asks the other members for their largest spillable partition and takes its own partitions
//! only while they are at least as large; when the largest is elsewhere it asks that buffer's
//! spiller to make the room (with this buffer's need) and ends. A buffer whose spilling is
//! failing reports nothing to spill, so the others do not wait on it.
//!
//! # Locking
//! Before taking its own `State` lock, a round asks the other members for their largest
//! partition, each under that member's `State` lock alone (never two `State` locks at once; the
//! pool's member list is a leaf lock, not held while members are called). The spiller takes the buffer's `State` lock twice per round: to pick victims and mark their
//! batches in flight (`State::start_spill`), and to commit or abort (`State::commit_spill`,
//! `State::abort_spill`). The run is written with no lock held. Segments voided by a racing read
//! and the round's batch clones are dropped after unlock (dropping a `SegmentRef` may delete a
//! file). It sends nothing while holding the lock; writers send `Wake` after unlocking.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::shard::Part;
use crate::shared::Shared;
use side::SpillSide;

mod direct;
mod job;
mod peer;
mod policy;
mod round;
mod run;
pub(crate) mod side;

pub(crate) use direct::{DirectReply, Landed};
use job::Job;
use peer::Peer;
use round::{Round, round};

/// Owns the spiller thread; the last buffer handle's drop (or `close`) stops it.
#[derive(Debug)]
pub(crate) struct Spiller {
    jobs: Sender<Job>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// This buffer's membership of its pool's spill peers; it leaves when the spiller goes.
    peer: Arc<Peer>,
}

impl Spiller {
    /// Starts the spiller thread for `shared`.
    pub(crate) fn start(shared: Arc<Shared>) -> std::io::Result<Self> {
        let (jobs, rx) = crossbeam_channel::unbounded();
        let peer = Peer::join(&shared, jobs.clone());
        let thread_peer = Arc::downgrade(&peer);
        let thread = std::thread::Builder::new()
            .name("arrow-shards-spiller".into())
            .spawn(move || run(&shared, &thread_peer, &rx))?;
        Ok(Self {
            jobs,
            thread: Mutex::new(Some(thread)),
            peer,
        })
    }

    /// This buffer's spiller as a [`SpillPeer`](arrow_shards_memory::SpillPeer) (weakly).
    pub(crate) fn peer(&self) -> std::sync::Weak<dyn arrow_shards_memory::SpillPeer> {
        let as_member: Arc<dyn arrow_shards_memory::SpillPeer> = self.peer.clone();
        Arc::downgrade(&as_member)
    }

    /// Whether other buffers that spill share this buffer's pool (members of its spill peers
    /// besides this one): they may free room for it, now or when a running spill commits.
    pub(crate) fn shares_pool(shared: &Shared) -> bool {
        shared
            .pool
            .spill_peers()
            .is_some_and(|peers| peers.len() > 1)
    }

    /// Asks for a round if none is pending.
    pub(crate) fn wake(&self, side: &SpillSide) {
        peer::wake(&self.jobs, side);
    }

    /// Hands the parts of a write too large for the whole budget to the spiller; the receiver
    /// answers when they are on disk. `None` if the spiller has stopped (the buffer is closed).
    pub(crate) fn direct(&self, parts: Vec<Part>) -> Option<DirectReply> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Job::Direct { parts, reply })
            .ok()
            .map(|()| rx)
    }

    /// A receiver answered once every job queued before now (wakes included, so the rounds
    /// they start) is done; `None` if the spiller has stopped.
    pub(crate) fn barrier(&self) -> Option<tokio::sync::oneshot::Receiver<()>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.jobs.send(Job::Barrier(tx)).ok().map(|()| rx)
    }

    /// Stops the thread after the job it is on and waits for it; idempotent.
    pub(crate) fn stop(&self) {
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            let _ = self.jobs.send(Job::Shutdown);
            // A panic in the spiller is reported by the writers and reads that see its effects;
            // nothing more to do with it here.
            let _ = thread.join();
        }
    }
}

impl Drop for Spiller {
    /// Asks the thread to stop. Outside an async runtime it then waits for it (the round it is
    /// on), so that once the last handle's drop returns the spill directory is gone, even in a
    /// process that exits right after (the CLI on an error). Inside a tokio runtime it does not
    /// wait, so dropping the last handle never blocks a worker: the thread ends after its round
    /// and drops its share of the buffer, which removes the spill directory.
    fn drop(&mut self) {
        let thread = self
            .thread
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            let _ = self.jobs.send(Job::Shutdown);
            let in_runtime = tokio::runtime::Handle::try_current().is_ok();
            if !in_runtime && thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

/// Attempts of a spill round that fail in a row before waiting writers get the error.
pub(crate) const SPILL_ATTEMPTS: u32 = 5;
/// The wait after the first failed attempt; doubled after each further one.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
/// After [`SPILL_ATTEMPTS`] failures, how often a wake may try again.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

fn run(shared: &Shared, me: &std::sync::Weak<Peer>, jobs: &Receiver<Job>) {
    let Some(side) = shared.spill.as_ref() else {
        return;
    };
    let mut last_failure: Option<Instant> = None;
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Wake => {
                side.wake_pending.store(false, Ordering::Release);
                let failed = shared.lock().spill_error().is_some();
                if failed && last_failure.is_some_and(|t| t.elapsed() < RETRY_AFTER_FAILURE) {
                    continue;
                }
                match spill_with_retries(
                    shared,
                    me,
                    side,
                    jobs,
                    if failed { 1 } else { SPILL_ATTEMPTS },
                ) {
                    Ok(()) => last_failure = None,
                    Err(Stop) => return,
                }
                if shared.lock().spill_error().is_some() {
                    last_failure = Some(Instant::now());
                }
            }
            Job::Direct { parts, reply } => {
                // The writer may have gone (its future dropped): then the batch was never
                // accepted, and dropping the result (its segments) is right.
                let _ = reply.send(direct::write(shared, side, parts));
            }
            Job::Barrier(done) => {
                let _ = done.send(());
            }
            Job::Shutdown => return,
        }
    }
}

/// The spiller was asked to stop while it waited between attempts.
struct Stop;

/// Rounds until the target is reached. A failed round is tried again after a back-off (10 ms,
/// doubling), up to `attempts` failures in a row; then the error is recorded (waiting writers
/// get it with their batch back, later writes that would have to wait too) and notified. A
/// successful round clears a recorded error: spilling resumes. Direct writes that arrive during
/// a back-off are served; a shutdown ends it.
fn spill_with_retries(
    shared: &Shared,
    me: &std::sync::Weak<Peer>,
    side: &SpillSide,
    jobs: &Receiver<Job>,
    attempts: u32,
) -> Result<(), Stop> {
    let mut first = true;
    let mut failures = 0;
    let mut backoff = FIRST_BACKOFF;
    loop {
        match round(shared, me, side, first) {
            Round::Freed => {
                first = false;
                failures = 0;
                if shared.lock().clear_spill_error() {
                    shared.pool.release_signal().notify();
                }
            }
            Round::Done => return Ok(()),
            Round::Failed(error) => {
                failures += 1;
                if failures >= attempts {
                    shared.lock().set_spill_error(Arc::new(error));
                    // Waiting writers must see the error rather than wait for room that will
                    // not come.
                    shared.pool.release_signal().notify();
                    return Ok(());
                }
                let until = Instant::now() + backoff;
                backoff *= 2;
                while let Some(left) = until.checked_duration_since(Instant::now()) {
                    match jobs.recv_timeout(left) {
                        Ok(Job::Shutdown) | Err(RecvTimeoutError::Disconnected) => {
                            return Err(Stop);
                        }
                        Ok(Job::Wake) | Err(RecvTimeoutError::Timeout) => {}
                        // Answered early: the rounds before it are retrying, not done; a
                        // caller waiting for disk would otherwise wait out the back-off.
                        Ok(Job::Barrier(done)) => {
                            let _ = done.send(());
                        }
                        Ok(Job::Direct { parts, reply }) => {
                            let _ = reply.send(direct::write(shared, side, parts));
                        }
                    }
                }
                side.wake_pending.store(false, Ordering::Release);
            }
        }
    }
}
