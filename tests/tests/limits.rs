//! Concurrency and rate limits by key, across workers, against a real server.
//!
//! The protocol tests drive the store's claim, outcomes and reclaim directly and read the
//! slot and job rows. The worker tests run several `Worker`s, each on a pool of its own,
//! and judge the limits from the times the jobs record in the `effects` table: a job
//! records its claim time (the `updated_at` its claim wrote, by the server's clock) when it
//! starts and the server's time when it ends, so each recorded run lies inside the time its
//! claim held a slot. Jobs reach the `effects` table through the pool their worker is given
//! (`.data(Effects(pool))`, a `Data<Effects>` parameter); every worker gets one, since a
//! worker must hold what each kind of its queues takes.

use std::collections::HashMap;
use std::time::Duration;

use jobqueue::{job, Data, EnqueueOptions, Job, JobContext, JobError, JobStatus, Queue, Worker};
use jobqueue_runtime::__store::{Finish, Store};
use sqlx::mysql::MySqlPool;
use sqlx::Row;
use tests::{
    count_status, fresh_queue, fresh_queue_on, fresh_queue_with_effects, on_every_backend,
    quick_worker, row, start, stop, wait_for, wait_status, Backend, Effects,
};

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// Records the run of the job in `ctx` under `note` (its limit key): its claim time as
/// `started_at` (the claim's `updated_at`; nothing else writes the row while the job runs
/// for less than a quarter of its lease), then, after `work`, its end.
async fn record_run(
    effects: &Effects,
    ctx: &JobContext,
    note: &str,
    work: Duration,
) -> Result<(), JobError> {
    let pool = effects.mysql();
    sqlx::query(
        "INSERT INTO effects (task_key, attempt, note, started_at) \
         SELECT ?, ?, ?, updated_at FROM job_queue WHERE id = ?",
    )
    .bind(ctx.task_key())
    .bind(ctx.attempt())
    .bind(format!("start {note}"))
    .bind(ctx.id())
    .execute(pool)
    .await?;
    tokio::time::sleep(work).await;
    sqlx::query(
        "INSERT INTO effects (task_key, attempt, note, started_at) \
         VALUES (?, ?, ?, UTC_TIMESTAMP(6))",
    )
    .bind(ctx.task_key())
    .bind(ctx.attempt())
    .bind(format!("end {note}"))
    .execute(pool)
    .await?;
    Ok(())
}

/// The most runs of one key that overlapped, per key, from the recorded starts and ends.
/// A run that recorded no end (timed out, or stopped) ends when its claim's outcome was
/// written, which is no earlier than the job's next claim or its `finished_at`; those are
/// taken as its end, which can only overstate the overlap.
async fn max_overlap(pool: &MySqlPool) -> HashMap<String, usize> {
    let rows = sqlx::query(
        "SELECT s.note, s.started_at, COALESCE(\
           (SELECT MIN(e.started_at) FROM effects e WHERE e.task_key = s.task_key \
              AND e.attempt = s.attempt AND e.note LIKE 'end %'), \
           (SELECT MIN(n.started_at) FROM effects n WHERE n.task_key = s.task_key \
              AND n.attempt > s.attempt AND n.note LIKE 'start %'), \
           (SELECT j.finished_at FROM job_queue j WHERE j.task_key = s.task_key)) \
         FROM effects s WHERE s.note LIKE 'start %'",
    )
    .fetch_all(pool)
    .await
    .expect("read effects");
    let mut events: Vec<(chrono::NaiveDateTime, i32, String)> = Vec::new();
    for r in &rows {
        let note: String = r.get(0);
        let key = note.strip_prefix("start ").expect("a start").to_owned();
        let start: chrono::NaiveDateTime = r.get(1);
        let end: Option<chrono::NaiveDateTime> = r.get(2);
        events.push((start, 1, key.clone()));
        events.push((end.unwrap_or(chrono::NaiveDateTime::MAX), -1, key));
    }
    // Ends sort before starts at one instant: a slot freed and taken in one microsecond.
    events.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut now: HashMap<String, i64> = HashMap::new();
    let mut most: HashMap<String, usize> = HashMap::new();
    for (_, delta, key) in events {
        let n = now.entry(key.clone()).or_default();
        *n += i64::from(delta);

        let m = most.entry(key).or_default();
        *m = (*m).max((*n).max(0) as usize);
    }
    most
}

async fn slots(queue: &Queue, slot_key: &str) -> Vec<(u32, Option<u64>, Option<u32>)> {
    if queue.backend() == Backend::Postgres {
        let rows: Vec<(i64, Option<i64>, Option<i64>)> = sqlx::query_as(
            "SELECT slot_no, job_id, attempt FROM job_queue_slot WHERE slot_key = $1 ORDER BY slot_no",
        )
        .bind(slot_key)
        .fetch_all(queue.postgres_pool().unwrap())
        .await
        .expect("read slots");
        return rows
            .into_iter()
            .map(|(no, id, a)| (no as u32, id.map(|i| i as u64), a.map(|a| a as u32)))
            .collect();
    }
    sqlx::query_as(
        "SELECT slot_no, job_id, attempt FROM job_queue_slot WHERE slot_key = ? ORDER BY slot_no",
    )
    .bind(slot_key.as_bytes())
    .fetch_all(queue.mysql_pool().unwrap())
    .await
    .expect("read slots")
}

async fn statuses(queue: &Queue, ids: &[u64]) -> Vec<JobStatus> {
    let mut out = Vec::new();
    for id in ids {
        out.push(row(queue, *id).await.status);
    }
    out
}

fn store(queue: &Queue) -> Store {
    queue.store()
}

async fn expire_lease(queue: &Queue, id: u64) {
    let sql = match queue.backend() {
        Backend::Postgres => {
            "UPDATE job_queue SET lease_until = job_queue_now() - INTERVAL '1 second' WHERE id = ?"
        }
        _ => "UPDATE job_queue SET lease_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = ?",
    };
    tests::sql_exec(queue, sql, &[tests::Arg::Int(id as i64)]).await;
}

// ---------------------------------------------------------------------------------------
// 1. The protocol: slots belong to claims, blocked jobs step aside and are woken.
// ---------------------------------------------------------------------------------------

#[job(
    name = "limits_export",
    concurrency = 1,
    concurrency_key = "account:{account}"
)]
async fn limits_export(account: u32, n: u32) {
    let _ = (account, n);
}

