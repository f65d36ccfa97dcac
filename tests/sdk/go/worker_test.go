package interop

// Worker-side scenarios: the SDK's own Worker (fetch/ack/nack/heartbeat loop,
// Register/Use), as in the README.

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ojs "github.com/openjobspec/ojs-go-sdk"
)

// retryPolicy is the policy the timing checks need: fixed intervals, no jitter.
func retryPolicy(maxAttempts int, initial time.Duration, coefficient float64) ojs.EnqueueOption {
	return ojs.WithRetry(ojs.RetryPolicy{
		MaxAttempts: maxAttempts, InitialInterval: initial, BackoffCoefficient: coefficient,
		MaxInterval: time.Minute, Jitter: boolPtr(false),
	})
}

func TestWorkerCompletesWithResult(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName("result")

	var heartbeatErr atomic.Value
	rec := &recorder{}
	w := newWorker(t, []string{q}, 2)
	w.Register("email.send", rec.record(func(jc ojs.JobContext) error {
		// A handler's own heartbeat (POST /workers/heartbeat) must be accepted.
		if err := jc.Heartbeat(); err != nil {
			heartbeatErr.Store(err.Error())
		}
		if jc.Queue != q {
			return fmt.Errorf("JobContext.Queue %q, want %q", jc.Queue, q)
		}
		to, _ := jc.Job.Args["to"].(string)
		jc.SetResult(map[string]any{"sent": true, "to": to})
		return nil
	}))
	w.start(t)

	job, err := c.Enqueue(ctx, "email.send", ojs.Args{"to": "user@example.com"}, ojs.WithQueue(q))
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	got := waitJobState(t, c, job.ID, 30*time.Second, ojs.JobStateCompleted, ojs.JobStateDiscarded, ojs.JobStateRetryable)
	if got.State != ojs.JobStateCompleted {
		t.Fatalf("job ended %q (error %+v), want completed", got.State, got.Error)
	}
	want := map[string]any{"sent": true, "to": "user@example.com"}
	if fmt.Sprint(got.Result) != fmt.Sprint(want) {
		t.Errorf("INFO result %v, want %v", got.Result, want)
	}
	if got.Attempt != 1 || got.CompletedAt == nil {
		t.Errorf("INFO: attempt %d completed_at %v, want attempt 1 and a completion time", got.Attempt, got.CompletedAt)
	}
	calls := rec.forJob(job.ID)
	if len(calls) != 1 || calls[0].Attempt != 1 {
		t.Errorf("handler calls %+v, want one with attempt 1", calls)
	}
	if e := heartbeatErr.Load(); e != nil {
		t.Errorf("JobContext.Heartbeat: %v", e)
	}
	w.requireNoWorkerErrors(t)
}

// TestWorkerOneMebibyteJob: a job of about 1 MiB (the spec's PL-001 envelope; random hex
// that the server's deflate cannot shrink, so its args go to the payload bucket) reaches
// the SDK's worker whole, and its result reads back.
func TestWorkerOneMebibyteJob(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName("large")
	blob := randHex(500_000)

	rec := &recorder{}
	w := newWorker(t, []string{q}, 1)
	w.Register("large.measure", rec.record(func(jc ojs.JobContext) error {
		text, _ := jc.Job.Args["blob"].(string)
		jc.SetResult(map[string]any{"length": len(text), "same": text == blob})
		return nil
	}))
	w.start(t)

	job, err := c.Enqueue(ctx, "large.measure", ojs.Args{"blob": blob}, ojs.WithQueue(q))
	if err != nil {
		t.Fatalf("Enqueue of 1 MiB: %v", err)
	}
	got := waitJobState(t, c, job.ID, 30*time.Second, ojs.JobStateCompleted, ojs.JobStateDiscarded, ojs.JobStateRetryable)
	if got.State != ojs.JobStateCompleted {
		t.Fatalf("job ended %q (error %+v), want completed", got.State, got.Error)
	}
	want := map[string]any{"length": float64(1_000_000), "same": true} // JSON numbers read back as float64
	if fmt.Sprint(got.Result) != fmt.Sprint(want) {
		t.Errorf("INFO result %v, want %v", got.Result, want)
	}
	if text, _ := got.Args["blob"].(string); text != blob {
		t.Errorf("INFO args: %d characters, not the %d pushed", len(text), len(blob))
	}
	if calls := rec.forJob(job.ID); len(calls) != 1 {
		t.Errorf("handler calls %+v, want one", calls)
	}
	w.requireNoWorkerErrors(t)
}

