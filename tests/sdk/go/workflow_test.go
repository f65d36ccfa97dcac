package interop

// Workflows built with the SDK's own constructors (ojs.Chain, ojs.Group,
// ojs.Batch) and CreateWorkflow, then run by an SDK worker. The SDK sends every
// primitive as a step graph: {"steps":[{"id","type","args","depends_on"}]},
// chain steps "step-N" depending on the previous one, group/batch jobs "job-N"
// and batch callbacks "on-complete"/"on-success"/"on-failure" depending on all
// jobs (SDK workflow.go).

import (
	"errors"
	"slices"
	"testing"
	"time"

	ojs "github.com/openjobspec/ojs-go-sdk"
)

// waitWorkflow polls GetWorkflow until the workflow is in a terminal state.
func waitWorkflow(t *testing.T, c *ojs.Client, id string, timeout time.Duration) *ojs.Workflow {
	t.Helper()
	var wf *ojs.Workflow
	ok, last := waitFor(timeout, 250*time.Millisecond, func() (bool, string) {
		w, err := c.GetWorkflow(ctxFor(t, 30*time.Second), id)
		if err != nil {
			return false, "GetWorkflow: " + err.Error()
		}
		wf = w
		switch w.State {
		case ojs.WorkflowStateCompleted, ojs.WorkflowStateFailed, ojs.WorkflowStateCancelled:
			return true, string(w.State)
		}
		return false, string(w.State)
	})
	if !ok {
		t.Fatalf("workflow %s not finished within %s (last: %s)", id, timeout, last)
	}
	return wf
}

func stepStates(wf *ojs.Workflow) map[string]string {
	m := map[string]string{}
	for _, s := range wf.Steps {
		m[s.ID] = s.State
	}
	return m
}

func TestWorkflowChain(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName("chain")

	rec := &recorder{}
	w := newWorker(t, []string{q}, 4)
	for _, typ := range []string{"data.fetch", "data.transform", "data.load"} {
		w.Register(typ, rec.record(func(jc ojs.JobContext) error {
			time.Sleep(50 * time.Millisecond)
			jc.SetResult(map[string]any{"step": jc.Job.Type})
			return nil
		}))
	}
	w.start(t)

	wf, err := c.CreateWorkflow(ctx, ojs.Chain(
		ojs.Step{Type: "data.fetch", Args: ojs.Args{"url": "https://example.com/data"}},
		ojs.Step{Type: "data.transform", Args: ojs.Args{"format": "csv"}},
		ojs.Step{Type: "data.load", Args: ojs.Args{"table": "t"}},
	), ojs.WithQueue(q))
	if err != nil {
		t.Fatalf("CreateWorkflow(Chain): %v", err)
	}
	if wf.ID == "" {
		t.Fatal("CreateWorkflow returned no workflow id")
	}
	if len(wf.Steps) != 3 {
		t.Errorf("created chain has %d steps, want 3: %+v", len(wf.Steps), wf.Steps)
	}

	done := waitWorkflow(t, c, wf.ID, 30*time.Second)
	if done.State != ojs.WorkflowStateCompleted {
		t.Errorf("chain ended %q, want completed", done.State)
	}
	states := stepStates(done)
	for _, id := range []string{"step-0", "step-1", "step-2"} {
		if states[id] != "completed" {
			t.Errorf("step %s state %q, want completed (steps %v)", id, states[id], states)
		}
	}
	for _, s := range done.Steps {
		if s.JobID == nil || *s.JobID == "" {
			t.Errorf("step %s has no job_id", s.ID)
		}
	}

	// Executed once each, in order, each after the previous one finished.
	inv := rec.all()
	var order []string
	for _, x := range inv {
		order = append(order, x.Type)
	}
	if !slices.Equal(order, []string{"data.fetch", "data.transform", "data.load"}) {
		t.Fatalf("chain ran %v, want data.fetch, data.transform, data.load", order)
	}
	for i := 1; i < len(inv); i++ {
		if inv[i].Start.Before(inv[i-1].End) {
			t.Errorf("step %d started before step %d finished", i, i-1)
		}
	}
	if inv[1].Args["format"] != "csv" {
		t.Errorf("step 1 args %v, want format csv", inv[1].Args)
	}
	w.requireNoWorkerErrors(t)
}

