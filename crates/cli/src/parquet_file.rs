//! One parquet output file, its row groups' columns encoded on the calling thread or, when
//! output threads are spare, on several (issue #44, item 3).
//!
//! [`ParquetFile`] does what the parquet crate's `ArrowWriter` does for the CLI (row groups of
//! at most `--row-group-rows` rows, a row group cut on request, the footer at
//! [`close`](ParquetFile::close)) with the lower-level parts `ArrowWriter` is made of, the way
//! the parquet crate's `ArrowColumnWriter` docs and DataFusion's parquet sink encode in
//! parallel (parquet 60.1):
//!
//! 1. `ArrowWriter::into_serialized_writer` gives the file writer and an
//!    `ArrowRowGroupWriterFactory` (the Arrow schema in the footer as `ArrowWriter` writes it);
//! 2. a row group is one `ArrowColumnWriter` per leaf column
//!    (`ArrowRowGroupWriterFactory::create_column_writers`);
//! 3. each batch's top-level columns are split into their leaves (`compute_leaves`) and written
//!    to their column writers;
//! 4. a cut closes every column writer into an `ArrowColumnChunk` (its last data page and its
//!    dictionary page compressed), and the chunks are appended to the file's next row group in
//!    column order (`ArrowColumnChunk::append_to_row_group`).
//!
//! Steps 3 and 4 go column by column: on the calling thread alone, or, when output threads are
//! idle ([`crate::spare_threads`]), on the calling thread and the borrowed ones as scoped
//! threads, each taking the next column (a top-level field for step 3, a leaf column for step
//! 4) until none is left. A column writer's output depends only on what it is given, in order,
//! never on the thread that runs it, so a file's bytes are the same whichever way it was
//! encoded, and the same as `ArrowWriter`'s (tested below). Helpers are spawned per step (a
//! thread's start costs microseconds, a step of [`MIN_HELPED_ROWS`] rows or more milliseconds
//! of encoding; smaller steps get none), so nothing is kept running between steps.
//!
//! Memory: the column writers hold what `ArrowWriter`'s would, counted the same way
//! ([`ParquetFile::memory_size`], `ArrowWriter::memory_size`'s sum); the chunks of a cut are
//! held until appended, as `ArrowWriter::flush` holds them: the open row group's charge stays
//! until the cut has finished ([`crate::read_back`]). Each helper compresses one page at a time,
//! like the thread it was lent by, whose share of the codec charge stays for as long as any
//! output thread runs ([`crate::codec_memory`]).
//!
//! Not supported, as the CLI sets neither: a row group limit in bytes
//! (`max_row_group_bytes`) and content-defined chunking; [`ParquetFile::try_new`] refuses them.
//!
//! # Locking
//! A step with helpers shares one mutex over its queue of columns, held only to take the next
//! one, never while encoding; each column writer is owned by one thread at a time.

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_writer::{
    ArrowColumnChunk, ArrowColumnWriter, ArrowRowGroupWriterFactory, compute_leaves,
};
use parquet::errors::{ParquetError, Result};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;

use crate::spare_threads::SpareThreads;

/// Batches, and row groups cut, of fewer rows are encoded on the calling thread alone: their
/// columns take about as long to encode as a helper thread takes to start.
const MIN_HELPED_ROWS: usize = 1024;

/// A parquet file being written: create, `write` batches, `flush` to cut a row group, `close`.
pub(crate) struct ParquetFile {
    file: SerializedFileWriter<File>,
    factory: ArrowRowGroupWriterFactory,
    schema: SchemaRef,
    /// How many leaf columns each top-level field has, in order.
    leaves: Vec<usize>,
    /// The open row group, if any.
    open: Option<OpenRowGroup>,
    /// Most rows per row group.
    max_rows: usize,
    spare: Arc<SpareThreads>,
}

/// A row group's column writers, one per leaf column, and its rows so far.
struct OpenRowGroup {
    columns: Vec<ArrowColumnWriter>,
    rows: usize,
}

