package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/rules"
	"github.com/olcd/olcd/internal/testutil"
)

// patchServer answers PATCH /v1/config on a unix socket as the daemon
// does: the document validated onto the default config, its problems
// returned. It returns the socket and the documents received.
func patchServer(t *testing.T) (string, *[]string) {
	t.Helper()
	var got []string
	mux := http.NewServeMux()
	mux.HandleFunc("PATCH /v1/config", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, string(b))
		if _, _, err := rules.Default().Patch(b, "admin patch"); err != nil {
			var ve *rules.ValidationError
			body := api.Error{Error: err.Error()}
			if errors.As(err, &ve) { // as the daemon's writeError
				body.Problems = ve.ProblemLines()
				body.Error = fmt.Sprintf("%d config problem(s)", len(body.Problems))
			}
			w.WriteHeader(http.StatusUnprocessableEntity)
			_ = json.NewEncoder(w).Encode(body) // the client reports a short answer
			return
		}
		_ = json.NewEncoder(w).Encode(api.Status{})
	})
	return testutil.ServeUnixHTTP(t, mux), &got
}

// TestSetThresholdProblems: `olcd set threshold` sends a value the daemon
// refuses as the daemon's problem, at line 1 of the one-line patch it
// sends (it was "admin patch:3", a line of a document the user never saw),
// and a negative value reaches the validator instead of failing as an
// unknown flag ("flag provided but not defined: -1").
func TestSetThresholdProblems(t *testing.T) {
	sock, got := patchServer(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"set", "threshold", "cpu_busy", "80", "--socket", sock}, "admin patch:1: signals.cpu_busy.threshold: threshold 80 is outside (0, 1]"},
		{[]string{"set", "--socket", sock, "threshold", "cpu_busy", "-1"}, "admin patch:1: signals.cpu_busy.threshold: threshold -1"},
		{[]string{"set", "threshold", "load1", "-0.5", "--socket", sock}, "admin patch:1: signals.load1.threshold: threshold -0.5"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tt.args, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("olcd %s: exit %d, stderr %q; want 1 and %q", strings.Join(tt.args, " "), code, stderr.String(), tt.want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"set", "threshold", "cpu_busy", "0.75", "--socket", sock}, &stdout, &stderr); code != 0 {
		t.Errorf("a valid threshold: exit %d, stderr %q", code, stderr.String())
	}
	if n := len(*got); n != 4 || (*got)[3] != "signals: {cpu_busy: {threshold: 0.75}}\n" {
		t.Errorf("documents sent: %q", *got)
	}
	// A flag that is not defined is still a usage error.
	stderr.Reset()
	if code := run([]string{"set", "threshold", "cpu_busy", "0.5", "--nosuch", "--socket", sock}, &stdout, &stderr); code != 2 {
		t.Errorf("an unknown flag: exit %d, stderr %q; want 2", code, stderr.String())
	}
}

// TestSetThresholdNotFinite: a threshold that is not a finite number is
// one kind of bad value however it is written: 1e309 (which strconv reads
// as +Inf with ErrRange) exited 2 as "not a number" while NaN and Inf
// reached the validator and exited 1 as "got the string". Each now exits 1
// with one line naming the value and the threshold's range, as 80 does;
// only a value that is no number at all is a usage error (2).
func TestSetThresholdNotFinite(t *testing.T) {
	sock, _ := patchServer(t)
	for _, tt := range []struct {
		signal, value string
		code          int
		want          string
	}{
		{"cpu_busy", "1e309", 1, "1e309 is not a finite number: must be in (0, 1]"},
		{"cpu_busy", "-1e309", 1, "-1e309 is not a finite number: must be in (0, 1]"},
		{"cpu_busy", "NaN", 1, "NaN is not a finite number: must be in (0, 1]"},
		{"cpu_busy", "nan", 1, "nan is not a finite number: must be in (0, 1]"},
		{"cpu_busy", "Inf", 1, "Inf is not a finite number: must be in (0, 1]"},
		{"cpu_busy", "+Inf", 1, "+Inf is not a finite number: must be in (0, 1]"},
		{"cpu_busy", "-Inf", 1, "-Inf is not a finite number: must be in (0, 1]"},
		{"cpu_busy", "Infinity", 1, "Infinity is not a finite number: must be in (0, 1]"},
		{"load1", "1e400", 1, "1e400 is not a finite number: must be in (0, ∞)"},
		{"response_time_p95", "NaN", 1, "NaN is not a finite number: must be in (0, 30s]"},
		{"cpu_busy", "80", 1, "threshold 80 is outside (0, 1]"},
		{"cpu_busy", "-0", 1, "threshold 0 must be positive"},
		{"load1", "99999999999999999999999", 0, ""}, // huge but finite: a valid load
		{"cpu_busy", "abc", 2, `"abc" is not a number`},
		{"cpu_busy", "0.5}, mode: off, x: {", 2, "is not a number"},
	} {
		var stdout, stderr bytes.Buffer
		code := run([]string{"set", "threshold", tt.signal, tt.value, "--socket", sock}, &stdout, &stderr)
		lines := strings.Count(strings.TrimSpace(stderr.String()), "\n") + 1
		if code != tt.code || tt.code != 0 && (!strings.Contains(stderr.String(), tt.want) || lines != 1) {
			t.Errorf("olcd set threshold %s %s: exit %d, stderr %q; want %d and one line with %q", tt.signal, tt.value, code, stderr.String(), tt.code, tt.want)
		}
	}
}

// TestReloadSays: `olcd reload` says how many live overrides the reload
// dropped (none: nothing about them) and names the settings waiting for a
// start, from the status the daemon answers.
func TestReloadSays(t *testing.T) {
	for _, tt := range []struct {
		name      string
		overrides int
		pending   []string
		want, not []string
	}{
		{"nothing dropped", 0, nil, []string{"ok: config reloaded\n"}, []string{"dropped", "RESTART PENDING"}},
		{"two dropped", 2, nil, []string{"ok: config reloaded; 2 live override(s) dropped"}, []string{"RESTART PENDING"}},
		{"a restart pending", 0, []string{"datapath"}, []string{"RESTART PENDING: datapath changed", "recreates the maps it resizes"}, []string{"olcd detach"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
				_ = json.NewEncoder(w).Encode(api.Status{Overrides: make([]api.Override, tt.overrides)})
			})
			mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, r *http.Request) {
				_ = json.NewEncoder(w).Encode(api.Status{RestartPending: tt.pending})
			})
			sock := testutil.ServeUnixHTTP(t, mux)
			var stdout, stderr bytes.Buffer
			if code := run([]string{"reload", "--socket", sock}, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout %q, want %q", stdout.String(), w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(stdout.String(), n) {
					t.Errorf("stdout %q, want no %q", stdout.String(), n)
				}
			}
		})
	}
}
