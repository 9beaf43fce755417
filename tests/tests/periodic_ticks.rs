//! Periodic (cron) jobs in one process: they run each tick once, whatever happens to the
//! tick's row, and never in a burst. Ticks across processes are in `periodic_processes.rs`.
//!
//! Every worker of this binary schedules every periodic kind in it, into the test's own
//! database. So each test's kinds live in a queue of their own, which only that test's
//! workers serve: the other tests' ticks wait there unclaimed and change nothing.

use std::time::Duration;

use jobqueue::cron::tick_key;
use jobqueue::{job, Backend, Data, Job, JobContext, JobError, JobStatus, Queue};
use sqlx::types::chrono::{DateTime, NaiveDateTime, TimeZone, Utc};
use tests::{
    all_effects, effects_of, fresh_queue_with_effects_on, quick_worker, record_effect_in, sql_exec,
    sql_i64, start, stop, wait_for, Arg, Effects,
};

/// How long a test waits for a tick of a schedule that fires every few seconds.
const PATIENCE: Duration = Duration::from_secs(40);

/// Whether a tick of the schedule `expr` falls within ten minutes of the database's now,
/// either side. A test that asserts which ticks of a monthly or yearly kind exist cannot
/// tell the ticks it means from one that falls during its own run; it does not run then.
async fn a_tick_is_near(queue: &Queue, expr: &str) -> bool {
    let now = queue.now().await.expect("the database's now");
    let margin = chrono::TimeDelta::minutes(10);
    let schedule = jobqueue::cron::Schedule::parse(expr).expect("a schedule");
    let near = schedule
        .next_after(now - margin)
        .is_some_and(|tick| tick <= now + margin);
    if near {
        println!("not run: a tick of `{expr}` falls within ten minutes of {now}");
    }
    near
}

/// The effects of every job whose key starts with `kind@`, as (task_key, note), by order.
async fn tick_effects(effects: &Effects, kind: &str) -> Vec<(String, String)> {
    let prefix = format!("{kind}@");
    all_effects(effects)
        .await
        .into_iter()
        .filter(|e| e.0.starts_with(&prefix))
        .map(|(key, _, note)| (key, note))
        .collect()
}

/// The rows of `kind`: (task_key, run_at, status), by run_at.
async fn tick_rows(queue: &Queue, kind: &str) -> Vec<(String, NaiveDateTime, String)> {
    match queue.backend() {
        Backend::Postgres => sqlx::query_as(
            "SELECT task_key::text, run_at, status FROM job_queue WHERE kind = $1 ORDER BY run_at",
        )
        .bind(kind)
        .fetch_all(queue.postgres_pool().unwrap())
        .await
        .expect("read tick rows"),
        _ => sqlx::query_as(
            "SELECT CAST(task_key AS CHAR), run_at, CAST(status AS CHAR) FROM job_queue \
             WHERE kind = ? ORDER BY run_at",
        )
        .bind(kind)
        .fetch_all(queue.mysql_pool().unwrap())
        .await
        .expect("read tick rows"),
    }
}

/// Waits until the job of `key` has recorded a `done` effect.
async fn wait_done(effects: &Effects, key: &str) {
    wait_for(&format!("tick {key} to run"), PATIENCE, || async {
        let done = effects_of(effects, key).await;
        done.iter().any(|e| e.1 == "done").then_some(())
    })
    .await
}

/// The first tick of `kind` that runs, as (key, tick).
async fn first_tick(queue: &Queue, effects: &Effects, kind: &str) -> (String, DateTime<Utc>) {
    let key = wait_for(&format!("a tick of {kind} to run"), PATIENCE, || async {
        tick_effects(effects, kind)
            .await
            .first()
            .map(|e| e.0.clone())
    })
    .await;
    let rows = tick_rows(queue, kind).await;
    let row = rows.iter().find(|r| r.0 == key).expect("the tick's row");
    (key, row.1.and_utc())
}