func TestWorkflowGroup(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName("group")

	rec := &recorder{}
	w := newWorker(t, []string{q}, 4)
	for _, typ := range []string{"export.csv", "export.pdf", "export.xlsx"} {
		w.Register(typ, rec.record(func(jc ojs.JobContext) error {
			jc.SetResult(map[string]any{"format": jc.Job.Type})
			return nil
		}))
	}
	w.start(t)

	wf, err := c.CreateWorkflow(ctx, ojs.Group(
		ojs.Step{Type: "export.csv", Args: ojs.Args{"id": "rpt_1"}},
		ojs.Step{Type: "export.pdf", Args: ojs.Args{"id": "rpt_1"}},
		ojs.Step{Type: "export.xlsx", Args: ojs.Args{"id": "rpt_1"}},
	), ojs.WithQueue(q))
	if err != nil {
		t.Fatalf("CreateWorkflow(Group): %v", err)
	}
	done := waitWorkflow(t, c, wf.ID, 30*time.Second)
	if done.State != ojs.WorkflowStateCompleted {
		t.Errorf("group ended %q, want completed", done.State)
	}
	states := stepStates(done)
	for _, id := range []string{"job-0", "job-1", "job-2"} {
		if states[id] != "completed" {
			t.Errorf("job %s state %q, want completed (steps %v)", id, states[id], states)
		}
	}
	var types []string
	for _, x := range rec.all() {
		types = append(types, x.Type)
	}
	slices.Sort(types)
	if !slices.Equal(types, []string{"export.csv", "export.pdf", "export.xlsx"}) {
		t.Errorf("group ran %v, want each export once", types)
	}
	w.requireNoWorkerErrors(t)
}

// runBatch creates an ojs.Batch with all three callbacks; failJob makes job-1
// fail for good. It returns the finished workflow and the job types that ran.
func runBatch(t *testing.T, prefix string, failJob bool) (*ojs.Workflow, []string) {
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName(prefix)

	rec := &recorder{}
	w := newWorker(t, []string{q}, 4)
	w.Register("email.send", rec.record(func(jc ojs.JobContext) error {
		if failJob && jc.Job.Args["to"] == "user2@example.com" {
			return ojs.NonRetryable(errors.New("mailbox does not exist"))
		}
		return nil
	}))
	for _, typ := range []string{"batch.report", "batch.celebrate", "batch.alert"} {
		w.Register(typ, rec.record(func(ojs.JobContext) error { return nil }))
	}
	w.start(t)

	wf, err := c.CreateWorkflow(ctx, ojs.Batch(
		ojs.BatchCallbacks{
			OnComplete: &ojs.Step{Type: "batch.report", Args: ojs.Args{}},
			OnSuccess:  &ojs.Step{Type: "batch.celebrate", Args: ojs.Args{}},
			OnFailure:  &ojs.Step{Type: "batch.alert", Args: ojs.Args{}},
		},
		ojs.Step{Type: "email.send", Args: ojs.Args{"to": "user1@example.com"}},
		ojs.Step{Type: "email.send", Args: ojs.Args{"to": "user2@example.com"}},
	), ojs.WithQueue(q))
	if err != nil {
		t.Fatalf("CreateWorkflow(Batch): %v", err)
	}
	done := waitWorkflow(t, c, wf.ID, 30*time.Second)
	time.Sleep(time.Second) // a callback that should not fire would show up now
	var types []string
	for _, x := range rec.all() {
		types = append(types, x.Type)
	}
	slices.Sort(types)
	return done, types
}

