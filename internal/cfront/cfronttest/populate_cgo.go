//go:build cgo

package cfronttest

// #cgo CFLAGS: -I${SRCDIR}/.. -Wall -Wextra -Werror
// #include "cfront.h"
//
// #include <sys/mman.h>
// #include <sys/resource.h>
//
// // cfronttest_touch_faults maps pages fresh anonymous pages, populates
// // them with cfront_populate (a range that starts and ends inside a
// // page) when populate is set, then writes one byte in each and returns
// // the minor page faults the writes took; -1 when nothing was mapped.
// static long cfronttest_touch_faults(size_t pages, int populate) {
// 	size_t n = pages * 4096;
// 	char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
// 	if (p == MAP_FAILED)
// 		return -1;
// 	if (populate)
// 		cfront_populate(p + 100, n - 200);
// 	struct rusage r0, r1;
// 	getrusage(RUSAGE_THREAD, &r0);
// 	for (size_t i = 0; i < pages; i++)
// 		((volatile char *)p)[i * 4096 + 7] = 1;
// 	getrusage(RUSAGE_THREAD, &r1);
// 	munmap(p, n);
// 	return r1.ru_minflt - r0.ru_minflt;
// }
import "C"

// TouchFaults maps pages fresh pages, populated first with cfront_populate
// when populate is set, writes to each and returns the page faults the
// writes took (-1 when nothing could be mapped).
func TouchFaults(pages int, populate bool) int {
	p := C.int(0)
	if populate {
		p = 1
	}
	return int(C.cfronttest_touch_faults(C.size_t(pages), p))
}