/// Counts of each key in `effects`, for the ones seen more than once.
fn repeated(effects: &[(String, String)]) -> Vec<(String, usize)> {
    let mut keys: Vec<&str> = effects.iter().map(|e| e.0.as_str()).collect();
    keys.sort_unstable();
    let mut out = Vec::new();
    for k in &keys {
        let n = keys.iter().filter(|x| *x == k).count();
        if n > 1 && !out.iter().any(|(o, _)| o == k) {
            out.push(((*k).to_owned(), n));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// A tick whose row was pruned does not run again
// ---------------------------------------------------------------------------------------

/// Every ten seconds, so that its latest tick stays the same while workers restart.
#[job(
    name = "hc_pruned_every_10s",
    queue = "hc_pruned",
    cron = "*/10 * * * * *"
)]
async fn pruned_every_10s(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "done").await
}

async fn a_pruned_tick_does_not_run_again_when_a_worker_restarts(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "hc_pruned").await;
    let kind = PrunedEvery10s::KIND;
    let worker = || {
        quick_worker(&queue)
            .data(effects.clone())
            .queues(["hc_pruned"])
            .build()
            .expect("build")
    };

    let (handle, task) = start(worker());
    let (key, tick) = first_tick(&queue, &effects, kind).await;
    stop(&handle, task).await;
    // What retention does after a week, or an operator's `jobqueue prune` at once.
    let pruned = queue.prune(JobStatus::Done, Duration::ZERO).await.unwrap();
    assert!(pruned >= 1, "the tick's row was pruned");

    // A restart, twice over: each new worker's passes see the tick's row gone.
    for round in 0..2 {
        let (handle, task) = start(worker());
        let next = tick + Duration::from_secs(10 * (round + 1));
        wait_done(&effects, &tick_key(kind, next)).await;
        stop(&handle, task).await;
    }

    let rows = tick_rows(&queue, kind).await;
    assert!(
        rows.iter().all(|r| r.0 != key),
        "tick {key} was enqueued again after its row was pruned: {rows:?}"
    );
    let runs = tick_effects(&effects, kind).await;
    assert_eq!(
        runs.iter().filter(|e| e.0 == key).count(),
        1,
        "tick {key} ran more than once: {runs:?}"
    );
    assert!(repeated(&runs).is_empty(), "{runs:?}");
}

// ---------------------------------------------------------------------------------------
// Several workers starting at once: each tick one job, the pruned one none
// ---------------------------------------------------------------------------------------

#[job(
    name = "hc_together_every_5s",
    queue = "hc_together",
    cron = "*/5 * * * * *"
)]
async fn together_every_5s(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "done").await
}

async fn workers_starting_at_once_after_a_purge_run_each_tick_once(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "hc_together").await;
    let kind = TogetherEvery5s::KIND;
    let worker = || {
        quick_worker(&queue)
            .data(effects.clone())
            .queues(["hc_together"])
            .build()
            .expect("build")
    };

    let (handle, task) = start(worker());
    let (key, tick) = first_tick(&queue, &effects, kind).await;
    stop(&handle, task).await;
    queue.prune(JobStatus::Done, Duration::ZERO).await.unwrap();

    // Three workers (three nodes, as far as the database can tell) start together.
    let workers: Vec<_> = (0..3).map(|_| start(worker())).collect();
    let later: Vec<String> = (1..=2)
        .map(|i| tick_key(kind, tick + Duration::from_secs(5 * i)))
        .collect();
    for k in &later {
        wait_done(&effects, k).await;
    }
    for (handle, task) in workers {
        stop(&handle, task).await;
    }

    let rows = tick_rows(&queue, kind).await;
    assert!(
        rows.iter().all(|r| r.0 != key),
        "tick {key} was enqueued again: {rows:?}"
    );
    // The ticks after it: consecutive, one row each (the key is unique), one run each.
    for pair in rows.windows(2) {
        assert_eq!((pair[1].1 - pair[0].1).num_seconds(), 5, "{rows:?}");
    }
    let runs = tick_effects(&effects, kind).await;
    assert!(repeated(&runs).is_empty(), "a tick ran twice: {runs:?}");
    assert_eq!(runs.iter().filter(|e| e.0 == key).count(), 1, "{runs:?}");
    for k in &later {
        assert!(runs.iter().any(|e| &e.0 == k), "{k} did not run: {runs:?}");
    }
}

// ---------------------------------------------------------------------------------------
// A new periodic kind gets no back-dated tick
// ---------------------------------------------------------------------------------------

/// Monthly: its latest tick, the 1st at midnight, is in the past whenever the test runs.
#[job(name = "hc_fresh_monthly", queue = "hc_fresh", cron = "0 0 0 1 * *")]
async fn fresh_monthly(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "done").await
}