// TestWorkerRetryThenSucceed: two handler errors, then success, with a PT1S
// exponential backoff (coefficient 2, no jitter): retries 1 s and 2 s apart.
func TestWorkerRetryThenSucceed(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName("retry")

	var calls atomic.Int32
	rec := &recorder{}
	w := newWorker(t, []string{q}, 1)
	w.Register("flaky.job", rec.record(func(jc ojs.JobContext) error {
		if calls.Add(1) <= 2 {
			return errors.New("transient failure")
		}
		jc.SetResult(map[string]any{"ok": true})
		return nil
	}))
	w.start(t)

	job, err := c.Enqueue(ctx, "flaky.job", ojs.Args{"x": 1}, ojs.WithQueue(q), retryPolicy(3, time.Second, 2))
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	got := waitJobState(t, c, job.ID, 45*time.Second, ojs.JobStateCompleted, ojs.JobStateDiscarded)
	if got.State != ojs.JobStateCompleted {
		t.Fatalf("job ended %q, want completed on the 3rd attempt", got.State)
	}
	if got.Attempt != 3 || got.MaxAttempts != 3 {
		t.Errorf("INFO attempt/max_attempts %d/%d, want 3/3", got.Attempt, got.MaxAttempts)
	}
	if got.Result["ok"] != true {
		t.Errorf("INFO result %v, want ok:true", got.Result)
	}
	inv := rec.forJob(job.ID)
	if len(inv) != 3 {
		t.Fatalf("handler called %d times, want 3", len(inv))
	}
	for i, c := range inv {
		if c.Attempt != i+1 {
			t.Errorf("call %d: JobContext.Attempt %d, want %d", i+1, c.Attempt, i+1)
		}
	}
	// Backoff: initial_interval * coefficient^(n-1) (ojs-retry 3). Lower bound
	// strict (a little slack for ms rounding). The upper bound tells a retry made
	// when due from one left to the job's lease end (30 s) or to the minute's sweep:
	// backoff + 15 s, since the NACK, the promotion and the FETCH in between take
	// what the machine gives them (6.6 s once for a 1 s backoff, in CI, with four
	// SDK suites running at once).
	for i, want := range []time.Duration{time.Second, 2 * time.Second} {
		gap := inv[i+1].Start.Sub(inv[i].End)
		if gap < want-50*time.Millisecond || gap > want+15*time.Second {
			t.Errorf("gap before attempt %d: %s, want %s (+ at most 15 s)", i+2, gap.Round(time.Millisecond), want)
		}
	}
	w.requireNoWorkerErrors(t)
}

// TestWorkerNonRetryable: ojs.NonRetryable sends retryable:false in the nack;
// the job is discarded at once although attempts remain.
func TestWorkerNonRetryable(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName("nonretry")

	rec := &recorder{}
	w := newWorker(t, []string{q}, 1)
	w.Register("bad.input", rec.record(func(ojs.JobContext) error {
		return ojs.NonRetryable(errors.New("invalid email"))
	}))
	w.start(t)

	job, err := c.Enqueue(ctx, "bad.input", ojs.Args{"to": "nope"}, ojs.WithQueue(q), retryPolicy(5, time.Second, 1))
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	got := waitJobState(t, c, job.ID, 30*time.Second, ojs.JobStateDiscarded, ojs.JobStateCompleted)
	if got.State != ojs.JobStateDiscarded || got.Attempt != 1 {
		t.Errorf("INFO: state %q attempt %d, want discarded after attempt 1", got.State, got.Attempt)
	}
	time.Sleep(1500 * time.Millisecond) // a retry would come after 1 s
	if n := len(rec.forJob(job.ID)); n != 1 {
		t.Errorf("handler called %d times, want 1", n)
	}
	w.requireNoWorkerErrors(t)
}

