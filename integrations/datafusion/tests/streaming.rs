//! The streaming exchange (the default mode): an output yields batches while its inputs are
//! still running, an input's error reaches every waiting output, and an output dropped early
//! does not stall the others. The input is a channel the test writes to (a gate), so nothing
//! here depends on timing.

use std::sync::{Arc, Mutex};

use arrow_shards_datafusion::ShardRepartitionExec;
use datafusion::arrow::array::{Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{ExecutionPlan, Partitioning, execute_stream_partitioned};
use futures::StreamExt;
use tokio::sync::mpsc;

/// One input partition fed by the test through a channel.
#[derive(Debug)]
struct Gate {
    schema: SchemaRef,
    rx: Mutex<Option<mpsc::UnboundedReceiver<Result<RecordBatch>>>>,
}

impl PartitionStream for Gate {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let rx = self.rx.lock().unwrap().take().expect("executed once");
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            stream,
        ))
    }
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]))
}

fn batch(first: i64, rows: i64) -> RecordBatch {
    let k = Int64Array::from_iter_values(first..first + rows);
    RecordBatch::try_new(schema(), vec![Arc::new(k)]).unwrap()
}

/// An exchange (round robin over `outputs`) over one gated input, and the gate's sender.
fn gated(
    outputs: usize,
) -> (
    Arc<ShardRepartitionExec>,
    mpsc::UnboundedSender<Result<RecordBatch>>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let gate = Gate {
        schema: schema(),
        rx: Mutex::new(Some(rx)),
    };
    let input: Arc<dyn ExecutionPlan> = Arc::new(
        StreamingTableExec::try_new(schema(), vec![Arc::new(gate)], None, vec![], false, None)
            .unwrap(),
    );
    let exec =
        ShardRepartitionExec::try_new(input, Partitioning::RoundRobinBatch(outputs)).unwrap();
    (Arc::new(exec), tx)
}

/// The rows `stream` yields until its end.
async fn rows_left(stream: &mut SendableRecordBatchStream) -> usize {
    let mut rows = 0;
    while let Some(batch) = stream.next().await {
        rows += batch.unwrap().num_rows();
    }
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_yields_before_its_inputs_finish() {
    let (exec, tx) = gated(2);
    let mut streams =
        execute_stream_partitioned(exec.clone(), Arc::new(TaskContext::default())).unwrap();
    // A batch of the compaction target or more is stored whole: output 0 can take it at once.
    tx.send(Ok(batch(0, 10_000))).unwrap();
    let first = streams[0].next().await.unwrap().unwrap();
    assert_eq!(
        first.num_rows(),
        10_000,
        "a batch while the input is still open"
    );
    tx.send(Ok(batch(10_000, 10_000))).unwrap();
    tx.send(Ok(batch(20_000, 5))).unwrap();
    drop(tx); // the input ends: the buffer is finished
    let rest: usize = rows_left(&mut streams[0]).await;
    assert_eq!(rest, 5);
    let other: usize = rows_left(&mut streams[1]).await;
    assert_eq!(other, 10_000);
    drop(streams);
    exec.wait_closed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_error_reaches_every_waiting_output() {
    let (exec, tx) = gated(3);
    let streams =
        execute_stream_partitioned(exec.clone(), Arc::new(TaskContext::default())).unwrap();
    let waiting: Vec<_> = streams
        .into_iter()
        .map(|mut s| tokio::spawn(async move { s.next().await.map(|r| r.map(|b| b.num_rows())) }))
        .collect();
    tx.send(Ok(batch(0, 10))).unwrap();
    tx.send(Err(DataFusionError::Execution("the input broke".into())))
        .unwrap();
    for w in waiting {
        let error = w.await.unwrap().expect("an item").unwrap_err();
        assert!(error.to_string().contains("the input broke"), "{error}");
    }
    exec.wait_closed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_dropped_early_does_not_stall_the_others() {
    let (exec, tx) = gated(2);
    let mut streams =
        execute_stream_partitioned(exec.clone(), Arc::new(TaskContext::default())).unwrap();
    tx.send(Ok(batch(0, 10_000))).unwrap();
    tx.send(Ok(batch(10_000, 10_000))).unwrap();
    // Output 1 takes one batch and goes (a LIMIT above it); output 0 reads on.
    let one = streams[1].next().await.unwrap().unwrap();
    assert_eq!(one.num_rows(), 10_000);
    drop(streams.remove(1));
    for i in 2..10 {
        tx.send(Ok(batch(i * 10_000, 10_000))).unwrap();
    }
    drop(tx);
    let rows: usize = rows_left(&mut streams[0]).await;
    assert_eq!(rows, 50_000);
    drop(streams);
    exec.wait_closed().await;
}
