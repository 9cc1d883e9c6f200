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

/// Producers on handles of their own scatter into the same partitions (their copies run at the
/// same time, each into its own open batches) while a small limit makes the spiller cut and
/// spill those open batches and half the partitions are streamed: every row comes out once,
/// each producer's rows in write order within every partition.
#[test]
fn scattering_producers_on_their_own_handles_keep_each_ones_order_through_spills() {
    use arrow_array::{Int64Array, RecordBatch, StringArray, UInt32Array};
    use arrow_schema::{DataType, Field, Schema};

    const PRODUCERS: i64 = 4;
    const BATCHES: i64 = 150;
    const ROWS: i64 = 64;
    const PARTITIONS: u32 = 16;
    let schema = Arc::new(Schema::new(vec![
        Field::new("producer", DataType::Int64, false),
        Field::new("seq", DataType::Int64, false),
        Field::new("s", DataType::Utf8, true),
    ]));
    let root = tempfile::tempdir().unwrap();
    let buffer = ShardBuffer::builder(schema.clone(), PARTITIONS)
        // A quarter of the ~940 KB written: the half that is not streamed holds about twice
        // this by the end, so the buffer spills however fast the readers are.
        .with_memory_limit(256 << 10)
        .with_spill_dir(root.path())
        .build()
        .unwrap();
    let streamed: Vec<_> = (0..PARTITIONS / 2)
        .map(|p| buffer.subscribe_blocking(p).unwrap())
        .collect();
    let partition_of = |w: i64, seq: i64| ((seq * 7 + w * 3 + seq / 5) % PARTITIONS as i64) as u32;
    let rows = std::thread::scope(|s| {
        let readers: Vec<_> = streamed
            .into_iter()
            .map(|reader| s.spawn(move || reader.map(|b| b.unwrap()).collect::<Vec<_>>()))
            .collect();
        let writers: Vec<_> = (0..PRODUCERS)
            .map(|w| {
                let (buffer, schema) = (buffer.clone(), schema.clone());
                s.spawn(move || {
                    for b in 0..BATCHES {
                        let seqs = (b * ROWS)..((b + 1) * ROWS);
                        let strings = seqs
                            .clone()
                            .map(|q| (q % 4 != 0).then(|| "v".repeat((q % 13) as usize)));
                        let batch = RecordBatch::try_new(
                            schema.clone(),
                            vec![
                                Arc::new(Int64Array::from(vec![w; ROWS as usize])),
                                Arc::new(Int64Array::from_iter_values(seqs.clone())),
                                Arc::new(StringArray::from_iter(strings)),
                            ],
                        )
                        .unwrap();
                        let ids = UInt32Array::from_iter_values(seqs.map(|q| partition_of(w, q)));
                        buffer.write_partitioned_blocking(batch, &ids).unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        buffer.finish().unwrap();
        let mut per_partition: Vec<Vec<RecordBatch>> =
            readers.into_iter().map(|r| r.join().unwrap()).collect();
        for p in PARTITIONS / 2..PARTITIONS {
            per_partition.push(buffer.read(p).unwrap().map(|b| b.unwrap()).collect());
        }
        per_partition
    });
    let mut total = 0;
    for (p, batches) in rows.iter().enumerate() {
        let mut last = vec![-1i64; PRODUCERS as usize];
        for batch in batches {
            let producer = batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            let seq = batch
                .column(1)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            for (w, q) in producer.values().iter().zip(seq.values()) {
                assert_eq!(
                    partition_of(*w, *q),
                    p as u32,
                    "a row in the wrong partition"
                );
                assert!(
                    *q > last[*w as usize],
                    "producer {w} out of order in partition {p}"
                );
                last[*w as usize] = *q;
                total += 1;
            }
        }
    }
    assert_eq!(total, PRODUCERS * BATCHES * ROWS, "rows lost or doubled");
    let metrics = buffer.close().unwrap();
    assert!(metrics.bytes_spilled > 0, "the limit made it spill");
}
