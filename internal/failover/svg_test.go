package failover

import (
	"bytes"
	"encoding/xml"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func sampleRun() RunResult {
	in := Observed{
		Start: ts(0), Kill: ts(3), End: ts(12),
		Events: []Event{{Kind: EventKill, At: ts(3)}, {Kind: EventOwnerChange, At: ts(3.9), Detail: "a -> b"},
			{Kind: EventEndpointsGone, At: ts(8)}},
		Results: cat(ticks(0, 3, always(okO)), ticks(3, 3.5, always(ctO)), ticks(3.5, 4, always(Outcome{Class: ClassRefused})),
			ticks(4, 8, alternate(okO, http503O)), ticks(8, 12, always(okO))),
	}
	return RunResult{Run: 1, Node: "node-a", NewNode: "node-b",
		OwnerBefore: net.HardwareAddr{2, 0, 0, 0, 0, 0xa}, OwnerAfter: net.HardwareAddr{2, 0, 0, 0, 0, 0xb},
		Timeline: ComputeTimeline(in), Results: in.Results}
}

// svgDoc decodes an SVG and collects what the assertions need.
type svgDoc struct {
	circles int
	markers map[string]bool
	texts   []string
	root    string
}

func decodeSVG(t *testing.T, b []byte) svgDoc {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	doc := svgDoc{markers: map[string]bool{}}
	depth := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				doc.root = el.Name.Space + " " + el.Name.Local
			}
			depth++
			switch el.Name.Local {
			case "circle":
				doc.circles++
			case "g":
				for _, a := range el.Attr {
					if a.Name.Local == "data-marker" {
						doc.markers[a.Value] = true
					}
				}
			}
		case xml.EndElement:
			depth--
		case xml.CharData:
			if s := strings.TrimSpace(string(el)); s != "" {
				doc.texts = append(doc.texts, s)
			}
		}
	}
	if depth != 0 {
		t.Fatalf("unbalanced elements: depth %d", depth)
	}
	return doc
}

func TestRenderSVG(t *testing.T) {
	r := sampleRun()
	var buf bytes.Buffer
	if err := RenderSVG(&buf, r, `demo/echo — run 1 <killed "node-a"> & co`); err != nil {
		t.Fatal(err)
	}
	doc := decodeSVG(t, buf.Bytes())
	if doc.root != "http://www.w3.org/2000/svg svg" {
		t.Errorf("root element %q", doc.root)
	}
	for _, m := range []string{"kill", "first error", "owner change", "recovered", "endpoints gone", "last error"} {
		if !doc.markers[m] {
			t.Errorf("no %q marker", m)
		}
	}
	// Every request within the picture's window is a dot (the window starts
	// 3 s before the kill, here at the start), plus the legend's dots.
	lanes := 4 // ok, connect-timeout, refused, http-503
	if want := len(r.Results) + lanes; doc.circles != want {
		t.Errorf("%d circles, want %d", doc.circles, want)
	}
	all := strings.Join(doc.texts, "|")
	for _, s := range []string{`<killed "node-a"> & co`, "connect-timeout (5)", "refused (5)", "http-503 (20)", "s since kill", "+5", "phase 1", "phase 2",
		// Issue 8 item 17: the new owner, and what bounds phase 2.
		"by node-b (02:00:00:00:00:0b) after it", "owner change to node-b +0.90s",
		"phase 2 lasts until node-a's endpoints leave the EndpointSlices: kube-controller-manager's node-monitor grace period"} {
		if !strings.Contains(all, s) {
			t.Errorf("texts lack %q: %s", s, all)
		}
	}
	if os.Getenv("FAILOVER_SVG_OUT") != "" { // for looking at it
		_ = os.WriteFile(filepath.Join(os.Getenv("FAILOVER_SVG_OUT"), "sample.svg"), buf.Bytes(), 0o644)
	}
}

