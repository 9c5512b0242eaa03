package cli

import (
	"strings"
	"testing"
)

// badFlags holds, for every runnable command, command lines whose flags
// (or arguments) are wrong, and what the message must say. Each must exit
// 2 with one error line naming the --help to read, before the command
// reaches a cluster, a file or the network.
var badFlags = map[string][]struct {
	args []string
	want string
}{
	"agent": {
		{[]string{"--node-name=n", "--gossip-port=0"}, "--gossip-port 0"},
		{[]string{"--node-name=n", "--fast-eviction-max-share=2"}, "--fast-eviction-max-share 2"},
		{[]string{"--node-name=n", "--pod-routes=bogus"}, `--pod-routes "bogus"`},
	},
	"agent install-cni":    {{[]string{"--to="}, "--to"}, {[]string{"--network=flannel", "--conf-dir=/c"}, `--network "flannel"`}, {[]string{"--network=ptp"}, "needs --conf-dir"}, {[]string{"--network=ptp", "--conf-dir=/c", "--socket=x.sock"}, "absolute path"}},
	"audit arp":            {{[]string{"-i", "lo", "--wait=0", "192.0.2.1"}, "--wait 0s"}},
	"controller":           {{[]string{"--workers=0"}, "--workers 0"}, {[]string{"--pod-ipam-mode=bogus"}, "bogus"}, {[]string{"--pod-ipam-mode=cluster-pool"}, "needs --cluster-pool-ipv4-cidr"}, {[]string{"--pod-ipam-mode=cluster-pool", "--cluster-pool-ipv4-cidr=nope"}, `--cluster-pool-ipv4-cidr "nope"`}},
	"doctor":               {{[]string{"-o", "xml"}, `-o "xml"`}, {[]string{"--node-subnet=nope"}, `--node-subnet "nope"`}, {[]string{"--agent-metrics-port=70000"}, "--agent-metrics-port 70000"}},
	"failover":             {{[]string{"echo", "--soft", "--runs", "0"}, "--runs 0"}, {[]string{"echo", "--soft", "--rate", "0"}, "--rate 0"}, {[]string{"echo", "--soft", "--scheme", "ftp"}, `--scheme "ftp"`}, {[]string{"echo", "--soft", "--node-mac", "bogus"}, "bogus"}, {[]string{"echo"}, "--kill-command"}, {[]string{"echo", "--soft", "--address", "nope"}, `--address "nope"`}},
	"import":               {{[]string{"foo", "-f", "x.yaml"}, `unknown source "foo"`}, {nil, "say what to import from"}},
	"import metallb":       {{[]string{"-f", "x.yaml", "-o", "xml"}, `-o "xml"`}, {nil, "nothing to import"}, {[]string{"-f", "x.yaml", "--from-cluster"}, "not both"}},
	"import cilium":        {{[]string{"-f", "x.yaml", "-o", "xml"}, `-o "xml"`}, {nil, "nothing to import"}},
	"lab up":               {{[]string{"--nodes", "100"}, "--nodes 100"}, {[]string{"--pod-ipam=bogus"}, `--pod-ipam "bogus"`}, {[]string{"--fault=slow-new-pods=10s@node-9"}, `no node "node-9"`}, {[]string{"--fault=slow-new-pods=fast"}, `"fast" is not a positive duration`}, {[]string{"--install=bogus"}, `--install "bogus"`}, {[]string{"--timeout=0"}, "--timeout"}, {[]string{"--install=chart", "--no-mooring"}, "--no-mooring"}},
	"lab down":             {{[]string{"extra"}, "unknown command"}},
	"lab exec":             {{[]string{"node-1"}, "command"}},
	"lab kill":             {{nil, "arg"}},
	"lab restore":          {{nil, "arg"}},
	"lab netns":            {{nil, "arg"}},
	"lab status":           {{[]string{"extra"}, "unknown command"}},
	"migrate metallb plan": {{[]string{"-o", "xml"}, `-o "xml"`}, {[]string{"--probe", "nope"}, `--probe "nope"`}},
	"migrate metallb run":  {{[]string{"--check-timeout=0"}, "--check-timeout 0s"}},
	"podipam migrate":      {{[]string{"--to=kubernetes"}, "--to=kubernetes"}, {[]string{"--to=multi-pool", "--cluster-pool-ipv4-cidr=nope"}, `"nope"`}, {[]string{"--to=multi-pool", "--wait", "--timeout=0"}, "--timeout 0s"}},
	"probe new-pod":        {{[]string{"--via=pigeon"}, `--via "pigeon"`}, {[]string{"--pairs=0"}, "--pairs 0"}, {[]string{"--nodes=a"}, "exactly two nodes"}, {[]string{"--port=0"}, "--port 0"}},
	"status":               {{[]string{"-o", "xml"}, `-o "xml"`}, {[]string{"--since=-1s"}, "--since -1s"}},
	"version":              {{[]string{"extra"}, "unknown command"}},
}

// Every runnable command checks its flags before it acts: a wrong value is
// a usage error (exit 2, the --help to read), never a failure (exit 1)
// after a cluster or a lab was reached. A command added without a line in
// badFlags fails here.
func TestEveryCommandChecksItsFlags(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range allCommands() {
		if !c.Runnable() || c.Hidden || c == c.Root() {
			continue
		}
		path := strings.TrimPrefix(c.CommandPath(), Name+" ")
		seen[path] = true
		cases, ok := badFlags[path]
		if !ok {
			t.Errorf("mooring %s: no wrong command lines in badFlags: add its flag checks (PreRunE) and lines that break them", path)
			continue
		}
		for _, tc := range cases {
			argv := append(append([]string{Name}, strings.Fields(path)...), tc.args...)
			code, stdout, stderr := runCLI(t, argv...)
			what := strings.Join(argv, " ")
			checkUsageError(t, what, code, stdout, stderr)
			if !strings.Contains(stderr, "Run 'mooring "+path+" --help' for usage.") {
				t.Errorf("%s: the --help named is not the command's own:\n%s", what, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("%s: stderr lacks %q:\n%s", what, tc.want, stderr)
			}
		}
	}
	for path := range badFlags {
		if !seen[path] {
			t.Errorf("badFlags names %q, which is not a runnable command", path)
		}
	}
}
