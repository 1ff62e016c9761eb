package hook

import (
	"fmt"
	"strings"
)

// Stages of the OCI runtime-spec the hook serves. createRuntime runs in the
// runtime's namespaces after the container's were created and before
// pivot_root, so the rules are in place before the process can run;
// prestart is its deprecated predecessor, still used by older runtimes.
const (
	StageCreateRuntime = "createRuntime"
	StagePrestart      = "prestart"
	StagePoststop      = "poststop"
)

// DefaultLogPath is where the hook appends its log lines.
const DefaultLogPath = "/var/log/sforge/hook.log"

// LogEnv overrides DefaultLogPath; the --log argument overrides both.
const LogEnv = "SFORGE_HOOK_LOG"

// Options come from the hook's arguments and environment.
type Options struct {
	Stage   string
	LogPath string
	// Engine is "auto", "iptables", "iptables-nft" or "iptables-legacy".
	Engine string
}

// Usage is the one-line synopsis printed with argument errors.
const Usage = "usage: sforge-hook createRuntime|prestart|poststop [--log FILE] [--engine auto|iptables|iptables-nft|iptables-legacy]"

// ParseArgs parses the arguments after the program name. They are few and
// fixed, so they are parsed by hand: a flag library would only add start-up
// time to every container start.
func ParseArgs(args []string, getenv func(string) string) (Options, error) {
	o := Options{LogPath: DefaultLogPath, Engine: "auto"}
	if v := getenv(LogEnv); v != "" {
		o.LogPath = v
	}
	if len(args) == 0 {
		return o, fmt.Errorf("missing stage (want %s, %s or %s)", StageCreateRuntime, StagePrestart, StagePoststop)
	}
	switch o.Stage = args[0]; o.Stage {
	case StageCreateRuntime, StagePrestart, StagePoststop:
	default:
		return o, fmt.Errorf("unknown stage %q (want %s, %s or %s)", o.Stage, StageCreateRuntime, StagePrestart, StagePoststop)
	}
	for i := 1; i < len(args); i++ {
		name, value, hasValue := strings.Cut(args[i], "=")
		switch name {
		case "--log", "--engine":
		default:
			return o, fmt.Errorf("unknown argument %q", args[i])
		}
		if !hasValue {
			if i+1 == len(args) {
				return o, fmt.Errorf("%s needs a value", name)
			}
			i++
			value = args[i]
		}
		if value == "" {
			return o, fmt.Errorf("%s needs a value", name)
		}
		switch name {
		case "--log":
			o.LogPath = value
		case "--engine":
			switch value {
			case "auto", "iptables", "iptables-nft", "iptables-legacy":
				o.Engine = value
			default:
				return o, fmt.Errorf("unknown engine %q for --engine (allowed: auto, iptables, iptables-nft, iptables-legacy)", value)
			}
		}
	}
	return o, nil
}
