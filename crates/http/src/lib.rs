//! The HTTP surface of anteroom: public API, and (later) gateway, pages and admin.
