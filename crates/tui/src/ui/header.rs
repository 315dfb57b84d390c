//! The workbench's top line: the run, its device, its status and how far it is.

use ratatui::style::Color;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::app::App;
use crate::chrome;
use crate::format::{human_duration, shorten};
use crate::style::Palette;
use conelab_protocol::view::RunStatus;

/// The top line: run, device, status, progress. The status (a failure message can be long) is
/// what gets shortened to fit `width`, so the step it stopped at stays on screen.
/// The header's word for a run's status, and its colour.
fn header_status(status: &RunStatus) -> (String, Color) {
    match status {
        RunStatus::Starting => ("starting".to_string(), Color::Gray),
        RunStatus::Running => ("running".to_string(), Color::Green),
        RunStatus::Paused => ("paused".to_string(), Color::Yellow),
        RunStatus::Stopping => ("stopping…".to_string(), Color::Yellow),
        RunStatus::Finished { reason } => (
            format!("finished ({}) — q to leave", reason.name()),
            Color::Cyan,
        ),
        RunStatus::Diverged {
            step,
            weights_broken,
            ..
        } => (
            format!(
                "diverged at step {step} — {}",
                conelab_core::events::diverged_advice(*weights_broken)
            ),
            Color::Red,
        ),
        RunStatus::Failed { message } => (format!("failed: {message}"), Color::Red),
        RunStatus::Crashed => ("crashed (no live process)".to_string(), Color::Red),
    }
}

pub(super) fn header_line(app: &App, pal: &Palette, width: u16) -> Paragraph<'static> {
    let (status, color) = match (&app.run.status, &app.run.evaluating) {
        _ if app.awaiting_history && app.read_only.is_some() => {
            ("loading its history…".to_string(), Color::Gray)
        }
        _ if app.awaiting_history => ("connecting…".to_string(), Color::Gray),
        // An evaluation holds the steps (a minute and more on the CPU): say so, with how far.
        (RunStatus::Running | RunStatus::Stopping, Some(e)) => (
            format!("evaluating {} {:.0} %", e.split, 100.0 * e.fraction()),
            Color::Cyan,
        ),
        (status, _) => header_status(status),
    };
    let live = app.run.status.is_live();
    // A run that has ended closes its socket: that is not news, so only a live run is
    // "disconnected"; an ended one is read-only.
    let suffix = if app.connection_lost && live {
        " · disconnected"
    } else if (app.read_only.is_some() || app.connection_lost) && !live {
        " · read-only"
    } else {
        ""
    };
    let step = app.step();
    let total = app.run.info.total_steps.max(1);
    let epoch = app.run.last_step.map(|s| s.epoch).unwrap_or(0.0);
    let eta = app
        .eta_seconds()
        .filter(|_| live)
        .map(|s| format!(" · ETA {}", human_duration(s)))
        .unwrap_or_default();
    let title = " conelab ";
    let at = format!(
        " · step {step}/{total} ({:.0} %)",
        100.0 * step as f64 / total as f64
    );
    let epoch = format!(" · epoch {epoch:.2}");
    let width_of = |parts: &[&str]| parts.iter().map(|p| p.chars().count()).sum::<usize>();
    // The state word is never cut ("finished (completed)", "diverged at step 5", "failed"):
    // what gives way first is the ETA, then the epoch, then the run's name, then the status's
    // tail ("— q to leave", a failure's message).
    // A hint after " — " ("q to leave", the diverged advice) is shown whole or not at all (the
    // Events pane says it too); a failure's message is cut, marked with "…": one character
    // more than the head.
    let hint_at = status.find(" — ");
    let head = hint_at
        .or_else(|| status.find(": ").map(|i| i + 1))
        .map_or(status.chars().count(), |i| status[..i].chars().count());
    let head = if hint_at.is_none() && status.chars().count() > head {
        head + 1
    } else {
        head
    };
    // A diverged run's advice is what the user needs now: the name and the progress give way
    // before it does (issue #58: it was the first thing dropped at 120 columns).
    let head = if matches!(app.run.status, RunStatus::Diverged { .. }) {
        status.chars().count()
    } else {
        head
    };
    let name = app.run_title();
    let device = app.run.info.device.clone();
    let run_with = |max: usize| {
        if max == 0 {
            format!("{device} · ")
        } else {
            format!("{} · {device} · ", shorten(&name, max))
        }
    };
    let fits = |run: &str, progress: &str, status_len: usize| {
        width_of(&[title, run, suffix, progress]) + status_len <= width as usize
    };
    let wanted = status.chars().count().min(24).max(head);
    let mut run = run_with(48);
    let mut progress = at.clone();
    for candidate in [format!("{at}{epoch}{eta}"), format!("{at}{epoch}")] {
        if fits(&run, &candidate, wanted) {
            progress = candidate;
            break;
        }
    }
    // The name down to 16 characters, then the step without its percentage, then the name
    // further: a finished run at 80 columns kept "— q to leave" and lost its name (issue #58).
    let short_at = format!(" · step {step}/{total}");
    'fit: for (progress_now, names) in [
        (progress.clone(), &[48usize, 40, 32, 24, 16][..]),
        (short_at, &[48, 40, 32, 24, 16, 12, 8, 0][..]),
    ] {
        for &max in names {
            run = run_with(max);
            progress = progress_now.clone();
            if fits(&run, &progress, head) {
                break 'fit;
            }
        }
    }
    let room = (width as usize)
        .saturating_sub(width_of(&[title, &run, suffix, &progress]))
        .max(head);
    let status = match hint_at {
        Some(at) if room < status.chars().count() => format!("{}{suffix}", &status[..at]),
        _ => format!("{}{suffix}", shorten(&status, room)),
    };
    Paragraph::new(Line::from(vec![
        chrome::title(title, pal.fg(Color::LightGreen)),
        Span::raw(run),
        Span::styled(status, pal.fg(color)),
        Span::raw(progress),
    ]))
}
