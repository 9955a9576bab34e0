package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's layout, which deploy/kubernetes/daemonset.yaml relies on: the
// binary where the Dockerfile puts it, the config where the ConfigMap is
// mounted, and the admin socket's and decision log's directories.
const (
	imageBinary = "/usr/local/bin/olcd"
	imageConfig = "/etc/olcd/olcd.yaml"
	// CapabilitiesLabel names, space-separated without CAP_, the
	// capabilities olcd needs: an image cannot grant them, so the label
	// tells the runtime's operator what the DaemonSet adds (the unit's
	// CapabilityBoundingSet, one list).
	CapabilitiesLabel = "io.olcd.capabilities"
)

// archImage is one architecture's image, for the multi-arch index.
type archImage struct {
	arch string
	img  v1.Image
}

// unitCapabilities returns the unit's CapabilityBoundingSet without CAP_.
func (r *release) unitCapabilities() ([]string, error) {
	unit, err := os.ReadFile(filepath.Join(r.root, "systemd", "olcd.service"))
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(line, "CapabilityBoundingSet="); ok {
			var caps []string
			for _, c := range strings.Fields(v) {
				caps = append(caps, strings.TrimPrefix(c, "CAP_"))
			}
			return caps, nil
		}
	}
	return nil, fmt.Errorf("systemd/olcd.service has no CapabilityBoundingSet")
}

// layer makes an uncompressed-tar layer of es (gzip-compressed by
// go-containerregistry) with the commit's time.
func (r *release) layer(es []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	if err := r.writeTar(&buf, withDirs(es)); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// buildImage assembles olcd's image for one architecture FROM scratch, as
// ko does, without a Docker daemon: a base layer made here (root's passwd
// and group entries, /tmp, the directories olcd writes, the default config,
// the licences) and a layer with the static binary.
func (r *release) buildImage(arch string, olcd []byte) (v1.Image, error) {
	conf, err := os.ReadFile(filepath.Join(r.root, "deploy", "olcd.yaml"))
	if err != nil {
		return nil, err
	}
	base := []entry{
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnogroup:x:65534:\n")},
		{name: "tmp", mode: 0o1777, dir: true},
		{name: "run/olcd", mode: 0o700, dir: true},
		{name: "var/log/olcd", mode: 0o750, dir: true},
		{name: strings.TrimPrefix(imageConfig, "/"), mode: 0o644, data: conf},
	}
	lic, err := r.tracked("LICENSE", "NOTICE", "LICENSES")
	if err != nil {
		return nil, err
	}
	for _, f := range lic {
		data, err := os.ReadFile(filepath.Join(r.root, f))
		if err != nil {
			return nil, err
		}
		base = append(base, entry{name: "usr/share/doc/olcd/" + f, mode: 0o644, data: data})
	}
	baseLayer, err := r.layer(base)
	if err != nil {
		return nil, err
	}
	binLayer, err := r.layer([]entry{{name: strings.TrimPrefix(imageBinary, "/"), mode: 0o755, data: olcd}})
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: r.modTime}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: baseLayer, History: v1.History{Created: created, CreatedBy: "olcd release: base (passwd, group, /tmp, /run/olcd, /var/log/olcd, " + imageConfig + ", licences)"}},
		mutate.Addendum{Layer: binLayer, History: v1.History{Created: created, CreatedBy: "olcd release: " + imageBinary + " (CGO_ENABLED=0 GOARCH=" + arch + ")"}},
	)
	if err != nil {
		return nil, err
	}
	caps, err := r.unitCapabilities()
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", arch, created
	cf.Config.Entrypoint = []string{imageBinary}
	cf.Config.Cmd = []string{"run", "--config", imageConfig}
	cf.Config.User = "0:0"
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cf.Config.ExposedPorts = map[string]struct{}{"9477/tcp": {}}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "olcd",
		"org.opencontainers.image.description": "node overload protection: sheds new connections at XDP/TC (runs as root with the capabilities in " + CapabilitiesLabel + ", host network)",
		"org.opencontainers.image.version":     r.version,
		"org.opencontainers.image.revision":    r.commit,
		"org.opencontainers.image.created":     r.modTime.Format("2006-01-02T15:04:05Z"),
		"org.opencontainers.image.source":      "https://github.com/olcd/olcd",
		"org.opencontainers.image.licenses":    "Apache-2.0 AND (GPL-2.0-only OR MIT)",
		CapabilitiesLabel:                      strings.Join(caps, " "),
	}
	return mutate.ConfigFile(img, cf)
}

// image builds one architecture's image and writes it as a tarball that
// `docker load` and `crane push` read: <base>.image.tar, tagged olcd:VERSION.
func (r *release) image(arch, bin string) (archImage, error) {
	olcd, err := os.ReadFile(filepath.Join(bin, daemon))
	if err != nil {
		return archImage{}, err
	}
	img, err := r.buildImage(arch, olcd)
	if err != nil {
		return archImage{}, fmt.Errorf("image %s: %w", arch, err)
	}
	tag, err := name.NewTag("olcd:" + r.version)
	if err != nil {
		return archImage{}, err
	}
	if err := tarball.WriteToFile(filepath.Join(r.out, r.base(arch)+".image.tar"), tag, img); err != nil {
		return archImage{}, fmt.Errorf("image %s: %w", arch, err)
	}
	return archImage{arch: arch, img: img}, nil
}

// ociArchive writes every architecture's image under one index as an OCI
// image layout, tarred: olcd_<version>_oci.tar (skopeo copy
// oci-archive:FILE:VERSION docker://REGISTRY/olcd:VERSION pushes it).
func (r *release) ociArchive(imgs []archImage) error {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, ai := range imgs {
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        ai.img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: ai.arch}},
		})
	}
	dir := filepath.Join(r.out, "build", "oci")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": r.version})); err != nil {
		return err
	}
	var es []entry
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		es = append(es, entry{name: filepath.ToSlash(rel), mode: 0o644, data: data})
		return nil
	})
	if err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(r.out, fmt.Sprintf("olcd_%s_oci.tar", r.version)))
	if err != nil {
		return err
	}
	if err := r.writeTar(f, withDirs(es)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
