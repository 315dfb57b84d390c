//! Errors as one line for a user, causes kept. Typed errors carry their cause as a `source`
//! (not folded into a `String`), so a caller can still look at it; where an error becomes text
//! for an event, a log or the terminal, [`chain`] writes it with every cause.

use std::error::Error;

/// An error from a library we do not name in our own types (a backend's, the OS's).
pub type BoxError = Box<dyn Error + Send + Sync + 'static>;

/// `error: cause: its cause…`, one line. A cause whose text the line already ends with (an
/// error that prints its source itself) is not repeated.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !text.is_empty() && !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = c.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("saving the checkpoint")]
    struct Outer(#[source] Middle);

    #[derive(Debug, thiserror::Error)]
    #[error("writing step-000002: {0}")]
    struct Middle(#[source] std::io::Error);

    #[test]
    fn every_cause_once_in_order() {
        let io = std::io::Error::other("no space left on device");
        let e = Outer(Middle(io));
        // Middle prints its cause itself: it is not said twice.
        assert_eq!(
            chain(&e),
            "saving the checkpoint: writing step-000002: no space left on device"
        );
        let plain = std::io::Error::other("alone");
        assert_eq!(chain(&plain), "alone");
    }
}
