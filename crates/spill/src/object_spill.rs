//! [`ObjectStoreSpill`]: run files as objects in an object store (feature `object-store`; S3
//! and S3-compatible servers by URL, any [`ObjectStore`] by value).
//!
//! Each instance owns a unique prefix `<prefix>/arrow-shards-spill-<pid>-<nanos>-<n>/` holding a
//! marker object (`arrow-shards-spill.marker`: boot id, pid, process start time, pid namespace)
//! and one object per run file (`00000000.run`, ...), written as the local run files are
//! (`docs/spill-format.md`).
//!
//! - Writing: a run file is buffered in parts of [`DEFAULT_PART_BYTES`] (S3's smallest part
//!   is 5 MiB; every part but the last has exactly this size, as R2 requires). A file that
//!   fits in one part is one PUT; a larger one a multipart upload, with at most
//!   [`MAX_PARTS_IN_FLIGHT`] parts uploading while the writer fills the next. The object
//!   exists once the run's `finish` returns; an error or a dropped writer aborts the upload.
//! - Reading: one ranged GET per segment, then the crate's usual verification (CRC32C first)
//!   and decoding. Segments from an object store are never trusted as written here: their
//!   arrays are validated after the checksum matched, since anyone with write access to the
//!   bucket could replace an object by one with a matching CRC.
//! - Removal: the last dropped [`SegmentRef`](crate::SegmentRef) of a run file queues a DELETE
//!   of its object (never blocking the caller); [`SpillStorage::close`] waits for those, then
//!   deletes whatever is left under the instance's prefix, marker last.
//! - Crashes: [`ObjectStoreSpill::create`] first sweeps the parent prefix: an instance prefix
//!   whose marker names a dead process of this machine's current boot (and pid namespace) is
//!   deleted. Markers of other machines, boots or namespaces are left alone (their processes
//!   cannot be checked from here). Parts of a multipart upload a killed process left
//!   unfinished are not objects and cannot be listed through `object_store`: a bucket
//!   lifecycle rule (S3 `AbortIncompleteMultipartUpload`) removes them.
//!
//! The crate's API is blocking; the object store's is async. A private multi-threaded tokio
//! runtime (2 worker threads, named `arrow-shards-objstore`) owned by the instance runs every
//! request; a blocking call spawns its request there and waits for the result with
//! `futures::executor::block_on`, so it works from any thread, including a thread of the
//! caller's own tokio runtime (which it blocks, as a file read would). The runtime is shut down
//! in the background when the instance is dropped.
//!
//! # Locking
//!
//! One mutex, over the handles of queued DELETEs: held to push a handle or to take them all,
//! never across I/O. Everything else is atomics (closed flag, file counter, metrics).

use std::fmt;
use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use arrow_array::RecordBatch;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{MultipartUpload, ObjectStore, ObjectStoreExt, PutPayload};
use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinHandle;

use crate::decode::{Fault, IndexEntry, decode_segment};
use crate::dir::{DIR_PREFIX, pid_namespace, process_start_time};
use crate::error::SpillError;
use crate::metrics::{Counters, SpillMetrics};
use crate::storage::SpillStorage;
use crate::storage::sealed::{self, RunSink};
use crate::sweep::parse_owner;

/// Size of every part of a multipart upload but the last: S3's smallest allowed part.
pub const DEFAULT_PART_BYTES: usize = 5 * 1024 * 1024;
/// Parts of one run file uploading at once while its writer fills the next: a writer holds up
/// to `MAX_PARTS_IN_FLIGHT + 1` parts in memory.
pub const MAX_PARTS_IN_FLIGHT: usize = 2;
/// Name of the marker object under an instance's prefix.
const MARKER_OBJECT: &str = "arrow-shards-spill.marker";
/// First line of the marker object.
const MARKER_TAG: &str = "arrow-shards-spill-object 1";

