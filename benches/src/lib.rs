//! Benchmarks for arrow-shards live in `benches/`; this library is empty on purpose.
