// Package interop drives the OJS server with the official Go SDK
// (github.com/openjobspec/ojs-go-sdk), used the way its README shows a user
// doing it. The server URL comes from OJS_URL.
//
// Every scenario uses its own queue (prefix + random suffix), so all scenarios
// run in parallel against one table. Every wait is bounded.
package interop

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ojs "github.com/openjobspec/ojs-go-sdk"
)

// Worker timings used by every scenario: short polls so the suite runs fast,
// a short grace period so a stuck handler cannot hold the suite.
const (
	pollInterval = 200 * time.Millisecond
	gracePeriod  = 2 * time.Second
)

// httpClient bounds every SDK request (the SDK's default client has no timeout) at
// API Gateway's 29 s, the longest a deployed worker waits: a FETCH given up sooner
// (10 s here once, on a machine busy beside the suite) strands what it claimed until
// the lease ends, and the test waiting for that job fails.
var httpClient = &http.Client{Timeout: 30 * time.Second}

func serverURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("OJS_URL")
	if u == "" {
		t.Fatal("OJS_URL is not set (e.g. http://127.0.0.1:18083)")
	}
	return u
}

func newClient(t *testing.T) *ojs.Client {
	t.Helper()
	c, err := ojs.NewClient(serverURL(t), ojs.WithHTTPClient(httpClient))
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	return c
}

// ctxFor returns a context bounded by d and cancelled at the end of the test.
func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// uniqueName returns prefix-<random>, valid as an OJS queue or cron name.
func uniqueName(prefix string) string {
	return "go-" + prefix + "-" + randHex(4)
}

// waitFor polls cond every interval until it reports true or timeout passes;
// it returns the last description cond gave, for the failure message.
func waitFor(timeout, interval time.Duration, cond func() (bool, string)) (bool, string) {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, desc := cond()
		last = desc
		if ok {
			return true, last
		}
		if time.Now().After(deadline) {
			return false, last
		}
		time.Sleep(interval)
	}
}

// waitJobState waits until INFO reports one of the wanted states.
func waitJobState(t *testing.T, c *ojs.Client, id string, timeout time.Duration, want ...ojs.JobState) *ojs.Job {
	t.Helper()
	var job *ojs.Job
	ok, last := waitFor(timeout, 200*time.Millisecond, func() (bool, string) {
		j, err := c.GetJob(ctxFor(t, 30*time.Second), id)
		if err != nil {
			return false, "GetJob error: " + err.Error()
		}
		job = j
		for _, s := range want {
			if j.State == s {
				return true, string(j.State)
			}
		}
		return false, fmt.Sprintf("state %q attempt %d", j.State, j.Attempt)
	})
	if !ok {
		t.Fatalf("job %s did not reach %v within %s (last: %s)", id, want, timeout, last)
	}
	return job
}

// logRecorder is a slog.Handler that keeps the worker's warnings and errors
// (failed fetch/ack/nack): the SDK worker swallows those, so the suite reads
// them here to tell whether the server accepted what the SDK sent.
type logRecorder struct {
	mu   sync.Mutex
	recs []string
}

func (l *logRecorder) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler            { return l }
func (l *logRecorder) WithGroup(string) slog.Handler                 { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	l.recs = append(l.recs, b.String())
	l.mu.Unlock()
	return nil
}

func (l *logRecorder) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.recs...)
}

// matching returns the recorded lines containing s.
func (l *logRecorder) matching(s string) []string {
	var out []string
	for _, r := range l.all() {
		if strings.Contains(r, s) {
			out = append(out, r)
		}
	}
	return out
}

// runningWorker is an SDK worker started in the background for one scenario.
type runningWorker struct {
	*ojs.Worker
	logs   *logRecorder
	cancel context.CancelFunc
	done   chan error
}

// newWorker builds an SDK worker for the scenario's queues with the suite's
// short timings; extra options override them.
func newWorker(t *testing.T, queues []string, concurrency int, extra ...ojs.WorkerOption) *runningWorker {
	t.Helper()
	logs := &logRecorder{}
	opts := []ojs.WorkerOption{
		ojs.WithQueues(queues...),
		ojs.WithConcurrency(concurrency),
		ojs.WithPollInterval(pollInterval),
		ojs.WithGracePeriod(gracePeriod),
		ojs.WithHeartbeatInterval(2 * time.Second),
		ojs.WithWorkerHTTPClient(httpClient),
		ojs.WithLogger(slog.New(logs)),
	}
	opts = append(opts, extra...)
	return &runningWorker{Worker: ojs.NewWorker(serverURL(t), opts...), logs: logs}
}

