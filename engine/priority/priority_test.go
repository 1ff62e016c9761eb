package priority

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for v, want := range map[string]string{"": Realtime, "realtime": Realtime, "normal": Normal} {
		got, err := Parse(v, "$"+EnvVar)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", v, got, err, want)
		}
	}
	for _, v := range []string{"Realtime", "fifo", " normal", "normal\n"} {
		_, err := Parse(v, "$"+EnvVar)
		if err == nil || !strings.Contains(err.Error(), "$"+EnvVar) || !strings.Contains(err.Error(), "realtime, normal") {
			t.Errorf("Parse(%q): %v; want an error naming the source and the allowed values", v, err)
		}
	}
}
