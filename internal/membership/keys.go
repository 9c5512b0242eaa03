package membership

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// readKeys reads a gossip key file: one base64 key (16, 24 or 32 bytes) per
// line, the first being the one messages are sent with; blank lines and
// lines starting with # are skipped. A Kubernetes Secret mounted as a file
// fits as is.
func readKeys(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("membership: reading the gossip key file: %w", err)
	}
	var keys [][]byte
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("membership: gossip key file %s line %d: not base64 (make one with: head -c 32 /dev/urandom | base64)", path, i+1)
		}
		switch len(k) {
		case 16, 24, 32:
		default:
			return nil, fmt.Errorf("membership: gossip key file %s line %d: key of %d bytes, want 16, 24 or 32", path, i+1, len(k))
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("membership: gossip key file %s holds no key", path)
	}
	return keys, nil
}

func loadKeyring(path string) (*memberlist.Keyring, error) {
	keys, err := readKeys(path)
	if err != nil {
		return nil, err
	}
	kr, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return nil, fmt.Errorf("membership: gossip keys from %s: %w", path, err)
	}
	return kr, nil
}

// keyLoop re-reads the key file every KeyReloadInterval and installs what
// changed: every key in the file is accepted, the first is sent with, and
// keys that left the file stay accepted until the agent restarts, so that
// peers that have not re-read the file yet are still understood (rotation
// without a partition: see docs/l2.md).
func (m *Membership) keyLoop(ctx context.Context, kr *memberlist.Keyring) {
	tick := time.NewTicker(m.cfg.KeyReloadInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		keys, err := readKeys(m.cfg.KeyFile)
		if err != nil {
			m.log.Warn("re-reading the gossip key file; keeping the keys in use", "err", err)
			continue
		}
		if err := installKeys(kr, keys); err != nil {
			m.log.Warn("installing gossip keys", "err", err)
			continue
		}
	}
}

// installKeys adds every key to kr and makes keys[0] the primary. It
// reports whether the primary changed.
func installKeys(kr *memberlist.Keyring, keys [][]byte) error {
	have := kr.GetKeys()
	for _, k := range keys {
		known := false
		for _, h := range have {
			known = known || bytes.Equal(h, k)
		}
		if !known {
			if err := kr.AddKey(k); err != nil {
				return err
			}
		}
	}
	if !bytes.Equal(kr.GetPrimaryKey(), keys[0]) {
		return kr.UseKey(keys[0])
	}
	return nil
}
