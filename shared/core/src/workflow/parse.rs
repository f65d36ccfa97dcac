//! Reading `POST /ojs/v1/workflows` into a [`WorkflowSpec`]. The members are read in the
//! order the refusals have always come in, so a body with several faults is refused for
//! the same one as before.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::{Callbacks, Step, WorkflowKind, WorkflowSpec, MAX_STEPS};
use crate::error::{ErrorCode, OjsError};
use crate::fields::Fields;
use crate::job::NewJob;

fn bad(message: impl Into<String>, path: &str) -> OjsError {
    OjsError::invalid_request(message).with_path(path)
}

/// The error of the job at `path` (a step or a callback), under that path.
fn nested(e: &OjsError, path: &str) -> OjsError {
    OjsError::new(e.code.nested(), format!("{path}: {}", e.message)).with_path(path)
}

/// A workflow's jobs take no `unique` policy: the workflow spec does not say what a step
/// (or callback) refused as a duplicate would do to its workflow, so one is refused here
/// rather than stored and ignored (README, "Deliberate choices").
fn without_unique(job: &NewJob, path: &str) -> Result<(), OjsError> {
    if job.spec.unique.is_none() {
        return Ok(());
    }
    Err(OjsError::invalid_request(format!(
        "{path}: a workflow's jobs take no unique policy (a step refused as a duplicate would leave its workflow undefined); deduplicate the workflow instead"
    ))
    .with_path(&format!("{path}.unique")))
}

/// The names of batch callbacks, as `callbacks` keys and as callback step markers.
const CALLBACK_NAMES: [&str; 3] = ["on_complete", "on_success", "on_failure"];

/// The callback a step stands for in a request without `type`: `options.callback_type`
/// (the Python SDK) or an id `on-complete`/`on_complete`... (the Go SDK).
fn callback_name(step: &Map<String, Value>) -> Option<&'static str> {
    let marked = step
        .get("options")
        .and_then(|o| o.get("callback_type"))
        .and_then(Value::as_str)
        .or_else(|| step.get("id").and_then(Value::as_str))?
        .replace('-', "_");
    CALLBACK_NAMES.into_iter().find(|n| *n == marked)
}

