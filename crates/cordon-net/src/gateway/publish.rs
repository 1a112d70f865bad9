//! `[[publish]]`: the host's `127.0.0.1:host_port` forwards to the sandbox's loopback `port`,
//! through init's helper (the only way into the sandbox's network namespace).

use std::sync::Arc;
use std::time::Instant;

use cordon_events::{Action, Layer, NewEvent};
use cordon_policy::Publish;
use tokio::net::{TcpListener, TcpStream};

use super::Shared;

pub(crate) async fn serve(shared: Arc<Shared>, p: Publish, listener: TcpListener) {
    loop {
        let (conn, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(_) => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let shared = shared.clone();
        let p = p.clone();
        tokio::spawn(async move {
            let base = |action, reason: String| {
                NewEvent::new(Layer::Network, action, reason)
                    .rule(format!("publish {} ({})", p.host_port, p.origin))
                    .detail("host", "127.0.0.1")
                    .detail("port", p.port)
                    .detail("host_port", p.host_port)
                    .detail("peer", peer.to_string())
                    .detail("via", "publish")
            };
            let Some(inward) = shared.inward.get().cloned() else {
                shared.emit(base(
                    Action::Error,
                    "published port: the sandbox is not running yet".into(),
                ));
                return;
            };
            let port = p.port;
            let started = Instant::now();
            let inner = match tokio::task::spawn_blocking(move || inward(port)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    shared.emit(base(
                        Action::Error,
                        format!("127.0.0.1:{} → sandbox port {port}: {e}", p.host_port),
                    ));
                    return;
                }
                Err(_) => return,
            };
            let Ok(()) = inner.set_nonblocking(true) else {
                return;
            };
            let Ok(inner) = TcpStream::from_std(inner) else {
                return;
            };
            let (i, o, _) = super::relay(&shared, conn, inner).await;
            shared.emit(
                base(
                    Action::Allow,
                    format!(
                        "127.0.0.1:{} → sandbox port {port}: {i} B in, {o} B out",
                        p.host_port
                    ),
                )
                .detail("bytes_in", i)
                .detail("bytes_out", o)
                .detail(
                    "duration_ms",
                    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                ),
            );
        });
    }
}
