//! Integration tests of the `arrow-shards` binary: each test runs the built command on the
//! committed fixtures (`testdata/`) or on small inputs it writes itself, and checks the files
//! and figures it produces.

mod errors;
mod file_caps;
mod r#gen;
mod inputs;
mod interrupt;
mod layout;
mod output_options;
mod shuffle;
mod small_budget;
mod sort;
mod spare_threads;
mod util;
