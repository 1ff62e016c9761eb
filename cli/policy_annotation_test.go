package cli

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sforge-dev/netiso/policy"
)

type tableResolver map[string][]netip.Addr

func (r tableResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

var testResolver = tableResolver{
	"api.example.com": {netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("203.0.113.8")},
	"v6.example.com":  {netip.MustParseAddr("2001:db8::1")},
}

func runPolicyAnnotation(args ...string) (string, error) {
	var out bytes.Buffer
	cmd := newCmdPolicyAnnotation(Streams{Out: &out, ErrOut: &out}, testResolver)
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// TestPolicyAnnotationRoundTrip: the printed line decodes back to exactly
// the allowlist given on the command line.
func TestPolicyAnnotationRoundTrip(t *testing.T) {
	tests := []struct {
		args   []string
		prefix string
		want   policy.Allowlist
	}{
		{
			args:   []string{"--judge-url", "http://198.51.100.10:8080", "--api-url", "https://api.example.com/v1", "--dns", "10.96.0.10"},
			prefix: policy.AnnotationKey + "=",
			want: policy.Allowlist{
				Endpoints: []policy.Endpoint{
					must(policy.HostEndpoint(netip.MustParseAddr("198.51.100.10"), policy.TCP, 8080)),
					must(policy.HostEndpoint(netip.MustParseAddr("203.0.113.7"), policy.TCP, 443)),
					must(policy.HostEndpoint(netip.MustParseAddr("203.0.113.8"), policy.TCP, 443)),
				},
				DNS: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
			},
		},
		{
			args:   []string{"--judge-url", "http://198.51.100.10", "--env", "--action", "drop"},
			prefix: policy.EnvVar + "=",
			want: policy.Allowlist{
				Endpoints: []policy.Endpoint{must(policy.HostEndpoint(netip.MustParseAddr("198.51.100.10"), policy.TCP, 80))},
				Action:    policy.Drop,
			},
		},
		{
			args:   []string{"--judge-url", "http://198.51.100.10", "--api-url", "https://api.example.com", "--own-resolver"},
			prefix: policy.AnnotationKey + "=",
			want: policy.Allowlist{
				Endpoints: []policy.Endpoint{
					must(policy.HostEndpoint(netip.MustParseAddr("198.51.100.10"), policy.TCP, 80)),
					must(policy.HostEndpoint(netip.MustParseAddr("203.0.113.7"), policy.TCP, 443)),
					must(policy.HostEndpoint(netip.MustParseAddr("203.0.113.8"), policy.TCP, 443)),
				},
				Resolver: policy.DefaultResolver,
				Names: []policy.Name{
					{Host: "api.example.com", Addr: netip.MustParseAddr("203.0.113.7")},
					{Host: "api.example.com", Addr: netip.MustParseAddr("203.0.113.8")},
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, err := runPolicyAnnotation(tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
				t.Fatalf("want exactly one line, got %q", out)
			}
			value, ok := strings.CutPrefix(strings.TrimSuffix(out, "\n"), tt.prefix)
			if !ok {
				t.Fatalf("output %q does not start with %q", out, tt.prefix)
			}
			got, err := policy.Decode(value)
			if err != nil {
				t.Fatalf("output does not decode: %v", err)
			}
			if !got.Equal(tt.want) {
				t.Fatalf("decoded %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestPolicyAnnotationErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, "--judge-url is required"},
		{[]string{"--judge-url", "ftp://x"}, `--judge-url "ftp://x": has scheme "ftp"`},
		{[]string{"--judge-url", "http://a:1", "--api-url", "http://u:p@b"}, `--api-url "http://u:p@b": carries credentials`},
		{[]string{"--judge-url", "http://a.invalid:1"}, "--judge-url: cannot resolve a.invalid"},
		{[]string{"--judge-url", "http://v6.example.com"}, "no IPv4 address"},
		{[]string{"--judge-url", "http://1.2.3.4", "--dns", "::1"}, `--dns "::1": want an IPv4 address`},
		{[]string{"--judge-url", "http://1.2.3.4", "--action", "allow"}, `--action: unknown action "allow"`},
		{[]string{"--judge-url", "http://1.2.3.4", "--resolve-timeout", "0s"}, "--resolve-timeout must be positive"},
		{[]string{"--judge-url", "http://1.2.3.4", "extra"}, `unknown command "extra"`},
		{[]string{"--judge-url", "http://1.2.3.4", "--own-resolver=10.0.0.1"}, `--own-resolver "10.0.0.1": want an IPv4 loopback address`},
		{[]string{"--judge-url", "http://1.2.3.4", "--own-resolver=127.0.0.11"}, `--own-resolver: resolver 127.0.0.11: that is Docker's embedded resolver`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := runPolicyAnnotation(tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want %q", err, tt.want)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestPolicyAnnotationCompose: --compose prints an override that isolates
// exactly the named services the way sforge run isolates a container.
func TestPolicyAnnotationCompose(t *testing.T) {
	out, err := runPolicyAnnotation("--compose", "default", "--compose", "tools", "--own-resolver",
		"--judge-url", "http://198.51.100.10:8080", "--api-url", "https://api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Runtime     string            `json:"runtime"`
			CapDrop     []string          `json:"cap_drop"`
			Environment map[string]string `json:"environment"`
			ExtraHosts  []string          `json:"extra_hosts"`
			DNS         []string          `json:"dns"`
			DNSSearch   []string          `json:"dns_search"`
		} `json:"services"`
	}
	if err := yaml.UnmarshalStrict([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := "v1;tcp:198.51.100.10:8080;tcp:203.0.113.7:443;tcp:203.0.113.8:443;resolver:127.0.0.53;name:api.example.com=203.0.113.7;name:api.example.com=203.0.113.8"
	if len(doc.Services) != 2 {
		t.Fatalf("services %v, want default and tools", doc.Services)
	}
	for name, s := range doc.Services {
		if s.Runtime != "sforge" || !slices.Equal(s.CapDrop, []string{"NET_RAW"}) || s.Environment[policy.EnvVar] != want ||
			!slices.Equal(s.ExtraHosts, []string{"api.example.com:203.0.113.7", "api.example.com:203.0.113.8"}) ||
			!slices.Equal(s.DNS, []string{"127.0.0.53"}) || !slices.Equal(s.DNSSearch, []string{"."}) {
			t.Errorf("service %s: %+v", name, s)
		}
	}
	if !strings.HasPrefix(out, "# sforge: network isolation for default, tools") {
		t.Errorf("no header comment:\n%s", out)
	}
	for args, wantErr := range map[string]string{
		"--compose default --env": "--env and --compose both choose the output: give one",
		"--compose no/slash":      `--compose "no/slash": not a Compose service name`,
	} {
		if _, err := runPolicyAnnotation(append(strings.Fields(args), "--judge-url", "http://198.51.100.10:8080")...); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: %v, want %q", args, err, wantErr)
		}
	}
}
