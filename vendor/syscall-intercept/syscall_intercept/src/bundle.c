/*
 * Copyright 2026, the madfs authors
 *
 * Distributed under the same licence as the rest of syscall_intercept
 * (see LICENSE in the directory above).
 */

/*
 * bundle.c -- madfs: a patched library ready to map
 *
 * The first process that patches a library in place (with its wrapper
 * region at the canonical distance, see allocate_wrapper_region) writes a
 * bundle: a copy of the library file whose text pages hold the jumps, then
 * the region's wrapper pages, then a header page. A later process with the
 * same library (GNU build id, read from the mapped notes: no syscall), the
 * same wanted set and the same wrapper template maps the wrapper pages at
 * the same distance, writes the address of intercept_wrapper into the
 * region's first page, and maps the copy's text pages over the library's
 * own. It reads no plan or site cache, disassembles nothing and writes no
 * code: an open, an fstat, a read of the header (see bundle_refresh), five
 * mmaps, an mprotect and a close. The pages are shared between processes
 * through the page cache, as the library's own are; the copy keeps the
 * library's file offsets, so tools that read symbols from the mapped file
 * (perf) still find them.
 *
 * The copy's text leaves the deferred sites (patch_deferrable: the fd
 * syscalls with a known number) unpatched, so a program that never has
 * one of its own fds runs them at full speed; the full text, stored after
 * the wrapper pages, is mapped aside (never touched) and moved over the
 * lean one by madfs_intercept_patch_deferred, which the program calls
 * before it makes its first fd. MADFS_INTERCEPT_EAGER set to anything maps
 * the full text at once.
 *
 * The bundle lives in the cache directory, under a name that carries
 * everything its bytes depend on; it is written to a temporary name and
 * renamed, never changed in place. The file is used only if it is a
 * regular file owned by the user, not writable by others, whose header
 * agrees with the name, the file's size and the object's mapped segments;
 * otherwise the process patches in place as before and replaces it.
 */

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <link.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <syscall.h>
#include <time.h>

#include "intercept.h"
#include "intercept_util.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef RWF_NOWAIT
#define RWF_NOWAIT 0x00000008
#endif

#define BUNDLE_MAGIC "MADFSBN1"
/*
 * Besides the template's bytes (hashed into the name), a bundle's wrappers
 * depend on create_wrapper's layout, on what intercept_wrapper expects of
 * them (the site at 8(%rsp), the r11 codes) and on the region's placement
 * (wrapper_region_guess): bump this with any change to those.
 */
#define BUNDLE_VERSION 4
#define BUILD_ID_MAX 64

struct bundle_header {
	char magic[8];
	uint32_t version;
	uint32_t build_id_len;
	unsigned char build_id[BUILD_ID_MAX];
	uint64_t wanted_hash;
	uint64_t tmpl_hash;
	/* the library copy: bytes at offset 0 */
	uint64_t file_size;
	/* the text section: address (from the base), file offset, size */
	uint64_t text_addr;
	uint64_t text_offset;
	uint64_t text_bytes;
	/* the region's start minus the object's base address */
	int64_t region_delta;
	/* the wrapper pages: file offset and length */
	uint64_t code_offset;
	uint64_t code_len;
	uint64_t count;
	/*
	 * lean: nonzero if the text pages in the library copy leave the
	 * deferred sites (patch_deferrable) unpatched; the full text's
	 * pages then follow the wrapper pages, at full_offset
	 */
	uint64_t lean;
	uint64_t full_offset;
};

enum { BUNDLE_NOT_HERE = -1, BUNDLE_BAD = -2, BUNDLE_COLD = -3 };

#define ALIGN_UP(n, a) (((n) + (a) - 1) & ~((size_t)(a) - 1))

/*
 * find_gnu_note -- the descriptor of the object's first "GNU" note of
 * type n_type in its mapped segments of type p_type (PT_NOTE, or
 * PT_GNU_PROPERTY, which must be 8-aligned), and its size; NULL if none
 */
