package sampler

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func dumpSnap(b *strings.Builder, name string, snap Snapshot) {
	fmt.Fprintf(b, "== %s\n", name)
	for _, sig := range Signals() {
		if v, ok := snap.Get(sig); ok {
			fmt.Fprintf(b, "%s=%v\n", sig, v)
		} else {
			fmt.Fprintf(b, "%s=-\n", sig)
		}
	}
	fmt.Fprintf(b, "quota=%v fills=%v\n", snap.CgroupQuotaCPUs, snap.AcceptQueueFill)
	for _, e := range snap.Errors {
		fmt.Fprintf(b, "err %s: %v\n", e.Source, e.Err)
	}
}

func TestZZDump(t *testing.T) {
	var b strings.Builder
	for _, dir := range caseDirs(t) {
		var readings [2]reading
		for i, sub := range []string{"before", "after"} {
			s, _ := New(Config{Root: filepath.Join(dir, sub), Cgroup: readCg(dir)}, discardLogger())
			s.collect(&readings[i])
		}
		dumpSnap(&b, dir, compute(&readings[0], &readings[1], true, time.Second))
	}
	root, cg := benchRootV2(t)
	s, _ := New(Config{Root: root, Cgroup: cg}, discardLogger())
	var r [2]reading
	s.collect(&r[0])
	s.collect(&r[1])
	dumpSnap(&b, "benchroot", compute(&r[0], &r[1], true, time.Second))
	os.WriteFile(os.Getenv("DUMP_OUT"), []byte(b.String()), 0o644)
}

func readCg(dir string) string {
	raw, _ := os.ReadFile(filepath.Join(dir, "case.json"))
	i := strings.Index(string(raw), `"cgroup": "`)
	if i < 0 {
		return ""
	}
	rest := string(raw)[i+len(`"cgroup": "`):]
	return rest[:strings.Index(rest, `"`)]
}
