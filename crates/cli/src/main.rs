//! The `arrow-shards` command (see issue: CLI). Not built yet: it only says so.
fn main() {
    eprintln!("arrow-shards: the command line is not implemented yet");
    std::process::exit(2);
}
