//! PostgreSQL's plan for the claim: its locking read must go down the claim index
//! `(queue, status, priority, id)` in claim order, with no scan of the job table and no sort
//! of its rows, on a table large enough, and analyzed, for the planner to choose freely
//! between that and a scan. Nothing here steers the planner: the plan is the one the server
//! picks, with the claim's arguments (a custom plan) and without them (a generic plan, which
//! a pooled connection's prepared statement ends up with).

use jobqueue::Backend;
use jobqueue_runtime::__store::statements::pg_claim_sql;
use serde_json::Value;
use sqlx::PgPool;
use tests::fresh_queue_on;

/// Rows of the test table.
const ROWS: i64 = 40_000;

/// Fills `job_queue` with `ROWS` jobs over ten queues: most done, one in ten ready (some of
/// them with a concurrency limit: a backlog several times the largest claim below), a few
/// running; then analyzes it.
async fn fill(pool: &PgPool) {
    sqlx::query(
        "INSERT INTO job_queue (queue, kind, task_key, payload, status, priority, attempts, \
           lease_owner, lease_until, finished_at, concurrency_key, concurrency_limit) \
         SELECT 'q' || (n % 10), 'plan_kind', 'k-' || n, '{}'::jsonb, s.status, (n % 3)::smallint, \
           CASE WHEN s.status = 'ready' THEN 0 ELSE 1 END, \
           CASE WHEN s.status = 'running' THEN 'w' END, \
           CASE WHEN s.status = 'running' THEN job_queue_now() + INTERVAL '1 minute' END, \
           CASE WHEN s.status = 'done' THEN job_queue_now() END, \
           CASE WHEN n % 7 = 0 THEN 'key-' || (n % 5) END, \
           CASE WHEN n % 7 = 0 THEN 2 ELSE 0 END \
         FROM generate_series(1, $1) AS n, \
           LATERAL (SELECT CASE WHEN (n / 10) % 10 = 0 THEN 'ready' WHEN (n / 10) % 50 = 1 THEN 'running' \
             ELSE 'done' END AS status) s",
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

/// Every node of a plan, depth first, each with whether a `Sort` above it sorts its rows.
fn nodes(plan: &Value, sorted: bool, out: &mut Vec<(Value, bool)>) {
    if let Some(list) = plan.as_array() {
        for p in list {
            nodes(p, sorted, out);
        }
        return;
    }
    if let Some(inner) = plan.get("Plan") {
        nodes(inner, sorted, out);
        return;
    }
    // A CTE or subquery (an init plan, a subplan) is run on its own: what sorts its result
    // does not sort the rows it reads.
    let relation = plan["Parent Relationship"].as_str().unwrap_or_default();
    let sorted = sorted && !["InitPlan", "SubPlan"].contains(&relation);
    out.push((plan.clone(), sorted));
    let sorts = sorted || plan["Node Type"].as_str() == Some("Sort");
    if let Some(children) = plan.get("Plans") {
        nodes(children, sorts, out);
    }
}

/// Asserts that `plan` reads `job_queue` through the claim index (and by primary key or
/// tuple id for the rows it updates), never by a scan of the table, and sorts none of its
/// rows (a sort of the few rows the claim returns, above the CTE, is no read of the table).
fn assert_claim_index(what: &str, plan: &Value) {
    let pretty = serde_json::to_string_pretty(plan).unwrap();
    let mut all = Vec::new();
    nodes(plan, false, &mut all);
    let mut through_claim = false;
    for (n, under_sort) in &all {
        let kind = n["Node Type"].as_str().unwrap_or_default();
        let relation = n["Relation Name"].as_str().unwrap_or_default();
        if relation != "job_queue" {
            continue;
        }
        let index = n["Index Name"].as_str().unwrap_or_default();
        assert!(
            kind != "Seq Scan" && kind != "Bitmap Heap Scan",
            "{what}: job_queue read by {kind}: {pretty}"
        );
        assert!(!under_sort, "{what}: job_queue rows sorted: {pretty}");
        if kind.starts_with("Index") {
            assert!(
                ["job_queue_claim", "job_queue_pkey"].contains(&index),
                "{what}: job_queue read by {kind} {index}: {pretty}"
            );
        }
        through_claim |= index == "job_queue_claim";
    }
    assert!(through_claim, "{what}: job_queue_claim unused: {pretty}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_reads_the_claim_index_in_claim_order() {
    let queue = fresh_queue_on(Backend::Postgres, "pg_claim_plans").await;
    let pool = queue.postgres_pool().expect("a PostgreSQL queue").clone();
    fill(&pool).await;
    let sql = pg_claim_sql();

    // With the claim's arguments: a custom plan.
    for want in [1i64, 10, 100] {
        let p: sqlx::types::Json<Value> =
            sqlx::query_scalar(&format!("EXPLAIN (FORMAT JSON) {sql}"))
                .bind("q3")
                .bind(want)
                .bind("worker")
                .fetch_one(&pool)
                .await
                .expect("explain the claim");
        assert_claim_index(&format!("the claim of {want} (custom plan)"), &p.0);
    }

    // Without them: the generic plan a prepared statement is given after a few executions.
    let mut conn = pool.acquire().await.expect("a connection");
    sqlx::raw_sql(&format!(
        "SET plan_cache_mode = force_generic_plan; PREPARE claim(text, bigint, text) AS {sql}"
    ))
    .execute(&mut *conn)
    .await
    .expect("prepare the claim");
    let p: sqlx::types::Json<Value> =
        sqlx::query_scalar("EXPLAIN (FORMAT JSON) EXECUTE claim('q3', 10, 'worker')")
            .fetch_one(&mut *conn)
            .await
            .expect("explain the prepared claim");
    assert_claim_index("the claim (generic plan)", &p.0);
    conn.close_on_drop();
    drop(conn);

    // The statement does what its plan says: the ready jobs of the queue, unlimited ones
    // taken, in claim order.
    let claimed = queue
        .store()
        .claim("q3", "worker", 1000)
        .await
        .expect("claim");
    let ready_in_q3 = ROWS / 10 / 10;
    let unlimited = tests::sql_i64(
        &queue,
        "SELECT COUNT(*) FROM job_queue WHERE queue = 'q3' AND status = 'running' \
         AND lease_owner = 'worker' AND concurrency_limit = 0",
        &[],
    )
    .await;
    assert!(unlimited > 0 && unlimited < ready_in_q3, "{unlimited}");
    // The limited jobs of the queue share one key (`n % 5` is 3 for all of them), which
    // allows two at once: the others are blocked.
    assert_eq!(claimed.len() as i64, unlimited + 2);
    assert_eq!(claimed.iter().filter(|c| c.holds_slot).count(), 2);
    assert!(claimed.iter().all(|c| c.queue == "q3" && c.attempt == 1));
}
