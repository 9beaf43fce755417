//! The operator's daily workflows in the runtime: per-kind figures kept by the throughput
//! count, pausing, resuming and running periodic schedules by hand, and one queue's page
//! (its limits, their holders, its workers). The dashboard's pages over them are tested in
//! `web_pages.rs` and `web_browser_pages.rs`.
//!
//! Every worker of this binary schedules every periodic kind in it, so each test's kinds
//! live in a queue of their own.

use std::time::Duration;

use jobqueue::admin::{KindStats, LimitKind};
use jobqueue::{job, Enqueued, Error, JobError, JobStatus, Queue};
use std::sync::atomic::{AtomicU64, Ordering};

use jobqueue::Backend;
use tests::{
    fresh_queue, fresh_queue_on, quick_worker, row, sql_exec, sql_i64, start, stop, wait_for, Arg,
};

/// Inserts a finished job of `kind` in `queue` with the given wait (`claimed_at - run_at`)
/// and runtime (`finished_at - claimed_at`) in milliseconds (no claim time with `None`),
/// finished five minutes ago (countable: a count stops 15 s before now).
async fn finished(
    queue: &Queue,
    queue_name: &str,
    kind: &str,
    status: &str,
    attempts: u32,
    times_ms: Option<(u64, u64)>,
) {
    static KEYS: AtomicU64 = AtomicU64::new(0);
    let (wait, run) = times_ms.unwrap_or((0, 0));
    let key = format!("{kind}:{}", KEYS.fetch_add(1, Ordering::Relaxed));
    // The times are computed on the server, whose interval syntax differs.
    let sql = match queue.backend() {
        Backend::Postgres => {
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, max_attempts, \
               finished_at, claimed_at, run_at) \
             SELECT ?, ?, ?, '{}', ?, ?, 5, f, \
               CASE WHEN ? = 1 THEN f - ? * INTERVAL '1 microsecond' END, \
               f - ? * INTERVAL '1 microsecond' \
             FROM (SELECT job_queue_now() - INTERVAL '5 minutes' AS f) t"
        }
        _ => {
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, max_attempts, \
               finished_at, claimed_at, run_at) \
             SELECT ?, ?, ?, '{}', ?, ?, 5, f, \
               IF(? = 1, f - INTERVAL ? MICROSECOND, NULL), f - INTERVAL ? MICROSECOND \
             FROM (SELECT UTC_TIMESTAMP(6) - INTERVAL 5 MINUTE AS f) t"
        }
    };
    let inserted = sql_exec(
        queue,
        sql,
        &[
            Arg::Text(queue_name),
            Arg::Text(kind),
            Arg::Text(&key),
            Arg::Text(status),
            Arg::Int(attempts.into()),
            Arg::Int(times_ms.is_some().into()),
            Arg::Int((run * 1000) as i64),
            Arg::Int(((run + wait) * 1000) as i64),
        ],
    )
    .await;
    assert_eq!(inserted, 1, "insert a finished job");
}

/// The server's time `amount` (`"49 HOUR"`) ago, in the backend's SQL.
fn ago(backend: Backend, amount: &str) -> String {
    match backend {
        Backend::Postgres => format!("job_queue_now() - INTERVAL '{amount}'"),
        _ => format!("UTC_TIMESTAMP(6) - INTERVAL {amount}"),
    }
}

/// `SUM(column)` as a BIGINT on the backend (a DECIMAL on MySQL, a NUMERIC on PostgreSQL
/// otherwise).
fn sum(backend: Backend, column: &str) -> String {
    match backend {
        Backend::Postgres => format!("COALESCE(SUM({column}), 0)::bigint"),
        _ => format!("CAST(COALESCE(SUM({column}), 0) AS SIGNED)"),
    }
}

fn of<'a>(stats: &'a [KindStats], kind: &str) -> &'a KindStats {
    stats
        .iter()
        .find(|k| k.kind == kind)
        .unwrap_or_else(|| panic!("no figures of {kind}: {stats:#?}"))
}

