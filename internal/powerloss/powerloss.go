//go:build linux

package powerloss

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// FS is a mounted lossy file system.
type FS struct {
	backing    string
	mountpoint string
	server     *fuse.Server

	// crashed is set at the crash; from then on writes and syncs fail, so
	// nothing reaches the backing directory after the power is cut.
	crashed atomic.Bool
	cut     chan struct{} // closed with crashed set, releasing held syncs

	mu sync.Mutex
	// files holds the volatile state of every regular file opened through
	// the mount, by backing inode number, so that it outlives the kernel
	// forgetting an inode and is shared by hard links and every handle.
	files map[uint64]*overlay
	hold  *hold

	unmountMu sync.Mutex
	unmounted bool

	writes, writtenBytes, syncs, syncedBytes atomic.Int64
}

// hold is an armed HoldNextSync.
type hold struct {
	suffix  string
	waiting chan struct{}
}

// Stats counts what went through the mount.
type Stats struct {
	Writes       int64 // write requests (including pages written back from mmap)
	WrittenBytes int64 // bytes they carried
	Syncs        int64 // fsync and fdatasync calls that reached a backing file
	SyncedBytes  int64 // unsynced bytes those calls wrote to the backing files
}

// Report is what a crash threw away.
type Report struct {
	// Lost is the number of unsynced bytes thrown away per file, by the
	// file's path under the mount; files with nothing unsynced are absent.
	Lost map[string]int64
	// Bytes is the sum of Lost.
	Bytes int64
}

// String lists the lost bytes per file, in name order.
func (r Report) String() string {
	names := make([]string, 0, len(r.Lost))
	for name := range r.Lost {
		names = append(names, name)
	}
	slices.Sort(names)
	parts := make([]string, 0, len(names))
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("%s %d", name, r.Lost[name]))
	}
	return fmt.Sprintf("%d bytes (%s)", r.Bytes, strings.Join(parts, ", "))
}

