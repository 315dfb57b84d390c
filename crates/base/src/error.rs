//! Errors as one line for a user, causes kept. Typed errors carry their cause as a `source`
//! (not folded into a `String`), so a caller can still look at it; where an error becomes text
//! for an event, a log or the terminal, [`chain`] writes it with every cause.

use std::error::Error;

/// An error from a library we do not name in our own types (a backend's, the OS's).
pub type BoxError = Box<dyn Error + Send + Sync + 'static>;

/// `error: cause: its cause…`, one line. A cause whose text the line already ends with (an
/// error that prints its source itself) is not repeated; a library's message over several
/// lines (a parser's caret diagnostic) has its lines joined.
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
    if line.contains(['\n', '\r']) {
        line = line
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
    }
    line
}

/// Input that cannot work — an option, a setting, a change asked of a run, a line of a file — in
/// a user's words, with the parser's or the library's own error behind it where one stands
/// behind it (a number that does not parse, a tensor that cannot be read back).
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct Invalid {
    what: String,
    #[source]
    source: Option<BoxError>,
}

impl Invalid {
    /// A refusal no other error stands behind.
    pub fn new(what: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            source: None,
        }
    }

    /// For `map_err`: `what` is refused because of the error passed in, which is kept.
    pub fn because<E: Into<BoxError>>(what: impl Into<String>) -> impl FnOnce(E) -> Self {
        let what = what.into();
        move |e| Self {
            what,
            source: Some(e.into()),
        }
    }

    /// What is wrong, without the cause.
    pub fn what(&self) -> &str {
        &self.what
    }
}

impl From<String> for Invalid {
    fn from(what: String) -> Self {
        Self::new(what)
    }
}

impl From<&str> for Invalid {
    fn from(what: &str) -> Self {
        Self::new(what)
    }
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
        // A parser's diagnostic over several lines comes out on one.
        let caret = std::io::Error::other("syntax error:\n  --> 1:3\n  |\n1 | (5 8)\n  |   ^\n");
        assert_eq!(
            chain(&Outer(Middle(caret))),
            "saving the checkpoint: writing step-000002: syntax error: --> 1:3 | 1 | (5 8) |   ^"
        );
    }

    #[test]
    fn a_refusal_keeps_the_parsers_error() {
        let parse = "1e".parse::<f64>().expect_err("not a number");
        let e = Invalid::because("--reg cos=1e: the weight is not a number")(parse.clone());
        // The line a user sees names the refusal first and the parser's words after it.
        assert_eq!(e.to_string(), "--reg cos=1e: the weight is not a number");
        assert_eq!(chain(&e), format!("{}: {parse}", e.what()));
        let source = e.source().expect("the cause is kept");
        assert_eq!(
            source.downcast_ref::<std::num::ParseFloatError>(),
            Some(&parse)
        );
        let plain = Invalid::from("lr must be positive");
        assert!(plain.source().is_none());
        assert_eq!(chain(&plain), "lr must be positive");
    }
}
