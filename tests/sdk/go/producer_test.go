package interop

// Producer-side scenarios: ojs.Client calls as a user makes them (README).

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	ojs "github.com/openjobspec/ojs-go-sdk"
)

func TestHealthAndManifest(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)

	h, err := c.Health(ctx)
	if err != nil {
		t.Fatalf("Health: %v", err)
	}
	if h.Status != "ok" {
		t.Errorf("health status %q, want ok", h.Status)
	}

	// GET /ojs/manifest; the fields below are the required ones (http-binding 21.2).
	m, err := c.Manifest(ctx)
	if err != nil {
		t.Fatalf("Manifest: %v", err)
	}
	if m.OJSVersion == "" {
		t.Error("manifest ojs_version is empty")
	}
	if m.Implementation.Name == "" || m.Implementation.Version == "" || m.Implementation.Language == "" {
		t.Errorf("manifest implementation incomplete: %+v", m.Implementation)
	}
	if m.ConformanceLevel < 0 || m.ConformanceLevel > 4 {
		t.Errorf("manifest conformance_level %d out of 0..4", m.ConformanceLevel)
	}
	if !slices.Contains(m.Protocols, "http") {
		t.Errorf("manifest protocols %v lack http", m.Protocols)
	}
	if m.Backend == "" {
		t.Error("manifest backend is empty")
	}
	if len(m.Capabilities) == 0 {
		t.Error("manifest capabilities are empty")
	}
}

// TestPushWithOptions enqueues with every README enqueue option a scheduled job
// can carry and reads it back with INFO.
func TestPushWithOptions(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName("push")
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)

	job, err := c.Enqueue(ctx, "report.generate",
		ojs.Args{"report_id": 42, "format": "pdf"},
		ojs.WithQueue(q),
		ojs.WithPriority(7),
		ojs.WithTags("finance", "q4"),
		ojs.WithMeta(map[string]any{"trace_id": "trace-go-1", "source": "go-sdk"}),
		ojs.WithRetry(ojs.RetryPolicy{
			MaxAttempts: 5, InitialInterval: 2 * time.Second, BackoffCoefficient: 3,
			MaxInterval: time.Minute, Jitter: boolPtr(false),
		}),
		ojs.WithTimeout(45*time.Second),
		ojs.WithScheduledAt(at),
	)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if job.ID == "" {
		t.Fatal("Enqueue returned a job without id")
	}
	check := func(where string, j *ojs.Job) {
		t.Helper()
		if j.ID != job.ID || j.Type != "report.generate" || j.Queue != q {
			t.Errorf("%s: id/type/queue = %q/%q/%q, want %q/report.generate/%q", where, j.ID, j.Type, j.Queue, job.ID, q)
		}
		if j.State != ojs.JobStateScheduled {
			t.Errorf("%s: state %q, want scheduled (delay_until in the future)", where, j.State)
		}
		if j.Priority != 7 {
			t.Errorf("%s: priority %d, want 7", where, j.Priority)
		}
		if j.MaxAttempts != 5 {
			t.Errorf("%s: max_attempts %d, want 5 (retry.max_attempts)", where, j.MaxAttempts)
		}
		if !reflect.DeepEqual(j.Tags, []string{"finance", "q4"}) {
			t.Errorf("%s: tags %v, want [finance q4]", where, j.Tags)
		}
		if j.Meta["trace_id"] != "trace-go-1" || j.Meta["source"] != "go-sdk" {
			t.Errorf("%s: meta %v lacks trace_id/source", where, j.Meta)
		}
		if j.Args["report_id"] != float64(42) || j.Args["format"] != "pdf" {
			t.Errorf("%s: args %v (raw %v), want report_id 42 and format pdf", where, j.Args, j.RawArgs)
		}
		if j.ScheduledAt == nil || j.ScheduledAt.Sub(at).Abs() > time.Millisecond {
			t.Errorf("%s: scheduled_at %v, want %v", where, j.ScheduledAt, at)
		}
	}
	check("PUSH response", job)

	got, err := c.GetJob(ctx, job.ID)
	if err != nil {
		t.Fatalf("GetJob: %v", err)
	}
	check("INFO", got)
	if got.TimeoutMS != 45000 {
		t.Errorf("INFO: timeout_ms %d, want 45000 (options.timeout_ms)", got.TimeoutMS)
	}
}

