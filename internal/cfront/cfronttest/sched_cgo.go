//go:build cgo

package cfronttest

// #cgo CFLAGS: -I${SRCDIR}/.. -Wall -Wextra -Werror
// #include "cfront.h"
//
// #include <unistd.h>
//
// // cfronttest_run_delay reads the calling thread's wait as the fronts do:
// // open before, one pread in the window. -2: no file.
// static long long cfronttest_run_delay(void) {
// 	int fd = cfront_schedstat_open();
// 	if (fd < 0)
// 		return -2;
// 	long long d = cfront_run_delay(fd);
// 	close(fd);
// 	return d;
// }
//
// static void cfronttest_queued(long long before, long long after, char *out, size_t cap) {
// 	cfront_queued(out, cap, before, after);
// }
import "C"

import (
	"time"
	"unsafe"
)

// RunDelay runs cfront_schedstat_open and cfront_run_delay on the calling
// thread (lock it first): its time on the run queue so far, ok false where
// the C could not read it.
func RunDelay() (d time.Duration, ok bool) {
	ns := C.cfronttest_run_delay()
	return time.Duration(ns), ns >= 0
}

// Queued runs cfront_queued: the field the fronts add to their install
// lines for two readings of cfront_run_delay, in a buffer of cap bytes.
func Queued(before, after int64, cap int) string {
	buf := (*C.char)(C.malloc(C.size_t(cap)))
	defer C.free(unsafe.Pointer(buf))
	C.cfronttest_queued(C.longlong(before), C.longlong(after), buf, C.size_t(cap))
	return C.GoString(buf)
}
