package failover

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strings"
	"time"
)

// The picture's geometry, in SVG user units.
const (
	svgWidth     = 960
	svgLeft      = 180 // room for lane labels: "response-timeout (1234)" at 12 px
	svgRight     = 24
	svgLabelTop  = 72 // below the title, subtitle and owner lines
	svgLabelRows = 6  // one per marker kind: every label fits
	svgLabelRow  = 13
	svgTop       = svgLabelTop + svgLabelRows*svgLabelRow // the plot
	svgLane      = 22
	svgLegendH   = 86
	svgLead      = 3 * time.Second // shown before the kill
)

// classColor gives every outcome class its own color, the same in every
// picture.
func classColor(key string) string {
	switch {
	case key == string(ClassOK):
		return "#2ca02c"
	case key == string(ClassConnectTimeout):
		return "#d62728"
	case key == string(ClassRefused):
		return "#ff7f0e"
	case key == string(ClassReset):
		return "#9467bd"
	case key == string(ClassUnreachable):
		return "#8c564b"
	case key == string(ClassTLS):
		return "#e377c2"
	case key == string(ClassResponseTimeout):
		return "#bcbd22"
	case key == string(ClassClosed):
		return "#7f7f7f"
	case strings.HasPrefix(key, "http-"):
		return "#17becf"
	}
	return "#000000"
}

// classOrder is the lanes' order, top to bottom.
var classOrder = []Class{ClassOK, ClassConnectTimeout, ClassUnreachable, ClassRefused, ClassReset,
	ClassTLS, ClassResponseTimeout, ClassClosed, ClassHTTPStatus, ClassOther}

type marker struct {
	name, color, dash string
	at                time.Time
}

// RenderSVG draws one run: a time axis in seconds since the kill, one lane
// of dots per outcome class (each request at its start), the phases shaded,
// vertical markers for kill, first error, owner change, recovery, endpoints
// gone and last error, and a legend. Standard library only.
func RenderSVG(w io.Writer, r RunResult, title string) error {
	tl := r.Timeline
	t0 := tl.Kill.Add(-svgLead)
	if tl.Start.After(t0) {
		t0 = tl.Start
	}
	t1 := tl.End
	if !t1.After(tl.Kill) {
		t1 = tl.Kill.Add(time.Second)
	}
	plotW := float64(svgWidth - svgLeft - svgRight)
	x := func(t time.Time) float64 {
		f := float64(t.Sub(t0)) / float64(t1.Sub(t0))
		return svgLeft + math.Max(0, math.Min(1, f))*plotW
	}

	lanes, counts := lanesOf(r.Results)
	plotH := len(lanes) * svgLane
	axisY := svgTop + plotH + 8
	caption := phase2Caption(r)
	height := axisY + 40 + svgLegendH
	laneY := func(key string) float64 {
		return float64(svgTop + slices.Index(lanes, key)*svgLane + svgLane/2)
	}

	ms := markers(tl)
	labels, xs, width := markerLabels(r, ms, x)

	b := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	p(`<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	p(`<text x="%d" y="20" font-size="15" font-weight="bold">%s</text>`+"\n", svgLeft, esc(title))
	p(`<text x="%d" y="38" fill="#444444">%s</text>`+"\n", svgLeft, esc(subtitle(tl)))
	if tl.Routed {
		p(`<text class="route" x="%d" y="56" fill="#1f77b4">%s</text>`+"\n", svgLeft, esc(routeLine(r)))
	} else {
		p(`<text class="owner" x="%d" y="56" fill="#1f77b4">%s</text>`+"\n", svgLeft, esc(ownerLine(r)))
	}

	writePhases(p, tl, x, plotH)

	// Lanes and their dots.
	for i, k := range lanes {
		y := svgTop + i*svgLane
		p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#eeeeee"/>`+"\n", svgLeft, y+svgLane/2, svgWidth-svgRight, y+svgLane/2)
		p(`<text x="%d" y="%d" text-anchor="end" fill="%s">%s (%d)</text>`+"\n", svgLeft-8, y+svgLane/2+4, classColor(k), esc(k), counts[k])
	}
	p(`<g class="requests">` + "\n")
	for _, res := range r.Results {
		if res.Start.Before(t0) || res.Start.After(t1) {
			continue
		}
		k := res.Outcome.Key()
		p(`<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`+"\n", x(res.Start), laneY(k), classColor(k))
	}
	p("</g>\n")

	writeAxis(p, tl.Kill, t0, t1, x, axisY, caption)
	writeMarkers(p, ms, xs, labels, axisY)
	writeLegend(p, lanes, tl.Routed, axisY)
	p("</svg>\n")
	return b.Flush()
}

