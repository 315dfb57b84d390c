//! The workbench's keys, for its help overlay (the compare view and the browser have their own).

/// Every key, for the help overlay: (keys, what they do).
pub const HELP: &[(&str, &str)] = &[
    ("?", "this help (↑↓ scroll it, any other key closes it)"),
    (
        "q / Ctrl-C",
        "quit: on a live run asks — detach, stop and save, stop, cancel",
    ),
    (
        "d",
        "detach: leave the workbench, training goes on (`conelab attach RUN` comes back)",
    ),
    ("Tab / Shift-Tab", "next / previous pane"),
    ("1 … 8", "focus a pane"),
    ("z", "zoom the focused pane (Esc: back)"),
    ("p", "pause / resume training"),
    ("s", "save a checkpoint now"),
    ("l", "log scale on the loss curve"),
    (
        "m",
        "smoothing of the loss curve off / back to its last weight (TensorBoard's; 0.6 at first, as in the compare view)",
    ),
    (
        "+ / - / 0",
        "outside Controls: smoothing weight up / down by 0.1, off (as in compare)",
    ),
    (
        "M",
        "mouse capture on/off (off: select text with the mouse, e.g. over SSH)",
    ),
    ("↑ ↓ / k j", "Controls: select"),
    (
        "Space / Enter",
        "Controls: switch on/off, freeze/unfreeze, cycle gate-freeze, apply loss",
    ),
    (
        "+ / -",
        "Controls: weight or learning rate ×2 / ÷2 (of the acknowledged value); choose the loss",
    ),
    (
        "=",
        "Controls: type a weight or learning rate (Enter sends, Esc cancels)",
    ),
    (
        "/",
        "Neighbours: search a word (type, ↑↓, Enter; Esc closes)",
    ),
    (
        "w",
        "Neighbours: watch (pin) the selected word, or unpin it",
    ),
    (
        "c",
        "Embedding: uncentred (the cone) / centred (PCA) projection",
    ),
    (
        "[ ] / ← →",
        "Embedding, Groups, Spectrum: older / newer snapshot (past the newest: live)",
    ),
    (
        "Home / End",
        "Embedding, Groups, Spectrum: the first snapshot / the newest (live)",
    ),
    (
        "In the quit dialog",
        "d detach · s stop and save · x stop without saving · c or Esc cancel",
    ),
];
