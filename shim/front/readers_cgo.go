//go:build cgo

package front

// #include <stdlib.h>
// #include "front.h"
import "C"

import "unsafe"

// The C readers, callable from front_test.go (test files cannot use cgo).
// Unused in sforge-runtime: the linker drops them.

// command returns the index of the subcommand the front would exec for,
// -1 when it leaves the command line to the Go shim.
func command(args []string) int {
	cargs, free := cStrings(args)
	defer free()
	return int(C.sforge_front_command(C.int(len(args)), &cargs[0]))
}

// cStrings copies args into C strings, in a NULL-terminated array (Go
// memory holding C pointers only, which the cgo rules allow passing).
func cStrings(args []string) ([]*C.char, func()) {
	cargs := make([]*C.char, len(args)+1)
	for i, a := range args {
		cargs[i] = C.CString(a)
	}
	return cargs, func() {
		for _, p := range cargs[:len(args)] {
			C.free(unsafe.Pointer(p))
		}
	}
}

// bundle runs the C reader of create/run's arguments (after the
// subcommand); ok false means "not sure".
func bundle(args []string) (dir string, ok bool) {
	cargs, free := cStrings(args)
	defer free()
	var out *C.char
	if C.sforge_front_bundle(C.int(len(args)), &cargs[0], &out) == 0 {
		return "", false
	}
	return C.GoString(out), true
}

// mentions runs the C check of a config.json for sforge's markers.
func mentions(b []byte) bool {
	buf := C.CBytes(b)
	defer C.free(buf)
	return C.sforge_front_mentions((*C.char)(buf), C.size_t(len(b))) != 0
}

// settings are what the C settings reader keeps of the file.
type settings struct {
	runtime, engine, hook string
	hookTimeout           int
	priority              string
}

// config runs the C settings reader; ok false means "not sure".
func config(b []byte) (s settings, ok bool) {
	var c C.struct_sforge_front_cfg
	buf := C.CBytes(b)
	defer C.free(buf)
	if C.sforge_front_config((*C.char)(buf), C.size_t(len(b)), &c) == 0 {
		return settings{}, false
	}
	return settings{C.GoString(&c.runtime[0]), C.GoString(&c.engine[0]), C.GoString(&c.hook[0]), int(c.hook_timeout), C.GoString(&c.priority[0])}, true
}

// hookPath runs the front's choice of the hook it adds to specs (the
// file's, else the one next to this executable); ok false leaves it to Go.
func hookPath(fromFile string) (string, bool) {
	var c C.struct_sforge_front_cfg
	var out [4096]C.char
	if !setChars(c.hook[:], fromFile) || C.sforge_front_hook(&c, &out[0], C.size_t(len(out))) == 0 {
		return "", false
	}
	return C.GoString(&out[0]), true
}

// setChars copies s into the C array dst, NUL-terminated; false when it
// does not fit.
func setChars(dst []C.char, s string) bool {
	if len(s) >= len(dst) {
		return false
	}
	for i := range len(s) {
		dst[i] = C.char(s[i])
	}
	dst[len(s)] = 0
	return true
}

// resolve runs the front's whole settings decision (file, environment,
// self check) in this process: the runtime it execs and whether its
// install window is real-time; ok false means the Go shim decides.
func resolve() (runtime string, realtime, ok bool) {
	var c C.struct_sforge_front_cfg
	if C.sforge_front_runtime(&c) == 0 {
		return "", false, false
	}
	return C.GoString(&c.runtime[0]), C.GoString(&c.priority[0]) != "normal", true
}

// engineNames lists the engines the front accepts.
func engineNames() []string { return list(0) }

// runcLocations lists where the front looks for runc when PATH has none.
func runcLocations() []string { return list(1) }

// priorityNames lists the install priorities the front accepts.
func priorityNames() []string { return list(2) }

func list(which int) []string {
	var l []string
	for i := 0; ; i++ {
		p := C.sforge_front_list(C.int(which), C.int(i))
		if p == nil {
			return l
		}
		l = append(l, C.GoString(p))
	}
}

// planned is the front's plan for an isolated create.
type planned struct {
	id, table, pidFile string
	netns              string // the namespace the spec names, "" for its own
	value              []byte // the allowlist as written in the spec
	endpoints, dns     int
	edited             []byte // the spec to write before runc create, nil for none
	left               string // why the front left the create to Go (not ok)
}

// planEnv is what the front's create decision reads besides the command
// line and config.json: the effective engine, the settings file's hook and
// hookTimeout, $LISTEN_FDS and $SFORGE_HOOK_LOG.
type planEnv struct {
	engine, hook       string
	hookTimeout        int
	listenFDs, hookLog string
}

// planCreate runs the front's create decision on the arguments after
// "create" and a config.json; ok false leaves the create to the Go shim.
func planCreate(args []string, spec []byte, e planEnv) (p planned, ok bool) {
	cargs, free := cStrings(args)
	defer free()
	buf := C.CBytes(spec)
	defer C.free(buf)
	cfg := (*C.struct_sforge_front_cfg)(C.calloc(1, C.sizeof_struct_sforge_front_cfg))
	defer C.free(unsafe.Pointer(cfg))
	if !setChars(cfg.engine[:], e.engine) || !setChars(cfg.hook[:], e.hook) {
		return planned{}, false
	}
	cfg.hook_timeout = C.long(e.hookTimeout)
	clisten, clog := C.CString(e.listenFDs), C.CString(e.hookLog)
	defer C.free(unsafe.Pointer(clisten))
	defer C.free(unsafe.Pointer(clog))
	cp := (*C.struct_sforge_front_plan)(C.calloc(1, C.sizeof_struct_sforge_front_plan))
	defer C.free(unsafe.Pointer(cp))
	if C.sforge_front_plan_create(C.int(len(args)), &cargs[0], (*C.char)(buf), C.size_t(len(spec)), cfg, clisten, clog, cp) == 0 {
		return planned{left: Left()}, false
	}
	var edited []byte
	if cp.edited != nil {
		edited = C.GoBytes(unsafe.Pointer(cp.edited), C.int(cp.edited_n))
		C.free(unsafe.Pointer(cp.edited))
	}
	return planned{
		edited:    edited,
		id:        C.GoString(&cp.id[0]),
		table:     C.GoString(&cp.table[0]),
		pidFile:   C.GoString(cp.pid_file),
		netns:     C.GoString(&cp.netns[0]),
		value:     spec[cp.value_off : cp.value_off+cp.value_n],
		endpoints: int(cp.allow.n_endpoints),
		dns:       int(cp.allow.n_dns),
	}, true
}

// runcLog runs the C reader of runc's --log and --log-format on args (the
// subcommand at cmd); "" for one that is absent.
func runcLog(args []string, cmd int) (log, format string) {
	// The C reader takes the whole command line, program name first.
	cargs, free := cStrings(append([]string{"sforge-runtime"}, args...))
	defer free()
	var clog, cformat *C.char
	C.sforge_front_runc_log(&cargs[0], C.int(cmd+1), &clog, &cformat)
	if clog != nil {
		log = C.GoString(clog)
	}
	if cformat != nil {
		format = C.GoString(cformat)
	}
	return log, format
}
