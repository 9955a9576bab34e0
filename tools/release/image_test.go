package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"go.yaml.in/yaml/v3"
)

const repoRoot = "../.."

// elfMachine is the ELF machine each GOARCH's binary must carry.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// daemonSet is the part of deploy/kubernetes/daemonset.yaml the image must
// agree with: the container's args and the capabilities it adds.
func daemonSet(t *testing.T) (args, caps []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "kubernetes", "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Name            string   `yaml:"name"`
						Args            []string `yaml:"args"`
						SecurityContext struct {
							Capabilities struct {
								Add []string `yaml:"add"`
							} `yaml:"capabilities"`
						} `yaml:"securityContext"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &ds); err != nil {
		t.Fatalf("daemonset.yaml: %v", err)
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "olcd" {
			return c.Args, c.SecurityContext.Capabilities.Add
		}
	}
	t.Fatal("daemonset.yaml has no container named olcd")
	return nil, nil
}

// images returns the images to check by architecture: those of the release
// in $OLCD_RELEASE_DIST (scripts/test-release.sh sets it) from both the
// per-architecture tarballs and the OCI archive's index, else one built
// here from a fresh olcd binary.
func images(t *testing.T) (imgs map[string][]v1.Image, version string) {
	t.Helper()
	imgs = map[string][]v1.Image{}
	dist := os.Getenv("OLCD_RELEASE_DIST")
	if dist == "" {
		bin := filepath.Join(t.TempDir(), "olcd")
		cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/olcd")
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		r := &release{root: repoRoot, version: "v0.0.0-test", commit: "test", modTime: time.Unix(1700000000, 0).UTC()}
		img, err := r.buildImage("amd64", data)
		if err != nil {
			t.Fatal(err)
		}
		imgs["amd64"] = []v1.Image{img}
		return imgs, r.version
	}
	tars, _ := filepath.Glob(filepath.Join(dist, "olcd_*_linux_*.image.tar"))
	if len(tars) == 0 {
		t.Fatalf("no olcd_*_linux_*.image.tar in %s", dist)
	}
	for _, p := range tars {
		parts := strings.Split(strings.TrimSuffix(filepath.Base(p), ".image.tar"), "_")
		version = parts[1]
		img, err := tarball.ImageFromPath(p, nil)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		imgs[parts[3]] = append(imgs[parts[3]], img)
	}
	arch := filepath.Join(dist, "olcd_"+version+"_oci.tar")
	dir := t.TempDir()
	untar(t, arch, dir)
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatalf("%s: %v", arch, err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != version {
		t.Fatalf("%s: index.json %+v, want one index named %s", arch, tm.Manifests, version)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var plats []string
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		plats = append(plats, d.Platform.OS+"/"+d.Platform.Architecture)
		imgs[d.Platform.Architecture] = append(imgs[d.Platform.Architecture], img)
	}
	slices.Sort(plats)
	var want []string
	for a := range imgs {
		want = append(want, "linux/"+a)
	}
	slices.Sort(want)
	if !slices.Equal(plats, want) {
		t.Errorf("OCI index platforms %v, want those of the tarballs %v", plats, want)
	}
	return imgs, version
}

// untar unpacks the plain tar file src into dir.
func untar(t *testing.T, src, dir string) {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dir) {
			t.Fatalf("%s: entry %q outside the archive", src, h.Name)
		}
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// flat reads the image's flattened file system: each file's header and
// content by path.
func flat(t *testing.T, img v1.Image) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	hs, data := map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hs, data
		}
		if err != nil {
			t.Fatal(err)
		}
		n := "/" + strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		hs[n] = h
		if h.Typeflag == tar.TypeReg {
			if data[n], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestImage reads the image back with go-containerregistry: the
// entrypoint and command the DaemonSet relies on, root, the capabilities
// label equal to the unit's and the DaemonSet's lists, the version labels,
// and in its file system the static binary for the right architecture and
// the default config.
func TestImage(t *testing.T) {
	dsArgs, dsCaps := daemonSet(t)
	r := &release{root: repoRoot}
	unitCaps, err := r.unitCapabilities()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dsCaps, unitCaps) {
		t.Fatalf("daemonset.yaml adds %v, the unit's CapabilityBoundingSet is %v: one list", dsCaps, unitCaps)
	}
	conf, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "olcd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	imgs, version := images(t)
	for arch, list := range imgs {
		for i, img := range list {
			t.Run(arch+"/"+[]string{"tarball", "oci"}[min(i, 1)], func(t *testing.T) {
				cf, err := img.ConfigFile()
				if err != nil {
					t.Fatal(err)
				}
				c := cf.Config
				if cf.OS != "linux" || cf.Architecture != arch {
					t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, arch)
				}
				if !slices.Equal(c.Entrypoint, []string{imageBinary}) {
					t.Errorf("entrypoint %q, want [%s]", c.Entrypoint, imageBinary)
				}
				if !slices.Equal(c.Cmd, dsArgs) {
					t.Errorf("cmd %q, want the DaemonSet's args %q", c.Cmd, dsArgs)
				}
				if c.User != "0:0" {
					t.Errorf("user %q, want 0:0 (olcd needs root's capabilities)", c.User)
				}
				if got := strings.Fields(c.Labels[CapabilitiesLabel]); !slices.Equal(got, unitCaps) {
					t.Errorf("label %s = %q, want the unit's %v", CapabilitiesLabel, c.Labels[CapabilitiesLabel], unitCaps)
				}
				if got := c.Labels["org.opencontainers.image.version"]; got != version {
					t.Errorf("version label %q, want %q", got, version)
				}
				if c.Labels["org.opencontainers.image.revision"] == "" || c.Labels["org.opencontainers.image.licenses"] == "" {
					t.Errorf("labels lack the revision or licences: %v", c.Labels)
				}
				hs, data := flat(t, img)
				bin, ok := data[imageBinary]
				if !ok || hs[imageBinary].Mode&0o111 == 0 {
					t.Fatalf("%s missing or not executable", imageBinary)
				}
				ef, err := elf.NewFile(bytes.NewReader(bin))
				if err != nil {
					t.Fatalf("%s: %v", imageBinary, err)
				}
				if ef.Machine != elfMachine[arch] {
					t.Errorf("%s is for %v, want %v", imageBinary, ef.Machine, elfMachine[arch])
				}
				if slices.ContainsFunc(ef.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP }) {
					t.Errorf("%s is dynamically linked: the image has no libc", imageBinary)
				}
				if !bytes.Equal(data[imageConfig], conf) {
					t.Errorf("%s differs from deploy/olcd.yaml", imageConfig)
				}
				if h := hs["/tmp"]; h == nil || h.Mode&0o1777 != 0o1777 {
					t.Errorf("/tmp missing or not 1777")
				}
				for _, d := range []string{"/run/olcd", "/var/log/olcd"} {
					if h := hs[d]; h == nil || h.Typeflag != tar.TypeDir {
						t.Errorf("%s missing", d)
					}
				}
			})
		}
	}
}
