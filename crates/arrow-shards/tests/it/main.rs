//! Integration tests of the buffer: one binary, one module per concern.

mod accounting;
mod common;
mod concurrency;
mod errors;
mod exactly_once;
mod pressure;
mod spilling;
mod waiting;
