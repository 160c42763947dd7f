//! The lane of status polls: a node's `status` calls go over a connection of their own, and at
//! most [`MAX_STATUSES_IN_FLIGHT`] of them at once.
//!
//! In a flash crowd most of a node's Redis calls are polls. On the one multiplexed connection
//! the store's other calls share, a tick (which admits), a join or an ended session's refill
//! was pipelined behind every poll sent before it, so when Redis fell behind, admission
//! waited on polls. On a connection of their own the polls queue apart: Redis serves its
//! clients in turn, so the room's other calls are not behind the polls' backlog. And a poll
//! beyond the bound is refused at once (the API answers 503 `store_unavailable` with
//! `Retry-After`) instead of being sent to a Redis that could not answer it within the bound
//! anyway: such a poll only took time from the calls that admit and join.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::OnceCell;

use super::connection::{Client, Connection};
use crate::StoreError;

/// How many status calls a node has in flight at most. Each costs Redis about 0.1 ms alone,
/// so even the three nodes' bounds together are tens of milliseconds of Redis' time queued,
/// far within the store's bound of 2 s; past that queue, more polls in flight would add
/// latency for every call and no answers.
pub(super) const MAX_STATUSES_IN_FLIGHT: usize = 128;

/// The status calls' connection and the count of those in flight.
#[derive(Default)]
pub(super) struct StatusLane {
    connection: OnceCell<Connection>,
    in_flight: AtomicUsize,
}

/// One status call's place in the lane, given back when dropped (answered, failed or given up
/// at the bound).
pub(super) struct Slot<'a> {
    in_flight: &'a AtomicUsize,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl StatusLane {
    /// A place for one more status call, or the error that refuses it when the lane is full.
    pub(super) fn slot(&self) -> Result<Slot<'_>, StoreError> {
        let taken = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |count| {
                (count < MAX_STATUSES_IN_FLIGHT).then_some(count + 1)
            });
        match taken {
            Ok(_) => Ok(Slot {
                in_flight: &self.in_flight,
            }),
            Err(_) => Err(StoreError::Backend {
                message: format!(
                    "this node already has {MAX_STATUSES_IN_FLIGHT} status calls in flight to \
                     redis; the poll was not sent"
                ),
                source: None,
            }),
        }
    }

    /// The lane's connection, made by the first status call (the library is loaded by the
    /// store's own connection, or again by the call that finds it missing).
    pub(super) async fn connection(
        &self,
        client: &Client,
        timeout: Duration,
    ) -> Result<Connection, StoreError> {
        self.connection
            .get_or_try_init(|| async {
                client.connect(timeout).await.map_err(|error| {
                    StoreError::backend("cannot connect to redis for status calls", error)
                })
            })
            .await
            .cloned()
    }
}
