package failover

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the JSON shape of `mooring failover -o json`. Times are seconds
// since the run's kill; absent events are null. Durations are seconds.
type Report struct {
	Service   string      `json:"service"`
	Target    string      `json:"target"`
	Rate      float64     `json:"rate"`
	TimeoutS  float64     `json:"timeout_seconds"`
	Mode      string      `json:"mode"` // "hard" or "soft"
	Runs      []RunReport `json:"runs"`
	Summary   SummaryJSON `json:"summary"`
	Error     string      `json:"error,omitempty"`
	StartedAt time.Time   `json:"started_at"`
}

// RunReport is one run in a Report.
type RunReport struct {
	Run            int                       `json:"run"`
	KilledNode     string                    `json:"killed_node"`
	NexthopsBefore []string                  `json:"nexthops_before,omitempty"`
	NewNode        string                    `json:"new_node,omitempty"`
	OwnerBefore    string                    `json:"owner_before,omitempty"`
	OwnerAfter     string                    `json:"owner_after,omitempty"`
	KillAt         time.Time                 `json:"kill_at"`
	Events         EventTimes                `json:"events"`
	Phase1S        float64                   `json:"phase1_seconds"`
	Phase2S        float64                   `json:"phase2_seconds"`
	ErrorsUntilS   float64                   `json:"errors_until_seconds"`
	Phase1Complete bool                      `json:"phase1_complete"`
	Phase2Complete bool                      `json:"phase2_complete"`
	Requests       int                       `json:"requests"`
	Failed         int                       `json:"failed"`
	Phases         map[Phase]PhaseCountsJSON `json:"phases"`
	Warnings       []string                  `json:"warnings,omitempty"`
	SVG            string                    `json:"svg,omitempty"`
}

// EventTimes are the markers of a run, in seconds since the kill.
type EventTimes struct {
	FirstError    *float64 `json:"first_error"`
	OwnerChange   *float64 `json:"owner_change"`
	Recovered     *float64 `json:"recovered"`
	LastError     *float64 `json:"last_error"`
	EndpointsGone *float64 `json:"endpoints_gone"`
	// RouteWithdrawn is set in routed runs (a client behind a router).
	RouteWithdrawn *float64 `json:"route_withdrawn,omitempty"`
	End            float64  `json:"end"`
}

// PhaseCountsJSON is Counts in JSON.
type PhaseCountsJSON struct {
	Requests int            `json:"requests"`
	Failed   int            `json:"failed"`
	Errors   map[string]int `json:"errors"`
}

// SpreadJSON is a Spread in JSON (seconds for durations).
type SpreadJSON struct {
	Median float64 `json:"median"`
	Worst  float64 `json:"worst"`
	N      int     `json:"n"`
}

// SummaryJSON is a Summary in JSON.
type SummaryJSON struct {
	Runs         int        `json:"runs"`
	Phase1S      SpreadJSON `json:"phase1_seconds"`
	Phase2S      SpreadJSON `json:"phase2_seconds"`
	ErrorsUntilS SpreadJSON `json:"errors_until_seconds"`
	OwnerChangeS SpreadJSON `json:"owner_change_seconds"`
	// RouteWithdrawnS is set when runs were routed.
	RouteWithdrawnS *SpreadJSON    `json:"route_withdrawn_seconds,omitempty"`
	Failed          SpreadJSON     `json:"failed_requests"`
	Requests        SpreadJSON     `json:"requests"`
	Incomplete      int            `json:"incomplete_runs"`
	Errors          map[string]int `json:"errors"`
}

func secs(d time.Duration) float64 { return math.Round(d.Seconds()*1000) / 1000 }

func since(t, kill time.Time) *float64 {
	if t.IsZero() {
		return nil
	}
	s := secs(t.Sub(kill))
	return &s
}

func durSpread(s Spread[time.Duration]) SpreadJSON {
	return SpreadJSON{Median: secs(s.Median), Worst: secs(s.Worst), N: s.N}
}

func intSpread(s Spread[int]) SpreadJSON {
	return SpreadJSON{Median: float64(s.Median), Worst: float64(s.Worst), N: s.N}
}

// NewRunReport turns a run into its JSON shape.
func NewRunReport(r RunResult) RunReport {
	tl := r.Timeline
	rr := RunReport{
		Run: r.Run, KilledNode: r.Node, NewNode: r.NewNode, KillAt: tl.Kill,
		Events: EventTimes{
			FirstError: since(tl.FirstError, tl.Kill), OwnerChange: since(tl.OwnerChange, tl.Kill),
			Recovered: since(tl.Recovered, tl.Kill), LastError: since(tl.LastError, tl.Kill),
			EndpointsGone: since(tl.EndpointsGone, tl.Kill), RouteWithdrawn: since(tl.RouteWithdrawn, tl.Kill),
			End: secs(tl.End.Sub(tl.Kill)),
		},
		NexthopsBefore: r.HopsBefore,
		Phase1S:        secs(tl.Phase1), Phase2S: secs(tl.Phase2), ErrorsUntilS: secs(tl.ErrorsUntil),
		Phase1Complete: tl.Phase1Complete, Phase2Complete: tl.Phase2Complete,
		Failed: tl.Failed(), Phases: map[Phase]PhaseCountsJSON{}, Warnings: r.Warnings,
	}
	if len(r.OwnerBefore) > 0 {
		rr.OwnerBefore = r.OwnerBefore.String()
	}
	if len(r.OwnerAfter) > 0 {
		rr.OwnerAfter = r.OwnerAfter.String()
	}
	for _, p := range Phases {
		c := tl.Counts[p]
		if c == nil {
			c = &Counts{}
		}
		errs := map[string]int{}
		maps.Copy(errs, c.ByClass)
		rr.Phases[p] = PhaseCountsJSON{Requests: c.Requests, Failed: c.Failed, Errors: errs}
		if p != PhaseBefore {
			rr.Requests += c.Requests
		}
	}
	return rr
}

