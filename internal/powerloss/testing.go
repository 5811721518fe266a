//go:build linux

package powerloss

import (
	"testing"

	"github.com/hookledger/hookledger/internal/testdep"
)

// MountTemp mounts a lossy mirror of a fresh temporary backing directory on
// a fresh temporary mount point, unmounted (lazily if busy) at the test's
// cleanup. Where FUSE cannot be mounted the test is skipped, except under CI
// (CI set), where it fails: the power-loss tests must run there (package
// testdep).
func MountTemp(t testing.TB) (fsys *FS, backing, mountpoint string) {
	t.Helper()
	backing, mountpoint = t.TempDir(), t.TempDir()
	fsys, err := mount(backing, mountpoint)
	if err != nil {
		testdep.Missing(t, "cannot mount FUSE for the power-loss test (it needs Linux, /dev/fuse and root): %v", err)
	}
	t.Cleanup(func() {
		if err := fsys.Close(); err != nil {
			t.Error(err)
		}
	})
	return fsys, backing, mountpoint
}
