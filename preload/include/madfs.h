/* madfs ioctls on a (directory) fd of a madfs path under LD_PRELOAD=libmadfs.so.
 * The Rust definitions are in crates/proto/src/ioctl.rs; docs/architecture.md explains them. */
#ifndef MADFS_H
#define MADFS_H
#include <stdint.h>
#include <sys/ioctl.h>

/* List only positions [from, to) (name hash >> 1; to = 0: the end) on this fd; no "." and "..".
 * Rewinds the fd. Several fds with disjoint ranges list one directory in parallel. */
struct madfs_dir_range {
	uint64_t from;
	uint64_t to;
};
#define MADFS_IOC_DIR_RANGE _IOW('m', 1, struct madfs_dir_range)

/* Server-side find over the directory's subtree (all conditions must hold). */
struct madfs_find {
	const char *name;	/* fnmatch pattern on the entry name, or NULL */
	uint64_t size;		/* find's -size N, in size_unit bytes (rounded up) */
	uint64_t size_unit;	/* 0: no size condition */
	int64_t newer_than_ns;	/* mtime strictly after; INT64_MIN: any */
	uint32_t kind;		/* S_IFREG, S_IFDIR or 0 */
	uint32_t flags;		/* 0 */
	uint64_t matched;	/* out */
	uint64_t scanned;	/* out */
};
/* Run the find; the next getdents64 calls return the matches (paths relative to the
 * directory) until the fd is rewound. */
#define MADFS_IOC_FIND_LIST _IOWR('m', 2, struct madfs_find)
/* Run the find; fill in the counts only. */
#define MADFS_IOC_FIND_COUNT _IOWR('m', 3, struct madfs_find)

/* On any madfs fd (file or directory): this process's client cache counters. */
struct madfs_cache_counts {
	uint64_t hits;		/* lookups answered from the cache */
	uint64_t misses;	/* lookups sent to a server */
	uint64_t revoked;	/* entries the servers called back */
	uint64_t entries;	/* entries kept now */
	uint64_t bytes;		/* bytes they take (estimated) */
};
#define MADFS_IOC_CACHE_COUNTS _IOR('m', 4, struct madfs_cache_counts)

#endif
