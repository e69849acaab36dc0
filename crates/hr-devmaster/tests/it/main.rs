//! Integration tests of the devmaster through `hr-det`: error envelopes and statuses, the pause /
//! activate / kill semantics with real child processes, the restore choice and its tie-break,
//! and durability across a restart on the same state folder.

mod context;
mod fuzz;
mod gc;
mod lifecycle;
mod searcher;
mod support;
mod tls;
mod tokens;
mod trial_info;
mod wire_errors;
