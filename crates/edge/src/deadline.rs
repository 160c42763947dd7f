//! [`Deadline`]: a deadline that moves with every request on a long-lived connection (the
//! visitor's head read, the upstream's answer head and streamed body), served by one timer
//! for the connection's whole life.
//!
//! A timer armed per request costs a timer-wheel insert and removal under the runtime's timer
//! lock each time, and often a write to the runtime's event descriptor (tokio wakes its driver
//! when a new timer is due before the driver's next planned wake-up). Here the timer is moved
//! only when it fires while the deadline has moved on: at most once per timeout per
//! connection.

use std::pin::Pin;

use tokio::time::{Instant, Sleep};

/// A deadline with its timer. The timer never fires after the deadline: moving the deadline
/// later leaves the timer where it is; moving it earlier moves the timer too.
pub(crate) struct Deadline {
    timer: Pin<Box<Sleep>>,
    at: Instant,
}

impl Deadline {
    /// A deadline at `at`.
    pub(crate) fn at(at: Instant) -> Deadline {
        Deadline {
            timer: Box::pin(tokio::time::sleep_until(at)),
            at,
        }
    }

    /// Moves the deadline to `at`.
    pub(crate) fn set(&mut self, at: Instant) {
        if at < self.timer.deadline() {
            self.timer.as_mut().reset(at);
        }
        self.at = at;
    }

    /// Completes once the deadline has passed.
    pub(crate) async fn passed(&mut self) {
        loop {
            self.timer.as_mut().await;
            if Instant::now() >= self.at {
                return;
            }
            self.timer.as_mut().reset(self.at);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn passes_within(deadline: &mut Deadline, wait: Duration) -> bool {
        tokio::time::timeout(wait, deadline.passed()).await.is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_moved_later_passes_only_at_its_new_time() {
        let start = Instant::now();
        let mut deadline = Deadline::at(start + Duration::from_secs(30));
        assert!(!passes_within(&mut deadline, Duration::from_secs(20)).await);
        // Moved to 50 s: the timer fires at 30 s and is moved on.
        deadline.set(start + Duration::from_secs(50));
        assert!(!passes_within(&mut deadline, Duration::from_millis(29_999)).await);
        assert!(passes_within(&mut deadline, Duration::from_millis(2)).await);
        // Once passed, it stays passed until moved.
        assert!(passes_within(&mut deadline, Duration::ZERO).await);
        deadline.set(Instant::now() + Duration::from_secs(30));
        assert!(!passes_within(&mut deadline, Duration::from_secs(29)).await);
        assert!(passes_within(&mut deadline, Duration::from_secs(2)).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_moved_earlier_passes_at_its_new_time() {
        let start = Instant::now();
        let mut deadline = Deadline::at(start + Duration::from_secs(60));
        deadline.set(start + Duration::from_secs(1));
        assert!(!passes_within(&mut deadline, Duration::from_millis(999)).await);
        assert!(passes_within(&mut deadline, Duration::from_millis(2)).await);
    }
}