#[tokio::test]
async fn a_slot_belongs_to_its_claim_and_a_stale_worker_frees_nothing() {
    // MySQL only until reclaim frees slots on PostgreSQL.
    let queue = fresh_queue("limits_fence").await;
    let store = store(&queue);
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(
            queue
                .enqueue(LimitsExport { account: 7, n })
                .await
                .unwrap()
                .id(),
        );
    }

    // One claim of three: the first job takes the key's only slot; the other two step aside.
    let claimed = store.claim("default", "worker-a", 3).await.unwrap();
    assert_eq!(claimed.iter().map(|c| c.id).collect::<Vec<_>>(), [ids[0]]);
    assert!(claimed[0].holds_slot, "the worker knows to free the slot");
    assert_eq!(
        statuses(&queue, &ids).await,
        [JobStatus::Running, JobStatus::Blocked, JobStatus::Blocked]
    );
    assert_eq!(
        slots(&queue, "c:account:7").await,
        [(0, Some(ids[0]), Some(1))]
    );
    let shown = row(&queue, ids[1]).await;
    assert_eq!(
        (shown.concurrency_key.as_deref(), shown.concurrency_limit),
        (Some("account:7"), 1)
    );

    // worker-a stalls; its lease expires and reclaim takes the job back: the slot is free
    // again and the first blocked job is woken in the same transaction.
    expire_lease(&queue, ids[0]).await;
    let reclaimed = store.reclaim(10).await.unwrap();
    assert_eq!(reclaimed.ready.len(), 1);
    assert_eq!(slots(&queue, "c:account:7").await, [(0, None, None)]);
    assert_eq!(
        statuses(&queue, &ids).await,
        [JobStatus::Ready, JobStatus::Ready, JobStatus::Blocked]
    );

    // worker-b claims: the reclaimed job again (attempt 2); the woken one steps aside again.
    let claimed = store.claim("default", "worker-b", 3).await.unwrap();
    assert_eq!(
        claimed
            .iter()
            .map(|c| (c.id, c.attempt))
            .collect::<Vec<_>>(),
        [(ids[0], 2)]
    );
    assert_eq!(
        slots(&queue, "c:account:7").await,
        [(0, Some(ids[0]), Some(2))]
    );

    // The stale worker-a finishes attempt 1 every way it could: nothing is written and the
    // slot, which belongs to attempt 2, stays held.
    assert_eq!(
        store.complete("worker-a", &[(ids[0], 1)]).await.unwrap(),
        [ids[0]]
    );
    for how in [
        Finish::HandBack,
        Finish::Fail {
            error: "late".into(),
        },
    ] {
        assert_eq!(
            store.finish("worker-a", ids[0], 1, &how).await.unwrap(),
            None
        );
    }
    assert_eq!(
        slots(&queue, "c:account:7").await,
        [(0, Some(ids[0]), Some(2))]
    );
    assert_eq!(count_status(&queue, JobStatus::Running).await, 1);

    // worker-b completes: the slot frees and the first blocked job in claim order is
    // woken, then claimed.
    assert!(store
        .complete("worker-b", &[(ids[0], 2)])
        .await
        .unwrap()
        .is_empty());
    assert_eq!(slots(&queue, "c:account:7").await, [(0, None, None)]);
    assert_eq!(
        statuses(&queue, &ids).await,
        [JobStatus::Done, JobStatus::Ready, JobStatus::Blocked]
    );
    let claimed = store.claim("default", "worker-b", 3).await.unwrap();
    assert_eq!(claimed.iter().map(|c| c.id).collect::<Vec<_>>(), [ids[1]]);
}

async fn every_way_a_claim_ends_frees_its_slot_once(backend: Backend) {
    let queue = fresh_queue_on(backend, "limits_paths").await;
    let store = store(&queue);
    let ends = [
        Finish::Retry {
            delay: Duration::ZERO,
            error: "retry".into(),
        },
        Finish::Fail {
            error: "failed".into(),
        },
        Finish::Cancelled {
            error: "cancelled".into(),
        },
        Finish::HandBack,
        Finish::Defer {
            delay: Duration::ZERO,
            error: "unknown kind".into(),
            give_up_after: Duration::from_secs(3600),
        },
    ];
    for (n, how) in ends.iter().enumerate() {
        let account = 100 + n as u32;
        let key = format!("c:account:{account}");
        let first = queue
            .enqueue(LimitsExport { account, n: 0 })
            .await
            .unwrap()
            .id();
        let second = queue
            .enqueue(LimitsExport { account, n: 1 })
            .await
            .unwrap()
            .id();
        let claimed = store.claim("default", "worker-a", 2).await.unwrap();
        assert_eq!(claimed.len(), 1, "{how:?}: one job of the key at once");
        assert_eq!(row(&queue, second).await.status, JobStatus::Blocked);
        assert!(
            store
                .finish("worker-a", first, 1, how)
                .await
                .unwrap()
                .is_some(),
            "{how:?}"
        );
        assert_eq!(
            slots(&queue, &key).await,
            [(0, None, None)],
            "{how:?} frees the slot"
        );
        assert_eq!(
            row(&queue, second).await.status,
            JobStatus::Ready,
            "{how:?} wakes the next job"
        );
        // Written twice (a retried write whose first reply was lost): nothing more changes.
        assert_eq!(store.finish("worker-a", first, 1, how).await.unwrap(), None);
        // Leave nothing ready for the next round.
        tests::sql_exec(
            &queue,
            "UPDATE job_queue SET status = 'done' WHERE id IN (?, ?)",
            &[
                tests::Arg::Int(first as i64),
                tests::Arg::Int(second as i64),
            ],
        )
        .await;
    }
}

#[tokio::test]
async fn a_full_key_does_not_hold_up_the_jobs_behind_it() {
    // MySQL only until the queue statistics run on PostgreSQL.
    let queue = fresh_queue("limits_skip").await;
    let store = store(&queue);
    // Fifty jobs of one account first, then one job each of five others.
    queue
        .enqueue_many((0..50).map(|n| LimitsExport { account: 1, n }))
        .await
        .unwrap();
    queue
        .enqueue_many((2..7).map(|account| LimitsExport { account, n: 0 }))
        .await
        .unwrap();
    let claimed = store.claim("default", "worker-a", 10).await.unwrap();
    let mut accounts: Vec<u64> = claimed
        .iter()
        .map(|c| c.payload.as_ref().unwrap()["account"].as_u64().unwrap())
        .collect();
    accounts.sort();
    assert_eq!(
        accounts,
        [1, 2, 3, 4, 5, 6],
        "one job per account, the full one's waiting skipped"
    );
    assert_eq!(count_status(&queue, JobStatus::Blocked).await, 49);
    // A rate-limited or unlimited claim holds no slot that its outcome would free.
    let plain = queue
        .enqueue(LimitsMail {
            provider: "x".into(),
            n: 0,
        })
        .await
        .unwrap()
        .id();
    let claimed = store.claim("default", "worker-b", 1).await.unwrap();
    assert_eq!((claimed[0].id, claimed[0].holds_slot), (plain, false));
    let stats = queue.stats().await.unwrap();
    // Six of accounts 1 to 6, and the rate-limited one.
    assert_eq!(
        (
            stats[0].counts.blocked,
            stats[0].counts.ready,
            stats[0].counts.running,
        ),
        (49, 0, 7)
    );
    // A blocked job lists as such.
    let blocked = queue
        .list(
            &jobqueue::admin::JobFilter::default().status(JobStatus::Blocked),
            None,
            100,
        )
        .await
        .unwrap()
        .jobs;
    assert_eq!(blocked.len(), 49);
}

