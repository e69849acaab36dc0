//! Integration tests of hr-bridge: the service supervisor and the service clients (against the
//! Rust fixture servers of `servers`, which exist only here).

mod nemo_gym;
mod openenv;
mod servers;
mod service;
