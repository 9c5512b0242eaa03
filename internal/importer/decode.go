package importer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Input is one file (or one object read from a cluster): Name says where it
// came from and appears in every report entry and error.
type Input struct {
	Name string
	Data []byte
}

// source locates one decoded object.
type source struct {
	file string
	doc  int // 1-based document number within the file
}

// object is one decoded document: its header and the raw JSON.
type object struct {
	src        source
	apiVersion string
	kind       string
	name       string
	namespace  string
	raw        json.RawMessage
	generic    map[string]any
}

func (o *object) group() string {
	g, _, ok := strings.Cut(o.apiVersion, "/")
	if !ok {
		return ""
	}
	return g
}

func (o *object) version() string {
	_, v, ok := strings.Cut(o.apiVersion, "/")
	if !ok {
		return o.apiVersion
	}
	return v
}

// ref is how errors and the report name the object.
func (o *object) ref() string {
	if o.namespace != "" {
		return o.namespace + "/" + o.name
	}
	return o.name
}

// InputError says which file, object and field could not be read.
type InputError struct {
	File   string
	Doc    int
	Kind   string
	Object string
	Field  string
	Err    error
}

func (e *InputError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Doc > 0 {
		fmt.Fprintf(&b, " (document %d)", e.Doc)
	}
	if e.Kind != "" || e.Object != "" {
		fmt.Fprintf(&b, ": %s %q", e.Kind, e.Object)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %s", e.Field)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

func (e *InputError) Unwrap() error { return e.Err }

func (o *object) errorf(field, format string, args ...any) error {
	return &InputError{File: o.src.file, Doc: o.src.doc, Kind: o.kind, Object: o.ref(), Field: field, Err: fmt.Errorf(format, args...)}
}

// decodeAll splits every input into objects, unwrapping kind List (and
// FooList) documents into their items.
func decodeAll(inputs []Input) ([]*object, error) {
	var out []*object
	for _, in := range inputs {
		objs, err := decodeFile(in)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// maxDocBytes bounds one YAML document, so a huge or endless input fails
// with a message instead of eating memory.
const maxDocBytes = 8 << 20

func decodeFile(in Input) ([]*object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReaderSize(bytes.NewReader(in.Data), 64<<10))
	var out []*object
	for doc := 1; ; doc++ {
		b, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, &InputError{File: in.Name, Doc: doc, Err: fmt.Errorf("reading YAML: %w", err)}
		}
		if len(b) > maxDocBytes {
			return nil, &InputError{File: in.Name, Doc: doc, Err: fmt.Errorf("document is larger than %d bytes", maxDocBytes)}
		}
		objs, err := decodeDoc(source{file: in.Name, doc: doc}, b)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
}

func decodeDoc(src source, b []byte) ([]*object, error) {
	js, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, &InputError{File: src.file, Doc: src.doc, Err: fmt.Errorf("not valid YAML or JSON: %w", err)}
	}
	if t := bytes.TrimSpace(js); len(t) == 0 || string(t) == "null" {
		return nil, nil // an empty document (comments only, or a trailing ---)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		return nil, &InputError{File: src.file, Doc: src.doc, Err: fmt.Errorf("a document must be an object with apiVersion and kind: %w", err)}
	}
	o := &object{src: src, raw: js, generic: m}
	o.apiVersion, _ = m["apiVersion"].(string)
	o.kind, _ = m["kind"].(string)
	if md, ok := m["metadata"].(map[string]any); ok {
		o.name, _ = md["name"].(string)
		o.namespace, _ = md["namespace"].(string)
	}
	if o.kind == "" || o.apiVersion == "" {
		return nil, o.errorf("kind", "apiVersion and kind are required")
	}
	if strings.HasSuffix(o.kind, "List") {
		items, ok := m["items"].([]any)
		if !ok {
			if _, has := m["items"]; has {
				return nil, o.errorf("items", "must be a list")
			}
		}
		var out []*object
		for i, it := range items {
			ib, err := json.Marshal(it)
			if err != nil {
				return nil, o.errorf(fmt.Sprintf("items[%d]", i), "%v", err)
			}
			objs, err := decodeDoc(source{file: fmt.Sprintf("%s (items[%d])", src.file, i), doc: src.doc}, ib)
			if err != nil {
				return nil, err
			}
			out = append(out, objs...)
		}
		return out, nil
	}
	if o.name == "" {
		return nil, o.errorf("metadata.name", "every object needs a name")
	}
	return []*object{o}, nil
}

// decodeInto decodes the object's JSON into v; a type mismatch names the
// field.
func (o *object) decodeInto(v any) error {
	if err := json.Unmarshal(o.raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return o.errorf(te.Field, "has type %s, want %s", te.Value, te.Type)
		}
		return o.errorf("", "%v", err)
	}
	return nil
}

// fields describes the keys a kind knows, for reporting every key the
// importer does not: a nil value accepts anything below (selectors,
// metadata); the key "[]" gives the schema of a list's elements.
type fields map[string]fields

// unknownFields lists the paths in v that s does not know, sorted.
func unknownFields(path string, v any, s fields) []string {
	if s == nil {
		return nil
	}
	var out []string
	switch t := v.(type) {
	case map[string]any:
		for k, child := range t {
			sub, ok := s[k]
			if !ok {
				out = append(out, join(path, k))
				continue
			}
			out = append(out, unknownFields(join(path, k), child, sub)...)
		}
	case []any:
		if el, ok := s["[]"]; ok {
			for i, child := range t {
				out = append(out, unknownFields(fmt.Sprintf("%s[%d]", path, i), child, el)...)
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// leaf marks a known key with no schema below it.
var leaf fields

// topLevel are the keys every object may carry besides spec.
func topLevel(spec fields) fields {
	return fields{"apiVersion": leaf, "kind": leaf, "metadata": leaf, "status": leaf, "spec": spec}
}

// reportUnknown puts every unknown key into the report as not mapped.
func reportUnknown(rec recorder, o *object, spec fields) {
	for _, f := range unknownFields("", o.generic, topLevel(spec)) {
		rec.notMapped(f, "field unknown to the importer: not imported; check whether it matters for this object and set its equivalent by hand")
	}
}
