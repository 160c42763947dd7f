//! The pure domain of anteroom: who gets in, and when.
//!
//! Everything that decides admission lives here as plain functions over plain data: rooms and
//! their configuration ([`room`]), the waiting line and its exact `ahead` counts
//! ([`waiting`]), the admission engine with its atomic `tick` ([`engine`]), wait estimates and
//! the polling schedule ([`eta`]), and the configuration file model ([`config`]).
//!
//! This crate must not depend on tokio, hyper, axum, redis, redb or anything else that does
//! I/O, and its sources never read a clock or the operating system's randomness: time comes in
//! as a [`Timestamp`] argument and randomness as an `&mut impl Rng`. A tidy test enforces this.

pub mod adaptive;
pub mod challenge;
mod cidr;
pub mod clock;
pub mod config;
pub mod counters;
pub mod duration;
pub mod engine;
pub mod eta;
pub mod ids;
pub mod inline_text;
mod key_hash;
pub mod lottery;
pub mod page_template;
pub mod ratelimit;
pub mod request_path;
pub mod room;
pub mod waiting;

pub use clock::{Clock, ManualClock, Timestamp};
pub use ids::{RoomId, SessionId, TicketId};
