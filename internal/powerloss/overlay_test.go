package powerloss

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

func backingFile(t *testing.T, content []byte) *os.File {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, content, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func noSync(int, bool) error { return nil }

func resized(b []byte, size int) []byte {
	if size <= len(b) {
		return b[:size:size]
	}
	return append(b, make([]byte, size-len(b))...)
}

// The overlay against a model: what a reader sees is every write over the
// initial content, and the backing file holds exactly what was synced (and
// truncated, which the model applies at once). Seeded, so a failure repeats.
func TestOverlayMatchesModel(t *testing.T) {
	for seed := range uint64(30) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			initial := make([]byte, rng.IntN(3*pageSize))
			for i := range initial {
				initial[i] = byte(rng.IntN(256))
			}
			backing := backingFile(t, initial)
			o := newOverlay("f", int64(len(initial)))
			visible := bytes.Clone(initial)
			durable := bytes.Clone(initial)
			for step := range 200 {
				switch op := rng.IntN(10); {
				case op < 5: // write, possibly past the end and across pages
					off := rng.IntN(len(visible) + 2*pageSize)
					data := make([]byte, 1+rng.IntN(3*pageSize))
					for i := range data {
						data[i] = byte(rng.IntN(256))
					}
					if err := o.writeAt(backing, data, int64(off)); err != nil {
						t.Fatal(err)
					}
					visible = resized(visible, max(len(visible), off+len(data)))
					copy(visible[off:], data)
				case op < 7: // read anywhere, including past the end
					off := rng.IntN(len(visible) + pageSize)
					dest := make([]byte, rng.IntN(3*pageSize))
					n, err := o.readAt(backing, dest, int64(off))
					if err != nil {
						t.Fatal(err)
					}
					want := visible[min(off, len(visible)):min(off+len(dest), len(visible))]
					if !bytes.Equal(dest[:n], want) {
						t.Fatalf("step %d: read %d bytes at %d differs from the model", step, len(dest), off)
					}
				case op < 8: // truncate: the backing file first, as node.truncate does
					size := rng.IntN(len(visible) + pageSize)
					if err := backing.Truncate(int64(size)); err != nil {
						t.Fatal(err)
					}
					o.truncate(int64(size))
					visible = resized(visible, size)
					durable = resized(durable, size)
				default:
					datasync := rng.IntN(2) == 0
					var synced, gotDatasync bool
					if _, err := o.sync(backing, datasync, func(_ int, d bool) error {
						synced, gotDatasync = true, d
						return nil
					}); err != nil {
						t.Fatal(err)
					}
					if !synced || gotDatasync != datasync {
						t.Fatalf("step %d: backing sync called %v with datasync %v, want datasync %v", step, synced, gotDatasync, datasync)
					}
					durable = bytes.Clone(visible)
				}
				if o.size != int64(len(visible)) {
					t.Fatalf("step %d: size %d, model %d", step, o.size, len(visible))
				}
				onDisk, err := os.ReadFile(backing.Name())
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(onDisk, durable) {
					t.Fatalf("step %d: the backing file (%d bytes) is not what was synced (%d bytes)", step, len(onDisk), len(durable))
				}
				if o.unsynced() == 0 && !bytes.Equal(visible, durable) {
					t.Fatalf("step %d: nothing counted unsynced but the visible file differs from the backing file", step)
				}
			}
		})
	}
}

func TestOverlayCountsUnsyncedBytes(t *testing.T) {
	backing := backingFile(t, bytes.Repeat([]byte{'a'}, 10000))
	o := newOverlay("f", 10000)
	// Three bytes across the first page boundary, then five past the end.
	if err := o.writeAt(backing, []byte("xyz"), pageSize-1); err != nil {
		t.Fatal(err)
	}
	if err := o.writeAt(backing, []byte("12345"), 20000); err != nil {
		t.Fatal(err)
	}
	if got := o.unsynced(); got != 8 {
		t.Fatalf("unsynced %d, want 8", got)
	}
	got := make([]byte, 20010)
	n, err := o.readAt(backing, got, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Repeat([]byte{'a'}, 10000), make([]byte, 10005)...)
	copy(want[pageSize-1:], "xyz")
	copy(want[20000:], "12345")
	if !bytes.Equal(got[:n], want) {
		t.Fatalf("read %d bytes, want %d: the overlay over the backing file is wrong", n, len(want))
	}
	if st, _ := backing.Stat(); st.Size() != 10000 {
		t.Fatalf("the backing file is %d bytes before any sync, want 10000", st.Size())
	}
	synced, err := o.sync(backing, true, noSync)
	if err != nil || synced != 8 {
		t.Fatalf("sync wrote %d bytes (%v), want 8", synced, err)
	}
	if o.unsynced() != 0 {
		t.Fatalf("unsynced %d after sync", o.unsynced())
	}
	onDisk, _ := os.ReadFile(backing.Name())
	if !bytes.Equal(onDisk, want) {
		t.Fatal("the backing file after sync is not what a reader saw")
	}
}