/// Every second: its runs show that the scheduler has made its passes. Its name sorts after
/// the monthly kind's, so each pass deals with the monthly kind first.
#[job(name = "hc_fresh_second", queue = "hc_fresh", cron = "* * * * * *")]
async fn fresh_second(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "done").await
}

/// Waits until `n` more ticks of the every-second kind ran: by then the scheduler has made
/// at least `n - 1` full passes over every kind.
async fn wait_passes(effects: &Effects, n: usize) {
    let before = tick_effects(effects, FreshSecond::KIND).await.len();
    wait_for("passes of the scheduler", PATIENCE, || async {
        (tick_effects(effects, FreshSecond::KIND).await.len() >= before + n).then_some(())
    })
    .await;
}

async fn a_new_periodic_kind_gets_no_back_dated_tick(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "hc_fresh").await;
    // The monthly kind's schedule.
    if a_tick_is_near(&queue, "0 0 0 1 * *").await {
        return;
    }
    let worker = || {
        quick_worker(&queue)
            .data(effects.clone())
            .queues(["hc_fresh"])
            .build()
            .expect("build")
    };

    // Deployed for the first time, some day after the 1st.
    let (handle, task) = start(worker());
    wait_passes(&effects, 3).await;
    stop(&handle, task).await;
    let rows = tick_rows(&queue, FreshMonthly::KIND).await;
    assert!(
        rows.is_empty(),
        "a monthly kind deployed today ran the tick of the 1st at once: {rows:?}"
    );

    // An operator deletes the kind's schedule row: the kind starts afresh, again with no
    // back-dated tick.
    let deleted = sql_exec(
        &queue,
        "DELETE FROM job_queue_cron WHERE kind = ?",
        &[Arg::Text(FreshMonthly::KIND)],
    )
    .await;
    assert_eq!(deleted, 1, "the kind's schedule row");
    let (handle, task) = start(worker());
    wait_passes(&effects, 3).await;
    stop(&handle, task).await;
    let rows = tick_rows(&queue, FreshMonthly::KIND).await;
    assert!(rows.is_empty(), "{rows:?}");
    assert!(tick_effects(&effects, FreshMonthly::KIND).await.is_empty());
}

// ---------------------------------------------------------------------------------------
// A yearly kind whose workers were down for over a year runs its latest tick once
// ---------------------------------------------------------------------------------------

#[job(name = "hc_yearly", queue = "hc_yearly", cron = "0 0 0 1 1 *")]
async fn yearly(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "done").await
}

#[job(name = "hc_yearly_second", queue = "hc_yearly", cron = "* * * * * *")]
async fn yearly_second(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "done").await
}

async fn a_yearly_kind_idle_for_years_runs_its_latest_missed_tick_once(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "hc_yearly").await;
    // The yearly kind's schedule: across New Year, "this year" would change under the test.
    if a_tick_is_near(&queue, "0 0 0 1 1 *").await {
        return;
    }
    let year: i32 = queue
        .now()
        .await
        .unwrap()
        .format("%Y")
        .to_string()
        .parse()
        .unwrap();
    // The kind last ticked on a New Year's Day more than two years ago; every tick since
    // was missed. Only the latest, this year's (which may be over 300 days back), runs.
    let long_ago = Utc
        .with_ymd_and_hms(year - 3, 1, 1, 0, 0, 0)
        .unwrap()
        .naive_utc();
    // The times as literals, which both databases read as times.
    let recorded = sql_exec(
        &queue,
        &format!(
            "INSERT INTO job_queue_cron (kind, last_tick, last_job_id, updated_at) \
             VALUES (?, '{long_ago}', NULL, '{long_ago}')"
        ),
        &[Arg::Text(Yearly::KIND)],
    )
    .await;
    assert_eq!(recorded, 1, "the kind's tick of three years ago");
    let this_year = Utc.with_ymd_and_hms(year, 1, 1, 0, 0, 0).unwrap();
    let key = tick_key(Yearly::KIND, this_year);

    for _ in 0..2 {
        let (handle, task) = start(
            quick_worker(&queue)
                .data(effects.clone())
                .queues(["hc_yearly"])
                .build()
                .expect("build"),
        );
        wait_done(&effects, &key).await;
        // More passes, which must not enqueue anything more for the yearly kind.
        let before = tick_effects(&effects, YearlySecond::KIND).await.len();
        wait_for("passes of the scheduler", PATIENCE, || async {
            (tick_effects(&effects, YearlySecond::KIND).await.len() >= before + 3).then_some(())
        })
        .await;
        stop(&handle, task).await;
    }
    let rows = tick_rows(&queue, Yearly::KIND).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].0, key);
    assert_eq!(tick_effects(&effects, Yearly::KIND).await.len(), 1);
}