async fn maintenance_wakes_what_no_release_woke_and_frees_orphaned_slots(backend: Backend) {
    let queue = fresh_queue_on(backend, "limits_sweep").await;
    let store = store(&queue);
    let a = queue
        .enqueue(LimitsExport { account: 9, n: 0 })
        .await
        .unwrap()
        .id();
    let b = queue
        .enqueue(LimitsExport { account: 9, n: 1 })
        .await
        .unwrap()
        .id();
    assert_eq!(
        store.claim("default", "worker-a", 2).await.unwrap().len(),
        1
    );
    // The row becomes final by a path that does not free the slot (an operator's SQL).
    tests::sql_exec(
        &queue,
        "UPDATE job_queue SET status = 'done', lease_owner = NULL WHERE id = ?",
        &[tests::Arg::Int(a as i64)],
    )
    .await;
    assert_eq!(row(&queue, b).await.status, JobStatus::Blocked);
    assert_eq!(store.limits_pass().await.unwrap(), (1, 1));
    assert_eq!(slots(&queue, "c:account:9").await, [(0, None, None)]);
    assert_eq!(row(&queue, b).await.status, JobStatus::Ready);
    assert_eq!(
        store.limits_pass().await.unwrap(),
        (0, 0),
        "nothing left to do"
    );
}

#[tokio::test]
async fn an_enqueue_overrides_the_key_and_a_cancelled_blocked_job_is_forgotten() {
    let queue = fresh_queue("limits_override").await;
    let store = store(&queue);
    let opts = || EnqueueOptions::default().concurrency_key("tenant:shared");
    let a = queue
        .enqueue_with(LimitsExport { account: 1, n: 0 }, opts())
        .await
        .unwrap()
        .id();
    let b = queue
        .enqueue_with(LimitsExport { account: 2, n: 0 }, opts())
        .await
        .unwrap()
        .id();
    assert_eq!(
        row(&queue, b).await.concurrency_key.as_deref(),
        Some("tenant:shared")
    );
    assert_eq!(
        store.claim("default", "worker-a", 2).await.unwrap().len(),
        1
    );
    assert_eq!(row(&queue, b).await.status, JobStatus::Blocked);
    assert_eq!(
        queue.cancel(b).await.unwrap(),
        jobqueue::admin::CancelOutcome::Cancelled
    );
    assert!(store
        .complete("worker-a", &[(a, 1)])
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        row(&queue, b).await.status,
        JobStatus::Cancelled,
        "a cancelled job stays so"
    );
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue_blocked")
        .fetch_one(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    assert_eq!(
        left, 0,
        "its waiting row was dropped by the wake that found it"
    );
}

#[tokio::test]
async fn cancelled_blocked_jobs_do_not_keep_a_freed_slot_from_the_next() {
    let queue = fresh_queue("limits_cancel_many").await;
    let store = store(&queue);
    let mut ids = Vec::new();
    for n in 0..12 {
        // Jobs 4 to 7 carry a task key that the bulk cancel below selects.
        let opts = match n {
            4..=7 => EnqueueOptions::default().key(format!("bulk-{n}")),
            _ => EnqueueOptions::default(),
        };
        let job = LimitsExport { account: 5, n };
        ids.push(queue.enqueue_with(job, opts).await.unwrap().id());
    }
    let claimed = store.claim("default", "worker-a", 12).await.unwrap();
    assert_eq!(claimed.iter().map(|c| c.id).collect::<Vec<_>>(), [ids[0]]);
    let waiting = || async {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue_blocked")
            .fetch_one(queue.mysql_pool().unwrap())
            .await
            .unwrap();
        n
    };
    assert_eq!(waiting().await, 11);

    // One by one: each cancel drops its job's waiting row with it.
    for id in &ids[1..4] {
        assert_eq!(
            queue.cancel(*id).await.unwrap(),
            jobqueue::admin::CancelOutcome::Cancelled
        );
    }
    assert_eq!(waiting().await, 8);
    // In bulk, and by an operator's SQL: the next wake deletes the rows they left on its way
    // to the first job still blocked.
    let bulk = jobqueue::admin::JobFilter::default().key_prefix("bulk-");
    assert_eq!(queue.cancel_matching(&bulk).await.unwrap(), 4);
    sqlx::query("UPDATE job_queue SET status = 'cancelled', finished_at = UTC_TIMESTAMP(6) WHERE id IN (?, ?)")
        .bind(ids[8])
        .bind(ids[9])
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();

    // The running job ends: its freed slot wakes job 10 in the same transaction.
    assert!(store
        .complete("worker-a", &[(ids[0], 1)])
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        statuses(&queue, &ids[8..]).await,
        [
            JobStatus::Cancelled,
            JobStatus::Cancelled,
            JobStatus::Ready,
            JobStatus::Blocked
        ]
    );
    assert_eq!(waiting().await, 1, "only job 11 still waits");
}

/// Database upkeep, enqueued by hand; it shares its key with the periodic kind below.
#[job(
    name = "limits_maint_now",
    queue = "limits_cron",
    concurrency = 1,
    concurrency_key = "db-maint"
)]
async fn limits_maint_now(n: u32) {
    let _ = n;
}

/// The same upkeep every second.
#[job(
    name = "limits_maint_cron",
    queue = "limits_cron",
    cron = "* * * * * *",
    concurrency = 1,
    concurrency_key = "db-maint",
    rate_limit = "100/1s",
    rate_key = "db-maint-rate"
)]
async fn limits_maint_cron() {}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_periodic_tick_takes_the_limit_keys_of_its_arguments() {
    let queue = fresh_queue("limits_cron").await;
    let store = store(&queue);
    let by_hand = queue.enqueue(LimitsMaintNow { n: 0 }).await.unwrap().id();
    let claimed = store.claim("limits_cron", "worker-a", 1).await.unwrap();
    assert_eq!(claimed.iter().map(|c| c.id).collect::<Vec<_>>(), [by_hand]);

    let (handle, task) = start(
        quick_worker(&queue)
            .queues(["limits_cron"])
            .build()
            .unwrap(),
    );
    let tick: u64 = wait_for("a tick", Duration::from_secs(30), || async {
        sqlx::query_scalar("SELECT id FROM job_queue WHERE kind = ? ORDER BY id LIMIT 1")
            .bind(LimitsMaintCron::KIND)
            .fetch_optional(queue.mysql_pool().unwrap())
            .await
            .unwrap()
    })
    .await;
    let shown = row(&queue, tick).await;
    assert_eq!(
        (shown.concurrency_key.as_deref(), shown.rate_key.as_deref()),
        (Some("db-maint"), Some("db-maint-rate"))
    );
    // The job enqueued by hand holds the key's only slot: the tick waits for it.
    wait_status(&queue, tick, JobStatus::Blocked, Duration::from_secs(30)).await;
    assert_eq!(
        slots(&queue, "c:db-maint").await,
        [(0, Some(by_hand), Some(1))]
    );
    assert!(store
        .complete("worker-a", &[(by_hand, 1)])
        .await
        .unwrap()
        .is_empty());
    wait_status(&queue, tick, JobStatus::Done, Duration::from_secs(30)).await;
    stop(&handle, task).await;
}

