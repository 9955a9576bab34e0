package daemon

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/rules"
)

func TestWithOverride(t *testing.T) {
	ov := func(kind, doc string) liveOverride {
		o, err := newOverride(kind, doc, []byte(doc))
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		return o
	}
	tests := []struct {
		name string
		file string // the config file ("" for {})
		docs []string
		want []string // the surviving documents, oldest first
	}{
		{"same field twice", "", []string{"mode: off\n", "mode: enforce\n"}, []string{"mode: enforce\n"}},
		{"different fields", "", []string{"mode: off\n", "interval: 1s\n"}, []string{"mode: off\n", "interval: 1s\n"}},
		{"a wider patch replaces", "", []string{"controller: {ki: 1}\n", "mode: off\n", "controller: {ki: 2, kp: 1}\n"},
			[]string{"mode: off\n", "controller: {ki: 2, kp: 1}\n"}},
		{"a narrower patch does not", "", []string{"controller: {ki: 2, kp: 1}\n", "controller: {ki: 1}\n"},
			[]string{"controller: {ki: 2, kp: 1}\n", "controller: {ki: 1}\n"}},
		// A null puts the file's value back (rules.Config.Patch): once no
		// earlier override sets its keys, nothing of it is live.
		{"a null undoes its field", "", []string{"controller: {ki: 1}\n", "controller: null\n"}, nil},
		{"a null undoes one field", "", []string{"mode: off\n", "controller: {ki: 1}\n", "controller: {ki: null}\n"}, []string{"mode: off\n"}},
		{"a null with nothing to undo", "", []string{"controller: {ki: null}\n"}, nil},
		{"a null under a wider override stays", "", []string{"controller: {ki: 2, kp: 1}\n", "controller: {ki: null}\n"},
			[]string{"controller: {ki: 2, kp: 1}\n", "controller: {ki: null}\n"}},
		{"a null beside a value stays", "", []string{"controller: {ki: 1}\n", "controller: {ki: null, kp: 1}\n"}, []string{"controller: {ki: null, kp: 1}\n"}},
		{"a list is one field", "", []string{"ports: [{port: 80}]\n", "ports: [{port: 81}, {port: 82}]\n"}, []string{"ports: [{port: 81}, {port: 82}]\n"}},
		{"a prefix of a name is another field", "", []string{"signals: {psi_cpu_some: {threshold: 0.5}}\n", "signals: {psi_cpu: {threshold: 0.5}}\n"},
			[]string{"signals: {psi_cpu_some: {threshold: 0.5}}\n", "signals: {psi_cpu: {threshold: 0.5}}\n"}},
		// A null of a signal the file does not list deletes it where the
		// file has no signals section (the defaults run): not spent.
		{"a null that deletes a default signal stays", "mode: enforce\n", []string{"signals: {accept_queue_fill: null}\n"},
			[]string{"signals: {accept_queue_fill: null}\n"}},
		{"a null of a signal the file lists is spent", "signals: {accept_queue_fill: {threshold: 0.8}}\n",
			[]string{"signals: {accept_queue_fill: {threshold: 0.5}}\n", "signals: {accept_queue_fill: null}\n"}, nil},
		{"a null of a signal the file lacks, after a patch of it, stays", "mode: enforce\n",
			[]string{"signals: {accept_queue_fill: {threshold: 0.5}}\n", "signals: {accept_queue_fill: null}\n"},
			[]string{"signals: {accept_queue_fill: null}\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file, _, err := rules.Parse([]byte(cmp.Or(tt.file, "{}")), "olcd.yaml")
			if err != nil {
				t.Fatal(err)
			}
			// valid: every document is a valid patch ("psi_cpu" is no
			// signal: only the paths count), so that a config runs.
			running, valid := file, true
			var list []liveOverride
			for _, doc := range tt.docs {
				o := ov("patch", doc)
				if next, _, err := running.Patch([]byte(doc), "admin patch"); err == nil {
					running = next
				} else {
					valid = false
				}
				if list, err = withOverride(list, o); err != nil {
					t.Fatal(err)
				}
				list = withoutSpentReset(list, o, file, running)
			}
			var got []string
			for _, o := range list {
				got = append(got, o.Value)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("overrides %q, want %q", got, tt.want)
			}
			// What a restart and `olcd config show` rebuild is what runs.
			if cfg, err := replay(file, list); valid && (err != nil || cfg.Digest() != running.Digest()) {
				t.Errorf("the file and the overrides %q replayed: %v, digest %s, want the running %s", got, err, cfg.Digest(), running.Digest())
			}
		})
	}

	// Distinct fields, one at a time, stop at the cap.
	var list []liveOverride
	var err error
	for i := range maxOverrides + 1 {
		var next []liveOverride
		next, err = withOverride(list, ov("patch", fmt.Sprintf("f%d: 1\n", i)))
		if err != nil {
			break
		}
		list = next
	}
	if err == nil || len(list) != maxOverrides || !strings.Contains(err.Error(), "write these settings into the config file") {
		t.Errorf("after %d distinct overrides: %d kept, error %v; want %d kept and a refusal", maxOverrides+1, len(list), err, maxOverrides)
	}
}