async fn one_count_keeps_exact_per_kind_counts_sums_and_percentiles(backend: Backend) {
    let queue = fresh_queue_on(backend, "kind_stats").await;
    // report: three done, one failed after three attempts, one done without a claim time.
    for (wait, run) in [(1_000, 50), (2_000, 200), (3_000, 2_000)] {
        finished(&queue, "reports", "report", "done", 1, Some((wait, run))).await;
    }
    finished(
        &queue,
        "reports",
        "report",
        "failed",
        3,
        Some((500, 20_000)),
    )
    .await;
    finished(&queue, "reports", "report", "done", 1, None).await;
    // The same kind in a second queue, and another kind.
    finished(&queue, "urgent", "report", "done", 2, Some((0, 40))).await;
    finished(&queue, "mail", "send", "done", 1, Some((10, 5))).await;
    // A job not yet countable (finished now) and one still running are not counted.
    let now = ago(backend, "0 SECOND");
    sql_exec(
        &queue,
        &format!(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, max_attempts, finished_at, claimed_at) VALUES \
             ('reports', 'report', 'now:1', '{{}}', 'done', 1, 5, {now}, {now}), \
             ('reports', 'report', 'running:1', '{{}}', 'running', 1, 5, NULL, {now})"
        ),
        &[],
    )
    .await;
    // Figures older than they are kept (48 h) are deleted by the count; a bucket ten hours
    // old is in the day's figures, not the hour's.
    sql_exec(
        &queue,
        &format!(
            "INSERT INTO job_queue_kind_stats VALUES \
             ({}, 'reports', 'ancient', 1, 0, 0, 0, 0, 0, 0,0,0,0,0,0,0,0,0,0,0,0), \
             ({}, 'reports', 'report', 7, 1, 0, 8, 8000000, 0, 0,0,0,0,8,0,0,0,0,0,0,0)",
            ago(backend, "49 HOUR"),
            ago(backend, "10 HOUR")
        ),
        &[],
    )
    .await;

    queue.store().count_throughput().await.unwrap();
    // A second count adds nothing: each job is counted once.
    queue.store().count_throughput().await.unwrap();

    let hour = queue.kind_stats(1).await.unwrap();
    assert_eq!(
        hour.iter().map(|k| k.kind.as_str()).collect::<Vec<_>>(),
        ["report", "send"],
        "by kind name, the ancient and the day-old ones left out"
    );
    let report = of(&hour, "report");
    assert_eq!(report.queues, ["reports", "urgent"]);
    assert_eq!((report.done, report.failed), (5, 1));
    assert_eq!(
        report.retries, 3,
        "two of the failed job, one of the urgent one"
    );
    assert_eq!(report.timed, 5, "the job without a claim time is not timed");
    assert_eq!(
        report.total_runtime,
        Duration::from_millis(50 + 200 + 2_000 + 20_000 + 40)
    );
    assert_eq!(
        report.total_wait,
        Duration::from_millis(1_000 + 2_000 + 3_000 + 500)
    );
    // 40 ms and 50 ms in [30, 100) ms, 200 ms in [100, 300) ms, 2 s in [1, 3) s, 20 s in [10, 30) s.
    assert_eq!(
        report.runtime_histogram,
        [0, 0, 2, 1, 0, 1, 0, 1, 0, 0, 0, 0]
    );
    assert_eq!(report.failure_rate(), Some(1.0 / 6.0));
    assert_eq!(
        report.mean_runtime(),
        Some(Duration::from_millis(22_290).div_f64(5.0))
    );
    // The median (rank 3 of 5) is the 200 ms job: its bucket is [100, 300) ms; the 95th
    // percentile (rank 5) the 20 s one: [10, 30) s.
    let p50 = report.runtime_percentile(0.5).unwrap();
    assert!(
        (Duration::from_millis(100)..=Duration::from_millis(300)).contains(&p50),
        "{p50:?}"
    );
    let p95 = report.runtime_percentile(0.95).unwrap();
    assert!(
        (Duration::from_secs(10)..=Duration::from_secs(30)).contains(&p95),
        "{p95:?}"
    );
    let send = of(&hour, "send");
    assert_eq!((send.done, send.failed, send.timed), (1, 0, 1));
    assert_eq!(send.total_wait, Duration::from_millis(10));
    assert_eq!(send.runtime_histogram[0], 1, "5 ms is under 10 ms");

    let day = queue.kind_stats(24).await.unwrap();
    let report = of(&day, "report");
    assert_eq!((report.done, report.failed, report.timed), (12, 2, 13));
    assert!(day.iter().all(|k| k.kind != "ancient"));
    let ancient = sql_i64(
        &queue,
        "SELECT COUNT(*) FROM job_queue_kind_stats WHERE kind = 'ancient'",
        &[],
    )
    .await;
    assert_eq!(ancient, 0, "the count deletes figures older than 48 hours");

    // The throughput is kept from the same read.
    let throughput = |column: &'static str| {
        let queue = queue.clone();
        async move {
            sql_i64(
                &queue,
                &format!(
                    "SELECT {} FROM job_queue_throughput WHERE queue = 'reports'",
                    sum(backend, column)
                ),
                &[],
            )
            .await
        }
    };
    let (done, failed) = (throughput("done").await, throughput("failed").await);
    assert_eq!((done, failed), (4, 1));
}