// lanesOf lists the lanes, OK first, then every error key present in class
// order, and counts the results per key.
func lanesOf(results []Result) ([]string, map[string]int) {
	counts := map[string]int{}
	for _, res := range results {
		counts[res.Outcome.Key()]++
	}
	lanes := []string{string(ClassOK)}
	for _, c := range classOrder[1:] {
		var keys []string
		for k := range counts {
			if k == string(c) || (c == ClassHTTPStatus && strings.HasPrefix(k, "http-")) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		lanes = append(lanes, keys...)
	}
	return lanes, counts
}

// markerLabels gives the markers (in time order) their labels and x
// positions, and the picture's width: a label of a marker near the right
// edge (a recovery at the end of the run) widens the picture rather than
// being cut off.
func markerLabels(r RunResult, ms []marker, x func(time.Time) float64) ([]string, []float64, int) {
	tl := r.Timeline
	labels := make([]string, len(ms))
	xs := make([]float64, len(ms))
	width := svgWidth
	for i, m := range ms {
		labels[i] = m.name + " " + at(m.at, tl.Kill)
		if m.name == "owner change" && r.NewNode != "" {
			labels[i] = "owner change to " + r.NewNode + " " + at(m.at, tl.Kill)
		}
		xs[i] = x(m.at)
		width = max(width, int(math.Ceil(xs[i]+3+labelWidth(labels[i])+4)))
	}

	return labels, xs, width
}

// writePhases shades the phases over the plot.
func writePhases(p func(string, ...any), tl Timeline, x func(time.Time) float64, plotH int) {
	if tl.Phase1 > 0 {
		p(`<rect class="phase1" x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" stroke="none"><title>phase 1: %s</title></rect>`+"\n",
			x(tl.Kill), svgTop, x(tl.Kill.Add(tl.Phase1))-x(tl.Kill), plotH, phase1Fill, ds(tl.Phase1))
	}
	if tl.Phase2 > 0 {
		p(`<rect class="phase2" x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" stroke="none"><title>phase 2: %s</title></rect>`+"\n",
			x(tl.Recovered), svgTop, x(tl.Recovered.Add(tl.Phase2))-x(tl.Recovered), plotH, phase2Fill, ds(tl.Phase2))
	}

}

// writeAxis draws the time axis in seconds since the kill, and the caption
// below it.
func writeAxis(p func(string, ...any), kill, t0, t1 time.Time, x func(time.Time) float64, axisY int, caption string) {
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000000"/>`+"\n", svgLeft, axisY, svgWidth-svgRight, axisY)
	step := niceStep(t1.Sub(t0))
	for s := -(kill.Sub(t0) / step) * step; kill.Add(s).Before(t1) || kill.Add(s).Equal(t1); s += step {
		tx := x(kill.Add(s))
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#000000"/>`+"\n", tx, axisY, tx, axisY+5)
		p(`<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", tx, axisY+18, tickLabel(s))
	}
	p(`<text x="%d" y="%d" text-anchor="end" fill="#444444">s since kill</text>`+"\n", svgWidth-svgRight, axisY+34)
	if caption != "" {
		p(`<text class="caption" x="%d" y="%d" fill="#b35900" font-size="11">%s</text>`+"\n", svgRight, axisY+50, esc(caption))
	}

}

// writeMarkers draws the markers, labels placed by placeLabels.
func writeMarkers(p func(string, ...any), ms []marker, xs []float64, labels []string, axisY int) {
	for i, row := range placeLabels(xs, labels) {
		m, mx := ms[i], xs[i]
		ly := svgLabelTop + row*svgLabelRow
		p(`<g class="marker" data-marker="%s"><line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="1.5"%s/>`,
			m.name, mx, ly+2, mx, axisY, m.color, m.dash)
		p(`<text x="%.1f" y="%d" fill="%s" font-size="11">%s</text></g>`+"\n", mx+3, ly, m.color, esc(labels[i]))
	}

}

// writeLegend draws the legend below the axis: the classes of the lanes,
// the marker kinds and the phases.
func writeLegend(p func(string, ...any), lanes []string, routed bool, axisY int) {
	ly := axisY + 66
	lx := svgLeft
	for _, k := range lanes {
		p(`<circle cx="%d" cy="%d" r="4" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", lx, ly, classColor(k), lx+8, ly+4, esc(k))
		lx += 24 + 7*len(k)
		if lx > svgWidth-160 {
			lx, ly = svgLeft, ly+18
		}
	}
	lx, ly = svgLeft, ly+24
	for _, m := range legendMarkers(routed) {
		p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="1.5"%s/><text x="%d" y="%d">%s</text>`+"\n",
			lx, ly-6, lx, ly+6, m.color, m.dash, lx+6, ly+4, esc(m.name))
		lx += 30 + 7*len(m.name)
	}
	p1 := phase1Label(routed)
	p(`<rect x="%d" y="%d" width="12" height="12" fill="%s" stroke="#d62728"/><text x="%d" y="%d">%s</text>`+"\n", lx, ly-6, phase1Fill, lx+16, ly+4, p1)
	lx += 16 + int(math.Ceil(labelWidth(p1)*12/11)) + 14
	p(`<rect x="%d" y="%d" width="12" height="12" fill="%s" stroke="#ff7f0e"/><text x="%d" y="%d">phase 2</text>`+"\n", lx, ly-6, phase2Fill, lx+16, ly+4)
}

// The phases' shades: solid light colours rather than opacity, so that
// every renderer (browsers, ImageMagick) draws the same picture.
const (
	phase1Fill = "#fbe4e4"
	phase2Fill = "#ffefdf"
)

// labelWidth estimates a marker label's width at 11 px.
func labelWidth(s string) float64 { return 6.5 * float64(len([]rune(s))) }

// placeLabels gives each marker label (xs in time order) a row, 0 at the
// top, so that no two labels overlap and no marker's line, which runs from
// its label down to the axis, crosses an earlier label: a label goes just
// below the lowest row still occupied at its x. svgLabelRows rows always
// suffice for the six marker kinds; were they exhausted, the last row is
// shared.
func placeLabels(xs []float64, labels []string) []int {
	var ends [svgLabelRows]float64 // right end of the last label per row
	rows := make([]int, len(xs))
	for i, x := range xs {
		row := 0
		for r := range svgLabelRows {
			if ends[r] > x {
				row = r + 1
			}
		}
		row = min(row, svgLabelRows-1)
		rows[i] = row
		ends[row] = max(ends[row], x+3+labelWidth(labels[i])+6)
	}
	return rows
}

// ownerLine says whose MAC the client used before and after the kill.
func ownerLine(r RunResult) string {
	name := func(node string, mac net.HardwareAddr) string {
		switch {
		case node != "" && len(mac) > 0:
			return node + " (" + mac.String() + ")"
		case node != "":
			return node
		case len(mac) > 0:
			return mac.String()
		}
		return "unknown"
	}
	before := name(r.Node, r.OwnerBefore)
	if len(r.OwnerAfter) == 0 && r.NewNode == "" {
		return "announced by " + before + " before the kill; the client saw no new owner"
	}
	return fmt.Sprintf("announced by %s before the kill, by %s after it (owner change %s)",
		before, name(r.NewNode, r.OwnerAfter), at(r.Timeline.OwnerChange, r.Timeline.Kill))
}

// phase2Caption says, in one line, what bounds phase 2: Kubernetes keeps
// the dead node's endpoints until the node-lifecycle controller gives up on
// the node (or Mooring evicts them sooner, when fast eviction is on).
func phase2Caption(r RunResult) string {
	tl := r.Timeline
	if tl.Phase2 <= 0 || tl.EndpointsStay {
		return ""
	}
	node := r.Node
	if node == "" {
		node = "the dead node"
	}
	return "phase 2 lasts until " + node + "'s endpoints leave the EndpointSlices: kube-controller-manager's " +
		"node-monitor grace period, or less with fast eviction"
}

// allMarkers are the marker kinds, for the legend; markers fills in times.
var allMarkers = []marker{
	{name: "kill", color: "#000000"},
	{name: "first error", color: "#d62728", dash: ` stroke-dasharray="4 3"`},
	{name: "owner change", color: "#1f77b4"},
	{name: "recovered", color: "#2ca02c", dash: ` stroke-dasharray="4 3"`},
	{name: "endpoints gone", color: "#9467bd"},
	{name: "last error", color: "#ff7f0e"},
}

// routeMarker takes the owner change's place in a routed run, where the
// client's neighbour (the router) never changes.
var routeMarker = marker{name: "route withdrawn", color: "#1f77b4"}

// legendMarkers are the marker kinds of a run, routed or not.
func legendMarkers(routed bool) []marker {
	ms := slices.Clone(allMarkers)
	if routed {
		ms[2] = routeMarker
	}
	return ms
}

// phase1Label names phase 1 in the legend: in a routed run it is the
// route withdrawal.
func phase1Label(routed bool) string {
	if routed {
		return "phase 1 (route withdrawal)"
	}
	return "phase 1"
}

func markers(tl Timeline) []marker {
	times := []time.Time{tl.Kill, tl.FirstError, tl.OwnerChange, time.Time{}, tl.EndpointsGone, tl.LastError}
	if tl.Routed {
		times[2] = tl.RouteWithdrawn
	}
	if !tl.FirstError.IsZero() {
		times[3] = tl.Recovered
	}
	var out []marker
	for i, m := range legendMarkers(tl.Routed) {
		if !times[i].IsZero() {
			m.at = times[i]
			out = append(out, m)
		}
	}
	slices.SortStableFunc(out, func(a, b marker) int { return a.at.Compare(b.at) })
	return out
}

func subtitle(tl Timeline) string {
	after := tl.Total().Requests
	if c := tl.Counts[PhaseBefore]; c != nil {
		after -= c.Requests
	}
	return fmt.Sprintf("%s %s · phase 2 %s · errors until %s · %d/%d requests failed after the kill",
		phase1Label(tl.Routed), dur(tl.Phase1, tl.Phase1Complete), dur(tl.Phase2, tl.Phase2Complete), ds(tl.ErrorsUntil), tl.Failed(), after)
}

// niceStep picks a tick step giving about 8–15 ticks over span.
func niceStep(span time.Duration) time.Duration {
	for _, s := range []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
		time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second, time.Minute} {
		if span/s <= 15 {
			return s
		}
	}
	return 2 * time.Minute
}

func tickLabel(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	s := strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", d.Seconds()), "0"), ".")
	if d > 0 {
		return "+" + s
	}
	return s
}

func esc(s string) string {
	var sb strings.Builder
	_ = xml.EscapeText(&sb, []byte(s))
	return sb.String()
}
