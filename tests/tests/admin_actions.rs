//! An operator's actions and figures through the queue's API, on every backend: cancel and
//! retry of one job and of the jobs matching a filter, the counts and figures per queue and
//! status, the running jobs, pause and resume, and what a prune would delete.

mod web_support;

use std::time::Duration;

use jobqueue::admin::{CancelOutcome, JobFilter};
use jobqueue::{Error, JobStatus, Queue};
use tests::{fresh_queue_on, on_every_backend, row, sql_exec, sql_i64, Arg, Backend};
use web_support::insert_job;

/// Inserts a job of `status` in queue `q`, kind `kind`; returns its id.
async fn job(queue: &Queue, q: &str, kind: &str, key: &str, status: &str) -> u64 {
    let error = (status == "failed").then_some("boom");
    insert_job(queue, q, kind, key, "{}", status, error).await
}

async fn cancel_and_retry_change_only_the_statuses_they_may(backend: Backend) {
    let queue = fresh_queue_on(backend, "admin_actions_one").await;
    let ready = job(&queue, "mail", "send", "r1", "ready").await;
    let scheduled = job(&queue, "mail", "send", "s1", "scheduled").await;
    let running = job(&queue, "mail", "send", "run1", "running").await;
    let blocked = job(&queue, "mail", "send", "b1", "blocked").await;
    let done = job(&queue, "mail", "send", "d1", "done").await;
    let failed = job(&queue, "mail", "send", "f1", "failed").await;
    sql_exec(
        &queue,
        "UPDATE job_queue SET lease_owner = 'w1', lease_until = '2020-01-01 00:00:00' WHERE id = ?",
        &[Arg::Int(running as i64)],
    )
    .await;
    sql_exec(
        &queue,
        "INSERT INTO job_queue_blocked (slot_key, priority, job_id) VALUES ('c:key', 0, ?)",
        &[Arg::Int(blocked as i64)],
    )
    .await;

    for id in [ready, scheduled, blocked] {
        assert_eq!(queue.cancel(id).await.unwrap(), CancelOutcome::Cancelled);
        let job = row(&queue, id).await;
        assert_eq!(job.status, JobStatus::Cancelled, "{id}");
        assert_eq!(
            job.last_error.as_deref(),
            Some("cancelled by an operator before it ran")
        );
        assert!(job.finished_at.is_some());
    }
    // The blocked job's waiting row went with it.
    assert_eq!(
        sql_i64(&queue, "SELECT COUNT(*) FROM job_queue_blocked", &[]).await,
        0
    );
    assert_eq!(
        queue.cancel(running).await.unwrap(),
        CancelOutcome::Requested
    );
    let job = row(&queue, running).await;
    assert_eq!(job.status, JobStatus::Running);
    assert!(job.cancel_requested);
    assert_eq!(
        queue.cancel(done).await.unwrap(),
        CancelOutcome::AlreadyFinished(JobStatus::Done)
    );
    assert!(matches!(
        queue.cancel(999_999).await,
        Err(Error::JobNotFound(_))
    ));

    // Retry: a failed or cancelled job starts afresh, with one more attempt allowed.
    sql_exec(
        &queue,
        "UPDATE job_queue SET attempts = 3, max_attempts = 3 WHERE id = ?",
        &[Arg::Int(failed as i64)],
    )
    .await;
    assert!(queue.retry(failed).await.unwrap());
    let job = row(&queue, failed).await;
    assert_eq!(job.status, JobStatus::Ready);
    assert_eq!((job.attempts, job.max_attempts), (3, 4));
    assert!(job.finished_at.is_none() && job.lease_owner.is_none());
    assert!(job.run_at <= queue.now().await.unwrap());
    assert!(queue.retry(ready).await.unwrap(), "a cancelled job");
    assert!(!queue.retry(done).await.unwrap());
    assert!(!queue.retry(running).await.unwrap());
    assert_eq!(row(&queue, done).await.status, JobStatus::Done);
    assert!(matches!(
        queue.retry(999_999).await,
        Err(Error::JobNotFound(_))
    ));
}