/// Run files as objects in an object store, under a prefix of their own; see the module docs
/// of `object_spill.rs` (and `docs/spill-format.md`) for the layout.
pub struct ObjectStoreSpill {
    remote: Arc<Remote>,
    /// The instance's prefix in the store.
    prefix: ObjectPath,
    /// The instance's prefix as a URL, in errors.
    location: PathBuf,
    counters: Counters,
    closed: AtomicBool,
    next_file: AtomicU64,
    part_bytes: usize,
    /// DELETEs queued by dropped run files, awaited by `close`.
    deletes: Mutex<Vec<JoinHandle<()>>>,
    sweep: crate::SweepReport,
    runtime: Option<Runtime>,
}

/// The store and the runtime its requests run on, shared with the run sinks.
struct Remote {
    store: Arc<dyn ObjectStore>,
    runtime: Handle,
    /// `scheme://bucket` (or what the caller named the store), prefixed to object paths in
    /// errors.
    base: String,
}

impl fmt::Debug for ObjectStoreSpill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStoreSpill")
            .field("location", &self.location)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl Remote {
    /// Runs `future` on the private runtime and waits for it (blocking the calling thread).
    fn block<F>(&self, future: F) -> io::Result<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        futures::executor::block_on(self.runtime.spawn(future))
            .map_err(|e| io::Error::other(format!("the object store request did not run: {e}")))
    }

    /// An object's URL, as a path for the crate's errors.
    fn url(&self, path: &ObjectPath) -> PathBuf {
        PathBuf::from(format!("{}/{path}", self.base))
    }

    fn error(&self, path: &ObjectPath, source: object_store::Error) -> SpillError {
        SpillError::Io {
            path: self.url(path),
            source: io::Error::other(source),
        }
    }
}

impl ObjectStoreSpill {
    /// Opens the object store at `url` (`s3://bucket/prefix`) with credentials and settings
    /// from the environment, as `object_store`'s `AmazonS3Builder::from_env` reads them
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`,
    /// `AWS_ALLOW_HTTP`, ...), then [`ObjectStoreSpill::create`]s an instance under the prefix.
    pub fn from_url(url: &str) -> Result<Arc<Self>, SpillError> {
        let invalid = |reason: String| SpillError::InvalidOptions {
            dir: PathBuf::from(url),
            reason,
        };
        let parsed = url::Url::parse(url).map_err(|e| invalid(format!("not a URL: {e}")))?;
        if parsed.scheme() != "s3" {
            return Err(invalid(format!(
                "scheme `{}` is not supported; use s3://bucket/prefix (S3 or an S3-compatible \
                 server), or hand any ObjectStore to ObjectStoreSpill::create",
                parsed.scheme()
            )));
        }
        let bucket = parsed
            .host_str()
            .ok_or_else(|| invalid("no bucket in the URL".into()))?
            .to_string();
        let store = object_store::aws::AmazonS3Builder::from_env()
            .with_url(url)
            .build()
            .map_err(|e| invalid(e.to_string()))?;
        let prefix = parsed.path().trim_matches('/').to_string();
        Self::create(Arc::new(store), &format!("s3://{bucket}"), &prefix)
    }

    /// Creates an instance under `prefix` of `store`, after sweeping `prefix` of instances of
    /// dead processes. `base` names the store in errors (`s3://bucket`).
    pub fn create(
        store: Arc<dyn ObjectStore>,
        base: &str,
        prefix: &str,
    ) -> Result<Arc<Self>, SpillError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("arrow-shards-objstore")
            .enable_all()
            .build()
            .map_err(|e| SpillError::Io {
                path: PathBuf::from(base),
                source: e,
            })?;
        let remote = Arc::new(Remote {
            store,
            runtime: runtime.handle().clone(),
            base: base.trim_end_matches('/').to_string(),
        });
        let parent = ObjectPath::from(prefix);
        let sweep = sweep_prefix(&remote, &parent)?;

        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{DIR_PREFIX}{}-{nanos:x}-{n}", std::process::id());
        let prefix = parent.clone().join(name);
        let spill = ObjectStoreSpill {
            location: remote.url(&prefix),
            remote,
            prefix,
            counters: Counters::default(),
            closed: AtomicBool::new(false),
            next_file: AtomicU64::new(0),
            part_bytes: DEFAULT_PART_BYTES,
            deletes: Mutex::new(Vec::new()),
            sweep,
            runtime: Some(runtime),
        };
        // From here on, dropping `spill` deletes the prefix.
        let marker = spill.prefix.clone().join(MARKER_OBJECT);
        let text = marker_text(&ObjectMarker::this_process());
        let store = Arc::clone(&spill.remote.store);
        let path = marker.clone();
        spill
            .remote
            .block(async move { store.put(&path, PutPayload::from(text)).await })
            .map_err(|e| SpillError::Io {
                path: spill.remote.url(&marker),
                source: e,
            })?
            .map_err(|e| spill.remote.error(&marker, e))?;
        Ok(Arc::new(spill))
    }

    /// What the sweep of the parent prefix in [`ObjectStoreSpill::create`] did (instance
    /// prefixes as URLs).
    pub fn sweep_report(&self) -> &crate::SweepReport {
        &self.sweep
    }

    /// The instance's prefix in the store.
    pub fn prefix(&self) -> &ObjectPath {
        &self.prefix
    }

    fn close_inner(&self) -> Result<(), SpillError> {
        self.closed.store(true, Ordering::Release);
        let deletes = std::mem::take(
            &mut *self
                .deletes
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for delete in deletes {
            let _ = futures::executor::block_on(delete);
        }
        delete_prefix(&self.remote, &self.prefix)
    }
}