const unsigned char *
find_gnu_note(const struct dl_phdr_info *info, Elf64_Word p_type,
	Elf64_Word n_type, size_t *desc_size)
{
	for (Elf64_Half i = 0; i < info->dlpi_phnum; ++i) {
		const Elf64_Phdr *ph = &info->dlpi_phdr[i];
		if (ph->p_type != p_type ||
		    (p_type == PT_GNU_PROPERTY && ph->p_align != 8))
			continue;
		size_t align = ph->p_align == 8 ? 8 : 4;
		const unsigned char *seg =
		    (const void *)(info->dlpi_addr + ph->p_vaddr);
		size_t size = ph->p_memsz;
		size_t at = 0;
		while (size - at >= sizeof(Elf64_Nhdr)) {
			Elf64_Nhdr n;
			memcpy(&n, seg + at, sizeof(n));
			size_t name = at + sizeof(n);
			size_t d = ALIGN_UP(name + n.n_namesz, align);
			if (n.n_namesz > size || d > size ||
			    size - d < n.n_descsz)
				break;
			if (n.n_type == n_type && n.n_namesz == 4 &&
			    memcmp(seg + name, "GNU", 4) == 0) {
				*desc_size = n.n_descsz;
				return seg + d;
			}
			at = ALIGN_UP(d + n.n_descsz, align);
			if (at > size)
				break;
		}
	}
	return NULL;
}

/* find_build_id -- the object's NT_GNU_BUILD_ID note, if usable */
void
find_build_id(struct intercept_desc *desc, const struct dl_phdr_info *info)
{
	size_t len = 0;
	const unsigned char *id =
	    find_gnu_note(info, PT_NOTE, NT_GNU_BUILD_ID, &len);
	bool ok = id != NULL && len > 0 && len <= BUILD_ID_MAX;
	desc->build_id = ok ? id : NULL;
	desc->build_id_len = ok ? len : 0;
}

/* the header a bundle of desc must carry, as far as the name tells */
static void
bundle_key(const struct intercept_desc *desc, struct bundle_header *h)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, BUNDLE_MAGIC, 8);
	h->version = BUNDLE_VERSION;
	h->build_id_len = (uint32_t)desc->build_id_len;
	memcpy(h->build_id, desc->build_id, desc->build_id_len);
	h->wanted_hash = plan_hash();
	h->tmpl_hash = wrapper_template_hash();
}

/*
 * the bundle's path for the key h: <build id>.bundle<version>-<wanted
 * set>-<template>; the directory checked (to write) or only named (see
 * bundle_map_fd)
 */
static int
bundle_path(const struct bundle_header *h, char *out, size_t size,
	bool checked)
{
	char hex[2 * BUILD_ID_MAX + 1];
	if ((checked ? cache_dir(out, size) : cache_dir_name(out, size)) != 0)
		return -1;
	for (size_t i = 0; i < h->build_id_len; ++i) {
		static const char digits[] = "0123456789abcdef";
		hex[2 * i] = digits[h->build_id[i] >> 4];
		hex[2 * i + 1] = digits[h->build_id[i] & 15];
	}
	hex[2 * h->build_id_len] = '\0';
	char *p = out + strlen(out);
	const char *end = out + size;
	return put_str(&p, end, "/") && put_str(&p, end, hex) &&
	    put_str(&p, end, ".bundle") &&
	    put_num(&p, end, h->version, false) &&
	    put_str(&p, end, "-") && put_num(&p, end, h->wanted_hash, true) &&
	    put_str(&p, end, "-") &&
	    put_num(&p, end, h->tmpl_hash, true) ? 0 : -1;
}

/* pages of a mapping: address, length and file offset */
struct span {
	unsigned char *at;
	size_t len;
	uint64_t off;
};

/*
 * whether [first_page, first_page + len) lies in an executable segment of
 * the object, mapped from file offset off; if so, *seg (if not NULL) is
 * that segment's whole page span
 */
