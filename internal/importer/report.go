package importer

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Outcome says what became of one source field.
type Outcome string

const (
	// Mapped: the field has the same meaning in the Mooring object.
	Mapped Outcome = "mapped"
	// Changed: the field is mapped, but its meaning or form differs; Detail
	// says how, and what behaves differently.
	Changed Outcome = "changed"
	// NotMapped: Mooring has no equivalent; Detail says what is lost and
	// what to do instead.
	NotMapped Outcome = "not-mapped"
)

// Entry is the fate of one field of one source object.
type Entry struct {
	File    string  `json:"file"`
	Kind    string  `json:"kind"`
	Object  string  `json:"object"` // namespace/name or name
	Field   string  `json:"field"`  // e.g. spec.addresses[1]
	Outcome Outcome `json:"outcome"`
	Target  string  `json:"target,omitempty"` // the Mooring object/field it went to
	Detail  string  `json:"detail,omitempty"`
}

// Report lists every entry in source order.
type Report struct {
	Entries []Entry `json:"entries"`
}

// Count returns how many entries have outcome o.
func (r *Report) Count(o Outcome) int {
	n := 0
	for _, e := range r.Entries {
		if e.Outcome == o {
			n++
		}
	}
	return n
}

// WriteText writes the report as one line per entry, grouped by outcome
// (not mapped first, since those need the operator), then a summary.
func (r *Report) WriteText(w io.Writer) error {
	order := map[Outcome]int{NotMapped: 0, Changed: 1, Mapped: 2}
	es := slices.Clone(r.Entries)
	slices.SortStableFunc(es, func(a, b Entry) int { return cmp.Compare(order[a.Outcome], order[b.Outcome]) })
	var b strings.Builder
	for _, e := range es {
		field := e.Field
		if field == "" {
			field = "(whole object)"
		}
		fmt.Fprintf(&b, "%-10s %s: %s %s: %s", strings.ToUpper(string(e.Outcome)), e.File, e.Kind, e.Object, field)
		if e.Target != "" {
			fmt.Fprintf(&b, " -> %s", e.Target)
		}
		if e.Detail != "" {
			fmt.Fprintf(&b, ": %s", e.Detail)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "summary: %d mapped, %d changed in meaning, %d not mapped\n",
		r.Count(Mapped), r.Count(Changed), r.Count(NotMapped))
	_, err := io.WriteString(w, b.String())
	return err
}

// recorder adds entries for one source object.
type recorder struct {
	rep  *Report
	src  source
	kind string
	obj  string
}

func (r recorder) add(field string, o Outcome, target, detail string, args ...any) {
	if len(args) > 0 {
		detail = fmt.Sprintf(detail, args...)
	}
	r.rep.Entries = append(r.rep.Entries, Entry{File: r.src.file, Kind: r.kind, Object: r.obj, Field: field,
		Outcome: o, Target: target, Detail: detail})
}

func (r recorder) mapped(field, target, detail string, args ...any) {
	r.add(field, Mapped, target, detail, args...)
}

func (r recorder) changed(field, target, detail string, args ...any) {
	r.add(field, Changed, target, detail, args...)
}

func (r recorder) notMapped(field, detail string, args ...any) {
	r.add(field, NotMapped, "", detail, args...)
}
