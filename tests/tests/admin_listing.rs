//! `Queue::list` pages: a listing of one status goes by the job's time in that status
//! (finished jobs newest first, waiting ones next to run first, running ones by lease
//! expiry), and its cursor shows every job that stays in the status exactly once, also when
//! jobs share a time and when others change status between two pages.

use std::collections::BTreeSet;

use jobqueue::admin::{JobCursor, JobFilter};
use jobqueue::{Error, JobStatus, Queue};
use tests::{fresh_queue_on, on_every_backend, sql_exec, Arg, Backend};

/// Inserts one job of `status` in `queue` whose time in that status is `secs` seconds from
/// now (run_at, lease_until or finished_at); returns its id.
async fn insert(queue: &Queue, name: &str, status: JobStatus, secs: i64) -> u64 {
    // Whole seconds from one fixed instant, so that jobs given the same `secs` share their
    // time exactly.
    match queue.backend() {
        Backend::Postgres => {
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, run_at, \
                   lease_owner, lease_until, finished_at) \
                 SELECT $1, 'k', 'list:' || gen_random_uuid(), '{}', $2, 1, \
                   CASE WHEN $2 IN ('scheduled', 'ready', 'blocked') THEN t \
                     ELSE t - INTERVAL '1 hour' END, \
                   CASE WHEN $2 = 'running' THEN 'w' END, CASE WHEN $2 = 'running' THEN t END, \
                   CASE WHEN $2 IN ('done', 'failed', 'cancelled') THEN t END \
                 FROM (SELECT TIMESTAMP '2030-01-01 00:00:00' + $3 * INTERVAL '1 second' AS t) x \
                 RETURNING id",
            )
            .bind(name)
            .bind(status.as_str())
            .bind(secs)
            .fetch_one(queue.postgres_pool().unwrap())
            .await
            .expect("insert a job");
            id as u64
        }
        _ => sqlx::query(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, run_at, \
               lease_owner, lease_until, finished_at) \
             SELECT ?, 'k', CONCAT('list:', UUID()), '{}', ?, 1, \
               IF(? IN ('scheduled', 'ready', 'blocked'), t, t - INTERVAL 1 HOUR), \
               IF(? = 'running', 'w', NULL), IF(? = 'running', t, NULL), \
               IF(? IN ('done', 'failed', 'cancelled'), t, NULL) \
             FROM (SELECT TIMESTAMP('2030-01-01 00:00:00') + INTERVAL ? SECOND AS t) x",
        )
        .bind(name)
        .bind(status.as_str())
        .bind(status.as_str())
        .bind(status.as_str())
        .bind(status.as_str())
        .bind(status.as_str())
        .bind(secs)
        .execute(queue.mysql_pool().unwrap())
        .await
        .expect("insert a job")
        .last_insert_id(),
    }
}

/// Every page of `filter`, `limit` jobs at a time, as ids in the order shown.
async fn all_pages(queue: &Queue, filter: &JobFilter, limit: u32) -> Vec<u64> {
    let mut ids = Vec::new();
    let mut cursor: Option<JobCursor> = None;
    loop {
        let page = queue
            .list(filter, cursor.as_ref(), limit)
            .await
            .expect("a page");
        assert!(page.jobs.len() <= limit as usize);
        ids.extend(page.jobs.iter().map(|j| j.id));
        // A cursor that does not move past its page would page forever.
        assert!(ids.len() <= 200, "the pages repeat jobs: {ids:?}");
        match page.next {
            // The cursor goes through its text, as the dashboard's links and the command
            // line carry it.
            Some(next) => cursor = Some(next.to_string().parse().expect("cursor text")),
            None => return ids,
        }
    }
}

fn newest_first(status: JobStatus) -> bool {
    matches!(
        status,
        JobStatus::Done | JobStatus::Failed | JobStatus::Cancelled
    )
}

