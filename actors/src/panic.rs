//! What a caught panic said: the text every stage that catches a panic
//! (readers' decoding, trainers' steps) puts into its error.

/// The message of a panic payload.
pub(crate) fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".into()
    }
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
            "panic with a non-string payload"
        );
    }
}
