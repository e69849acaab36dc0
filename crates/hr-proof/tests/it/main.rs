//! Integration tests of hr-proof.

mod fuzz;
