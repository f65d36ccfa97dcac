// Serves the Go SDK's push adapter (serverless.HandleHTTP), unmodified, on 127.0.0.1.
package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/openjobspec/ojs-go-sdk/serverless"
)

type delivery struct {
	DeliveryID     string `json:"delivery_id"`
	BodyDeliveryID string `json:"body_delivery_id"`
	JobID          string `json:"job_id"`
	Attempt        int    `json:"attempt"`
	SigOK          bool   `json:"sig_ok"`
}

func main() {
	secret := []byte(os.Getenv("PUSH_SECRET"))
	slowMs, err := strconv.Atoi(os.Getenv("SLOW_MS"))
	if err != nil {
		slowMs = 2500
	}
	var mu sync.Mutex
	var deliveries []delivery

	h := serverless.NewLambdaHandler()
	h.Register("push.echo", func(ctx context.Context, job serverless.JobEvent) error { return nil })
	h.Register("push.flaky", func(ctx context.Context, job serverless.JobEvent) error {
		if job.Attempt < 2 {
			return errors.New("flaky handler fails its first attempt")
		}
		return nil
	})
	h.Register("push.slow", func(ctx context.Context, job serverless.JobEvent) error {
		if job.Attempt < 2 {
			time.Sleep(time.Duration(slowMs) * time.Millisecond)
		}
		return nil
	})
	adapter := h.HandleHTTP()

	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			mu.Lock()
			defer mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(deliveries)
			return
		}
		raw, _ := io.ReadAll(r.Body)
		mac := hmac.New(sha256.New, secret)
		mac.Write([]byte(r.Header.Get("X-OJS-Timestamp") + "."))
		mac.Write(raw)
		expected := "sha256=" + hex.EncodeToString(mac.Sum(nil))
		sigOK := hmac.Equal([]byte(expected), []byte(r.Header.Get("X-OJS-Signature")))
		var body struct {
			DeliveryID string `json:"delivery_id"`
			Job        struct {
				Attempt int `json:"attempt"`
			} `json:"job"`
		}
		_ = json.Unmarshal(raw, &body)
		mu.Lock()
		deliveries = append(deliveries, delivery{
			DeliveryID: r.Header.Get("X-OJS-Delivery-ID"), BodyDeliveryID: body.DeliveryID,
			JobID: r.Header.Get("X-OJS-Job-ID"), Attempt: body.Job.Attempt, SigOK: sigOK,
		})
		mu.Unlock()
		if !sigOK {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"signature mismatch"}`))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(raw))
		adapter(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	fmt.Printf("LISTENING %d\n", ln.Addr().(*net.TCPAddr).Port)
	_ = http.Serve(ln, nil)
}
