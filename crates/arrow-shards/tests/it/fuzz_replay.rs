//! The fuzz targets on stable: the committed corpus (`fuzz/corpus/<target>/`) and seeded random
//! inputs through the same functions the cargo-fuzz targets call (`arrow_shards_spill::fuzz` for
//! the decode targets, `arrow_shards::fuzz` for the buffer's).
//!
//! `ARROW_SHARDS_WRITE_SEEDS=1 cargo test -p arrow-shards --test it fuzz_replay` (re)writes
//! the seed files; `ARROW_SHARDS_FUZZ_SECONDS=n` keeps feeding random inputs for `n` seconds
//! (a long run on stable, when nightly and libFuzzer are not at hand) and prints the count.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use arrow_shards_spill::fuzz::{DecodeTarget, Outcome, PayloadTarget};

use arrow_shards::fuzz::state_machine;

fn corpus(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

fn corpus_inputs(target: &str) -> Vec<Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(corpus(target)) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    paths.sort();
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

fn write_seeds(target: &str, seeds: &[Vec<u8>]) {
    if std::env::var_os("ARROW_SHARDS_WRITE_SEEDS").is_none() {
        return;
    }
    let dir = corpus(target);
    std::fs::create_dir_all(&dir).unwrap();
    for (i, seed) in seeds.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i:02}")), seed).unwrap();
    }
}

/// A random damage of `bytes`: flips, a truncation, garbage appended, a range moved.
fn mutate(bytes: &[u8], rng: &mut StdRng) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for _ in 0..rng.random_range(1..4) {
        if out.is_empty() {
            break;
        }
        match rng.random_range(0..5) {
            0 => {
                let i = rng.random_range(0..out.len());
                out[i] ^= 1 << rng.random_range(0..8);
            }
            1 => {
                let i = rng.random_range(0..out.len());
                out[i] = rng.random();
            }
            2 => out.truncate(rng.random_range(0..out.len())),
            3 => out.extend((0..rng.random_range(1..64)).map(|_| rng.random::<u8>())),
            _ => {
                let a = rng.random_range(0..out.len());
                let b = rng.random_range(a..out.len().min(a + 256));
                let piece: Vec<u8> = out[a..b].to_vec();
                let at = rng.random_range(0..out.len());
                out.splice(at..at, piece);
            }
        }
    }
    out
}

#[test]
fn segment_decode_target_over_corpus_and_mutations() {
    let target = DecodeTarget::new();
    assert_eq!(
        target.run(target.original()),
        3,
        "the intact run reads back"
    );
    let original = target.original().to_vec();
    let mut seeds = vec![original.clone()];
    seeds.push(original[..original.len() / 2].to_vec());
    seeds.push(Vec::new());
    write_seeds("segment_decode", &seeds);

    let inputs = corpus_inputs("segment_decode");
    for input in &inputs {
        target.run(input);
    }
    let mut rng = StdRng::seed_from_u64(0x5e9);
    let (mut damaged, mut runs) = (0, 0);
    while keep_going("segment_decode", runs, 400) {
        let input = mutate(&original, &mut rng);
        if target.run(&input) < 3 {
            damaged += 1;
        }
        runs += 1;
    }
    assert!(
        damaged > runs * 3 / 4,
        "the mutations do damage segments: {damaged} of {runs}"
    );
}

#[test]
fn ipc_payload_target_over_corpus_and_mutations() {
    let target = PayloadTarget::new();
    let payload = target.payload().to_vec();
    assert_eq!(target.run(&payload), Outcome::Decoded, "the real payload");
    let seeds = vec![payload.clone(), payload[..payload.len() / 3].to_vec()];
    write_seeds("ipc_payload", &seeds);
    for input in seeds.iter().chain(&corpus_inputs("ipc_payload")) {
        target.run(input);
    }
    let mut rng = StdRng::seed_from_u64(0x1bc);
    let (mut corrupt, mut panics, mut runs) = (0, 0, 0);
    while keep_going("ipc_payload", runs, 300) {
        let input = mutate(&payload, &mut rng);
        match target.run(&input) {
            Outcome::Decoded => {}
            Outcome::Corrupt => corrupt += 1,
            Outcome::DecoderPanic => panics += 1,
        }
        runs += 1;
    }
    // Damage behind a valid checksum is mostly caught by the decoder's own checks (lengths,
    // offsets, validation) or by the schema and row count checks after it.
    assert!(
        corrupt + panics > runs / 2,
        "{corrupt} + {panics} of {runs} refused"
    );
    // Buffers outside their body made arrow-ipc panic on ~4% of these inputs before the spill
    // crate checked them; what is left (a buffer length that is no multiple of its element
    // width) is rare.
    assert!(
        panics * 100 <= runs,
        "{panics} of {runs} inputs made the decoder panic"
    );
}

/// Whether to feed another random input after `runs`: `runs < default_runs`, or with
/// `ARROW_SHARDS_FUZZ_SECONDS` until that many seconds have passed (reporting `runs` then).
fn keep_going(target: &str, runs: usize, default_runs: usize) -> bool {
    use std::sync::OnceLock;
    static START: OnceLock<Instant> = OnceLock::new();
    let seconds: Option<u64> = std::env::var("ARROW_SHARDS_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok());
    let Some(seconds) = seconds else {
        return runs < default_runs;
    };
    let deadline = *START.get_or_init(Instant::now) + Duration::from_secs(seconds);
    if Instant::now() < deadline {
        return true;
    }
    eprintln!("long run of {target}: {runs} inputs in {seconds} s, no failure");
    false
}

#[test]
fn state_machine_target_over_corpus_and_random_inputs() {
    // hand-written seeds: spill-heavy writes then reads; seal-read-write races; half reads
    let mut seeds: Vec<Vec<u8>> = vec![
        vec![
            3, 0, 0, 0, 0, 127, 8, 1, 127, 16, 2, 127, 0, 3, 127, 4, 0, 5, 0, 7, 0,
        ],
        vec![
            1, 15, 1, 0, 0, 100, 4, 0, 5, 0, 0, 0, 100, 3, 1, 50, 6, 1, 1, 7, 0,
        ],
        vec![
            2, 2, 2, 0, 1, 90, 0, 2, 90, 6, 1, 0, 6, 2, 2, 4, 1, 5, 1, 7, 0, 0, 0, 9,
        ],
    ];
    let mut rng = StdRng::seed_from_u64(0xf022);
    for _ in 0..5 {
        let len = rng.random_range(16..200);
        seeds.push((0..len).map(|_| rng.random()).collect());
    }
    write_seeds("state_machine", &seeds);
    for input in seeds.iter().chain(&corpus_inputs("state_machine")) {
        state_machine(input, tempfile::tempdir().expect("temp dir").path());
    }
    let mut runs = 0;
    while keep_going("state_machine", runs, 150) {
        let len = rng.random_range(0..300);
        let input: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        state_machine(&input, tempfile::tempdir().expect("temp dir").path());
        runs += 1;
    }
}
