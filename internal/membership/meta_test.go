package membership

import (
	"strings"
	"testing"
)

// The confirmation fields survive the wire, and FitCounted keeps the
// metadata within gossip's limit whatever the node names.
func TestMetaCounted(t *testing.T) {
	m := NodeMeta{Ready: true, Confirms: true, Taking: true, Counted: []string{"node-2", "node-4"}}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeNodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Confirms || !got.Taking || !got.Counts("node-4") || got.Counts("node-3") {
		t.Fatalf("decoded %+v", got)
	}
	// Older metadata (no confirmation fields) reads as not confirming.
	old, err := DecodeNodeMeta([]byte(`m{"ok":true}`))
	if err != nil || old.Confirms || old.Counts("node-2") {
		t.Fatalf("older metadata read as %+v, %v", old, err)
	}
	var long []string
	for i := range 12 {
		long = append(long, strings.Repeat(string(rune('a'+i)), 63))
	}
	m = NodeMeta{Ready: true, Confirms: true, Interfaces: []string{"eth0", "eth1"}, Counted: long}
	fit := m.FitCounted()
	if _, err := fit.Encode(); err != nil {
		t.Fatal(err)
	}
	if len(fit.Counted) == 0 || len(fit.Counted) > MaxCounted || fit.Counted[0] != long[0] {
		t.Fatalf("kept %d names", len(fit.Counted))
	}
	if short := (NodeMeta{Counted: []string{"node-2"}}).FitCounted(); len(short.Counted) != 1 {
		t.Fatalf("dropped a name that fits: %v", short.Counted)
	}
}
