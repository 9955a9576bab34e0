package main

import (
	"bytes"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
)

// The maintainer scripts, embedded so the tool needs nothing beside it.
var (
	//go:embed debian/postinst
	postinst []byte
	//go:embed debian/prerm
	prerm []byte
	//go:embed debian/postrm
	postrm []byte
)

// deb writes olcd_<version>_<arch>.deb: the binaries in /usr/bin, the unit
// in /lib/systemd/system (disabled), the default config in observe mode and
// the logrotate file as conffiles (an edited one is kept on upgrade and
// on remove, deleted on purge), the docs in /usr/share/doc/olcd.
func (r *release) deb(arch, bin string) error {
	stage := filepath.Join(r.out, "build", "deb-"+arch)
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return err
	}
	unit, err := r.unitFor("/usr/bin/" + daemon)
	if err != nil {
		return err
	}
	put := func(name string, data []byte) (string, error) {
		p := filepath.Join(stage, name)
		return p, os.WriteFile(p, data, 0o644)
	}
	unitPath, err := put("olcd.service", unit)
	if err != nil {
		return err
	}
	scripts := map[string][]byte{"postinst": postinst, "prerm": prerm, "postrm": postrm}
	paths := map[string]string{}
	for n, b := range scripts {
		if paths[n], err = put(n, b); err != nil {
			return err
		}
	}
	info := func(mode os.FileMode) *files.ContentFileInfo {
		return &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode, MTime: r.modTime}
	}
	var contents files.Contents
	for _, b := range r.bins {
		contents = append(contents, &files.Content{Source: filepath.Join(bin, b), Destination: "/usr/bin/" + b, FileInfo: info(0o755)})
	}
	contents = append(contents,
		&files.Content{Source: unitPath, Destination: "/lib/systemd/system/olcd.service", FileInfo: info(0o644)},
		&files.Content{Source: filepath.Join(r.root, "deploy", "olcd.yaml"), Destination: "/etc/olcd/olcd.yaml", Type: files.TypeConfig, FileInfo: info(0o644)},
		&files.Content{Source: filepath.Join(r.root, "deploy", "logrotate", "olcd"), Destination: "/etc/logrotate.d/olcd", Type: files.TypeConfig, FileInfo: info(0o644)},
		&files.Content{Source: filepath.Join(r.root, "LICENSE"), Destination: "/usr/share/doc/olcd/copyright", FileInfo: info(0o644)},
	)
	docs, err := r.tracked("README.md", "CHANGELOG.md", "NOTICE", "LICENSES", "docs")
	if err != nil {
		return err
	}
	for _, f := range docs {
		contents = append(contents, &files.Content{Source: filepath.Join(r.root, f), Destination: "/usr/share/doc/olcd/" + f, FileInfo: info(0o644)})
	}
	pkg := &nfpm.Info{
		Name:        "olcd",
		Arch:        arch,
		Platform:    "linux",
		Version:     r.version,
		Section:     "net",
		Priority:    "optional",
		Maintainer:  "olcd maintainers <olcd@users.noreply.github.com>",
		Description: "node overload protection: sheds new connections at XDP/TC\nolcd holds each protected port's response time at a target by shedding\na share of new TCP connections and UDP requests at XDP or TC ingress,\nfor every process on the host. Installed disabled, in observe mode.",
		Homepage:    "https://github.com/olcd/olcd",
		License:     "Apache-2.0 AND (GPL-2.0-only OR MIT)",
		MTime:       r.modTime,
		Overridables: nfpm.Overridables{
			Contents:   contents,
			Scripts:    nfpm.Scripts{PostInstall: paths["postinst"], PreRemove: paths["prerm"], PostRemove: paths["postrm"]},
			Recommends: []string{"logrotate"},
		},
	}
	pkg = nfpm.WithDefaults(pkg)
	if err := nfpm.PrepareForPackager(pkg, "deb"); err != nil {
		return fmt.Errorf("deb %s: %w", arch, err)
	}
	p, err := nfpm.Get("deb")
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := p.Package(pkg, &buf); err != nil {
		return fmt.Errorf("deb %s: %w", arch, err)
	}
	return os.WriteFile(filepath.Join(r.out, p.ConventionalFileName(pkg)), buf.Bytes(), 0o644)
}