// ---------------------------------------------------------------------------------------
// Pausing a queue across many ticks: at most one of them runs after `resume`
// ---------------------------------------------------------------------------------------

#[job(name = "hc_paused_default", queue = "hc_paused", cron = "* * * * * *")]
async fn paused_default(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "done").await
}

#[job(
    name = "hc_paused_overlap",
    queue = "hc_paused",
    cron = "* * * * * *",
    overlap = true
)]
async fn paused_overlap(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "done").await
}

async fn a_paused_queue_runs_at_most_one_missed_tick_when_resumed(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "hc_paused").await;
    let kinds = [PausedDefault::KIND, PausedOverlap::KIND];
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects.clone())
            .queues(["hc_paused"])
            .build()
            .expect("build"),
    );
    for kind in kinds {
        first_tick(&queue, &effects, kind).await;
    }

    queue.pause("hc_paused").await.unwrap();
    let paused_at = queue.now().await.unwrap().naive_utc();
    // Eight ticks of each kind fall due while the queue is paused: longer than the
    // catch-up window (5 s), so they count as missed.
    wait_for("eight seconds of pause", PATIENCE, || async {
        let now = queue.now().await.unwrap().naive_utc();
        ((now - paused_at).num_milliseconds() >= 8_000).then_some(())
    })
    .await;
    queue.resume("hc_paused").await.unwrap();
    let resumed_at = queue.now().await.unwrap().naive_utc();
    // The schedule goes on after the resume: a tick after it runs, for each kind.
    wait_for("a tick after the resume", PATIENCE, || async {
        for kind in kinds {
            let rows = tick_rows(&queue, kind).await;
            if !rows.iter().any(|r| r.1 > resumed_at && r.2 == "done") {
                return None;
            }
        }
        Some(())
    })
    .await;
    stop(&handle, task).await;

    for kind in kinds {
        let rows = tick_rows(&queue, kind).await;
        // Ticks that fell due while the queue was paused (a tick of the moment of the pause
        // may have been enqueued just before it took effect).
        let missed: Vec<_> = rows
            .iter()
            .filter(|r| (r.1 - paused_at).num_milliseconds() > 1_000 && r.1 <= resumed_at)
            .collect();
        assert!(
            missed.len() <= 1,
            "{kind}: {} ticks of the pause were enqueued: {missed:?}",
            missed.len()
        );
        let runs = tick_effects(&effects, kind).await;
        assert!(repeated(&runs).is_empty(), "{runs:?}");
    }
}

// ---------------------------------------------------------------------------------------
// A tick is skipped while the previous tick's job still runs
// ---------------------------------------------------------------------------------------

/// Every second, but each run takes 2.5 s.
#[job(name = "hc_slow", queue = "hc_slow", cron = "* * * * * *")]
async fn slow_tick(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "start").await?;
    // The work itself, not a synchronisation: it outlasts two periods.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    record_effect_in(&effects, &ctx, "done").await
}