async fn each_status_pages_in_its_order_with_every_job_once(backend: Backend) {
    let queue = fresh_queue_on(backend, "list_order").await;
    // Per status 23 jobs, inserted out of time order, four to a time: ids and times disagree,
    // and page ends fall inside a group of equal times.
    let mut expected = Vec::new();
    for status in JobStatus::ALL {
        let mut jobs = Vec::new();
        for i in 0..23i64 {
            let secs = ((i * 7) % 23) / 4 * 60;
            jobs.push((secs, insert(&queue, "q", status, secs).await));
        }
        jobs.sort();
        if newest_first(status) {
            jobs.reverse();
        }
        expected.push((
            status,
            jobs.into_iter().map(|(_, id)| id).collect::<Vec<_>>(),
        ));
    }
    for (status, ids) in &expected {
        for limit in [1, 3, 4, 50] {
            let shown = all_pages(&queue, &JobFilter::default().status(*status), limit).await;
            assert_eq!(&shown, ids, "{status} jobs, {limit} a page");
            // With the queue too, through the queue's own index: the same order.
            let shown = all_pages(
                &queue,
                &JobFilter::default().status(*status).queue("q"),
                limit,
            )
            .await;
            assert_eq!(&shown, ids, "{status} jobs of queue q, {limit} a page");
        }
    }
    // Without a status: newest first by id.
    let mut every: Vec<u64> = expected.iter().flat_map(|(_, ids)| ids.clone()).collect();
    every.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(all_pages(&queue, &JobFilter::default(), 10).await, every);
    // A queue with none of them ends at once.
    let none = queue
        .list(
            &JobFilter::default().status(JobStatus::Done).queue("other"),
            None,
            10,
        )
        .await
        .unwrap();
    assert!(none.jobs.is_empty() && none.next.is_none());
}

async fn jobs_that_change_status_between_pages_shift_no_other(backend: Backend) {
    let queue = fresh_queue_on(backend, "list_moving").await;
    for (status, first_or_last) in [(JobStatus::Ready, "first"), (JobStatus::Done, "last")] {
        let other = if status == JobStatus::Ready {
            "running"
        } else {
            "failed"
        };
        // 30 jobs, three to a time.
        let mut ids = Vec::new();
        for i in 0..30i64 {
            let secs = (i / 3) * 60 * if newest_first(status) { -1 } else { 1 };
            ids.push(insert(&queue, status.as_str(), status, secs).await);
        }
        let filter = JobFilter::default().status(status);
        let first = queue.list(&filter, None, 10).await.unwrap();
        let mut shown: Vec<u64> = first.jobs.iter().map(|j| j.id).collect();
        let cursor = first.next.expect("a second page");
        // Between the pages: two jobs shown and two not yet shown leave the status, a job
        // enters it before the cursor's place and one after it.
        let left: Vec<u64> = vec![shown[0], shown[9], ids[20], ids[25]];
        for id in &left {
            let changed = sql_exec(
                &queue,
                "UPDATE job_queue SET status = ? WHERE id = ?",
                &[Arg::Text(other), Arg::Int(*id as i64)],
            )
            .await;
            assert_eq!(changed, 1);
        }
        let (early, late) = if newest_first(status) {
            (60, -3600)
        } else {
            (-60, 3600)
        };
        let before_cursor = insert(&queue, status.as_str(), status, early).await;
        let after_cursor = insert(&queue, status.as_str(), status, late).await;
        let mut next = Some(cursor);
        while let Some(c) = next {
            let page = queue.list(&filter, Some(&c), 7).await.unwrap();
            shown.extend(page.jobs.iter().map(|j| j.id));
            assert!(shown.len() <= 100, "the pages repeat jobs: {shown:?}");
            next = page.next;
        }
        let unique: BTreeSet<u64> = shown.iter().copied().collect();
        assert_eq!(unique.len(), shown.len(), "no job shown twice: {shown:?}");
        // Every job that stayed shows once; the one that entered after the cursor shows
        // ({first_or_last} of the rest); those that left after the first page do not.
        let mut expected: BTreeSet<u64> = ids.iter().copied().collect();
        expected.remove(&ids[20]);
        expected.remove(&ids[25]);
        expected.insert(after_cursor);
        assert_eq!(unique, expected, "{status}: {first_or_last}");
        assert!(!unique.contains(&before_cursor));
        assert_eq!(shown.last(), Some(&after_cursor), "{status}");
        sql_exec(&queue, "DELETE FROM job_queue", &[]).await;
    }
}