// ---------------------------------------------------------------------------------------
// 2. Rate limits: at most N starts in any window.
// ---------------------------------------------------------------------------------------

#[job(
    name = "limits_mail",
    rate_limit = "3/400ms",
    rate_key = "provider:{provider}"
)]
async fn limits_mail(provider: String, n: u32) {
    let _ = (provider, n);
}

#[tokio::test]
async fn a_rate_limit_holds_in_every_window() {
    let queue = fresh_queue("limits_rate").await;
    let store = store(&queue);
    queue
        .enqueue_many((0..12).map(|n| LimitsMail {
            provider: "smtp".into(),
            n,
        }))
        .await
        .unwrap();
    queue
        .enqueue_many((0..3).map(|n| LimitsMail {
            provider: "other".into(),
            n,
        }))
        .await
        .unwrap();
    // Claimers with nothing else to do, and maintenance waking blocked jobs, as fast as
    // they can until every job has started (nothing completes: a start is what counts).
    let owners = ["worker-a", "worker-b", "worker-c"];
    wait_for("every job started", Duration::from_secs(30), || async {
        store.limits_pass().await.unwrap();
        for owner in owners {
            store.claim("default", owner, 5).await.unwrap();
        }
        (count_status(&queue, JobStatus::Running).await == 15).then_some(())
    })
    .await;
    // The claim wrote `updated_at`: each job's start, by the server's clock.
    let starts: Vec<(String, chrono::NaiveDateTime)> = sqlx::query_as(
        "SELECT CAST(JSON_UNQUOTE(JSON_EXTRACT(payload, '$.provider')) AS CHAR), updated_at \
         FROM job_queue ORDER BY updated_at",
    )
    .fetch_all(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    let window = chrono::Duration::milliseconds(400);
    for (provider, at) in &starts {
        let in_window = starts
            .iter()
            .filter(|(p, t)| p == provider && *t >= *at && *t < *at + window)
            .count();
        assert!(
            in_window <= 3,
            "{in_window} starts of {provider} within 400ms of {at}"
        );
    }
    let smtp: Vec<_> = starts
        .iter()
        .filter(|s| s.0 == "smtp")
        .map(|s| s.1)
        .collect();
    assert!(
        smtp[11] - smtp[0] >= window * 3,
        "12 starts at 3 per 400ms take at least 1.2s: {:?}",
        smtp[11] - smtp[0]
    );
    // The other provider had its own budget: it did not wait for smtp's windows.
    let other: Vec<_> = starts
        .iter()
        .filter(|s| s.0 == "other")
        .map(|s| s.1)
        .collect();
    // Judged by order, not by a stopwatch that a busy machine stops: all three started
    // before smtp's fourth, which had to wait for a new window.
    assert!(
        other[2] < smtp[3],
        "the other key started at once, before smtp's next window: {other:?} {smtp:?}"
    );
}

// ---------------------------------------------------------------------------------------
// 3. Workers: the limit holds over every path that ends a run.
// ---------------------------------------------------------------------------------------

#[job(
    name = "limits_paths_job",
    concurrency = 2,
    concurrency_key = "account:{account}",
    max_attempts = 2,
    backoff = "constant(10ms)",
    timeout = "5s"
)]
async fn limits_paths_job(
    ctx: JobContext,
    account: u32,
    how: String,
    effects: Data<Effects>,
) -> Result<(), JobError> {
    let key = format!("account:{account}");
    match how.as_str() {
        "fail" if ctx.attempt() == 1 => {
            record_run(&effects, &ctx, &key, Duration::from_millis(20)).await?;
            Err("failing the first attempt".into())
        }
        "panic" => {
            record_run(&effects, &ctx, &key, Duration::from_millis(20)).await?;
            panic!("the job panics");
        }
        _ => record_run(&effects, &ctx, &key, Duration::from_millis(30)).await,
    }
}

/// Shares the key, and so the limit, of [`limits_paths_job`]; times out. It has one
/// attempt, so that the end of its run is its `finished_at`, written with the release.
#[job(
    name = "limits_paths_timeout",
    concurrency = 2,
    concurrency_key = "account:{account}",
    max_attempts = 1,
    timeout = "300ms"
)]
async fn limits_paths_timeout(
    ctx: JobContext,
    account: u32,
    effects: Data<Effects>,
) -> Result<(), JobError> {
    // Records its start only: the worker ends the run at the timeout.
    let pool = effects.mysql();
    sqlx::query(
        "INSERT INTO effects (task_key, attempt, note, started_at) \
         SELECT ?, ?, ?, updated_at FROM job_queue WHERE id = ?",
    )
    .bind(ctx.task_key())
    .bind(ctx.attempt())
    .bind(format!("start account:{account}"))
    .bind(ctx.id())
    .execute(pool)
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_never_run_more_than_the_limit_of_a_key() {
    let (queue, effects_pool) = fresh_queue_with_effects("limits_workers").await;
    let hows = ["ok", "fail", "panic", "ok", "timeout", "ok"];
    let jobs: Vec<_> = (0..60)
        .map(|n| LimitsPathsJob {
            account: n % 3,
            how: hows[n as usize % hows.len()].into(),
        })
        .collect();
    // `how` repeats: the key of each job is its position, so none is a duplicate.
    let mut ids = Vec::new();
    for (n, job) in jobs.into_iter().enumerate() {
        let opts = EnqueueOptions::default().key(format!("paths-{n}"));
        let id = if job.how == "timeout" {
            let job = LimitsPathsTimeout {
                account: job.account,
            };
            queue.enqueue_with(job, opts).await
        } else {
            queue.enqueue_with(job, opts).await
        };
        ids.push(id.unwrap().id());
    }
    let url = tests::database_url(queue.mysql_pool().unwrap()).await;
    let mut workers = Vec::new();
    for i in 0..3 {
        // Each worker on its own pool, as on its own node.
        let own = Queue::connect(&url).await.unwrap();
        workers.push(start(
            quick_worker(&own)
                .data(effects_pool.clone())
                .owner(format!("limits-{i}"))
                .concurrency(8)
                .build()
                .unwrap(),
        ));
    }
    for id in &ids {
        let r = wait_for(
            &format!("job {id} to end"),
            Duration::from_secs(120),
            || async {
                let r = row(&queue, *id).await;
                matches!(r.status, JobStatus::Done | JobStatus::Failed).then_some(r)
            },
        )
        .await;
        let _ = r;
    }
    let mut conflicts = 0;
    for (handle, task) in workers {
        stop(&handle, task).await;
        conflicts += handle.metrics().conflict_retries;
    }
    let most = max_overlap(effects_pool.mysql()).await;
    eprintln!("most runs at once per key: {most:?}; conflict retries: {conflicts}");
    assert_eq!(most.len(), 3);
    for (key, n) in &most {
        assert!(*n <= 2, "{key} ran {n} jobs at once, over its limit of 2");
    }
    assert!(
        most.values().any(|n| *n == 2),
        "the limit was reached: {most:?}"
    );
    let held: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM job_queue_slot WHERE job_id IS NOT NULL")
            .fetch_one(queue.mysql_pool().unwrap())
            .await
            .unwrap();
    assert_eq!(held, 0, "every slot is free once every job has ended");
}

// A worker shutting down hands its jobs back; their slots free with them.
static SHUTDOWN_STARTED: tests::Mailbox<u64> = tests::Mailbox::new();

#[job(name = "limits_long", concurrency = 1)]
async fn limits_long(ctx: JobContext, n: u32) -> Result<(), JobError> {
    let _ = n;
    SHUTDOWN_STARTED.send(ctx.id());
    ctx.cancelled().await;
    Err("stopped by the shutdown".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_hand_back_frees_the_slot() {
    let (queue, effects_pool) = fresh_queue_with_effects("limits_shutdown").await;
    let mut started = SHUTDOWN_STARTED.open();
    let a = queue.enqueue(LimitsLong { n: 0 }).await.unwrap().id();
    let b = queue.enqueue(LimitsLong { n: 1 }).await.unwrap().id();
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .shutdown_grace(Duration::from_millis(50))
            .build()
            .unwrap(),
    );
    assert_eq!(
        tests::receive(&mut started, "a job starts", Duration::from_secs(30)).await,
        a
    );
    wait_status(&queue, b, JobStatus::Blocked, Duration::from_secs(30)).await;
    stop(&handle, task).await;
    assert_eq!(row(&queue, a).await.status, JobStatus::Ready, "handed back");
    assert_eq!(slots(&queue, "c:limits_long").await, [(0, None, None)]);
    assert_eq!(
        row(&queue, b).await.status,
        JobStatus::Ready,
        "woken by the freed slot"
    );
}

// ---------------------------------------------------------------------------------------
// 4. Fairness, and many keys on many workers.
// ---------------------------------------------------------------------------------------

#[job(
    name = "limits_fair",
    concurrency = 2,
    concurrency_key = "customer:{customer}"
)]
async fn limits_fair(
    ctx: JobContext,
    customer: u32,
    n: u32,
    effects: Data<Effects>,
) -> Result<(), JobError> {
    let _ = n;
    record_run(
        &effects,
        &ctx,
        &format!("customer:{customer}"),
        Duration::from_millis(5),
    )
    .await
}

