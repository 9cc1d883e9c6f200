//! A DataFusion user's program: a DataFusion query's batches go through the buffer and back.
//! It compiles only if DataFusion's `RecordBatch` and the buffer's are one type (one arrow).

use std::sync::Arc;

use arrow_shards::ShardBuffer;
use datafusion::arrow::array::{Int64Array, RecordBatch};
use datafusion::prelude::SessionContext;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = SessionContext::new();
    let keys = Int64Array::from_iter_values(0..1000);
    ctx.register_batch(
        "t",
        RecordBatch::try_from_iter([("k", Arc::new(keys) as _)])?,
    )?;
    let batches = ctx
        .sql("SELECT k FROM t WHERE k % 2 = 0")
        .await?
        .collect()
        .await?;

    let buffer = ShardBuffer::builder(batches[0].schema(), 4).build()?;
    for batch in batches {
        let ids: Vec<u32> = (0..batch.num_rows() as u32).map(|i| i % 4).collect();
        buffer.write_partitioned(batch, &ids).await?;
    }
    buffer.finish()?;
    let mut rows = 0;
    for partition in 0..4 {
        let back: RecordBatch = buffer.read(partition)?.concat()?;
        rows += back.num_rows();
    }
    buffer.close_async().await?;
    assert_eq!(rows, 500);
    println!("one arrow: {rows} rows from DataFusion through arrow-shards and back");
    Ok(())
}
