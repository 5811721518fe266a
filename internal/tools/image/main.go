// Command image builds hookledger's container image from static binaries,
// without a container daemon: one layer holding the binary, a CA bundle,
// a passwd entry for the unprivileged user and the /data volume, written
// as an OCI image layout (one index over every platform) and, per
// platform, as a tarball that docker load reads. It is part of the release
// (scripts/release.sh), not of the product binary.
//
// The image is reproducible: every timestamp is -created, file owners and
// modes are fixed, and the CA bundle is the Mozilla roots pinned in
// go.sum (golang.org/x/crypto/x509roots/fallback/bundle), not the build
// host's.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// opts is what one run builds.
type opts struct {
	binaries  []platformBinary
	meta      meta
	ociDir    string
	dockerDir string
}

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o opts
	var created int64
	fs.Func("binary", "`os/arch=FILE`: the static hookledger binary of one platform (repeatable)", func(s string) error {
		pb, err := parsePlatformBinary(s)
		if err == nil {
			o.binaries = append(o.binaries, pb)
		}
		return err
	})
	fs.StringVar(&o.meta.version, "version", "", "the `version` stamped into the binaries (label org.opencontainers.image.version)")
	fs.StringVar(&o.meta.revision, "revision", "", "the source `commit` (label org.opencontainers.image.revision)")
	fs.StringVar(&o.meta.source, "source", defaultSource, "the source repository `URL` (label org.opencontainers.image.source)")
	fs.Int64Var(&created, "created", 0, "the image's creation time and every file's, in Unix `seconds` (SOURCE_DATE_EPOCH)")
	fs.StringVar(&o.ociDir, "oci", "", "write an OCI image layout to this `directory`")
	fs.StringVar(&o.dockerDir, "docker", "", "write one docker load tarball per platform to this `directory`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case len(o.binaries) == 0:
		return fmt.Errorf("no -binary given")
	case o.meta.version == "":
		return fmt.Errorf("no -version given")
	case o.meta.revision == "":
		return fmt.Errorf("no -revision given")
	case o.ociDir == "" && o.dockerDir == "":
		return fmt.Errorf("neither -oci nor -docker given: nothing to write")
	}
	o.meta.created = time.Unix(created, 0).UTC()
	return build(o)
}

// parsePlatformBinary reads "linux/amd64=dist/hookledger".
func parsePlatformBinary(s string) (platformBinary, error) {
	plat, file, ok := strings.Cut(s, "=")
	goos, goarch, ok2 := strings.Cut(plat, "/")
	if !ok || !ok2 || file == "" || goos == "" || goarch == "" {
		return platformBinary{}, fmt.Errorf("-binary %q: want os/arch=FILE", s)
	}
	if goos != "linux" {
		return platformBinary{}, fmt.Errorf("-binary %q: an image runs linux binaries only", s)
	}
	return platformBinary{os: goos, arch: goarch, file: file}, nil
}
