//! Task keys of two kinds never swallow each other's jobs.

use jobqueue::{job, Enqueued, Error};
use tests::fresh_queue_with_effects;

// ---------------------------------------------------------------------------------------
// Two kinds with the same key template
// ---------------------------------------------------------------------------------------

#[job(name = "hc_invoice", queue = "hc_keys", key = "order:{order_id}")]
async fn invoice(order_id: u64) {
    let _ = order_id;
}

#[job(name = "hc_receipt", queue = "hc_keys", key = "order:{order_id}")]
async fn receipt(order_id: u64) {
    let _ = order_id;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_held_by_another_kind_is_an_error_not_a_duplicate() {
    let (queue, _effects) = fresh_queue_with_effects("hc_keys").await;
    let first = queue.enqueue(Invoice { order_id: 7 }).await.unwrap();
    assert!(first.is_new());

    // The receipt of order 7 renders the same key as its invoice.
    let err = queue
        .enqueue(Receipt { order_id: 7 })
        .await
        .expect_err("a receipt must not pass for a duplicate of the invoice");
    assert!(
        matches!(&err, Error::KeyTaken { holder, kind, id, .. }
            if holder == "hc_invoice" && kind == "hc_receipt" && *id == first.id()),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("\"order:7\"") && msg.contains("hc_invoice") && msg.contains("hc_receipt:"),
        "{msg}"
    );
    let err = queue
        .enqueue_many([Receipt { order_id: 7 }, Receipt { order_id: 8 }])
        .await
        .expect_err("the batch holds the same receipt");
    assert!(matches!(err, Error::KeyTaken { .. }), "{err:?}");

    // A second invoice of the order is still a duplicate of the first, as before.
    assert_eq!(
        queue.enqueue(Invoice { order_id: 7 }).await.unwrap(),
        Enqueued::Duplicate(first.id())
    );
    // Nothing else was enqueued: not the receipt, nor the batch.
    let kinds: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(kind AS CHAR), CAST(task_key AS CHAR) FROM job_queue WHERE queue = 'hc_keys'",
    )
    .fetch_all(queue.pool())
    .await
    .unwrap();
    assert_eq!(kinds, vec![("hc_invoice".to_owned(), "order:7".to_owned())]);
}
