//! End-to-end tests: the real `hessian-recipes` binary, driven as a user drives it.

mod budget;
mod cluster;
mod dataset;
mod demo;
mod evaluate;
mod flood;
mod generate;
mod learning;
mod logging;
mod managed;
mod model;
mod model_gguf;
mod parallel;
mod preflight;
mod prepare;
mod qualify;
mod restore;
mod signing;
mod train;