impl ParquetFile {
    /// A new file writing to `file`; its steps borrow helpers from `spare`.
    pub(crate) fn try_new(
        file: File,
        schema: SchemaRef,
        props: WriterProperties,
        spare: Arc<SpareThreads>,
    ) -> Result<Self> {
        if props.max_row_group_bytes().is_some() || props.content_defined_chunking().is_some() {
            return Err(ParquetError::General(
                "row groups limited in bytes and content-defined chunking are not supported"
                    .to_owned(),
            ));
        }
        let max_rows = props.max_row_group_row_count().unwrap_or(usize::MAX).max(1);
        let (file, factory) = ArrowWriter::try_new(file, SchemaRef::clone(&schema), Some(props))?
            .into_serialized_writer()?;
        let descriptor = file.schema_descr();
        let mut leaves = vec![0; schema.fields().len()];
        for leaf in 0..descriptor.num_columns() {
            leaves[descriptor.get_column_root_idx(leaf)] += 1;
        }
        Ok(ParquetFile {
            file,
            factory,
            schema,
            leaves,
            open: None,
            max_rows,
            spare,
        })
    }

    /// Encodes `batch` into the open row group (opened if none is), cutting row groups at the
    /// row limit as `ArrowWriter::write` does.
    pub(crate) fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let mut offset = 0;
        while offset < batch.num_rows() {
            let open = match &mut self.open {
                Some(open) => open,
                none => none.insert(OpenRowGroup {
                    columns: self
                        .factory
                        .create_column_writers(self.file.flushed_row_groups().len())?,
                    rows: 0,
                }),
            };
            let take = (self.max_rows - open.rows).min(batch.num_rows() - offset);
            let piece = if take == batch.num_rows() {
                batch.clone()
            } else {
                batch.slice(offset, take)
            };
            write_columns(&self.schema, &self.leaves, &self.spare, open, &piece)?;
            offset += take;
            if open.rows >= self.max_rows {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// Cuts the open row group: every column closed, appended in order, written to the file.
    pub(crate) fn flush(&mut self) -> Result<()> {
        let Some(open) = self.open.take() else {
            return Ok(());
        };
        let mut row_group = self.file.next_row_group()?;
        let helpers = self.spare.borrow(wanted(open.rows, open.columns.len()));
        let chunks: Vec<ArrowColumnChunk> =
            on_helpers(helpers.count(), open.columns, ArrowColumnWriter::close)?;
        drop(helpers);
        for chunk in chunks {
            chunk.append_to_row_group(&mut row_group)?;
        }
        row_group.close()?;
        Ok(())
    }

    /// Cuts the open row group and writes the footer.
    pub(crate) fn close(mut self) -> Result<()> {
        self.flush()?;
        self.file.close().map(drop)
    }

    /// Bytes written to the file so far.
    pub(crate) fn bytes_written(&self) -> usize {
        self.file.bytes_written()
    }

    /// Rows in the open row group.
    pub(crate) fn in_progress_rows(&self) -> usize {
        self.open.as_ref().map_or(0, |open| open.rows)
    }

    /// The open row group's estimated size once encoded (`ArrowWriter::in_progress_size`).
    pub(crate) fn in_progress_size(&self) -> usize {
        self.columns()
            .map(ArrowColumnWriter::get_estimated_total_bytes)
            .sum()
    }

    /// Bytes the open row group's column writers hold (`ArrowWriter::memory_size`).
    pub(crate) fn memory_size(&self) -> usize {
        self.columns().map(ArrowColumnWriter::memory_size).sum()
    }

    fn columns(&self) -> impl Iterator<Item = &ArrowColumnWriter> {
        self.open.iter().flat_map(|open| &open.columns)
    }
}

/// Writes `batch`'s columns to `open`'s column writers, a top-level field per task of the
/// queue (its leaves in order), with helpers borrowed from `spare`.
fn write_columns(
    schema: &SchemaRef,
    leaves: &[usize],
    spare: &SpareThreads,
    open: &mut OpenRowGroup,
    batch: &RecordBatch,
) -> Result<()> {
    let mut fields = Vec::with_capacity(leaves.len());
    let mut rest = open.columns.as_mut_slice();
    for ((field, array), &count) in schema.fields().iter().zip(batch.columns()).zip(leaves) {
        let (writers, after) = rest.split_at_mut(count);
        fields.push((field, array, writers));
        rest = after;
    }
    let helpers = spare.borrow(wanted(batch.num_rows(), fields.len()));
    on_helpers(helpers.count(), fields, |(field, array, writers)| {
        for (writer, leaf) in writers.iter_mut().zip(compute_leaves(field, array)?) {
            writer.write(&leaf)?;
        }
        Ok(())
    })?;
    open.rows += batch.num_rows();
    Ok(())
}

/// Helpers a step over `rows` rows and `tasks` columns may use: one per column beyond the
/// calling thread's, none below [`MIN_HELPED_ROWS`] rows.
fn wanted(rows: usize, tasks: usize) -> usize {
    if rows >= MIN_HELPED_ROWS {
        tasks.saturating_sub(1)
    } else {
        0
    }
}

/// `work` applied to every task, on the calling thread and `helpers` scoped threads, each
/// taking the next task until none is left (or one has failed); the results in task order, or
/// the first error in task order. A helper's panic is an error.
fn on_helpers<T: Send, R: Send>(
    helpers: usize,
    tasks: Vec<T>,
    work: impl Fn(T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    if helpers == 0 {
        return tasks.into_iter().map(work).collect();
    }
    let queue = Mutex::new(tasks.into_iter().enumerate());
    let failed = AtomicBool::new(false);
    let drain = || {
        let mut done = Vec::new();
        while !failed.load(Ordering::Relaxed) {
            // The lock guards only `next`; a panic elsewhere leaves the queue whole.
            let next = queue.lock().unwrap_or_else(PoisonError::into_inner).next();
            let Some((index, task)) = next else { break };
            let result = work(task);
            if result.is_err() {
                failed.store(true, Ordering::Relaxed);
            }
            done.push((index, result));
        }
        done
    };
    let mut done = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..helpers).map(|_| scope.spawn(drain)).collect();
        let mut done = drain();
        for handle in handles {
            match handle.join() {
                Ok(theirs) => done.extend(theirs),
                Err(_) => done.push((
                    usize::MAX,
                    Err(ParquetError::General(
                        "a parquet encoding thread panicked".to_owned(),
                    )),
                )),
            }
        }
        done
    });
    done.sort_by_key(|(index, _)| *index);
    done.into_iter().map(|(_, result)| result).collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array};
    use arrow_schema::{DataType, Field, Schema};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    use super::*;

    fn props(row_group_rows: usize) -> WriterProperties {
        WriterProperties::builder()
            .set_max_row_group_row_count(Some(row_group_rows))
            .set_data_page_size_limit(16 << 10)
            .build()
    }

    /// Writes every batch of `batches` to `writer`, a row group cut after every third.
    fn write_cutting<W>(
        writer: &mut W,
        batches: &[RecordBatch],
        write: fn(&mut W, &RecordBatch) -> Result<()>,
        cut: fn(&mut W) -> Result<()>,
    ) {
        for (i, batch) in batches.iter().enumerate() {
            write(writer, batch).unwrap();
            if i % 3 == 2 {
                cut(writer).unwrap();
            }
        }
    }

    /// The file's bytes written by `ArrowWriter`.
    fn arrow_writer_bytes(batches: &[RecordBatch], row_group_rows: usize) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("arrow-writer.parquet");
        let mut writer = ArrowWriter::try_new(
            File::create(&path).unwrap(),
            batches[0].schema(),
            Some(props(row_group_rows)),
        )
        .unwrap();
        write_cutting(&mut writer, batches, ArrowWriter::write, ArrowWriter::flush);
        writer.close().unwrap();
        std::fs::read(path).unwrap()
    }

    /// The file's bytes written by a [`ParquetFile`] with `idle` threads to borrow.
    fn parquet_file_bytes(batches: &[RecordBatch], row_group_rows: usize, idle: usize) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("parquet-file.parquet");
        let spare = Arc::new(SpareThreads::with_idle(idle));
        let mut writer = ParquetFile::try_new(
            File::create(&path).unwrap(),
            batches[0].schema(),
            props(row_group_rows),
            Arc::clone(&spare),
        )
        .unwrap();
        write_cutting(&mut writer, batches, ParquetFile::write, ParquetFile::flush);
        writer.close().unwrap();
        assert_eq!(spare.helped() > 0, idle > 0, "helpers used iff lent");
        assert_eq!(spare.borrow(usize::MAX).count(), idle, "all given back");
        std::fs::read(path).unwrap()
    }

    /// Every type `gen all-types` makes (a dictionary, a list, a struct, nulls) and the
    /// lineitem fixture, in batches that split row groups and cuts between them: the same
    /// bytes as `ArrowWriter`'s, with and without helpers.
    #[test]
    fn files_are_the_same_bytes_as_arrow_writers_with_or_without_helpers() {
        let all_types = crate::r#gen::all_types::AllTypes::new(20_000, 3_000)
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/lineitem-sf0.01.parquet");
        let lineitem = ParquetRecordBatchReaderBuilder::try_new(File::open(fixture).unwrap())
            .unwrap()
            .with_batch_size(8192)
            .build()
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        for (name, batches) in [("all-types", &all_types), ("lineitem", &lineitem)] {
            let expected = arrow_writer_bytes(batches, 7_000);
            for idle in [0, 1, 3, 64] {
                assert!(
                    parquet_file_bytes(batches, 7_000, idle) == expected,
                    "{name} with {idle} idle threads"
                );
            }
        }
    }

    /// A column that fails to encode (a null in a non-nullable field) fails the write on any
    /// thread, and every borrowed thread is given back.
    #[test]
    fn a_failed_column_fails_the_write_and_gives_the_helpers_back() {
        let nullable: ArrayRef = Arc::new(Int64Array::from(vec![Some(1); 2048]));
        let holed: ArrayRef = Arc::new(Int64Array::from(
            (0..2048).map(|i| (i != 5).then_some(i)).collect::<Vec<_>>(),
        ));
        let batch = RecordBatch::try_from_iter([("a", nullable), ("b", holed)]).unwrap();
        let strict = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, false),
        ]));
        for idle in [0, 1] {
            let dir = tempfile::tempdir().unwrap();
            let spare = Arc::new(SpareThreads::with_idle(idle));
            let mut writer = ParquetFile::try_new(
                File::create(dir.path().join("f.parquet")).unwrap(),
                Arc::clone(&strict),
                props(1 << 20),
                Arc::clone(&spare),
            )
            .unwrap();
            assert!(writer.write(&batch).is_err(), "{idle} idle");
            assert_eq!(spare.borrow(usize::MAX).count(), idle);
        }
    }

    /// A step's results come back in task order, whichever thread ran them; a helper's panic
    /// is an error.
    #[test]
    fn steps_keep_task_order_and_report_panics() {
        let squares = on_helpers(3, (0..100u64).collect(), |i| Ok(i * i)).unwrap();
        assert_eq!(squares, (0..100u64).map(|i| i * i).collect::<Vec<_>>());
        let failed = on_helpers(2, (0..100u64).collect(), |i| {
            if i == 40 {
                Err(ParquetError::General(format!("task {i}")))
            } else {
                Ok(i)
            }
        });
        assert!(failed.unwrap_err().to_string().contains("task 40"));
        let main = std::thread::current().id();
        let panicked = on_helpers(1, (0..100u64).collect(), |i| {
            if std::thread::current().id() != main {
                panic!("helper panics at task {i}");
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
            Ok(i)
        });
        assert!(panicked.unwrap_err().to_string().contains("panicked"));
    }

    #[test]
    fn unsupported_row_group_settings_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        let props = WriterProperties::builder()
            .set_max_row_group_bytes(Some(1 << 20))
            .build();
        let file = File::create(dir.path().join("f.parquet")).unwrap();
        let refused = ParquetFile::try_new(file, schema, props, Arc::default());
        assert!(refused.is_err());
    }
}
