// Package powerloss exists for tests: it mounts a FUSE file system that
// mirrors a real directory and keeps every byte written to a file in memory
// until that file is fsynced (or fdatasynced), as a kernel page cache does.
// Crash then cuts the power: every unsynced byte is thrown away and the mount
// goes, leaving in the backing directory exactly what a disk would hold after
// a power loss. A test runs a real program over the mount, crashes it, and
// opens the backing files directly to check what survived.
//
// What the model keeps and loses:
//   - File data written through the mount reaches the backing file only when
//     that file is fsynced, and then the backing file itself is fsynced.
//     Reads see the latest data (unsynced pages over the backing file).
//   - A file's size is unsynced data too: a file extended by writes keeps its
//     old size on the backing file until it is synced.
//   - At a crash every unsynced byte is lost, all of it: a real disk may
//     also keep some of them, in any order, or tear a page. A test that
//     passes here does not rely on writes reaching the disk without a sync,
//     but it is not shown torn writes.
//
// Its limits:
//   - Directory operations (create, unlink, rename, mkdir, link) and
//     truncation are applied to the backing directory at once, as if every
//     directory were synced after each change. A program that forgets to
//     fsync a directory is not caught.
//   - Memory-mapped writes (MAP_SHARED, as SQLite's WAL index uses) arrive
//     as ordinary writes when the kernel writes the pages back, and are kept
//     like any other write.
//   - POSIX locks are handled by the kernel, so they work between processes
//     of one host only.
//   - Only regular files have data; other special files cannot be opened.
//
// It needs Linux, /dev/fuse and the right to mount (root, or CAP_SYS_ADMIN):
// it mounts with the mount system call and does not need fusermount.
package powerloss
