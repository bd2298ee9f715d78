// Package nativebench runs select+report loops entirely in C, with no Go in
// the loop, so a Go benchmark can show in the same run how much of a
// Select+Report through the binding is the library's own work and how much
// is the cgo crossing. It is test infrastructure, not API.
package nativebench

/*
#cgo CFLAGS: -I${SRCDIR}/../../../../include
#cgo linux LDFLAGS: ${SRCDIR}/../../../../target/release/libpolylb.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
#cgo darwin LDFLAGS: ${SRCDIR}/../../../../target/release/libpolylb.a -liconv -lSystem -lc -lm
#cgo windows LDFLAGS: ${SRCDIR}/../../../../target/release/libpolylb.a -lkernel32 -lntdll -luserenv -lws2_32 -ldbghelp
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "polylb.h"

// The same set as the Go benchmarks: n invokers 10.0.0.i:20880, weight 10*i.
static int32_t nativebench_setup(const char *config, int n, plb_balancer **out, uint32_t *method) {
	char err[256];
	size_t err_len;
	int32_t rc = plb_balancer_new((const uint8_t *)config, strlen(config), out, err, sizeof err, &err_len);
	if (rc != PLB_OK) return rc;
	plb_invoker invokers[64];
	char addresses[64][32];
	if (n > 64) n = 64;
	for (int i = 0; i < n; i++) {
		int len = snprintf(addresses[i], sizeof addresses[i], "10.0.0.%d:20880", i + 1);
		invokers[i] = (plb_invoker){ .id = (uint64_t)i + 1, .address = (const uint8_t *)addresses[i],
			.address_len = (size_t)len, .weight = 10 * (i + 1), .start_time_ms = 0, .warmup_ms = -1 };
	}
	rc = plb_balancer_update(*out, invokers, (size_t)n, err, sizeof err, &err_len);
	if (rc != PLB_OK) return rc;
	return plb_balancer_method(*out, (const uint8_t *)"sayHello", 8, method);
}

static int64_t nativebench_loop(const plb_balancer *b, uint32_t method, const char *key, long iterations) {
	size_t key_len = strlen(key);
	for (long i = 0; i < iterations; i++) {
		int64_t id = plb_select(b, method, (const uint8_t *)key, key_len, 0);
		if (id < 0) return id;
		int32_t rc = plb_report(b, method, (uint64_t)id, 1000, PLB_OUTCOME_SUCCESS, 0);
		if (rc != PLB_OK) return -rc;
	}
	return 0;
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Loop is a balancer driven from C.
type Loop struct {
	handle *C.plb_balancer
	method C.uint32_t
	key    *C.char
}

// New builds a balancer from config with invokers providers weighted
// 10, 20, …, as the Go benchmarks do.
func New(config string, invokers int, key string) (*Loop, error) {
	cConfig := C.CString(config)
	defer C.free(unsafe.Pointer(cConfig))
	l := &Loop{key: C.CString(key)}
	if rc := C.nativebench_setup(cConfig, C.int(invokers), &l.handle, &l.method); rc != C.PLB_OK {
		return nil, fmt.Errorf("nativebench: setup failed with status %d", rc)
	}
	return l, nil
}

// Run does iterations select+report pairs in one C loop.
func (l *Loop) Run(iterations int) error {
	if rc := C.nativebench_loop(l.handle, l.method, l.key, C.long(iterations)); rc != 0 {
		return fmt.Errorf("nativebench: status %d", -rc)
	}
	return nil
}

// Close frees the balancer.
func (l *Loop) Close() {
	C.plb_balancer_free(l.handle)
	C.free(unsafe.Pointer(l.key))
}
