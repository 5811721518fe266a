//go:build linux

package powerloss

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is a loopback node whose regular files keep their data in an overlay
// until synced. Directory operations are the loopback's: applied to the
// backing directory at once (the model's stated limit).
type node struct {
	*fs.LoopbackNode
	lossy *FS
}

var (
	_ fs.NodeWrapChilder = (*node)(nil)
	_ fs.NodeLookuper    = (*node)(nil)
	_ fs.NodeGetattrer   = (*node)(nil)
	_ fs.NodeStatxer     = (*node)(nil)
	_ fs.NodeSetattrer   = (*node)(nil)
	_ fs.NodeOpener      = (*node)(nil)
	_ fs.NodeCreater     = (*node)(nil)
	_ fs.NodeUnlinker    = (*node)(nil)
	_ fs.NodeRenamer     = (*node)(nil)
	_ fs.NodeTmpfiler    = (*node)(nil)
)

// WrapChild makes every node the loopback creates below the root a lossy one.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), lossy: n.lossy}
}

// name is the node's path under the mount; backingPath its backing file.
func (n *node) name() string        { return n.Path(nil) }
func (n *node) backingPath() string { return filepath.Join(n.lossy.backing, n.name()) }

// toErrno turns an error into the errno the kernel gets: the wrapped errno,
// else EIO.
func toErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return syscall.EIO
}

func isRegular(mode uint32) bool { return mode&syscall.S_IFMT == syscall.S_IFREG }

// fixSize replaces the backing file's size in attributes read from it by the
// size a reader of the mount sees, which includes unsynced writes. Without
// it the kernel would shrink its idea of a file extended by unsynced writes.
func (f *FS) fixSize(a *fuse.Attr, o *overlay) {
	if !isRegular(a.Mode) {
		return
	}
	if o == nil {
		o = f.lookupOverlay(a.Ino)
	}
	if o == nil {
		return
	}
	o.mu.Lock()
	size := uint64(o.size)
	o.mu.Unlock()
	a.Size, a.Blocks = size, (size+511)/512
}

// overlayOf returns the overlay behind an open handle, if fh is one of ours.
func overlayOf(fh fs.FileHandle) *overlay {
	if h, ok := fh.(*handle); ok {
		return h.o
	}
	return nil
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, errno := n.LoopbackNode.Lookup(ctx, name, out)
	if errno == 0 {
		n.lossy.fixSize(&out.Attr, nil)
	}
	return ch, errno
}

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if h, ok := fh.(*handle); ok {
		var st syscall.Stat_t
		if err := syscall.Fstat(int(h.f.Fd()), &st); err != nil {
			return toErrno(err)
		}
		out.FromStat(&st)
	} else if errno := n.LoopbackNode.Getattr(ctx, fh, out); errno != 0 {
		return errno
	}
	n.lossy.fixSize(&out.Attr, overlayOf(fh))
	return 0
}

func (n *node) Statx(ctx context.Context, fh fs.FileHandle, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	if errno := n.LoopbackNode.Statx(ctx, nil, flags, mask, out); errno != 0 {
		return errno
	}
	if !isRegular(uint32(out.Mode)) {
		return 0
	}
	o := overlayOf(fh)
	if o == nil {
		o = n.lossy.lookupOverlay(out.Ino)
	}
	if o != nil {
		o.mu.Lock()
		out.Size = uint64(o.size)
		o.mu.Unlock()
		out.Blocks = (out.Size + 511) / 512
	}
	return 0
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if n.lossy.crashed.Load() {
		return syscall.EIO
	}
	rest := *in
	if size, ok := in.GetSize(); ok {
		if errno := n.truncate(fh, int64(size)); errno != 0 {
			return errno
		}
		rest.Valid &^= fuse.FATTR_SIZE
	}
	// Mode, owner and times go to the backing file by path, as the
	// loopback does.
	if errno := n.LoopbackNode.Setattr(ctx, nil, &rest, out); errno != 0 {
		return errno
	}
	n.lossy.fixSize(&out.Attr, overlayOf(fh))
	return 0
}

// truncate applies a new size to the backing file at once (the model's
// stated limit) and to the overlay.
func (n *node) truncate(fh fs.FileHandle, size int64) syscall.Errno {
	p := n.backingPath()
	o := overlayOf(fh)
	if o == nil {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return toErrno(err)
		}
		o = n.lossy.lookupOverlay(st.Ino)
	}
	if o == nil {
		return toErrno(os.Truncate(p, size))
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if n.lossy.crashed.Load() {
		return syscall.EIO
	}
	var err error
	if h, ok := fh.(*handle); ok {
		err = h.f.Truncate(size)
	} else {
		err = os.Truncate(p, size)
	}
	if err != nil {
		return toErrno(err)
	}
	o.truncate(size)
	return 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h, errno := n.lossy.open(n.backingPath(), n.name(), flags, false)
	if errno != 0 {
		return nil, 0, errno
	}
	return h, 0, 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if n.lossy.crashed.Load() {
		return nil, nil, 0, syscall.EIO
	}
	ch, fh, _, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	// Swap the loopback's pass-through handle for a lossy one on the same
	// file. The file is new: whatever an earlier file with its inode number
	// left is not its state.
	if r, ok := fh.(fs.FileReleaser); ok {
		r.Release(ctx)
	}
	h, errno := n.lossy.open(filepath.Join(n.backingPath(), name), filepath.Join(n.name(), name), flags&^(syscall.O_CREAT|syscall.O_EXCL), true)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	n.lossy.fixSize(&out.Attr, h.o)
	return ch, h, 0, 0
}

