/*
 * Copyright 2016-2017, Intel Corporation
 *
 * Redistribution and use in source and binary forms, with or without
 * modification, are permitted provided that the following conditions
 * are met:
 *
 *     * Redistributions of source code must retain the above copyright
 *       notice, this list of conditions and the following disclaimer.
 *
 *     * Redistributions in binary form must reproduce the above copyright
 *       notice, this list of conditions and the following disclaimer in
 *       the documentation and/or other materials provided with the
 *       distribution.
 *
 *     * Neither the name of the copyright holder nor the names of its
 *       contributors may be used to endorse or promote products derived
 *       from this software without specific prior written permission.
 *
 * THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS
 * "AS IS" AND ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT
 * LIMITED TO, THE IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR
 * A PARTICULAR PURPOSE ARE DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT
 * OWNER OR CONTRIBUTORS BE LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL,
 * SPECIAL, EXEMPLARY, OR CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT
 * LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR SERVICES; LOSS OF USE,
 * DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND ON ANY
 * THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY, OR TORT
 * (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE
 * OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
 */

/*
 * intercept.c - The entry point of libsyscall_intercept, and some of
 * the main logic.
 *
 * intercept() - the library entry point
 * intercept_routine() - the entry point for each hooked syscall
 */

#include <assert.h>
#include <stdbool.h>
#include <elf.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <inttypes.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syscall.h>
#include <sys/mman.h>
#include <stdarg.h>
#include <sys/auxv.h>

#include "intercept.h"
#include "intercept_log.h"
#include "intercept_util.h"
#include "libsyscall_intercept_hook_point.h"
#include "disasm_wrapper.h"
#include "magic_syscalls.h"

int (*intercept_hook_point)(long syscall_number,
			long arg0, long arg1,
			long arg2, long arg3,
			long arg4, long arg5,
			long *result)
	__attribute__((visibility("default")));

void (*intercept_hook_point_clone_child)(void)
	__attribute__((visibility("default")));
void (*intercept_hook_point_clone_parent)(long)
	__attribute__((visibility("default")));

bool debug_dumps_on;

void
debug_dump(const char *fmt, ...)
{
	int len;
	va_list ap;

	if (!debug_dumps_on)
		return;

	va_start(ap, fmt);
	len = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);

	if (len <= 0)
		return;

	char buf[len + 1];

	va_start(ap, fmt);
	len = vsprintf(buf, fmt, ap);
	va_end(ap);

	syscall_no_intercept(SYS_write, 2, buf, len);
}

static void log_header(void);

void __attribute__((noreturn)) xlongjmp(long rip, long rsp, long rax);

/*
 * Kernel can clobber rcx and r11 while serving a syscall, those are ignored
 * The layout of this struct depends on the way the assembly wrapper saves
 * register on the stack.
 * Note: don't expect the SIMD array to be aligned for efficient use with
 * AVX instructions.
 */
struct context {
	/* madfs: the syscall instruction's address */
	const unsigned char *site;
	long rip;
	long r15;
	long r14;
	long r13;
	long r12;
	long r10;
	long r9;
	long r8;
	long rsp;
	long rbp;
	long rdi;
	long rsi;
	long rbx;
	long rdx;
	long rax;
	char padd[0x200 - 0x168]; /* see: stack layout in intercept_wrapper.s */
	long SIMD[16][8]; /* 8 SSE, 8 AVX, or 16 AVX512 registers */
};

struct wrapper_ret {
	long rax;
	long rdx;
};

/* Should all objects be patched, or only libc and libpthread? */
static bool patch_all_objs;

/*
 * Information collected during disassemble phase, and anything else
 * needed for hotpatching are stored in this dynamically allocated
 * array of structs.
 * The number currently allocated is in the objs_count variable.
 */
static struct intercept_desc *objs;
static unsigned objs_count;

/* was libc found while looking for loaded objects? */
static bool libc_found;

/* address of [vdso] */
static void *vdso_addr;

/*
 * allocate_next_obj_desc
 * Handles the dynamic allocation of the struct intercept_desc array.
 * Returns a pointer to a newly allocated item.
 */
