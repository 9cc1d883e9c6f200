//! Running one `.slt` file in one [`Mode`] through `datafusion-sqllogictest`'s `DataFusion`
//! engine, keeping every record's outcome (its own bin stops at a file-level error list).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_shards_datafusion::{ShardRepartitionOptions, with_shard_repartition};
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::SessionContext;
use datafusion_spark::SessionStateBuilderSpark;
use datafusion_sqllogictest::{
    DataFusion, TestContext, TestFile, df_value_validator, is_spark_path, setup_scratch_dir,
    value_normalizer,
};
use sqllogictest::{Record, TestErrorKind, parse_file, strict_column_validator};

/// The label `datafusion-sqllogictest`'s bin gives its `DataFusion` runner: `onlyif` and
/// `skipif` conditions in the files name it.
const ENGINE_LABEL: &str = "Datafusion";

/// Which session a file runs in.
#[derive(Debug, Clone)]
pub(crate) enum Mode {
    /// The test context as `datafusion-sqllogictest` builds it.
    Plain,
    /// The same context with `with_shard_repartition(options)` added to its session.
    Rule(ShardRepartitionOptions),
}

impl Mode {
    /// The session this mode runs `test_ctx`'s file in: for [`Mode::Rule`], the context's own
    /// state (its tables, functions and config as the file's setup left them) rebuilt with the
    /// rule, put back in place so the engine's clones of the context see it.
    ///
    /// Rebuilding is not free of side effects, and both are undone here so that only the rule
    /// differs: `new_from_existing` turns `create_default_catalog_and_schema` off (the catalog
    /// exists), which `SHOW ALL` and the engine's config-unchanged check see; and it
    /// re-registers functions in hash-map order, so where two share a name (Spark's
    /// `array_contains` and DataFusion's alias of `array_has`) either may win: the Spark ones
    /// are registered again, last, as `TestContext` does for `spark/` files.
    fn apply(&self, ctx: &SessionContext, relative_path: &Path) {
        let Mode::Rule(options) = self else {
            return;
        };
        let existing = ctx.state();
        let create_default = existing
            .config()
            .options()
            .catalog
            .create_default_catalog_and_schema;
        let mut builder = SessionStateBuilder::new_from_existing(existing);
        if is_spark_path(relative_path) {
            builder = builder.with_spark_features();
        }
        let mut state = with_shard_repartition(builder, options.clone()).build();
        state
            .config_mut()
            .options_mut()
            .catalog
            .create_default_catalog_and_schema = create_default;
        *ctx.state_ref().write() = state;
    }
}

/// How a run of one file ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunEnd {
    /// Every record was run.
    Finished,
    /// `TestContext` declines the file (a feature this build leaves out).
    Skipped,
    /// The file did not parse or its scratch directory could not be made.
    Setup(String),
    /// The run did not finish within the timeout (a hang is a finding, not a slow test).
    TimedOut,
    /// The run panicked.
    Panicked(String),
}

/// One record's outcome.
#[derive(Debug, Clone)]
pub(crate) struct RecordOutcome {
    /// `file:line` of the record (an included `.slt.part` names its own file).
    pub(crate) location: String,
    /// The record's SQL, empty for records without one.
    pub(crate) sql: String,
    /// `None` if the record passed, else the runner's error.
    pub(crate) error: Option<RecordError>,
}

/// A failed record.
#[derive(Debug, Clone)]
pub(crate) struct RecordError {
    /// The runner's message (with the expected-actual diff).
    pub(crate) message: String,
    /// For a result mismatch, the expected and the actual rows as text.
    pub(crate) mismatch: Option<(String, String)>,
}

/// A run of one file in one mode.
#[derive(Debug, Clone)]
pub(crate) struct FileRun {
    pub(crate) end: RunEnd,
    /// The outcome of each record run, in file order (records after a `halt` are not run).
    pub(crate) records: Vec<RecordOutcome>,
    /// The engine's complaint that the file left the session's config changed.
    pub(crate) config_changed: Option<String>,
}

impl FileRun {
    fn ended(end: RunEnd) -> Self {
        Self {
            end,
            records: Vec::new(),
            config_changed: None,
        }
    }

    /// Whether the file passed: finished, every record passed, config left as it was.
    pub(crate) fn passed(&self) -> bool {
        self.end == RunEnd::Finished
            && self.config_changed.is_none()
            && self.records.iter().all(|r| r.error.is_none())
    }