// TestWorkerExhaustion: a job that always fails is discarded after
// max_attempts (2) attempts, with the last error on the job.
func TestWorkerExhaustion(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName("exhaust")

	rec := &recorder{}
	w := newWorker(t, []string{q}, 1)
	w.Register("doomed.job", rec.record(func(jc ojs.JobContext) error {
		return fmt.Errorf("boom %d", jc.Attempt)
	}))
	w.start(t)

	job, err := c.Enqueue(ctx, "doomed.job", ojs.Args{"i": 1}, ojs.WithQueue(q), retryPolicy(2, time.Second, 1))
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	got := waitJobState(t, c, job.ID, 30*time.Second, ojs.JobStateDiscarded, ojs.JobStateCompleted)
	if got.State != ojs.JobStateDiscarded || got.Attempt != 2 || got.DiscardedAt == nil {
		t.Errorf("INFO: state %q attempt %d discarded_at %v, want discarded after 2 attempts", got.State, got.Attempt, got.DiscardedAt)
	}
	if got.Error == nil || got.Error.Message != "boom 2" {
		t.Errorf("INFO error %+v, want the last handler error \"boom 2\"", got.Error)
	}
	time.Sleep(1500 * time.Millisecond) // a third attempt would come after 1 s
	inv := rec.forJob(job.ID)
	if len(inv) != 2 || inv[0].Attempt != 1 || inv[1].Attempt != 2 {
		t.Errorf("handler calls %+v, want attempts 1 and 2", inv)
	}
	w.requireNoWorkerErrors(t)

	// The SDK's RetryPolicy has no on_exhaustion, so the job gets the default,
	// "discard" (ojs-retry); whether the server lists it as dead letter is
	// reported, not checked.
	dl, _, err := c.ListDeadLetterJobs(ctx, q, 100, 0)
	t.Logf("dead letter list for %s after default exhaustion: %d jobs (err %v)", q, len(dl), err)
}

// TestDeadLetterListRetryDelete drives the SDK's dead letter API. The SDK
// cannot ask for dead-lettering (RetryPolicy has no on_exhaustion field), so
// the two jobs are pushed with a plain HTTP request carrying
// retry.on_exhaustion "dead_letter"; the SDK worker then fails them.
func TestDeadLetterListRetryDelete(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName("dead")

	var failing atomic.Bool
	failing.Store(true)
	w := newWorker(t, []string{q}, 2)
	w.Register("doomed.job", func(jc ojs.JobContext) error {
		if failing.Load() {
			return errors.New("boom")
		}
		jc.SetResult(map[string]any{"revived": true})
		return nil
	})
	w.start(t)

	var ids []string
	for i := 0; i < 2; i++ {
		ids = append(ids, rawPush(t, map[string]any{
			"type": "doomed.job", "args": []any{map[string]any{"i": i}},
			"options": map[string]any{"queue": q, "retry": map[string]any{"max_attempts": 1, "on_exhaustion": "dead_letter"}},
		}))
	}
	for _, id := range ids {
		waitJobState(t, c, id, 30*time.Second, ojs.JobStateDiscarded)
	}
	w.requireNoWorkerErrors(t)

	listed := func() map[string]ojs.Job {
		jobs, pg, err := c.ListDeadLetterJobs(ctx, q, 100, 0)
		if err != nil {
			t.Fatalf("ListDeadLetterJobs: %v", err)
		}
		if pg == nil || pg.Total != len(jobs) {
			t.Errorf("ListDeadLetterJobs pagination %+v for %d jobs", pg, len(jobs))
		}
		m := map[string]ojs.Job{}
		for _, j := range jobs {
			m[j.ID] = j
		}
		return m
	}
	dl := listed()
	for _, id := range ids {
		j, ok := dl[id]
		if !ok {
			t.Fatalf("dead letter list (queue %s) lacks dead-lettered job %s (has %d jobs)", q, id, len(dl))
		}
		if j.State != ojs.JobStateDiscarded || j.Queue != q || j.Type != "doomed.job" || j.Attempt != 1 {
			t.Errorf("dead letter entry %s: state/queue/type/attempt %q/%q/%q/%d", id, j.State, j.Queue, j.Type, j.Attempt)
		}
		if j.Error == nil || j.Error.Message != "boom" {
			t.Errorf("dead letter entry %s: error %+v, want message boom", id, j.Error)
		}
	}

	// Retry: available again with attempts reset (http-binding 12.2), then
	// completed by the (now healthy) worker.
	failing.Store(false)
	rj, err := c.RetryDeadLetterJob(ctx, ids[0])
	if err != nil {
		t.Fatalf("RetryDeadLetterJob: %v", err)
	}
	if rj.ID != ids[0] || rj.State != ojs.JobStateAvailable || rj.Attempt != 0 {
		t.Errorf("RetryDeadLetterJob: id/state/attempt %q/%q/%d, want %q/available/0", rj.ID, rj.State, rj.Attempt, ids[0])
	}
	got := waitJobState(t, c, ids[0], 30*time.Second, ojs.JobStateCompleted)
	if got.Attempt != 1 || got.Result["revived"] != true {
		t.Errorf("retried job: attempt %d result %v, want attempt 1 and revived:true", got.Attempt, got.Result)
	}
	if _, still := listed()[ids[0]]; still {
		t.Errorf("retried job %s is still in the dead letter list", ids[0])
	}

	// Delete: gone from the list; a second delete is a 404.
	if err := c.DiscardDeadLetterJob(ctx, ids[1]); err != nil {
		t.Fatalf("DiscardDeadLetterJob: %v", err)
	}
	if _, still := listed()[ids[1]]; still {
		t.Errorf("deleted job %s is still in the dead letter list", ids[1])
	}
	err = c.DiscardDeadLetterJob(ctx, ids[1])
	requireOJSError(t, "DiscardDeadLetterJob(deleted)", err, 404, ojs.ErrNotFound)
	w.requireNoWorkerErrors(t)
}

