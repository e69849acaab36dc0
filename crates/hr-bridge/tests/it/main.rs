//! Integration tests of hr-bridge: the service supervisor and the service clients.

mod nemo_gym;
mod openenv;
mod service;
