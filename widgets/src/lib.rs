//! Reusable ratatui widgets for conelab, with no knowledge of training.
