use std::sync::{Arc, Mutex};

use http_body_util::StreamBody;
use hyper::body::Frame;

use super::*;

const REAL: &str = "real-value-0123456789";
const PH: &str = "cordon-0123456789abcd";

fn scrubber() -> crate::dlp::Scrubber {
    crate::dlp::Scrubber::new(&[(REAL.to_string(), PH.to_string())]).unwrap()
}

#[tokio::test]
async fn an_echoed_value_is_scrubbed_across_chunks_and_the_event_waits_for_the_end() {
    let chunks: Vec<Result<Frame<Bytes>, BoxError>> = ["you sent real-val", "ue-0123456789, bye"]
        .iter()
        .map(|c| Ok(Frame::data(Bytes::from_static(c.as_bytes()))))
        .collect();
    let events: Arc<Mutex<Vec<NewEvent>>> = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    let body = CountingBody {
        _permit: None,
        inner: StreamBody::new(futures::stream::iter(chunks)),
        scrub: Some(scrubber()),
        pending: None,
        bytes: 0,
        heads: (10, 20),
        body_up: Arc::new(std::sync::atomic::AtomicU64::new(5)),
        started: Instant::now(),
        event: Some(NewEvent::new(
            cordon_events::Layer::Http,
            EvAction::Allow,
            "forwarded",
        )),
        emit: Arc::new(move |e| ev.lock().unwrap().push(e)),
        stopped: None,
    };
    let out = body.collect().await.unwrap().to_bytes();
    assert_eq!(String::from_utf8_lossy(&out), format!("you sent {PH}, bye"));
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 1);
    // The answer's head and its body as read from the server (not as scrubbed); the request's
    // head and what its body sent.
    assert_eq!(events[0].detail["bytes_down"], 20 + 35);
    assert_eq!(events[0].detail["bytes_up"], 10 + 5);
    assert!(events[0].detail.get("incomplete").is_none());
}

#[test]
fn headers_are_scrubbed_in_place() {
    let mut h = hyper::HeaderMap::new();
    h.insert("x-echo", format!("token {REAL}").parse().unwrap());
    h.append("x-echo", "other".parse().unwrap());
    h.insert("x-other", "fine".parse().unwrap());
    scrub_headers(&scrubber(), &mut h);
    let echoed: Vec<_> = h.get_all("x-echo").iter().collect();
    assert_eq!(echoed, [&format!("token {PH}"), "other"]);
    assert_eq!(h["x-other"], "fine");
}