static bool
text_matches_segment(const struct dl_phdr_info *info,
	const unsigned char *first_page, size_t len, uint64_t off,
	struct span *seg)
{
	for (Elf64_Half i = 0; i < info->dlpi_phnum; ++i) {
		const Elf64_Phdr *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD || (ph->p_flags & PF_X) == 0)
			continue;
		uintptr_t start = info->dlpi_addr + ph->p_vaddr;
		uintptr_t seg_page = start & ~(PAGE_SIZE - 1);
		uintptr_t seg_end = page_up(start + ph->p_memsz);
		uint64_t seg_off = ph->p_offset & ~(uint64_t)(PAGE_SIZE - 1);
		uintptr_t p = (uintptr_t)first_page;
		if (p >= seg_page && p + len <= seg_end && p + len > p &&
		    off == seg_off + (p - seg_page)) {
			if (seg != NULL)
				*seg = (struct span){ (unsigned char *)seg_page,
				    seg_end - seg_page, seg_off };
			return true;
		}
	}
	return false;
}

/*
 * after a failed mapping of the patched text: nothing to do if the
 * library's own pages are still there (most failures come before the old
 * mapping is touched); otherwise they are mapped back from the library
 * file, if it still is the same build (its build id note, read from the
 * file), or the process cannot go on
 */
static void
map_original(const struct intercept_desc *desc,
	const struct dl_phdr_info *info, unsigned char *first_page,
	size_t len, uint64_t off)
{
	if (syscall_no_intercept(SYS_msync, first_page, len, MS_ASYNC) == 0)
		return; /* still mapped */
	long fd = syscall_no_intercept(SYS_open, desc->path,
	    O_RDONLY | O_CLOEXEC);
	bool same = false;
	for (Elf64_Half i = 0; fd >= 0 && i < info->dlpi_phnum; ++i) {
		const Elf64_Phdr *ph = &info->dlpi_phdr[i];
		const unsigned char *note =
		    (const void *)(info->dlpi_addr + ph->p_vaddr);
		unsigned char buf[BUILD_ID_MAX];
		if (ph->p_type != PT_NOTE || desc->build_id < note ||
		    desc->build_id + desc->build_id_len > note + ph->p_memsz)
			continue;
		uint64_t at = ph->p_offset + (uint64_t)(desc->build_id - note);
		same = syscall_no_intercept(SYS_pread64, fd, buf,
		    desc->build_id_len, at) == (long)desc->build_id_len &&
		    memcmp(buf, desc->build_id, desc->build_id_len) == 0;
		break;
	}
	long m = -1;
	if (same)
		m = syscall_no_intercept(SYS_mmap, first_page, len,
		    PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED, fd, off);
	if (fd >= 0)
		syscall_no_intercept(SYS_close, fd);
	if (m != (long)first_page)
		xabort("cannot map the library's text back");
}

/* MADFS_INTERCEPT_EAGER: no site is deferred */
static bool
eager(void)
{
	const char *e = madfs_intercept_getenv("MADFS_INTERCEPT_EAGER");
	return e != NULL && e[0] != '\0';
}

/*
 * read_header -- the header page's struct into h: 0, -1 if it cannot be
 * read, BUNDLE_COLD if cold_check and the page is not in the page cache
 * (preadv2 with RWF_NOWAIT, Linux 4.14; a kernel or file system without
 * it reads as if warm)
 */
static int
read_header(long fd, off_t at, struct bundle_header *h, bool cold_check)
{
	if (cold_check) {
		struct iovec iov = { h, sizeof(*h) };
		long r = syscall_no_intercept(SYS_preadv2, fd, &iov, 1, at, 0,
		    RWF_NOWAIT);
		if (r == (long)sizeof(*h))
			return 0;
		if (r == -EAGAIN)
			return BUNDLE_COLD;
	}
	return syscall_no_intercept(SYS_pread64, fd, h, sizeof(*h), at) ==
	    (long)sizeof(*h) ? 0 : -1;
}