async fn percentiles_stay_within_their_buckets(backend: Backend) {
    let queue = fresh_queue_on(backend, "kind_pct").await;
    // 100 jobs of 1 to 100 ms: the median is in [30, 100) ms, and so is the 95th percentile
    // (100 ms is in the next bucket).
    for ms in 1..=100u64 {
        finished(&queue, "pct", "pct", "done", 1, Some((0, ms))).await;
    }
    // One of 2,000 s: in the last bucket, which has no upper bound.
    finished(&queue, "pct", "slow", "done", 1, Some((0, 2_000_000))).await;
    queue.store().count_throughput().await.unwrap();
    let stats = queue.kind_stats(1).await.unwrap();
    let pct = of(&stats, "pct");
    assert_eq!(pct.runtime_histogram[..4], [9, 20, 70, 1]);
    for q in [0.5, 0.95] {
        let p = pct.runtime_percentile(q).unwrap();
        assert!(
            (Duration::from_millis(30)..=Duration::from_millis(100)).contains(&p),
            "{q}: {p:?}"
        );
    }
    let p = pct.runtime_percentile(0.05).unwrap();
    assert!(p <= Duration::from_millis(10), "{p:?}");
    let slow = of(&stats, "slow");
    assert_eq!(
        slow.runtime_percentile(0.5),
        Some(Duration::from_secs(1000)),
        "at least the last bucket's lower bound"
    );
}

#[job(name = "kp_every_second", queue = "kp_pause", cron = "* * * * * *")]
async fn kp_every_second() -> Result<(), JobError> {
    Ok(())
}

