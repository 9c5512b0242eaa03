package chart

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// schemaNode is the part of JSON Schema the chart uses.
type schemaNode struct {
	Type        any                    `json:"type"`
	Description string                 `json:"description"`
	Properties  map[string]*schemaNode `json:"properties"`
	Enum        []any                  `json:"enum"`
	Pattern     string                 `json:"pattern"`
	Minimum     *float64               `json:"minimum"`
	Maximum     *float64               `json:"maximum"`
}

// ValuesReference renders the schema as a Markdown table, one row per leaf
// value, with its default from values.yaml.
func ValuesReference(schema, values []byte) (string, error) {
	var root schemaNode
	if err := json.Unmarshal(schema, &root); err != nil {
		return "", fmt.Errorf("chart: %s: %w", SchemaFile, err)
	}
	var defaults map[string]any
	if err := yaml.Unmarshal(values, &defaults); err != nil {
		return "", fmt.Errorf("chart: %s: %w", ValuesFile, err)
	}
	var b strings.Builder
	b.WriteString("| Value | Type | Default | Description |\n| --- | --- | --- | --- |\n")
	walk(&b, "", &root, defaults)
	return b.String(), nil
}

func walk(b *strings.Builder, prefix string, n *schemaNode, def any) {
	keys := make([]string, 0, len(n.Properties))
	for k := range n.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "global" {
			continue // Helm's, not ours
		}
		c := n.Properties[k]
		path := strings.TrimPrefix(prefix+"."+k, ".")
		var d any
		if m, ok := def.(map[string]any); ok {
			d = m[k]
		}
		if len(c.Properties) > 0 {
			if c.Description != "" {
				fmt.Fprintf(b, "| `%s` | object | | %s |\n", path, cell(c.Description))
			}
			walk(b, path, c, d)
			continue
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", path, typeOf(c), defaultOf(d), cell(describe(c)))
	}
}

func typeOf(n *schemaNode) string {
	switch t := n.Type.(type) {
	case string:
		if t == "string" && strings.Contains(n.Pattern, "(ns|us|µs|ms|s|m|h)") {
			return "duration"
		}
		return t
	case []any:
		parts := make([]string, len(t))
		for i, p := range t {
			parts[i] = fmt.Sprint(p)
		}
		return strings.Join(parts, " or ")
	}
	return "any"
}

func defaultOf(v any) string {
	if v == nil {
		return ""
	}
	j, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return "`" + strings.ReplaceAll(string(j), "|", `\|`) + "`"
}

func describe(n *schemaNode) string {
	s := n.Description
	if len(n.Enum) > 0 {
		vals := make([]string, len(n.Enum))
		for i, e := range n.Enum {
			vals[i] = fmt.Sprintf("`%v`", e)
		}
		s += " One of " + strings.Join(vals, ", ") + "."
	}
	switch {
	case n.Minimum != nil && n.Maximum != nil:
		s += fmt.Sprintf(" %v to %v.", *n.Minimum, *n.Maximum)
	case n.Minimum != nil:
		s += fmt.Sprintf(" At least %v.", *n.Minimum)
	}
	return s
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