// mount mounts a lossy mirror of the directory backing on mountpoint (an
// existing directory). Callers must Crash or Close it.
func mount(backing, mountpoint string) (*FS, error) {
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, fmt.Errorf("powerloss mount: %w", err)
	}
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, fmt.Errorf("powerloss mount: backing directory: %w", err)
	}
	f := &FS{
		backing:    backing,
		mountpoint: mountpoint,
		cut:        make(chan struct{}),
		files:      map[uint64]*overlay{},
	}
	rootNode := &node{LoopbackNode: root.(*fs.LoopbackNode), lossy: f}
	server, err := fs.Mount(mountpoint, rootNode, &fs.Options{
		MountOptions: fuse.MountOptions{
			// The mount system call directly: no fusermount binary needed.
			DirectMountStrict: true,
			FsName:            "powerloss",
			Name:              "powerloss",
			// Without this the kernel asks for security.capability on
			// every write; the model has no use for extended attributes.
			DisableXAttrs: true,
			// READDIRPLUS would hand the kernel attributes (a size) read
			// from the backing file, past the overlay.
			DisableReadDirPlus: true,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("powerloss mount %s: %w", mountpoint, err)
	}
	f.server = server
	return f, nil
}

// Stats returns the counts so far.
func (f *FS) Stats() Stats {
	return Stats{
		Writes:       f.writes.Load(),
		WrittenBytes: f.writtenBytes.Load(),
		Syncs:        f.syncs.Load(),
		SyncedBytes:  f.syncedBytes.Load(),
	}
}

// Unsynced returns the bytes written and not yet synced, per file, as a
// crash now would lose them.
func (f *FS) Unsynced() Report {
	return f.collect(false)
}

// HoldNextSync makes the next fsync of a file whose path under the mount
// ends in suffix, and that has unsynced bytes, never complete: it waits,
// having written nothing, until the crash (or until its caller is
// interrupted, e.g. killed). The returned channel is closed once such a sync
// is waiting. A test uses it to cut the power while a commit is in flight:
// its data written, its sync not done. A sync with nothing to write (SQLite
// syncs the WAL again before a checkpoint) is not held.
func (f *FS) HoldNextSync(suffix string) <-chan struct{} {
	h := &hold{suffix: suffix, waiting: make(chan struct{})}
	f.mu.Lock()
	f.hold = h
	f.mu.Unlock()
	return h.waiting
}

// waitHold holds the sync of o if HoldNextSync asked for it.
func (f *FS) waitHold(ctx context.Context, o *overlay) syscall.Errno {
	o.mu.Lock()
	pending := o.unsynced() > 0
	o.mu.Unlock()
	if !pending {
		return 0
	}
	f.mu.Lock()
	h := f.hold
	if h == nil || !strings.HasSuffix(o.name, h.suffix) {
		f.mu.Unlock()
		return 0
	}
	f.hold = nil
	f.mu.Unlock()
	close(h.waiting)
	select {
	case <-f.cut:
		return syscall.EIO
	case <-ctx.Done():
		return syscall.EINTR
	}
}

// Crash cuts the power: every unsynced byte is thrown away, held syncs fail,
// later writes and syncs fail, and the file system is unmounted. The backing
// directory then holds what a disk would after a power loss. Processes using
// the mount should have exited (been killed) first, or the unmount falls back
// to a lazy detach and Crash returns an error with the report.
func (f *FS) Crash() (Report, error) {
	if !f.cutPower() {
		return Report{}, errors.New("powerloss: crash after the power was already cut (by Crash or Close)")
	}
	rep := f.collect(true)
	return rep, f.Close()
}

// cutPower makes every later write and sync fail and releases held syncs. It
// reports whether this call cut it.
func (f *FS) cutPower() bool {
	if !f.crashed.CompareAndSwap(false, true) {
		return false
	}
	close(f.cut)
	return true
}

// collect counts the unsynced bytes per file and, at a crash, drops them.
func (f *FS) collect(discard bool) Report {
	f.mu.Lock()
	files := make([]*overlay, 0, len(f.files))
	for _, o := range f.files {
		files = append(files, o)
	}
	f.mu.Unlock()
	rep := Report{Lost: map[string]int64{}}
	for _, o := range files {
		o.mu.Lock()
		n := o.unsynced()
		if discard {
			clear(o.pages)
		}
		o.mu.Unlock()
		if n > 0 {
			rep.Lost[o.name] += n
			rep.Bytes += n
		}
	}
	return rep
}

// Close unmounts without syncing anything (unsynced data never reaches the
// backing directory). If the mount is busy it is detached lazily and the
// error says so. Close is safe to call more than once, and after Crash.
func (f *FS) Close() error {
	f.unmountMu.Lock()
	defer f.unmountMu.Unlock()
	if f.unmounted {
		return nil
	}
	f.unmounted = true
	// Nothing may reach the backing directory once the mount is going,
	// whether the kernel writes back mmap pages at unmount or not; and a
	// held sync must not keep its process, and so the mount, busy.
	f.cutPower()
	err := f.server.Unmount()
	if err == nil {
		return nil
	}
	if derr := unix.Unmount(f.mountpoint, unix.MNT_DETACH); derr != nil {
		return fmt.Errorf("powerloss unmount %s: %w; lazy detach: %w", f.mountpoint, err, derr)
	}
	return fmt.Errorf("powerloss unmount %s: %w (detached lazily)", f.mountpoint, err)
}

// overlayFor returns the volatile state of the backing file with inode ino,
// creating it with the file's current size. A fresh file (just created)
// replaces whatever an earlier file with the same inode number left.
func (f *FS) overlayFor(ino uint64, size int64, name string, fresh bool) *overlay {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.files[ino]
	if !ok || fresh {
		o = newOverlay(name, size)
		f.files[ino] = o
	}
	return o
}

// lookupOverlay returns the volatile state of inode ino, if it has any.
func (f *FS) lookupOverlay(ino uint64) *overlay {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.files[ino]
}

// forget drops the state of a backing file whose last name went, so that its
// inode number can be reused by a new file. Open handles keep their pointer
// to it.
func (f *FS) forget(ino uint64) {
	f.mu.Lock()
	delete(f.files, ino)
	f.mu.Unlock()
}

// fsyncFd syncs a backing file descriptor.
func fsyncFd(fd int, datasync bool) error {
	if datasync {
		return unix.Fdatasync(fd)
	}
	return unix.Fsync(fd)
}
