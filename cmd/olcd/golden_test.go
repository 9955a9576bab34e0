package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/api"
)

// update rewrites the golden files (go test -run TestGoldenStatusText -update).
var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// TestGoldenStatusText: `olcd status` (and --all) renders the golden
// status document of internal/daemon's TestGolden, itself checked against
// the daemon's output on a fixed input, as the committed text.
func TestGoldenStatusText(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "internal", "daemon", "testdata", "golden", "status.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st api.Status
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	// The text shows clock times in the local zone: pin it.
	local := time.Local
	time.Local = time.UTC
	t.Cleanup(func() { time.Local = local })
	now := st.UpdatedAt.Add(250 * time.Millisecond)
	for name, all := range map[string]bool{"status.txt": false, "status-all.txt": true} {
		var b bytes.Buffer
		printStatus(&b, &st, all, now)
		path := filepath.Join("testdata", "golden", name)
		if *update {
			if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test -run TestGoldenStatusText -update writes it)", err)
		}
		if !bytes.Equal(b.Bytes(), want) {
			t.Errorf("%s differs from the golden file; got:\n%s", name, b.Bytes())
		}
	}
}