// start runs the worker's Start loop in the background; it is stopped at the
// end of the test at the latest. On failure the worker's log is printed.
func (w *runningWorker) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.done = make(chan error, 1)
	go func() { w.done <- w.Worker.Start(ctx) }()
	t.Cleanup(func() {
		w.stop(t)
		if t.Failed() {
			for _, r := range w.logs.all() {
				if !strings.Contains(r, "context canceled") { // the stop itself
					t.Logf("worker log: %s", r)
				}
			}
		}
	})
}

// stop cancels the worker and waits (bounded) for Start to return.
func (w *runningWorker) stop(t *testing.T) {
	if w.cancel == nil {
		return
	}
	w.cancel()
	select {
	case err := <-w.done:
		if err != nil {
			t.Errorf("worker.Start returned %v", err)
		}
	case <-time.After(gracePeriod + 5*time.Second):
		t.Errorf("worker did not stop within %s", gracePeriod+5*time.Second)
	}
	w.cancel = nil
}

// requireNoWorkerErrors fails if the worker logged a failed fetch, ack or
// nack: the server refused something the SDK sent.
func (w *runningWorker) requireNoWorkerErrors(t *testing.T) {
	t.Helper()
	for _, s := range []string{"failed to fetch", "failed to ack", "failed to nack"} {
		if m := w.logs.matching(s); len(m) > 0 {
			t.Errorf("the SDK worker logged %d %q (server refused the SDK's request), first: %s", len(m), s, m[0])
		}
	}
}

// requireOJSError checks that err is an *ojs.Error with the given HTTP status
// and that errors.Is(err, sentinel) holds (sentinel may be nil).
func requireOJSError(t *testing.T, what string, err error, status int, sentinel error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: expected an error (HTTP %d), got none", what, status)
		return
	}
	var oe *ojs.Error
	if !errors.As(err, &oe) {
		t.Errorf("%s: expected *ojs.Error, got %T: %v", what, err, err)
		return
	}
	if oe.HTTPStatus != status {
		t.Errorf("%s: HTTP status %d, want %d (%v)", what, oe.HTTPStatus, status, err)
	}
	if sentinel != nil && !errors.Is(err, sentinel) {
		t.Errorf("%s: errors.Is(err, %v) is false; code %q (%v)", what, sentinel, oe.Code, err)
	}
}

// invocation is one call of a handler, as the handler saw it.
type invocation struct {
	JobID   string
	Type    string
	Attempt int
	Args    ojs.Args
	Start   time.Time
	End     time.Time
}

// recorder collects handler invocations from concurrent handlers.
type recorder struct {
	mu    sync.Mutex
	calls []invocation
}

func (r *recorder) add(inv invocation) {
	r.mu.Lock()
	r.calls = append(r.calls, inv)
	r.mu.Unlock()
}

func (r *recorder) all() []invocation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]invocation(nil), r.calls...)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func (r *recorder) forJob(id string) []invocation {
	var out []invocation
	for _, c := range r.all() {
		if c.JobID == id {
			out = append(out, c)
		}
	}
	return out
}

// record wraps a handler so that each call is recorded (start and end time).
func (r *recorder) record(h ojs.HandlerFunc) ojs.HandlerFunc {
	return func(ctx ojs.JobContext) error {
		inv := invocation{JobID: ctx.Job.ID, Type: ctx.Job.Type, Attempt: ctx.Attempt, Args: ctx.Job.Args, Start: time.Now()}
		err := h(ctx)
		inv.End = time.Now()
		r.add(inv)
		return err
	}
}

func boolPtr(b bool) *bool { return &b }

// rawPush enqueues with a plain HTTP request, for the one option the SDK
// cannot express (retry.on_exhaustion); it returns the job id.
func rawPush(t *testing.T, body map[string]any) string {
	t.Helper()
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, serverURL(t)+"/ojs/v1/jobs", bytes.NewReader(data))
	req.Header.Set("Content-Type", "application/openjobspec+json")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("raw PUSH: %v", err)
	}
	defer resp.Body.Close()
	var out struct {
		Job struct {
			ID string `json:"id"`
		} `json:"job"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusCreated || out.Job.ID == "" {
		t.Fatalf("raw PUSH: HTTP %d, decode error %v", resp.StatusCode, err)
	}
	return out.Job.ID
}

// afterIndexLag waits until jobs pushed a moment ago show in the ready index (the
// strict layer's lag, as on AWS; the harness passes OJS_INDEX_LAG_MS).
func afterIndexLag() {
	ms, _ := strconv.Atoi(os.Getenv("OJS_INDEX_LAG_MS"))
	time.Sleep(time.Duration(ms) * time.Millisecond)
}