// TestWorkerDelayedJob: WithDelay(3 s) is not run before its time and runs
// within 2 s after it.
func TestWorkerDelayedJob(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName("delay")
	const delay = 3 * time.Second

	rec := &recorder{}
	w := newWorker(t, []string{q}, 1)
	w.Register("later.job", rec.record(func(ojs.JobContext) error { return nil }))
	w.start(t)

	before := time.Now()
	job, err := c.Enqueue(ctx, "later.job", ojs.Args{"n": 1}, ojs.WithQueue(q), ojs.WithDelay(delay))
	after := time.Now()
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if job.State != ojs.JobStateScheduled {
		t.Errorf("PUSH: state %q, want scheduled", job.State)
	}
	if job.ScheduledAt == nil || job.ScheduledAt.Before(before.Add(delay).Add(-time.Millisecond)) || job.ScheduledAt.After(after.Add(delay)) {
		t.Errorf("PUSH: scheduled_at %v, want between %v and %v", job.ScheduledAt, before.Add(delay), after.Add(delay))
	}
	got := waitJobState(t, c, job.ID, delay+30*time.Second, ojs.JobStateCompleted)
	if got.Attempt != 1 {
		t.Errorf("INFO attempt %d, want 1", got.Attempt)
	}
	inv := rec.forJob(job.ID)
	if len(inv) != 1 {
		t.Fatalf("handler called %d times, want 1", len(inv))
	}
	due := before.Add(delay)
	if early := due.Sub(inv[0].Start); early > 5*time.Millisecond {
		t.Errorf("delayed job ran %s early", early.Round(time.Millisecond))
	}
	// Never early; "on time" allows the poll interval plus a loaded machine.
	if late := inv[0].Start.Sub(after.Add(delay)); late > 15*time.Second {
		t.Errorf("delayed job ran %s late (tolerance 15 s)", late.Round(time.Millisecond))
	}
	w.requireNoWorkerErrors(t)
}

// TestWorkerPriorityOrder: with concurrency 1, higher priority runs first.
func TestWorkerPriorityOrder(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName("prio")
	prios := []int{3, 10, 1, 7, 5}

	for _, p := range prios {
		if _, err := c.Enqueue(ctx, "prio.job", ojs.Args{"p": p}, ojs.WithQueue(q), ojs.WithPriority(p)); err != nil {
			t.Fatalf("Enqueue: %v", err)
		}
	}
	afterIndexLag() // all in the ready index before the worker starts
	rec := &recorder{}
	w := newWorker(t, []string{q}, 1)
	w.Register("prio.job", rec.record(func(ojs.JobContext) error { return nil }))
	w.start(t)

	ok, _ := waitFor(20*time.Second, 100*time.Millisecond, func() (bool, string) { return rec.count() >= len(prios), "" })
	if !ok {
		t.Fatalf("only %d of %d jobs ran", rec.count(), len(prios))
	}
	var order []int
	for _, inv := range rec.all() {
		order = append(order, int(inv.Args["p"].(float64)))
	}
	want := slices.Clone(prios)
	slices.Sort(want)
	slices.Reverse(want)
	if !slices.Equal(order, want) {
		t.Errorf("run order by priority %v, want %v", order, want)
	}
	w.requireNoWorkerErrors(t)
}

