// Command release builds olcd's release artifacts into one directory
// (make release VERSION=vX.Y.Z; docs/release.md): per architecture a
// tarball, a .deb (nfpm) and an OCI image (go-containerregistry, no Docker
// daemon), a multi-architecture OCI archive, and SHA256SUMS over them all.
//
// It lives in its own module so the daemon's module carries neither
// packager's dependencies, and nothing here is linked into olcd.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// binaries are the commands a release ships, each from cmd/<name>; one
// whose directory does not exist in the tree being released is left out,
// so adding a command means adding its name here.
var binaries = []string{"olcd", "olcd-sim"}

// daemon is the binary the .deb's unit and the image run.
const daemon = "olcd"

// semver is what a release version must look like: v, three numbers, an
// optional pre-release (v0.1.0, v1.2.3-rc.1).
var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// release is one run's inputs, shared by every artifact's builder.
type release struct {
	root     string    // the repository's work tree
	out      string    // where artifacts go
	version  string    // vX.Y.Z
	commit   string    // the commit's short hash (with -dirty for a changed tree)
	ldflags  string    // as the Makefile builds olcd
	modTime  time.Time // the commit's time: every file's mtime, so rebuilds match byte for byte
	archs    []string
	bins     []string // the binaries found in this tree
	only     map[string]bool
	untagged bool
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	root := fs.String("root", "../..", "the repository's work tree")
	out := fs.String("out", "dist", "output directory (emptied first)")
	version := fs.String("version", "", "release version, vX.Y.Z[-pre] (required)")
	commit := fs.String("commit", "", "commit to stamp (default: git rev-parse --short HEAD of -root)")
	ldflags := fs.String("ldflags", "", "go build -ldflags (default: -s -w -X main.version=VERSION -X main.commit=COMMIT)")
	archs := fs.String("arch", "amd64,arm64", "comma-separated GOARCH list")
	only := fs.String("only", "tar,deb,image", "comma-separated artifacts to build: tar, deb, image")
	untagged := fs.Bool("allow-untagged", false, "build although VERSION is not a git tag at HEAD (test builds)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !semver.MatchString(*version) {
		return fmt.Errorf("version %q is not a semantic version vX.Y.Z[-pre] (make release VERSION=v0.1.0)", *version)
	}
	r := &release{version: *version, ldflags: *ldflags, untagged: *untagged, only: map[string]bool{}}
	var err error
	if r.root, err = filepath.Abs(*root); err != nil {
		return err
	}
	if r.out, err = filepath.Abs(*out); err != nil {
		return err
	}
	for _, a := range strings.Split(*archs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			r.archs = append(r.archs, a)
		}
	}
	for _, o := range strings.Split(*only, ",") {
		switch o = strings.TrimSpace(o); o {
		case "tar", "deb", "image":
			r.only[o] = true
		default:
			return fmt.Errorf("-only %q: want tar, deb or image", o)
		}
	}
	if err := r.checkSource(*commit); err != nil {
		return err
	}
	for _, b := range binaries {
		if st, err := os.Stat(filepath.Join(r.root, "cmd", b)); err == nil && st.IsDir() {
			r.bins = append(r.bins, b)
		}
	}
	if r.ldflags == "" {
		r.ldflags = fmt.Sprintf("-s -w -X main.version=%s -X main.commit=%s", r.version, r.commit)
	}
	if err := os.RemoveAll(r.out); err != nil {
		return err
	}
	if err := os.MkdirAll(r.out, 0o755); err != nil {
		return err
	}
	var images []archImage
	for _, arch := range r.archs {
		bin, err := r.build(arch)
		if err != nil {
			return err
		}
		if r.only["tar"] {
			if err := r.tarball(arch, bin); err != nil {
				return err
			}
		}
		if r.only["deb"] {
			if err := r.deb(arch, bin); err != nil {
				return err
			}
		}
		if r.only["image"] {
			img, err := r.image(arch, bin)
			if err != nil {
				return err
			}
			images = append(images, img)
		}
	}
	if len(images) > 0 {
		if err := r.ociArchive(images); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(filepath.Join(r.out, "build")); err != nil {
		return err
	}
	return writeSums(r.out)
}

// checkSource fills the commit and its time, and refuses a release whose
// version is not a tag at HEAD (unless -allow-untagged): a released version
// must name one commit.
func (r *release) checkSource(commit string) error {
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", append([]string{"-C", r.root}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	head, err := git("rev-parse", "HEAD")
	if err != nil {
		return err
	}
	st, err := git("status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return err
	}
	dirty := st != ""
	if commit == "" {
		if commit, err = git("rev-parse", "--short=12", "HEAD"); err != nil {
			return err
		}
		if dirty {
			commit += "-dirty"
		}
	}
	r.commit = commit
	ct, err := git("log", "-1", "--format=%ct", "HEAD")
	if err != nil {
		return err
	}
	sec, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return fmt.Errorf("commit time %q: %w", ct, err)
	}
	r.modTime = time.Unix(sec, 0).UTC()
	if r.untagged {
		return nil
	}
	tagged, err := git("rev-parse", "--verify", "--quiet", r.version+"^{commit}")
	if err != nil || tagged != head {
		return fmt.Errorf("%s is not a tag at HEAD (%s): tag the release first (git tag -a %s), or pass -allow-untagged for a test build", r.version, head[:12], r.version)
	}
	if dirty {
		return fmt.Errorf("the work tree has uncommitted changes: a release is built from the tagged commit alone")
	}
	return nil
}

// build cross-compiles every binary for linux/arch with cgo off (static:
// the .deb and the image need no libc) and returns their directory.
func (r *release) build(arch string) (string, error) {
	dir := filepath.Join(r.out, "build", arch)
	for _, b := range r.bins {
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", r.ldflags, "-o", filepath.Join(dir, b), "./cmd/"+b)
		cmd.Dir = r.root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("go build %s for %s: %w", b, arch, err)
		}
	}
	return dir, nil
}

// unitFor returns systemd/olcd.service with the binary at path: the unit
// names /usr/local/bin/olcd, where scripts/install.sh puts it.
func (r *release) unitFor(path string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(r.root, "systemd", "olcd.service"))
	if err != nil {
		return nil, err
	}
	return []byte(strings.ReplaceAll(string(b), "/usr/local/bin/olcd", path)), nil
}

// base is the artifacts' common name: olcd_v0.1.0_linux_amd64.
func (r *release) base(arch string) string {
	return fmt.Sprintf("olcd_%s_linux_%s", r.version, arch)
}
