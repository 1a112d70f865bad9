use std::sync::Mutex;

use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;

use super::*;

type Chunks = futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, BoxError>>>;
type Events = Arc<Mutex<Vec<NewEvent>>>;

/// A body of these chunks, checked for `placeholder` and the known value `secret`.
fn watched(chunks: &[&str]) -> (ScannedBody<StreamBody<Chunks>>, TripCell, Events) {
    let frames: Vec<Result<Frame<Bytes>, BoxError>> = chunks
        .iter()
        .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c.as_bytes()))))
        .collect();
    let events: Events = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    let trip: TripCell = Arc::new(Mutex::new(None));
    let scanner = crate::dlp::Scanner::new(
        vec![crate::dlp::Known {
            name: "db".into(),
            value: "s3cr3t-value-0123456789".into(),
            hosts: Vec::new(),
        }],
        Vec::new(),
    );
    let placeholder = "cordon-0123456789abcdef".to_string();
    let window = scanner.window().max(placeholder.len());
    let body = ScannedBody::new(
        StreamBody::new(futures::stream::iter(frames)),
        Watch {
            scanner: Some(Arc::new(scanner)),
            log_only: false,
            placeholders: Arc::new(vec![("api".into(), placeholder)]),
            host: "up.test".into(),
            window,
            budget: 1 << 20,
            trip: trip.clone(),
            emit: Arc::new(move |e| ev.lock().unwrap().push(e)),
            label: "POST https://up.test/".into(),
            done: tokio::sync::watch::Sender::new(false),
        },
    );
    (body, trip, events)
}

#[tokio::test]
async fn a_clean_body_passes_whole_however_it_is_cut() {
    let (body, trip, events) = watched(&["hello ", "wor", "ld, nothing secret here"]);
    let out = body.collect().await.unwrap().to_bytes();
    assert_eq!(&out[..], b"hello world, nothing secret here");
    assert!(trip.lock().unwrap().is_none());
    assert!(events.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_placeholder_split_across_chunks_stops_the_body_before_it_leaves() {
    let (mut body, trip, events) = watched(&["{\"key\":\"cordon-0123", "456789abcdef\"}"]);
    let mut sent = Vec::new();
    let mut failed = false;
    while let Some(f) = body.frame().await {
        match f {
            Ok(f) => sent.extend_from_slice(f.data_ref().unwrap()),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    assert!(failed);
    assert!(
        !String::from_utf8_lossy(&sent).contains("cordon-0123"),
        "{sent:?}"
    );
    assert!(matches!(&*trip.lock().unwrap(), Some(Trip::Placeholder(n)) if n == "api"));
    assert_eq!(events.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_known_secret_trips_the_body() {
    let (body, trip, _) = watched(&["x=s3cr3t-val", "ue-0123456789&y=1"]);
    assert!(body.collect().await.is_err());
    assert!(matches!(&*trip.lock().unwrap(), Some(Trip::Secret(_))));
}

#[test]
fn token_runs() {
    assert_eq!(token_run_start(b"a b=c_d"), 2);
    assert_eq!(token_run_start(b"abc"), 0);
    assert_eq!(token_run_start(b"ab "), 3);
}