/// `defaults` under the keys `step` does not set itself (the request's top-level
/// `options`, "default enqueue options for all steps", HTTP binding §14.1).
fn with_defaults(
    mut step: Map<String, Value>,
    defaults: &Map<String, Value>,
) -> Map<String, Value> {
    if defaults.is_empty() {
        return step;
    }
    let options = step
        .entry("options")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(options) = options {
        for (k, v) in defaults {
            options.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    step
}

/// A callback's job template, checked as a PUSH body.
fn callback_template(
    mut t: Map<String, Value>,
    path: &str,
) -> Result<Map<String, Value>, OjsError> {
    for key in ["id", "depends_on"] {
        t.remove(key);
    }
    if let Some(Value::Object(o)) = t.get_mut("options") {
        o.remove("callback_type");
    }
    t.entry("args").or_insert_with(|| Value::Array(Vec::new()));
    // Checked as it will be pushed: with the meta keys firing adds, at their longest.
    let mut fired = t.clone();
    if let Value::Object(meta) = fired
        .entry("meta")
        .or_insert_with(|| Value::Object(Map::new()))
    {
        meta.insert(
            "workflow_id".into(),
            "00000000-0000-0000-0000-000000000000".into(),
        );
        meta.insert("callback".into(), "on_complete".into());
    }
    let job = NewJob::from_json(Value::Object(fired)).map_err(|e| nested(&e, path))?;
    without_unique(&job, path)?;
    Ok(t)
}

fn check_acyclic(steps: &[Step]) -> Result<(), OjsError> {
    // Kahn's algorithm: every step must become ready.
    let mut indegree: Vec<usize> = steps.iter().map(|s| s.depends_on.len()).collect();
    let mut dependents = vec![Vec::new(); steps.len()];
    for (i, s) in steps.iter().enumerate() {
        for d in &s.depends_on {
            dependents[*d].push(i);
        }
    }
    let mut ready: Vec<usize> = (0..steps.len()).filter(|i| indegree[*i] == 0).collect();
    let mut seen = 0;
    while let Some(i) = ready.pop() {
        seen += 1;
        for d in &dependents[i] {
            indegree[*d] -= 1;
            if indegree[*d] == 0 {
                ready.push(*d);
            }
        }
    }
    if seen != steps.len() {
        return Err(bad("depends_on forms a cycle", "$.steps"));
    }
    Ok(())
}

impl WorkflowSpec {
    /// Parses `POST /ojs/v1/workflows`: `{type, name, steps|jobs, callbacks, options}`.
    /// Without `type` (the binding's §14.1 shape, which the Python and Go SDKs send) the
    /// kind follows from the steps' `depends_on`, and steps that stand for batch
    /// callbacks (see [`callback_name`]) become the callbacks.
    pub fn from_json(body: Value) -> Result<Self, OjsError> {
        let Value::Object(body) = body else {
            return Err(OjsError::invalid_request(
                "the workflow must be a JSON object",
            ));
        };
        let f = Fields::new(&body, "$");
        let kind = kind_of(&f)?;
        let name = f.string("name")?;
        let defaults = f.object("options")?.cloned().unwrap_or_default();
        let mut objects = step_objects(&f)?;
        let mut callbacks = Callbacks::default();
        if kind.is_none() {
            objects = callback_steps(objects, &defaults, &mut callbacks)?;
        }
        if objects.len() > MAX_STEPS {
            return Err(OjsError::new(
                ErrorCode::ValidationError,
                format!("a workflow has at most {MAX_STEPS} steps"),
            )
            .with_path("$.steps"));
        }
        let steps = steps_of(objects, &defaults, kind)?;
        if let Some(c) = callbacks_of(&f, &defaults)? {
            callbacks = c;
        }
        let kind = kind.unwrap_or_else(|| {
            let has_callbacks = callbacks.on_complete.is_some()
                || callbacks.on_success.is_some()
                || callbacks.on_failure.is_some();
            if has_callbacks {
                WorkflowKind::Batch
            } else if steps.iter().all(|s| s.depends_on.is_empty()) {
                WorkflowKind::Group
            } else {
                WorkflowKind::Chain
            }
        });
        Ok(Self {
            kind,
            name,
            steps,
            callbacks,
        })
    }
}

/// `type`, when given.
fn kind_of(f: &Fields) -> Result<Option<WorkflowKind>, OjsError> {
    let Some(t) = f.get("type") else {
        return Ok(None);
    };
    let t = t.expect(Value::as_str, "must be chain, group or batch")?;
    WorkflowKind::parse(t).map(Some).ok_or_else(|| {
        bad(
            format!("type must be chain, group or batch, got {t:?}"),
            "$.type",
        )
    })
}

/// `steps` (or `jobs`): a non-empty array of objects.
fn step_objects(f: &Fields) -> Result<Vec<Map<String, Value>>, OjsError> {
    let raw_steps = match f.map().get("steps").or_else(|| f.map().get("jobs")) {
        Some(Value::Array(s)) if !s.is_empty() => s,
        _ => return Err(bad("steps (or jobs) must be a non-empty array", "$.steps")),
    };
    raw_steps
        .iter()
        .enumerate()
        .map(|(i, raw)| match raw {
            Value::Object(o) => Ok(o.clone()),
            _ => Err(bad("each step must be an object", &format!("$.steps[{i}]"))),
        })
        .collect()
}

/// Takes the steps that stand for batch callbacks into `callbacks`; the other steps.
fn callback_steps(
    objects: Vec<Map<String, Value>>,
    defaults: &Map<String, Value>,
    callbacks: &mut Callbacks,
) -> Result<Vec<Map<String, Value>>, OjsError> {
    let (marked, plain): (Vec<_>, Vec<_>) = objects
        .into_iter()
        .enumerate()
        .partition(|(_, o)| callback_name(o).is_some());
    for (i, o) in marked {
        let path = format!("$.steps[{i}]");
        let Some(name) = callback_name(&o) else {
            continue;
        };
        if let Some(id) = o.get("id").and_then(Value::as_str) {
            callbacks.step_ids.push((name, id.to_owned()));
        }
        let template = Some(callback_template(with_defaults(o, defaults), &path)?);
        match name {
            "on_complete" => callbacks.on_complete = template,
            "on_success" => callbacks.on_success = template,
            _ => callbacks.on_failure = template,
        }
    }
    let objects: Vec<_> = plain.into_iter().map(|(_, o)| o).collect();
    if objects.is_empty() {
        return Err(bad(
            "a workflow needs at least one step that is not a callback",
            "$.steps",
        ));
    }
    Ok(objects)
}

/// The steps, their jobs checked and their dependencies resolved.
fn steps_of(
    objects: Vec<Map<String, Value>>,
    defaults: &Map<String, Value>,
    kind: Option<WorkflowKind>,
) -> Result<Vec<Step>, OjsError> {
    let graph = objects.iter().any(|s| s.get("depends_on").is_some());
    let mut ids: HashMap<String, usize> = HashMap::new();
    let mut pending_deps: Vec<Vec<String>> = Vec::new();
    let mut steps = Vec::with_capacity(objects.len());
    for (i, obj) in objects.into_iter().enumerate() {
        let path = format!("$.steps[{i}]");
        let mut obj = with_defaults(obj, defaults);
        let id = match obj.remove("id") {
            Some(Value::String(id)) => id,
            None | Some(Value::Null) => format!("step-{i}"),
            Some(_) => return Err(bad("a step id must be a string", &path)),
        };
        if ids.insert(id.clone(), i).is_some() {
            return Err(bad(format!("duplicate step id {id:?}"), &path));
        }
        pending_deps.push(depends_on(&mut obj, &path)?);
        steps.push(Step {
            id,
            job: step_job(obj, &path)?,
            depends_on: Vec::new(),
        });
    }
    for (i, deps) in pending_deps.into_iter().enumerate() {
        steps[i].depends_on = if graph {
            deps.iter()
                .map(|d| {
                    ids.get(d).copied().ok_or_else(|| {
                        bad(
                            format!("unknown step id {d:?} in depends_on"),
                            &format!("$.steps[{i}]"),
                        )
                    })
                })
                .collect::<Result<_, _>>()?
        } else if kind == Some(WorkflowKind::Chain) && i > 0 {
            vec![i - 1]
        } else {
            Vec::new()
        };
    }
    if graph {
        check_acyclic(&steps)?;
    }
    Ok(steps)
}

/// The step ids a step's `depends_on` lists.
fn depends_on(obj: &mut Map<String, Value>, path: &str) -> Result<Vec<String>, OjsError> {
    match obj.remove("depends_on") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(d)) => d
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or_else(|| bad("depends_on must list step ids", path)),
        Some(_) => Err(bad("depends_on must be an array", path)),
    }
}

