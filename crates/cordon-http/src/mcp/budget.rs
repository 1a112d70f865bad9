//! One byte budget for everything the MCP hook buffers at once (request bodies read whole,
//! JSON answers read whole, SSE frames being assembled): each alone is bounded, but a sandbox
//! opening many connections at once could otherwise make cordon hold 1024 × 8 MiB. Past the
//! budget a request or answer is refused with an error, never buffered.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The budget shared by a session's MCP buffering.
pub const TOTAL: usize = 64 << 20;

/// A shared budget of bytes.
#[derive(Debug, Clone)]
pub struct Budget {
    left: Arc<AtomicUsize>,
}

impl Budget {
    /// A budget of `total` bytes.
    pub fn new(total: usize) -> Self {
        Self {
            left: Arc::new(AtomicUsize::new(total)),
        }
    }

    /// A claim on none of it yet, grown with [`Held::resize`].
    pub fn claim(&self) -> Held {
        Held {
            budget: self.clone(),
            held: 0,
        }
    }

    /// Bytes not held by anyone.
    pub fn left(&self) -> usize {
        self.left.load(Ordering::Acquire)
    }
}

/// Bytes held of a [`Budget`]; given back when dropped.
#[derive(Debug)]
pub struct Held {
    budget: Budget,
    held: usize,
}

/// The budget is spent.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("cordon's buffer for MCP messages is full ({TOTAL} bytes held at once)")]
pub struct Spent;

impl Held {
    /// Holds `want` bytes in all (more or fewer than now); `Spent` (and nothing changed) when
    /// the budget cannot give the difference.
    pub fn resize(&mut self, want: usize) -> Result<(), Spent> {
        if want <= self.held {
            self.budget
                .left
                .fetch_add(self.held - want, Ordering::AcqRel);
            self.held = want;
            return Ok(());
        }
        let more = want - self.held;
        self.budget
            .left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |l| l.checked_sub(more))
            .map_err(|_| Spent)?;
        self.held = want;
        Ok(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.resize(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_share_the_budget_and_give_it_back() {
        let b = Budget::new(100);
        let mut one = b.claim();
        let mut two = b.claim();
        one.resize(60).unwrap();
        assert_eq!(two.resize(50), Err(Spent));
        assert_eq!(b.left(), 40);
        two.resize(40).unwrap();
        one.resize(10).unwrap();
        assert_eq!(b.left(), 50);
        drop(one);
        drop(two);
        assert_eq!(b.left(), 100);
    }
}
