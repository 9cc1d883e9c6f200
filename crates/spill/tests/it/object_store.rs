//! The object-store tier (`ObjectStoreSpill`) against `object_store`'s in-memory store and
//! against a real S3-compatible server: moto's (`pip install 'moto[server]'`), which each test
//! starts on a free localhost port (`moto_server` on `PATH`, or `ARROW_SHARDS_MOTO_SERVER`).
//! Without one the server tests say so and pass, except under `CI=true`, where they fail.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_shards_spill::object_store::aws::AmazonS3Builder;
use arrow_shards_spill::object_store::memory::InMemory;
use arrow_shards_spill::object_store::path::Path as ObjectPath;
use arrow_shards_spill::object_store::{
    BackoffConfig, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig,
};
use arrow_shards_spill::{
    ObjectStoreSpill, SegmentRef, SpillDir, SpillError, SpillOptions, SpillStorage, run_writer,
};
use futures::TryStreamExt;

use crate::common::ints_and_strings;

const BUCKET: &str = "arrow-shards";

/// A moto server on a free localhost port, killed on drop.
struct Moto {
    child: Child,
    endpoint: String,
}

impl Moto {
    /// Starts a server and creates the bucket; `None` (after saying why) if there is no
    /// `moto_server` outside CI.
    fn start(test: &str) -> Option<Moto> {
        let program =
            std::env::var("ARROW_SHARDS_MOTO_SERVER").unwrap_or_else(|_| "moto_server".into());
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(&program)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(e) => {
                let message = format!(
                    "{test}: no S3-compatible server: cannot run `{program}` ({e}); install one \
                     with `pip install 'moto[server]'` or set ARROW_SHARDS_MOTO_SERVER"
                );
                assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
                eprintln!("skipped: {message}");
                return None;
            }
        };
        let moto = Moto {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            // create the bucket (moto accepts unsigned requests); retried until the server is up
            if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) {
                let request = format!(
                    "PUT /{BUCKET} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n\
                     Connection: close\r\n\r\n"
                );
                let mut response = String::new();
                if stream.write_all(request.as_bytes()).is_ok()
                    && stream.read_to_string(&mut response).is_ok()
                    && response.starts_with("HTTP/1.1 200")
                {
                    return Some(moto);
                }
            }
            assert!(
                Instant::now() < deadline,
                "moto_server did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn store(&self) -> Arc<dyn ObjectStore> {
        store_at(&self.endpoint)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The bucket of the S3-compatible server at `endpoint`, retrying little (a stopped server
/// fails fast).
fn store_at(endpoint: &str) -> Arc<dyn ObjectStore> {
    let store = AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_bucket_name(BUCKET)
        .with_region("us-east-1")
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .with_retry(RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: 1,
            retry_timeout: Duration::from_secs(5),
        })
        .build()
        .unwrap();
    Arc::new(store)
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.stop();
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Every object under `prefix`.
fn objects(store: &Arc<dyn ObjectStore>, prefix: &str) -> Vec<String> {
    let prefix = ObjectPath::from(prefix);
    let mut listed: Vec<String> = runtime()
        .block_on(store.list(Some(&prefix)).try_collect::<Vec<_>>())
        .unwrap()
        .into_iter()
        .map(|meta| meta.location.to_string())
        .collect();
    listed.sort();
    listed
}

/// Writes partitions 0..parts, partition `p` holding `rows(p)` rows; returns the batches and
/// their segments.
fn spill(
    storage: &Arc<dyn SpillStorage>,
    parts: u32,
    rows: impl Fn(u32) -> usize,
) -> Result<(Vec<RecordBatch>, Vec<SegmentRef>), SpillError> {
    let batches: Vec<RecordBatch> = (0..parts)
        .map(|p| ints_and_strings(i64::from(p) * 1_000_000, rows(p)))
        .collect();
    let mut writer = run_writer(storage, batches[0].schema(), SpillOptions::default());
    for (p, batch) in batches.iter().enumerate() {
        writer.append(p as u32, std::slice::from_ref(batch))?;
    }
    Ok((batches, writer.finish()?))
}

/// The checks every store gets: a run of a small and a multi-part large segment, each read
/// back once; objects deleted with their last segment and at close.
fn round_trip(store: Arc<dyn ObjectStore>, base: &str) {
    let instance = ObjectStoreSpill::create(Arc::clone(&store), base, "runs").unwrap();
    let prefix = instance.prefix().to_string();
    let storage: Arc<dyn SpillStorage> = instance;
    // partition 1 encodes to ~12 MiB: three parts of a multipart upload
    let (batches, segments) = spill(&storage, 3, |p| if p == 1 { 700_000 } else { 1000 }).unwrap();
    assert_eq!(segments.len(), 3);
    assert!(segments[1].len() > 10 << 20, "{}", segments[1].len());
    let run = segments[0].path().to_string_lossy().into_owned();
    assert!(run.starts_with(&format!("{base}/{prefix}/")), "{run}");
    assert_eq!(
        objects(&store, &prefix),
        [
            format!("{prefix}/00000000.run"),
            format!("{prefix}/arrow-shards-spill.marker")
        ]
    );
    for (segment, batch) in segments.iter().zip(&batches) {
        assert_eq!(segment.read().unwrap(), vec![batch.clone()]);
    }
    let metrics = storage.metrics();
    assert_eq!(
        (metrics.runs, metrics.segments, metrics.segments_read),
        (1, 3, 3)
    );
    assert_eq!(metrics.files, 1);
    assert!(metrics.bytes_on_disk > 10 << 20);

    drop(segments);
    assert_eq!(storage.metrics().files, 0);
    assert_eq!(storage.metrics().bytes_on_disk, 0);
    storage.close().unwrap();
    assert!(
        objects(&store, &prefix).is_empty(),
        "{:?}",
        objects(&store, &prefix)
    );
    assert!(objects(&store, "runs").is_empty());
}

#[test]
fn in_memory_store_round_trip_and_cleanup() {
    round_trip(Arc::new(InMemory::new()), "memory://spill");
}

#[test]
fn s3_round_trip_and_cleanup() {
    let Some(moto) = Moto::start("s3_round_trip_and_cleanup") else {
        return;
    };
    round_trip(moto.store(), &format!("s3://{BUCKET}"));
}

#[test]
fn s3_corrupt_object_is_detected_by_the_checksum() {
    let Some(moto) = Moto::start("s3_corrupt_object_is_detected_by_the_checksum") else {
        return;
    };
    let store = moto.store();
    let storage: Arc<dyn SpillStorage> =
        ObjectStoreSpill::create(Arc::clone(&store), "s3://arrow-shards", "runs").unwrap();
    let (batches, segments) = spill(&storage, 2, |_| 5000).unwrap();
    // flip one byte inside partition 1's payload, in the object itself
    let url = segments[1].path().to_string_lossy().into_owned();
    let path = ObjectPath::from(url.strip_prefix("s3://arrow-shards/").unwrap());
    let rt = runtime();
    let mut bytes = rt
        .block_on(async { store.get(&path).await.unwrap().bytes().await })
        .unwrap()
        .to_vec();
    let at = (segments[1].offset() + segments[1].len() / 2) as usize;
    bytes[at] ^= 0x40;
    rt.block_on(store.put(&path, PutPayload::from(bytes)))
        .unwrap();

    let error = segments[1].read().unwrap_err();
    assert!(
        matches!(&error, SpillError::Corrupt { partition: 1, .. }),
        "{error}"
    );
    assert!(error.to_string().contains(&url), "{error}");
    // the other segment of the run still reads
    assert_eq!(segments[0].read().unwrap(), vec![batches[0].clone()]);
}

#[test]
fn s3_server_stopped_mid_run_is_a_clear_error_and_loses_nothing() {
    let Some(mut moto) =
        Moto::start("s3_server_stopped_mid_run_is_a_clear_error_and_loses_nothing")
    else {
        return;
    };
    let storage: Arc<dyn SpillStorage> =
        ObjectStoreSpill::create(moto.store(), "s3://arrow-shards", "runs").unwrap();
    let batch = ints_and_strings(0, 700_000); // more than one part
    let mut writer = run_writer(&storage, batch.schema(), SpillOptions::default());
    writer
        .append(0, std::slice::from_ref(&batch))
        .unwrap_or_else(|e| panic!("{e}"));
    moto.stop();
    let error = writer
        .append(1, std::slice::from_ref(&batch))
        .and_then(|()| writer.finish().map(drop))
        .unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, SpillError::Io { .. }), "{message}");
    assert!(
        message.contains("s3://arrow-shards/runs/arrow-shards-spill-"),
        "{message}"
    );
    assert!(message.contains(".run"), "{message}");
    // nothing was acknowledged by the store, and the caller still holds its batch: it spills
    // it elsewhere and reads it back
    assert_eq!(storage.metrics().runs, 0);
    let root = tempfile::tempdir().unwrap();
    let local = SpillDir::create(root.path()).unwrap();
    let mut writer = local.run_writer(batch.schema(), SpillOptions::default());
    writer.append(0, std::slice::from_ref(&batch)).unwrap();
    let segments = writer.finish().unwrap();
    assert_eq!(segments[0].read().unwrap(), vec![batch]);
    // closing with the server gone names the prefix
    let error = storage.close().unwrap_err();
    assert!(
        error.to_string().contains("s3://arrow-shards/runs/"),
        "{error}"
    );
}

#[test]
fn s3_objects_of_a_killed_process_are_removed_by_the_next_create() {
    let Some(moto) = Moto::start("s3_objects_of_a_killed_process_are_removed_by_the_next_create")
    else {
        return;
    };
    let store = moto.store();
    // a process that is gone: its pid no longer exists
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let pidns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let pidns = pidns.to_str().unwrap();
    let pidns = &pidns["pid:[".len()..pidns.len() - 1];
    let marker = format!(
        "arrow-shards-spill-object 1\nboot {}\npid {dead}\npidns {pidns}\n",
        boot.trim()
    );
    let dead_prefix = format!("runs/arrow-shards-spill-{dead}-0-0");
    // and one of a live process: this one
    let live = ObjectStoreSpill::create(Arc::clone(&store), "s3://arrow-shards", "runs").unwrap();
    let rt = runtime();
    rt.block_on(async {
        let put = |path: String, bytes: Vec<u8>| {
            let store = Arc::clone(&store);
            async move {
                store
                    .put(&ObjectPath::from(path), PutPayload::from(bytes))
                    .await
            }
        };
        put(
            format!("{dead_prefix}/arrow-shards-spill.marker"),
            marker.into_bytes(),
        )
        .await?;
        put(format!("{dead_prefix}/00000000.run"), vec![1; 100]).await?;
        put(format!("{dead_prefix}/00000001.run"), vec![2; 100]).await?;
        // not ours: no marker
        put("runs/arrow-shards-spill-x/00000000.run".into(), vec![3; 10]).await
    })
    .unwrap();

    let next = ObjectStoreSpill::create(Arc::clone(&store), "s3://arrow-shards", "runs").unwrap();
    let report = next.sweep_report();
    let url = |prefix: &str| std::path::PathBuf::from(format!("s3://arrow-shards/{prefix}"));
    assert_eq!(report.removed, [url(&dead_prefix)]);
    assert_eq!(report.live, [url(live.prefix().as_ref())]);
    assert_eq!(report.skipped, [url("runs/arrow-shards-spill-x")]);
    assert!(objects(&store, &dead_prefix).is_empty());
    assert_eq!(objects(&store, "runs/arrow-shards-spill-x").len(), 1);
    drop(live);
    drop(next);
    assert_eq!(
        objects(&store, "runs"),
        ["runs/arrow-shards-spill-x/00000000.run"]
    );
}

/// The child of `s3_a_killed_writers_objects_are_removed_by_the_next_create`: writes a run to
/// the server at `ARROW_SHARDS_TEST_S3_ENDPOINT`, says `ready <prefix>`, then waits to be killed.
#[test]
#[ignore = "run by s3_a_killed_writers_objects_are_removed_by_the_next_create in a child process"]
fn child_writes_a_run_and_waits_to_be_killed() {
    let Ok(endpoint) = std::env::var("ARROW_SHARDS_TEST_S3_ENDPOINT") else {
        return;
    };
    let storage =
        ObjectStoreSpill::create(store_at(&endpoint), "s3://arrow-shards", "killed").unwrap();
    let prefix = storage.prefix().to_string();
    let storage: Arc<dyn SpillStorage> = storage;
    let (_, segments) = spill(&storage, 2, |_| 1000).unwrap();
    println!("ready {prefix}");
    std::thread::sleep(Duration::from_secs(120));
    drop(segments);
}

#[test]
fn s3_a_killed_writers_objects_are_removed_by_the_next_create() {
    let Some(moto) = Moto::start("s3_a_killed_writers_objects_are_removed_by_the_next_create")
    else {
        return;
    };
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "object_store::child_writes_a_run_and_waits_to_be_killed",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ARROW_SHARDS_TEST_S3_ENDPOINT", &moto.endpoint)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut output = std::io::BufReader::new(child.stdout.take().unwrap());
    let prefix = loop {
        let mut line = String::new();
        let read = std::io::BufRead::read_line(&mut output, &mut line).unwrap();
        assert!(read > 0, "the child ended before writing its run");
        // libtest prints `test <name> ... ` before the test's own output
        if let Some((_, prefix)) = line.trim().split_once("ready ") {
            break prefix.to_string();
        }
    };
    child.kill().unwrap(); // SIGKILL: no destructor runs
    child.wait().unwrap();
    let store = moto.store();
    assert_eq!(
        objects(&store, &prefix),
        [
            format!("{prefix}/00000000.run"),
            format!("{prefix}/arrow-shards-spill.marker")
        ]
    );
    let next = ObjectStoreSpill::create(Arc::clone(&store), "s3://arrow-shards", "killed").unwrap();
    let url = std::path::PathBuf::from(format!("s3://arrow-shards/{prefix}"));
    assert_eq!(next.sweep_report().removed, [url]);
    assert!(objects(&store, &prefix).is_empty());
}