static struct intercept_desc *
allocate_next_obj_desc(void)
{
	/*
	 * madfs: the first objects' descriptions in BSS (libc, and usually
	 * nothing else, unless INTERCEPT_ALL_OBJS): an anonymous mapping made
	 * for them cost every preloaded process an mmap, a page fault and a
	 * mapping to tear down at exit. The BSS still fits the library's
	 * last data page, which the loader zero-fills anyway.
	 */
	static struct intercept_desc first[2];
	const unsigned n_first = sizeof(first) / sizeof(first[0]);

	if (objs_count == 0) {
		objs = first;
	} else if (objs_count == n_first) {
		objs = xmmap_anon((objs_count + 1) * sizeof(objs[0]));
		memcpy(objs, first, sizeof(first));
	} else if (objs_count > n_first) {
		objs = xmremap(objs, objs_count * sizeof(objs[0]),
			(objs_count + 1) * sizeof(objs[0]));
	}
	/* all zero: BSS, or fresh (or grown) anonymous memory */
	++objs_count;
	return objs + objs_count - 1;
}

/*
 * madfs: the patch of the syscall instruction at site (for the log only:
 * a wrapper passes its site's address, not its struct patch_desc).
 */
static const struct patch_desc *
find_patch(const unsigned char *site)
{
	for (unsigned i = 0; i < objs_count; ++i) {
		for (unsigned j = 0; j < objs[i].count; ++j) {
			if (objs[i].items[j].syscall_addr == site)
				return objs[i].items + j;
		}
	}
	return NULL;
}

/*
 * get_lib_short_name - find filename in path containing directories.
 */
static const char *
get_lib_short_name(const char *name)
{
	/*
	 * madfs: here and in is_vdso, str_match and should_patch_object,
	 * plain loops instead of strrchr, strstr, strcspn and strncmp: a
	 * preloaded process would otherwise fault in pages of libc that its
	 * program may never use (a page each, and the tables of the SSE4.2
	 * strcspn), for a handful of short names per process
	 */
	const char *last = name;
	for (const char *p = name; *p != '\0'; ++p) {
		if (*p == '/')
			last = p + 1;
	}
	return last;
}

/* the length of s's first part without '-' or '.' (strcspn(s, "-.")) */
static size_t
name_stem_len(const char *s)
{
	size_t n = 0;
	while (s[n] != '\0' && s[n] != '-' && s[n] != '.')
		++n;
	return n;
}

/*
 * str_match - matching library names.
 * The first string (name) is not null terminated, while
 * the second string (expected) is null terminated.
 * This allows matching e.g.: "libc-2.25.so\0" with "libc\0".
 * If name_len is 4, the comparison is between: "libc" and "libc".
 */
static bool
str_match(const char *name, size_t name_len,
		const char *expected)
{
	size_t i = 0;
	while (i < name_len && expected[i] != '\0' && name[i] == expected[i])
		++i;
	return i == name_len && expected[i] == '\0';
}

/*
 * get_name_from_proc_maps
 * Tries to find the path of an object file loaded at a specific
 * address.
 *
 * The paths found are stored in the paths buffer. The
 * returned pointer points into this buffer. The next_path
 * pointer keeps track of the already "allocated" space inside
 * the paths buffer.
 *
 * madfs: the buffer is mapped at the first call (rare: an object the
 * loader gave no name) instead of sitting in BSS, which then fits in the
 * library's last data page: one mapping fewer in every process.
 */
static const char *
get_name_from_proc_maps(uintptr_t addr)
{
	enum { PATHS_SIZE = 0x10000 };
	static char *paths;
	static char *next_path;
	const char *path = NULL;

	char line[0x2000];
	FILE *maps;

	if (paths == NULL) {
		long m = syscall_no_intercept(SYS_mmap, NULL, PATHS_SIZE,
		    PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		    -1, 0);
		if (m < 0 && m > -4096)
			return NULL;
		paths = next_path = (char *)m;
	}

	if ((next_path >= paths + PATHS_SIZE - sizeof(line)))
		return NULL; /* No more space left */

	if ((maps = fopen("/proc/self/maps", "r")) == NULL)
		return NULL;

	while ((fgets(line, sizeof(line), maps)) != NULL) {
		unsigned char *start;
		unsigned char *end;

		/* Read the path into next_path */
		if (sscanf(line, "%p-%p %*s %*x %*x:%*x %*u %s",
		    (void **)&start, (void **)&end, next_path) != 3)
			continue;

		if (addr < (uintptr_t)start)
			break;

		if ((uintptr_t)start <= addr && addr < (uintptr_t)end) {
			/*
			 * Object found, setting the return value.
			 * Adjusting the next_path pointer to point past the
			 * string found just now, to the unused space behind it.
			 * The next string found (if this routine is called
			 * again) will be stored there.
			 */
			path = next_path;
			next_path += strlen(next_path) + 1;
			break;
		}
	}

	fclose(maps);

	return path;
}