async fn bulk_actions_change_the_matching_jobs_and_the_figures_follow(backend: Backend) {
    let queue = fresh_queue_on(backend, "admin_actions_bulk").await;
    let mut failed_y = Vec::new();
    for i in 0..5 {
        job(&queue, "mail", "x", &format!("fx{i}"), "failed").await;
        failed_y.push(job(&queue, "mail", "y", &format!("fy{i}"), "failed").await);
        job(&queue, "mail", "x", &format!("r{i}"), "ready").await;
        job(&queue, "billing", "x", &format!("br{i}"), "ready").await;
    }
    let done = job(&queue, "mail", "x", "d1", "done").await;
    let running = job(&queue, "mail", "x", "run1", "running").await;
    sql_exec(
        &queue,
        "UPDATE job_queue SET lease_owner = 'w1', lease_until = '2020-01-01 00:00:00' WHERE id = ?",
        &[Arg::Int(running as i64)],
    )
    .await;

    let counts = |q: Option<&'static str>| {
        let queue = queue.clone();
        async move {
            let mut c = queue.counts(q).await.unwrap();
            c.sort_by_key(|(s, _)| s.as_str());
            c
        }
    };
    assert_eq!(
        counts(Some("mail")).await,
        [
            (JobStatus::Done, 1),
            (JobStatus::Failed, 10),
            (JobStatus::Ready, 5),
            (JobStatus::Running, 1)
        ]
    );
    assert_eq!(
        counts(None).await,
        [
            (JobStatus::Done, 1),
            (JobStatus::Failed, 10),
            (JobStatus::Ready, 10),
            (JobStatus::Running, 1)
        ]
    );

    // Retry the failed jobs of kind y: exactly those.
    let filter = JobFilter::default().kind("y");
    assert_eq!(queue.retry_matching(&filter).await.unwrap(), 5);
    for id in &failed_y {
        assert_eq!(row(&queue, *id).await.status, JobStatus::Ready);
    }
    assert_eq!(queue.retry_matching(&filter).await.unwrap(), 0);
    // Cancel the waiting jobs of queue billing, a few rows at a time: every one, once.
    let billing = JobFilter::default().queue("billing");
    let mut cancelled = 0;
    loop {
        let p = queue
            .cancel_matching_within(&billing, 2, Duration::from_secs(30))
            .await
            .unwrap();
        assert!(p.changed <= 2);
        cancelled += p.changed;
        if p.complete {
            break;
        }
    }
    assert_eq!(cancelled, 5);
    assert_eq!(counts(Some("billing")).await, [(JobStatus::Cancelled, 5)]);
    // Not the running or finished ones.
    assert_eq!(
        queue
            .cancel_matching(&JobFilter::default().queue("mail"))
            .await
            .unwrap(),
        10,
        "the 5 ready and the 5 retried"
    );
    assert_eq!(row(&queue, running).await.status, JobStatus::Running);
    assert_eq!(row(&queue, done).await.status, JobStatus::Done);

    // The figures per queue.
    queue.pause("billing").await.unwrap();
    queue.pause("billing").await.unwrap();
    queue.pause("idle").await.unwrap();
    assert_eq!(queue.paused_queues().await.unwrap(), ["billing", "idle"]);
    let stats = queue.stats().await.unwrap();
    let names: Vec<&str> = stats.iter().map(|s| s.queue.as_str()).collect();
    assert_eq!(names, ["billing", "idle", "mail"]);
    let mail = &stats[2];
    assert!(!mail.paused && stats[0].paused && stats[1].paused);
    assert_eq!(mail.counts.failed, 5);
    assert_eq!(mail.counts.cancelled, 10);
    assert_eq!(mail.counts.running, 1);
    assert_eq!(mail.expired_leases, 1, "the running job's lease is over");
    assert_eq!(mail.failed_last_hour, 5);
    assert_eq!(mail.done_last_minute, 1);
    assert_eq!(mail.oldest_ready_secs, None, "no job is ready");
    queue.resume("idle").await.unwrap();
    assert_eq!(queue.paused_queues().await.unwrap(), ["billing"]);

    // The running jobs, with their owners.
    let running_jobs = queue.running(Some("mail"), 10).await.unwrap();
    assert_eq!(running_jobs.len(), 1);
    assert_eq!(running_jobs[0].id, running);
    assert_eq!(running_jobs[0].lease_owner, "w1");
    assert!(running_jobs[0].lease_left_secs < 0.0);
    assert!(queue.running(Some("billing"), 10).await.unwrap().is_empty());

    // What a prune would delete: the finished jobs older than the retention.
    assert_eq!(
        queue
            .prunable(JobStatus::Done, Duration::from_secs(3600))
            .await
            .unwrap(),
        0
    );
    sql_exec(
        &queue,
        "UPDATE job_queue SET finished_at = '2020-01-01 00:00:00' WHERE id = ?",
        &[Arg::Int(done as i64)],
    )
    .await;
    assert_eq!(
        queue
            .prunable(JobStatus::Done, Duration::from_secs(3600))
            .await
            .unwrap(),
        1
    );
}

