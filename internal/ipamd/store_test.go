package ipamd

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func testAlloc(i int) Allocation {
	return Allocation{Key: Key{Network: "pods", ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0"}, Pool: "default", Pod: fmt.Sprint("p", i),
		IPs: []IP{{Address: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 16), Gateway: netip.MustParseAddr("10.1.0.1")}}}
}

func loadKeys(t *testing.T, dir string) map[Key]Allocation {
	t.Helper()
	st, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	all, err := st.Load()
	if err != nil {
		t.Fatal(err)
	}
	out := map[Key]Allocation{}
	for _, al := range all {
		out[al.Key] = al
	}
	return out
}

// A random sequence of puts and deletes, with reopenings (restarts) in
// between and enough changes to compact several times, against a map.
func TestFileStoreMatchesOracleAcrossRestartsAndCompactions(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 12))
	oracle := map[Key]Allocation{}
	st, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	compactions, lastLines := 0, 0
	for step := range 6000 {
		i := rng.IntN(300)
		al := testAlloc(i)
		switch r := rng.IntN(10); {
		case r < 6:
			if err := st.Put(al); err != nil {
				t.Fatal(err)
			}
			oracle[al.Key] = al
		case r < 9:
			if err := st.Delete(al.Key); err != nil {
				t.Fatal(err)
			}
			delete(oracle, al.Key)
		default: // GC-like: several at once
			keys := []Key{al.Key, testAlloc(i + 1).Key}
			if err := st.Delete(keys...); err != nil {
				t.Fatal(err)
			}
			delete(oracle, keys[0])
			delete(oracle, keys[1])
		}
		if st.lines < lastLines {
			compactions++
		}
		lastLines = st.lines
		if step%1000 == 999 {
			st.Close()
			if got := loadKeys(t, dir); !maps.EqualFunc(got, oracle, func(a, b Allocation) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
				t.Fatalf("step %d: reopened store holds %d allocations, oracle %d", step, len(got), len(oracle))
			}
			if st, err = OpenFileStore(dir); err != nil {
				t.Fatal(err)
			}
		}
	}
	st.Close()
	if compactions == 0 {
		t.Fatal("the journal was never compacted")
	}
	fi, err := os.Stat(filepath.Join(dir, journalFile))
	if err != nil {
		t.Fatal(err)
	}
	// Bounded: at most max(compactMin, 4 × live) lines of ~150 bytes.
	if fi.Size() > int64(max(compactMin, 4*len(oracle)))*200 {
		t.Fatalf("journal is %d bytes for %d allocations: not compacted", fi.Size(), len(oracle))
	}
}

// A crash in the middle of an append leaves a torn last line: it was
// never answered, so it is dropped, and later appends start on a clean line.
func TestFileStoreDropsTornLastLine(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := st.Put(testAlloc(i)); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	f, err := os.OpenFile(filepath.Join(dir, journalFile), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"put":{"containerID":"torn","ifNa`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	st, err = OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(testAlloc(9)); err != nil {
		t.Fatal(err)
	}
	if all, err := ReadStore(dir); err != nil || len(all) != 4 {
		t.Fatalf("ReadStore while the store is open: %d allocations, %v", len(all), err)
	}
	st.Close()
	got := loadKeys(t, dir)
	if len(got) != 4 || got[Key{Network: "pods", ContainerID: "c9", IfName: "eth0"}].Pod != "p9" {
		t.Fatalf("after a torn line and one more put: %v", slices.Collect(maps.Keys(got)))
	}
}

// A bad line before the end is not a crash artefact: refuse to guess.
func TestFileStoreRefusesCorruptMiddleLine(t *testing.T) {
	dir := t.TempDir()
	body := `{"put":{"containerID":"a","ifName":"eth0","pool":"default","ips":[]}}` + "\n" + "garbage\n" +
		`{"del":[{"containerID":"a","ifName":"eth0"}]}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, journalFile), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFileStore(dir); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("corrupt journal opened: %v", err)
	}
	// The lock was released: a fixed journal opens.
	if err := os.WriteFile(filepath.Join(dir, journalFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
}

// A node upgraded from the whole-file store keeps its allocations.
func TestFileStoreImportsLegacyFile(t *testing.T) {
	dir := t.TempDir()
	legacy := `{"version":1,"allocations":[{"containerID":"old","ifName":"eth0","pool":"default","ips":[{"address":"10.1.0.5/16","gateway":"10.1.0.1"}]}]}`
	if err := os.WriteFile(filepath.Join(dir, legacyFile), []byte(legacy), 0o600); err != nil {
		t.Fatal(err)
	}
	if all, err := ReadStore(dir); err != nil || len(all) != 1 || all[0].ContainerID != "old" {
		t.Fatalf("ReadStore of a legacy store: %v, %v", all, err)
	}
	if _, err := os.Stat(filepath.Join(dir, legacyFile)); err != nil {
		t.Fatalf("ReadStore must not import the legacy file: %v", err)
	}
	got := loadKeys(t, dir)
	if al := got[Key{ContainerID: "old", IfName: "eth0"}]; len(got) != 1 || al.IPs[0].Address.String() != "10.1.0.5/16" {
		t.Fatalf("imported %v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, legacyFile)); !os.IsNotExist(err) {
		t.Fatalf("legacy file still there after import: %v", err)
	}
	if got := loadKeys(t, dir); len(got) != 1 {
		t.Fatalf("second open holds %d allocations", len(got))
	}
	if all, err := ReadStore(dir); err != nil || len(all) != 1 {
		t.Fatalf("ReadStore of the imported journal: %v, %v", all, err)
	}
	if all, err := ReadStore(t.TempDir()); err != nil || len(all) != 0 {
		t.Fatalf("ReadStore of a store never opened: %v, %v", all, err)
	}
}

// BenchmarkFileStorePut: one append, whatever the store holds.
func BenchmarkFileStorePut(b *testing.B) {
	for _, held := range []int{0, 110, 5000} {
		b.Run(fmt.Sprint("held=", held), func(b *testing.B) {
			st, err := OpenFileStore(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			for i := range held {
				if err := st.Put(testAlloc(10000 + i)); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				al := testAlloc(i % 1000)
				if err := st.Put(al); err != nil {
					b.Fatal(err)
				}
				if err := st.Delete(al.Key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