/*
 * get_any_used_vaddr - find a virtual address that is expected to
 * be a used for the object file mapped into memory.
 *
 * An Elf64_Phdr struct contains information about a segment in an on object
 * file. This routine looks for a segment with type LOAD, that has a non-zero
 * size in memory. The p_vaddr field contains the virtual address where this
 * segment should be loaded to. This of course is relative to the base address.
 *
 * typedef struct
 * {
 *   Elf64_Word p_type;			Segment type
 *   Elf64_Word p_flags;		Segment flags
 *   Elf64_Off p_offset;		Segment file offset
 *   Elf64_Addr p_vaddr;		Segment virtual address
 *   Elf64_Addr p_paddr;		Segment physical address
 *   Elf64_Xword p_filesz;		Segment size in file
 *   Elf64_Xword p_memsz;		Segment size in memory
 *   Elf64_Xword p_align;		Segment alignment
 * } Elf64_Phdr;
 *
 *
 */
static uintptr_t
get_any_used_vaddr(const struct dl_phdr_info *info)
{
	const Elf64_Phdr *pheaders = info->dlpi_phdr;

	for (Elf64_Word i = 0; i < info->dlpi_phnum; ++i) {
		if (pheaders[i].p_type == PT_LOAD && pheaders[i].p_memsz != 0)
			return info->dlpi_addr + pheaders[i].p_vaddr;
	}

	return 0; /* not found */
}

/*
 * get_object_path - attempt to find the path of the object in the
 * filesystem.
 *
 * This is usually supplied by dl_iterate_phdr in the dl_phdr_info struct,
 * but sometimes that does not contain it.
 */
static const char *
get_object_path(const struct dl_phdr_info *info)
{
	if (info->dlpi_name != NULL && info->dlpi_name[0] != '\0') {
		return info->dlpi_name;
	} else if (!patch_all_objs) {
		/*
		 * madfs: a nameless object is the program itself (or the
		 * vdso); only libc and libpthread are patched unless
		 * INTERCEPT_ALL_OBJS is set, so its path is not needed, and
		 * finding it means reading all of /proc/self/maps.
		 */
		return NULL;
	} else {
		uintptr_t addr = get_any_used_vaddr(info);
		if (addr == 0)
			return NULL;
		return get_name_from_proc_maps(addr);
	}
}

static bool
is_vdso(uintptr_t addr, const char *path)
{
	if (addr == (uintptr_t)vdso_addr)
		return true;
	for (const char *p = path; *p != '\0'; ++p) {
		if (p[0] == 'v' && p[1] == 'd' && p[2] == 's' && p[3] == 'o')
			return true;
	}
	return false;
}

/*
 * madfs: is info the object this code is linked into? One of its loaded
 * segments holds the wrapper template. (Upstream asked dladdr once, which
 * takes the loader's lock and touches a page of libc that a preloaded
 * process otherwise never needs.)
 */
static bool
is_self(const struct dl_phdr_info *info)
{
	extern unsigned char intercept_asm_wrapper_tmpl[];
	uintptr_t self = (uintptr_t)&intercept_asm_wrapper_tmpl;
	for (Elf64_Half i = 0; i < info->dlpi_phnum; ++i) {
		const Elf64_Phdr *ph = &info->dlpi_phdr[i];
		uintptr_t start = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && self >= start &&
		    self - start < ph->p_memsz)
			return true;
	}
	return false;
}

/*
 * should_patch_object
 * Decides whether a particular loaded object should should be targeted for
 * hotpatching.
 * Always skipped: [vdso], and the syscall_intercept library itself.
 * Besides these two, if patch_all_objs is true, everything object is
 * a target. When patch_all_objs is false, only libraries that are parts of
 * the glibc implementation are targeted, i.e.: libc and libpthread.
 */
