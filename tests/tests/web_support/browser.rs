//! A real browser for the dashboard tests: headless Chromium driven over WebDriver
//! (`chromedriver`), screenshots into `target/screenshots/`.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use jobqueue::Queue;
use jobqueue_web::Dashboard;
use serde_json::json;
use tests::wait_for;
use tokio::process::{Child, Command};

/// A binary the browser tests need, or a failure that says how to install it.
pub fn binary(names: &[&str], package: &str) -> PathBuf {
    for name in names {
        for dir in std::env::var("PATH")
            .unwrap_or_default()
            .split(':')
            .chain(["/usr/bin", "/usr/lib/chromium"])
        {
            let p = PathBuf::from(dir).join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "the browser tests need {names:?}, which is not installed: on Debian/Ubuntu run \
         `apt-get install {package}` (scripts/test installs it when missing)"
    );
}

/// `target/screenshots/`, created.
pub fn screenshots_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = target.join("screenshots");
    std::fs::create_dir_all(&dir).expect("create target/screenshots");
    dir
}

/// chromedriver on a free loopback port, killed when dropped.
pub struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    pub async fn start() -> Driver {
        let exe = binary(&["chromedriver"], "chromium-driver");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(exe)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start chromedriver");
        wait_for(
            "chromedriver to listen",
            Duration::from_secs(20),
            || async move {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .ok()
                    .map(|_| ())
            },
        )
        .await;
        Driver { child, port }
    }

    pub async fn browser(&self) -> Client {
        self.browser_with(&[]).await
    }

    /// A browser started with `extra` command-line arguments beside the usual ones.
    pub async fn browser_with(&self, extra: &[&str]) -> Client {
        let chromium = binary(&["chromium", "chromium-browser"], "chromium");
        let mut args = vec![
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1280,860",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
        ];
        args.extend_from_slice(extra);
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({ "binary": chromium, "args": args }),
        );
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("chromedriver starts a headless chromium")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// The dashboard of `queue` (every action on, no authentication) served under `/jobs` on a
/// free loopback port; its address.
pub async fn serve(queue: &Queue) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().nest("/jobs", Dashboard::new(queue.clone()).router());
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/jobs")
}

/// Saves a screenshot of the page as `target/screenshots/<name>.png`.
pub async fn shot(browser: &Client, name: &str) {
    let png = browser.screenshot().await.expect("screenshot");
    std::fs::write(screenshots_dir().join(format!("{name}.png")), png)
        .expect("write the screenshot");
}

/// Runs `script` in the page and returns its result.
pub async fn js(browser: &Client, script: &str) -> serde_json::Value {
    browser
        .execute(script, vec![])
        .await
        .expect("run a script in the page")
}

/// The text of the first element matching `css`, if the page has one now: for a wait that
/// polls until the page shows something.
pub async fn text_of(browser: &Client, css: &str) -> Option<String> {
    browser
        .find(Locator::Css(css))
        .await
        .ok()?
        .text()
        .await
        .ok()
}

/// The text of the first element matching `css`; a failure names the selector when the page
/// has none.
pub async fn text(browser: &Client, css: &str) -> String {
    browser
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css} on the page: {e}"))
        .text()
        .await
        .expect("the element's text")
}