/*
 * bundle_map_fd -- maps the bundle open as fd if it is desc's: 0, or a
 * BUNDLE_ code with nothing mapped; BUNDLE_COLD (only if cold_check) when
 * its header page is not in the page cache, see bundle_refresh
 */
static int
bundle_map_fd(struct intercept_desc *desc, const struct dl_phdr_info *info,
	long fd, const struct bundle_header *want, bool cold_check)
{
	struct stat st;
	struct bundle_header h;
	if (syscall_no_intercept(SYS_fstat, fd, &st) != 0 ||
	    !S_ISREG(st.st_mode) || st.st_uid != cache_uid() ||
	    (st.st_mode & 022) != 0 || st.st_size < (off_t)(2 * PAGE_SIZE))
		return BUNDLE_BAD;
	int hr = read_header(fd, st.st_size - (off_t)PAGE_SIZE, &h,
	    cold_check);
	if (hr == BUNDLE_COLD)
		return BUNDLE_COLD;
	if (hr != 0)
		return BUNDLE_BAD;
	uint64_t tail = h.code_offset + h.code_len; /* full text, or header */
	if (memcmp(h.magic, want->magic, 8) != 0 ||
	    h.version != want->version ||
	    h.build_id_len != want->build_id_len ||
	    memcmp(h.build_id, want->build_id, BUILD_ID_MAX) != 0 ||
	    h.wanted_hash != want->wanted_hash ||
	    h.tmpl_hash != want->tmpl_hash ||
	    h.code_offset != page_up(h.file_size) ||
	    h.code_len == 0 || h.code_len % PAGE_SIZE != 0 ||
	    h.code_len > (1u << 30) ||
	    (h.lean != 0 && h.full_offset != tail) ||
	    h.text_bytes == 0 || h.text_addr > (1ull << 40) ||
	    h.text_bytes > (1ull << 40))
		return BUNDLE_BAD;

	unsigned char *base = desc->base_addr;
	desc->text_offset = h.text_offset;
	desc->text_start = base + h.text_addr;
	desc->text_end = desc->text_start + h.text_bytes - 1;
	unsigned char *first_page = round_down_address(desc->text_start);
	size_t len = page_up((size_t)(desc->text_end + 1 - first_page));
	size_t lead = (size_t)(desc->text_start - first_page);
	if (h.text_offset < lead)
		return BUNDLE_BAD;
	uint64_t off = h.text_offset - lead;
	struct span seg;
	if (off % PAGE_SIZE != 0 || off + len > page_up(h.file_size) ||
	    !text_matches_segment(info, first_page, len, off, &seg) ||
	    tail + (h.lean != 0 ? len : 0) + PAGE_SIZE !=
	    (uint64_t)st.st_size)
		return BUNDLE_BAD;

	unsigned char *region = base + h.region_delta;
	size_t region_size = PAGE_SIZE + h.code_len;
	/* fixed by the object and this build: a mismatch never heals */
	if (region != wrapper_region_guess(desc) ||
	    !wrapper_region_in_reach(desc, region, region_size))
		return BUNDLE_BAD;

	/* the wrappers, where nothing else is mapped yet */
	unsigned char *code = region + PAGE_SIZE;
	long m = syscall_no_intercept(SYS_mmap, code, h.code_len,
	    PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED_NOREPLACE, fd,
	    h.code_offset);
	if (m != (long)code) {
		if (m >= 0 || m < -4095) /* a kernel without NOREPLACE */
			syscall_no_intercept(SYS_munmap, m, h.code_len);
		return BUNDLE_NOT_HERE;
	}
	m = syscall_no_intercept(SYS_mmap, region, PAGE_SIZE,
	    PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (m != (long)region) {
		if (m >= 0 || m < -4095)
			syscall_no_intercept(SYS_munmap, m, PAGE_SIZE);
		syscall_no_intercept(SYS_munmap, code, h.code_len);
		return BUNDLE_NOT_HERE;
	}
	set_wrapper_slot(region);

	/* the full text aside, if the lean one goes first */
	unsigned char *full = NULL;
	if (h.lean != 0 && !eager() &&
	    !__atomic_load_n(&intercept_no_deferral, __ATOMIC_ACQUIRE)) {
		m = syscall_no_intercept(SYS_mmap, NULL, len,
		    PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, h.full_offset);
		if (m >= 0 || m < -4095)
			full = (unsigned char *)m;
	}

	/*
	 * the patched text over the library's own: from the library copy,
	 * the whole executable segment (the pages around the text section
	 * hold the library's own bytes there), so that its mapping is
	 * replaced rather than split in two or three (one mapping fewer in
	 * every process, and no split); the full text alone when it goes
	 * first (it is stored for the text section only)
	 */
	bool from_copy = full != NULL || h.lean == 0;
	struct span own = { first_page, len, off }; /* the library's pages */
	if (from_copy && seg.off + seg.len <= page_up(h.file_size))
		own = seg;
	uint64_t from = from_copy ? own.off : h.full_offset;
	m = syscall_no_intercept(SYS_mmap, own.at, own.len,
	    PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED, fd, from);
	if (m != (long)own.at) {
		map_original(desc, info, own.at, own.len, own.off);
		syscall_no_intercept(SYS_munmap, region, region_size);
		if (full != NULL)
			syscall_no_intercept(SYS_munmap, full, len);
		return BUNDLE_NOT_HERE;
	}
	desc->deferred_at = first_page;
	desc->deferred_len = len;
	__atomic_store_n(&desc->deferred, full, __ATOMIC_RELEASE);

	desc->region = region;
	desc->region_size = region_size;
	desc->region_canonical = true;
	desc->bundled = true;
	return 0;
}

/*
 * bundle_refresh -- a fresh copy of the bundle open as fd, under the same
 * name, open for reading; -1 if it cannot be made (a cache directory not
 * ours to write, no space), and then fd is used as it is.
 *
 * Called when the bundle's header page has left the page cache: its text
 * pages are then read back by the page faults of the processes that map
 * it, and on Linux 6.18's ext4 (as on the file systems with large folios
 * before it) the fault path brings them back in single pages, where the
 * write path that made the bundle had put them in large folios. A text
 * mapped from large folios costs less (likely fewer and cheaper page
 * faults, and on AMD's processors fewer TLB entries).
 * A preloaded find(1) paid 0.6 points less over a plain one with the
 * bundle's text in large folios (docs/performance.md). So a process that
 * finds the bundle cold writes a copy, which puts it back in large folios
 * where the kernel can, and renames it over the old one (which stays
 * valid for the processes that map it). Of the processes that find it
 * cold at the same time (the ranks of a job starting), the one that takes
 * an flock on the old file writes the copy; the others map the old file
 * as it is. The lock goes with the writer's descriptor, so a writer that
 * dies leaves nothing behind. A bundle younger than REFRESH_AGE seconds is
 * not copied again: on a file system whose RWF_NOWAIT reads failed even
 * from the page cache, a copy per process start would cost more than any
 * folio saves.
 */
#define REFRESH_AGE 60
static long
bundle_refresh(const struct bundle_header *key, long fd)
{
	char path[800], tmp[840];
	struct stat st;
	struct timespec now;
	if (bundle_path(key, path, sizeof(path), true) != 0 ||
	    syscall_no_intercept(SYS_flock, fd, LOCK_EX | LOCK_NB) != 0 ||
	    syscall_no_intercept(SYS_fstat, fd, &st) != 0 ||
	    st.st_size <= 0 || clock_gettime(CLOCK_REALTIME, &now) != 0 ||
	    now.tv_sec - st.st_mtime < REFRESH_AGE)
		return -1;
	size_t size = (size_t)st.st_size;
	long m = syscall_no_intercept(SYS_mmap, NULL, size, PROT_READ,
	    MAP_PRIVATE, fd, 0);
	if (m < 0 && m > -4096)
		return -1;
	long out = tmp_create(path, tmp, sizeof(tmp));
	bool ok = out >= 0 && write_all(out, (const void *)m, size) == 0;
	if (out >= 0)
		tmp_publish(out, ok, tmp, path);
	syscall_no_intercept(SYS_munmap, m, size);
	if (!ok)
		return -1;
	return syscall_no_intercept(SYS_open, path,
	    O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
}

/*
 * bundle_map -- maps desc's bundle if there is a usable one: 0, and the
 * object is patched; otherwise nothing is changed
 */
int
bundle_map(struct intercept_desc *desc, const struct dl_phdr_info *info)
{
	char path[800];
	struct bundle_header key;
	if (desc->build_id == NULL)
		return -1;
	bundle_key(desc, &key);
	if (bundle_path(&key, path, sizeof(path), false) != 0)
		return -1;
	long fd = syscall_no_intercept(SYS_open, path,
	    O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -1;
	int r = bundle_map_fd(desc, info, fd, &key, true);
	if (r == BUNDLE_COLD) {
		long fresh = bundle_refresh(&key, fd);
		if (fresh >= 0) {
			syscall_no_intercept(SYS_close, fd);
			fd = fresh;
		}
		r = bundle_map_fd(desc, info, fd, &key, false);
	}
	syscall_no_intercept(SYS_close, fd);
	desc->bundle_stale = r == BUNDLE_BAD;
	return r == 0 ? 0 : -1;
}

/*
 * bundle_patch_deferred -- moves desc's full text over its lean one
 * (bundle_map_fd): every deferred site is patched from then on. 0, or
 * -errno with the lean text left in place. The front calls it from one
 * thread at a time. desc->deferred is cleared only after the move, so a
 * fork child made meanwhile either still has the full text aside (and
 * moves it when it calls this) or already has it in place, and then its
 * source is no longer mapped: checked first, since a failing mremap may
 * already have unmapped its destination, libc's text.
 */
int
bundle_patch_deferred(struct intercept_desc *desc)
{
	unsigned char *full = __atomic_load_n(&desc->deferred,
	    __ATOMIC_ACQUIRE);
	if (full == NULL)
		return 0;
	size_t len = desc->deferred_len;
	long r = 0;
	if (syscall_no_intercept(SYS_msync, full, len, MS_ASYNC) == 0)
		r = syscall_no_intercept(SYS_mremap, full, len, len,
		    MREMAP_MAYMOVE | MREMAP_FIXED, desc->deferred_at);
	else
		r = (long)desc->deferred_at; /* moved before a fork */
	if (r != (long)desc->deferred_at) {
		if (syscall_no_intercept(SYS_msync, desc->deferred_at, len,
		    MS_ASYNC) != 0)
			xabort("libc's text is gone after a failed mremap");
		return r < 0 && r > -4096 ? (int)r : -EIO;
	}
	__atomic_store_n(&desc->deferred, NULL, __ATOMIC_RELEASE);
	return 0;
}

static int
write_zeros(long fd, size_t len)
{
	static const unsigned char zeros[PAGE_SIZE];
	while (len > 0) {
		size_t n = len < sizeof(zeros) ? len : sizeof(zeros);
		if (write_all(fd, zeros, n) != 0)
			return -1;
		len -= n;
	}
	return 0;
}

/*
 * lean_text -- a copy of desc's patched text pages [first_page, +len) with
 * the deferred sites as they are in the library file (orig: the same pages
 * there), in a fresh mapping; NULL if no site is deferred (or no memory)
 */
static unsigned char *
lean_text(const struct intercept_desc *desc, const unsigned char *first_page,
	size_t len, const unsigned char *orig)
{
	unsigned char *lean = NULL;
	for (unsigned i = 0; i < desc->count; ++i) {
		const struct patch_desc *p = desc->items + i;
		if (!patch_deferrable(p))
			continue;
		if (lean == NULL) {
			long m = syscall_no_intercept(SYS_mmap, NULL, len,
			    PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (m < 0 && m > -4096)
				return NULL;
			lean = (unsigned char *)m;
			memcpy(lean, first_page, len);
		}
		size_t at;
		if (p->uses_nop_trampoline) {
			at = (size_t)(p->syscall_addr - first_page);
			memcpy(lean + at, orig + at, SYSCALL_INS_SIZE);
			at = (size_t)(p->nop_trampoline.address - first_page);
			memcpy(lean + at, orig + at, p->nop_trampoline.size);
		} else {
			at = (size_t)(p->dst_jmp_patch - first_page);
			memcpy(lean + at, orig + at, JUMP_INS_SIZE);
		}
	}
	return lean;
}

/*
 * bundle_store -- writes the bundle of desc, just patched in place: its
 * text pages are [first_page, first_page + len)
 */
void
bundle_store(const struct intercept_desc *desc, unsigned char *first_page,
	size_t len)
{
	char path[800], tmp[840];
	struct stat st;
	struct bundle_header h;
	if (!desc->region_canonical || desc->position_dependent ||
	    desc->build_id == NULL)
		return;
	bundle_key(desc, &h);
	if (bundle_path(&h, path, sizeof(path), true) != 0)
		return;
	if (!desc->bundle_stale &&
	    syscall_no_intercept(SYS_stat, path, &st) == 0)
		return; /* there, but not usable here: leave it */
	long src = syscall_no_intercept(SYS_open, desc->path,
	    O_RDONLY | O_CLOEXEC);
	if (src < 0)
		return;
	long m = -1;
	size_t size = 0;
	if (syscall_no_intercept(SYS_fstat, src, &st) == 0 &&
	    (uint64_t)st.st_dev == desc->file_id[0] &&
	    (uint64_t)st.st_ino == desc->file_id[1] &&
	    (uint64_t)st.st_size == desc->file_id[2]) {
		size = (size_t)st.st_size;
		m = syscall_no_intercept(SYS_mmap, NULL, size, PROT_READ,
		    MAP_PRIVATE, src, 0);
	}
	syscall_no_intercept(SYS_close, src);
	if (m < 0 && m > -4096)
		return;
	const unsigned char *file = (const unsigned char *)m;
	size_t lead = (size_t)(desc->text_start - first_page);
	const unsigned char *code = desc->region + PAGE_SIZE;
	h.file_size = size;
	h.text_addr = (uint64_t)(desc->text_start - desc->base_addr);
	h.text_offset = desc->text_offset;
	h.text_bytes = (uint64_t)(desc->text_end - desc->text_start + 1);
	h.region_delta = (int64_t)(desc->region - desc->base_addr);
	h.code_offset = page_up(size);
	h.code_len = page_up((size_t)(desc->next_wrapper - code));
	h.count = desc->count;
	long fd = -1;
	size_t off = (size_t)desc->text_offset - lead;
	unsigned char *lean = NULL;
	if (desc->text_offset >= lead && off + len <= size) {
		lean = lean_text(desc, first_page, len, file + off);
		fd = tmp_create(path, tmp, sizeof(tmp));
	}
	if (lean != NULL) {
		h.lean = 1;
		h.full_offset = h.code_offset + h.code_len;
	}
	if (fd >= 0) {
		size_t end = off + len;
		bool ok = write_all(fd, file, off) == 0 &&
		    write_all(fd, lean != NULL ? lean : first_page, len) == 0 &&
		    write_all(fd, file + end, size - end) == 0 &&
		    write_zeros(fd, h.code_offset - size) == 0 &&
		    write_all(fd, code, h.code_len) == 0 &&
		    (lean == NULL || write_all(fd, first_page, len) == 0) &&
		    write_all(fd, &h, sizeof(h)) == 0 &&
		    write_zeros(fd, PAGE_SIZE - sizeof(h)) == 0;
		tmp_publish(fd, ok, tmp, path);
	}
	if (lean != NULL)
		syscall_no_intercept(SYS_munmap, lean, len);
	syscall_no_intercept(SYS_munmap, file, size);
}
