package rules

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParsePatch decodes arbitrary documents as a config file and as a live
// patch on it. Neither may crash (a self-referencing alias in a patch once
// overflowed the stack), every failure is a *ValidationError whose problems
// name a file, and a failed patch leaves the running config as it was.
func FuzzParsePatch(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*.yaml")
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, []byte("signals: {cpu_busy: {threshold: 0.7}}"))
	}
	f.Add([]byte("mode: enforce\nports: [{port: 80}]\n"), []byte("signals: &s {cpu_busy: *s}"))
	f.Add([]byte("signals:\n  cpu_busy: &t {threshold: 0.8}\n  psi_cpu_some: {<<: *t}\n"), []byte(`{"ports": null, "mode": "observe"}`))
	f.Fuzz(func(t *testing.T, doc, patch []byte) {
		check := func(what string, err error) {
			t.Helper()
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 {
				t.Fatalf("%s: error %v is not a *ValidationError with problems", what, err)
			}
			for _, p := range ve.Problems {
				if p.File == "" || p.Line < 0 || p.Msg == "" {
					t.Fatalf("%s: problem %+v lacks its place or message", what, p)
				}
			}
		}
		c, _, err := Parse(doc, "f.yaml")
		if err != nil {
			check("parse", err)
			c = Default()
		}
		before := *c
		p, _, err := c.Patch(patch, "")
		if err != nil {
			check("patch", err)
		} else if p == nil {
			t.Fatal("patch: nil config without error")
		}
		if !reflect.DeepEqual(before, *c) {
			t.Fatal("patch modified the config it was applied to")
		}
	})
}
