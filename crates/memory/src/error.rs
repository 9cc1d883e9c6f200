use thiserror::Error;

/// A reservation that would take a pool past its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error(
    "memory exhausted: needed {needed} bytes with {reserved} of {limit} bytes already reserved"
)]
#[non_exhaustive]
pub struct MemoryExhausted {
    /// Bytes the refused request asked for.
    pub needed: usize,
    /// Bytes reserved in the pool when the request was refused.
    pub reserved: usize,
    /// The pool's limit.
    pub limit: usize,
}

impl MemoryExhausted {
    /// Builds the error; for pools implemented outside this crate.
    pub fn new(needed: usize, reserved: usize, limit: usize) -> Self {
        Self {
            needed,
            reserved,
            limit,
        }
    }
}
