package statefile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/olc"
)

func TestWriteRead(t *testing.T) {
	now := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	good := File{Node: "n1", ConfigHash: "h1", WrittenAt: now, Controller: adaptive.State{DropProbability: 0.4, Overloaded: true,
		Ports: []adaptive.PortState{{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 80}, DropProbability: 0.4, Capacity: 200, Baseline: 0.004}}},
		Overrides: []Override{{At: now, Kind: "mode", Value: "observe", Doc: []byte("mode: observe\n")}}}
	cases := []struct {
		name    string
		write   func(dir string) error
		node    string
		hash    string
		at      time.Time
		want    string // "" ok; "missing"; else a substring of the Ignored reason
		wantP   float64
		wantCap float64
	}{
		{name: "fresh", node: "n1", hash: "h1", at: now.Add(3 * time.Second), wantP: 0.4, wantCap: 200},
		{name: "stale", node: "n1", hash: "h1", at: now.Add(MaxAge + time.Second), want: "more than 10m0s"},
		{name: "other node", node: "n2", hash: "h1", at: now, want: `node "n1"`},
		{name: "other config", node: "n1", hash: "h2", at: now, want: "config h1"},
		{name: "clock moved back", node: "n1", hash: "h1", at: now.Add(-time.Hour), want: "future"},
		{name: "other version", node: "n1", hash: "h1", at: now, want: "version 7", write: func(dir string) error {
			return os.WriteFile(filepath.Join(dir, Name), []byte(`{"version":7,"node":"n1","config_hash":"h1","written_at":"2026-12-02T06:00:00Z"}`), 0o600)
		}},
		{name: "garbage", node: "n1", hash: "h1", at: now, want: "not a state file", write: func(dir string) error {
			return os.WriteFile(filepath.Join(dir, Name), []byte("{"), 0o600)
		}},
		{name: "missing", node: "n1", hash: "h1", at: now, want: "missing", write: func(string) error { return nil }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			write := tc.write
			if write == nil {
				write = func(dir string) error { return Write(dir, good) }
			} else if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := write(dir); err != nil {
				t.Fatal(err)
			}
			f, err := Read(dir, tc.node, tc.hash, tc.at)
			switch {
			case tc.want == "missing":
				if !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("read: %v, want not exist", err)
				}
			case tc.want != "":
				var ig *Ignored
				if !errors.As(err, &ig) || !strings.Contains(ig.Reason, tc.want) {
					t.Fatalf("read: %v, want ignored with %q", err, tc.want)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				if f.Controller.DropProbability != tc.wantP || f.Controller.Ports[0].Capacity != tc.wantCap || string(f.Overrides[0].Doc) != "mode: observe\n" {
					t.Fatalf("read back %+v", f)
				}
			}
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if e.Name() != Name {
					t.Errorf("left in the state directory: %s", e.Name())
				}
			}
		})
	}
}