// NewSummaryJSON turns a Summary into its JSON shape.
func NewSummaryJSON(s Summary) SummaryJSON {
	errs := map[string]int{}
	maps.Copy(errs, s.ByClass)
	out := SummaryJSON{
		Runs: s.Runs, Phase1S: durSpread(s.Phase1), Phase2S: durSpread(s.Phase2),
		ErrorsUntilS: durSpread(s.ErrorsUntil), OwnerChangeS: durSpread(s.OwnerChange),
		Failed: intSpread(s.Failed), Requests: intSpread(s.Requests), Incomplete: s.Incomplete, Errors: errs,
	}
	if s.Routed {
		rw := durSpread(s.RouteWithdrawn)
		out.RouteWithdrawnS = &rw
	}
	return out
}

// WriteJSON writes r, indented.
func WriteJSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the runs and the summary as a readable table.
func WriteTable(w io.Writer, runs []RunResult, s Summary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if s.Routed {
		fmt.Fprintln(tw, "RUN\tKILLED\tNEXT HOPS BEFORE\tFIRST ERR\tROUTE GONE\tRECOVERED\tENDPTS GONE\tLAST ERR\tPHASE 1\tPHASE 2\tFAILED/REQS\t")
	} else {
		fmt.Fprintln(tw, "RUN\tKILLED\tNEW OWNER\tFIRST ERR\tOWNER CHG\tRECOVERED\tENDPTS GONE\tLAST ERR\tPHASE 1\tPHASE 2\tFAILED/REQS\t")
	}
	for _, r := range runs {
		tl := r.Timeline
		newOwner := r.NewNode
		if newOwner == "" && len(r.OwnerAfter) > 0 {
			newOwner = r.OwnerAfter.String()
		}
		if newOwner == "" {
			newOwner = "-"
		}
		change := tl.OwnerChange
		if tl.Routed {
			newOwner, change = strings.Join(r.HopsBefore, ","), tl.RouteWithdrawn
		}
		reqs := 0
		for _, p := range []Phase{Phase1, Phase2, PhaseAfter} {
			if c := tl.Counts[p]; c != nil {
				reqs += c.Requests
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t\n", r.Run, r.Node, newOwner,
			at(tl.FirstError, tl.Kill), at(change, tl.Kill), at(tl.Recovered, tl.Kill),
			at(tl.EndpointsGone, tl.Kill), at(tl.LastError, tl.Kill),
			dur(tl.Phase1, tl.Phase1Complete), dur(tl.Phase2, tl.Phase2Complete), tl.Failed(), reqs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ERRORS BY PHASE\tRUN\tPHASE 1\tPHASE 2\tAFTER\tBEFORE KILL")
	for _, r := range runs {
		c := r.Timeline.Counts
		fmt.Fprintf(tw, "\t%d\t%s\t%s\t%s\t%s\n", r.Run, classes(c[Phase1]), classes(c[Phase2]), classes(c[PhaseAfter]), classes(c[PhaseBefore]))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "SUMMARY (%s)\tMEDIAN\tWORST\n", plural(s.Runs, "run", "runs"))
	if s.Routed {
		fmt.Fprintf(tw, "route withdrawn at the router (kill →)\t%s\t%s\n", ds(s.RouteWithdrawn.Median), ds(s.RouteWithdrawn.Worst))
		fmt.Fprintf(tw, "phase 1, route withdrawal (kill → the client's last failure before it is answered)\t%s\t%s\n", ds(s.Phase1.Median), ds(s.Phase1.Worst))
	} else {
		fmt.Fprintf(tw, "phase 1 (kill → answers again)\t%s\t%s\n", ds(s.Phase1.Median), ds(s.Phase1.Worst))
	}
	fmt.Fprintf(tw, "phase 2 (→ stale endpoints gone, errors stop)\t%s\t%s\n", ds(s.Phase2.Median), ds(s.Phase2.Worst))
	fmt.Fprintf(tw, "errors until (kill → last error)\t%s\t%s\n", ds(s.ErrorsUntil.Median), ds(s.ErrorsUntil.Worst))
	if s.OwnerChange.N > 0 {
		fmt.Fprintf(tw, "owner change seen by the client\t%s\t%s\n", ds(s.OwnerChange.Median), ds(s.OwnerChange.Worst))
	}
	fmt.Fprintf(tw, "failed requests per run\t%d\t%d\n", s.Failed.Median, s.Failed.Worst)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "errors by class, all runs: %s\n", classes(&Counts{ByClass: s.ByClass}))
	if s.Incomplete > 0 {
		fmt.Fprintf(w, "%d run(s) did not finish a phase: their figures (marked ≥) are lower bounds\n", s.Incomplete)
	}
	return nil
}

func at(t, kill time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("+%.2fs", t.Sub(kill).Seconds())
}

func dur(d time.Duration, complete bool) string {
	if !complete {
		return "≥" + ds(d)
	}
	return ds(d)
}

func ds(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

// classes renders counts as "connect-timeout=12 http-503=3", or "-".
func classes(c *Counts) string {
	if c == nil || len(c.ByClass) == 0 {
		return "-"
	}
	keys := slices.Sorted(maps.Keys(c.ByClass))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, c.ByClass[k]))
	}
	return strings.Join(parts, " ")
}

// plural is "1 run", "2 runs".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