static bool
should_patch_object(const struct dl_phdr_info *info, const char *path)
{
	uintptr_t addr = info->dlpi_addr;

	static const char libc[] = "libc";
	static const char pthr[] = "libpthread";
	static const char caps[] = "libcapstone";

	if (is_vdso(addr, path)) {
		debug_dump(" - skipping: is_vdso\n");
		return false;
	}

	const char *name = get_lib_short_name(path);
	size_t len = name_stem_len(name);

	if (len == 0)
		return false;

	if (is_self(info)) {
		debug_dump(" - skipping: matches self\n");
		return false;
	}

	if (str_match(name, len, caps)) {
		debug_dump(" - skipping: matches capstone\n");
		return false;
	}

	if (str_match(name, len, libc)) {
		debug_dump(" - libc found\n");
		libc_found = true;
		return true;
	}

	if (patch_all_objs)
		return true;

	if (str_match(name, len, pthr)) {
		debug_dump(" - libpthread found\n");
		return true;
	}

	debug_dump(" - skipping, patch_all_objs == false\n");
	return false;
}

#ifndef NT_GNU_PROPERTY_TYPE_0
#define NT_GNU_PROPERTY_TYPE_0 5
#endif
#define MADFS_ISA_1_NEEDED 0xc0008002u
#define MADFS_ISA_BASELINE_V2 3u
#define ALIGN8(n) (((n) + 7u) & ~(size_t)7u)

/*
 * madfs: the x86 ISA level an object declares it needs (its
 * GNU_PROPERTY_X86_ISA_1_NEEDED property, read from the mapped
 * PT_GNU_PROPERTY segment), or 0 if it declares none.
 */
static uint32_t
isa_needed(const struct dl_phdr_info *info)
{
	size_t size = 0;
	/* offsets from the descriptor's start, all 8-aligned */
	const unsigned char *desc = find_gnu_note(info, PT_GNU_PROPERTY,
	    NT_GNU_PROPERTY_TYPE_0, &size);
	size_t d = 0;
	while (desc != NULL && size - d >= 8) {
		uint32_t type, len;
		memcpy(&type, desc + d, 4);
		memcpy(&len, desc + d + 4, 4);
		if (size - d - 8 < len)
			break;
		if (type == MADFS_ISA_1_NEEDED && len >= 4) {
			uint32_t isa;
			memcpy(&isa, desc + d + 8, 4);
			return isa;
		}
		d += 8 + ALIGN8(len);
		if (d > size)
			break;
	}
	return 0;
}

/*
 * madfs: may code of this object keep values in the upper halves of the
 * ymm registers across a syscall instruction? Not if it declares that it
 * needs no more than x86-64-v2 (no AVX): its code outside of ifunc'd
 * variants (string functions, which make no syscalls) is then SSE code,
 * unaware of the upper halves. glibc marks libc so (Debian's: baseline).
 * Anything else (no marker, x86-64-v3 or v4) may: then the wrapper saves
 * them whenever they are in use (intercept_wrapper.S).
 */
static bool
object_may_hold_ymm(const struct dl_phdr_info *info)
{
	uint32_t isa = isa_needed(info);
	return isa == 0 || (isa & ~MADFS_ISA_BASELINE_V2) != 0;
}

/*
 * analyze_object
 * Look at a library loaded into the current process, and determine as much as
 * possible about it. The disassembling, allocations are initiated here.
 *
 * This is a callback function, passed to dl_iterate_phdr(3).
 * data and size are just unused callback arguments.
 *
 *
 * From dl_iterate_phdr(3) man page:
 *
 * struct dl_phdr_info
 * {
 *     ElfW(Addr) dlpi_addr;             Base address of object
 *     const char *dlpi_name;            (Null-terminated) name of object
 *     const ElfW(Phdr) *dlpi_phdr;      Pointer to array of ELF program headers
 *     ElfW(Half) dlpi_phnum;            # of items in dlpi_phdr
 *     ...
 * }
 *
 */
