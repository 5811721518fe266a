package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/x509"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const (
	testVersion  = "v9.8.7-image-test"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
	testCreated  = "1767225600" // 2026-01-01T00:00:00Z
)

// staticBinary builds cmd/hookledger static and stamped, as the release
// does, for this machine's architecture. Without the release's -trimpath:
// the packages compiled for the other tests' builds are reused.
func staticBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hookledger")
	cmd := exec.Command("go", "build", "-ldflags", "-X main.version="+testVersion,
		"-o", bin, "github.com/hookledger/hookledger/cmd/hookledger")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func buildImage(t *testing.T, bin string) (ociDir, dockerDir string) {
	t.Helper()
	dir := t.TempDir()
	ociDir, dockerDir = filepath.Join(dir, "oci"), filepath.Join(dir, "docker")
	var stderr bytes.Buffer
	err := run([]string{"-binary", "linux/" + runtime.GOARCH + "=" + bin, "-version", testVersion,
		"-revision", testRevision, "-created", testCreated, "-oci", ociDir, "-docker", dockerDir}, &stderr)
	if err != nil {
		t.Fatalf("image: %v\n%s", err, stderr.String())
	}
	return ociDir, dockerDir
}

// The image built from a static binary has the configuration docs/deploy.md
// describes, both in the OCI layout and in the docker load tarball, and
// its layer holds a binary that runs: version prints the stamp, and serve
// answers /readyz on loopback with a store in a fresh data directory.
func TestImage(t *testing.T) {
	bin := staticBinary(t)
	ociDir, dockerDir := buildImage(t, bin)

	img := ociImage(t, ociDir)
	checkConfig(t, img)
	docker, err := tarball.ImageFromPath(filepath.Join(dockerDir, "hookledger-image-linux-"+runtime.GOARCH+".tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := configDigest(t, img), configDigest(t, docker); a != b {
		t.Errorf("the docker tarball's config %s differs from the OCI layout's %s", b, a)
	}

	files := layerFiles(t, img)
	checkFiles(t, files)
	extracted := filepath.Join(t.TempDir(), "hookledger")
	if err := os.WriteFile(extracted, files["usr/local/bin/hookledger"].body, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(extracted, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "hookledger "+testVersion+" (go") {
		t.Fatalf("version: %v %q", err, out)
	}
	cf, _ := img.ConfigFile()
	serveReady(t, extracted, cf.Config.Entrypoint[1:])
}

// ociImage reads the layout's one image index, named by version, and its
// image for this machine's platform.
func ociImage(t *testing.T, dir string) v1.Image {
	t.Helper()
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := root.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(rm.Manifests) != 1 || rm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != testVersion {
		t.Fatalf("index.json: %+v, want one index named %s", rm.Manifests, testVersion)
	}
	idx, err := root.ImageIndex(rm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("the index lists %d images, want 1", len(im.Manifests))
	}
	d := im.Manifests[0]
	if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != runtime.GOARCH {
		t.Fatalf("platform %+v, want linux/%s", d.Platform, runtime.GOARCH)
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func checkConfig(t *testing.T, img v1.Image) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("config platform %s/%s", cf.OS, cf.Architecture)
	}
	if !regexp.MustCompile(`^[1-9][0-9]*:[1-9][0-9]*$`).MatchString(c.User) {
		t.Errorf("user %q: want a numeric uid:gid other than root", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/hookledger", "serve"}) {
		t.Errorf("entry point %q", c.Entrypoint)
	}
	if !slices.Equal(c.Cmd, []string{"--config", "/etc/hookledger/hookledger.yaml"}) {
		t.Errorf("command %q", c.Cmd)
	}
	if _, ok := c.ExposedPorts["8080/tcp"]; !ok || len(c.ExposedPorts) != 1 {
		t.Errorf("exposed ports %v, want 8080/tcp", c.ExposedPorts)
	}
	if _, ok := c.Volumes["/data"]; !ok || len(c.Volumes) != 1 {
		t.Errorf("volumes %v, want /data", c.Volumes)
	}
	if c.WorkingDir != "/data" {
		t.Errorf("working directory %q", c.WorkingDir)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.revision": testRevision,
		"org.opencontainers.image.source":   "https://github.com/hookledger/hookledger",
		"org.opencontainers.image.created":  "2026-01-01T00:00:00Z",
	} {
		if got := c.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if want := time.Unix(1767225600, 0); !cf.Created.Time.Equal(want) {
		t.Errorf("created %v, want %v", cf.Created.Time, want)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Errorf("%d layers (%v), want 1", len(layers), err)
	}
}

func configDigest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

type file struct {
	hdr  *tar.Header
	body []byte
}

// layerFiles reads the image's file system.
func layerFiles(t *testing.T, img v1.Image) map[string]file {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]file{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimSuffix(h.Name, "/")] = file{h, body}
	}
	return files
}

// checkFiles: the image holds the binary, a CA bundle, the user and the
// volume directory, and no shell.
func checkFiles(t *testing.T, files map[string]file) {
	t.Helper()
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range files {
			if !yield(n) {
				return
			}
		}
	})
	want := []string{"data", "etc", "etc/group", "etc/hookledger", "etc/passwd", "etc/ssl", "etc/ssl/certs",
		"etc/ssl/certs/ca-certificates.crt", "tmp", "usr", "usr/local", "usr/local/bin", "usr/local/bin/hookledger"}
	if !slices.Equal(names, want) {
		t.Errorf("files %q, want %q", names, want)
	}
	bin := files["usr/local/bin/hookledger"].hdr
	if bin == nil || fs.FileMode(bin.Mode).Perm() != 0o755 || bin.Uid != 0 {
		t.Errorf("binary header %+v: want mode 0755 owned by root", bin)
	}
	data := files["data"].hdr
	if data == nil || data.Typeflag != tar.TypeDir || data.Uid != uid || data.Gid != uid {
		t.Errorf("/data header %+v: want a directory owned by %d", data, uid)
	}
	if !strings.Contains(string(files["etc/passwd"].body), "hookledger:x:65532:65532:") {
		t.Errorf("/etc/passwd %q names no hookledger user", files["etc/passwd"].body)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(files["etc/ssl/certs/ca-certificates.crt"].body) {
		t.Error("the CA bundle holds no certificate")
	}
}

var servingRe = regexp.MustCompile(`msg="hookledger serving" addr=(\S+)`)

// serveReady runs the binary with the image's entry point arguments and
// the configuration the deployments in deploy/ mount into the container,
// its variables set as they would set them (but listening on loopback, on
// SQLite in a fresh data directory), waits for it to serve, asks /readyz,
// and stops it with SIGTERM, which must end it with status 0.
func serveReady(t *testing.T, bin string, entry []string) {
	t.Helper()
	dir := t.TempDir()
	cfg, err := filepath.Abs("../../../deploy/hookledger.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append(slices.Clone(entry), "--config", cfg)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"HOOKLEDGER_LISTEN=127.0.0.1:0",
		"HOOKLEDGER_STORE=sqlite:"+filepath.Join(dir, "data", "hookledger.db"),
		"HOOKLEDGER_ADMIN_TOKEN=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"STRIPE_WEBHOOK_SECRET=whsec_image_test",
	)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	addr, scanned := make(chan string, 1), make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			if m := servingRe.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	done := make(chan error, 1)
	go func() { <-scanned; done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	})
	var a string
	select {
	case a = <-addr:
	case err := <-done:
		t.Fatalf("serve exited before serving: %v\n%s", err, logs.String())
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not start serving in a minute")
	}
	resp, err := http.Get("http://" + a + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz: %d %q, want 200", resp.StatusCode, body)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("serve after SIGTERM: %v, want exit 0\n%s", err, logs.String())
	}
}