// TestPushUnique: UniquePolicy.Key names the args fields of the uniqueness key
// (SDK options.go; ojs-json-format 3.5 "key: fields from args"), Period is sent
// as period_ms.
func TestPushUnique(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName("unique")
	user := "u-" + randHex(4)
	// The duplicate is judged under a period no loaded machine outlasts (a 10 s one ran
	// out between two PUSHes of a CI run with every SDK suite at once); the key's release
	// after its period is judged under a short one, which lateness only lets run out more.
	policy := ojs.WithUnique(ojs.UniquePolicy{Key: []string{"user"}, Period: 10 * time.Minute, OnConflict: "reject"})

	if _, err := c.Enqueue(ctx, "email.welcome", ojs.Args{"user": user, "n": 1}, ojs.WithQueue(q), policy); err != nil {
		t.Fatalf("first Enqueue with unique policy: %v", err)
	}
	// Same "user", other "n": a duplicate under key [user].
	_, err := c.Enqueue(ctx, "email.welcome", ojs.Args{"user": user, "n": 2}, ojs.WithQueue(q), policy)
	requireOJSError(t, "same unique key", err, 409, ojs.ErrDuplicate)

	// Another user: not a duplicate.
	if _, err := c.Enqueue(ctx, "email.welcome", ojs.Args{"user": user + "x", "n": 1}, ojs.WithQueue(q), policy); err != nil {
		t.Errorf("other unique key: %v", err)
	}

	// After the period (from the first job's creation) the key is free again.
	const short = time.Second
	brief := ojs.WithUnique(ojs.UniquePolicy{Key: []string{"user"}, Period: short, OnConflict: "reject"})
	other := user + "-brief"
	first, err := c.Enqueue(ctx, "email.welcome", ojs.Args{"user": other, "n": 1}, ojs.WithQueue(q), brief)
	if err != nil {
		t.Fatalf("Enqueue with a %s unique period: %v", short, err)
	}
	time.Sleep(short + 500*time.Millisecond)
	again, err := c.Enqueue(ctx, "email.welcome", ojs.Args{"user": other, "n": 2}, ojs.WithQueue(q), brief)
	if err != nil {
		t.Errorf("same key after period_ms elapsed: %v", err)
	} else if again.ID == first.ID {
		t.Errorf("same key after the period returned the first job %s", first.ID)
	}
}

