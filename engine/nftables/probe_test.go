package nftables

import "testing"

func TestParseKernelVersion(t *testing.T) {
	for _, tt := range []struct {
		release string
		want    [2]int
		ok      bool
	}{
		{"6.1.0-18-amd64", [2]int{6, 1}, true},
		{"5.6", [2]int{5, 6}, true},
		{"6.18.44-fc-v857", [2]int{6, 18}, true},
		{"4.19rc1", [2]int{4, 19}, true},
		{"weird", [2]int{}, false},
		{"", [2]int{}, false},
	} {
		got, ok := parseKernelVersion(tt.release)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%q: %v %t, want %v %t", tt.release, got, ok, tt.want, tt.ok)
		}
	}
}
