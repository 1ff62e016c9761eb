//go:build cgo

package front

// #include <stdlib.h>
// #include "front.h"
import "C"

import (
	"fmt"
	"net/netip"
	"unsafe"

	"github.com/sforge-dev/netiso/policy"
)

// The C readers, callable from front_test.go (test files cannot use cgo).
// Unused in sforge-hook: the linker drops them.

// args reports whether the front reads args (after the program name) as a
// poststop it may end.
func args(a []string) bool {
	if len(a) == 0 {
		return C.sforge_hook_front_args(0, nil) != 0
	}
	cargs := make([]*C.char, len(a)+1)
	for i, s := range a {
		cargs[i] = C.CString(s)
	}
	defer func() {
		for _, p := range cargs[:len(a)] {
			C.free(unsafe.Pointer(p))
		}
	}()
	return C.sforge_hook_front_args(C.int(len(a)), &cargs[0]) != 0
}

// opts runs the front's reading of the arguments (after the program name)
// and the environment: the stage it takes ("" for none), the engine, the
// log, and whether the install window is real-time.
func opts(a []string) (stage, engine, log string, realtime bool) {
	cargs := make([]*C.char, len(a)+1)
	for i, s := range a {
		cargs[i] = C.CString(s)
		defer C.free(unsafe.Pointer(cargs[i]))
	}
	var e, l *C.char
	var rt C.int
	switch C.sforge_hook_front_opts(C.int(len(a)), &cargs[0], &e, &l, &rt) {
	case 1:
		stage = "install"
	case 2:
		stage = "poststop"
	default:
		return "", "", "", false
	}
	return stage, C.GoString(e), C.GoString(l), rt != 0
}

// cBytes copies b into C memory (one byte more, so that an empty b is not
// a nil pointer).
func cBytes(b []byte) (*C.char, func()) {
	p := C.malloc(C.size_t(len(b) + 1))
	copy(unsafe.Slice((*byte)(p), len(b)+1), b)
	return (*C.char)(p), func() { C.free(p) }
}

// state runs the C reader of the OCI state; ok false means "not sure".
func state(b []byte) (bundle string, ok bool) {
	buf, free := cBytes(b)
	defer free()
	var out [4096]C.char
	if C.sforge_hook_front_state(buf, C.size_t(len(b)), &out[0], C.size_t(len(out))) == 0 {
		return "", false
	}
	return C.GoString(&out[0]), true
}

// spec runs the C reader of a config.json: whether it has a network
// namespace, and its path; ok false means "not sure".
func spec(b []byte) (net bool, path string, ok bool) {
	buf, free := cBytes(b)
	defer free()
	var out [4096]C.char
	var n C.int
	if C.sforge_hook_front_spec(buf, C.size_t(len(b)), &n, &out[0], C.size_t(len(out))) == 0 {
		return false, "", false
	}
	return n != 0, C.GoString(&out[0]), true
}

// idle runs the front's whole decision on a state (the bundle's config.json
// and the namespace path read from the file system).
func idle(b []byte) bool {
	buf, free := cBytes(b)
	defer free()
	return C.sforge_hook_front_idle(buf, C.size_t(len(b))) != 0
}

// decisionInput is a decision's arguments in C memory: the state, the
// engine and the NULL-terminated list of the host's namespaces.
type decisionInput struct {
	buf    *C.char
	n      C.size_t
	engine *C.char
	host   []*C.char
	free   func()
}

func newDecisionInput(b []byte, engine string, host []string) decisionInput {
	buf, freeBuf := cBytes(b)
	in := decisionInput{buf: buf, n: C.size_t(len(b)), engine: C.CString(engine), host: make([]*C.char, len(host)+1)}
	for i, h := range host {
		in.host[i] = C.CString(h)
	}
	in.free = func() {
		freeBuf()
		C.free(unsafe.Pointer(in.engine))
		for _, h := range in.host[:len(host)] {
			C.free(unsafe.Pointer(h))
		}
	}
	return in
}

// decision is what the front decided for a createRuntime.
type decision struct {
	kind  int // decideGo, decideNothing, decideInstall
	id    string
	netns string
	table string
	allow policy.Allowlist
}

const (
	decideGo      = C.DECIDE_GO
	decideNothing = C.DECIDE_NOTHING
	decideInstall = C.DECIDE_INSTALL
)

// decide runs the front's createRuntime decision on a state, with engine
// and the namespaces a container must not share (host).
func decide(b []byte, engine string, host []string) decision {
	in := newDecisionInput(b, engine, host)
	defer in.free()
	d := (*C.struct_sforge_hook_decision)(C.calloc(1, C.sizeof_struct_sforge_hook_decision))
	defer C.free(unsafe.Pointer(d))
	kind := int(C.sforge_hook_front_decide(in.buf, in.n, in.engine, &in.host[0], d))
	if kind != decideInstall {
		return decision{kind: kind}
	}
	return decision{
		kind:  kind,
		id:    C.GoString(&d.id[0]),
		netns: C.GoString(&d.netns[0]),
		table: C.GoString(&d.table[0]),
		allow: goAllowlist(&d.allow),
	}
}

// removal is what the front decided for a poststop.
type removal struct {
	kind  int // removeGo, removeNothing, removeTable
	id    string
	netns string
	table string
}

const (
	removeGo      = C.REMOVE_GO
	removeNothing = C.REMOVE_NOTHING
	removeTable   = C.REMOVE_TABLE
)

// decideRemove runs the front's poststop decision on a state, with engine
// and the namespaces a container must not share (host).
func decideRemove(b []byte, engine string, host []string) removal {
	in := newDecisionInput(b, engine, host)
	defer in.free()
	d := (*C.struct_sforge_hook_removal)(C.calloc(1, C.sizeof_struct_sforge_hook_removal))
	defer C.free(unsafe.Pointer(d))
	kind := int(C.sforge_hook_front_decide_remove(in.buf, in.n, in.engine, &in.host[0], d))
	if kind != removeTable {
		return removal{kind: kind}
	}
	return removal{kind: kind, id: C.GoString(&d.id[0]), netns: C.GoString(&d.netns[0]), table: C.GoString(&d.table[0])}
}

// goAllowlist converts the C allowlist. An endpoint NewEndpoint refuses
// becomes one with an invalid prefix, so that a comparison fails.
func goAllowlist(c *C.struct_cfront_allowlist) policy.Allowlist {
	var a policy.Allowlist
	for _, e := range c.endpoints[:c.n_endpoints] {
		addr := netip.AddrFrom4([4]byte{byte(e.addr[0]), byte(e.addr[1]), byte(e.addr[2]), byte(e.addr[3])})
		proto := policy.TCP
		if e.proto == 17 {
			proto = policy.UDP
		} else if e.proto != 6 {
			proto = policy.Protocol(fmt.Sprint("proto-", e.proto))
		}
		ep, err := policy.NewEndpoint(netip.PrefixFrom(addr, int(e.bits)), proto, uint16(e.port))
		if err != nil {
			ep = policy.Endpoint{Proto: proto, Port: uint16(e.port)}
		}
		a.Endpoints = append(a.Endpoints, ep)
	}
	for _, d := range c.dns[:c.n_dns] {
		a.DNS = append(a.DNS, netip.AddrFrom4([4]byte{byte(d[0]), byte(d[1]), byte(d[2]), byte(d[3])}))
	}
	a.Action = policy.Reject
	if c.drop != 0 {
		a.Action = policy.Drop
	}
	return a
}
