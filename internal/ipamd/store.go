package ipamd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// FileStore keeps allocations in one JSON file under Dir, replaced
// atomically (write, then rename) on every change. The directory holds a
// lock file that the store locks for its lifetime, so a second ipamd on the
// same node fails with ErrLocked instead of handing out the same addresses.
//
// A process crash — the agent restart case — loses nothing: the rename
// happens before the answer. The file is not fsynced: after a power loss
// the node reboots, every pod sandbox is gone and the runtime's GC frees
// what the file still lists.
type FileStore struct {
	dir    string
	unlock func() error
}

const (
	storeFile = "allocations.json"
	lockFile  = "lock"
)

// OpenFileStore creates dir if needed and locks it.
func OpenFileStore(dir string) (*FileStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ipamd: create store folder: %w", err)
	}
	unlock, err := lockDir(filepath.Join(dir, lockFile))
	if err != nil {
		return nil, err
	}
	return &FileStore{dir: dir, unlock: unlock}, nil
}

// Close releases the lock.
func (s *FileStore) Close() error { return s.unlock() }

type storeDoc struct {
	Version     int          `json:"version"`
	Allocations []Allocation `json:"allocations"`
}

// Load reads every allocation; a missing file is an empty store.
func (s *FileStore) Load() ([]Allocation, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, storeFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var doc storeDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s is corrupt (%w): move it away only after every pod on the node is gone", filepath.Join(s.dir, storeFile), err)
	}
	return doc.Allocations, nil
}

// Save replaces the file.
func (s *FileStore) Save(all []Allocation) error {
	b, err := json.Marshal(storeDoc{Version: 1, Allocations: all})
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.dir, storeFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.dir, storeFile))
}