// TestWorkerLeaseExpiry: a job enqueued with a 2 s visibility timeout is
// fetched by a handler that hangs (and, heartbeats being off, never extends
// it); the job is delivered again, the new delivery completes it, and the
// stale ack of the first delivery, sent afterwards, does not change it.
//
// The Go SDK has no public lower-level fetch, so the worker itself holds the
// lease: concurrency 2 lets it take the redelivery beside the hung handler.
func TestWorkerLeaseExpiry(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName("lease")

	var (
		mu         sync.Mutex
		deliveries []int // JobContext.Attempt of each delivery
	)
	release := make(chan struct{})
	redelivered := make(chan struct{})
	firstDone := make(chan struct{})
	w := newWorker(t, []string{q}, 2, ojs.WithHeartbeatInterval(time.Hour))
	w.Register("slow.job", func(jc ojs.JobContext) error {
		mu.Lock()
		deliveries = append(deliveries, jc.Attempt)
		n := len(deliveries)
		mu.Unlock()
		switch n {
		case 1:
			defer close(firstDone)
			select { // hang past the lease
			case <-release:
			case <-time.After(30 * time.Second):
			}
			jc.SetResult(map[string]any{"delivery": 1})
			return nil
		case 2:
			close(redelivered)
		}
		jc.SetResult(map[string]any{"delivery": n})
		return nil
	})
	w.start(t)

	job, err := c.Enqueue(ctx, "slow.job", ojs.Args{"x": 1}, ojs.WithQueue(q),
		ojs.WithVisibilityTimeout(2*time.Second), retryPolicy(3, time.Second, 1))
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	select {
	case <-redelivered:
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatalf("job was not delivered again within 30 s of a 2 s visibility timeout")
	}
	got := waitJobState(t, c, job.ID, 30*time.Second, ojs.JobStateCompleted)
	close(release)
	select {
	case <-firstDone:
	case <-time.After(5 * time.Second):
		t.Fatal("first handler did not return")
	}
	// The stale ack follows the first handler's return; a loaded machine answers it late.
	waitFor(30*time.Second, 100*time.Millisecond, func() (bool, string) {
		return len(w.logs.matching("failed to ack")) > 0, ""
	})

	mu.Lock()
	seen := slices.Clone(deliveries)
	mu.Unlock()
	if len(seen) != 2 || seen[0] != 1 || seen[1] != 2 {
		t.Errorf("deliveries (attempts) %v, want [1 2] (the lapsed lease counts as an attempt, worker-protocol 5.5)", seen)
	}
	if got.Attempt != 2 {
		t.Errorf("INFO after redelivery: attempt %d, want 2", got.Attempt)
	}
	final, err := c.GetJob(ctx, job.ID)
	if err != nil {
		t.Fatalf("GetJob: %v", err)
	}
	if final.State != ojs.JobStateCompleted || final.Result["delivery"] != float64(2) {
		t.Errorf("after the stale ack: state %q result %v, want completed with delivery 2", final.State, final.Result)
	}
	if len(w.logs.matching("failed to ack")) != 1 {
		t.Errorf("want exactly one refused ack (the stale one), worker log: %v", w.logs.all())
	}
}