    /// Records that failed.
    pub(crate) fn failures(&self) -> usize {
        self.records.iter().filter(|r| r.error.is_some()).count()
    }
}

/// Runs `file` (a path under `test_files/`, relative to the working directory) in `mode`, in
/// a task of its own so that a panic or a hang is reported as the file's outcome.
pub(crate) async fn run_file(file: &Path, mode: Mode, timeout: Duration) -> FileRun {
    let file = file.to_path_buf();
    let records = Arc::new(Mutex::new(Vec::new()));
    let task = tokio::spawn(run_records(file, mode, Arc::clone(&records)));
    let abort = task.abort_handle();
    let end = match tokio::time::timeout(timeout, task).await {
        Ok(Ok(run)) => return run,
        Ok(Err(join)) if join.is_panic() => RunEnd::Panicked(panic_message(join.into_panic())),
        Ok(Err(join)) => RunEnd::Panicked(join.to_string()),
        Err(_) => {
            abort.abort();
            RunEnd::TimedOut
        }
    };
    // the records run before the panic or the hang
    let records = std::mem::take(&mut *records.lock().unwrap_or_else(|e| e.into_inner()));
    FileRun {
        end,
        records,
        config_changed: None,
    }
}

async fn run_records(
    file: PathBuf,
    mode: Mode,
    progress: Arc<Mutex<Vec<RecordOutcome>>>,
) -> FileRun {
    let test_file = TestFile::new(file, &[crate::TEST_DIRECTORY]);
    let relative_path = test_file.relative_path.clone();
    let Some(test_ctx) = TestContext::try_new_for_test_file(&relative_path).await else {
        return FileRun::ended(RunEnd::Skipped);
    };
    mode.apply(test_ctx.session_ctx(), &relative_path);
    if let Err(e) = setup_scratch_dir(&relative_path) {
        return FileRun::ended(RunEnd::Setup(format!("scratch directory: {e}")));
    }
    let path = match test_file.path.canonicalize() {
        Ok(path) => path,
        Err(e) => return FileRun::ended(RunEnd::Setup(format!("{e}"))),
    };
    let records = match parse_file::<<DataFusion as sqllogictest::AsyncDB>::ColumnType>(&path) {
        Ok(records) => records,
        Err(e) => return FileRun::ended(RunEnd::Setup(format!("parse: {e}"))),
    };

    let config_change_errors = Arc::new(Mutex::new(Vec::new()));
    let mut runner = sqllogictest::Runner::new(|| async {
        Ok(DataFusion::new(
            test_ctx.session_ctx().clone(),
            relative_path.clone(),
            indicatif::ProgressBar::hidden(),
        )
        .with_config_change_errors(Arc::clone(&config_change_errors)))
    });
    runner.add_label(ENGINE_LABEL);
    runner.with_column_validator(strict_column_validator);
    runner.with_normalizer(value_normalizer);
    runner.with_validator(df_value_validator);

    for record in records {
        let (location, sql) = match &record {
            Record::Halt { .. } => break,
            Record::Statement { loc, sql, .. } | Record::Query { loc, sql, .. } => {
                (short_location(loc.file(), loc.line()), sql.clone())
            }
            _ => (String::new(), String::new()),
        };
        let error = runner.run_async(record).await.err().map(|e| {
            let mismatch = match e.kind() {
                TestErrorKind::QueryResultMismatch {
                    expected, actual, ..
                } => Some((expected, actual)),
                _ => None,
            };
            RecordError {
                message: e.to_string(),
                mismatch,
            }
        });
        // every record, control records too, so that two runs of a file align by index
        progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(RecordOutcome {
                location,
                sql,
                error,
            });
    }
    runner.shutdown_async().await;
    let config_changed = {
        let errors = config_change_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        (!errors.is_empty()).then(|| errors.join("\n"))
    };
    let records = std::mem::take(&mut *progress.lock().unwrap_or_else(|e| e.into_inner()));
    FileRun {
        end: RunEnd::Finished,
        records,
        config_changed,
    }
}

/// `file:line` with the file relative to `test_files/`.
fn short_location(file: &str, line: u32) -> String {
    let file = file
        .rsplit_once(crate::TEST_DIRECTORY)
        .map_or(file, |(_, relative)| relative);
    format!("{file}:{line}")
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}