/// The tick times (`run_at`) of `kind`'s jobs, in order.
async fn ticks(queue: &Queue, kind: &str) -> Vec<chrono::NaiveDateTime> {
    sqlx::query_scalar("SELECT run_at FROM job_queue WHERE kind = ? ORDER BY run_at")
        .bind(kind)
        .fetch_all(queue.mysql_pool().unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_schedule_enqueues_no_tick_and_resumes_without_a_burst() {
    let queue = fresh_queue("kind_pause").await;
    let (handle, task) = start(quick_worker(&queue).queues(["kp_pause"]).build().unwrap());
    wait_for("a first tick", Duration::from_secs(40), || async {
        (!ticks(&queue, "kp_every_second").await.is_empty()).then_some(())
    })
    .await;
    assert!(queue.pause_periodic("kp_every_second").await.unwrap());
    assert!(
        !queue.pause_periodic("kp_every_second").await.unwrap(),
        "paused already: nothing changes"
    );
    let paused_at = queue.now().await.unwrap().naive_utc();
    let listed = queue.periodic_ticks(10).await.unwrap();
    let p = listed
        .iter()
        .find(|p| p.schedule.kind == "kp_every_second")
        .unwrap();
    assert!(p.paused_at.is_some());
    // Three seconds of the database's clock: three ticks fall due while paused. The
    // scheduler passes every 100 ms (jittered), so it looks at each of them.
    wait_for("three seconds to pass", Duration::from_secs(30), || async {
        let now = queue.now().await.unwrap().naive_utc();
        (now - paused_at > chrono::TimeDelta::seconds(3)).then_some(())
    })
    .await;
    let while_paused: Vec<_> = ticks(&queue, "kp_every_second")
        .await
        .into_iter()
        .filter(|t| *t > paused_at)
        .collect();
    assert!(
        while_paused.is_empty(),
        "no tick while paused: {while_paused:?}"
    );

    // The database's clock before the resume: every tick due by then fell due while paused
    // (the latest of them too); the schedule goes on from the resume, after it.
    let before_resume = queue.now().await.unwrap().naive_utc();
    assert!(queue.resume_periodic("kp_every_second").await.unwrap());
    let resumed_at = queue.now().await.unwrap().naive_utc();
    wait_for(
        "a tick after the resume",
        Duration::from_secs(40),
        || async {
            ticks(&queue, "kp_every_second")
                .await
                .into_iter()
                .any(|t| t > resumed_at)
                .then_some(())
        },
    )
    .await;
    stop(&handle, task).await;
    // No burst: none of the ticks that fell due while paused was enqueued on resume, not
    // even the latest; the schedule went on from the resume.
    let skipped: Vec<_> = ticks(&queue, "kp_every_second")
        .await
        .into_iter()
        .filter(|t| *t > paused_at && *t <= before_resume)
        .collect();
    assert!(skipped.is_empty(), "missed ticks enqueued: {skipped:?}");

    let e = queue.pause_periodic("no_such_kind").await.unwrap_err();
    assert!(
        matches!(
            &e,
            Error::InvalidSetting {
                setting: "kind",
                ..
            }
        ) && e.to_string().contains("no_such_kind"),
        "{e}"
    );
}

#[job(
    name = "kr_yearly",
    queue = "kr_now",
    cron = "0 0 0 1 1 *",
    priority = 3
)]
async fn kr_yearly() -> Result<(), JobError> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_now_enqueues_one_job_with_a_key_of_its_own_that_runs() {
    let queue = fresh_queue("kind_run_now").await;
    let e = queue.run_periodic_now("kr_yearly").await.unwrap_err();
    assert!(
        e.to_string().contains("no periodic schedule"),
        "no schedule yet: {e}"
    );
    let (handle, task) = start(quick_worker(&queue).queues(["kr_now"]).build().unwrap());
    wait_for("the schedule's row", Duration::from_secs(30), || async {
        queue
            .periodic_jobs()
            .await
            .unwrap()
            .into_iter()
            .find(|p| p.kind == "kr_yearly")
    })
    .await;
    // Paused or not: a pause stops the schedule, not an operator.
    queue.pause_periodic("kr_yearly").await.unwrap();
    let Enqueued::New(id) = queue.run_periodic_now("kr_yearly").await.unwrap() else {
        panic!("a new job");
    };
    let job = row(&queue, id).await;
    assert_eq!(
        (job.kind.as_str(), job.queue.as_str()),
        ("kr_yearly", "kr_now")
    );
    assert_eq!(job.priority, 3, "the tick's options");
    assert!(
        job.task_key.starts_with("kr_yearly@") && job.task_key.ends_with(" run now"),
        "{}",
        job.task_key
    );
    assert_ne!(
        job.task_key,
        jobqueue::cron::tick_key("kr_yearly", job.run_at),
        "not a tick's key"
    );
    wait_for(
        "the manual run to be done",
        Duration::from_secs(30),
        || async { (row(&queue, id).await.status == JobStatus::Done).then_some(()) },
    )
    .await;
    let Enqueued::New(second) = queue.run_periodic_now("kr_yearly").await.unwrap() else {
        panic!("a second run is a new job");
    };
    assert_ne!(row(&queue, second).await.task_key, job.task_key);
    stop(&handle, task).await;
    let listed = queue.periodic_ticks(10).await.unwrap();
    let p = listed
        .iter()
        .find(|p| p.schedule.kind == "kr_yearly")
        .unwrap();
    assert_eq!(
        p.recent
            .iter()
            .map(|t| (t.id, t.manual))
            .collect::<Vec<_>>(),
        [(second, true), (id, true)],
        "newest first, both manual"
    );
    assert_eq!(p.recent[1].status, JobStatus::Done);

    // A kind this program does not register: copied from its newest job.
    sqlx::query(
        "INSERT INTO job_queue_cron (kind, last_tick, updated_at, schedule) VALUES \
         ('elsewhere_nightly', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), '0 0 3 * * *')",
    )
    .execute(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    let e = queue
        .run_periodic_now("elsewhere_nightly")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no job yet to copy"), "{e}");
    sqlx::query(
        "INSERT INTO job_queue (queue, kind, task_key, payload, status, max_attempts, priority) VALUES \
         ('nightly', 'elsewhere_nightly', 'elsewhere_nightly@2026-12-01T03:00:00.000000Z', '{\"full\": true}', 'done', 7, -2)",
    )
    .execute(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    let Enqueued::New(copy) = queue.run_periodic_now("elsewhere_nightly").await.unwrap() else {
        panic!("a new job");
    };
    let copy = row(&queue, copy).await;
    assert_eq!(copy.queue, "nightly");
    assert_eq!(copy.payload, serde_json::json!({ "full": true }));
    assert_eq!((copy.max_attempts, copy.priority), (7, -2));
    assert_eq!(copy.status, JobStatus::Ready);
}

#[tokio::test]
async fn a_queue_page_shows_its_limits_their_holders_and_its_workers() {
    let queue = fresh_queue("kind_queue_page").await;
    let pool = queue.mysql_pool().unwrap();
    // Two running jobs hold the two slots of `tenant:7`; three wait for it, two in `mail`
    // and one in `other`; one `mail` job waits for a rate key.
    let mut ids = Vec::new();
    for (q, status, key) in [
        ("mail", "running", "run:1"),
        ("mail", "running", "run:2"),
        ("mail", "blocked", "b:1"),
        ("mail", "blocked", "b:2"),
        ("other", "blocked", "b:3"),
        ("mail", "blocked", "b:4"),
    ] {
        let id = sqlx::query(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, max_attempts, lease_owner, \
               lease_until, concurrency_key, concurrency_limit, rate_key, rate_limit, rate_window_ms) \
             VALUES (?, 'sync', ?, '{}', ?, 3, IF(? = 'running', 'app-1:1:aa', NULL), \
               IF(? = 'running', UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE, NULL), 'tenant:7', 2, \
               IF(? = 'b:4', 'api', NULL), IF(? = 'b:4', 5, 0), IF(? = 'b:4', 60000, 0))",
        )
        .bind(q)
        .bind(key)
        .bind(status)
        .bind(status)
        .bind(status)
        .bind(key)
        .bind(key)
        .bind(key)
        .execute(pool)
        .await
        .unwrap()
        .last_insert_id();
        ids.push(id);
    }
    for (slot, id) in [(0, ids[0]), (1, ids[1])] {
        sqlx::query("INSERT INTO job_queue_slot (slot_key, slot_no, job_id, attempt) VALUES ('c:tenant:7', ?, ?, 1)")
            .bind(slot)
            .bind(id)
            .execute(pool)
            .await
            .unwrap();
    }
    for (key, id) in [
        ("c:tenant:7", ids[2]),
        ("c:tenant:7", ids[3]),
        ("c:tenant:7", ids[4]),
        ("r:api", ids[5]),
    ] {
        sqlx::query("INSERT INTO job_queue_blocked (slot_key, priority, job_id) VALUES (?, 0, ?)")
            .bind(key)
            .bind(id)
            .execute(pool)
            .await
            .unwrap();
    }
    // Five starts of `api` in the current minute: its window is full.
    for slot in 0..5 {
        sqlx::query("INSERT INTO job_queue_slot (slot_key, slot_no, free_at) VALUES ('r:api', ?, UTC_TIMESTAMP(6) + INTERVAL 30 SECOND)")
            .bind(slot)
            .execute(pool)
            .await
            .unwrap();
    }
    sqlx::query(
        "INSERT INTO job_queue_worker (owner, host, pid, version, queues, concurrency, running, started_at, last_seen) VALUES \
         ('app-1:1:aa', 'app-1', 1, '0.3.0', 'default,mail', 8, 2, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, UTC_TIMESTAMP(6)), \
         ('app-2:2:bb', 'app-2', 2, '0.3.0', 'other', 4, 0, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, UTC_TIMESTAMP(6)), \
         ('app-3:3:cc', 'app-3', 3, '0.3.0', 'mailroom', 4, 0, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, UTC_TIMESTAMP(6))",
    )
    .execute(pool)
    .await
    .unwrap();
    queue.pause("mail").await.unwrap();
    // Counts the gauges (never counted yet).
    queue.queue_overview().await.unwrap();

    let page = queue.queue_detail("mail").await.unwrap();
    assert!(page.paused);
    assert_eq!(
        (page.counts.running, page.counts.blocked, page.counts.done),
        (2, 3, 0)
    );
    assert_eq!(page.blocked_read, 3);
    assert_eq!(page.limits.len(), 2, "{:#?}", page.limits);
    let tenant = &page.limits[0];
    assert_eq!(tenant.limit_kind, LimitKind::Concurrency);
    assert_eq!(tenant.key, "tenant:7");
    assert_eq!((tenant.limit, tenant.busy), (2, 2));
    assert_eq!(tenant.blocked_here, 2);
    assert_eq!(tenant.waiting, 3, "every queue's jobs wait for the key");
    assert_eq!(
        tenant.holders.iter().map(|h| h.id).collect::<Vec<_>>(),
        [ids[0], ids[1]]
    );
    assert_eq!(tenant.holders[0].lease_owner.as_deref(), Some("app-1:1:aa"));
    assert_eq!(
        tenant.holders[0].job.as_ref().map(|j| j.2),
        Some(JobStatus::Running)
    );
    let api = &page.limits[1];
    assert_eq!(api.limit_kind, LimitKind::Rate);
    assert_eq!((api.key.as_str(), api.limit, api.busy), ("api", 5, 5));
    assert_eq!(api.window, Some(Duration::from_secs(60)));
    let next = api.next_start_secs.expect("the window is full");
    assert!((0.0..=31.0).contains(&next), "{next}");
    assert_eq!(
        page.workers
            .iter()
            .map(|w| w.owner.as_str())
            .collect::<Vec<_>>(),
        ["app-1:1:aa"],
        "only the workers that list the queue (not `mailroom`)"
    );

    let quiet = queue.queue_detail("nothing_here").await.unwrap();
    assert!(!quiet.paused && quiet.limits.is_empty() && quiet.workers.is_empty());
    assert!(queue.queue_detail("bad queue!").await.is_err());
}

async fn the_throughput_is_kept_when_the_per_kind_figures_cannot_be(backend: Backend) {
    let queue = fresh_queue_on(backend, "kind_stats_missing").await;
    finished(&queue, "q", "k", "done", 1, Some((10, 10))).await;
    // As for a user not granted the table (or a database not migrated that far).
    sql_exec(&queue, "DROP TABLE job_queue_kind_stats", &[]).await;
    queue.store().count_throughput().await.unwrap();
    let done = sql_i64(
        &queue,
        &format!(
            "SELECT {} FROM job_queue_throughput WHERE queue = 'q'",
            sum(backend, "done")
        ),
        &[],
    )
    .await;
    assert_eq!(done, 1);
    assert!(
        queue.kind_stats(1).await.is_err(),
        "the read says the table is missing"
    );
}

tests::on_every_backend!(
    one_count_keeps_exact_per_kind_counts_sums_and_percentiles,
    percentiles_stay_within_their_buckets,
    the_throughput_is_kept_when_the_per_kind_figures_cannot_be,
);