func TestBatchPush(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName("batch")
	reqs := []ojs.JobRequest{
		{Type: "email.send", Args: ojs.Args{"to": "a@example.com"}, Options: []ojs.EnqueueOption{ojs.WithQueue(q)}},
		{Type: "email.send", Args: ojs.Args{"to": "b@example.com"}, Options: []ojs.EnqueueOption{ojs.WithQueue(q), ojs.WithPriority(5)}},
		{Type: "sms.send", Args: ojs.Args{"to": "+100"}, Options: []ojs.EnqueueOption{ojs.WithQueue(q), ojs.WithTags("sms")}},
	}
	jobs, err := c.EnqueueBatch(ctx, reqs)
	if err != nil {
		t.Fatalf("EnqueueBatch: %v", err)
	}
	if len(jobs) != len(reqs) {
		t.Fatalf("EnqueueBatch returned %d jobs, want %d", len(jobs), len(reqs))
	}
	seen := map[string]bool{}
	for i, j := range jobs {
		if j.ID == "" || seen[j.ID] {
			t.Errorf("job[%d]: empty or repeated id %q", i, j.ID)
		}
		seen[j.ID] = true
		if j.Type != reqs[i].Type || j.Queue != q || j.State != ojs.JobStateAvailable {
			t.Errorf("job[%d]: type/queue/state %q/%q/%q, want %q/%q/available", i, j.Type, j.Queue, j.State, reqs[i].Type, q)
		}
		got, err := c.GetJob(ctx, j.ID)
		if err != nil {
			t.Errorf("GetJob(job[%d]): %v", i, err)
			continue
		}
		if got.Args["to"] != reqs[i].Args["to"] {
			t.Errorf("job[%d]: INFO args %v, want %v", i, got.Args, reqs[i].Args)
		}
	}
	if got, err := c.GetJob(ctx, jobs[1].ID); err == nil && got.Priority != 5 {
		t.Errorf("job[1]: priority %d, want 5", got.Priority)
	}
	if got, err := c.GetJob(ctx, jobs[2].ID); err == nil && !reflect.DeepEqual(got.Tags, []string{"sms"}) {
		t.Errorf("job[2]: tags %v, want [sms]", got.Tags)
	}
}

func TestInfo(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName("info")

	job, err := c.Enqueue(ctx, "email.send", ojs.Args{"to": "info@example.com"}, ojs.WithQueue(q))
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	got, err := c.GetJob(ctx, job.ID)
	if err != nil {
		t.Fatalf("GetJob: %v", err)
	}
	if got.ID != job.ID || got.Type != "email.send" || got.Queue != q || got.State != ojs.JobStateAvailable {
		t.Errorf("INFO: id/type/queue/state %q/%q/%q/%q", got.ID, got.Type, got.Queue, got.State)
	}
	if got.Attempt != 0 {
		t.Errorf("INFO: attempt %d before any fetch, want 0", got.Attempt)
	}
	if got.Args["to"] != "info@example.com" {
		t.Errorf("INFO: args %v", got.Args)
	}
	if got.CreatedAt == nil || got.EnqueuedAt == nil {
		t.Errorf("INFO: created_at %v / enqueued_at %v missing", got.CreatedAt, got.EnqueuedAt)
	}

	_, err = c.GetJob(ctx, "019414d4-0000-7000-8000-"+randHex(6))
	requireOJSError(t, "GetJob(unknown id)", err, 404, ojs.ErrNotFound)
}

func TestCancel(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName("cancel")

	job, err := c.Enqueue(ctx, "email.send", ojs.Args{"to": "cancel@example.com"}, ojs.WithQueue(q))
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	cancelled, err := c.CancelJob(ctx, job.ID)
	if err != nil {
		t.Fatalf("CancelJob: %v", err)
	}
	if cancelled.ID != job.ID || cancelled.State != ojs.JobStateCancelled {
		t.Errorf("CancelJob: id/state %q/%q, want %q/cancelled", cancelled.ID, cancelled.State, job.ID)
	}
	if cancelled.PreviousState != "available" {
		t.Errorf("CancelJob: previous_state %q, want available", cancelled.PreviousState)
	}
	got, err := c.GetJob(ctx, job.ID)
	if err != nil {
		t.Fatalf("GetJob after cancel: %v", err)
	}
	if got.State != ojs.JobStateCancelled || got.CancelledAt == nil {
		t.Errorf("INFO after cancel: state %q cancelled_at %v", got.State, got.CancelledAt)
	}

	// Cancelling a job in a terminal state is a 409 (http-binding 9.4).
	_, err = c.CancelJob(ctx, job.ID)
	requireOJSError(t, "CancelJob(cancelled job)", err, 409, ojs.ErrConflict)
	_, err = c.CancelJob(ctx, "019414d4-0000-7000-8000-"+randHex(6))
	requireOJSError(t, "CancelJob(unknown id)", err, 404, ojs.ErrNotFound)

	// A scheduled job can be cancelled too.
	sched, err := c.Enqueue(ctx, "email.send", ojs.Args{"to": "later@example.com"}, ojs.WithQueue(q), ojs.WithDelay(time.Hour))
	if err != nil {
		t.Fatalf("Enqueue scheduled: %v", err)
	}
	if cj, err := c.CancelJob(ctx, sched.ID); err != nil {
		t.Errorf("CancelJob(scheduled): %v", err)
	} else if cj.State != ojs.JobStateCancelled || cj.PreviousState != "scheduled" {
		t.Errorf("CancelJob(scheduled): state %q previous_state %q", cj.State, cj.PreviousState)
	}
}