// TestWorkflowBatchAllSucceed: on_complete and on_success fire, on_failure
// does not (ojs-workflows 6.4/6.5); the batch completes.
func TestWorkflowBatchAllSucceed(t *testing.T) {
	t.Parallel()
	done, ran := runBatch(t, "batchok", false)
	want := []string{"batch.celebrate", "batch.report", "email.send", "email.send"}
	if !slices.Equal(ran, want) {
		t.Errorf("batch (all jobs succeed) ran %v, want %v (no batch.alert: on-failure must not fire)", ran, want)
	}
	if done.State != ojs.WorkflowStateCompleted {
		t.Errorf("batch ended %q, want completed (steps %v)", done.State, stepStates(done))
	}
}

// TestWorkflowBatchOneFails: a job fails for good: on_complete and on_failure
// fire, on_success does not; with the callbacks succeeding the batch is
// completed (ojs-workflows 8.3: failed only when a triggered callback fails).
func TestWorkflowBatchOneFails(t *testing.T) {
	t.Parallel()
	done, ran := runBatch(t, "batchko", true)
	want := []string{"batch.alert", "batch.report", "email.send", "email.send"}
	if !slices.Equal(ran, want) {
		t.Errorf("batch (one job fails) ran %v, want %v (on-complete and on-failure fire, on-success does not)", ran, want)
	}
	if done.State != ojs.WorkflowStateCompleted {
		t.Errorf("batch ended %q, want completed (steps %v)", done.State, stepStates(done))
	}
}

// TestWorkflowCancel: a chain nobody works on is cancelled; its steps are not
// run afterwards and its first job is cancelled.
func TestWorkflowCancel(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName("wfcancel")

	wf, err := c.CreateWorkflow(ctx, ojs.Chain(
		ojs.Step{Type: "data.fetch", Args: ojs.Args{"n": 1}},
		ojs.Step{Type: "data.load", Args: ojs.Args{"n": 2}},
	), ojs.WithQueue(q))
	if err != nil {
		t.Fatalf("CreateWorkflow(Chain): %v", err)
	}
	cancelled, err := c.CancelWorkflow(ctx, wf.ID)
	if err != nil {
		t.Fatalf("CancelWorkflow: %v", err)
	}
	if cancelled.ID != wf.ID || cancelled.State != ojs.WorkflowStateCancelled {
		t.Errorf("CancelWorkflow: id/state %q/%q, want %q/cancelled", cancelled.ID, cancelled.State, wf.ID)
	}
	// Both steps were still to run (http-binding 14.3: steps_cancelled).
	if cancelled.StepsCancelled != 2 || cancelled.StepsAlreadyComplete != 0 {
		t.Errorf("CancelWorkflow: steps_cancelled %d steps_already_completed %d, want 2 and 0",
			cancelled.StepsCancelled, cancelled.StepsAlreadyComplete)
	}
	got, err := c.GetWorkflow(ctx, wf.ID)
	if err != nil {
		t.Fatalf("GetWorkflow: %v", err)
	}
	if got.State != ojs.WorkflowStateCancelled {
		t.Errorf("GetWorkflow after cancel: state %q, want cancelled", got.State)
	}
	var first *ojs.WorkflowStep
	for i := range got.Steps {
		if got.Steps[i].ID == "step-0" {
			first = &got.Steps[i]
		}
	}
	if first == nil || first.JobID == nil {
		t.Fatalf("GetWorkflow lists no step-0 with a job_id: %+v", got.Steps)
	}
	job, err := c.GetJob(ctx, *first.JobID)
	if err != nil {
		t.Fatalf("GetJob(step-0): %v", err)
	}
	if job.State != ojs.JobStateCancelled {
		t.Errorf("step-0 job state %q after CancelWorkflow, want cancelled", job.State)
	}

	// A worker started now finds nothing to run.
	rec := &recorder{}
	w := newWorker(t, []string{q}, 2)
	w.Register("data.fetch", rec.record(func(ojs.JobContext) error { return nil }))
	w.Register("data.load", rec.record(func(ojs.JobContext) error { return nil }))
	w.start(t)
	time.Sleep(1500 * time.Millisecond)
	if n := rec.count(); n != 0 {
		t.Errorf("%d steps of a cancelled workflow ran", n)
	}
}
