//! Many writers at once.

use std::sync::Arc;

use arrow_shards::ShardBuffer;

use crate::common::{assert_partition, schema, write_concurrently};

#[test]
fn twenty_writers_thousand_partitions_every_row_once() {
    let buffer = ShardBuffer::builder(schema(&[0, 1]), 1000).build().unwrap();
    let written = write_concurrently(&buffer, 7, 20, 2000, 5);
    buffer.finish().unwrap();
    for p in 0..1000 {
        assert_partition(&buffer.read(p).unwrap().concat().unwrap(), p, &written);
    }
    let metrics = buffer.close().unwrap();
    assert_eq!(
        metrics.batches_written,
        written
            .values()
            .flatten()
            .filter(|b| b.num_rows() > 0)
            .count() as u64
    );
    assert_eq!(metrics.partitions_read, 1000);
}

#[test]
fn async_writers_on_a_runtime_with_sealed_reads_in_between() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let schema = schema(&[2]);
    let buffer = ShardBuffer::builder(schema.clone(), 64)
        .with_memory_limit(256 << 20)
        .build()
        .unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = (0..16i64)
            .map(|w| {
                let (buffer, schema) = (buffer.clone(), schema.clone());
                tokio::spawn(async move {
                    use rand::SeedableRng;
                    let mut rng = rand::rngs::StdRng::seed_from_u64(w as u64);
                    for i in 0..200i64 {
                        let p = ((w * 31 + i) % 64) as u32;
                        let b = crate::common::batch(&schema, &mut rng, w, i, 3);
                        buffer.write(p, b).await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    let expected = |p: i64| {
        let writes = (0..16).flat_map(|w| (0..200).map(move |i| (w * 31 + i) % 64));
        3 * writes.filter(|q| *q == p).count()
    };
    // seal and read half while the rest stays open
    for p in 0..32 {
        buffer.seal(p).unwrap();
        let rows = buffer.read(p).unwrap().concat().unwrap().num_rows();
        assert_eq!(rows, expected(p as i64));
    }
    buffer.finish().unwrap();
    for p in 32..64 {
        let rows = buffer.read(p).unwrap().concat().unwrap().num_rows();
        assert_eq!(rows, expected(p as i64));
    }
    assert_eq!(Arc::strong_count(&buffer.memory_pool().clone()), 3);
    assert_eq!(buffer.close().unwrap().reserved, 0);
}
