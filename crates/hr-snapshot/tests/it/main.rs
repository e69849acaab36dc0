//! Integration tests of hr-snapshot: one test per publication rule of the seed, against a fake
//! Core that records every call in order and checks what it is handed.

mod fake;
mod rules;
