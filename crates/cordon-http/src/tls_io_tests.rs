use super::*;
use std::collections::VecDeque;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A reader that gives its steps in order, one per read: bytes, a pause, an error, or the end.
enum Step {
    Bytes(Vec<u8>),
    Pause,
    Fail,
}

struct Scripted(VecDeque<Step>);

impl AsyncRead for Scripted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.0.pop_front() {
            None => Poll::Ready(Ok(())),
            Some(Step::Bytes(b)) => {
                let n = b.len().min(out.remaining());
                out.put_slice(&b[..n]);
                if n < b.len() {
                    self.0.push_front(Step::Bytes(b[n..].to_vec()));
                }
                Poll::Ready(Ok(()))
            }
            Some(Step::Pause) => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Some(Step::Fail) => Poll::Ready(Err(io::Error::other("broken"))),
        }
    }
}

fn gather(r: &mut Scripted, err: &mut Option<io::Error>, cap: usize) -> Poll<io::Result<Vec<u8>>> {
    let mut mem = vec![0u8; cap];
    let mut out = ReadBuf::new(&mut mem);
    let waker = std::task::Waker::noop();
    let mut cx = Context::from_waker(waker);
    match poll_read_gathered(r, err, &mut cx, &mut out) {
        Poll::Ready(Ok(())) => Poll::Ready(Ok(out.filled().to_vec())),
        Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        Poll::Pending => Poll::Pending,
    }
}

#[test]
fn a_gathered_read_takes_what_is_at_hand_and_never_loses_an_end_or_an_error() {
    use Step::*;
    let mut r = Scripted(VecDeque::from([
        Bytes(b"ab".to_vec()),
        Bytes(b"cd".to_vec()),
        // The first ends the first read, the second is met by the next.
        Pause,
        Pause,
        Bytes(b"efghij".to_vec()),
        Bytes(b"k".to_vec()),
        Fail,
        Bytes(b"after".to_vec()),
    ]));
    let mut err = None;
    // Both pieces before the pause, in one read; the pause itself is not waited out.
    assert_eq!(
        gather(&mut r, &mut err, 64).map(Result::unwrap),
        Poll::Ready(b"abcd".to_vec())
    );
    // Nothing at hand: pending, as the reader said.
    assert!(gather(&mut r, &mut err, 64).is_pending());
    // A full buffer stops the read; the rest waits for the next.
    assert_eq!(
        gather(&mut r, &mut err, 4).map(Result::unwrap),
        Poll::Ready(b"efgh".to_vec())
    );
    // Bytes before an error go first; the error comes with the next read, once.
    assert_eq!(
        gather(&mut r, &mut err, 64).map(Result::unwrap),
        Poll::Ready(b"ijk".to_vec())
    );
    assert!(matches!(gather(&mut r, &mut err, 64), Poll::Ready(Err(_))));
    assert_eq!(
        gather(&mut r, &mut err, 64).map(Result::unwrap),
        Poll::Ready(b"after".to_vec())
    );
    // The end: an empty read, every time.
    assert_eq!(
        gather(&mut r, &mut err, 64).map(Result::unwrap),
        Poll::Ready(Vec::new())
    );
    assert_eq!(
        gather(&mut r, &mut err, 64).map(Result::unwrap),
        Poll::Ready(Vec::new())
    );
}

#[tokio::test]
async fn a_buffered_socket_gives_every_byte_in_order_whatever_the_read_sizes() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    // Past the buffer's size, in uneven pieces, so reads come from the buffer, straight
    // from the socket, and across refills.
    let data: Vec<u8> = (0..(3 * READ_AHEAD + 12_345))
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    let sent = data.clone();
    let server = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        for piece in sent.chunks(10_007) {
            s.write_all(piece).await.unwrap();
        }
        // What the client writes through the buffered stream arrives as written.
        let mut back = vec![0u8; 5];
        s.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"hello");
    });
    let mut c = BufTcp::new(TcpStream::connect(addr).await.unwrap());
    let mut got = Vec::new();
    let sizes = [1usize, 100, 4096, READ_AHEAD, READ_AHEAD + 1, 17];
    let mut i = 0;
    loop {
        let mut buf = vec![0u8; sizes[i % sizes.len()]];
        i += 1;
        let n = c.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        if got.len() == data.len() {
            c.write_all(b"hello").await.unwrap();
        }
    }
    assert_eq!(got.len(), data.len());
    assert!(got == data, "bytes reordered or changed");
    server.await.unwrap();
}

#[tokio::test]
async fn the_read_ahead_buffer_is_held_only_while_the_socket_streams() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(1);
    let server = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        while let Some(b) = rx.recv().await {
            s.write_all(&b).await.unwrap();
        }
    });
    let mut c = BufTcp::new(TcpStream::connect(addr).await.unwrap());
    let mut buf = vec![0u8; 4096];
    // A small answer: read straight, no buffer.
    tx.send(vec![1; 1000]).await.unwrap();
    assert_eq!(c.read(&mut buf).await.unwrap(), 1000);
    assert!(!c.buffering());
    // A bulk answer: the first read fills the reader's buffer, the buffer comes...
    tx.send(vec![2; 2 * READ_AHEAD]).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let mut got = c.read(&mut buf).await.unwrap();
    assert_eq!(got, 4096);
    assert!(c.buffering());
    while got < 2 * READ_AHEAD {
        got += c.read(&mut buf).await.unwrap();
    }
    assert_eq!(got, 2 * READ_AHEAD);
    // ...and goes once a refill brings little.
    tx.send(vec![3; 10]).await.unwrap();
    assert_eq!(c.read(&mut buf).await.unwrap(), 10);
    assert!(!c.buffering());
    assert_eq!(&buf[..10], &[3; 10]);
    drop(tx);
    assert_eq!(c.read(&mut buf).await.unwrap(), 0);
    server.await.unwrap();
}