// TestOverridesBounded: 5,000 mode changes and 500 patches of one field
// through the admin path leave one override per field, and the status stays
// small (before, every write was appended: 5,500 overrides, a status of
// hundreds of KiB).
func TestOverridesBounded(t *testing.T) {
	d := startTestDaemon(t, testConfig(2, "500ms", "5s", 4))
	modes := []string{"observe", "enforce", "off"}
	for i := range 5000 {
		m := modes[i%len(modes)]
		if err := d.override("mode", m, []byte("mode: "+m+"\n")); err != nil {
			t.Fatalf("mode override %d: %v", i, err)
		}
	}
	for i := range 500 {
		doc := fmt.Sprintf("controller: {activation_ticks: %d}\n", 1+i%10)
		if err := d.override("patch", doc, []byte(doc)); err != nil {
			t.Fatalf("patch %d: %v", i, err)
		}
	}
	d.publish()
	st := d.Status()
	if len(st.Overrides) != 2 {
		t.Errorf("%d live overrides, want 2 (one mode, one controller.activation_ticks): %+v", len(st.Overrides), st.Overrides[:min(5, len(st.Overrides))])
	}
	if want := modes[4999%len(modes)]; st.Mode != want {
		t.Errorf("mode %q, want the last written %q", st.Mode, want)
	}
	b, _ := json.Marshal(st)
	if len(b) > 16<<10 {
		t.Errorf("status JSON is %d bytes, want < 16 KiB", len(b))
	}
	d.noErrorsLogged(t)
}

// TestRunningConfig: GET /v1/config gives the file as the daemon loaded it,
// not as it is on disk after a refused reload, and the live overrides with
// their documents; the file and the overrides rebuild the config in force
// (its Digest), which `olcd config show` renders.
func TestRunningConfig(t *testing.T) {
	d, _ := goldenDaemon(t)
	loaded, err := os.ReadFile(d.opts.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	d.opts.ConfigPath = filepath.Join(t.TempDir(), "olcd.yaml")
	if err := os.WriteFile(d.opts.ConfigPath, loaded, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.override("patch", "controller: {ki: 0.3}\n", []byte("controller: {ki: 0.3}\n")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.opts.ConfigPath, []byte("controller: {ki: 9}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.applyLoad(d.readConfig("SIGHUP")); err == nil {
		t.Fatal("an invalid file was applied")
	}
	rc := d.runningConfig()
	if rc.Source != d.opts.ConfigPath || rc.File != string(loaded) || len(rc.Overrides) != 1 || rc.Overrides[0].Doc != "controller: {ki: 0.3}\n" {
		t.Fatalf("running config %+v", rc)
	}
	cfg, _, err := rules.Parse([]byte(rc.File), rc.Source)
	if err != nil || cfg.Digest() != rc.FileDigest {
		t.Fatalf("file as loaded: %v, digest %s, want %s", err, cfg.Digest(), rc.FileDigest)
	}
	if cfg, _, err = cfg.Patch([]byte(rc.Overrides[0].Doc), "live patch"); err != nil || cfg.Digest() != rc.Digest || cfg.Controller.Ki != 0.3 {
		t.Errorf("file and overrides: %v, digest %s, want %s", err, cfg.Digest(), rc.Digest)
	}
}

// TestResetThatDeletesASignalKept: on a file without a signals section,
// `{signals: {accept_queue_fill: null}}` deletes a default signal (the
// file beneath lists none): it changes the config, so it stays a live
// override, and the file with the overrides rebuilds the config in force
// (it was dropped as a spent reset: no override listed, a NOTICE in
// `olcd config show`, and the signal back on after a restart).
func TestResetThatDeletesASignalKept(t *testing.T) {
	d := startTestDaemon(t, testConfig(2, "500ms", "5s", 4))
	if d.eng.cfg.Thresholds[olc.AcceptQueueFill] == 0 {
		t.Fatal("accept_queue_fill is not a default signal any more: the test needs another")
	}
	const doc = "signals: {accept_queue_fill: null}\n"
	if err := d.override("patch", doc, []byte(doc)); err != nil {
		t.Fatal(err)
	}
	if th := d.eng.cfg.Thresholds[olc.AcceptQueueFill]; th != 0 {
		t.Fatalf("accept_queue_fill threshold %g after the patch, want the signal deleted", th)
	}
	d.publish()
	if st := d.Status(); len(st.Overrides) != 1 || st.Overrides[0].Value != doc {
		t.Errorf("status overrides %+v, want the patch", st.Overrides)
	}
	rc := d.runningConfig()
	cfg, _, err := rules.Parse([]byte(rc.File), rc.Source)
	for _, o := range rc.Overrides {
		if err == nil {
			cfg, _, err = cfg.Patch([]byte(o.Doc), "live patch")
		}
	}
	if err != nil || cfg.Digest() != rc.Digest {
		t.Errorf("the file and the overrides %+v replayed: %v, want the running digest %s", rc.Overrides, err, rc.Digest)
	}
	d.noErrorsLogged(t)
}