/// Deletes every object under `prefix`, the marker last (so a sweep still finds an
/// interrupted deletion).
fn delete_prefix(remote: &Arc<Remote>, prefix: &ObjectPath) -> Result<(), SpillError> {
    let store = Arc::clone(&remote.store);
    let listed = prefix.clone();
    let result = remote
        .block(async move {
            let objects: Vec<ObjectPath> = store
                .list(Some(&listed))
                .map_ok(|meta| meta.location)
                .try_collect()
                .await?;
            let (markers, runs): (Vec<_>, Vec<_>) = objects
                .into_iter()
                .partition(|p| p.filename() == Some(MARKER_OBJECT));
            for batch in [runs, markers] {
                let stream = futures::stream::iter(batch.into_iter().map(Ok)).boxed();
                store
                    .delete_stream(stream)
                    .try_for_each(|_| async { Ok(()) })
                    .await
                    .or_else(not_found_is_ok)?;
            }
            Ok(())
        })
        .map_err(|e| SpillError::Io {
            path: remote.url(prefix),
            source: e,
        })?;
    result.map_err(|e| remote.error(prefix, e))
}

fn not_found_is_ok(e: object_store::Error) -> Result<(), object_store::Error> {
    match e {
        object_store::Error::NotFound { .. } => Ok(()),
        e => Err(e),
    }
}

impl SpillStorage for ObjectStoreSpill {
    fn location(&self) -> &Path {
        &self.location
    }

    fn metrics(&self) -> SpillMetrics {
        self.counters.snapshot()
    }

    fn close(&self) -> Result<(), SpillError> {
        self.close_inner()
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

#[expect(
    private_interfaces,
    reason = "sealed: the working half of `SpillStorage` speaks the crate's private types"
)]
impl sealed::Storage for ObjectStoreSpill {
    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn create_run(&self) -> Result<(PathBuf, Box<dyn RunSink>), SpillError> {
        let n = self.next_file.fetch_add(1, Ordering::Relaxed);
        let path = self.prefix.clone().join(format!("{n:08}.run"));
        let location = self.remote.url(&path);
        let sink = ObjectRunSink {
            remote: Arc::clone(&self.remote),
            path,
            location: location.clone(),
            part_bytes: self.part_bytes,
            buf: Vec::new(),
            upload: None,
            in_flight: Vec::new(),
            done: false,
        };
        Ok((location, Box::new(sink)))
    }