/// One customer with a long backlog, enqueued first, and many with a few jobs each: the
/// small ones start while the big one still has most of its backlog waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_backlog_of_one_key_does_not_starve_the_others() {
    let (queue, effects_pool) = fresh_queue_with_effects("limits_fair").await;
    let (big, small_keys, per_small) = (
        env_or("LIMITS_FAIR_BIG", 1000),
        env_or("LIMITS_FAIR_KEYS", 30),
        env_or("LIMITS_FAIR_EACH", 3),
    );
    queue
        .enqueue_many((0..big).map(|n| LimitsFair { customer: 0, n }))
        .await
        .unwrap();
    queue
        .enqueue_many(
            (1..=small_keys)
                .flat_map(|c| (0..per_small).map(move |n| LimitsFair { customer: c, n })),
        )
        .await
        .unwrap();
    let total = i64::from(big + small_keys * per_small);
    let url = tests::database_url(queue.mysql_pool().unwrap()).await;
    let mut workers = Vec::new();
    for i in 0..2 {
        let own = Queue::connect(&url).await.unwrap();
        workers.push(start(
            quick_worker(&own)
                .data(effects_pool.clone())
                .owner(format!("fair-{i}"))
                .concurrency(8)
                .build()
                .unwrap(),
        ));
    }
    let small = i64::from(small_keys * per_small);
    wait_for("every small customer's job done", Duration::from_secs(300), || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM job_queue WHERE status = 'done' AND JSON_EXTRACT(payload, '$.customer') > 0",
        )
        .fetch_one(queue.mysql_pool().unwrap())
        .await
        .unwrap();
        (n == small).then_some(())
    })
    .await;
    let big_done_then: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM job_queue WHERE status = 'done' AND JSON_EXTRACT(payload, '$.customer') = 0",
    )
    .fetch_one(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    wait_for("every job done", Duration::from_secs(600), || async {
        (count_status(&queue, JobStatus::Done).await == total).then_some(())
    })
    .await;
    for (handle, task) in workers {
        stop(&handle, task).await;
    }
    // Waits from enqueue to claim of the small customers' jobs, in milliseconds.
    let mut waits: Vec<f64> = sqlx::query_scalar(
        "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, j.created_at, e.started_at) AS DOUBLE) / 1000 \
         FROM effects e JOIN job_queue j ON j.task_key = e.task_key \
         WHERE e.note LIKE 'start %' AND e.note <> 'start customer:0'",
    )
    .fetch_all(effects_pool.mysql())
    .await
    .unwrap();
    waits.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pct = |p: f64| waits[((waits.len() - 1) as f64 * p) as usize];
    eprintln!(
        "fairness: {big} jobs of one key, {small_keys} keys x {per_small}: small keys' wait \
         min {:.0} ms, median {:.0} ms, p90 {:.0} ms, max {:.0} ms; the big key had {big_done_then} of {big} done when the last small job finished",
        pct(0.0), pct(0.5), pct(0.9), pct(1.0)
    );
    assert!(
        big_done_then < i64::from(big) / 2,
        "the small customers finished while most of the big one's backlog waited ({big_done_then} of {big} done)"
    );
    let most = max_overlap(effects_pool.mysql()).await;
    assert!(most.values().all(|n| *n <= 2), "{most:?}");
}

fn env_or(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[job(name = "limits_many", concurrency = 2, concurrency_key = "k:{key}")]
async fn limits_many(
    ctx: JobContext,
    key: u32,
    n: u32,
    effects: Data<Effects>,
) -> Result<(), JobError> {
    let _ = n;
    record_run(
        &effects,
        &ctx,
        &format!("k:{key}"),
        Duration::from_millis(2),
    )
    .await
}

/// Three workers of sixteen slots over a hundred keys: every job runs, no key goes over
/// its limit, and the conflicts the store retried are counted (and few).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_sixteen_slots_a_hundred_keys() {
    let (queue, effects_pool) = fresh_queue_with_effects("limits_many").await;
    queue
        // Ten jobs of each key in a row: a claim of 16 meets a key ten times.
        .enqueue_many((0..1000).map(|n| LimitsMany { key: n / 10, n }))
        .await
        .unwrap();
    let url = tests::database_url(queue.mysql_pool().unwrap()).await;
    let mut workers = Vec::new();
    for i in 0..3 {
        let own = Queue::connect(&url).await.unwrap();
        workers.push(start(
            quick_worker(&own)
                .data(effects_pool.clone())
                .owner(format!("many-{i}"))
                .concurrency(16)
                .build()
                .unwrap(),
        ));
    }
    wait_for("1000 jobs done", Duration::from_secs(300), || async {
        (count_status(&queue, JobStatus::Done).await == 1000).then_some(())
    })
    .await;
    let mut conflicts = 0;
    let mut claimed = 0;
    for (handle, task) in workers {
        stop(&handle, task).await;
        conflicts += handle.metrics().conflict_retries;
        claimed += handle.metrics().claimed;
    }
    let most = max_overlap(effects_pool.mysql()).await;
    eprintln!("3 workers x 16 slots x 100 keys: {claimed} claims, {conflicts} conflict retries");
    assert_eq!(most.len(), 100);
    assert!(most.values().all(|n| *n <= 2), "{most:?}");
    assert_eq!(claimed, 1000, "each job claimed once");
    assert!(
        conflicts < 100,
        "{conflicts} conflict retries for 1000 jobs"
    );
}

