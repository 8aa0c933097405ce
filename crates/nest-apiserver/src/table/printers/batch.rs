//! batch: Jobs and CronJobs (`printJob`, `printCronJob`).

use serde_json::{Value, json};

use crate::table::Printer;
use crate::table::format::{age, created, human_duration, name, seconds, template_cells, text_or_none};

fn job_status(job: &Value) -> String {
    let conditions = job["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let holds = |kind: &str| conditions.iter().any(|c| c["type"] == kind && c["status"] == "True");
    if holds("Complete") {
        "Complete".into()
    } else if holds("Failed") {
        "Failed".into()
    } else if !job["metadata"]["deletionTimestamp"].is_null() {
        "Terminating".into()
    } else if holds("Suspended") {
        "Suspended".into()
    } else {
        "Running".into()
    }
}

fn job_duration(job: &Value, now: i64) -> String {
    let Some(start) = seconds(&job["status"]["startTime"]) else { return String::new() };
    let end = seconds(&job["status"]["completionTime"]).unwrap_or(now);
    human_duration(end - start)
}

const JOB: Printer = Printer {
    columns: &[
        ("Name", "string", 0),
        ("Status", "string", 0),
        ("Completions", "string", 0),
        ("Duration", "string", 0),
        ("Age", "string", 0),
        ("Containers", "string", 1),
        ("Images", "string", 1),
        ("Selector", "string", 1),
    ],
    cells: |o, now| {
        let (spec, status) = (&o["spec"], &o["status"]);
        let mut cells = vec![
            name(o),
            json!(job_status(o)),
            json!(format!(
                "{}/{}",
                status["succeeded"].as_i64().unwrap_or(0),
                spec["completions"].as_i64().unwrap_or(1)
            )),
            json!(job_duration(o, now)),
            created(o, now),
        ];
        cells.extend(template_cells(spec));
        cells
    },
};

/// `True`, `False` or `<unset>` (`printBoolPtr`).
fn bool_or_unset(value: &Value) -> &'static str {
    match value.as_bool() {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    }
}

const CRON_JOB: Printer = Printer {
    columns: &[
        ("Name", "string", 0),
        ("Schedule", "string", 0),
        ("Timezone", "string", 0),
        ("Suspend", "boolean", 0),
        ("Active", "integer", 0),
        ("Last Schedule", "string", 0),
        ("Age", "string", 0),
        ("Containers", "string", 1),
        ("Images", "string", 1),
        ("Selector", "string", 1),
    ],
    cells: |o, now| {
        let (spec, status) = (&o["spec"], &o["status"]);
        let job = &spec["jobTemplate"]["spec"];
        let last = &status["lastScheduleTime"];
        let mut cells = vec![
            name(o),
            json!(spec["schedule"]),
            json!(text_or_none(&spec["timeZone"])),
            json!(bool_or_unset(&spec["suspend"])),
            json!(status["active"].as_array().map_or(0, Vec::len)),
            json!(if last.is_null() { "<none>".into() } else { age(last, now) }),
            created(o, now),
        ];
        cells.extend(template_cells(job));
        cells
    },
};

pub(super) fn of(kind: &str) -> Option<&'static Printer> {
    match kind {
        "Job" => Some(&JOB),
        "CronJob" => Some(&CRON_JOB),
        _ => None,
    }
}
