//! [`panic_message`]: the text of a caught panic.
//!
//! The spill reader catches decoder panics, the merge reports a panicked read task and the CLI
//! prints panics as one line; all need the message of a panic payload. It lives here, in the
//! lowest crate that needs it, so that the workspace has one copy.

use std::any::Any;

/// The message a panic was raised with: its payload as a `&str` or `String` (what `panic!` with
/// a literal or with format arguments gives), `None` for any other payload.
///
/// ```
/// let payload = std::panic::catch_unwind(|| panic!("bad {}", 42)).unwrap_err();
/// assert_eq!(arrow_shards_spill::panic_message(payload.as_ref()), Some("bad 42"));
/// ```
pub fn panic_message(payload: &(dyn Any + Send)) -> Option<&str> {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn str_string_and_other_payloads() {
        let literal: Box<dyn Any + Send> = Box::new("literal");
        let formatted: Box<dyn Any + Send> = Box::new(String::from("formatted"));
        let other: Box<dyn Any + Send> = Box::new(7_u32);
        assert_eq!(panic_message(literal.as_ref()), Some("literal"));
        assert_eq!(panic_message(formatted.as_ref()), Some("formatted"));
        assert_eq!(panic_message(other.as_ref()), None);
    }
}
