//! What a caught panic said: the one reading of a panic payload, for every
//! place in the workspace that catches one (the readers' `xmap`, the
//! transform workers, the actor pipeline's stages). A leaf: it imports
//! nothing of the crate, so any module may use it.

use std::any::Any;

/// The text of a panic payload: the message of `panic!("…")` (a `&str` or
/// a `String`), or a note that the payload is not text (`panic_any(3)`).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic payload that is not text)".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::panic_message;

    #[test]
    fn the_text_of_str_string_and_other_payloads() {
        let text = |f: fn()| panic_message(&*std::panic::catch_unwind(f).unwrap_err());
        assert_eq!(text(|| panic!("static")), "static");
        assert_eq!(text(|| panic!("formatted {}", 7)), "formatted 7");
        assert_eq!(
            text(|| std::panic::panic_any(3u8)),
            "(a panic payload that is not text)"
        );
    }
}
