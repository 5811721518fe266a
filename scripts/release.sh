#!/usr/bin/env bash
# make release: the static binaries of linux/amd64, linux/arm64 and
# darwin/arm64 as archives, the container image (an OCI layout and a
# docker load tarball per Linux platform), an SBOM per binary (CycloneDX
# and the Go toolchain's own `go version -m`), and SHA256SUMS over all of
# it, in dist/ (docs/deploy.md, "Release builds").
#
# The build is reproducible: the same source, version and Go toolchain give
# the same bytes. -trimpath drops the build machine's paths, -buildvcs=false
# keeps the checkout's state (a stray untracked file) out of the binary (the
# version is stamped with -ldflags instead), -buildid= drops the link's
# content-independent ID, and every archive has fixed owners, order and
# times (SOURCE_DATE_EPOCH, the commit's time). After building, the script
# proves it: it copies the source to another directory and builds it again
# there with an empty build cache, then compares every file byte for byte.
# RELEASE_VERIFY=0 skips that second build; RELEASE_VERIFY=cached makes it
# with the build cache of the first (much faster: it proves the paths,
# the link and the archives independent of the build, not the compiler).
#
# VERSION, REVISION and SOURCE_DATE_EPOCH come from git unless set (they
# must be set outside a git checkout). Needs GNU tar and gzip.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:$(go env GOPATH)/bin"

OUT=${OUT:-dist}
VERSION=${VERSION:-$(git describe --always --dirty)}
REVISION=${REVISION:-$(git rev-parse HEAD)}
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
RELEASE_VERIFY=${RELEASE_VERIFY:-1}
CYCLONEDX=github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0
PLATFORMS=(linux/amd64 linux/arm64 darwin/arm64)
export SOURCE_DATE_EPOCH
case "$RELEASE_VERIFY" in
0 | 1 | cached) ;;
*) echo "release: RELEASE_VERIFY=$RELEASE_VERIFY: want 0, 1 or cached" >&2; exit 2 ;;
esac

tar --version 2>/dev/null | grep -q 'GNU tar' || { echo "release: GNU tar is needed (its --sort and --mtime make archives reproducible)" >&2; exit 1; }
case "$VERSION" in
*-dirty) echo "release: WARNING: the checkout has uncommitted changes; the version says so ($VERSION)" >&2 ;;
esac

# Everything the build reads from the environment is fixed here, so that
# a developer's settings (GOFLAGS, GOAMD64, CGO_ENABLED) change nothing.
export CGO_ENABLED=0 GOFLAGS= GOAMD64=v1 GOARM64=v8.0 GOEXPERIMENT= GOTOOLCHAIN=local

work=$(mktemp -d /tmp/hookledger-release.XXXXXX)
trap 'rm -rf "$work"' EXIT
rm -rf "$OUT"
mkdir -p "$OUT"
out=$(cd "$OUT" && pwd)

# reprotar DIR FILE...: a tar of FILEs under DIR with fixed order, owners,
# modes and times.
reprotar() {
	local dir=$1
	shift
	tar --sort=name --format=posix --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
		--mode='u+rwX,go+rX,go-w' --pax-option='exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime' \
		-C "$dir" -cf - "$@"
}

echo "release $VERSION ($REVISION) with $(go version)"
image_args=()
for p in "${PLATFORMS[@]}"; do
	os=${p%/*} arch=${p#*/}
	name="hookledger_${VERSION}_${os}_${arch}"
	mkdir -p "$work/$name"
	echo "  building $p"
	GOOS=$os GOARCH=$arch go build -trimpath -buildvcs=false \
		-ldflags="-s -w -buildid= -X main.version=$VERSION" \
		-o "$work/$name/hookledger" ./cmd/hookledger
	cp README.md "$work/$name/"
	reprotar "$work" "$name" | gzip -9n >"$out/$name.tar.gz"
	# The SBOMs are made in the binary's directory and name it "hookledger",
	# so that they do not depend on where the release was built.
	(cd "$work/$name" && go version -m hookledger) >"$out/$name.buildinfo.txt"
	(cd "$work/$name" && go run "$CYCLONEDX" bin -json -noserial -notimestamp -version "$VERSION" \
		-output "$out/$name.cdx.json" hookledger)
	[ "$os" = linux ] && image_args+=(-binary "$p=$work/$name/hookledger")
done

echo "  building the image"
go run ./internal/tools/image "${image_args[@]}" -version "$VERSION" -revision "$REVISION" \
	-created "$SOURCE_DATE_EPOCH" -oci "$work/image" -docker "$work/docker"
reprotar "$work/image" . >"$out/hookledger_${VERSION}_image.oci.tar"
for f in "$work"/docker/hookledger-image-linux-*.tar; do
	arch=${f##*-} arch=${arch%.tar}
	cp "$f" "$out/hookledger_${VERSION}_image_linux_${arch}.docker.tar"
done

(cd "$out" && sha256sum -- * >SHA256SUMS)
echo "wrote $OUT:"
(cd "$out" && cat SHA256SUMS)

[ "$RELEASE_VERIFY" != 0 ] || exit 0

gocache="$work/gocache"
case "$RELEASE_VERIFY" in
1) how="with an empty build cache" ;;
cached) how="with the same build cache" gocache=$(go env GOCACHE) ;;
esac
echo
echo "verifying: a second build from a copy of the source, $how"
mkdir -p "$work/src"
# The tracked and untracked (not ignored) files: what the first build read.
git ls-files -z --cached --others --exclude-standard | xargs -0 tar -cf - | tar -C "$work/src" -xf -
(
	cd "$work/src"
	VERSION=$VERSION REVISION=$REVISION OUT="$work/dist" RELEASE_VERIFY=0 GOCACHE="$gocache" \
		scripts/release.sh >"$work/second.log" 2>&1
) || { cat "$work/second.log" >&2; echo "release: the second build failed" >&2; exit 1; }
if ! diff -r "$out" "$work/dist"; then
	echo "release: NOT REPRODUCIBLE: the second build differs (above)" >&2
	exit 1
fi
echo "reproducible: the second build wrote the same $(wc -l <"$out/SHA256SUMS") files, byte for byte"
