package ipamd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// FileStore keeps allocations in an append-only journal under Dir: one
// JSON line per change, appended with a single write(2), so an ADD or DEL
// costs the same whatever the node holds (the store before rewrote the
// whole file and renamed it on every change: O(n) and a directory update
// per call). When the journal holds four times more lines than live
// allocations (and at least compactMin), it is rewritten with one line
// per live allocation and renamed over the old one: O(n) once per ~3n
// changes, O(1) amortized.
//
// The directory holds a lock file that the store locks for its lifetime,
// so a second ipamd on the same node fails with ErrLocked instead of
// handing out the same addresses. A FileStore is not safe for concurrent
// use: the Allocator serializes its calls.
//
// A process crash — the agent restart case — loses nothing: the write
// completes before the answer, and the page cache survives the process.
// A change cut short by the crash (never answered) may leave a torn last
// line, which the next Load drops. The journal is not fsynced: after a
// power loss the node reboots, every pod sandbox is gone, and the
// runtime's DEL of each old sandbox (containerd keeps its sandboxes'
// records on disk and stops each after a reboot) or its CNI GC frees what
// the journal still lists; an address a lost line had handed out belongs
// to a sandbox that no longer exists. containerd v2.4.2 never calls GC.
type FileStore struct {
	dir    string
	unlock func() error
	f      *os.File // the journal, open for appending
	size   int64    // bytes of whole lines in the journal
	lines  int
	live   map[Key]Allocation
	// broken is set when a failed append could not be undone: appending
	// after half a line would corrupt the journal, so every later change
	// fails with it (the agent restarts and replays what is whole).
	broken error
}

const (
	journalFile = "allocations.journal"
	legacyFile  = "allocations.json" // the whole-file format before the journal
	lockFile    = "lock"
	compactMin  = 1024
)

// record is one journal line: Put sets an allocation, Del removes keys.
type record struct {
	Put *Allocation `json:"put,omitempty"`
	Del []Key       `json:"del,omitempty"`
}

// OpenFileStore creates dir if needed, locks it and reads the journal.
func OpenFileStore(dir string) (*FileStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ipamd: create store folder: %w", err)
	}
	unlock, err := lockDir(filepath.Join(dir, lockFile))
	if err != nil {
		return nil, err
	}
	s := &FileStore{dir: dir, unlock: unlock, live: map[Key]Allocation{}}
	if err := s.open(); err != nil {
		unlock()
		return nil, err
	}
	return s, nil
}

// Close closes the journal and releases the lock.
func (s *FileStore) Close() error {
	err := s.f.Close()
	return errors.Join(err, s.unlock())
}

func (s *FileStore) path(name string) string { return filepath.Join(s.dir, name) }

