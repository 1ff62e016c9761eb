//go:build cgo

package cfronttest

// #cgo CFLAGS: -I${SRCDIR}/.. -Wall -Wextra -Werror
// #include <stdlib.h>
// #include "allow.h"
//
// // Go strings may hold NULs: the C gets them with their length, copied
// // into C memory of exactly that length (an empty string: one byte, so
// // that it is not a nil pointer), where -asan sees any read past it. The
// // caller frees the copy.
// static char *cfronttest_copy(_GoString_ s, size_t *n) {
// 	*n = _GoStringLen(s);
// 	char *p = malloc(*n ? *n : 1);
// 	if (!p)
// 		abort();
// 	for (size_t i = 0; i < *n; i++)
// 		p[i] = _GoStringPtr(s)[i];
// 	return p;
// }
//
// static int cfronttest_decode(_GoString_ s, struct cfront_allowlist *a) {
// 	size_t n;
// 	char *p = cfronttest_copy(s, &n);
// 	int ok = cfront_allow_decode(p, n, a);
// 	free(p);
// 	return ok;
// }
//
// static size_t cfronttest_chain_name(_GoString_ s, char *out, size_t cap) {
// 	size_t n;
// 	char *p = cfronttest_copy(s, &n);
// 	size_t k = cfront_chain_name(p, n, out, cap);
// 	free(p);
// 	return k;
// }
//
// static void cfronttest_sha256(_GoString_ s, uint8_t sum[32]) {
// 	size_t n;
// 	char *p = cfronttest_copy(s, &n);
// 	cfront_sha256(p, n, sum);
// 	free(p);
// }
import "C"

import (
	"net/netip"
	"strconv"
	"unsafe"

	// The C under test: its package embeds the headers, so a change to
	// allow.h rebuilds this one.
	_ "github.com/sforge-dev/netiso/internal/cfront"
	"github.com/sforge-dev/netiso/policy"
)

// Decode runs cfront_allow_decode on value. ok false means the C refused
// it (Go's Decode must refuse it too: allow.h leaves no valid value to Go). The
// allowlist is the C's, converted as it stands, in the C's order, with no
// validation, so that a test sees whatever the C produced: endpoints as
// policy.Endpoint values (not through NewEndpoint, which would repair or
// refuse them), the action explicit as in Canonical's result.
func Decode(value string) (a policy.Allowlist, ok bool) {
	c := (*C.struct_cfront_allowlist)(C.malloc(C.sizeof_struct_cfront_allowlist))
	defer C.free(unsafe.Pointer(c))
	if C.cfronttest_decode(value, c) == 0 {
		if c.n_endpoints != 0 || c.n_dns != 0 || c.drop != 0 {
			panic("cfront_allow_decode refused a value but left an allowlist behind")
		}
		return policy.Allowlist{}, false
	}
	for i := 0; i < int(c.n_endpoints); i++ {
		e := c.endpoints[i]
		var addr [4]byte
		for j := range addr {
			addr[j] = byte(e.addr[j])
		}
		var proto policy.Protocol
		switch e.proto {
		case 6:
			proto = policy.TCP
		case 17:
			proto = policy.UDP
		default:
			proto = policy.Protocol("ipproto-" + strconv.Itoa(int(e.proto)))
		}
		a.Endpoints = append(a.Endpoints, policy.Endpoint{
			Prefix: netip.PrefixFrom(netip.AddrFrom4(addr), int(e.bits)),
			Proto:  proto,
			Port:   uint16(e.port),
		})
	}
	for i := 0; i < int(c.n_dns); i++ {
		var addr [4]byte
		for j := range addr {
			addr[j] = byte(c.dns[i][j])
		}
		a.DNS = append(a.DNS, netip.AddrFrom4(addr))
	}
	switch c.drop {
	case 0:
		a.Action = policy.Reject
	case 1:
		a.Action = policy.Drop
	default:
		a.Action = policy.Action("drop=" + strconv.Itoa(int(c.drop)))
	}
	return a, true
}

// ChainName runs cfront_chain_name on id with a buffer of cap bytes. ok
// false means it returned 0.
func ChainName(id string, cap int) (name string, ok bool) {
	out := (*C.char)(C.malloc(C.size_t(cap + 1)))
	defer C.free(unsafe.Pointer(out))
	n := C.cfronttest_chain_name(id, out, C.size_t(cap))
	if n == 0 {
		return "", false
	}
	if int(n) >= cap {
		panic("cfront_chain_name wrote past its buffer")
	}
	name = C.GoStringN(out, C.int(n))
	if C.GoStringN(out, C.int(n+1))[n] != 0 {
		panic("cfront_chain_name did not terminate the name")
	}
	return name, true
}

// SHA256 runs cfront_sha256 on b.
func SHA256(b []byte) [32]byte {
	var c [32]C.uint8_t
	C.cfronttest_sha256(string(b), &c[0])
	var sum [32]byte
	for i, x := range c {
		sum[i] = byte(x)
	}
	return sum
}
