package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

const (
	defaultSource = "https://github.com/hookledger/hookledger"
	// binaryPath is where the image holds the binary; the entry point
	// names it.
	binaryPath = "/usr/local/bin/hookledger"
	// uid is the unprivileged user the image runs as (numeric, so that
	// Kubernetes' runAsNonRoot can check it without reading /etc/passwd).
	uid = 65532
	// dataDir is the volume that holds the SQLite store, owned by uid.
	dataDir = "/data"
	// configPath is where the image's default command reads the
	// configuration; mount the file there (or pass --config).
	configPath = "/etc/hookledger/hookledger.yaml"
	// port is the port the image documents; listen: in the mounted
	// configuration decides what is served.
	port = "8080/tcp"
	// caBundle is where Go's crypto/x509 looks first on Linux.
	caBundle = "/etc/ssl/certs/ca-certificates.crt"
)

// platformBinary is one platform's static binary.
type platformBinary struct {
	os, arch, file string
}

// meta is what the image says about itself.
type meta struct {
	version, revision, source string
	created                   time.Time
}

func (m meta) labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "hookledger",
		"org.opencontainers.image.description": "Receives webhooks, stores them before acknowledging, and carries out each business effect once.",
		"org.opencontainers.image.version":     m.version,
		"org.opencontainers.image.revision":    m.revision,
		"org.opencontainers.image.source":      m.source,
		"org.opencontainers.image.created":     m.created.Format(time.RFC3339),
	}
}

// build writes the images that o asks for.
func build(o opts) error {
	idx := v1.ImageIndex(empty.Index)
	idx = mutate.IndexMediaType(idx, types.OCIImageIndex)
	for _, pb := range o.binaries {
		bin, err := os.ReadFile(pb.file)
		if err != nil {
			return fmt.Errorf("read the %s/%s binary: %w", pb.os, pb.arch, err)
		}
		if err := checkStatic(bin, pb.arch); err != nil {
			return fmt.Errorf("%s: %w", pb.file, err)
		}
		img, err := platformImage(bin, pb.os, pb.arch, o.meta)
		if err != nil {
			return fmt.Errorf("build the %s/%s image: %w", pb.os, pb.arch, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{
				Platform: &v1.Platform{OS: pb.os, Architecture: pb.arch},
			},
		})
		if o.dockerDir != "" {
			if err := writeDocker(o.dockerDir, img, pb, o.meta.version); err != nil {
				return err
			}
		}
	}
	if o.ociDir == "" {
		return nil
	}
	// A fresh directory: layout.Write appends to an existing index.json,
	// which would keep an older build's manifests next to this one's.
	if err := os.RemoveAll(o.ociDir); err != nil {
		return fmt.Errorf("clear %s: %w", o.ociDir, err)
	}
	p, err := layout.Write(o.ociDir, empty.Index)
	if err != nil {
		return fmt.Errorf("write the OCI layout %s: %w", o.ociDir, err)
	}
	err = p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": o.meta.version,
	}))
	if err != nil {
		return fmt.Errorf("write the OCI layout %s: %w", o.ociDir, err)
	}
	return nil
}

