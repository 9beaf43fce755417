use std::collections::{BTreeSet, HashMap};

use jobqueue::{job, Job, JobContext};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Address {
    pub city: String,
    pub zip: Option<String>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum Format {
    Csv,
    Pdf { pages: u32 },
}

/// Sends an invoice; docs and attributes stay on the function.
#[job(key = "invoice:{id}")]
#[allow(clippy::too_many_arguments)]
pub async fn send_invoice(
    id: u64,
    mut note: String,
    lines: Vec<(String, u32)>,
    discount: Option<f64>,
    totals: HashMap<String, i64>,
    tags: BTreeSet<String>,
    address: Address,
    format: Format,
    r#type: char,
    checksum: [u8; 4],
    ctx: jobqueue::JobContext,
    urgent: bool,
) {
    note.push('!');
    let _ = (
        id, note, lines, discount, totals, tags, address, format, r#type, checksum, ctx, urgent,
    );
}

fn main() {
    let job = SendInvoice {
        id: 7,
        note: "thanks".into(),
        lines: vec![("widget".into(), 2)],
        discount: Some(0.1),
        totals: HashMap::from([("eur".into(), 1200)]),
        tags: BTreeSet::from(["b2b".to_owned()]),
        address: Address {
            city: "Lyon".into(),
            zip: None,
        },
        format: Format::Pdf { pages: 2 },
        r#type: 'x',
        checksum: [1, 2, 3, 4],
        urgent: false,
    };
    assert_eq!(job.task_key().unwrap(), "invoice:7");
    let json = serde_json::to_value(&job).unwrap();
    assert_eq!(json["type"], "x");
    assert_eq!(json["address"]["city"], "Lyon");
    let back: SendInvoice = serde_json::from_value(json).unwrap();
    assert_eq!(back.format, Format::Pdf { pages: 2 });
    let _ = send_invoice(
        1,
        String::new(),
        vec![],
        None,
        HashMap::new(),
        BTreeSet::new(),
        back.address,
        Format::Csv,
        'y',
        [0; 4],
        JobContext::detached(1, "k"),
        true,
    );
}