// TestWorkerHeartbeatKeepsLease: the worker's heartbeat loop (every 500 ms,
// active_job_ids) keeps a lease alive through a handler that outlasts it by 2 s.
// The lease is 10 s: only a stall longer than that between two heartbeats that
// land lets it lapse (4 s did, once, on a CI machine where one PUSH took 6 s), and
// a lapse is then seen as a second delivery or an attempt past 1.
func TestWorkerHeartbeatKeepsLease(t *testing.T) {
	t.Parallel()
	const lease = 10 * time.Second
	c := newClient(t)
	ctx := ctxFor(t, 60*time.Second)
	q := uniqueName("beat")

	rec := &recorder{}
	w := newWorker(t, []string{q}, 2, ojs.WithHeartbeatInterval(500*time.Millisecond))
	w.Register("long.job", rec.record(func(jc ojs.JobContext) error {
		select {
		case <-time.After(lease + 2*time.Second):
		case <-jc.Context().Done():
			return jc.Context().Err()
		}
		jc.SetResult(map[string]any{"done": true})
		return nil
	}))
	w.start(t)

	job, err := c.Enqueue(ctx, "long.job", ojs.Args{"x": 1}, ojs.WithQueue(q),
		ojs.WithVisibilityTimeout(lease), retryPolicy(3, time.Second, 1))
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	got := waitJobState(t, c, job.ID, 45*time.Second, ojs.JobStateCompleted, ojs.JobStateDiscarded)
	time.Sleep(500 * time.Millisecond)
	if n := len(rec.forJob(job.ID)); n != 1 {
		t.Errorf("handler called %d times, want 1 (heartbeats should have kept the lease)", n)
	}
	if got.State != ojs.JobStateCompleted || got.Attempt != 1 || got.Result["done"] != true {
		t.Errorf("INFO: state %q attempt %d result %v, want completed at attempt 1", got.State, got.Attempt, got.Result)
	}
	w.requireNoWorkerErrors(t)
}

// TestWorkerHundredJobsExactlyOnce: 100 jobs, concurrency 8: every job is
// completed and no handler runs twice for the same job.
func TestWorkerHundredJobsExactlyOnce(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := ctxFor(t, 90*time.Second)
	q := uniqueName("hundred")
	const n = 100

	reqs := make([]ojs.JobRequest, n)
	for i := range reqs {
		reqs[i] = ojs.JobRequest{Type: "bulk.job", Args: ojs.Args{"i": i}, Options: []ojs.EnqueueOption{ojs.WithQueue(q)}}
	}
	var ids []string
	for off := 0; off < n; off += 50 {
		jobs, err := c.EnqueueBatch(ctx, reqs[off:off+50])
		if err != nil {
			t.Fatalf("EnqueueBatch: %v", err)
		}
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
	}
	if len(ids) != n {
		t.Fatalf("enqueued %d jobs, want %d", len(ids), n)
	}

	var mu sync.Mutex
	runs := map[string]int{}
	w := newWorker(t, []string{q}, 8)
	w.Register("bulk.job", func(jc ojs.JobContext) error {
		mu.Lock()
		runs[jc.Job.ID]++
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		jc.SetResult(map[string]any{"i": jc.Job.Args["i"]})
		return nil
	})
	w.start(t)

	distinct := func() int { mu.Lock(); defer mu.Unlock(); return len(runs) }
	if ok, _ := waitFor(60*time.Second, 200*time.Millisecond, func() (bool, string) { return distinct() >= n, "" }); !ok {
		t.Fatalf("only %d of %d jobs ran within 60 s", distinct(), n)
	}

	// Every job completed (INFO), 8 lookups at a time.
	var wg sync.WaitGroup
	var notDone atomic.Int32
	sem := make(chan struct{}, 8)
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func(id string) {
			defer wg.Done()
			defer func() { <-sem }()
			ok, last := waitFor(10*time.Second, 200*time.Millisecond, func() (bool, string) {
				j, err := c.GetJob(ctx, id)
				if err != nil {
					return false, err.Error()
				}
				return j.State == ojs.JobStateCompleted, string(j.State)
			})
			if !ok {
				notDone.Add(1)
				t.Errorf("job %s not completed: %s", id, last)
			}
		}(id)
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond)

	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for _, id := range ids {
		if runs[id] != 1 {
			twice++
			t.Errorf("job %s ran %d times, want exactly once", id, runs[id])
		}
	}
	if len(runs) != n {
		t.Errorf("handler saw %d distinct jobs, want %d", len(runs), n)
	}
	t.Logf("%d jobs: %d not completed, %d not run exactly once", n, notDone.Load(), twice)
	w.requireNoWorkerErrors(t)
}
