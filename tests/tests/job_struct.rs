//! The struct `#[job]` generates: `Debug` and `Clone`, and `#[serde(...)]` attributes of
//! the function's parameters on its fields.

use jobqueue::{job, Job, JobContext};

#[job(queue = "job_struct")]
async fn resize_image(
    path: String,
    #[serde(default = "default_width")] width: u32,
    #[serde(rename = "q")] quality: u8,
    ctx: JobContext,
) {
    let _ = (path, width, quality, ctx);
}

fn default_width() -> u32 {
    640
}

#[test]
fn the_generated_struct_is_debug_and_clone() {
    let job = ResizeImage {
        path: "a.png".into(),
        width: 10,
        quality: 80,
    };
    let copy = job.clone();
    assert_eq!(
        format!("{copy:?}"),
        r#"ResizeImage { path: "a.png", width: 10, quality: 80 }"#
    );
}

#[test]
fn serde_attributes_on_parameters_shape_the_payload() {
    let job = ResizeImage {
        path: "a.png".into(),
        width: 10,
        quality: 80,
    };
    assert_eq!(
        serde_json::to_value(&job).unwrap(),
        serde_json::json!({"path": "a.png", "width": 10, "q": 80})
    );
    // A payload written before `width` existed decodes with its default.
    let old: ResizeImage = serde_json::from_str(r#"{"path": "b.png", "q": 50}"#).unwrap();
    assert_eq!(
        (old.path.as_str(), old.width, old.quality),
        ("b.png", 640, 50)
    );
    assert_eq!(ResizeImage::KIND, "resize_image");
}
