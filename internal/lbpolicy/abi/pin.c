// pin.c: hl_pin, which keeps the module mapped for the life of the process.
#define _GNU_SOURCE
#include <dlfcn.h>

#include "hashlb_abi.h"

// hl_pin makes the library never unload (dlopen(3): RTLD_NODELETE on a
// library already loaded, found with RTLD_NOLOAD).
void hl_pin(void) {
	Dl_info info;
	if (dladdr((void*)hl_pin, &info) && info.dli_fname != 0) {
		dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
	}
}
