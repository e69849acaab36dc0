//! Integration tests of hr-det: wire types against JSON the real client sends and expects, and
//! the client against small fake masters on loopback (retries, error envelopes, auth).

mod captured;
mod client;
mod wire;