    fn read_segment(&self, location: &Path, entry: &IndexEntry) -> Result<Vec<RecordBatch>, Fault> {
        let path = self.object_path(location)?;
        let store = Arc::clone(&self.remote.store);
        let range = entry.offset..entry.offset + entry.len;
        let bytes = self
            .remote
            .block(async move { store.get_range(&path, range).await })?
            .map_err(io::Error::other)?;
        if bytes.len() as u64 != entry.len {
            return Err(Fault::Source(io::ErrorKind::UnexpectedEof.into()));
        }
        let in_memory = IndexEntry {
            offset: 0,
            ..entry.clone()
        };
        decode_segment(&bytes[..], &in_memory)
    }

    fn remove_run(&self, location: &Path) {
        let Ok(path) = self.object_path(location) else {
            return;
        };
        let store = Arc::clone(&self.remote.store);
        // queued, not awaited: a segment may be dropped on a thread of the caller's runtime
        let handle = self.remote.runtime.spawn(async move {
            // a failure leaves the object to `close`
            let _ = store.delete(&path).await;
        });
        let mut deletes = self
            .deletes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        deletes.retain(|d| !d.is_finished());
        deletes.push(handle);
    }

    fn trusted(&self) -> bool {
        false
    }

    fn closed_error(&self) -> SpillError {
        SpillError::Closed {
            dir: self.location.clone(),
        }
    }
}

impl ObjectStoreSpill {
    /// The object path of run file `location` (a URL this instance made).
    fn object_path(&self, location: &Path) -> Result<ObjectPath, Fault> {
        let url = location.to_string_lossy();
        url.strip_prefix(&self.remote.base)
            .and_then(|rest| rest.strip_prefix('/'))
            .map(ObjectPath::from)
            .ok_or_else(|| Fault::Source(io::Error::other("not a run object of this store")))
    }
}

impl Drop for ObjectStoreSpill {
    fn drop(&mut self) {
        if !self.closed.load(Ordering::Acquire) {
            // best effort: an error here has nobody to report to; the next instance's sweep
            // is the fallback
            let _ = self.close_inner();
        }
        if let Some(runtime) = self.runtime.take() {
            // never blocks, so the instance may be dropped inside another runtime
            runtime.shutdown_background();
        }
    }
}

/// A run file being uploaded.
struct ObjectRunSink {
    remote: Arc<Remote>,
    path: ObjectPath,
    location: PathBuf,
    part_bytes: usize,
    /// The part being filled.
    buf: Vec<u8>,
    /// The multipart upload, started with the first full part.
    upload: Option<Box<dyn MultipartUpload>>,
    in_flight: Vec<JoinHandle<object_store::Result<()>>>,
    /// The object is complete (or the upload failed and was aborted).
    done: bool,
}

impl fmt::Debug for ObjectRunSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectRunSink")
            .field("location", &self.location)
            .field("buffered", &self.buf.len())
            .field("parts_in_flight", &self.in_flight.len())
            .finish_non_exhaustive()
    }
}

impl ObjectRunSink {
    fn error(&self, source: io::Error) -> SpillError {
        SpillError::Io {
            path: self.location.clone(),
            source,
        }
    }

    fn store_error(&self, source: object_store::Error) -> SpillError {
        self.error(io::Error::other(source))
    }