// Tmpfile is refused: an O_TMPFILE file has no name to report losses by, and
// the programs tested here do not use it.
func (n *node) Tmpfile(ctx context.Context, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if n.lossy.crashed.Load() {
		return syscall.EIO
	}
	var st syscall.Stat_t
	lerr := syscall.Lstat(filepath.Join(n.backingPath(), name), &st)
	if errno := n.LoopbackNode.Unlink(ctx, name); errno != 0 {
		return errno
	}
	if lerr == nil && isRegular(st.Mode) && st.Nlink <= 1 {
		n.lossy.forget(st.Ino)
	}
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if n.lossy.crashed.Load() {
		return syscall.EIO
	}
	// A rename over an existing file removes that file's last name.
	var src, dst syscall.Stat_t
	replaced := false
	if np, ok := newParent.(*node); ok && flags&fs.RENAME_EXCHANGE == 0 {
		replaced = syscall.Lstat(filepath.Join(np.backingPath(), newName), &dst) == nil &&
			syscall.Lstat(filepath.Join(n.backingPath(), name), &src) == nil &&
			isRegular(dst.Mode) && dst.Nlink <= 1 && dst.Ino != src.Ino
	}
	if errno := n.LoopbackNode.Rename(ctx, name, newParent, newName, flags); errno != 0 {
		return errno
	}
	if replaced {
		n.lossy.forget(dst.Ino)
	}
	return 0
}

// open opens the backing file of a regular file and returns a lossy handle
// on its overlay.
func (f *FS) open(path, name string, flags uint32, fresh bool) (*handle, syscall.Errno) {
	if f.crashed.Load() {
		return nil, syscall.EIO
	}
	// The backing file is always opened read-write, so that a sync through
	// any handle can write the file's unsynced pages; the kernel keeps a
	// read-only handle from writing. O_TRUNC is applied below, under the
	// overlay's lock.
	bf, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil && int(flags)&syscall.O_ACCMODE == syscall.O_RDONLY && errors.Is(err, syscall.EACCES) {
		bf, err = os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	}
	if err != nil {
		return nil, toErrno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(bf.Fd()), &st); err != nil {
		bf.Close()
		return nil, toErrno(err)
	}
	if !isRegular(st.Mode) {
		bf.Close()
		return nil, syscall.EOPNOTSUPP
	}
	o := f.overlayFor(st.Ino, st.Size, name, fresh)
	if flags&syscall.O_TRUNC != 0 {
		o.mu.Lock()
		err := bf.Truncate(0)
		if err == nil {
			o.truncate(0)
		}
		o.mu.Unlock()
		if err != nil {
			bf.Close()
			return nil, toErrno(err)
		}
	}
	return &handle{lossy: f, o: o, f: bf}, 0
}

// handle is an open regular file: reads and writes go to its overlay, and
// only Fsync reaches the backing file.
type handle struct {
	lossy *FS
	o     *overlay
	f     *os.File // the backing file
}

var (
	_ fs.FileReader   = (*handle)(nil)
	_ fs.FileWriter   = (*handle)(nil)
	_ fs.FileFsyncer  = (*handle)(nil)
	_ fs.FileFlusher  = (*handle)(nil)
	_ fs.FileReleaser = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.o.mu.Lock()
	defer h.o.mu.Unlock()
	if h.lossy.crashed.Load() {
		return nil, syscall.EIO
	}
	n, err := h.o.readAt(h.f, dest, off)
	if err != nil {
		return nil, toErrno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.o.mu.Lock()
	defer h.o.mu.Unlock()
	if h.lossy.crashed.Load() {
		return 0, syscall.EIO
	}
	if err := h.o.writeAt(h.f, data, off); err != nil {
		return 0, toErrno(err)
	}
	h.lossy.writes.Add(1)
	h.lossy.writtenBytes.Add(int64(len(data)))
	return uint32(len(data)), 0
}

// fsyncFdatasync is FUSE_FSYNC_FDATASYNC, the bit of the fsync flags that
// says the caller asked for fdatasync.
const fsyncFdatasync = 1

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if errno := h.lossy.waitHold(ctx, h.o); errno != 0 {
		return errno
	}
	h.o.mu.Lock()
	defer h.o.mu.Unlock()
	if h.lossy.crashed.Load() {
		return syscall.EIO
	}
	n, err := h.o.sync(h.f, flags&fsyncFdatasync != 0, fsyncFd)
	if err != nil {
		return toErrno(err)
	}
	h.lossy.syncs.Add(1)
	h.lossy.syncedBytes.Add(n)
	return 0
}

// Flush runs at every close(2): a close is not a sync, so nothing moves.
func (h *handle) Flush(ctx context.Context) syscall.Errno { return 0 }

// Release closes the backing file; the overlay stays with the inode, as a
// page cache does after the last close.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	return toErrno(h.f.Close())
}
