//! TPC-H queries that repartition (joins, aggregations) return the same rows with the rule on
//! and off, and with the rule on their plans hold `ShardRepartitionExec` and no
//! `RepartitionExec` that hashes.

mod common;

use std::num::NonZeroUsize;
use std::sync::Arc;

use arrow_shards_datafusion::{ShardRepartitionExec, SpillForOthersPool};
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::execution::memory_pool::{FairSpillPool, MemoryPool, TrackConsumersPool};
use datafusion::physical_plan::{ExecutionPlan, collect};

use common::{QUERIES, Setup, files, run};

/// A session limit of the spilling query: lineitem alone holds ~20 MiB in memory. At 12 MiB
/// the exchange spilled in some runs only (whether its fair share runs out depends on how the
/// tasks interleave); at 10 MiB it spilled in 7 of 7 here (0 bytes in one CI run); at 8 MiB
/// DataFusion's own final aggregation is refused unless the pool is a `SpillForOthersPool`
/// (the exchange holds most of the pool, and DataFusion does not ask spillable consumers to
/// spill for others).
const LIMIT: usize = 10 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_queries_give_the_same_rows_with_the_rule_on_and_off() {
    let off = Setup::rule(false).context();
    let streaming = Setup::rule(true).context();
    let materializing = Setup {
        materialize: true,
        ..Setup::rule(true)
    }
    .context();
    for ((query, sql), on) in QUERIES
        .iter()
        .flat_map(|q| [(q, &streaming), (q, &materializing)])
    {
        let (plan_off, rows_off) = run(&off, sql).await;
        let (plan_on, rows_on) = run(on, sql).await;
        assert!(
            plan_off.contains("RepartitionExec"),
            "q{query} repartitions:\n{plan_off}"
        );
        assert!(
            plan_on.contains("ShardRepartitionExec"),
            "q{query} with the rule:\n{plan_on}"
        );
        assert!(
            !plan_on.contains(" RepartitionExec: partitioning=Hash"),
            "q{query}: every hash repartition replaced:\n{plan_on}"
        );
        assert!(
            rows_off.lines().count() > 4,
            "q{query} returns rows:\n{rows_off}"
        );
        assert_eq!(rows_on, rows_off, "q{query}");
    }
}

/// Every `ShardRepartitionExec` in `plan`.
fn exchanges(plan: &Arc<dyn ExecutionPlan>, found: &mut Vec<Arc<dyn ExecutionPlan>>) {
    if plan.downcast_ref::<ShardRepartitionExec>().is_some() {
        found.push(Arc::clone(plan));
    }
    for child in plan.children() {
        exchanges(child, found);
    }
}

/// The queries under a `FairSpillPool` of 10 MiB and of 8 MiB, with and without the rule (the
/// rule's runs with the pool wrapped in `SpillForOthersPool`), streaming and materializing:
/// every query that DataFusion runs under the limit without the rule gives the same rows with
/// it, and once each plan is dropped the session pool is at zero and no spill file is left.
/// The exchange's fair share is far below the session limit the pool reports, so its writers
/// are refused while the buffer's own figures say there is room: the spiller frees a waiting
/// writer's need then (it used to leave the writer waiting out its 60 s timeout). Whether the
/// exchange spills at all depends on how the tasks interleave (it once spilled 0 bytes in CI at
/// 10 MiB), so this checks what holds whatever the interleaving; `tests/spill_for_others.rs`
/// checks spilling for others where it is deterministic. What DataFusion itself cannot run
/// under these limits is listed in docs/datafusion.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_session_limit_the_plans_give_the_same_rows() {
    let off = Setup::rule(false).context();
    let mut ran = 0;
    for ((query, sql), limit) in QUERIES.iter().flat_map(|q| [(q, LIMIT), (q, 8 << 20)]) {
        let (_, expected) = run(&off, sql).await;
        let root = tempfile::tempdir().unwrap();
        // Tracked: the refusal names the largest consumers (docs/datafusion.md quotes them).
        let tracked =
            TrackConsumersPool::new(FairSpillPool::new(limit), NonZeroUsize::new(5).unwrap());
        let plain = Setup {
            pool: Some(Arc::new(tracked)),
            ..Setup::rule(false).spilling_to(root.path())
        }
        .context();
        if let Err(e) = plain.sql(sql).await.unwrap().collect().await {
            let e = e.to_string();
            eprintln!("q{query} under {limit} bytes fails without the rule: {e}");
            continue;
        }
        for materialize in [false, true] {
            run_limited(*query, sql, limit, materialize, &expected).await;
            ran += 1;
        }
    }
    // Here q1, q3 and q5 under both limits and q9 under 10 MiB ran without the rule
    // (docs/datafusion.md); whether DataFusion alone fits may depend on how tasks interleave,
    // so only q3 (far from its limits) is counted on.
    assert!(ran >= 4, "only {ran} runs under a limit");
    // Query 18 fails under 10 MiB without the rule (DataFusion's final aggregation is refused)
    // and runs with it.
    let (_, sql) = QUERIES[4];
    let (_, expected) = run(&off, sql).await;
    for materialize in [false, true] {
        run_limited(18, sql, LIMIT, materialize, &expected).await;
    }
}

/// Runs `sql` with the rule under a `SpillForOthersPool` over a `FairSpillPool` of `limit`:
/// the rows must be `expected`, and once the plan is dropped the pool is at zero and no spill
/// file is left.
async fn run_limited(query: u32, sql: &str, limit: usize, materialize: bool, expected: &str) {
    let what = format!("q{query}, {limit} bytes, materialize {materialize}");
    let root = tempfile::tempdir().unwrap();
    let fair: Arc<dyn MemoryPool> = Arc::new(FairSpillPool::new(limit));
    let pool: Arc<dyn MemoryPool> = Arc::new(SpillForOthersPool::new(fair));
    let limited = Setup {
        pool: Some(Arc::clone(&pool)),
        materialize,
        ..Setup::rule(true).spilling_to(root.path())
    }
    .context();
    let plan = limited
        .sql(sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let batches = collect(Arc::clone(&plan), limited.task_ctx())
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let got = pretty_format_batches(&batches).unwrap().to_string();
    assert_eq!(got, expected, "{what}");
    let mut found = Vec::new();
    exchanges(&plan, &mut found);
    assert!(!found.is_empty(), "{what}");
    for exchange in &found {
        exchange
            .downcast_ref::<ShardRepartitionExec>()
            .unwrap()
            .wait_closed()
            .await;
    }
    // Operators above the exchanges (the joins' build sides) keep their reservations while
    // the plan lives.
    drop((found, plan, batches));
    assert_eq!(
        pool.reserved(),
        0,
        "{what}: the session pool is back at zero"
    );
    assert_eq!(
        files(root.path()),
        Vec::<std::path::PathBuf>::new(),
        "{what}"
    );
}
