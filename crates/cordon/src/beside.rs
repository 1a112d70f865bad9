//! Start-up work that runs on a thread of its own, beside the rest of the start.

use std::thread::JoinHandle;

/// Work started beside the caller's, its result taken with [`Beside::join`]. Dropped without
/// being joined (an early return on an error), it is joined then: nothing it does or emits
/// outlives the caller's scope, so none of it can come after the session's end.
pub(crate) struct Beside<T: Send + 'static> {
    thread: Option<JoinHandle<T>>,
    ready: Option<T>,
}

impl<T: Send + 'static> Beside<T> {
    /// Runs `f` on a thread of its own when `spawn`, else here and now (not worth a thread).
    pub(crate) fn start(
        spawn: bool,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::io::Result<Self> {
        if !spawn {
            return Ok(Beside {
                thread: None,
                ready: Some(f()),
            });
        }
        let thread = std::thread::Builder::new()
            .name("cordon-start".into())
            .spawn(f)?;
        Ok(Beside {
            thread: Some(thread),
            ready: None,
        })
    }

    /// Waits for the work and returns what it made; a panic in it goes on here.
    pub(crate) fn join(mut self) -> T {
        if let Some(t) = self.ready.take() {
            return t;
        }
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(t)) => t,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            None => unreachable!("a Beside holds its result or its thread until joined"),
        }
    }
}

impl<T: Send + 'static> Drop for Beside<T> {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