func TestCron(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	name := uniqueName("cron")
	q := uniqueName("cronq")

	req := ojs.CronJobRequest{
		Name:     name,
		Cron:     "*/5 * * * *",
		Timezone: "UTC",
		Type:     "report.generate",
		Args:     ojs.Args{"kind": "daily"},
		Meta:     map[string]any{"owner": "go-sdk"},
		Options:  []ojs.EnqueueOption{ojs.WithQueue(q)},
	}
	// The next run is the first */5 boundary after the server's clock at registration,
	// which lies between these two readings of the same machine's clock (a check against
	// time.Now() alone failed when the answer crossed a boundary).
	before := time.Now()
	cj, err := c.RegisterCronJob(ctx, req)
	after := time.Now()
	if err != nil {
		t.Fatalf("RegisterCronJob: %v", err)
	}
	// Leave no schedule behind if a check below stops the test early.
	t.Cleanup(func() { _ = c.UnregisterCronJob(ctxFor(t, 30*time.Second), name) })
	if cj.Name != name || cj.Cron != req.Cron || cj.Type != req.Type {
		t.Errorf("RegisterCronJob: name/cron/type %q/%q/%q", cj.Name, cj.Cron, cj.Type)
	}
	if cj.NextRunAt == nil || !cj.NextRunAt.After(before) || cj.NextRunAt.After(after.Add(5*time.Minute)) {
		t.Errorf("RegisterCronJob: next_run_at %v not within the next 5 minutes", cj.NextRunAt)
	}

	find := func() *ojs.CronJob {
		list, err := c.ListCronJobs(ctx)
		if err != nil {
			t.Fatalf("ListCronJobs: %v", err)
		}
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
		return nil
	}
	if listed := find(); listed == nil {
		t.Errorf("ListCronJobs does not list %s", name)
	} else {
		if listed.Cron != req.Cron || listed.Type != req.Type || listed.Timezone != "UTC" || listed.Status != "active" {
			t.Errorf("listed cron: cron/type/timezone/status %q/%q/%q/%q", listed.Cron, listed.Type, listed.Timezone, listed.Status)
		}
		if !reflect.DeepEqual(listed.Args, []any{map[string]any{"kind": "daily"}}) {
			t.Errorf("listed cron args %v, want [{kind:daily}]", listed.Args)
		}
		if listed.Options["queue"] != q {
			t.Errorf("listed cron options %v, want queue %s", listed.Options, q)
		}
	}

	// Same name again updates the registration: ojs-cron 8.1 (CRON-26) requires upsert
	// semantics, where http-binding 13.2 says 409; the server follows the cron document.
	updated := req
	updated.Cron = "*/10 * * * *"
	if cj, err := c.RegisterCronJob(ctx, updated); err != nil {
		t.Errorf("RegisterCronJob(same name): %v", err)
	} else if cj.Cron != updated.Cron {
		t.Errorf("RegisterCronJob(same name): cron %q, want the update %q", cj.Cron, updated.Cron)
	}
	if listed := find(); listed == nil || listed.Cron != updated.Cron {
		t.Errorf("ListCronJobs after the update: %+v, want cron %q", listed, updated.Cron)
	}

	if err := c.UnregisterCronJob(ctx, name); err != nil {
		t.Fatalf("UnregisterCronJob: %v", err)
	}
	// The schedule is gone: a new registration under its name is accepted.
	if _, err := c.RegisterCronJob(ctx, req); err != nil {
		t.Errorf("RegisterCronJob after UnregisterCronJob: %v", err)
	} else if err := c.UnregisterCronJob(ctx, name); err != nil {
		t.Errorf("second UnregisterCronJob: %v", err)
	}
	if find() != nil {
		t.Errorf("ListCronJobs still lists %s after UnregisterCronJob", name)
	}
	err = c.UnregisterCronJob(ctx, name)
	requireOJSError(t, "UnregisterCronJob(unknown)", err, 404, ojs.ErrNotFound)
}

