//! Telling waiting operations that their group commit is durable, with one cross-thread
//! wake-up per thread and commit rather than one per operation.
//!
//! The HTTP server runs a single-threaded runtime per core, so a commit of a few dozen joins
//! answers a few dozen tasks that live on two or three threads. Waking each from the log
//! writer's thread costs a hand-off to that runtime and a write to its wake-up descriptor per
//! task. Instead, a waiting operation registers with its thread's [`Port`]; after a commit the
//! writer wakes one now-durable waiter per port, and that waiter, polled on its own thread,
//! wakes the port's other durable waiters before it returns (a wake-up from a runtime's own
//! thread is a push on its run queue). Waiters polled on another thread than the one they
//! registered on (a multi-threaded runtime) stay correct, only without the saving.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

/// How far the log is durable, and the ports of the threads waiting on it.
#[derive(Default)]
pub(super) struct Completion {
    /// Every write up to this sequence number is durable.
    through: AtomicU64,
    /// Set once a commit failed: waits beyond `through` then fail with `failure`.
    failed: AtomicBool,
    failure: Mutex<Option<String>>,
    ports: Mutex<Vec<Arc<Port>>>,
    next_waiter: AtomicU64,
}

/// The waiters of one thread.
#[derive(Default)]
struct Port {
    waiters: Mutex<Vec<Waiter>>,
}

struct Waiter {
    id: u64,
    sequence: u64,
    waker: Waker,
}

thread_local! {
    /// This thread's port on each completion it has waited on.
    static PORTS: RefCell<Vec<(Weak<Completion>, Arc<Port>)>> = const { RefCell::new(Vec::new()) };
}

impl Completion {
    /// Everything up to `sequence` is durable: wakes one waiter per port that may go.
    pub(super) fn complete_through(&self, sequence: u64) {
        let through = self
            .through
            .fetch_max(sequence, Ordering::SeqCst)
            .max(sequence);
        for port in self.ports.lock().iter() {
            let waker = {
                let mut waiters = port.waiters.lock();
                let done = waiters.iter().position(|w| w.sequence <= through);
                done.map(|index| waiters.swap_remove(index).waker)
            };
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }

    /// Nothing after `through` will become durable: every waiter beyond it fails with
    /// `message` (the first failure is kept).
    pub(super) fn fail(&self, message: String) {
        self.failure.lock().get_or_insert(message);
        self.failed.store(true, Ordering::SeqCst);
        for port in self.ports.lock().iter() {
            let waiters = std::mem::take(&mut *port.waiters.lock());
            for waiter in waiters {
                waiter.waker.wake();
            }
        }
    }

    /// Resolves once every write up to `sequence` is durable, or with the failure that
    /// stopped the log before it.
    pub(super) fn wait(self: &Arc<Self>, sequence: u64) -> Wait {
        Wait {
            completion: self.clone(),
            sequence,
            id: self.next_waiter.fetch_add(1, Ordering::Relaxed),
            port: None,
        }
    }

    fn outcome(&self, sequence: u64) -> Option<Result<(), String>> {
        if self.through.load(Ordering::SeqCst) >= sequence {
            Some(Ok(()))
        } else if self.failed.load(Ordering::SeqCst) {
            Some(Err(self.failure.lock().clone().unwrap_or_default()))
        } else {
            None
        }
    }

    /// The calling thread's port, registered on first use.
    fn local_port(self: &Arc<Self>) -> Arc<Port> {
        PORTS.with(|ports| {
            let mut ports = ports.borrow_mut();
            // A held `Weak` keeps its allocation, so no other completion has this address.
            if let Some((_, port)) = ports
                .iter()
                .find(|(completion, _)| std::ptr::eq(completion.as_ptr(), Arc::as_ptr(self)))
            {
                return port.clone();
            }
            ports.retain(|(completion, _)| completion.strong_count() > 0);
            let port = Arc::new(Port::default());
            self.ports.lock().push(port.clone());
            ports.push((Arc::downgrade(self), port.clone()));
            port
        })
    }
}

impl Port {
    /// Removes waiter `id` (if still there) and wakes every waiter that may go now.
    fn settle(&self, id: u64, completion: &Completion) {
        let failed = completion.failed.load(Ordering::SeqCst);
        let through = completion.through.load(Ordering::SeqCst);
        let mut woken = Vec::new();
        self.waiters.lock().retain(|waiter| {
            if waiter.id == id {
                false
            } else if failed || waiter.sequence <= through {
                woken.push(waiter.waker.clone());
                false
            } else {
                true
            }
        });
        for waker in woken {
            waker.wake();
        }
    }
}

/// The future of [`Completion::wait`].
pub(super) struct Wait {
    completion: Arc<Completion>,
    sequence: u64,
    id: u64,
    /// Where this waiter registered, once it had to wait.
    port: Option<Arc<Port>>,
}

impl Wait {
    /// Leaves the port, passing on the wake-ups: the writer may have woken this waiter alone
    /// for its whole thread.
    fn leave(&mut self) {
        if let Some(port) = self.port.take() {
            port.settle(self.id, &self.completion);
        }
    }
}

impl Future for Wait {
    type Output = Result<(), String>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(outcome) = this.completion.outcome(this.sequence) {
            this.leave();
            return Poll::Ready(outcome);
        }
        let port = match &this.port {
            Some(port) => port.clone(),
            None => {
                let port = this.completion.local_port();
                this.port = Some(port.clone());
                port
            }
        };
        let mut waiters = port.waiters.lock();
        // Checked again under the port's lock: the writer moves `through` before it looks
        // at the ports, so either it sees this waiter or this sees its commit.
        if let Some(outcome) = this.completion.outcome(this.sequence) {
            drop(waiters);
            this.leave();
            return Poll::Ready(outcome);
        }
        match waiters.iter_mut().find(|waiter| waiter.id == this.id) {
            Some(waiter) => waiter.waker.clone_from(cx.waker()),
            None => waiters.push(Waiter {
                id: this.id,
                sequence: this.sequence,
                waker: cx.waker().clone(),
            }),
        }
        Poll::Pending
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    struct Waiting {
        wait: Wait,
        counter: Arc<Counter>,
    }

