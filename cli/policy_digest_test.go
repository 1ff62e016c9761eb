package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sforge-dev/netiso/engine/nftables"
	"github.com/sforge-dev/netiso/policy"
)

func TestPolicyDigest(t *testing.T) {
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		root := NewRootCommand(Streams{Out: &out, ErrOut: &bytes.Buffer{}})
		root.SetArgs(append([]string{"policy", "digest"}, args...))
		err := root.Execute()
		return strings.TrimSpace(out.String()), err
	}
	a, _ := policy.Decode("v1;tcp:198.51.100.10:8080")
	want, _ := nftables.New().Digest(a)
	if got, err := run("v1;tcp:198.51.100.10:8080"); err != nil || got != want {
		t.Fatalf("digest %q, %v; want %q", got, err, want)
	}
	if got, err := run("--engine", "iptables-nft", "v1;tcp:198.51.100.10:8080"); err != nil || got == want || len(got) != 64 {
		t.Fatalf("iptables digest %q, %v", got, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"v1;tcp:nope"}, "ALLOWLIST"},
		{[]string{"--engine", "auto", "v1"}, "--engine"},
		{[]string{"--engine", "bpf", "v1"}, "--engine"},
	} {
		if _, err := run(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}
