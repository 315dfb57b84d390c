//! A thread that hands on everything a channel receives: the viewer's sources (a run's link,
//! followed folders) each feed the one event loop this way.

use std::io;
use std::sync::mpsc::Receiver;

/// Hands every item `from` receives to `deliver` on a thread named `name`. It stops when
/// `deliver` says the other side is gone (returns `false`), or when `from` ends, and then
/// `ended` says so.
pub fn relay<T: Send + 'static>(
    name: &str,
    from: Receiver<T>,
    deliver: impl Fn(T) -> bool + Send + 'static,
    ended: impl FnOnce() + Send + 'static,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            for item in from {
                if !deliver(item) {
                    return;
                }
            }
            ended();
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn everything_in_order_then_the_end() {
        let (tx, rx) = mpsc::channel();
        let (out, got) = mpsc::channel();
        let end = out.clone();
        relay(
            "test-relay",
            rx,
            move |x: u32| out.send(Some(x)).is_ok(),
            move || {
                let _ = end.send(None);
            },
        )
        .expect("thread");
        for x in [3, 1, 2] {
            tx.send(x).expect("send");
        }
        drop(tx);
        let seen: Vec<Option<u32>> = got.iter().take(4).collect();
        assert_eq!(seen, [Some(3), Some(1), Some(2), None]);
    }

    #[test]
    fn a_receiver_that_is_gone_stops_the_relay_without_an_end() {
        let (tx, rx) = mpsc::channel();
        let (ended_tx, ended_rx) = mpsc::channel();
        relay(
            "test-relay",
            rx,
            |_: u32| false,
            move || {
                let _ = ended_tx.send(());
            },
        )
        .expect("thread");
        tx.send(1).expect("send");
        // The relay stopped at the first item: `ended` never ran, and its sender was dropped.
        assert!(ended_rx.recv().is_err());
        // …and it no longer takes items.
        while tx.send(2).is_ok() {
            std::thread::yield_now();
        }
    }
}