    impl Waiting {
        fn new(completion: &Arc<Completion>, sequence: u64) -> Waiting {
            let mut waiting = Waiting {
                wait: completion.wait(sequence),
                counter: Arc::default(),
            };
            assert_eq!(waiting.poll(), Poll::Pending);
            waiting
        }

        fn poll(&mut self) -> Poll<Result<(), String>> {
            let waker = Waker::from(self.counter.clone());
            Pin::new(&mut self.wait).poll(&mut Context::from_waker(&waker))
        }

        fn wakes(&self) -> usize {
            self.counter.0.load(Ordering::SeqCst)
        }
    }

    #[test]
    fn a_commit_wakes_one_waiter_of_a_thread_which_wakes_the_others() {
        let completion = Arc::new(Completion::default());
        let mut waiting: Vec<Waiting> = [1, 2, 3, 7]
            .into_iter()
            .map(|sequence| Waiting::new(&completion, sequence))
            .collect();
        completion.complete_through(3);
        let wakes: Vec<usize> = waiting.iter().map(Waiting::wakes).collect();
        assert_eq!(wakes.iter().sum::<usize>(), 1, "{wakes:?}");
        assert_eq!(wakes[3], 0);
        let first = wakes.iter().position(|&wakes| wakes == 1).unwrap();
        assert_eq!(waiting[first].poll(), Poll::Ready(Ok(())));
        for (index, waiter) in waiting.iter_mut().enumerate().take(3) {
            assert_eq!(waiter.wakes(), 1, "waiter {index} was woken");
            assert_eq!(waiter.poll(), Poll::Ready(Ok(())));
        }
        assert_eq!(waiting[3].wakes(), 0, "not durable yet");
        assert_eq!(waiting[3].poll(), Poll::Pending);
        completion.complete_through(9);
        assert_eq!(waiting[3].wakes(), 1);
        assert_eq!(waiting[3].poll(), Poll::Ready(Ok(())));
    }

    #[test]
    fn a_woken_waiter_dropped_before_it_ran_passes_the_wake_up_on() {
        let completion = Arc::new(Completion::default());
        let waiting = vec![Waiting::new(&completion, 1), Waiting::new(&completion, 2)];
        completion.complete_through(2);
        let (woken, other): (Vec<Waiting>, Vec<Waiting>) =
            waiting.into_iter().partition(|waiter| waiter.wakes() == 1);
        assert_eq!((woken.len(), other[0].wakes()), (1, 0));
        drop(woken);
        assert_eq!(other[0].wakes(), 1);
    }

    #[test]
    fn a_failure_fails_every_wait_beyond_what_is_durable() {
        let completion = Arc::new(Completion::default());
        completion.complete_through(4);
        let mut waiting = Waiting::new(&completion, 5);
        completion.fail("disk gone".to_owned());
        completion.fail("later failure".to_owned());
        assert_eq!(waiting.wakes(), 1);
        assert_eq!(waiting.poll(), Poll::Ready(Err("disk gone".to_owned())));
        let mut durable = completion.wait(4);
        let mut lost = completion.wait(6);
        let waker = Waker::from(Arc::new(Counter::default()));
        let mut context = Context::from_waker(&waker);
        assert_eq!(
            Pin::new(&mut durable).poll(&mut context),
            Poll::Ready(Ok(()))
        );
        assert!(matches!(
            Pin::new(&mut lost).poll(&mut context),
            Poll::Ready(Err(_))
        ));
    }

    #[test]
    fn waiters_on_many_runtimes_all_finish_as_commits_race_them() {
        const THREADS: u64 = 4;
        const WAITS: u64 = 2_000;
        let completion = Arc::new(Completion::default());
        let next = Arc::new(AtomicU64::new(0));
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let (completion, next) = (completion.clone(), next.clone());
                std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    runtime.block_on(async move {
                        let mut tasks = Vec::new();
                        for _ in 0..WAITS {
                            let sequence = next.fetch_add(1, Ordering::SeqCst) + 1;
                            let wait = completion.wait(sequence);
                            tasks.push(tokio::spawn(wait));
                            if sequence % 16 == 0 {
                                tokio::task::yield_now().await;
                            }
                        }
                        for task in tasks {
                            task.await.unwrap().unwrap();
                        }
                    });
                })
            })
            .collect();
        let mut through = 0;
        while through < THREADS * WAITS {
            through = next.load(Ordering::SeqCst);
            completion.complete_through(through);
            std::thread::yield_now();
        }
        for worker in workers {
            worker.join().unwrap();
        }
    }
}