async fn a_cursor_continues_only_its_own_listing(backend: Backend) {
    let queue = fresh_queue_on(backend, "list_cursor").await;
    for secs in [0, 0, 60] {
        insert(&queue, "q", JobStatus::Done, secs).await;
        insert(&queue, "q", JobStatus::Failed, secs).await;
    }
    let done = JobFilter::default().status(JobStatus::Done);
    let cursor = queue.list(&done, None, 1).await.unwrap().next.unwrap();
    assert_eq!(cursor.status(), Some(JobStatus::Done));
    let text = cursor.to_string();
    assert!(
        text.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_'),
        "{text}"
    );
    assert_eq!(text.parse::<JobCursor>().unwrap(), cursor);
    for filter in [
        JobFilter::default().status(JobStatus::Failed),
        JobFilter::default(),
    ] {
        let err = queue.list(&filter, Some(&cursor), 5).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidSetting {
                    setting: "cursor",
                    ..
                }
            ),
            "{err}"
        );
    }
    let by_id = queue
        .list(&JobFilter::default(), None, 1)
        .await
        .unwrap()
        .next
        .unwrap();
    let err = queue.list(&done, Some(&by_id), 5).await.unwrap_err();
    assert!(err.to_string().contains("jobs of every status"), "{err}");
    // Of a listing by id, the cursor is the id: the `before=` of earlier links still reads.
    assert_eq!(
        by_id.to_string().parse::<u64>().ok(),
        Some(
            queue
                .list(&JobFilter::default(), None, 1)
                .await
                .unwrap()
                .jobs[0]
                .id
        )
    );
    for bad in [
        "",
        "done",
        "done.x.5",
        "stuck.5.5",
        "done.5",
        "-1",
        "done.5.5.5",
    ] {
        assert!(bad.parse::<JobCursor>().is_err(), "{bad:?}");
    }
}

on_every_backend!(
    each_status_pages_in_its_order_with_every_job_once,
    jobs_that_change_status_between_pages_shift_no_other,
    a_cursor_continues_only_its_own_listing,
);

/// On PostgreSQL, a page of one status (and a queue) is a range of a status-time index read
/// in its order, before and after a cursor: no sort, no scan of the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_one_status_reads_its_index_in_order_on_postgres() {
    use jobqueue_runtime::__store::statements::postgres::{list_statement, previous_statement};
    let queue = fresh_queue_on(Backend::Postgres, "list_plan").await;
    sql_exec(
        &queue,
        "INSERT INTO job_queue (queue, kind, task_key, payload, status, attempts, run_at, \
           lease_owner, lease_until, finished_at) \
         SELECT 'q' || (seq % 11), 'k', 'plan:' || seq, '{}', \
           (ARRAY['done', 'failed', 'ready', 'scheduled', 'cancelled', 'running', 'blocked'])\
             [seq % 7 + 1], \
           1, job_queue_now() - seq * INTERVAL '1 second', 'w', \
           job_queue_now() + seq * INTERVAL '1 second', job_queue_now() - seq * INTERVAL '1 second' \
         FROM generate_series(1, 60000) AS seq",
        &[],
    )
    .await;
    sql_exec(&queue, "ANALYZE job_queue", &[]).await;
    for status in JobStatus::ALL {
        for filter in [
            JobFilter::default().status(status),
            JobFilter::default().status(status).queue("q3"),
        ] {
            // A cursor some way into the listing (about 780 jobs of each status and queue),
            // so that the page before it is not all there is behind it.
            let first = queue.list(&filter, None, 300).await.unwrap();
            let cursor = first.next.expect("a second page");
            for (sql, args) in [
                list_statement(&filter, None, 20),
                list_statement(&filter, Some(&cursor), 20),
                previous_statement(&filter, &cursor, 20),
            ] {
                let plan = queue.store().explain(&sql, &args).await.expect("EXPLAIN");
                assert!(
                    plan.iter()
                        .all(|(_, node, ..)| node != "Sort" && node != "Seq Scan"),
                    "{sql}: {plan:?}"
                );
                assert!(
                    plan.iter().any(|(_, _, index, ..)| matches!(
                        index.as_deref(),
                        Some("job_queue_status_at" | "job_queue_queue_status_at")
                    )),
                    "{sql}: {plan:?}"
                );
            }
        }
    }
}

/// Every statement of the dashboard's pages is one PostgreSQL plans, for a filter of each
/// kind (with a cursor too): its SQL and its arguments' types are PostgreSQL's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_statements_are_postgresql_statements() {
    use jobqueue_runtime::__store::statements::postgres::dashboard_statements;
    let queue = fresh_queue_on(Backend::Postgres, "list_statements").await;
    let cursor: JobCursor = "done.1764662400123456.4711".parse().unwrap();
    let by_id: JobCursor = "4711".parse().unwrap();
    let every = JobFilter::default()
        .queue("q")
        .kind("k")
        .key_prefix("a_b%")
        .error_contains("50%")
        .meta("tenant", "acme");
    for (filter, cursor) in [
        (JobFilter::default(), None),
        (JobFilter::default(), Some(&by_id)),
        (JobFilter::default().status(JobStatus::Done), Some(&cursor)),
        (every.clone(), Some(&by_id)),
        (every.status(JobStatus::Done), Some(&cursor)),
    ] {
        for (sql, args) in dashboard_statements(&filter, cursor) {
            let plan = queue
                .store()
                .explain(&sql, &args)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            assert!(!plan.is_empty(), "{sql}");
        }
    }
}