// Two builds of the same binary write the same bytes, file for file.
func TestImageIsReproducible(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "hookledger")
	if err := os.WriteFile(bin, staticELF(t), 0o755); err != nil {
		t.Fatal(err)
	}
	a1, b1 := buildImage(t, bin)
	a2, b2 := buildImage(t, bin)
	sameTree(t, a1, a2)
	sameTree(t, b1, b2)
}

func sameTree(t *testing.T, a, b string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(a, p)
		x, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		y, err := os.ReadFile(filepath.Join(b, rel))
		if err != nil {
			return err
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between two builds", rel)
		}
		n++
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("compared %d files: %v", n, err)
	}
}

// staticELF is the smallest file checkStatic accepts: this test binary is
// not static under -race, so an ELF header with no program headers stands
// in for a binary.
func staticELF(t *testing.T) []byte {
	t.Helper()
	h := make([]byte, 64)
	copy(h, "\x7fELF\x02\x01\x01")
	h[16] = 2 // ET_EXEC
	m := elfMachines[runtime.GOARCH]
	h[18], h[19] = byte(m), byte(m>>8)
	h[20] = 1  // EV_CURRENT
	h[52] = 64 // e_ehsize
	h[54] = 56 // e_phentsize
	h[58] = 64 // e_shentsize
	return h
}

// A binary the image could not run is refused, naming why.
func TestImageRefusesDynamicOrForeignBinaries(t *testing.T) {
	self, err := os.Executable() // built with -race, hence with cgo
	if err != nil {
		t.Fatal(err)
	}
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	dir := t.TempDir()
	for _, tc := range []struct{ binary, want string }{
		{"linux/" + runtime.GOARCH + "=" + self, "linked dynamically"},
		{"linux/" + other + "=" + self, "built for"},
		{"darwin/arm64=" + self, "linux binaries only"},
	} {
		var stderr bytes.Buffer
		err := run([]string{"-binary", tc.binary, "-version", "v1", "-revision", "r", "-oci", filepath.Join(dir, "oci")}, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("-binary %s: %v, want an error saying %q", tc.binary, err, tc.want)
		}
	}
}