// ---------------------------------------------------------------------------------------
// 5. Per worker, per queue.
// ---------------------------------------------------------------------------------------

#[job(name = "limits_in_queue", queue = "exports")]
async fn limits_in_queue(ctx: JobContext, n: u32, effects: Data<Effects>) -> Result<(), JobError> {
    let _ = n;
    record_run(&effects, &ctx, "queue:exports", Duration::from_millis(20)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_bound_holds_within_the_worker() {
    let (queue, effects_pool) = fresh_queue_with_effects("limits_queue").await;
    queue
        .enqueue_many((0..30).map(|n| LimitsInQueue { n }))
        .await
        .unwrap();
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .queues(["exports", "default"])
            .concurrency(10)
            .queue_concurrency("exports", 3)
            .build()
            .unwrap(),
    );
    wait_for("30 jobs done", Duration::from_secs(60), || async {
        (count_status(&queue, JobStatus::Done).await == 30).then_some(())
    })
    .await;
    stop(&handle, task).await;
    let most = max_overlap(effects_pool.mysql()).await;
    assert_eq!(most.get("queue:exports"), Some(&3), "{most:?}");
    let wrong = Worker::builder(queue.clone())
        .queues(["default"])
        .queue_concurrency("exports", 3)
        .build()
        .unwrap_err();
    assert!(
        wrong
            .to_string()
            .contains("not one of this worker's queues"),
        "{wrong}"
    );
}

// ---------------------------------------------------------------------------------------
// 6. Wakes and blocks at scale, and against concurrent claims, wakes and cancels.
// ---------------------------------------------------------------------------------------

#[job(
    name = "limits_tenant",
    concurrency = 1,
    concurrency_key = "t:{tenant}"
)]
async fn limits_tenant(tenant: u32, n: u32) {
    let _ = (tenant, n);
}

#[job(name = "limits_rate_slow", rate_limit = "1/200ms")]
async fn limits_rate_slow(n: u32) {
    let _ = n;
}

/// Claims until no job is ready (each claim takes or blocks what it reads).
async fn claim_until_none_ready(queue: &Queue, store: &Store) {
    while count_status(queue, JobStatus::Ready).await > 0 {
        store.claim("default", "worker-a", 256).await.unwrap();
    }
}

async fn rate_limited_jobs_are_woken_when_a_thousand_other_keys_are_full(backend: Backend) {
    let queue = fresh_queue_on(backend, "limits_wake_all_keys").await;
    let store = store(&queue);
    // A thousand tenants at their limit, each with a job waiting: a thousand keys with
    // blocked jobs and no free slot, all sorting before the rate key below.
    queue
        .enqueue_many((0..1000).flat_map(|tenant| (0..2).map(move |n| LimitsTenant { tenant, n })))
        .await
        .unwrap();
    claim_until_none_ready(&queue, &store).await;
    assert_eq!(count_status(&queue, JobStatus::Running).await, 1000);
    assert_eq!(count_status(&queue, JobStatus::Blocked).await, 1000);

    let first = queue.enqueue(LimitsRateSlow { n: 0 }).await.unwrap().id();
    let second = queue.enqueue(LimitsRateSlow { n: 1 }).await.unwrap().id();
    let claimed = store.claim("default", "worker-a", 2).await.unwrap();
    assert_eq!(claimed.iter().map(|c| c.id).collect::<Vec<_>>(), [first]);
    assert_eq!(row(&queue, second).await.status, JobStatus::Blocked);
    // Only maintenance wakes a rate-limited job, once its window has passed.
    wait_for(
        "the second rate-limited job to be woken and claimed",
        Duration::from_secs(30),
        || async {
            store.limits_pass().await.unwrap();
            store.claim("default", "worker-a", 10).await.unwrap();
            (row(&queue, second).await.status == JobStatus::Running).then_some(())
        },
    )
    .await;
}

#[job(name = "limits_five", concurrency = 5, concurrency_key = "five")]
async fn limits_five(n: u32) {
    let _ = n;
}

#[tokio::test]
async fn jobs_stay_ready_while_another_claim_has_their_free_slots_locked() {
    let queue = fresh_queue("limits_locked_slots").await;
    let store = store(&queue);
    // The key's five slots exist and are free.
    let first = queue.enqueue(LimitsFive { n: 0 }).await.unwrap().id();
    assert_eq!(
        store.claim("default", "worker-a", 1).await.unwrap().len(),
        1
    );
    assert!(store
        .complete("worker-a", &[(first, 1)])
        .await
        .unwrap()
        .is_empty());
    assert_eq!(slots(&queue, "c:five").await.len(), 5);
    let ids: Vec<u64> = queue
        .enqueue_many((1..=5).map(|n| LimitsFive { n }))
        .await
        .unwrap()
        .iter()
        .map(|e| e.id())
        .collect();

    // Another claim, still open, has every free slot of the key locked; it may take them
    // all, or none.
    let mut other = queue.mysql_pool().unwrap().acquire().await.unwrap();
    sqlx::query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .execute(&mut *other)
        .await
        .unwrap();
    sqlx::query("BEGIN").execute(&mut *other).await.unwrap();
    let locked = sqlx::query(
        "SELECT slot_no FROM job_queue_slot WHERE slot_key = 'c:five' AND job_id IS NULL \
         FOR UPDATE SKIP LOCKED",
    )
    .fetch_all(&mut *other)
    .await
    .unwrap();
    assert_eq!(locked.len(), 5);

    assert!(store
        .claim("default", "worker-b", 5)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        count_status(&queue, JobStatus::Blocked).await,
        0,
        "no job is blocked while its key's slots are only locked"
    );
    sqlx::query("ROLLBACK").execute(&mut *other).await.unwrap();
    drop(other);
    let mut claimed: Vec<u64> = store
        .claim("default", "worker-b", 5)
        .await
        .unwrap()
        .iter()
        .map(|c| c.id)
        .collect();
    claimed.sort();
    assert_eq!(claimed, ids, "the slots freed up: the five run");
}

/// The statements the server has run on the one connection of `pool`.
async fn questions(pool: &MySqlPool) -> u64 {
    let row = sqlx::query("SHOW SESSION STATUS LIKE 'Questions'")
        .fetch_one(pool)
        .await
        .unwrap();
    let value: String = row
        .try_get::<String, _>(1)
        .or_else(|_| {
            row.try_get::<Vec<u8>, _>(1)
                .map(|b| String::from_utf8(b).unwrap())
        })
        .unwrap();
    value.parse().unwrap()
}