func TestQueuesPauseResumeStats(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName("queue")

	var ids []string
	for i := 0; i < 3; i++ {
		j, err := c.Enqueue(ctx, "queue.job", ojs.Args{"i": i}, ojs.WithQueue(q))
		if err != nil {
			t.Fatalf("Enqueue: %v", err)
		}
		ids = append(ids, j.ID)
	}

	queueStatus := func() (string, bool) {
		qs, pg, err := c.ListQueues(ctx)
		if err != nil {
			t.Fatalf("ListQueues: %v", err)
		}
		if pg == nil || pg.Total < len(qs) {
			t.Errorf("ListQueues pagination %+v for %d queues", pg, len(qs))
		}
		for _, x := range qs {
			if x.Name == q {
				return x.Status, true
			}
		}
		return "", false
	}
	if st, ok := queueStatus(); !ok || st != "active" {
		t.Errorf("ListQueues: queue %s listed=%v status %q, want active", q, ok, st)
	}
	ok, last := waitFor(20*time.Second, 200*time.Millisecond, func() (bool, string) {
		s, err := c.GetQueueStats(ctx, q)
		if err != nil {
			return false, err.Error()
		}
		return s.Queue == q && s.Status == "active" && s.Available == 3, fmt.Sprintf("%+v", *s)
	})
	if !ok {
		t.Errorf("GetQueueStats: want queue %s active with 3 available, last %s", q, last)
	}

	if err := c.PauseQueue(ctx, q); err != nil {
		t.Fatalf("PauseQueue: %v", err)
	}
	if st, _ := queueStatus(); st != "paused" {
		t.Errorf("ListQueues after pause: status %q, want paused", st)
	}
	if s, err := c.GetQueueStats(ctx, q); err != nil || s.Status != "paused" {
		t.Errorf("GetQueueStats after pause: %+v, %v", s, err)
	}

	// A worker on the paused queue gets nothing.
	rec := &recorder{}
	w := newWorker(t, []string{q}, 2)
	w.Register("queue.job", rec.record(func(ojs.JobContext) error { return nil }))
	w.start(t)
	time.Sleep(1500 * time.Millisecond)
	if n := rec.count(); n != 0 {
		t.Errorf("worker ran %d jobs from a paused queue", n)
	}

	if err := c.ResumeQueue(ctx, q); err != nil {
		t.Fatalf("ResumeQueue: %v", err)
	}
	if st, _ := queueStatus(); st != "active" {
		t.Errorf("ListQueues after resume: status %q, want active", st)
	}
	for _, id := range ids {
		waitJobState(t, c, id, 30*time.Second, ojs.JobStateCompleted)
	}
	w.requireNoWorkerErrors(t)
	ok, last = waitFor(20*time.Second, 200*time.Millisecond, func() (bool, string) {
		s, err := c.GetQueueStats(ctx, q)
		if err != nil {
			return false, err.Error()
		}
		return s.Available == 0 && s.Active == 0, fmt.Sprintf("%+v", *s)
	})
	if !ok {
		t.Errorf("GetQueueStats after processing: want 0 available/active, last %s", last)
	}
}