async fn the_dashboard_figures_read_workers_schedules_and_throughput(backend: Backend) {
    let queue = fresh_queue_on(backend, "admin_actions_figures").await;
    let failed = job(&queue, "mail", "send", "f1", "failed").await;
    job(&queue, "mail", "send", "d1", "done").await;
    job(&queue, "mail", "send", "d2", "done").await;
    job(&queue, "billing", "charge", "c1", "cancelled").await;
    job(&queue, "billing", "charge", "r1", "ready").await;
    let long_error = "e".repeat(400);
    sql_exec(
        &queue,
        "UPDATE job_queue SET last_error = ? WHERE id = ?",
        &[Arg::Text(&long_error), Arg::Int(failed as i64)],
    )
    .await;
    sql_exec(
        &queue,
        "INSERT INTO job_queue_worker (owner, host, pid, version, queues, concurrency, running, \
           started_at, last_seen) VALUES \
         ('app-1:1:aa', 'app-1', 11, '0.3.0', 'mail,billing', 8, 2, '2020-01-01 00:00:00', \
           '2020-01-01 00:00:00')",
        &[],
    )
    .await;
    sql_exec(
        &queue,
        "INSERT INTO job_queue_cron (kind, last_tick, last_job_id, updated_at, schedule) \
         VALUES ('nightly', '2026-01-01 00:00:00', ?, '2026-01-01 00:00:00', '0 3 * * *')",
        &[Arg::Int(failed as i64)],
    )
    .await;

    // A worker silent since 2020 is shown, gone.
    let workers = queue.workers().await.unwrap();
    assert_eq!(workers.len(), 1);
    let w = &workers[0];
    assert_eq!(
        (w.owner.as_str(), w.host.as_str(), w.pid),
        ("app-1:1:aa", "app-1", 11)
    );
    assert_eq!(w.queues, ["mail", "billing"]);
    assert_eq!((w.concurrency, w.running), (8, 2));
    assert!(w.gone && !w.maintains);
    assert!(w.seen_secs_ago > 86_400.0);

    // A schedule with its latest job, whose error is cut.
    let periodic = queue.periodic_jobs().await.unwrap();
    assert_eq!(periodic.len(), 1);
    let p = &periodic[0];
    assert_eq!(p.kind, "nightly");
    assert_eq!(p.schedule.as_deref(), Some("0 3 * * *"));
    assert_eq!(p.last_job_id, Some(failed));
    assert_eq!(p.last_job_status, Some(JobStatus::Failed));
    assert_eq!(p.last_job_error.as_deref().map(str::len), Some(300));
    assert!(p.next_tick.is_some_and(|t| t > p.last_tick));

    // The overview: every queue with a job, the finished jobs counted now.
    let overview = queue.queue_overview().await.unwrap();
    let names: Vec<&str> = overview.iter().map(|q| q.queue.as_str()).collect();
    assert_eq!(names, ["billing", "mail"]);
    assert_eq!(overview[0].counts.cancelled, 1);
    assert_eq!(overview[1].counts.done, 2);

    // The jobs finished in the last hour, per minute and queue.
    let minutes = queue.throughput(60).await.unwrap();
    let done: u64 = minutes
        .iter()
        .filter(|m| m.queue == "mail")
        .map(|m| m.done)
        .sum();
    let failed_n: u64 = minutes
        .iter()
        .filter(|m| m.queue == "mail")
        .map(|m| m.failed)
        .sum();
    assert_eq!((done, failed_n), (2, 1), "{minutes:?}");
    assert!(minutes.iter().all(|m| m.minutes_ago < 60));

    // Counts over a filter, exact and capped.
    let mail = JobFilter::default().queue("mail");
    assert_eq!(queue.count(&mail).await.unwrap(), 3);
    assert_eq!(queue.count_capped(&mail, 1).await.unwrap(), 2);
    assert_eq!(
        queue
            .count(&JobFilter::default().status(JobStatus::Done))
            .await
            .unwrap(),
        2
    );

    // A metadata member: a string or a number, as its text.
    sql_exec(
        &queue,
        "UPDATE job_queue SET metadata = '{\"tenant\": \"acme\", \"n\": 42}' WHERE id = ?",
        &[Arg::Int(failed as i64)],
    )
    .await;
    for (key, value, expected) in [
        ("tenant", "acme", vec![failed]),
        ("n", "42", vec![failed]),
        ("tenant", "other", vec![]),
        ("missing", "acme", vec![]),
    ] {
        let page = queue
            .list(&JobFilter::default().meta(key, value), None, 10)
            .await
            .unwrap();
        let ids: Vec<u64> = page.jobs.iter().map(|j| j.id).collect();
        assert_eq!(ids, expected, "{key} = {value}");
    }

    // One job for a person: its large columns capped, its error whole below the cap.
    let detail = queue.job_detail(failed).await.unwrap().expect("the job");
    assert_eq!(detail.status, JobStatus::Failed);
    assert_eq!(detail.last_error.as_ref().map(|e| e.bytes), Some(400));
    assert_eq!(detail.payload.text, "{}");
    assert!(queue.job_detail(999_999).await.unwrap().is_none());
}

on_every_backend!(
    cancel_and_retry_change_only_the_statuses_they_may,
    bulk_actions_change_the_matching_jobs_and_the_figures_follow,
    the_dashboard_figures_read_workers_schedules_and_throughput,
);