#[tokio::test]
async fn a_finished_job_wakes_the_next_one_behind_thousands_of_cancelled_ones() {
    let queue = fresh_queue("limits_many_leftovers").await;
    let store = store(&queue);
    let running = queue
        .enqueue(LimitsExport { account: 1, n: 0 })
        .await
        .unwrap()
        .id();
    assert_eq!(
        store.claim("default", "worker-a", 1).await.unwrap().len(),
        1
    );
    // A thousand blocked jobs cancelled in bulk, and fifteen hundred by an operator's SQL.
    queue
        .enqueue_many((1..=1000).map(|n| LimitsExport { account: 1, n }))
        .await
        .unwrap();
    claim_until_none_ready(&queue, &store).await;
    let blocked = jobqueue::admin::JobFilter::default().status(JobStatus::Blocked);
    assert_eq!(queue.cancel_matching(&blocked).await.unwrap(), 1000);
    queue
        .enqueue_many((1001..=2500).map(|n| LimitsExport { account: 1, n }))
        .await
        .unwrap();
    claim_until_none_ready(&queue, &store).await;
    sqlx::query(
        "UPDATE job_queue SET status = 'cancelled', finished_at = UTC_TIMESTAMP(6) \
         WHERE status = 'blocked'",
    )
    .execute(queue.mysql_pool().unwrap())
    .await
    .unwrap();
    let next = queue
        .enqueue(LimitsExport {
            account: 1,
            n: 2501,
        })
        .await
        .unwrap()
        .id();
    claim_until_none_ready(&queue, &store).await;
    assert_eq!(row(&queue, next).await.status, JobStatus::Blocked);

    // The running job ends, on a store of one connection, whose statements are counted.
    let url = tests::database_url(queue.mysql_pool().unwrap()).await;
    let one = Queue::connect_with(&url, jobqueue::QueueConfig::default().max_connections(1))
        .await
        .unwrap();
    let before = questions(one.mysql_pool().unwrap()).await;
    assert!(one
        .store()
        .complete("worker-a", &[(running, 1)])
        .await
        .unwrap()
        .is_empty());
    let spent = questions(one.mysql_pool().unwrap()).await - before;
    assert_eq!(row(&queue, next).await.status, JobStatus::Ready, "woken");
    // A few statements per hundred rows left behind, not a few per row: the release runs in
    // the outcome's transaction, which has a few seconds.
    assert!(spent < 150, "{spent} statements to end one job");
    let waiting: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue_blocked")
        .fetch_one(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    assert_eq!(waiting, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_cancel_of_a_blocked_job_does_not_deadlock_with_a_wake() {
    use jobqueue_runtime::__store::statements::BLOCKED_SELECT;
    let queue = fresh_queue("limits_cancel_wake").await;
    let store = store(&queue);
    let holder = queue
        .enqueue(LimitsExport { account: 3, n: 0 })
        .await
        .unwrap()
        .id();
    let blocked = queue
        .enqueue(LimitsExport { account: 3, n: 1 })
        .await
        .unwrap()
        .id();
    assert_eq!(
        store.claim("default", "worker-a", 2).await.unwrap().len(),
        1
    );
    assert_eq!(row(&queue, blocked).await.status, JobStatus::Blocked);
    // Rows another transaction changes first, so that it weighs more than the cancel: if
    // the two deadlock, the server rolls the cancel back.
    let others: Vec<u64> = queue
        .enqueue_many((0..50).map(|n| LimitsExport { account: 4, n }))
        .await
        .unwrap()
        .iter()
        .map(|e| e.id())
        .collect();

    // A wake, as a release runs it in an outcome's transaction: the waiting row first.
    let mut wake = queue.mysql_pool().unwrap().acquire().await.unwrap();
    sqlx::query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .execute(&mut *wake)
        .await
        .unwrap();
    sqlx::query("BEGIN").execute(&mut *wake).await.unwrap();
    for id in &others {
        sqlx::query("UPDATE job_queue SET updated_at = UTC_TIMESTAMP(6) WHERE id = ?")
            .bind(id)
            .execute(&mut *wake)
            .await
            .unwrap();
    }
    let woken: Vec<u64> = sqlx::query_scalar(BLOCKED_SELECT)
        .bind(&b"c:account:3"[..])
        .bind(1u32)
        .fetch_all(&mut *wake)
        .await
        .unwrap();
    assert_eq!(woken, [blocked]);

    // The operator cancels the job meanwhile; the cancel waits for the waiting row.
    let cancel = tokio::spawn({
        let queue = queue.clone();
        async move { queue.cancel(blocked).await }
    });
    wait_for(
        "the cancel to wait for the blocked job's waiting row",
        Duration::from_secs(30),
        || async {
            let n: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                 WHERE DB = DATABASE() AND INFO LIKE 'DELETE FROM job_queue_blocked%'",
            )
            .fetch_one(queue.mysql_pool().unwrap())
            .await
            .unwrap();
            (n > 0).then_some(())
        },
    )
    .await;

    // The wake goes on to the job row and ends.
    sqlx::query("UPDATE job_queue SET status = 'ready' WHERE id = ? AND status = 'blocked'")
        .bind(blocked)
        .execute(&mut *wake)
        .await
        .unwrap();
    sqlx::query("DELETE FROM job_queue_blocked WHERE slot_key = ? AND job_id = ?")
        .bind(&b"c:account:3"[..])
        .bind(blocked)
        .execute(&mut *wake)
        .await
        .unwrap();
    sqlx::query("COMMIT").execute(&mut *wake).await.unwrap();

    let outcome = tokio::time::timeout(Duration::from_secs(30), cancel)
        .await
        .expect("the cancel ends")
        .unwrap();
    assert_eq!(outcome.unwrap(), jobqueue::admin::CancelOutcome::Cancelled);
    assert_eq!(row(&queue, blocked).await.status, JobStatus::Cancelled);
    let _ = holder;
}

#[job(
    name = "limits_both",
    concurrency = 2,
    concurrency_key = "both",
    rate_limit = "1/1h",
    rate_key = "both-rate"
)]
async fn limits_both(n: u32) {
    let _ = n;
}

#[job(name = "limits_rate_only", rate_limit = "1/1h", rate_key = "both-rate")]
async fn limits_rate_only(n: u32) {
    let _ = n;
}

#[job(name = "limits_conc_only", concurrency = 2, concurrency_key = "both")]
async fn limits_conc_only(n: u32) {
    let _ = n;
}

