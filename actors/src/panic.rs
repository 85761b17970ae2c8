//! What a caught panic said, for the stages that catch one (readers'
//! decoding, trainers' steps) and put it into their error: the core's
//! [`panic_message`], for a payload taken by value.

use feedline::panic::panic_message;

/// The message of a panic payload, as [`panic_message`] reads it.
pub(crate) fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    panic_message(&*p)
}

#[cfg(test)]
mod tests {
    use super::panic_text;

    #[test]
    fn the_text_of_str_string_and_other_payloads() {
        let text = |f: fn()| panic_text(std::panic::catch_unwind(f).unwrap_err());
        assert_eq!(text(|| panic!("static")), "static");
        assert_eq!(text(|| panic!("formatted {}", 7)), "formatted 7");
        assert_eq!(
            text(|| std::panic::panic_any(3u8)),
            "(a panic payload that is not text)"
        );
    }
}