    /// Uploads `part` as the next part, starting the multipart upload if needed; waits while
    /// more than [`MAX_PARTS_IN_FLIGHT`] are uploading.
    fn send_part(&mut self, part: Vec<u8>) -> Result<(), SpillError> {
        if self.upload.is_none() {
            let store = Arc::clone(&self.remote.store);
            let path = self.path.clone();
            let upload = self
                .remote
                .block(async move { store.put_multipart(&path).await })
                .map_err(|e| self.error(e))?
                .map_err(|e| self.store_error(e))?;
            self.upload = Some(upload);
        }
        let Some(upload) = self.upload.as_mut() else {
            unreachable!("the upload was just started");
        };
        let part = upload.put_part(PutPayload::from(part));
        self.in_flight.push(self.remote.runtime.spawn(part));
        while self.in_flight.len() > MAX_PARTS_IN_FLIGHT {
            let oldest = self.in_flight.remove(0);
            self.wait(oldest)?;
        }
        Ok(())
    }

    fn wait(&self, part: JoinHandle<object_store::Result<()>>) -> Result<(), SpillError> {
        futures::executor::block_on(part)
            .map_err(|e| {
                self.error(io::Error::other(format!(
                    "the part upload did not run: {e}"
                )))
            })?
            .map_err(|e| self.store_error(e))
    }

    fn fail(&mut self, error: SpillError) -> SpillError {
        self.abort();
        error
    }

    /// Aborts the multipart upload, in the background.
    fn abort(&mut self) {
        self.done = true;
        self.in_flight.clear();
        if let Some(mut upload) = self.upload.take() {
            self.remote.runtime.spawn(async move {
                let _ = upload.abort().await;
            });
        }
    }

    fn complete(&mut self) -> Result<(), SpillError> {
        let last = std::mem::take(&mut self.buf);
        let Some(mut upload) = self.upload.take() else {
            // one part: one PUT
            let store = Arc::clone(&self.remote.store);
            let path = self.path.clone();
            self.remote
                .block(async move { store.put(&path, PutPayload::from(last)).await })
                .map_err(|e| self.error(e))?
                .map_err(|e| self.store_error(e))?;
            return Ok(());
        };
        if !last.is_empty() {
            self.in_flight.push(
                self.remote
                    .runtime
                    .spawn(upload.put_part(PutPayload::from(last))),
            );
        }
        self.upload = Some(upload);
        for part in std::mem::take(&mut self.in_flight) {
            self.wait(part)?;
        }
        let Some(mut upload) = self.upload.take() else {
            unreachable!("the upload was just put back");
        };
        let (upload, result) = self
            .remote
            .block(async move {
                let result = upload.complete().await;
                (upload, result)
            })
            .map_err(|e| self.error(e))?;
        if let Err(e) = result {
            self.upload = Some(upload);
            return Err(self.store_error(e));
        }
        Ok(())
    }
}

impl RunSink for ObjectRunSink {
    fn write_all(&mut self, mut bytes: &[u8]) -> Result<(), SpillError> {
        while !bytes.is_empty() {
            let room = self.part_bytes - self.buf.len();
            let (now, rest) = bytes.split_at(room.min(bytes.len()));
            if self.buf.capacity() == 0 {
                self.buf
                    .reserve_exact(self.part_bytes.min(now.len().max(256 * 1024)));
            }
            self.buf.extend_from_slice(now);
            bytes = rest;
            if self.buf.len() == self.part_bytes {
                let part = std::mem::take(&mut self.buf);
                if let Err(e) = self.send_part(part) {
                    return Err(self.fail(e));
                }
            }
        }
        Ok(())
    }

    fn write_all_vectored(&mut self, slices: &mut [IoSlice<'_>]) -> Result<(), SpillError> {
        for slice in slices.iter() {
            self.write_all(slice)?;
        }
        Ok(())
    }

    fn finish(&mut self, _sync: bool) -> Result<(), SpillError> {
        match self.complete() {
            Ok(()) => {
                self.done = true;
                Ok(())
            }
            Err(e) => Err(self.fail(e)),
        }
    }
}

impl Drop for ObjectRunSink {
    fn drop(&mut self) {
        if !self.done {
            self.abort();
        }
    }
}

/// What an instance's marker object says about its owner process.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ObjectMarker {
    /// `/proc/sys/kernel/random/boot_id`: pids only mean something within one boot of one
    /// machine.
    boot: String,
    pid: u32,
    start: Option<u64>,
    pid_namespace: Option<u64>,
}

