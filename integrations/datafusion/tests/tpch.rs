//! TPC-H queries that repartition (joins, aggregations) return the same rows with the rule on
//! and off, and with the rule on their plans hold `ShardRepartitionExec` and no
//! `RepartitionExec` that hashes.

mod common;

use std::sync::Arc;

use arrow_shards_datafusion::ShardRepartitionExec;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::execution::memory_pool::{FairSpillPool, MemoryPool};
use datafusion::physical_plan::{ExecutionPlan, collect};

use common::{QUERIES, Setup, files, run};

/// The session limit of the spilling query: lineitem alone holds ~20 MiB in memory. At 12 MiB
/// the exchange spilled in some runs only (whether its fair share runs out depends on how the
/// tasks interleave); at 10 MiB it spilled in 7 of 7; at 8 MiB DataFusion's own final
/// aggregation is refused (`ResourcesExhausted`: the exchange holds most of the pool, and
/// DataFusion does not ask spillable consumers to spill for others).
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

/// Query 18 under a 10 MiB `FairSpillPool`: the exchange's fair share is far below the session
/// limit the pool reports, so its writers are refused while the buffer's own figures say there is
/// room. The spiller frees a waiting writer's need in that case (it used to leave the writer
/// waiting out its 60 s timeout, and the query failed with `ResourcesExhausted`).
#[ignore = "flaky: whether the exchange spills under the fair share depends on task interleaving (spilled 0 in some CI runs); docs/datafusion.md, Limits"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_session_limit_the_plan_spills_and_gives_the_same_rows() {
    let root = tempfile::tempdir().unwrap();
    let pool: Arc<dyn MemoryPool> = Arc::new(FairSpillPool::new(LIMIT));
    let limited = Setup {
        pool: Some(Arc::clone(&pool)),
        ..Setup::rule(true).spilling_to(root.path())
    }
    .context();
    let off = Setup::rule(false).context();
    let (_, sql) = QUERIES[4]; // q18: lineitem aggregated by l_orderkey, joined twice
    let (_, expected) = run(&off, sql).await;

    let plan = limited
        .sql(sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let batches = collect(Arc::clone(&plan), limited.task_ctx())
        .await
        .unwrap();
    assert_eq!(
        pretty_format_batches(&batches).unwrap().to_string(),
        expected
    );
    let mut found = Vec::new();
    exchanges(&plan, &mut found);
    let spilled: usize = found
        .iter()
        .filter_map(|e| e.metrics().and_then(|m| m.spilled_bytes()))
        .sum();
    assert!(spilled > 0, "the plan spilled under {LIMIT} bytes");
    for exchange in &found {
        exchange
            .downcast_ref::<ShardRepartitionExec>()
            .unwrap()
            .wait_closed()
            .await;
    }
    // Operators above the exchanges (the joins' build sides) keep their reservations while the
    // plan lives.
    drop((found, plan, batches));
    assert_eq!(pool.reserved(), 0, "the session pool is back at zero");
    assert_eq!(
        files(root.path()),
        Vec::<std::path::PathBuf>::new(),
        "no spill file left"
    );
}