// open replays the journal (or imports the legacy file into a new
// journal), drops a torn last line, and opens the journal for appending.
func (s *FileStore) open() error {
	j, err := s.read()
	if err != nil {
		return err
	}
	if !j.exists {
		if err := s.compact(); err != nil {
			return err
		}
		if err := os.Remove(s.path(legacyFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("ipamd: remove %s after importing it: %w", s.path(legacyFile), err)
		}
		return nil
	}
	f, err := os.OpenFile(s.path(journalFile), os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("ipamd: open journal: %w", err)
	}
	if j.good < j.size { // a torn last line: the change was never answered
		if err := f.Truncate(j.good); err != nil {
			f.Close()
			return fmt.Errorf("ipamd: drop the torn last line of %s: %w", s.path(journalFile), err)
		}
	}
	s.f, s.size = f, j.good
	return nil
}

// journalRead is what read found: whether there is a journal, its size
// and the length of its whole lines.
type journalRead struct {
	exists     bool
	size, good int64
}

// read fills s.live from the journal's whole lines or, when there is no
// journal, from the legacy whole-file store (if any). open and ReadStore
// share it, so a tool reads exactly what the agent would.
func (s *FileStore) read() (journalRead, error) {
	b, err := os.ReadFile(s.path(journalFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		legacy, err := s.readLegacy()
		for _, al := range legacy {
			s.live[al.Key] = al
		}
		return journalRead{}, err
	case err != nil:
		return journalRead{}, fmt.Errorf("ipamd: read %s: %w", s.path(journalFile), err)
	}
	good, err := s.replay(b)
	return journalRead{exists: true, size: int64(len(b)), good: good}, err
}

// replay applies every whole line and returns the length of the journal
// up to the end of the last good line. Only the last line may be bad.
func (s *FileStore) replay(b []byte) (int64, error) {
	var off int64
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		var r record
		if i < 0 || json.Unmarshal(b[:i], &r) != nil {
			if i < 0 || len(bytes.TrimSpace(b[i+1:])) == 0 {
				return off, nil // torn tail
			}
			return 0, fmt.Errorf("%s is corrupt at byte %d: move it away only after every pod on the node is gone", s.path(journalFile), off)
		}
		s.apply(r)
		off += int64(i + 1)
		b = b[i+1:]
	}
	return off, nil
}

func (s *FileStore) apply(r record) {
	s.lines++
	if r.Put != nil {
		s.live[r.Put.Key] = *r.Put
	}
	for _, k := range r.Del {
		delete(s.live, k)
	}
}

func (s *FileStore) readLegacy() ([]Allocation, error) {
	b, err := os.ReadFile(s.path(legacyFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var doc struct {
		Allocations []Allocation `json:"allocations"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s is corrupt (%w): move it away only after every pod on the node is gone", s.path(legacyFile), err)
	}
	if doc.Allocations == nil {
		doc.Allocations = []Allocation{}
	}
	return doc.Allocations, nil
}

// ReadStore returns the allocations recorded in dir without taking its
// lock: for tools and tests that look at a running agent's store. A change
// being written at that moment may be missing; a store that was never
// opened is empty.
func ReadStore(dir string) ([]Allocation, error) {
	s := &FileStore{dir: dir, live: map[Key]Allocation{}}
	if _, err := s.read(); err != nil {
		return nil, err
	}
	return s.Load()
}

// Load returns every allocation the journal holds.
func (s *FileStore) Load() ([]Allocation, error) {
	out := make([]Allocation, 0, len(s.live))
	for _, al := range s.live {
		out = append(out, al)
	}
	return out, nil
}

// Put records an allocation. Cost: one write(2), plus a compaction now and
// then (see FileStore).
func (s *FileStore) Put(al Allocation) error {
	return s.append(record{Put: &al})
}

// Replace records al and that old is gone, in one line: a re-keyed
// allocation is never stored twice or lost, whatever a crash interrupts.
func (s *FileStore) Replace(old Key, al Allocation) error {
	return s.append(record{Put: &al, Del: []Key{old}})
}

// Delete records that the allocations of keys are gone.
func (s *FileStore) Delete(keys ...Key) error {
	if len(keys) == 0 {
		return nil
	}
	return s.append(record{Del: keys})
}

func (s *FileStore) append(r record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if s.broken != nil {
		return s.broken
	}
	if _, err := s.f.Write(b); err != nil {
		// A short write (a full disk) must not leave half a line that the
		// next line would be glued to.
		err = fmt.Errorf("ipamd: append to %s: %w", s.path(journalFile), err)
		if terr := s.f.Truncate(s.size); terr != nil {
			s.broken = fmt.Errorf("%w; undoing it failed too (%v): no further changes until the agent restarts", err, terr)
			return s.broken
		}
		return err
	}
	s.size += int64(len(b))
	s.apply(r)
	if s.lines >= compactMin && s.lines > 4*len(s.live) {
		// The change is recorded; a failed compaction only leaves the
		// journal longer, and the next change tries again.
		_ = s.compact()
	}
	return nil
}

// compact writes one line per live allocation to a new journal and renames
// it over the old one. A crash before the rename keeps the old journal,
// which holds the same allocations. The new file is opened before the
// rename, so appends never go to a file that is no longer the journal.
func (s *FileStore) compact() error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, al := range s.live {
		if err := enc.Encode(record{Put: &al}); err != nil {
			return err
		}
	}
	tmp := s.path(journalFile + ".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("ipamd: compact journal: %w", err)
	}
	// Synced before the rename: the rename replaces the whole journal, so
	// it must never land before the data it points at.
	_, err = f.Write(buf.Bytes())
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, s.path(journalFile))
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("ipamd: compact journal: %w", err)
	}
	if s.f != nil {
		s.f.Close()
	}
	s.f, s.size, s.lines = f, int64(buf.Len()), len(s.live)
	return nil
}