func TestRenderSVGDegenerate(t *testing.T) {
	cases := map[string]RunResult{
		"no requests": {Run: 1, Timeline: ComputeTimeline(Observed{Start: ts(0), Kill: ts(0), End: ts(0)})},
		"never recovered": {Run: 2, Timeline: ComputeTimeline(Observed{Start: ts(0), Kill: ts(1), End: ts(2),
			Results: ticks(1, 2, always(ctO))}), Results: ticks(1, 2, always(ctO))},
	}
	for name, r := range cases {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := RenderSVG(&buf, r, name); err != nil {
				t.Fatal(err)
			}
			doc := decodeSVG(t, buf.Bytes())
			if !doc.markers["kill"] {
				t.Error("no kill marker")
			}
			if strings.Contains(buf.String(), "NaN") || strings.Contains(buf.String(), "Inf") {
				t.Error("NaN or Inf in coordinates")
			}
		})
	}
}

// Marker labels never overlap each other, and no marker's line (from its
// label down to the axis) crosses an earlier label, however close the
// markers are (issue 8 item 17: labels near t=0 overlapped).
func TestPlaceLabels(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"kill +0.00s", "first error +0.05s", "owner change to node-2 +0.80s", "recovered +0.85s", "endpoints gone +20.20s", "last error +28.00s"}
	for range 2000 {
		xs := make([]float64, len(names))
		x := 180.0
		for i := range xs {
			x += rng.Float64() * float64([]int{0, 3, 40, 400}[rng.IntN(4)])
			xs[i] = x
		}
		rows := placeLabels(xs, names)
		for i := range xs {
			for j := range i {
				li, lj := xs[i]+3, xs[j]+3
				ri, rj := li+labelWidth(names[i]), lj+labelWidth(names[j])
				if rows[i] == rows[j] && li < rj && lj < ri {
					t.Fatalf("xs %v rows %v: labels %d and %d overlap", xs, rows, j, i)
				}
				// i is later: its line runs from row i down; j's label
				// below it must not span xs[i].
				if rows[j] > rows[i] && lj <= xs[i] && xs[i] <= rj {
					t.Fatalf("xs %v rows %v: the line of %d crosses label %d", xs, rows, i, j)
				}
			}
		}
	}
}

// A marker at the right end of the picture (the client's owner change and
// recovery in the run's last second, as when a stale neighbour entry
// expires) keeps its whole label: the picture widens instead of cutting
// "owner change to node-b +8.95s" off at the edge.
func TestRenderSVGLabelsAtTheEnd(t *testing.T) {
	in := Observed{
		Start: ts(0), Kill: ts(3), End: ts(12),
		Events:  []Event{{Kind: EventKill, At: ts(3)}, {Kind: EventOwnerChange, At: ts(11.95), Detail: "a -> b"}},
		Results: cat(ticks(0, 3, always(okO)), ticks(3, 11.9, always(ctO)), ticks(11.9, 12, always(okO))),
	}
	r := RunResult{Run: 1, Node: "node-a", NewNode: "node-b", Timeline: ComputeTimeline(in), Results: in.Results}
	var buf bytes.Buffer
	if err := RenderSVG(&buf, r, "demo/echo"); err != nil {
		t.Fatal(err)
	}
	decodeSVG(t, buf.Bytes())
	m := regexp.MustCompile(`<svg [^>]*width="(\d+)"`).FindSubmatch(buf.Bytes())
	if m == nil {
		t.Fatal("no svg width")
	}
	width, _ := strconv.ParseFloat(string(m[1]), 64)
	labels := regexp.MustCompile(`<text x="([0-9.]+)" y="\d+" fill="[^"]+" font-size="11">([^<]+)</text></g>`).FindAllSubmatch(buf.Bytes(), -1)
	var owner bool
	for _, l := range labels {
		lx, _ := strconv.ParseFloat(string(l[1]), 64)
		if end := lx + labelWidth(string(l[2])); end > width {
			t.Errorf("label %q ends at %.0f, beyond the picture's width %.0f", l[2], end, width)
		}
		owner = owner || strings.HasPrefix(string(l[2]), "owner change to node-b")
	}
	if len(labels) < 3 || !owner {
		t.Errorf("marker labels %q", labels)
	}
}
