package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// shipped are the repository paths a tarball carries beside the binaries:
// the layout mirrors the repository, so scripts/install.sh run from the
// unpacked tarball installs it as `make install` does.
var shipped = []string{
	"README.md", "CHANGELOG.md", "LICENSE", "NOTICE", "LICENSES",
	"docs", "deploy", "systemd/olcd.service",
	"scripts/install.sh", "scripts/uninstall.sh",
}

// entry is one file of an archive being written.
type entry struct {
	name string
	mode fs.FileMode
	data []byte
	dir  bool
}

// tracked lists the files git tracks under paths (only what is committed
// ships, never a stray file of the work tree).
func (r *release) tracked(paths ...string) ([]string, error) {
	cmd := exec.Command("git", append([]string{"-C", r.root, "ls-files", "-z", "--"}, paths...)...)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	return files, nil
}

// tarball writes <base>.tar.gz: <base>/bin/<binaries> and the shipped files.
func (r *release) tarball(arch, bin string) error {
	top := r.base(arch)
	var es []entry
	for _, b := range r.bins {
		data, err := os.ReadFile(filepath.Join(bin, b))
		if err != nil {
			return err
		}
		es = append(es, entry{name: top + "/bin/" + b, mode: 0o755, data: data})
	}
	files, err := r.tracked(shipped...)
	if err != nil {
		return err
	}
	for _, f := range files {
		p := filepath.Join(r.root, f)
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if st.Mode()&0o111 != 0 {
			mode = 0o755
		}
		es = append(es, entry{name: top + "/" + f, mode: mode, data: data})
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	if err := r.writeTar(zw, withDirs(es)); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.out, top+".tar.gz"), buf.Bytes(), 0o644)
}

// withDirs adds an entry for every parent directory and sorts by name, so
// archives list a directory before its files and rebuilds are identical.
func withDirs(es []entry) []entry {
	seen := map[string]bool{}
	for _, e := range es {
		seen[e.name] = true
	}
	out := append([]entry(nil), es...)
	for _, e := range es {
		for d := filepath.Dir(e.name); d != "." && d != "/"; d = filepath.Dir(d) {
			if !seen[d] {
				seen[d] = true
				out = append(out, entry{name: d, mode: 0o755, dir: true})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// writeTar writes es as a tar stream owned by root with the commit's time.
func (r *release) writeTar(w interface{ Write([]byte) (int, error) }, es []entry) error {
	tw := tar.NewWriter(w)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Mode: int64(e.mode), ModTime: r.modTime, Uname: "root", Gname: "root", Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag, h.Name = tar.TypeDir, e.name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("tar %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return fmt.Errorf("tar %s: %w", e.name, err)
		}
	}
	return tw.Close()
}
