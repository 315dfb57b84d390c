//! A sweep as a SLURM job array (`--slurm`): one array task per run. The batch script starts
//! `conelab sweep task DIR INDEX`, which `exec`s `conelab train --headless` for run INDEX (a new
//! run, or `--resume` when its folder has a checkpoint; nothing when it completed before).
//!
//! Preemption-safe: `--signal=B:TERM@120` sends TERM to the batch shell two minutes before the
//! time limit; the shell passes it to the run, which stops after its step with a checkpoint and
//! exits 75; the shell then asks `scontrol requeue` for its own task (`--requeue` alone does not
//! requeue after a timeout or a normal exit), and the requeued task resumes the run exactly.

use std::path::Path;
use std::process::Command;

use super::SweepError;
// The job and the tasks' states are part of the record (sweep.json, `sweep status`); this
// module asks SLURM for them.
use super::record::{SlurmJob, SweepRecord, TaskStates};

/// What `sbatch` is asked for besides the array itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SlurmOptions {
    pub partition: Option<String>,
    pub gres: Option<String>,
    pub time: Option<String>,
    pub account: Option<String>,
    pub cpus_per_task: Option<u32>,
    pub mem: Option<String>,
    /// More `#SBATCH` lines, as given (`--sbatch-arg=--qos=high`).
    pub extra: Vec<String>,
}

/// The batch script's file in a sweep folder.
pub const SCRIPT: &str = "sweep.sbatch";

/// `text` quoted for the shell (single quotes; a single quote closed, escaped, reopened).
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The job array's batch script for `record` in sweep folder `out`, running the binary `exe`.
pub fn script(
    record: &SweepRecord,
    out: &Path,
    exe: &Path,
    name: &str,
    options: &SlurmOptions,
) -> String {
    let n = record.runs.len();
    let logs = out.join(super::local::LOGS);
    let mut lines = vec![
        "#!/bin/bash".to_string(),
        format!(
            "#SBATCH --job-name={}",
            super::safe(&format!("conelab-{name}"))
        ),
        format!("#SBATCH --array=0-{}", n.saturating_sub(1)),
        format!("#SBATCH --output={}/slurm-%A_%a.log", logs.display()),
        "#SBATCH --open-mode=append".into(),
        "#SBATCH --signal=B:TERM@120".into(),
        "#SBATCH --requeue".into(),
    ];
    let mut option = |flag: &str, value: &Option<String>| {
        if let Some(v) = value {
            lines.push(format!("#SBATCH --{flag}={v}"));
        }
    };
    option("partition", &options.partition);
    option("gres", &options.gres);
    option("time", &options.time);
    option("account", &options.account);
    option(
        "cpus-per-task",
        &options.cpus_per_task.map(|c| c.to_string()),
    );
    option("mem", &options.mem);
    for e in &options.extra {
        lines.push(format!("#SBATCH {e}"));
    }
    lines.push(format!(
        r#"
# conelab sweep: one task per run of {sweep} (see sweep.json there).
set -u
term=0
# TERM (two minutes before the time limit, or scancel --signal=TERM): passed to the run, which
# stops after its step with a checkpoint and exits 75.
trap 'term=1; kill -TERM "$child" 2>/dev/null' TERM
{exe} sweep task {sweep} "$SLURM_ARRAY_TASK_ID" &
child=$!
wait "$child"
status=$?
# A trapped signal interrupts wait; wait again for the run's own exit status.
while [ "$term" = 1 ]; do
    term=0
    wait "$child"
    status=$?
done
if [ "$status" = 75 ]; then
    # Stopped after saving: back in the queue, to resume exactly.
    echo "conelab sweep: task ${{SLURM_ARRAY_TASK_ID}} stopped after saving (exit 75): requeued" >&2
    scontrol requeue "${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}"
fi
exit "$status""#,
        sweep = quote(&out.display().to_string()),
        exe = quote(&exe.display().to_string()),
    ));
    lines.join("\n") + "\n"
}

/// Writes the script and submits it with `sbatch --parsable`; the job id.
pub fn submit(script_text: &str, out: &Path) -> Result<SlurmJob, SweepError> {
    // SLURM opens each task's output file itself and fails the task when its folder is missing.
    let logs = out.join(super::local::LOGS);
    std::fs::create_dir_all(&logs).map_err(|source| SweepError::Io {
        path: logs.clone(),
        source,
    })?;
    let path = out.join(SCRIPT);
    conelab_base::atomic::write_file_as("sweep", &path, script_text.as_bytes()).map_err(
        |source| SweepError::Io {
            path: path.clone(),
            source,
        },
    )?;
    let output = Command::new("sbatch")
        .arg("--parsable")
        .arg(&path)
        .output()
        .map_err(|e| {
            SweepError::Invalid(format!(
                "sbatch: {e} (is this a SLURM login node? the script is in {})",
                path.display()
            ))
        })?;
    if !output.status.success() {
        let err = String::from_utf8_lossy(&output.stderr);
        return Err(SweepError::Invalid(format!(
            "sbatch refused the job: {}",
            err.lines().next().unwrap_or("no message")
        )));
    }
    // `--parsable` prints `JOBID` or `JOBID;CLUSTER`.
    let text = String::from_utf8_lossy(&output.stdout);
    let job_id = text
        .trim()
        .split(';')
        .next()
        .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| SweepError::Invalid(format!("sbatch answered {text:?}, not a job id")))?
        .to_string();
    Ok(SlurmJob {
        job_id,
        script: path,
    })
}