impl ObjectMarker {
    fn this_process() -> Self {
        Self {
            boot: boot_id().unwrap_or_default(),
            pid: std::process::id(),
            start: process_start_time("self"),
            pid_namespace: pid_namespace(),
        }
    }
}

fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_string()).filter(|id| !id.is_empty())
}

fn marker_text(marker: &ObjectMarker) -> String {
    let mut text = format!("{MARKER_TAG}\nboot {}\npid {}\n", marker.boot, marker.pid);
    if let Some(start) = marker.start {
        text.push_str(&format!("start {start}\n"));
    }
    if let Some(ns) = marker.pid_namespace {
        text.push_str(&format!("pidns {ns}\n"));
    }
    text
}

fn parse_marker(text: &str) -> Option<ObjectMarker> {
    let mut lines = text.lines();
    if lines.next()? != MARKER_TAG {
        return None;
    }
    let boot = lines.next()?.strip_prefix("boot ")?.to_string();
    let owner = parse_owner(lines)?;
    Some(ObjectMarker {
        boot,
        pid: owner.pid,
        start: owner.start,
        pid_namespace: owner.pid_namespace,
    })
}

/// Whether the owner of `marker` is provably dead: same boot and pid namespace as this
/// process, and its pid is gone or now names another process.
fn owner_is_dead(marker: &ObjectMarker) -> Option<bool> {
    if boot_id()? != marker.boot || marker.pid_namespace != pid_namespace() {
        return None;
    }
    if std::fs::symlink_metadata(format!("/proc/{}", marker.pid)).is_err() {
        return Some(true);
    }
    match (marker.start, process_start_time(&marker.pid.to_string())) {
        (Some(recorded), Some(now)) => Some(recorded != now),
        _ => Some(false),
    }
}

/// Deletes the instance prefixes under `parent` whose owner process is dead.
fn sweep_prefix(
    remote: &Arc<Remote>,
    parent: &ObjectPath,
) -> Result<crate::SweepReport, SpillError> {
    let mut report = crate::SweepReport::default();
    let store = Arc::clone(&remote.store);
    let listed = parent.clone();
    let prefixes = remote
        .block(async move { store.list_with_delimiter(Some(&listed)).await })
        .map_err(|e| SpillError::Io {
            path: remote.url(parent),
            source: e,
        })?
        .map_err(|e| remote.error(parent, e))?
        .common_prefixes;
    for prefix in prefixes {
        if !prefix
            .filename()
            .is_some_and(|name| name.starts_with(DIR_PREFIX))
        {
            continue;
        }
        let url = remote.url(&prefix);
        let store = Arc::clone(&remote.store);
        let marker = prefix.clone().join(MARKER_OBJECT);
        let text = remote.block(async move {
            let result = store.get(&marker).await?;
            result.bytes().await
        });
        let owner = match text {
            Ok(Ok(bytes)) => std::str::from_utf8(&bytes).ok().and_then(parse_marker),
            _ => None,
        };
        match owner.as_ref().and_then(owner_is_dead) {
            Some(true) => match delete_prefix(remote, &prefix) {
                Ok(()) => report.removed.push(url),
                Err(e) => report.failed.push((url, e.to_string())),
            },
            Some(false) => report.live.push(url),
            None => report.skipped.push(url),
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_round_trips() {
        let marker = ObjectMarker::this_process();
        assert_eq!(parse_marker(&marker_text(&marker)), Some(marker.clone()));
        assert_eq!(owner_is_dead(&marker), Some(false));
        let other_boot = ObjectMarker {
            boot: "another machine".into(),
            ..marker
        };
        assert_eq!(owner_is_dead(&other_boot), None);
        assert_eq!(parse_marker("arrow-shards-spill 1\npid 1\n"), None);
    }
}