static int
analyze_object(struct dl_phdr_info *info, size_t size, void *data)
{
	(void) data;
	const char *path;

	debug_dump("analyze_object called on \"%s\" at 0x%016" PRIxPTR "\n",
	    info->dlpi_name, info->dlpi_addr);

	if ((path = get_object_path(info)) == NULL)
		return 0;

	debug_dump("analyze %s\n", path);

	if (!should_patch_object(info, path))
		return 0;

	if (intercept_cpu_has_ymm &&
	    (patch_all_objs || object_may_hold_ymm(info)))
		intercept_routine_must_save_ymm = true;

	struct intercept_desc *patches = allocate_next_obj_desc();

	patches->base_addr = (unsigned char *)info->dlpi_addr;
	patches->path = path;
	for (Elf64_Half i = 0; i < info->dlpi_phnum; ++i) {
		const Elf64_Phdr *ph = &info->dlpi_phdr[i];
		unsigned char *end = patches->base_addr + ph->p_vaddr +
		    ph->p_memsz;
		if (ph->p_type == PT_LOAD && end > patches->obj_end)
			patches->obj_end = end;
	}
	find_build_id(patches, info);

	/*
	 * madfs: the object is patched once the walk is over (intercept):
	 * mapping its bundle replaces its text, so every page of it already
	 * mapped is mapped again at its next use, and the rest of the walk
	 * runs libc code (dl_iterate_phdr itself, strstr, strcspn for the
	 * objects after libc): 5-6 of the 77 page faults of a preloaded
	 * /bin/true.
	 */
	memcpy(&patches->info, info,
	    size < sizeof(patches->info) ? size : sizeof(patches->info));

	return 0;
}

const char *cmdline;

/*
 * intercept - This is where the highest level logic of hotpatching
 * is described. Upon startup, this routine looks for libc, and libpthread.
 * If these libraries are found in the process's address space, they are
 * patched.
 *
 * This is init routine of syscall_intercept. This library constructor
 * must be in a TU which also contains public symbols, otherwise linkers
 * might just get rid of the whole object file containing it, when linking
 * statically with libsyscall_intercept.
 */
static __attribute__((constructor)) void
intercept(int argc, char **argv)
{
	(void) argc;
	cmdline = argv[0];

	if (!syscall_hook_in_process_allowed())
		return;

	vdso_addr = (void *)(uintptr_t)getauxval(AT_SYSINFO_EHDR);
	debug_dumps_on = madfs_intercept_getenv("INTERCEPT_DEBUG_DUMP") != NULL;
	patch_all_objs = (madfs_intercept_getenv("INTERCEPT_ALL_OBJS") != NULL);
	intercept_setup_log(madfs_intercept_getenv("INTERCEPT_LOG"),
			madfs_intercept_getenv("INTERCEPT_LOG_TRUNC"));
	log_header();
	init_patcher();

	dl_iterate_phdr(analyze_object, NULL);
	if (!libc_found)
		xabort("libc not found");

	/*
	 * madfs: a process that finds an object's bundle maps it and is done
	 * with that object; the log and the debug dumps need the patch
	 * descriptions, so they take the long way, as does an object without
	 * a usable bundle.
	 */
	for (unsigned i = 0; i < objs_count; ++i) {
		struct intercept_desc *obj = objs + i;
		if (!debug_dumps_on && !intercept_log_active() &&
		    bundle_map(obj, &obj->info) == 0)
			continue;
		find_syscalls(obj);
	}

	for (unsigned i = 0; i < objs_count; ++i) {
		struct intercept_desc *obj = objs + i;
		if (obj->bundled || obj->count == 0)
			continue;
		allocate_wrapper_region(obj);
		create_patch_wrappers(obj);
		finish_wrapper_region(obj);
		plan_store(obj);
	}
	for (unsigned i = 0; i < objs_count; ++i)
		activate_patches(objs + i);
}

/*
 * log_header - part of logging
 * This routine outputs some potentially useful information into the log
 * file, which can be very useful during development.
 */
static void
log_header(void)
{
	static const char self_decoder[] =
		"tempfile=$(mktemp) ; tempfile2=$(mktemp) ; "
		"grep \"^/\" $0 | cut -d \" \" -f 1,2 | "
		"sed \"s/^/addr2line -p -f -e /\" > $tempfile ; "
		"{ echo ; . $tempfile ; echo ; } > $tempfile2 ; "
		"paste $tempfile2 $0 ; exit 0\n";

	intercept_log(self_decoder, sizeof(self_decoder) - 1);
}

/*
 * xabort_errno - print a message to stderr, and exit the process.
 * Calling abort() in libc might result other syscalls being called
 * by libc.
 *
 * If error_code is not zero, it is also printed.
 */