// writeDocker writes img as hookledger:VERSION into a tarball that docker
// load (and podman load) read.
func writeDocker(dir string, img v1.Image, pb platformBinary, version string) error {
	tag, err := name.NewTag("hookledger:"+tagSafe(version), name.WeakValidation)
	if err != nil {
		return fmt.Errorf("tag the image with version %q: %w", version, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	file := filepath.Join(dir, fmt.Sprintf("hookledger-image-%s-%s.tar", pb.os, pb.arch))
	if err := tarball.WriteToFile(file, tag, img); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return nil
}

// elfMachines are the architectures an image is built for.
var elfMachines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64,
	"arm64": elf.EM_AARCH64,
}

// checkStatic refuses a binary the image could not run: one for another
// architecture than its platform says, or one linked dynamically (built
// with cgo), which would look for a loader and a C library the image does
// not have and fail with a bare "no such file or directory".
func checkStatic(bin []byte, goarch string) error {
	want, ok := elfMachines[goarch]
	if !ok {
		return fmt.Errorf("architecture %q: the image is built for amd64 and arm64", goarch)
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("not a Linux (ELF) binary: %w", err)
	}
	defer f.Close()
	if f.Machine != want {
		return fmt.Errorf("built for %s, not %s", f.Machine, goarch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			return fmt.Errorf("linked dynamically: build it with CGO_ENABLED=0")
		}
	}
	return nil
}

// tagSafe turns a version into a valid tag: letters, digits, '.', '_' and
// '-' only ("v1.2.0+dirty" becomes "v1.2.0-dirty").
func tagSafe(v string) string {
	b := []byte(v)
	for i, c := range b {
		ok := c == '.' || c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !ok {
			b[i] = '-'
		}
	}
	if len(b) > 128 {
		b = b[:128]
	}
	return string(b)
}

// platformImage is the image of one platform: one layer over nothing.
func platformImage(bin []byte, goos, goarch string, m meta) (v1.Image, error) {
	files, err := layerTar(bin, m.created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(files)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: m.created},
			CreatedBy: "hookledger " + m.version + " (static binary, CA bundle, /data)",
			Comment:   "built from source revision " + m.revision,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("append the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = goos, goarch
	cf.Created = v1.Time{Time: m.created}
	cf.Author = "hookledger"
	cf.Config = v1.Config{
		User:         fmt.Sprintf("%d:%d", uid, uid),
		Entrypoint:   []string{binaryPath, "serve"},
		Cmd:          []string{"--config", configPath},
		WorkingDir:   dataDir,
		Env:          []string{"PATH=/usr/local/bin"},
		ExposedPorts: map[string]struct{}{port: {}},
		Volumes:      map[string]struct{}{dataDir: {}},
		Labels:       m.labels(),
		// SIGTERM drains (docs/deploy.md); say so for runtimes that
		// would otherwise send another signal.
		StopSignal: "SIGTERM",
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return img, nil
}

// entry is one file or directory of the layer.
type entry struct {
	name string
	mode int64
	uid  int
	body []byte
	dir  bool
}

// layerTar is the layer's uncompressed tar: fixed order, owners, modes
// and times, so that the same binary gives the same bytes.
func layerTar(bin []byte, created time.Time) ([]byte, error) {
	certs, err := caBundlePEM()
	if err != nil {
		return nil, err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nhookledger:x:%d:%d:hookledger:%s:/sbin/nologin\n", uid, uid, dataDir)
	group := fmt.Sprintf("root:x:0:\nhookledger:x:%d:\n", uid)
	entries := []entry{
		{name: "data/", mode: 0o700, uid: uid, dir: true},
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/hookledger/", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: caBundle[1:], mode: 0o644, body: certs},
		// SQLite and Go put temporary files here.
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/local/", mode: 0o755, dir: true},
		{name: "usr/local/bin/", mode: 0o755, dir: true},
		{name: binaryPath[1:], mode: 0o755, body: bin},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:     e.name,
			Mode:     e.mode,
			Uid:      e.uid,
			Gid:      e.uid,
			ModTime:  created,
			Typeflag: tar.TypeReg,
			Size:     int64(len(e.body)),
			Format:   tar.FormatPAX,
		}
		if e.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return buf.Bytes(), nil
}

// caBundlePEM is the Mozilla root store pinned by go.sum, as the PEM file
// crypto/x509 reads. Roots that NSS trusts only with constraints (a
// distrust date, say) are left out: a PEM file cannot carry them, and
// leaving them in would trust them without the constraint.
func caBundlePEM() ([]byte, error) {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		if err := pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}); err != nil {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
	}
	if b.Len() == 0 {
		return nil, fmt.Errorf("CA bundle: no roots")
	}
	return b.Bytes(), nil
}
