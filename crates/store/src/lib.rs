//! Storage traits for rooms, tickets and sessions, with memory and embedded (redb) backends.