/// The queue's state of each array task of `job` (`squeue`), by task index; empty when squeue
/// does not answer (not a SLURM host, or the job has left the queue).
pub fn queue_states(job: &SlurmJob) -> Vec<(usize, String)> {
    let Ok(output) = Command::new("squeue")
        .args([
            "--noheader",
            "--array",
            "--format=%i|%T",
            "--job",
            &job.job_id,
        ])
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| {
            let (id, state) = l.trim().split_once('|')?;
            let task = id.rsplit_once('_')?.1.parse().ok()?;
            Some((task, state.to_string()))
        })
        .collect()
}

/// Asks `squeue` and `sacct` about `job`'s tasks.
pub fn task_states(job: &SlurmJob) -> TaskStates {
    TaskStates {
        queue: queue_states(job),
        accounting: accounting_states(job),
    }
}

/// Each array task's last accounting record as "STATE EXIT" (`sacct`), by task index; None when
/// sacct does not answer.
pub fn accounting_states(job: &SlurmJob) -> Option<Vec<(usize, String)>> {
    let output = Command::new("sacct")
        .args([
            "--jobs",
            &job.job_id,
            "--allocations",
            "--noheader",
            "--parsable2",
            "--format=JobID,State,ExitCode",
        ])
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| parse_accounting(&String::from_utf8_lossy(&output.stdout)))
}

/// sacct's `JobID|State|ExitCode` lines: `4242_1|COMPLETED|0:0` → (1, "COMPLETED 0:0"). A task
/// listed twice (a requeue) keeps its last record; pending ranges (`4242_[2-3]`) are skipped
/// (squeue shows those).
fn parse_accounting(text: &str) -> Vec<(usize, String)> {
    let mut states: Vec<(usize, String)> = Vec::new();
    for line in text.lines() {
        let mut fields = line.trim().split('|');
        let (Some(id), Some(state), exit) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        let Some(task) = id
            .rsplit_once('_')
            .and_then(|(_, t)| t.parse::<usize>().ok())
        else {
            continue;
        };
        let text = match exit {
            Some(code) if !code.is_empty() => format!("{state} {code}"),
            _ => state.to_string(),
        };
        match states.iter_mut().find(|(t, _)| *t == task) {
            Some(entry) => entry.1 = text,
            None => states.push((task, text)),
        }
    }
    states
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::Sweep;

    #[test]
    fn sacct_lines_become_each_tasks_last_record() {
        let text = "4242_0|COMPLETED|0:0\n4242_1|REQUEUED|0:15\n4242_1|RUNNING|0:0\n\
                    4242_[2-3]|PENDING|0:0\n4242_4|CANCELLED by 0|0:15\ngarbage\n4242_x|FAILED|1:0\n";
        assert_eq!(
            parse_accounting(text),
            vec![
                (0, "COMPLETED 0:0".to_string()),
                (1, "RUNNING 0:0".to_string()),
                (4, "CANCELLED by 0 0:15".to_string()),
            ]
        );
        assert!(parse_accounting("").is_empty());
    }

    #[test]
    fn the_script_asks_for_the_array_the_signal_and_the_options() {
        let tmp = tempfile::tempdir().expect("tmp");
        let out = tmp.path().join("my sweep");
        let sweep = Sweep::parse("[grid]\nseed = [1, 2, 3]\n", "s").expect("ok");
        let record = SweepRecord::new(&sweep, &out);
        let options = SlurmOptions {
            partition: Some("gpu".into()),
            gres: Some("gpu:1".into()),
            time: Some("04:00:00".into()),
            cpus_per_task: Some(8),
            extra: vec!["--qos=high".into()],
            ..SlurmOptions::default()
        };
        let text = script(&record, &out, Path::new("/opt/it's/conelab"), "s", &options);
        let sbatch: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("#SBATCH "))
            .collect();
        for want in [
            "--array=0-2",
            "--signal=B:TERM@120",
            "--requeue",
            "--partition=gpu",
            "--gres=gpu:1",
            "--time=04:00:00",
            "--cpus-per-task=8",
            "--qos=high",
            "--job-name=conelab-s",
        ] {
            assert!(sbatch.contains(&want), "{want} missing from {sbatch:?}");
        }
        assert!(!sbatch.iter().any(|l| l.starts_with("--account")));
        // Paths quoted for the shell, a quote in them too.
        assert!(
            text.contains(r"'/opt/it'\''s/conelab' sweep task '"),
            "{text}"
        );
        assert!(text.contains("my sweep'"), "{text}");
        assert!(text.starts_with("#!/bin/bash\n"));
    }
}