async fn a_tick_is_skipped_while_the_previous_one_still_runs(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "hc_slow").await;
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects.clone())
            .queues(["hc_slow"])
            .concurrency(4)
            .build()
            .expect("build"),
    );
    wait_for("three runs of the slow kind", PATIENCE, || async {
        let done = tick_effects(&effects, SlowTick::KIND)
            .await
            .iter()
            .filter(|e| e.1 == "done")
            .count();
        (done >= 3).then_some(())
    })
    .await;
    stop(&handle, task).await;

    // Runs follow each other: every start comes after the previous run's end.
    let runs = tick_effects(&effects, SlowTick::KIND).await;
    let mut running: Option<&str> = None;
    for (key, note) in &runs {
        match (note.as_str(), running) {
            ("start", None) => running = Some(key),
            ("done", Some(k)) if k == key => running = None,
            _ => panic!("{key} {note} while {running:?} runs: {runs:?}"),
        }
    }
    // The ticks in between were not enqueued at all.
    let rows = tick_rows(&queue, SlowTick::KIND).await;
    for pair in rows.windows(2) {
        assert!(
            (pair[1].1 - pair[0].1).num_seconds() >= 2,
            "a tick was enqueued while the previous one ran: {rows:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// A slow maintenance pass does not collapse dense ticks
// ---------------------------------------------------------------------------------------

#[job(name = "hc_dense", queue = "hc_dense", cron = "* * * * * *")]
async fn dense_tick(ctx: JobContext) -> Result<(), JobError> {
    let _ = ctx;
    Ok(())
}

/// The test's open transaction, on either database.
enum Holder {
    MySql(sqlx::Transaction<'static, sqlx::MySql>),
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
}

/// Another session holds the gauges' refresh row, so the maintenance pass that refreshes
/// them waits, for as long as the test holds it: longer than the 5 s catch-up window. The
/// per-second kind's ticks must keep coming meanwhile, each second once; a scheduler that
/// ran inside that pass would find them past the window and keep only the latest.
async fn a_slow_maintenance_pass_does_not_collapse_dense_ticks(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "hc_dense").await;
    // On a pool of the test's own: the worker's maintenance waits on the lock with one of
    // the queue's two connections.
    let lock = "SELECT id FROM job_queue_gauge_refresh WHERE id = 1 FOR UPDATE";
    let holder = match &effects {
        Effects::Postgres(pool) => {
            let mut tx = pool.begin().await.expect("begin");
            sqlx::query(lock)
                .fetch_one(&mut *tx)
                .await
                .expect("lock the gauges' refresh row");
            Holder::Postgres(tx)
        }
        Effects::MySql(pool) => {
            let mut tx = pool.begin().await.expect("begin");
            sqlx::query(lock)
                .fetch_one(&mut *tx)
                .await
                .expect("lock the gauges' refresh row");
            Holder::MySql(tx)
        }
    };
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects.clone())
            .queues(["hc_dense"])
            .build()
            .expect("build"),
    );
    // The session of the pass, waiting on its UPDATE (PostgreSQL: for the row lock).
    let waiting = |queue: Queue| async move {
        let sql = match queue.backend() {
            Backend::Postgres => {
                "SELECT COUNT(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock' \
                 AND query LIKE 'UPDATE job_queue_gauge_refresh%'"
            }
            _ => {
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                 WHERE DB = DATABASE() AND INFO LIKE 'UPDATE job_queue_gauge_refresh%'"
            }
        };
        (sql_i64(&queue, sql, &[]).await == 1).then_some(())
    };
    wait_for("the gauges' refresh to wait", PATIENCE, || {
        waiting(queue.clone())
    })
    .await;
    wait_for(
        "seven ticks while the maintenance pass waits",
        Duration::from_secs(15),
        || async { (tick_rows(&queue, DenseTick::KIND).await.len() >= 7).then_some(()) },
    )
    .await;
    // The pass is still waiting: the ticks did not come from it.
    wait_for(
        "the gauges' refresh to still wait",
        Duration::from_secs(1),
        || waiting(queue.clone()),
    )
    .await;
    match holder {
        Holder::MySql(tx) => tx.rollback().await,
        Holder::Postgres(tx) => tx.rollback().await,
    }
    .expect("rollback");
    stop(&handle, task).await;
    let rows = tick_rows(&queue, DenseTick::KIND).await;
    for pair in rows.windows(2) {
        assert_eq!(
            (pair[1].1 - pair[0].1).num_seconds(),
            1,
            "a tick was skipped or repeated: {rows:?}"
        );
    }
}

tests::on_every_backend!(
    a_pruned_tick_does_not_run_again_when_a_worker_restarts,
    workers_starting_at_once_after_a_purge_run_each_tick_once,
    a_new_periodic_kind_gets_no_back_dated_tick,
    a_yearly_kind_idle_for_years_runs_its_latest_missed_tick_once,
    a_paused_queue_runs_at_most_one_missed_tick_when_resumed,
    a_tick_is_skipped_while_the_previous_one_still_runs,
    a_slow_maintenance_pass_does_not_collapse_dense_ticks,
);
