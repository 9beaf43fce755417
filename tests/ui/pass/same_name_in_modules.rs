mod billing {
    #[jobqueue::job(name = "billing.sync")]
    pub async fn sync(account: u64) {
        let _ = account;
    }
}

mod crm {
    #[jobqueue::job(name = "crm.sync")]
    pub async fn sync(contact: String) {
        let _ = contact;
    }
}

fn main() {
    let billing = jobqueue::registry::lookup("billing.sync").unwrap();
    let crm = jobqueue::registry::lookup("crm.sync").unwrap();
    assert!(
        billing.type_name().ends_with("::billing::Sync"),
        "{}",
        billing.type_name()
    );
    assert!(
        crm.type_name().ends_with("::crm::Sync"),
        "{}",
        crm.type_name()
    );
    let _ = (
        billing::Sync { account: 1 },
        crm::Sync {
            contact: "a".into(),
        },
    );
    jobqueue::registry::Registry::load().expect("no two kinds share a name");
}
