//! Integration tests of hr-bridge: the service supervisor and the service clients.

mod openenv;
mod service;