/// A step's job, checked as a PUSH body (`args` may be left out).
fn step_job(mut obj: Map<String, Value>, path: &str) -> Result<NewJob, OjsError> {
    obj.entry("args")
        .or_insert_with(|| Value::Array(Vec::new()));
    let job = NewJob::from_json(Value::Object(obj)).map_err(|e| nested(&e, path))?;
    without_unique(&job, path)?;
    Ok(job)
}

/// `callbacks`, when given: each a job template.
fn callbacks_of(f: &Fields, defaults: &Map<String, Value>) -> Result<Option<Callbacks>, OjsError> {
    let Some(c) = f.object("callbacks")? else {
        return Ok(None);
    };
    let c = Fields::new(c, "$.callbacks").labelled("callbacks.");
    let take = |k: &str| -> Result<Option<Map<String, Value>>, OjsError> {
        let Some(t) = c.get(k) else {
            return Ok(None);
        };
        let t = t.expect(Value::as_object, "must be a job object")?;
        callback_template(with_defaults(t.clone(), defaults), &c.path_of(k)).map(Some)
    };
    Ok(Some(Callbacks {
        on_complete: take("on_complete")?,
        on_success: take("on_success")?,
        on_failure: take("on_failure")?,
        step_ids: Vec::new(),
    }))
}
