//! PostgreSQL's plans for the maintenance statements that run on every pass: promotion,
//! reclaim and pruning must read a range of the `(status, status_at, id)` index in its
//! order (no scan of the table, no sort), on a table large enough, and analyzed, for the
//! planner to choose freely between that and a scan. Nothing here steers the planner.

use jobqueue::Backend;
use jobqueue_runtime::__store::pg_maintenance::{
    PG_PROMOTE, PG_PROMOTE_PROBE, PG_PRUNE, PG_RECLAIM_SELECT,
};
use serde_json::Value;
use sqlx::PgPool;
use tests::fresh_queue_on;

/// Rows of the test table: mostly finished jobs, as a queue that has run for a while holds.
const ROWS: i64 = 60_000;

/// Fills `job_queue` with `ROWS` jobs: 1 % each scheduled (half due), ready and running
/// (half expired), the rest done or failed, a tenth of them past a week's retention; then
/// analyzes it.
async fn fill(pool: &PgPool) {
    sqlx::query(
        "INSERT INTO job_queue (queue, kind, task_key, payload, status, run_at, attempts, \
           lease_owner, lease_until, finished_at, created_at, updated_at) \
         SELECT 'plans', 'plan_kind', 'k-' || n, '{}'::jsonb, s.status, \
           job_queue_now() + (CASE WHEN (n / 100) % 2 = 0 THEN -1 ELSE 1 END) * INTERVAL '1 hour', \
           CASE WHEN s.status IN ('scheduled', 'ready') THEN 0 ELSE 1 END, \
           CASE WHEN s.status = 'running' THEN 'w' END, \
           CASE WHEN s.status = 'running' \
             THEN job_queue_now() + (CASE WHEN (n / 100) % 2 = 0 THEN -1 ELSE 1 END) * INTERVAL '1 minute' END, \
           CASE WHEN s.status IN ('done', 'failed') \
             THEN job_queue_now() - (CASE WHEN n % 10 = 0 THEN 9 ELSE 1 END) * INTERVAL '1 day' END, \
           job_queue_now(), job_queue_now() \
         FROM generate_series(1, $1) AS n, \
           LATERAL (SELECT CASE n % 100 WHEN 1 THEN 'scheduled' WHEN 2 THEN 'ready' \
             WHEN 3 THEN 'running' WHEN 4 THEN 'failed' ELSE 'done' END AS status) s",
    )
    .bind(ROWS)
    .execute(pool)
    .await
    .expect("fill job_queue");
    sqlx::query("ANALYZE job_queue")
        .execute(pool)
        .await
        .expect("analyze");
}

/// The plan of `sql` with its arguments (`EXPLAIN (FORMAT JSON)`; a plan only, nothing
/// runs).
async fn plan(pool: &PgPool, sql: &str, args: &[Value]) -> Value {
    let explain = format!("EXPLAIN (FORMAT JSON) {sql}");
    let mut q = sqlx::query_scalar::<_, sqlx::types::Json<Value>>(&explain);
    for a in args {
        q = match a {
            Value::String(s) => q.bind(s.clone()),
            Value::Number(n) => q.bind(n.as_i64().expect("an integer")),
            other => panic!("unexpected argument {other}"),
        };
    }
    q.fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("{explain}: {e}"))
        .0
}

/// Every node of a plan, depth first.
fn nodes(plan: &Value, out: &mut Vec<Value>) {
    if let Some(list) = plan.as_array() {
        for p in list {
            nodes(p, out);
        }
        return;
    }
    if let Some(inner) = plan.get("Plan") {
        nodes(inner, out);
        return;
    }
    out.push(plan.clone());
    if let Some(children) = plan.get("Plans") {
        nodes(children, out);
    }
}

/// Asserts that the plan of `sql` reads `job_queue` only through `job_queue_status_at`, or
/// its primary key (the rows the batch names), and sorts nothing.
async fn assert_index_served(pool: &PgPool, what: &str, sql: &str, args: &[Value]) {
    let p = plan(pool, sql, args).await;
    let mut all = Vec::new();
    nodes(&p, &mut all);
    let mut through_status_at = false;
    for n in &all {
        let kind = n["Node Type"].as_str().unwrap_or_default();
        let relation = n["Relation Name"].as_str().unwrap_or_default();
        assert!(
            !kind.contains("Sort"),
            "{what}: the plan sorts: {}",
            serde_json::to_string_pretty(&p).unwrap()
        );
        let index = n["Index Name"].as_str().unwrap_or_default();
        // A bitmap over the rows of a batch, by id: no order needed there.
        if kind == "Bitmap Index Scan" {
            assert_eq!(
                index,
                "job_queue_pkey",
                "{what}: a bitmap over {index}: {}",
                serde_json::to_string_pretty(&p).unwrap()
            );
        }
        if relation == "job_queue" {
            let ordered = ["Index Scan", "Index Only Scan"].contains(&kind)
                && ["job_queue_status_at", "job_queue_pkey"].contains(&index);
            assert!(
                ordered || kind == "Bitmap Heap Scan" || kind == "ModifyTable",
                "{what}: job_queue read by {kind} {index}: {}",
                serde_json::to_string_pretty(&p).unwrap()
            );
            through_status_at |= ordered && index == "job_queue_status_at";
        }
    }
    assert!(
        through_status_at,
        "{what}: job_queue_status_at unused: {}",
        serde_json::to_string_pretty(&p).unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promotion_reclaim_and_pruning_read_a_range_of_the_status_time_index() {
    let queue = fresh_queue_on(Backend::Postgres, "pg_maint_plans").await;
    let pool = queue.postgres_pool().expect("a PostgreSQL queue").clone();
    fill(&pool).await;
    let week_us = 7 * 24 * 3600 * 1_000_000i64;
    assert_index_served(&pool, "promotion's probe", PG_PROMOTE_PROBE, &[]).await;
    assert_index_served(&pool, "promotion", PG_PROMOTE, &[Value::from(1000)]).await;
    assert_index_served(&pool, "reclaim", PG_RECLAIM_SELECT, &[Value::from(1000)]).await;
    for status in ["done", "failed", "cancelled"] {
        assert_index_served(
            &pool,
            &format!("pruning of {status} jobs"),
            PG_PRUNE,
            &[Value::from(status), Value::from(week_us), Value::from(1000)],
        )
        .await;
    }
    // The statements do what their plans say: a tenth of the finished jobs are past a
    // week, half the scheduled ones due, half the running ones expired.
    let store = queue.store();
    assert_eq!(
        store.promote(100_000).await.expect("promote"),
        (ROWS / 200) as u64
    );
    let reclaimed = store.reclaim(100_000).await.expect("reclaim");
    assert_eq!(reclaimed.ready.len() as i64, ROWS / 200);
}