void
xabort_errno(int error_code, const char *msg)
{
	static const char main_msg[] = " libsyscall_intercept error\n";

	if (msg != NULL) {
		/* not using libc - inline strlen */
		size_t len = 0;
		while (msg[len] != '\0')
			++len;
		syscall_no_intercept(SYS_write, 2, msg, len);
	}

	if (error_code != 0) {
		char buf[0x10];
		size_t len = 1;
		char *c = buf + sizeof(buf) - 1;

		/* not using libc - inline sprintf */
		do {
			*c-- = (error_code % 10) + '0';
			++len;
			error_code /= 10;
		} while (error_code != 0);
		*c = ' ';

		syscall_no_intercept(SYS_write, 2, c, len);
	}

	syscall_no_intercept(SYS_write, 2, main_msg, sizeof(main_msg) - 1);
	syscall_no_intercept(SYS_exit_group, 1);

	__builtin_unreachable();
}

/*
 * xabort - print a message to stderr, and exit the process.
 */
void
xabort(const char *msg)
{
	xabort_errno(0, msg);
}

/*
 * xabort_on_syserror -- examines the return value of syscall_no_intercept,
 * and calls xabort_errno if the said return value indicates an error.
 */
void
xabort_on_syserror(long syscall_result, const char *msg)
{
	if (syscall_error_code(syscall_result) != 0)
		xabort_errno(syscall_error_code(syscall_result), msg);
}

/*
 * get_syscall_in_context -- describe syscall arguments, and syscall number
 * based on the contents of the relevant registers righ before the syscall
 * is meant to be executed. On Linux, all syscall arguments are passed to
 * a syscall in registers.
 */
static void
get_syscall_in_context(struct context *context, struct syscall_desc *sys)
{
	sys->nr = (int)context->rax; /* ignore higher 32 bits */
	sys->args[0] = context->rdi;
	sys->args[1] = context->rsi;
	sys->args[2] = context->rdx;
	sys->args[3] = context->r10;
	sys->args[4] = context->r8;
	sys->args[5] = context->r9;
}

/*
 * madfs: the fast pass-through, read by intercept_wrapper.S before it
 * saves anything. For syscall number nr < 512, intercept_fast_arg[nr]
 * says where to look:
 *  0 -- nowhere, the hook is always called;
 *  1, 5 -- the file descriptor in rdi (first argument) or r8 (fifth);
 *  2 -- a (dirfd, path) pair in rdi and rsi;
 *  3 -- a path in rdi, relative to the working directory.
 * The syscall is issued at once, without calling the hook, when the
 * descriptor is not the program's (negative as a C int, at least
 * intercept_fast_fd_limit, or its bit in intercept_fast_fd_bits clear),
 * or the path is not (see intercept_fast_path_pass): the program declared
 * that its hook lets these through.
 */
unsigned char intercept_fast_arg[512];
const uint64_t *intercept_fast_fd_bits;
uint64_t intercept_fast_fd_limit;
struct intercept_fast_prefix intercept_fast_prefix;
static const char *fast_mount;
static size_t fast_mount_len;
static const volatile unsigned char *fast_cwd_host;

#define FAST_CHECK __attribute__((always_inline, target("general-regs-only")))

static inline FAST_CHECK int
fast_fd_host(long fd)
{
	uint64_t f = (uint32_t)fd;
	if (f >= intercept_fast_fd_limit)
		return 1;
	uint64_t w = __atomic_load_n(&intercept_fast_fd_bits[f / 64],
	    __ATOMIC_ACQUIRE);
	return ((w >> (f % 64)) & 1) == 0;
}

/*
 * Is an absolute path outside the mount: not the mount's path followed by
 * '/' or the end, and not under /proc/self/fd/ (which may name one of the
 * program's descriptors)? Reads no byte past the terminating NUL.
 */
static inline FAST_CHECK int
fast_absolute_host(const char *p)
{
	static const char proc_fd[] = "/proc/self/fd/";
	size_t i;

	for (i = 0; i < fast_mount_len; i++) {
		if (p[i] != fast_mount[i])
			break;
	}
	if (i == fast_mount_len && (p[i] == '\0' || p[i] == '/'))
		return 0;
	for (i = 0; i + 1 < sizeof(proc_fd); i++) {
		if (p[i] != proc_fd[i])
			return 1;
	}
	return 0;
}

/*
 * intercept_fast_path_pass -- 1 when (dirfd, path) names no file of the
 * program's: an absolute path outside the mount, or a relative (or empty)
 * one from a descriptor that is not the program's, or from the working
 * directory while the program says it is a host directory. Called from
 * intercept_wrapper.S with every register live: it saves what it uses
 * (no_caller_saved_registers) and uses no vector register.
 */
