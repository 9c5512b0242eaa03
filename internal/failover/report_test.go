package failover

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestReportJSONShape(t *testing.T) {
	r := sampleRun()
	never := RunResult{Run: 2, Node: "node-b", Timeline: ComputeTimeline(Observed{Start: ts(0), Kill: ts(1), End: ts(3),
		Results: cat(ticks(0, 1, always(okO)), ticks(1, 3, always(ctO)))})}
	rep := Report{Service: "demo/echo", Target: "http://192.0.2.10:80/", Rate: 10, TimeoutS: 1, Mode: "hard",
		Runs:    []RunReport{NewRunReport(r), NewRunReport(never)},
		Summary: NewSummaryJSON(SummarizeRuns([]Timeline{r.Timeline, never.Timeline}))}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"service", "target", "rate", "timeout_seconds", "mode", "runs", "summary", "started_at"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %q at the top", k)
		}
	}
	runs := m["runs"].([]any)
	run1 := runs[0].(map[string]any)
	for _, k := range []string{"run", "killed_node", "new_node", "owner_before", "owner_after", "kill_at", "events",
		"phase1_seconds", "phase2_seconds", "errors_until_seconds", "phase1_complete", "phase2_complete", "requests", "failed", "phases"} {
		if _, ok := run1[k]; !ok {
			t.Errorf("run lacks %q", k)
		}
	}
	if got := run1["phase1_seconds"].(float64); got != 1 {
		t.Errorf("phase1_seconds = %v, want 1", got)
	}
	ev := run1["events"].(map[string]any)
	for k, want := range map[string]float64{"first_error": 0, "owner_change": 0.9, "recovered": 1, "last_error": 4.9, "endpoints_gone": 5, "end": 9} {
		if got, ok := ev[k].(float64); !ok || got != want {
			t.Errorf("events.%s = %v, want %v", k, ev[k], want)
		}
	}
	phases := run1["phases"].(map[string]any)
	p1 := phases["phase1"].(map[string]any)["errors"].(map[string]any)
	if p1["connect-timeout"].(float64) != 5 || p1["refused"].(float64) != 5 {
		t.Errorf("phase1 errors %v", p1)
	}
	for _, p := range []string{"before", "phase1", "phase2", "after"} {
		if _, ok := phases[p]; !ok {
			t.Errorf("no phase %q", p)
		}
	}
	// Absent events are null, not 0: "never happened" is not "at the kill".
	ev2 := runs[1].(map[string]any)["events"].(map[string]any)
	for _, k := range []string{"recovered", "endpoints_gone", "owner_change"} {
		if v, ok := ev2[k]; !ok || v != nil {
			t.Errorf("run 2 events.%s = %v, want null", k, v)
		}
	}
	if runs[1].(map[string]any)["phase1_complete"] != false {
		t.Error("run 2 phase 1 must be incomplete")
	}
	sum := m["summary"].(map[string]any)
	for _, k := range []string{"runs", "phase1_seconds", "phase2_seconds", "errors_until_seconds", "failed_requests", "incomplete_runs", "errors"} {
		if _, ok := sum[k]; !ok {
			t.Errorf("summary lacks %q", k)
		}
	}
	if p := sum["phase1_seconds"].(map[string]any); p["worst"].(float64) != 2 || p["n"].(float64) != 2 {
		t.Errorf("summary phase1 %v", p)
	}
	if strings.Contains(buf.String(), `"000"`) || strings.Contains(buf.String(), `"ok"`) {
		t.Error("no bare 000 and no ok class among errors")
	}
}

func TestWriteTable(t *testing.T) {
	r := sampleRun()
	var buf bytes.Buffer
	if err := WriteTable(&buf, []RunResult{r}, SummarizeRuns([]Timeline{r.Timeline})); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, s := range []string{"KILLED", "node-a", "node-b", "+0.90s", "+5.00s", "1.00s", "4.00s",
		"connect-timeout=5 refused=5", "http-503=20", "phase 1 (kill → answers again)", "failed requests per run"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
}