#[tokio::test]
async fn a_freed_slot_wakes_a_job_waiting_for_that_key() {
    let queue = fresh_queue("limits_wake_by_key").await;
    let store = store(&queue);
    // The rate key's only start of the hour is spent.
    queue.enqueue(LimitsRateOnly { n: 0 }).await.unwrap();
    assert_eq!(
        store.claim("default", "worker-a", 1).await.unwrap().len(),
        1
    );
    // Both slots of the concurrency key are held; a job needing both keys waits for it.
    let holders: Vec<u64> = queue
        .enqueue_many((0..2).map(|n| LimitsConcOnly { n }))
        .await
        .unwrap()
        .iter()
        .map(|e| e.id())
        .collect();
    assert_eq!(
        store.claim("default", "worker-a", 2).await.unwrap().len(),
        2
    );
    let both = queue.enqueue(LimitsBoth { n: 0 }).await.unwrap().id();
    assert!(store
        .claim("default", "worker-a", 1)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(row(&queue, both).await.status, JobStatus::Blocked);
    // An operator's SQL cancels it, and it is retried: it is ready again, and the row it
    // waited in is still there.
    sqlx::query("UPDATE job_queue SET status = 'cancelled' WHERE id = ?")
        .bind(both)
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    assert!(queue.retry(both).await.unwrap());
    // One holder ends and wakes a job of another queue, which takes the slot back once
    // the retried job has met the spent rate key and waits for that instead.
    let elsewhere = queue
        .enqueue_with(
            LimitsConcOnly { n: 9 },
            EnqueueOptions::default().queue("elsewhere").priority(-1),
        )
        .await
        .unwrap()
        .id();
    assert!(store
        .claim("elsewhere", "worker-a", 1)
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .complete("worker-a", &[(holders[0], 1)])
        .await
        .unwrap()
        .is_empty());
    assert_eq!(row(&queue, elsewhere).await.status, JobStatus::Ready);
    assert!(store
        .claim("default", "worker-a", 1)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(row(&queue, both).await.status, JobStatus::Blocked);
    assert_eq!(
        store.claim("elsewhere", "worker-a", 1).await.unwrap().len(),
        1
    );
    // A job of the concurrency key waits; the other holder ends: its slot wakes that job,
    // not the one waiting for the rate key.
    let waiting = queue.enqueue(LimitsConcOnly { n: 2 }).await.unwrap().id();
    assert!(store
        .claim("default", "worker-a", 1)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(row(&queue, waiting).await.status, JobStatus::Blocked);
    assert!(store
        .complete("worker-a", &[(holders[1], 1)])
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        statuses(&queue, &[waiting, both]).await,
        [JobStatus::Ready, JobStatus::Blocked]
    );
}

#[job(name = "limits_lowered", concurrency = 3, concurrency_key = "lowered")]
async fn limits_lowered(n: u32) {
    let _ = n;
}

#[tokio::test]
async fn maintenance_does_not_wake_jobs_into_slots_above_a_lowered_limit() {
    let queue = fresh_queue("limits_lowered").await;
    let store = store(&queue);
    let first = queue.enqueue(LimitsLowered { n: 0 }).await.unwrap().id();
    assert_eq!(
        store.claim("default", "worker-a", 1).await.unwrap().len(),
        1
    );
    assert_eq!(slots(&queue, "c:lowered").await.len(), 3);
    // A release lowered the key's limit to 1: the jobs enqueued since carry it.
    let ids: Vec<u64> = queue
        .enqueue_many((1..=2).map(|n| LimitsLowered { n }))
        .await
        .unwrap()
        .iter()
        .map(|e| e.id())
        .collect();
    sqlx::query("UPDATE job_queue SET concurrency_limit = 1 WHERE id IN (?, ?)")
        .bind(ids[0])
        .bind(ids[1])
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap();
    assert!(store
        .claim("default", "worker-a", 2)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        statuses(&queue, &ids).await,
        [JobStatus::Blocked, JobStatus::Blocked]
    );
    assert_eq!(
        store.limits_pass().await.unwrap(),
        (0, 0),
        "the free slots are above the jobs' limit: nothing to wake"
    );
    assert_eq!(
        statuses(&queue, &ids).await,
        [JobStatus::Blocked, JobStatus::Blocked]
    );
    // The holder ends: the one slot under the limit frees and wakes the first.
    assert!(store
        .complete("worker-a", &[(first, 1)])
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        statuses(&queue, &ids).await,
        [JobStatus::Ready, JobStatus::Blocked]
    );
}

/// Claimers racing over the jobs of a few keys with a concurrency of one, each completing
/// what it claimed: no key ever has two jobs running (read in one snapshot after every
/// claim), every job runs once, and every slot ends free.
async fn racing_claims_never_run_more_than_a_keys_limit(backend: Backend) {
    let queue = fresh_queue_on(backend, "limits_race").await;
    let mut all = Vec::new();
    for account in 0..4u32 {
        for n in 0..6u32 {
            all.push(
                queue
                    .enqueue(LimitsExport { account, n })
                    .await
                    .unwrap()
                    .id(),
            );
        }
    }
    let most_running = "SELECT COALESCE(MAX(c), 0) FROM (SELECT COUNT(*) AS c FROM job_queue \
         WHERE status = 'running' GROUP BY concurrency_key) r";
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(4));
    let mut claimers = Vec::new();
    for i in 0..4 {
        let queue = queue.clone();
        let start = start.clone();
        let all_ids = all.clone();
        claimers.push(tokio::spawn(async move {
            let store = queue.store();
            let owner = format!("racer-{i}");
            let mut ran = Vec::new();
            start.wait().await;
            let give_up = std::time::Instant::now() + Duration::from_secs(60);
            loop {
                assert!(
                    std::time::Instant::now() < give_up,
                    "jobs left undone: {:?}",
                    statuses(&queue, &all_ids).await
                );
                let claimed = store.claim("default", &owner, 3).await.expect("claim");
                let most = tests::sql_i64(&queue, most_running, &[]).await;
                assert!(most <= 1, "{most} jobs of one key running at once");
                if claimed.is_empty() {
                    let left = tests::sql_i64(
                        &queue,
                        "SELECT COUNT(*) FROM job_queue WHERE status <> 'done'",
                        &[],
                    )
                    .await;
                    if left == 0 {
                        break;
                    }
                    tokio::task::yield_now().await;
                    continue;
                }
                for c in &claimed {
                    assert!(c.holds_slot, "{c:?}");
                    ran.push(c.id);
                }
                let done: Vec<(u64, u32)> = claimed.iter().map(|c| (c.id, c.attempt)).collect();
                assert!(store
                    .complete(&owner, &done)
                    .await
                    .expect("complete")
                    .is_empty());
            }
            ran
        }));
    }
    let mut ran = Vec::new();
    for c in claimers {
        ran.extend(c.await.expect("claimer"));
    }
    ran.sort_unstable();
    all.sort_unstable();
    assert_eq!(ran, all, "every job ran once");
    for account in 0..4 {
        assert_eq!(
            slots(&queue, &format!("c:account:{account}")).await,
            [(0, None, None)]
        );
    }
    assert_eq!(
        tests::sql_i64(&queue, "SELECT COUNT(*) FROM job_queue_blocked", &[]).await,
        0
    );
}

on_every_backend!(
    racing_claims_never_run_more_than_a_keys_limit,
    every_way_a_claim_ends_frees_its_slot_once,
    maintenance_wakes_what_no_release_woke_and_frees_orphaned_slots,
    rate_limited_jobs_are_woken_when_a_thousand_other_keys_are_full,
);