__attribute__((no_caller_saved_registers, target("general-regs-only")))
int
intercept_fast_path_pass(long dirfd, const char *path)
{
	if (path == NULL)
		return 0;
	if (path[0] == '/')
		return fast_absolute_host(path);
	if ((int)dirfd == AT_FDCWD)
		return *fast_cwd_host != 0;
	return fast_fd_host(dirfd);
}

/* intercept_fast_path_pass for a path relative to the working directory */
__attribute__((no_caller_saved_registers, target("general-regs-only")))
int
intercept_fast_cwd_path_pass(const char *path)
{
	if (path == NULL)
		return 0;
	if (path[0] == '/')
		return fast_absolute_host(path);
	return *fast_cwd_host != 0;
}

/*
 * set_has_arg -- whether arg[nr] is want for every nr in the 512-bit set
 * (true for no set): visits the set's members only (a few dozen), not all
 * 512 numbers, as this runs in every process's start
 */
static bool
set_has_arg(const uint64_t *set, const unsigned char *arg, unsigned char want)
{
	if (set == NULL)
		return true;
	for (int w = 0; w < 8; w++) {
		for (uint64_t bits = set[w]; bits != 0; bits &= bits - 1) {
			if (arg[w * 64 + __builtin_ctzll(bits)] != want)
				return false;
		}
	}
	return true;
}

/*
 * madfs_intercept_fast_pass -- sets the fast pass-through (see above).
 * arg holds 512 entries; bits holds nfds bits (nfds a multiple of 64);
 * mount (mount_len bytes, no NUL among them) is the prefix of the
 * program's paths; *cwd_host is nonzero while relative paths from the
 * working directory are not the program's. All must stay valid for the
 * life of the process; bits and *cwd_host are updated atomically by the
 * program. Not enabled while syscalls are logged (INTERCEPT_LOG): the
 * log shows every syscall then. Call it before other threads run.
 * Returns 0, or -1 if not enabled.
 */
__attribute__((visibility("default"))) int
madfs_intercept_fast_pass(const unsigned char *arg, const uint64_t *bits,
	uint64_t nfds, const char *mount, size_t mount_len,
	const unsigned char *cwd_host)
{
	if (intercept_log_active() || bits == NULL || nfds % 64 != 0 ||
	    mount == NULL || mount_len == 0 || cwd_host == NULL ||
	    memchr(mount, '\0', mount_len) != NULL)
		return -1;
	intercept_fast_fd_bits = bits;
	intercept_fast_fd_limit = nfds;
	fast_mount = mount;
	fast_mount_len = mount_len;
	fast_cwd_host = cwd_host;
	/* the table last: an entry set means the rest is in place */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	/* a plain loop over bytes (the compiler vectorises it) */
	for (int nr = 0; nr < 512; nr++) {
		unsigned char a = arg[nr];
		intercept_fast_arg[nr] = (unsigned char)
		    ((a <= 3) | (a == 5) ? a : 0);
	}
	/*
	 * the fd and path prefixes (patcher.c), only if every syscall that
	 * has one is one whose fd (or dirfd and path) the program declared
	 * here: closed first (a second call), then bits and cwd_host, the
	 * limit (which opens them) last
	 */
	__atomic_store_n(&intercept_fast_prefix.limit, 0, __ATOMIC_RELEASE);
	bool prefix_ok = madfs_intercept_fd_first != NULL &&
	    set_has_arg(madfs_intercept_fd_first, arg, 1) &&
	    set_has_arg(madfs_intercept_dirfd_path, arg, 2) &&
	    set_has_arg(madfs_intercept_cwd_path, arg, 3);
	if (prefix_ok) {
		intercept_fast_prefix.bits = bits;
		intercept_fast_prefix.cwd_host = cwd_host;
		intercept_fast_prefix.mount1 =
		    mount_len >= 2 ? (unsigned char)mount[1] : 0;
		__atomic_store_n(&intercept_fast_prefix.limit, nfds,
		    __ATOMIC_RELEASE);
	}
	return 0;
}

bool intercept_no_deferral;

/*
 * madfs_intercept_patch_deferred -- patches the sites a bundle left
 * unpatched (bundle.c, patch_deferrable) in every object: call it before
 * the program's first fd exists, from one thread at a time, any number of
 * times. Returns 0, or -errno if an object's full text could not be put
 * in place (its deferred sites then stay unpatched).
 */
