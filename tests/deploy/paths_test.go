package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestNamedPathsExist: every repository path the user-facing files name
// (deploy/…, docs/…, scripts/…, systemd/…) exists, so a comment or a doc
// cannot point at a file that was moved (issue 28: the rule file named
// deploy/kubernetes/prometheusrule.yaml, which lives under monitoring/).
func TestNamedPathsExist(t *testing.T) {
	files := []string{"../../README.md", "../../CHANGELOG.md"}
	for _, glob := range []string{"../../docs/*.md", "../../deploy/*/*.yaml", "../../deploy/*/*/*.yaml", "../../deploy/olcd.yaml"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 15 {
		t.Fatalf("only %d files to read: the globs look wrong", len(files))
	}
	// A path: one of the top directories, then at least one more part
	// with an extension or a trailing slash; placeholders (<…>, *, $) are
	// not paths.
	ref := regexp.MustCompile(`\b(?:deploy|docs|scripts|systemd)/[A-Za-z0-9_./-]+`)
	checked := 0
	for _, f := range files {
		if filepath.Base(f) == "measurements.md" {
			continue // the dated record names paths as they were then
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, at := range ref.FindAllStringIndex(string(b), -1) {
			if at[0] > 0 && b[at[0]-1] == '/' {
				continue // a path on the host (/etc/systemd/system/…), not in the repository
			}
			m := string(b[at[0]:at[1]])
			p := strings.TrimRight(m, ".,:;)")
			if !strings.Contains(filepath.Base(p), ".") && !strings.HasSuffix(m, "/") && !isDir(p) {
				continue // a word like docs/ in prose, or a unit name
			}
			checked++
			if _, err := os.Stat(filepath.Join("../..", p)); err != nil {
				t.Errorf("%s names %s, which does not exist", strings.TrimPrefix(f, "../../"), p)
			}
		}
	}
	if checked < 30 {
		t.Errorf("only %d paths checked: the pattern looks wrong", checked)
	}
}

func isDir(p string) bool {
	st, err := os.Stat(filepath.Join("../..", p))
	return err == nil && st.IsDir()
}