__attribute__((visibility("default"))) int
madfs_intercept_patch_deferred(void)
{
	/* an object not mapped yet is mapped with every site patched */
	__atomic_store_n(&intercept_no_deferral, true, __ATOMIC_RELEASE);
	int ret = 0;
	for (unsigned i = 0; i < objs_count; ++i) {
		int r = bundle_patch_deferred(objs + i);
		if (r != 0)
			ret = r;
	}
	return ret;
}

/*
 * intercept_routine(...)
 * This is the function called from the asm wrappers,
 * forwarding the syscall parameters to a hook function
 * if one is present.
 *
 * Arguments:
 * nr, arg0 - arg 5 -- syscall number
 *
 * For logging ( debugging, validating ):
 *
 * syscall_offset -- the offset of the original syscall
 *  instruction in the shared object
 * libpath -- the path of the .so being intercepted,
 *  e.g.: "/usr/lib/libc.so.6"
 *
 * For returning to libc:
 * return_to_asm_wrapper_syscall, return_to_asm_wrapper -- the
 *  address to jump to, when this function is done. The function
 *  is called with a faked return address on the stack ( to aid
 *  stack unwinding ). So, instead of just returning from this
 *  function, one must jump to one of these addresses. The first
 *  one triggers the execution of the syscall after restoring all
 *  registers, and before actually jumping back to the subject library.
 *
 * clone_wrapper -- the address to call in the special case of thread
 *  creation using clone.
 *
 * rsp_in_asm_wrapper -- the stack pointer to restore after returning
 *  from this function.
 */
struct wrapper_ret
intercept_routine(struct context *context)
{
	long result;
	int forward_to_kernel = true;
	struct syscall_desc desc;
	const struct patch_desc *patch =
	    intercept_log_active() ? find_patch(context->site) : NULL;

	get_syscall_in_context(context, &desc);

	if (handle_magic_syscalls(&desc, &result) == 0)
		return (struct wrapper_ret){.rax = result, .rdx = 1 };

	intercept_log_syscall(patch, &desc, UNKNOWN, 0);

	if (intercept_hook_point != NULL)
		forward_to_kernel = intercept_hook_point(desc.nr,
		    desc.args[0],
		    desc.args[1],
		    desc.args[2],
		    desc.args[3],
		    desc.args[4],
		    desc.args[5],
		    &result);

	if (desc.nr == SYS_vfork || desc.nr == SYS_rt_sigreturn) {
		/* can't handle these syscalls the normal way */
		return (struct wrapper_ret){.rax = context->rax, .rdx = 0 };
	}

	if (forward_to_kernel) {
		/*
		 * The clone syscall's arg1 is a pointer to a memory region
		 * that serves as the stack space of a new child thread.
		 * If this is zero, the child thread uses the same address
		 * as stack pointer as the parent does (e.g.: a copy of
		 * of the memory area after fork).
		 *
		 * The code at clone_wrapper only returns to this routine
		 * in the parent thread. In the child thread, it calls
		 * the clone_child_intercept_routine instead, executing
		 * it on the new child threads stack, then returns to libc.
		 */
		if (desc.nr == SYS_clone && desc.args[1] != 0)
			return (struct wrapper_ret){
				.rax = context->rax, .rdx = 2 };
		/*
		 * madfs: unless the syscall is logged with its result, the
		 * wrapper template issues it, with the registers it restored
		 * (as for vfork): no second call and argument copy here.
		 */
		if (!intercept_log_active())
			return (struct wrapper_ret){
				.rax = context->rax, .rdx = 0 };
		result = syscall_no_intercept(desc.nr,
					desc.args[0],
					desc.args[1],
					desc.args[2],
					desc.args[3],
					desc.args[4],
					desc.args[5]);
	}

	intercept_log_syscall(patch, &desc, KNOWN, result);

	return (struct wrapper_ret){ .rax = result, .rdx = 1 };
}

/*
 * intercept_routine_post_clone
 * The routine called by an assembly wrapper when a clone syscall returns zero,
 * and a new stack pointer is used in the child thread.
 */
struct wrapper_ret
intercept_routine_post_clone(struct context *context)
{
	if (context->rax == 0) {
		if (intercept_hook_point_clone_child != NULL)
			intercept_hook_point_clone_child();
	} else {
		if (intercept_hook_point_clone_parent != NULL)
			intercept_hook_point_clone_parent(context->rax);
	}

	return (struct wrapper_ret){.rax = context->rax, .rdx = 1 };
}
