/*
 * fakecuda.c -- a recording stand-in for the CUDA driver (libcuda.so.1).
 *
 * Built at test time by tests/fakecuda/__init__.py with `cc -shared -fPIC`.
 * cuda-bindings loads it (via cuda.pathfinder -> dlopen("libcuda.so.1"),
 * honouring LD_LIBRARY_PATH) and asks `cuGetProcAddress_v2` for every entry
 * point by name; numba-cuda additionally ctypes-opens "libcuda.so" (a symlink
 * to this library in the build dir) and cuda.pathfinder calls the exported
 * `cuDriverGetVersion` directly.
 *
 * Nothing runs on a GPU.  "Device memory" is host memory in a region mapped at
 * a fixed address (per device), handed out by a bump allocator, so addresses
 * are deterministic in order of allocation.  Launches run nothing; they are
 * recorded (with marshalled parameter bytes) to the file named by
 * FAKECUDA_TRACE, one JSON object per line:  {"call": NAME, "args": {...}}.
 *
 * Environment:
 *   FAKECUDA_DEVICES   comma separated compute capabilities, default "9.0"
 *   FAKECUDA_TRACE     path of the trace file (appended); unset = no trace
 *
 * Entry-point lookup: ONE table (see TABLE below) {API name -> function}.
 * The requested version is ignored: every name we implement has one
 * signature across the versions cuda-bindings asks for (e.g. cuMemAlloc is
 * asked at 3020 and implemented as the _v2 signature).  Unknown names give
 * *pfn = NULL and CUDA_ERROR_NOT_FOUND, so calling one from Python raises
 * "function cuXxx is not found" -- implement it here next.
 *
 *   FAKECUDA_IMAGES    directory: every loaded image is also written there
 *                      as <sha256>.<kind> (for inspecting what was loaded)
 *
 * STATUS / NOTES (kept here so work is never lost)
 *   - numba-cuda 0.30.4 loads via cuLibraryLoadData (cuda.core ObjectCode,
 *     cubins linked by nvJitLink), looks kernels up with cuLibraryGetKernel
 *     and launches the CUkernel via cuLaunchKernelEx (cuda.core.launch),
 *     cooperative as launch attribute 2.  Auto-transferred numpy arguments use
 *     cuda.core's Device.allocate -> cuMemAllocFromPoolAsync / cuMemFreeAsync;
 *     cuda.to_device / device_array use numba's cuMemAlloc + cuMemcpyHtoD.
 *   - carveout: cuKernelSetAttribute(9, value, kernel, dev); debug kernels:
 *     cuLibraryGetGlobal("<entry>__errcode__") + memset + DtoH after launch.
 *   - cubin parsing: entries = FUNC symbols with st_other & 0x10; params from
 *     .nv.info.<k> EIATTR_KPARAM_INFO (0x17; payload: u32 index, u16 ordinal,
 *     u16 offset, u32 whose bits 18..31 are the size -- checked against
 *     cuobjdump -elf); registers from .nv.info EIATTR_REGCOUNT (0x2f),
 *     local from MAX/MIN_STACK_SIZE (0x23/0x12), max threads from
 *     EIATTR_MAX_THREADS (0x10), static shared from .nv.shared.<k>, const
 *     from .nv.constant3.  PTX: .entry parameter lists, .shared/.local
 *     declarations, .maxntid; registers reported as 32.
 *   - fatbin: header {u32 magic 0xBA55ED50, u16 version, u16 header size,
 *     u64 fat size}; member {u16 kind (1 PTX, 2 ELF, 8 LTO-IR), u16, u32
 *     header size, u64 padded size, u32 @16 unpadded size, u32 @28 sm,
 *     u64 @40 flags (0x2000 = LZ4 compressed), u64 @56 uncompressed size}.
 *     Chosen member: ELF for the device's exact sm, else a compatible ELF
 *     (same major, minor <=), else PTX with target <= device.
 *   - cubin arch checked like the driver: an sm_90 cubin on an 8.0 device
 *     gives CUDA_ERROR_NO_BINARY_FOR_GPU; LTO-IR/NVVM give INVALID_IMAGE.
 *   - not done: graphs, cuLink*, virtual memory management, textures/arrays,
 *     IPC, green contexts, cuCtxCreate (only primary contexts), managed
 *     memory semantics beyond "device memory the host can touch".
 *
 * Occupancy formula (deterministic, documented in the report too):
 *   warps     = ceil(block / 32)
 *   by_thr    = maxThreadsPerSM / (warps*32)
 *   by_reg    = regs ? 65536 / (regs * warps*32) : inf
 *   by_smem   = smem ? sharedPerSM / smem : inf  (smem = static + dynamic)
 *   blocks    = min(by_thr, by_reg, by_smem, maxBlocksPerSM)
 *   potential block size: the multiple of 32 (<= limit or 1024) maximising
 *   blocks*block, ties to the larger block; minGrid = blocks * SM count.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define API __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long cuuint64_t;
typedef void *CUhandle;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999,
};

/* ------------------------------------------------------------------ lock */
static pthread_mutex_t G = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
#define LOCK() pthread_mutex_lock(&G)
#define UNLOCK() pthread_mutex_unlock(&G)
#define RET(x) do { CUresult r__ = (x); UNLOCK(); return r__; } while (0)

/* --------------------------------------------------------------- sha256 */
typedef struct { uint32_t h[8]; uint64_t len; uint8_t buf[64]; size_t n; } sha_t;
static const uint32_t K256[64] = {
    0x428a2f98,0x71374491,0xb5c0fbcf,0xe9b5dba5,0x3956c25b,0x59f111f1,0x923f82a4,0xab1c5ed5,
    0xd807aa98,0x12835b01,0x243185be,0x550c7dc3,0x72be5d74,0x80deb1fe,0x9bdc06a7,0xc19bf174,
    0xe49b69c1,0xefbe4786,0x0fc19dc6,0x240ca1cc,0x2de92c6f,0x4a7484aa,0x5cb0a9dc,0x76f988da,
    0x983e5152,0xa831c66d,0xb00327c8,0xbf597fc7,0xc6e00bf3,0xd5a79147,0x06ca6351,0x14292967,
    0x27b70a85,0x2e1b2138,0x4d2c6dfc,0x53380d13,0x650a7354,0x766a0abb,0x81c2c92e,0x92722c85,
    0xa2bfe8a1,0xa81a664b,0xc24b8b70,0xc76c51a3,0xd192e819,0xd6990624,0xf40e3585,0x106aa070,
    0x19a4c116,0x1e376c08,0x2748774c,0x34b0bcb5,0x391c0cb3,0x4ed8aa4a,0x5b9cca4f,0x682e6ff3,
    0x748f82ee,0x78a5636f,0x84c87814,0x8cc70208,0x90befffa,0xa4506ceb,0xbef9a3f7,0xc67178f2};
#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))
static void sha_block(sha_t *s, const uint8_t *p) {
    uint32_t w[64], a, b, c, d, e, f, g, h;
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4*i] << 24 | (uint32_t)p[4*i+1] << 16 | (uint32_t)p[4*i+2] << 8 | p[4*i+3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i-15], 7) ^ ROR(w[i-15], 18) ^ (w[i-15] >> 3);
        uint32_t s1 = ROR(w[i-2], 17) ^ ROR(w[i-2], 19) ^ (w[i-2] >> 10);
        w[i] = w[i-16] + s0 + w[i-7] + s1;
    }
    a = s->h[0]; b = s->h[1]; c = s->h[2]; d = s->h[3];
    e = s->h[4]; f = s->h[5]; g = s->h[6]; h = s->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
        uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    s->h[0] += a; s->h[1] += b; s->h[2] += c; s->h[3] += d;
    s->h[4] += e; s->h[5] += f; s->h[6] += g; s->h[7] += h;
}
static void sha256_hex(const void *data, size_t len, char out[65]) {
    static const uint32_t H0[8] = {0x6a09e667,0xbb67ae85,0x3c6ef372,0xa54ff53a,
                                   0x510e527f,0x9b05688c,0x1f83d9ab,0x5be0cd19};
    sha_t s; memcpy(s.h, H0, sizeof H0);
    const uint8_t *p = data; size_t n = len;
    while (n >= 64) { sha_block(&s, p); p += 64; n -= 64; }
    uint8_t tail[128] = {0};
    memcpy(tail, p, n); tail[n] = 0x80;
    size_t tl = (n < 56) ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++) tail[tl - 1 - i] = (uint8_t)(bits >> (8 * i));
    sha_block(&s, tail); if (tl == 128) sha_block(&s, tail + 64);
    for (int i = 0; i < 8; i++) sprintf(out + 8 * i, "%08x", s.h[i]);
    out[64] = 0;
}

/* ---------------------------------------------------------------- trace */
static FILE *trace_fp;
static int trace_state; /* 0 unknown, 1 on, -1 off */
static char *tb; static size_t tb_len, tb_cap; static int tb_first;

static void tb_put(const char *s, size_t n) {
    if (tb_len + n + 1 > tb_cap) {
        tb_cap = (tb_len + n + 1) * 2 + 256;
        tb = realloc(tb, tb_cap);
    }
    memcpy(tb + tb_len, s, n); tb_len += n; tb[tb_len] = 0;
}
static void tb_printf(const char *fmt, ...) {
    char small[512]; va_list ap;
    va_start(ap, fmt); int n = vsnprintf(small, sizeof small, fmt, ap); va_end(ap);
    if (n < (int)sizeof small) { tb_put(small, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    va_start(ap, fmt); vsnprintf(big, (size_t)n + 1, fmt, ap); va_end(ap);
    tb_put(big, (size_t)n); free(big);
}
static int tracing(void) {
    if (trace_state == 0) {
        const char *p = getenv("FAKECUDA_TRACE");
        if (p && *p) { trace_fp = fopen(p, "a"); trace_state = trace_fp ? 1 : -1; }
        else trace_state = -1;
    }
    return trace_state > 0;
}
static void tb_jstr(const char *s) {
    tb_put("\"", 1);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { char e[2] = {'\\', (char)c}; tb_put(e, 2); }
        else if (c < 0x20 || c >= 0x7f) tb_printf("\\u%04x", c);
        else tb_put((const char *)&c, 1);
    }
    tb_put("\"", 1);
}
static void tr_begin(const char *call) {
    tb_len = 0; tb_first = 1;
    tb_put("{\"call\":", 8); tb_jstr(call); tb_put(",\"args\":{", 9);
}
static void tr_key(const char *k) {
    if (!tb_first) tb_put(",", 1);
    tb_first = 0; tb_jstr(k); tb_put(":", 1);
}
static void tr_int(const char *k, long long v) { tr_key(k); tb_printf("%lld", v); }
static void tr_uint(const char *k, unsigned long long v) { tr_key(k); tb_printf("%llu", v); }
static void tr_str(const char *k, const char *v) { tr_key(k); if (v) tb_jstr(v); else tb_put("null", 4); }
static void tr_bool(const char *k, int v) { tr_key(k); tb_put(v ? "true" : "false", v ? 4 : 5); }
static void tr_hex(const char *k, const void *p, size_t n) {
    static const char hx[] = "0123456789abcdef";
    tr_key(k); tb_put("\"", 1);
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) { char c[2] = {hx[b[i] >> 4], hx[b[i] & 15]}; tb_put(c, 2); }
    tb_put("\"", 1);
}
static void tr_sha(const char *k, const void *p, size_t n) {
    char h[65]; sha256_hex(p, n, h); tr_str(k, h);
}
static void tr_dim3(const char *k, unsigned x, unsigned y, unsigned z) {
    tr_key(k); tb_printf("[%u,%u,%u]", x, y, z);
}
static void tr_end(void) {
    tb_put("}}\n", 3);
    if (trace_fp) { fwrite(tb, 1, tb_len, trace_fp); fflush(trace_fp); }
}

/* -------------------------------------------------------------- devices */
typedef struct {
    int major, minor, sms, shared_per_sm, optin, max_blocks_sm;
    size_t total_mem;
    char name[64];
} device_t;
#define MAX_DEV 8
static device_t devs[MAX_DEV];
static int ndev = -1;

static void init_devices(void) {
    if (ndev >= 0) return;
    ndev = 0;
    const char *spec = getenv("FAKECUDA_DEVICES");
    if (!spec || !*spec) spec = "9.0";
    char buf[256]; snprintf(buf, sizeof buf, "%s", spec);
    for (char *tok = strtok(buf, ", "); tok && ndev < MAX_DEV; tok = strtok(NULL, ", ")) {
        int ma = 0, mi = 0;
        if (sscanf(tok, "%d.%d", &ma, &mi) < 1) continue;
        device_t *d = &devs[ndev];
        d->major = ma; d->minor = mi;
        if (ma == 9 && mi == 0) {
            d->sms = 132; d->shared_per_sm = 233472; d->optin = 232448;
            d->max_blocks_sm = 32; d->total_mem = 80ULL << 30;
        } else if (ma == 8 && mi == 0) {
            d->sms = 108; d->shared_per_sm = 167936; d->optin = 166912;
            d->max_blocks_sm = 32; d->total_mem = 40ULL << 30;
        } else {
            d->sms = 80; d->shared_per_sm = 102400; d->optin = 101376;
            d->max_blocks_sm = 16; d->total_mem = 16ULL << 30;
        }
        snprintf(d->name, sizeof d->name, "FakeCUDA sm_%d%d #%d", ma, mi, ndev);
        ndev++;
    }
}

static int dev_attr(const device_t *d, int a, int *v) {
    switch (a) {
    case 1: *v = 1024; break;                  /* MAX_THREADS_PER_BLOCK */
    case 2: case 3: *v = 1024; break;          /* MAX_BLOCK_DIM_X/Y */
    case 4: *v = 64; break;                    /* MAX_BLOCK_DIM_Z */
    case 5: *v = 2147483647; break;            /* MAX_GRID_DIM_X */
    case 6: case 7: *v = 65535; break;
    case 8: *v = 49152; break;                 /* MAX_SHARED_MEMORY_PER_BLOCK */
    case 9: *v = 65536; break;                 /* TOTAL_CONSTANT_MEMORY */
    case 10: *v = 32; break;                   /* WARP_SIZE */
    case 11: *v = 2147483647; break;           /* MAX_PITCH */
    case 12: *v = 65536; break;                /* MAX_REGISTERS_PER_BLOCK */
    case 13: *v = 1755000; break;              /* CLOCK_RATE kHz */
    case 14: *v = 512; break;                  /* TEXTURE_ALIGNMENT */
    case 15: *v = 1; break;                    /* GPU_OVERLAP */
    case 16: *v = d->sms; break;               /* MULTIPROCESSOR_COUNT */
    case 17: *v = 0; break;                    /* KERNEL_EXEC_TIMEOUT */
    case 18: *v = 0; break;                    /* INTEGRATED */
    case 19: *v = 1; break;                    /* CAN_MAP_HOST_MEMORY */
    case 20: *v = 0; break;                    /* COMPUTE_MODE default */
    case 30: *v = 512; break;                  /* SURFACE_ALIGNMENT */
    case 31: *v = 1; break;                    /* CONCURRENT_KERNELS */
    case 32: *v = 0; break;                    /* ECC_ENABLED */
    case 33: *v = 0x10 + (int)(d - devs); break; /* PCI_BUS_ID */
    case 34: *v = 0; break;                    /* PCI_DEVICE_ID */
    case 35: *v = 0; break;                    /* TCC_DRIVER */
    case 36: *v = 2619000; break;              /* MEMORY_CLOCK_RATE */
    case 37: *v = 5120; break;                 /* GLOBAL_MEMORY_BUS_WIDTH */
    case 38: *v = 50331648; break;             /* L2_CACHE_SIZE */
    case 39: *v = 2048; break;                 /* MAX_THREADS_PER_MULTIPROCESSOR */
    case 40: *v = 2; break;                    /* ASYNC_ENGINE_COUNT */
    case 41: *v = 1; break;                    /* UNIFIED_ADDRESSING */
    case 50: *v = 0; break;                    /* PCI_DOMAIN_ID */
    case 51: *v = 32; break;                   /* TEXTURE_PITCH_ALIGNMENT */
    case 75: *v = d->major; break;             /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *v = d->minor; break;             /* COMPUTE_CAPABILITY_MINOR */
    case 78: *v = 1; break;                    /* STREAM_PRIORITIES_SUPPORTED */
    case 79: case 80: *v = 1; break;           /* GLOBAL/LOCAL_L1_CACHE_SUPPORTED */
    case 81: *v = d->shared_per_sm; break;     /* MAX_SHARED_MEMORY_PER_MULTIPROCESSOR */
    case 82: *v = 65536; break;                /* MAX_REGISTERS_PER_MULTIPROCESSOR */
    case 83: *v = 1; break;                    /* MANAGED_MEMORY */
    case 84: *v = 0; break;                    /* MULTI_GPU_BOARD */
    case 85: *v = 0; break;
    case 86: *v = 0; break;                    /* HOST_NATIVE_ATOMIC_SUPPORTED */
    case 87: *v = 2; break;                    /* SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO */
    case 88: *v = 0; break;                    /* PAGEABLE_MEMORY_ACCESS */
    case 89: *v = 0; break;                    /* CONCURRENT_MANAGED_ACCESS */
    case 90: *v = 1; break;                    /* COMPUTE_PREEMPTION_SUPPORTED */
    case 91: *v = 1; break;                    /* CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM */
    case 95: *v = 1; break;                    /* COOPERATIVE_LAUNCH */
    case 96: *v = 0; break;                    /* COOPERATIVE_MULTI_DEVICE_LAUNCH */
    case 97: *v = d->optin; break;             /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
    case 98: *v = 1; break;
    case 99: *v = 1; break;                    /* HOST_REGISTER_SUPPORTED */
    case 100: *v = 0; break;
    case 101: *v = 0; break;
    case 102: *v = 1; break;                   /* VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED */
    case 103: *v = 1; break;
    case 106: *v = d->max_blocks_sm; break;    /* MAX_BLOCKS_PER_MULTIPROCESSOR */
    case 108: *v = 0; break;
    case 109: *v = 0; break;
    case 111: *v = 1024; break;                /* RESERVED_SHARED_MEMORY_PER_BLOCK */
    case 115: *v = 1; break;                   /* MEMORY_POOLS_SUPPORTED */
    case 119: *v = 1; break;                   /* MEMPOOL_SUPPORTED_HANDLE_TYPES */
    case 120: *v = d->major >= 9; break;       /* CLUSTER_LAUNCH */
    case 126: *v = d->major >= 9 ? 4 : 1; break; /* MEM_SYNC_DOMAIN_COUNT */
    case 130: *v = 0; break;                   /* NUMA_CONFIG */
    case 131: case 134: *v = -1; break;        /* NUMA_ID, HOST_NUMA_ID */
    default:
        if (a >= 21 && a <= 74) { *v = 65536; break; } /* texture/surface limits */
        if (a > 0 && a < 144) { *v = 0; break; }
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* -------------------------------------------------------------- handles */
enum { K_CTX = 1, K_STREAM, K_EVENT, K_LIB, K_MOD, K_KERNEL, K_FUNC, K_LINK, K_POOL };
static const char *kind_prefix[] = {"?", "ctx", "stream", "event", "lib", "mod", "kernel", "func", "link", "pool"};
static int next_id[16];
#define MAGIC 0xfa6ecdaU
typedef struct { unsigned magic; int kind; int id; } hdr_t;

static char idbuf[8][32]; static int idbuf_i;
static const char *hid(const void *h) {
    char *b = idbuf[idbuf_i++ & 7];
    const hdr_t *x = h;
    if (!h) return "null";
    if ((uintptr_t)h < 0x100 || x->magic != MAGIC) { snprintf(b, 32, "raw:%p", h); return b; }
    snprintf(b, 32, "%s#%d", kind_prefix[x->kind], x->id);
    return b;
}
static const char *stream_id(const void *s) {
    if (s == NULL) return "default";
    if ((uintptr_t)s == 1) return "legacy";
    if ((uintptr_t)s == 2) return "per-thread";
    return hid(s);
}
static void *new_handle(int kind, size_t size) {
    hdr_t *h = calloc(1, size);
    h->magic = MAGIC; h->kind = kind; h->id = ++next_id[kind];
    return h;
}
static int is_kind(const void *h, int kind) {
    return h && (uintptr_t)h >= 0x100 && ((const hdr_t *)h)->magic == MAGIC && ((const hdr_t *)h)->kind == kind;
}

typedef struct { hdr_t h; int dev; unsigned flags; int retain; int active; } ctx_t;
static ctx_t *primary[MAX_DEV];

typedef struct { hdr_t h; ctx_t *ctx; unsigned flags; int priority; } stream_t;
typedef struct { hdr_t h; unsigned flags; int recorded; } event_t;

/* current-context stack, per thread */
#define CTX_STACK 16
static __thread ctx_t *ctx_stack[CTX_STACK];
static __thread int ctx_depth;
static ctx_t *cur_ctx(void) { return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL; }
static int cur_dev(void) { ctx_t *c = cur_ctx(); return c ? c->dev : 0; }

/* --------------------------------------------------------------- memory */
#define DEV_BASE 0x200000000000ULL
#define HOST_BASE 0x300000000000ULL
#define REGION (64ULL << 30)
#define ALIGN 256
typedef struct { CUdeviceptr addr; size_t size; int dev; int host; int live; int registered; } alloc_t;
static alloc_t *allocs; static size_t nallocs, cap_allocs;
static CUdeviceptr bump[MAX_DEV + 1];
static int region_mapped[MAX_DEV + 1];

static int map_region(int slot) {
    if (region_mapped[slot]) return 1;
    uintptr_t base = slot == MAX_DEV ? HOST_BASE : DEV_BASE + (uint64_t)slot * REGION;
    void *p = mmap((void *)base, REGION, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED) { fprintf(stderr, "fakecuda: mmap at %p failed: %s\n", (void *)base, strerror(errno)); return 0; }
    if ((uintptr_t)p != base) { munmap(p, REGION); fprintf(stderr, "fakecuda: fixed mmap not honoured\n"); return 0; }
    region_mapped[slot] = 1; bump[slot] = base;
    return 1;
}
static CUdeviceptr do_alloc(int slot, size_t size, int host) {
    if (!map_region(slot)) return 0;
    size_t sz = size ? (size + ALIGN - 1) / ALIGN * ALIGN : ALIGN;
    uintptr_t base = slot == MAX_DEV ? HOST_BASE : DEV_BASE + (uint64_t)slot * REGION;
    if (bump[slot] + sz > base + REGION) return 0;
    CUdeviceptr a = bump[slot]; bump[slot] += sz;
    if (nallocs == cap_allocs) { cap_allocs = cap_allocs * 2 + 64; allocs = realloc(allocs, cap_allocs * sizeof *allocs); }
    allocs[nallocs++] = (alloc_t){a, size, slot == MAX_DEV ? -1 : slot, host, 1, 0};
    return a;
}
static alloc_t *find_alloc(CUdeviceptr p) {
    for (size_t i = nallocs; i-- > 0;) {
        alloc_t *a = &allocs[i];
        if (a->live && p >= a->addr && p < a->addr + (a->size ? a->size : 1)) return a;
    }
    return NULL;
}
static size_t used_mem(int dev) {
    size_t u = 0;
    for (size_t i = 0; i < nallocs; i++) if (allocs[i].live && allocs[i].dev == dev && !allocs[i].host) u += allocs[i].size;
    return u;
}

/* --------------------------------------------------------------- images */
typedef struct { int ord, offset, size; } param_t;
typedef struct {
    char *name;
    int nparams; param_t *params; int param_bytes; int params_known;
    int regs, shared, local, constsz, maxthreads;
} entry_t;
typedef struct { char *name; CUdeviceptr addr; size_t size; } global_t;
typedef struct {
    const char *kind;          /* cubin / ptx / fatbin / ltoir / unknown */
    uint8_t *bytes; size_t size;
    const uint8_t *code; size_t code_size; const char *code_kind; /* selected member */
    uint8_t *owned_code;       /* decompressed fatbin member */
    entry_t *entries; int nentries;
    global_t *globals; int nglobals;
    int dev;
    int arch;                  /* sm of the selected member (cubin e_flags / PTX .target), 0 unknown */
} image_t;

typedef struct { hdr_t h; image_t *img; void *mod; } lib_t;
typedef struct { hdr_t h; image_t *img; lib_t *lib; } mod_t;
#define NFATTR 16
typedef struct { int set[NFATTR]; int val[NFATTR]; int cache_config; } fattrs_t;
typedef struct { hdr_t h; lib_t *lib; int entry; fattrs_t attrs; void *func[MAX_DEV]; } kernel_t;
typedef struct { hdr_t h; image_t *img; int entry; fattrs_t *attrs; fattrs_t own; kernel_t *kernel; int dev; } func_t;

static uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static size_t elf_size(const uint8_t *d) {
    uint64_t phoff = rd64(d + 0x20), shoff = rd64(d + 0x28);
    uint16_t phentsize = rd16(d + 0x36), phnum = rd16(d + 0x38);
    uint16_t shentsize = rd16(d + 0x3a), shnum = rd16(d + 0x3c);
    size_t end = shoff + (size_t)shnum * shentsize;
    if (phoff + (size_t)phnum * phentsize > end) end = phoff + (size_t)phnum * phentsize;
    for (int i = 0; i < shnum; i++) {
        const uint8_t *s = d + shoff + (size_t)i * shentsize;
        uint32_t type = rd32(s + 4); uint64_t off = rd64(s + 0x18), sz = rd64(s + 0x20);
        if (type != 8 /* NOBITS */ && off + sz > end) end = off + sz;
    }
    return end;
}

/* LZ4 block decompression (fatbin members flagged compressed, 0x2000). */
static long lz4_block(const uint8_t *src, size_t n, uint8_t *dst, size_t cap) {
    size_t i = 0, o = 0;
    while (i < n) {
        unsigned tok = src[i++];
        size_t lit = tok >> 4;
        if (lit == 15) { unsigned b; do { if (i >= n) return -1; b = src[i++]; lit += b; } while (b == 255); }
        if (i + lit > n || o + lit > cap) return -1;
        memcpy(dst + o, src + i, lit); i += lit; o += lit;
        if (i >= n) break;
        if (i + 2 > n) return -1;
        size_t off = src[i] | (size_t)src[i + 1] << 8; i += 2;
        size_t ml = (tok & 15);
        if (ml == 15) { unsigned b; do { if (i >= n) return -1; b = src[i++]; ml += b; } while (b == 255); }
        ml += 4;
        if (off == 0 || off > o || o + ml > cap) return -1;
        for (size_t k = 0; k < ml; k++, o++) dst[o] = dst[o - off];
    }
    return (long)o;
}

static void add_entry(image_t *im, const char *name, size_t nlen) {
    for (int i = 0; i < im->nentries; i++)
        if (strlen(im->entries[i].name) == nlen && !memcmp(im->entries[i].name, name, nlen)) return;
    im->entries = realloc(im->entries, (size_t)(im->nentries + 1) * sizeof(entry_t));
    entry_t *e = &im->entries[im->nentries++];
    memset(e, 0, sizeof *e);
    e->name = strndup(name, nlen);
    e->maxthreads = 1024;
}
static entry_t *find_entry(image_t *im, const char *name) {
    for (int i = 0; i < im->nentries; i++) if (!strcmp(im->entries[i].name, name)) return &im->entries[i];
    return NULL;
}
static void sort_params(entry_t *e) {
    for (int i = 1; i < e->nparams; i++)
        for (int j = i; j > 0 && e->params[j - 1].ord > e->params[j].ord; j--) {
            param_t t = e->params[j]; e->params[j] = e->params[j - 1]; e->params[j - 1] = t;
        }
    e->param_bytes = 0;
    for (int i = 0; i < e->nparams; i++)
        if (e->params[i].offset + e->params[i].size > e->param_bytes) e->param_bytes = e->params[i].offset + e->params[i].size;
}

/* ---- cubin (ELF) ---- */
typedef struct { const uint8_t *d; size_t n; uint64_t shoff; int shnum, shentsize, shstrndx; } elf_t;
static const uint8_t *sec(const elf_t *e, int i) { return e->d + e->shoff + (size_t)i * e->shentsize; }
static const char *sec_name(const elf_t *e, int i) {
    const uint8_t *ss = sec(e, e->shstrndx);
    return (const char *)e->d + rd64(ss + 0x18) + rd32(sec(e, i));
}

static void parse_elf(image_t *im, const uint8_t *d, size_t n) {
    elf_t e = {d, n, rd64(d + 0x28), rd16(d + 0x3c), rd16(d + 0x3a), rd16(d + 0x3e)};
    int symtab = -1;
    for (int i = 0; i < e.shnum; i++) if (rd32(sec(&e, i) + 4) == 2) symtab = i;
    if (symtab < 0) return;
    const uint8_t *st = sec(&e, symtab);
    const uint8_t *syms = d + rd64(st + 0x18);
    size_t nsyms = rd64(st + 0x20) / 24;
    const char *strtab = (const char *)d + rd64(sec(&e, (int)rd32(st + 0x28)) + 0x18);
    /* entries: FUNC symbols with STO_CUDA_ENTRY (0x10) */
    for (size_t j = 0; j < nsyms; j++) {
        const uint8_t *s = syms + j * 24;
        if ((s[4] & 0xf) == 2 && (s[5] & 0x10)) {
            const char *nm = strtab + rd32(s);
            add_entry(im, nm, strlen(nm));
        }
    }
    for (int i = 0; i < e.shnum; i++) {
        const char *nm = sec_name(&e, i);
        const uint8_t *s = sec(&e, i);
        const uint8_t *body = d + rd64(s + 0x18); size_t sz = rd64(s + 0x20);
        if (!strncmp(nm, ".nv.shared.", 11)) {
            entry_t *en = find_entry(im, nm + 11); if (en) en->shared = (int)sz;
        } else if (!strncmp(nm, ".nv.constant3", 13)) {
            /* bank 3 = user __constant__ data (numba's cuda.const.array_like);
               bank 0 holds the parameters, bank 2 compiler constants.  A
               module-level .nv.constant3 is charged to every entry (exact for
               numba's one-kernel modules). */
            if (nm[13] == '.') { entry_t *en = find_entry(im, nm + 14); if (en) en->constsz += (int)sz; }
            else if (!nm[13]) for (int q = 0; q < im->nentries; q++) im->entries[q].constsz += (int)sz;
        } else if (!strcmp(nm, ".nv.info") || !strncmp(nm, ".nv.info.", 9)) {
            entry_t *owner = nm[8] == '.' ? find_entry(im, nm + 9) : NULL;
            size_t k = 0;
            if (owner) { owner->nparams = 0; owner->params_known = 1; }
            while (k + 4 <= sz) {
                int fmt = body[k], attr = body[k + 1];
                size_t psz = fmt == 4 ? rd16(body + k + 2) : 0;
                const uint8_t *pl = body + k + 4;
                if (fmt == 4 && k + 4 + psz > sz) break;
                if (fmt == 4 && attr == 0x17 && owner && psz >= 12) { /* EIATTR_KPARAM_INFO */
                    owner->params = realloc(owner->params, (size_t)(owner->nparams + 1) * sizeof(param_t));
                    param_t *p = &owner->params[owner->nparams++];
                    p->ord = rd16(pl + 4); p->offset = rd16(pl + 6);
                    p->size = (int)((rd32(pl + 8) >> 18) & 0x3fff);
                } else if (fmt == 4 && !owner && psz >= 8 &&
                           (attr == 0x2f || attr == 0x23 || attr == 0x12)) {
                    /* REGCOUNT / MAX_STACK_SIZE / MIN_STACK_SIZE: (sym index, value) */
                    uint32_t si = rd32(pl), v = rd32(pl + 4);
                    if (si < nsyms) {
                        const char *sn = strtab + rd32(syms + (size_t)si * 24);
                        entry_t *en = find_entry(im, sn);
                        if (en) {
                            if (attr == 0x2f) en->regs = (int)v;
                            else if (attr == 0x23 || (attr == 0x12 && en->local < (int)v)) en->local = (int)v;
                        }
                    }
                } else if (fmt == 4 && owner && attr == 0x10 && psz >= 12) {
                    /* EIATTR_MAX_THREADS (launch bounds): x, y, z */
                    int t = (int)(rd32(pl) * rd32(pl + 4) * rd32(pl + 8));
                    if (t > 0 && t < owner->maxthreads) owner->maxthreads = t;
                }
                k += 4 + psz;
            }
            if (owner) sort_params(owner);
        }
    }
}
static int elf_global(image_t *im, const char *name, size_t *size, const uint8_t **init) {
    const uint8_t *d = im->code;
    if (strcmp(im->code_kind, "cubin")) return 0;
    elf_t e = {d, im->code_size, rd64(d + 0x28), rd16(d + 0x3c), rd16(d + 0x3a), rd16(d + 0x3e)};
    for (int i = 0; i < e.shnum; i++) {
        const uint8_t *st = sec(&e, i);
        if (rd32(st + 4) != 2) continue;
        const uint8_t *syms = d + rd64(st + 0x18);
        size_t nsyms = rd64(st + 0x20) / 24;
        const char *strtab = (const char *)d + rd64(sec(&e, (int)rd32(st + 0x28)) + 0x18);
        for (size_t j = 0; j < nsyms; j++) {
            const uint8_t *s = syms + j * 24;
            if ((s[4] & 0xf) != 1 || strcmp(strtab + rd32(s), name)) continue;
            *size = rd64(s + 16);
            uint16_t shndx = rd16(s + 6);
            *init = NULL;
            if (shndx > 0 && shndx < e.shnum && rd32(sec(&e, shndx) + 4) != 8)
                *init = d + rd64(sec(&e, shndx) + 0x18) + rd64(s + 8);
            return 1;
        }
    }
    return 0;
}

/* ---- PTX ---- */
static int ptx_type_size(const char *t) {
    /* t points after '.', e.g. "u64", "b8", "f32", "pred" */
    if (!strncmp(t, "pred", 4)) return 1;
    int bits = atoi(t + 1);
    return bits >= 8 ? bits / 8 : 0;
}
static const char *skip_ws(const char *p, const char *end) {
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
        if (p + 1 < end && p[0] == '/' && p[1] == '/') { while (p < end && *p != '\n') p++; continue; }
        if (p + 1 < end && p[0] == '/' && p[1] == '*') { const char *q = strstr(p + 2, "*/"); p = q ? q + 2 : end; continue; }
        return p;
    }
}
static int is_ident(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' || c == '.' || c == '%'; }

/* parse a declaration like ".align 8 .b8 name[24]" or ".u64 name": returns size, fills name */
static int ptx_decl(const char *p, const char *end, const char **name, size_t *nlen, int *align, const char **after) {
    int size = 0, al = 0;
    *name = NULL; *nlen = 0;
    for (;;) {
        p = skip_ws(p, end);
        if (p >= end) break;
        if (*p == '.') {
            const char *q = p + 1; while (q < end && is_ident(*q) && *q != '.') q++;
            if (!strncmp(p, ".align", 6)) { p = skip_ws(q, end); al = atoi(p); while (p < end && *p >= '0' && *p <= '9') p++; continue; }
            if (!strncmp(p, ".ptr", 4) || !strncmp(p, ".global", 7) || !strncmp(p, ".const", 6) || !strncmp(p, ".shared", 7) ||
                !strncmp(p, ".local", 6) || !strncmp(p, ".param", 6) || !strncmp(p, ".visible", 8) || !strncmp(p, ".extern", 7) ||
                !strncmp(p, ".weak", 5) || !strncmp(p, ".v2", 3) || !strncmp(p, ".v4", 3)) {
                int vec = !strncmp(p, ".v2", 3) ? 2 : !strncmp(p, ".v4", 3) ? 4 : 0;
                p = q;
                if (vec) { p = skip_ws(p, end); int s = ptx_type_size(p + 1); size = s * vec; while (p < end && (is_ident(*p))) p++; }
                continue;
            }
            size = ptx_type_size(p + 1);
            p = q;
            continue;
        }
        break;
    }
    const char *n0 = p;
    while (p < end && is_ident(*p)) p++;
    *name = n0; *nlen = (size_t)(p - n0);
    p = skip_ws(p, end);
    if (p < end && *p == '[') {
        long cnt = strtol(p + 1, NULL, 10);
        if (cnt <= 0) cnt = 0;
        size *= (int)cnt;
        while (p < end && *p != ']') p++;
        if (p < end) p++;
    }
    if (!al) al = size >= 8 ? 8 : size >= 4 ? 4 : size >= 2 ? 2 : 1;
    if (align) *align = al;
    if (after) *after = p;
    return size;
}

/* static shared declared at module scope (numba puts cuda.shared.array there):
   counted for every entry of the module -- exact for numba's one-entry PTX. */
static int ptx_module_shared(const char *src, const char *end) {
    int depth = 0, total = 0;
    for (const char *r = src; r < end; r++) {
        if (*r == '/' && r + 1 < end && (r[1] == '/' || r[1] == '*')) { r = skip_ws(r, end) - 1; continue; }
        if (*r == '{') depth++;
        else if (*r == '}') depth--;
        else if (!depth && *r == '.' && !strncmp(r, ".shared", 7) && (r == src || r[-1] == ' ' || r[-1] == '\n' || r[-1] == '\t')) {
            const char *nm; size_t nl; int al;
            total += ptx_decl(r, end, &nm, &nl, &al, NULL);
        }
    }
    return total;
}
static void parse_ptx(image_t *im, const char *src, size_t n) {
    const char *end = src + n, *p = src;
    int module_shared = ptx_module_shared(src, end);
    while (p < end) {
        const char *hit = NULL;
        /* find next ".entry" token */
        for (const char *q = p; q + 6 < end; q++)
            if (q[0] == '.' && !strncmp(q, ".entry", 6) && (q[6] == ' ' || q[6] == '\t' || q[6] == '\n')) { hit = q; break; }
        if (!hit) break;
        const char *q = skip_ws(hit + 6, end);
        const char *n0 = q; while (q < end && is_ident(*q)) q++;
        add_entry(im, n0, (size_t)(q - n0));
        entry_t *e = &im->entries[im->nentries - 1];
        e->params_known = 1; e->regs = 32; e->shared = module_shared;
        q = skip_ws(q, end);
        int off = 0;
        if (q < end && *q == '(') {
            q++;
            for (;;) {
                q = skip_ws(q, end);
                if (q >= end || *q == ')') break;
                const char *nm; size_t nl; int al; const char *after;
                int sz = ptx_decl(q, end, &nm, &nl, &al, &after);
                off = (off + al - 1) / al * al;
                e->params = realloc(e->params, (size_t)(e->nparams + 1) * sizeof(param_t));
                e->params[e->nparams] = (param_t){e->nparams, off, sz};
                e->nparams++;
                off += sz;
                q = skip_ws(after, end);
                if (q < end && *q == ',') q++;
                else if (q >= end || *q != ')') { while (q < end && *q != ',' && *q != ')') q++; if (q < end && *q == ',') q++; }
            }
        }
        sort_params(e);
        /* body: sum static .shared declarations; find .maxntid / local depot */
        const char *b = q; while (b < end && *b != '{') b++;
        int depth = 0; const char *r = b;
        for (; r < end; r++) {
            if (*r == '{') depth++;
            else if (*r == '}') { if (--depth == 0) break; }
            else if (*r == '.' && !strncmp(r, ".shared", 7) && depth == 1) {
                const char *nm; size_t nl; int al;
                int sz = ptx_decl(r, end, &nm, &nl, &al, NULL);
                e->shared += sz;
            } else if (*r == '.' && !strncmp(r, ".local", 6) && depth == 1) {
                const char *nm; size_t nl; int al;
                e->local += ptx_decl(r, end, &nm, &nl, &al, NULL);
            }
        }
        {   /* .maxntid x, y, z between ')' and '{' */
            const char *m = q;
            while (m < b && strncmp(m, ".maxntid", 8)) m++;
            if (m < b) {
                long x = 1, y = 1, z = 1; char *ep;
                x = strtol(m + 8, &ep, 10);
                if (*ep == ',') { y = strtol(ep + 1, &ep, 10); if (*ep == ',') z = strtol(ep + 1, &ep, 10); }
                if (x * y * z > 0 && x * y * z < e->maxthreads) e->maxthreads = (int)(x * y * z);
            }
        }
        p = r < end ? r + 1 : end;
    }
}
static int ptx_global(image_t *im, const char *name, size_t *size) {
    const char *src = (const char *)im->code, *end = src + im->code_size;
    size_t ln = strlen(name);
    for (const char *q = src; q < end; q++) {
        if (*q != '.' || (strncmp(q, ".global", 7) && strncmp(q, ".const", 6))) continue;
        if (q > src && q[-1] != '\n' && q[-1] != ' ' && q[-1] != '\t') continue;
        /* line start back to find .visible/.extern prefixes is not needed */
        const char *nm; size_t nl; int al;
        int sz = ptx_decl(q, end, &nm, &nl, &al, NULL);
        if (nl == ln && !memcmp(nm, name, ln)) { *size = (size_t)sz; return 1; }
    }
    return 0;
}

/* ---- image loading ---- */
static size_t image_size(const uint8_t *d, const char **kind) {
    if (!memcmp(d, "\x7f" "ELF", 4)) { *kind = "cubin"; return elf_size(d); }
    if (rd32(d) == 0xBA55ED50) { *kind = "fatbin"; return rd16(d + 6) + rd64(d + 8); }
    if (rd32(d) == 0x7F4E43ED) { *kind = "ltoir"; return 0; } /* LTO-IR: unsized, not loadable */
    if (rd32(d) == 0xDEC04342) { *kind = "nvvm"; return 0; }  /* LLVM bitcode: likewise */
    *kind = "ptx";
    return strlen((const char *)d) + 1;
}
/* cubin arch: EI_ABIVERSION 7 (CUDA <= 12) keeps the sm in e_flags & 0xff
   (e.g. 0x50055a for sm_90); ABI 8 moved it to bits 8..15. */
static int elf_arch(const uint8_t *d) {
    uint32_t f = rd32(d + 0x30);
    return d[8] >= 8 ? (int)((f >> 8) & 0xff) : (int)(f & 0xff);
}
static int ptx_arch(const char *p, size_t n) {
    const char *t = memmem(p, n, ".target", 7);
    if (!t) return 0;
    t += 7; while (*t == ' ' || *t == '\t') t++;
    return !strncmp(t, "sm_", 3) ? atoi(t + 3) : 0;
}
/* can code for `arch` run on device `dev`? cubin: same major, minor <= device's
   (the "a"/"f" variants are not distinguished); PTX: arch <= device's. */
static int arch_ok(const char *code_kind, int arch, int dev) {
    int want = devs[dev].major * 10 + devs[dev].minor;
    if (!arch) return 1;
    if (!strcmp(code_kind, "cubin")) return arch / 10 == want / 10 && arch <= want;
    return arch <= want;
}
static void select_code(image_t *im, int dev) {
    im->code = im->bytes; im->code_size = im->size; im->code_kind = im->kind;
    if (strcmp(im->kind, "fatbin")) return;
    int want = devs[dev].major * 10 + devs[dev].minor;
    const uint8_t *d = im->bytes;
    size_t o = rd16(d + 6), end = rd16(d + 6) + rd64(d + 8);
    const uint8_t *best_elf = NULL, *ptx = NULL, *any_elf = NULL;
    while (o + 16 <= end && o + 16 <= im->size) {
        const uint8_t *m = d + o;
        uint16_t kind = rd16(m); uint32_t hs = rd32(m + 4); uint64_t sz = rd64(m + 8);
        uint32_t arch = rd32(m + 28);
        if (kind == 2 && arch == (uint32_t)want && !best_elf) best_elf = m;
        if (kind == 2 && !any_elf && arch_ok("cubin", (int)arch, dev)) any_elf = m;
        if (kind == 1 && !ptx && arch <= (uint32_t)want) ptx = m;
        o += hs + sz;
    }
    const uint8_t *m = best_elf ? best_elf : any_elf ? any_elf : ptx;
    if (!m) { im->code_kind = "none"; im->code_size = 0; return; }
    uint32_t hs = rd32(m + 4); uint64_t sz = rd64(m + 8), flags = rd64(m + 40);
    im->code = m + hs; im->code_size = sz;
    im->code_kind = rd16(m) == 2 ? "cubin" : "ptx";
    if (flags & 0x2000) { /* compressed */
        uint64_t full = rd64(m + 56);
        uint8_t *out = calloc(1, full + 1);
        /* @16: the member's unpadded payload size (@8 may include padding) */
        uint32_t csz = rd32(m + 16);
        long got = lz4_block(m + hs, csz && csz <= sz ? csz : sz, out, full);
        if (got < 0) { free(out); im->code_kind = "none"; im->code_size = 0; return; }
        im->owned_code = out; im->code = out; im->code_size = (size_t)got;
    }
}
static image_t *load_image(const void *data, int dev) {
    image_t *im = calloc(1, sizeof *im);
    const char *kind;
    size_t sz = image_size(data, &kind);
    im->kind = kind; im->size = sz; im->dev = dev;
    im->bytes = malloc(sz ? sz : 1); memcpy(im->bytes, data, sz);
    select_code(im, dev);
    if (!strcmp(im->code_kind, "cubin")) { im->arch = elf_arch(im->code); parse_elf(im, im->code, im->code_size); }
    else if (!strcmp(im->code_kind, "ptx")) {
        size_t n = strnlen((const char *)im->code, im->code_size);
        im->arch = ptx_arch((const char *)im->code, n);
        parse_ptx(im, (const char *)im->code, n);
    }
    return im;
}
/* 0 or the error a real driver would give for this image on its device */
static CUresult image_error(image_t *im) {
    if (strcmp(im->code_kind, "cubin") && strcmp(im->code_kind, "ptx")) return CUDA_ERROR_INVALID_IMAGE;
    if (!arch_ok(im->code_kind, im->arch, im->dev)) return CUDA_ERROR_NO_BINARY_FOR_GPU;
    return 0;
}
/* FAKECUDA_IMAGES=<dir>: every loaded image is also written to <dir>/<sha256>.<kind> */
static void dump_image(image_t *im, const char *sha) {
    const char *dir = getenv("FAKECUDA_IMAGES");
    if (!dir || !*dir) return;
    char path[4096]; snprintf(path, sizeof path, "%s/%s.%s", dir, sha, im->kind);
    FILE *f = fopen(path, "wb");
    if (f) { fwrite(im->bytes, 1, im->size, f); fclose(f); }
}
static void trace_load(const char *call, const void *handle, image_t *im, CUresult err) {
    char sha[65]; sha256_hex(im->bytes, im->size, sha);
    dump_image(im, sha);
    if (!tracing()) return;
    tr_begin(call);
    tr_str("handle", handle ? hid(handle) : NULL);
    tr_int("device", im->dev);
    tr_str("kind", im->kind);
    tr_uint("size", im->size);
    tr_str("sha256", sha);
    if (strcmp(im->kind, im->code_kind)) tr_str("member", im->code_kind);
    if (im->arch) tr_int("arch", im->arch);
    if (err) tr_int("error", err);
    tr_key("entries"); tb_put("[", 1);
    for (int i = 0; i < im->nentries; i++) { if (i) tb_put(",", 1); tb_jstr(im->entries[i].name); }
    tb_put("]", 1);
    tr_end();
}
static CUresult resolve_global(image_t *im, const char *name, CUdeviceptr *dptr, size_t *bytes) {
    for (int i = 0; i < im->nglobals; i++)
        if (!strcmp(im->globals[i].name, name)) {
            if (dptr) *dptr = im->globals[i].addr;
            if (bytes) *bytes = im->globals[i].size;
            return CUDA_SUCCESS;
        }
    size_t size = 0; const uint8_t *init = NULL; int ok = 0;
    if (!strcmp(im->code_kind, "cubin")) ok = elf_global(im, name, &size, &init);
    else if (!strcmp(im->code_kind, "ptx")) ok = ptx_global(im, name, &size);
    if (!ok) return CUDA_ERROR_NOT_FOUND;
    CUdeviceptr a = do_alloc(im->dev, size, 0);
    if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
    if (init && size) memcpy((void *)a, init, size);
    im->globals = realloc(im->globals, (size_t)(im->nglobals + 1) * sizeof(global_t));
    im->globals[im->nglobals++] = (global_t){strdup(name), a, size};
    if (dptr) *dptr = a;
    if (bytes) *bytes = size;
    return CUDA_SUCCESS;
}

/* ===================================================== entry points === */

/* -------- init / versions / errors -------- */
API CUresult cuInit(unsigned flags) { (void)flags; LOCK(); init_devices(); RET(ndev ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE); }
API CUresult cuDriverGetVersion(int *v) { if (!v) return CUDA_ERROR_INVALID_VALUE; *v = 12090; return CUDA_SUCCESS; }
/* NVRTC (numba links .cu sources through it) looks this private entry point
 * up with dlsym and crashes where it is missing: a driver without export
 * tables is what it gets. */
API CUresult cuGetExportTable(const void **table, const void *id) { (void)id; if (table) *table = NULL; return CUDA_ERROR_NOT_SUPPORTED; }

static const struct { int code; const char *name, *desc; } errs[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "too many blocks in cooperative launch"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};
API CUresult cuGetErrorName(CUresult e, const char **s) {
    for (size_t i = 0; i < sizeof errs / sizeof *errs; i++) if (errs[i].code == e) { *s = errs[i].name; return 0; }
    *s = NULL; return CUDA_ERROR_INVALID_VALUE;
}
API CUresult cuGetErrorString(CUresult e, const char **s) {
    for (size_t i = 0; i < sizeof errs / sizeof *errs; i++) if (errs[i].code == e) { *s = errs[i].desc; return 0; }
    *s = NULL; return CUDA_ERROR_INVALID_VALUE;
}

/* -------- devices -------- */
#define CHECK_DEV(d) do { init_devices(); if ((d) < 0 || (d) >= ndev) RET(CUDA_ERROR_INVALID_DEVICE); } while (0)
API CUresult cuDeviceGetCount(int *n) { LOCK(); init_devices(); *n = ndev; RET(0); }
API CUresult cuDeviceGet(CUdevice *d, int ordinal) { LOCK(); CHECK_DEV(ordinal); *d = ordinal; RET(0); }
API CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    LOCK(); CHECK_DEV(d); snprintf(name, (size_t)len, "%s", devs[d].name); RET(0);
}
API CUresult cuDeviceGetUuid(unsigned char *uuid, CUdevice d) {
    LOCK(); CHECK_DEV(d);
    for (int i = 0; i < 16; i++) uuid[i] = (unsigned char)(0xfa + i * 7 + d * 31);
    RET(0);
}
API CUresult cuDeviceGetUuid_v2(unsigned char *uuid, CUdevice d) { return cuDeviceGetUuid(uuid, d); }
API CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) { LOCK(); CHECK_DEV(d); *b = devs[d].total_mem; RET(0); }
API CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
    LOCK(); CHECK_DEV(d); RET(dev_attr(&devs[d], attr, v));
}
API CUresult cuDeviceComputeCapability(int *ma, int *mi, CUdevice d) {
    LOCK(); CHECK_DEV(d); *ma = devs[d].major; *mi = devs[d].minor; RET(0);
}
API CUresult cuDeviceGetPCIBusId(char *s, int len, CUdevice d) {
    LOCK(); CHECK_DEV(d); snprintf(s, (size_t)len, "0000:%02x:00.0", 0x10 + d); RET(0);
}
API CUresult cuDeviceGetLuid(char *luid, unsigned *mask, CUdevice d) { (void)luid; (void)mask; (void)d; return CUDA_ERROR_NOT_SUPPORTED; }
API CUresult cuDeviceCanAccessPeer(int *can, CUdevice a, CUdevice b) { (void)a; (void)b; *can = 0; return 0; }
API CUresult cuDeviceGetP2PAttribute(int *v, int attr, CUdevice a, CUdevice b) { (void)attr; (void)a; (void)b; *v = 0; return 0; }

/* -------- contexts -------- */
static ctx_t *get_primary(int d) {
    if (!primary[d]) { primary[d] = new_handle(K_CTX, sizeof(ctx_t)); primary[d]->dev = d; }
    return primary[d];
}
API CUresult cuDevicePrimaryCtxRetain(void **pctx, CUdevice d) {
    LOCK(); CHECK_DEV(d);
    ctx_t *c = get_primary(d); c->retain++; c->active = 1; *pctx = c; RET(0);
}
API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    LOCK(); CHECK_DEV(d);
    ctx_t *c = get_primary(d); if (c->retain > 0) c->retain--; if (!c->retain) c->active = 0; RET(0);
}
API CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned *flags, int *active) {
    LOCK(); CHECK_DEV(d);
    ctx_t *c = get_primary(d); if (flags) *flags = c->flags; if (active) *active = c->active; RET(0);
}
API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned flags) {
    LOCK(); CHECK_DEV(d); get_primary(d)->flags = flags; RET(0);
}
API CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) {
    LOCK(); CHECK_DEV(d); ctx_t *c = get_primary(d); c->retain = 0; c->active = 0; RET(0);
}
API CUresult cuCtxGetCurrent(void **pctx) { LOCK(); *pctx = cur_ctx(); RET(0); }
API CUresult cuCtxSetCurrent(void *ctx) {
    LOCK();
    if (ctx && !is_kind(ctx, K_CTX)) RET(CUDA_ERROR_INVALID_CONTEXT);
    if (!ctx) { if (ctx_depth) ctx_depth--; RET(0); }
    if (ctx_depth) ctx_stack[ctx_depth - 1] = ctx; else ctx_stack[ctx_depth++] = ctx;
    RET(0);
}
API CUresult cuCtxPushCurrent_v2(void *ctx) {
    LOCK();
    if (!is_kind(ctx, K_CTX)) RET(CUDA_ERROR_INVALID_CONTEXT);
    if (ctx_depth >= CTX_STACK) RET(CUDA_ERROR_UNKNOWN);
    ctx_stack[ctx_depth++] = ctx; RET(0);
}
API CUresult cuCtxPopCurrent_v2(void **pctx) {
    LOCK();
    if (!ctx_depth) RET(CUDA_ERROR_INVALID_CONTEXT);
    ctx_t *c = ctx_stack[--ctx_depth];
    if (pctx) *pctx = c;
    RET(0);
}
API CUresult cuCtxGetDevice(CUdevice *d) { LOCK(); ctx_t *c = cur_ctx(); if (!c) RET(CUDA_ERROR_INVALID_CONTEXT); *d = c->dev; RET(0); }
API CUresult cuCtxSynchronize(void) { return 0; }
API CUresult cuCtxGetId(void *ctx, unsigned long long *id) {
    LOCK(); ctx_t *c = ctx ? ctx : cur_ctx(); if (!is_kind(c, K_CTX)) RET(CUDA_ERROR_INVALID_CONTEXT);
    *id = (unsigned long long)c->h.id; RET(0);
}
API CUresult cuCtxGetApiVersion(void *ctx, unsigned *v) { (void)ctx; *v = 3020; return 0; }
API CUresult cuCtxGetFlags(unsigned *flags) { LOCK(); ctx_t *c = cur_ctx(); *flags = c ? c->flags : 0; RET(0); }
API CUresult cuCtxSetFlags(unsigned flags) { LOCK(); ctx_t *c = cur_ctx(); if (c) c->flags = flags; RET(0); }
API CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) {
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return 0;
}
API CUresult cuCtxGetLimit(size_t *v, int limit) {
    switch (limit) {
    case 0: *v = 1024; break;          /* STACK_SIZE */
    case 1: *v = 1048576; break;       /* PRINTF_FIFO_SIZE */
    case 2: *v = 8388608; break;       /* MALLOC_HEAP_SIZE */
    default: *v = 0;
    }
    return 0;
}
API CUresult cuCtxSetLimit(int limit, size_t v) { (void)limit; (void)v; return 0; }
API CUresult cuCtxGetCacheConfig(int *c) { *c = 0; return 0; }
API CUresult cuCtxSetCacheConfig(int c) { (void)c; return 0; }

/* -------- streams / events -------- */
static CUresult stream_create(void **ps, unsigned flags, int prio, const char *call) {
    LOCK();
    stream_t *s = new_handle(K_STREAM, sizeof(stream_t));
    s->ctx = cur_ctx(); s->flags = flags; s->priority = prio;
    *ps = s;
    if (tracing()) {
        tr_begin(call); tr_str("handle", hid(s)); tr_int("device", s->ctx ? s->ctx->dev : 0);
        tr_uint("flags", flags); tr_int("priority", prio); tr_end();
    }
    RET(0);
}
API CUresult cuStreamCreate(void **ps, unsigned flags) { return stream_create(ps, flags, 0, "cuStreamCreate"); }
API CUresult cuStreamCreateWithPriority(void **ps, unsigned flags, int prio) {
    return stream_create(ps, flags, prio, "cuStreamCreateWithPriority");
}
API CUresult cuStreamDestroy_v2(void *s) { LOCK(); if (!is_kind(s, K_STREAM)) RET(CUDA_ERROR_INVALID_HANDLE); ((hdr_t *)s)->magic = 0; free(s); RET(0); }
API CUresult cuStreamSynchronize(void *s) { (void)s; return 0; }
API CUresult cuStreamQuery(void *s) { (void)s; return 0; }
API CUresult cuStreamWaitEvent(void *s, void *e, unsigned f) { (void)s; (void)e; (void)f; return 0; }
API CUresult cuStreamGetCtx(void *s, void **pctx) {
    LOCK();
    if (is_kind(s, K_STREAM)) *pctx = ((stream_t *)s)->ctx; else *pctx = cur_ctx();
    RET(0);
}
API CUresult cuStreamGetFlags(void *s, unsigned *f) { LOCK(); *f = is_kind(s, K_STREAM) ? ((stream_t *)s)->flags : 0; RET(0); }
API CUresult cuStreamGetPriority(void *s, int *p) { LOCK(); *p = is_kind(s, K_STREAM) ? ((stream_t *)s)->priority : 0; RET(0); }
API CUresult cuStreamGetId(void *s, unsigned long long *id) {
    LOCK(); *id = is_kind(s, K_STREAM) ? (unsigned long long)((stream_t *)s)->h.id + 100 : (uintptr_t)s; RET(0);
}
API CUresult cuStreamGetDevice(void *s, CUdevice *d) {
    LOCK(); ctx_t *c = is_kind(s, K_STREAM) ? ((stream_t *)s)->ctx : cur_ctx(); *d = c ? c->dev : 0; RET(0);
}
typedef void (*host_fn)(void *);
typedef void (*stream_cb)(void *, CUresult, void *);
API CUresult cuLaunchHostFunc(void *s, host_fn fn, void *ud) { (void)s; fn(ud); return 0; }
API CUresult cuStreamAddCallback(void *s, stream_cb cb, void *ud, unsigned f) { (void)f; cb(s, 0, ud); return 0; }
API CUresult cuStreamIsCapturing(void *s, int *st) { (void)s; *st = 0; return 0; }

API CUresult cuEventCreate(void **pe, unsigned flags) {
    LOCK();
    event_t *e = new_handle(K_EVENT, sizeof(event_t)); e->flags = flags; *pe = e;
    if (tracing()) { tr_begin("cuEventCreate"); tr_str("handle", hid(e)); tr_uint("flags", flags); tr_end(); }
    RET(0);
}
API CUresult cuEventDestroy_v2(void *e) { LOCK(); if (!is_kind(e, K_EVENT)) RET(CUDA_ERROR_INVALID_HANDLE); ((hdr_t *)e)->magic = 0; free(e); RET(0); }
API CUresult cuEventRecord(void *e, void *s) { (void)s; LOCK(); if (is_kind(e, K_EVENT)) ((event_t *)e)->recorded = 1; RET(0); }
API CUresult cuEventRecordWithFlags(void *e, void *s, unsigned f) { (void)f; return cuEventRecord(e, s); }
API CUresult cuEventSynchronize(void *e) { (void)e; return 0; }
API CUresult cuEventQuery(void *e) { (void)e; return 0; }
API CUresult cuEventElapsedTime(float *ms, void *a, void *b) { (void)a; (void)b; *ms = 0.0f; return 0; }
API CUresult cuEventElapsedTime_v2(float *ms, void *a, void *b) { return cuEventElapsedTime(ms, a, b); }

/* -------- memory -------- */
static void trace_alloc(const char *call, size_t size, CUdeviceptr a, int dev) {
    if (!tracing()) return;
    tr_begin(call); tr_int("device", dev); tr_uint("size", size); tr_uint("address", a); tr_end();
}
static CUresult mem_alloc(const char *call, CUdeviceptr *p, size_t size) {
    LOCK(); init_devices();
    int d = cur_dev();
    CUdeviceptr a = do_alloc(d, size, 0);
    if (!a) RET(CUDA_ERROR_OUT_OF_MEMORY);
    *p = a; trace_alloc(call, size, a, d); RET(0);
}
API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size) { return mem_alloc("cuMemAlloc", p, size); }
API CUresult cuMemAllocManaged(CUdeviceptr *p, size_t size, unsigned flags) { (void)flags; return mem_alloc("cuMemAllocManaged", p, size); }
API CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned esz) {
    (void)esz; size_t pw = (w + 511) / 512 * 512; *pitch = pw; return mem_alloc("cuMemAllocPitch", p, pw * h);
}
static CUresult do_free(const char *call, CUdeviceptr p, void *s, int async) {
    LOCK();
    alloc_t *a = find_alloc(p);
    if (!a || a->addr != p) RET(CUDA_ERROR_INVALID_VALUE);
    a->live = 0;
    if (tracing()) {
        tr_begin(call); tr_uint("address", p); tr_uint("size", a->size);
        if (async) tr_str("stream", stream_id(s));
        tr_end();
    }
    RET(0);
}
API CUresult cuMemFree_v2(CUdeviceptr p) { return do_free("cuMemFree", p, NULL, 0); }
API CUresult cuMemFreeAsync(CUdeviceptr p, void *s) { return do_free("cuMemFreeAsync", p, s, 1); }

/* memory pools (cuda.core's Device.allocate uses the device's current pool) */
typedef struct { hdr_t h; int dev; unsigned long long attr[9]; } pool_t;
static pool_t *default_pool[MAX_DEV], *current_pool[MAX_DEV];
static pool_t *get_default_pool(int d) {
    if (!default_pool[d]) { default_pool[d] = new_handle(K_POOL, sizeof(pool_t)); default_pool[d]->dev = d; }
    return default_pool[d];
}
API CUresult cuDeviceGetDefaultMemPool(void **pool, CUdevice d) { LOCK(); CHECK_DEV(d); *pool = get_default_pool(d); RET(0); }
API CUresult cuDeviceGetMemPool(void **pool, CUdevice d) {
    LOCK(); CHECK_DEV(d); *pool = current_pool[d] ? current_pool[d] : get_default_pool(d); RET(0);
}
API CUresult cuDeviceSetMemPool(CUdevice d, void *pool) {
    LOCK(); CHECK_DEV(d); if (!is_kind(pool, K_POOL)) RET(CUDA_ERROR_INVALID_HANDLE); current_pool[d] = pool; RET(0);
}
API CUresult cuMemPoolGetAttribute(void *pool, int attr, void *v) {
    LOCK(); if (!is_kind(pool, K_POOL) || attr < 1 || attr > 8) RET(CUDA_ERROR_INVALID_VALUE);
    pool_t *p = pool;
    if (attr <= 3) *(int *)v = (int)p->attr[attr];
    else if (attr == 5 || attr == 7) *(unsigned long long *)v = used_mem(p->dev);
    else *(unsigned long long *)v = p->attr[attr];
    RET(0);
}
API CUresult cuMemPoolSetAttribute(void *pool, int attr, void *v) {
    LOCK(); if (!is_kind(pool, K_POOL) || attr < 1 || attr > 8) RET(CUDA_ERROR_INVALID_VALUE);
    pool_t *p = pool;
    p->attr[attr] = attr <= 3 ? (unsigned long long)*(int *)v : *(unsigned long long *)v;
    RET(0);
}
API CUresult cuMemPoolTrimTo(void *pool, size_t keep) { (void)pool; (void)keep; return 0; }
API CUresult cuMemPoolSetAccess(void *pool, const void *desc, size_t n) { (void)pool; (void)desc; (void)n; return 0; }
API CUresult cuMemPoolGetAccess(int *flags, void *pool, void *loc) { (void)pool; (void)loc; *flags = 3; return 0; }
API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t size, void *pool, void *s) {
    LOCK(); if (!is_kind(pool, K_POOL)) RET(CUDA_ERROR_INVALID_HANDLE);
    int d = ((pool_t *)pool)->dev;
    CUdeviceptr a = do_alloc(d, size, 0);
    if (!a) RET(CUDA_ERROR_OUT_OF_MEMORY);
    *p = a;
    if (tracing()) {
        tr_begin("cuMemAllocFromPoolAsync"); tr_int("device", d); tr_uint("size", size); tr_uint("address", a);
        tr_str("pool", hid(pool)); tr_str("stream", stream_id(s)); tr_end();
    }
    RET(0);
}
API CUresult cuMemAllocAsync(CUdeviceptr *p, size_t size, void *s) {
    LOCK(); init_devices(); int d = cur_dev();
    void *pool = current_pool[d] ? current_pool[d] : get_default_pool(d);
    RET(cuMemAllocFromPoolAsync(p, size, pool, s));
}
API CUresult cuMemGetInfo_v2(size_t *fr, size_t *total) {
    LOCK(); init_devices(); int d = cur_dev();
    size_t t = devs[d].total_mem, u = used_mem(d);
    if (fr) *fr = t - (u < t ? u : t) - (512ULL << 20);
    if (total) *total = t;
    RET(0);
}
API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
    LOCK(); alloc_t *a = find_alloc(p); if (!a) RET(CUDA_ERROR_NOT_FOUND);
    if (base) *base = a->addr;
    if (size) *size = a->size;
    RET(0);
}
API CUresult cuMemHostAlloc(void **pp, size_t size, unsigned flags) {
    LOCK();
    CUdeviceptr a = do_alloc(MAX_DEV, size, 1);
    if (!a) RET(CUDA_ERROR_OUT_OF_MEMORY);
    *pp = (void *)a;
    if (tracing()) { tr_begin("cuMemHostAlloc"); tr_uint("size", size); tr_uint("flags", flags); tr_uint("address", a); tr_end(); }
    RET(0);
}
API CUresult cuMemAllocHost_v2(void **pp, size_t size) { return cuMemHostAlloc(pp, size, 0); }
API CUresult cuMemFreeHost(void *p) {
    LOCK(); alloc_t *a = find_alloc((CUdeviceptr)p);
    if (!a || !a->host) RET(CUDA_ERROR_INVALID_VALUE);
    a->live = 0;
    if (tracing()) { tr_begin("cuMemFreeHost"); tr_uint("address", (CUdeviceptr)p); tr_end(); }
    RET(0);
}
API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags) { (void)flags; *d = (CUdeviceptr)p; return 0; }
API CUresult cuMemHostGetFlags(unsigned *f, void *p) { (void)p; *f = 0; return 0; }
API CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned flags) {
    LOCK();
    if (nallocs == cap_allocs) { cap_allocs = cap_allocs * 2 + 64; allocs = realloc(allocs, cap_allocs * sizeof *allocs); }
    allocs[nallocs++] = (alloc_t){(CUdeviceptr)p, size, -1, 1, 1, 1};
    if (tracing()) { tr_begin("cuMemHostRegister"); tr_uint("size", size); tr_uint("flags", flags); tr_end(); }
    RET(0);
}
API CUresult cuMemHostUnregister(void *p) {
    LOCK(); alloc_t *a = find_alloc((CUdeviceptr)p); if (a && a->registered) a->live = 0;
    if (tracing()) { tr_begin("cuMemHostUnregister"); tr_end(); }
    RET(0);
}

static void trace_copy(const char *call, const char *dir, CUdeviceptr dst, CUdeviceptr src, size_t n, void *s, int async) {
    if (!tracing()) return;
    tr_begin(call); tr_str("dir", dir);
    if (strcmp(dir, "HtoD")) tr_uint("src", src);
    if (strcmp(dir, "DtoH")) tr_uint("dst", dst);
    tr_uint("size", n);
    if (!strcmp(dir, "HtoD") || !strcmp(dir, "DtoD")) {
        tr_sha("sha256", (const void *)src, n);
        if (n <= 256) tr_hex("bytes", (const void *)src, n);
    }
    if (async) tr_str("stream", stream_id(s));
    tr_end();
}
#define COPY(call, dir, dst, src, n, s, async) do { LOCK(); \
    if (n) memmove((void *)(uintptr_t)(dst), (const void *)(uintptr_t)(src), n); \
    trace_copy(call, dir, (CUdeviceptr)(uintptr_t)(dst), (CUdeviceptr)(uintptr_t)(src), n, s, async); RET(0); } while (0)
API CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) { COPY("cuMemcpyHtoD", "HtoD", d, h, n, NULL, 0); }
API CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) { COPY("cuMemcpyDtoH", "DtoH", h, d, n, NULL, 0); }
API CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { COPY("cuMemcpyDtoD", "DtoD", d, s, n, NULL, 0); }
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, void *s) { COPY("cuMemcpyHtoDAsync", "HtoD", d, h, n, s, 1); }
API CUresult cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, void *s) { COPY("cuMemcpyDtoHAsync", "DtoH", h, d, n, s, 1); }
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr src, size_t n, void *s) { COPY("cuMemcpyDtoDAsync", "DtoD", d, src, n, s, 1); }
static const char *classify(CUdeviceptr dst, CUdeviceptr src) {
    alloc_t *a = find_alloc(dst), *b = find_alloc(src);
    int dd = a && !a->host, sd = b && !b->host;
    return dd && sd ? "DtoD" : dd ? "HtoD" : sd ? "DtoH" : "HtoH";
}
API CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) { LOCK(); const char *k = classify(d, s); COPY("cuMemcpy", k, d, s, n, NULL, 0); }
API CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, void *st) { LOCK(); const char *k = classify(d, s); COPY("cuMemcpyAsync", k, d, s, n, st, 1); }
API CUresult cuMemcpyPeer(CUdeviceptr d, void *dc, CUdeviceptr s, void *sc, size_t n) { (void)dc; (void)sc; COPY("cuMemcpyPeer", "DtoD", d, s, n, NULL, 0); }
API CUresult cuMemcpyPeerAsync(CUdeviceptr d, void *dc, CUdeviceptr s, void *sc, size_t n, void *st) { (void)dc; (void)sc; COPY("cuMemcpyPeerAsync", "DtoD", d, s, n, st, 1); }

static CUresult do_memset(const char *call, CUdeviceptr d, unsigned v, size_t n, int w, void *s, int async) {
    LOCK();
    for (size_t i = 0; i < n; i++) {
        if (w == 1) ((uint8_t *)(uintptr_t)d)[i] = (uint8_t)v;
        else if (w == 2) ((uint16_t *)(uintptr_t)d)[i] = (uint16_t)v;
        else ((uint32_t *)(uintptr_t)d)[i] = v;
    }
    if (tracing()) {
        tr_begin(call); tr_uint("dst", d); tr_uint("value", v); tr_uint("count", n); tr_int("width", w);
        if (async) tr_str("stream", stream_id(s));
        tr_end();
    }
    RET(0);
}
API CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { return do_memset("cuMemsetD8", d, v, n, 1, NULL, 0); }
API CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) { return do_memset("cuMemsetD16", d, v, n, 2, NULL, 0); }
API CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned v, size_t n) { return do_memset("cuMemsetD32", d, v, n, 4, NULL, 0); }
API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void *s) { return do_memset("cuMemsetD8Async", d, v, n, 1, s, 1); }
API CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, void *s) { return do_memset("cuMemsetD16Async", d, v, n, 2, s, 1); }
API CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, void *s) { return do_memset("cuMemsetD32Async", d, v, n, 4, s, 1); }

/* pointer attributes */
static CUresult ptr_attr(void *data, int attr, CUdeviceptr p) {
    alloc_t *a = find_alloc(p);
    if (!a) {
        if (attr == 2 /* MEMORY_TYPE */ || attr == 1) return CUDA_ERROR_INVALID_VALUE;
    }
    int dev = a && a->dev >= 0 ? a->dev : 0;
    switch (attr) {
    case 1: *(void **)data = get_primary(dev); break;                       /* CONTEXT */
    case 2: *(unsigned *)data = a->host ? 1 /*HOST*/ : 2 /*DEVICE*/; break;   /* MEMORY_TYPE */
    case 3: *(CUdeviceptr *)data = p; break;                                /* DEVICE_POINTER */
    case 4: *(void **)data = (void *)(uintptr_t)p; break;                   /* HOST_POINTER */
    case 6: *(int *)data = 1; break;                                        /* SYNC_MEMOPS */
    case 7: *(unsigned long long *)data = a ? (unsigned long long)(a - allocs) + 1 : 0; break; /* BUFFER_ID */
    case 8: *(int *)data = 0; break;                                        /* IS_MANAGED */
    case 9: *(int *)data = dev; break;                                      /* DEVICE_ORDINAL */
    case 10: *(int *)data = 0; break;
    case 11: *(CUdeviceptr *)data = a ? a->addr : p; break;                 /* RANGE_START_ADDR */
    case 12: *(size_t *)data = a ? a->size : 0; break;                      /* RANGE_SIZE */
    case 13: *(int *)data = a != NULL; break;                               /* MAPPED */
    case 14: *(unsigned long long *)data = 0; break;
    case 15: *(int *)data = 0; break;
    case 16: *(int *)data = 3; break;                                       /* ACCESS_FLAGS rw */
    case 17: *(void **)data = NULL; break;                                  /* MEMPOOL_HANDLE */
    case 18: *(size_t *)data = a ? a->size : 0; break;
    case 19: *(CUdeviceptr *)data = a ? a->addr : p; break;
    case 20: *(unsigned long long *)data = a ? (unsigned long long)(a - allocs) + 1 : 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return 0;
}
API CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p) { LOCK(); RET(ptr_attr(data, attr, p)); }
API CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data, CUdeviceptr p) {
    LOCK();
    for (unsigned i = 0; i < n; i++) {
        if (ptr_attr(data[i], attrs[i], p)) {
            /* real driver: unknown pointers give memory type 0 / null values */
            if (attrs[i] == 2) *(unsigned *)data[i] = 0;
            else if (attrs[i] == 1 || attrs[i] == 17) *(void **)data[i] = NULL;
            else if (attrs[i] == 9) *(int *)data[i] = -2;
            else if (attrs[i] == 3 || attrs[i] == 4 || attrs[i] == 11) *(CUdeviceptr *)data[i] = 0;
            else *(int *)data[i] = 0;
        }
    }
    RET(0);
}

/* -------- modules / libraries -------- */
API CUresult cuModuleLoadDataEx(void **pmod, const void *image, unsigned n, int *opts, void **vals) {
    (void)n; (void)opts; (void)vals;
    LOCK(); init_devices();
    image_t *im = load_image(image, cur_dev());
    CUresult err = image_error(im);
    if (err) { trace_load("cuModuleLoadData", NULL, im, err); RET(err); }
    mod_t *m = new_handle(K_MOD, sizeof(mod_t)); m->img = im;
    *pmod = m;
    trace_load("cuModuleLoadData", m, im, 0);
    RET(0);
}
API CUresult cuModuleLoadData(void **pmod, const void *image) { return cuModuleLoadDataEx(pmod, image, 0, NULL, NULL); }
API CUresult cuModuleLoadFatBinary(void **pmod, const void *image) { return cuModuleLoadDataEx(pmod, image, 0, NULL, NULL); }
API CUresult cuModuleUnload(void *mod) {
    LOCK(); if (!is_kind(mod, K_MOD)) RET(CUDA_ERROR_INVALID_HANDLE);
    if (tracing()) { tr_begin("cuModuleUnload"); tr_str("handle", hid(mod)); tr_end(); }
    ((hdr_t *)mod)->magic = 0;
    RET(0);
}
static func_t *make_func(image_t *im, int entry, kernel_t *k, int dev) {
    func_t *f = new_handle(K_FUNC, sizeof(func_t));
    f->img = im; f->entry = entry; f->kernel = k; f->dev = dev;
    f->attrs = k ? &k->attrs : &f->own;
    return f;
}
API CUresult cuModuleGetFunction(void **pf, void *mod, const char *name) {
    LOCK();
    if (!is_kind(mod, K_MOD)) RET(CUDA_ERROR_INVALID_HANDLE);
    mod_t *m = mod; entry_t *e = find_entry(m->img, name);
    if (!e) RET(CUDA_ERROR_NOT_FOUND);
    func_t *f = make_func(m->img, (int)(e - m->img->entries), NULL, m->img->dev);
    *pf = f;
    if (tracing()) { tr_begin("cuModuleGetFunction"); tr_str("handle", hid(f)); tr_str("module", hid(m)); tr_str("name", name); tr_end(); }
    RET(0);
}
API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, void *mod, const char *name) {
    LOCK(); if (!is_kind(mod, K_MOD)) RET(CUDA_ERROR_INVALID_HANDLE);
    CUresult r = resolve_global(((mod_t *)mod)->img, name, dptr, bytes);
    if (tracing()) {
        tr_begin("cuModuleGetGlobal"); tr_str("module", hid(mod)); tr_str("name", name); tr_int("result", r);
        if (!r) { tr_uint("address", dptr ? *dptr : 0); }
        tr_end();
    }
    RET(r);
}
API CUresult cuModuleGetFunctionCount(unsigned *n, void *mod) {
    LOCK(); if (!is_kind(mod, K_MOD)) RET(CUDA_ERROR_INVALID_HANDLE); *n = (unsigned)((mod_t *)mod)->img->nentries; RET(0);
}
API CUresult cuModuleGetLoadingMode(int *mode) { *mode = 1; /* LAZY */ return 0; }

API CUresult cuLibraryLoadData(void **plib, const void *code, void *jo, void *jv, unsigned nj,
                               void *lo, void *lv, unsigned nl) {
    (void)jo; (void)jv; (void)nj; (void)lo; (void)lv; (void)nl;
    LOCK(); init_devices();
    image_t *im = load_image(code, cur_dev());
    CUresult err = image_error(im);
    if (err) { trace_load("cuLibraryLoadData", NULL, im, err); RET(err); }
    lib_t *l = new_handle(K_LIB, sizeof(lib_t)); l->img = im;
    *plib = l;
    trace_load("cuLibraryLoadData", l, im, 0);
    RET(0);
}
API CUresult cuLibraryUnload(void *lib) {
    LOCK(); if (!is_kind(lib, K_LIB)) RET(CUDA_ERROR_INVALID_HANDLE);
    if (tracing()) { tr_begin("cuLibraryUnload"); tr_str("handle", hid(lib)); tr_end(); }
    ((hdr_t *)lib)->magic = 0;
    RET(0);
}
API CUresult cuLibraryGetKernel(void **pk, void *lib, const char *name) {
    LOCK();
    if (!is_kind(lib, K_LIB)) RET(CUDA_ERROR_INVALID_HANDLE);
    lib_t *l = lib; entry_t *e = find_entry(l->img, name);
    if (!e) RET(CUDA_ERROR_NOT_FOUND);
    kernel_t *k = new_handle(K_KERNEL, sizeof(kernel_t)); k->lib = l; k->entry = (int)(e - l->img->entries);
    *pk = k;
    if (tracing()) { tr_begin("cuLibraryGetKernel"); tr_str("handle", hid(k)); tr_str("library", hid(l)); tr_str("name", name); tr_end(); }
    RET(0);
}
API CUresult cuLibraryGetKernelCount(unsigned *n, void *lib) {
    LOCK(); if (!is_kind(lib, K_LIB)) RET(CUDA_ERROR_INVALID_HANDLE); *n = (unsigned)((lib_t *)lib)->img->nentries; RET(0);
}
API CUresult cuLibraryGetModule(void **pmod, void *lib) {
    LOCK(); if (!is_kind(lib, K_LIB)) RET(CUDA_ERROR_INVALID_HANDLE);
    lib_t *l = lib;
    if (!l->mod) { mod_t *m = new_handle(K_MOD, sizeof(mod_t)); m->img = l->img; m->lib = l; l->mod = m; }
    *pmod = l->mod; RET(0);
}
API CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, void *lib, const char *name) {
    LOCK(); if (!is_kind(lib, K_LIB)) RET(CUDA_ERROR_INVALID_HANDLE);
    CUresult r = resolve_global(((lib_t *)lib)->img, name, dptr, bytes);
    if (tracing()) {
        tr_begin("cuLibraryGetGlobal"); tr_str("library", hid(lib)); tr_str("name", name); tr_int("result", r);
        if (!r) { tr_uint("address", dptr ? *dptr : 0); tr_uint("size", bytes ? *bytes : 0); }
        tr_end();
    }
    RET(r);
}
API CUresult cuKernelGetFunction(void **pf, void *kernel) {
    LOCK(); if (!is_kind(kernel, K_KERNEL)) RET(CUDA_ERROR_INVALID_HANDLE);
    kernel_t *k = kernel; int d = cur_dev();
    if (!k->func[d]) k->func[d] = make_func(k->lib->img, k->entry, k, d);
    *pf = k->func[d]; RET(0);
}
API CUresult cuKernelGetName(const char **name, void *kernel) {
    LOCK(); if (!is_kind(kernel, K_KERNEL)) RET(CUDA_ERROR_INVALID_HANDLE);
    kernel_t *k = kernel; *name = k->lib->img->entries[k->entry].name; RET(0);
}
API CUresult cuFuncGetName(const char **name, void *func) {
    LOCK(); if (!is_kind(func, K_FUNC)) RET(CUDA_ERROR_INVALID_HANDLE);
    func_t *f = func; *name = f->img->entries[f->entry].name; RET(0);
}
static entry_t *entry_of(void *h, image_t **pim, fattrs_t **pa, int *dev) {
    if (is_kind(h, K_FUNC)) {
        func_t *f = h; if (pim) *pim = f->img;
        if (pa) *pa = f->attrs;
        if (dev) *dev = f->dev;
        return &f->img->entries[f->entry];
    }
    if (is_kind(h, K_KERNEL)) {
        kernel_t *k = h; if (pim) *pim = k->lib->img;
        if (pa) *pa = &k->attrs;
        if (dev) *dev = cur_dev();
        return &k->lib->img->entries[k->entry];
    }
    return NULL;
}
static CUresult param_info(void *h, size_t i, size_t *off, size_t *size) {
    entry_t *e = entry_of(h, NULL, NULL, NULL);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    if (!e->params_known || i >= (size_t)e->nparams) return CUDA_ERROR_INVALID_VALUE;
    if (off) *off = (size_t)e->params[i].offset;
    if (size) *size = (size_t)e->params[i].size;
    return 0;
}
API CUresult cuKernelGetParamInfo(void *k, size_t i, size_t *off, size_t *size) { LOCK(); RET(param_info(k, i, off, size)); }
API CUresult cuFuncGetParamInfo(void *f, size_t i, size_t *off, size_t *size) { LOCK(); RET(param_info(f, i, off, size)); }

static int func_attr_value(entry_t *e, fattrs_t *a, int attr, int dev) {
    if (attr >= 0 && attr < NFATTR && a->set[attr]) return a->val[attr];
    int cc = devs[dev].major * 10 + devs[dev].minor;
    switch (attr) {
    case 0: return e->maxthreads;             /* MAX_THREADS_PER_BLOCK */
    case 1: return e->shared;                 /* SHARED_SIZE_BYTES */
    case 2: return e->constsz;                /* CONST_SIZE_BYTES */
    case 3: return e->local;                  /* LOCAL_SIZE_BYTES */
    case 4: return e->regs;                   /* NUM_REGS */
    case 5: return cc;                        /* PTX_VERSION */
    case 6: return cc;                        /* BINARY_VERSION */
    case 7: return 0;                         /* CACHE_MODE_CA */
    case 8: return 49152 - e->shared;         /* MAX_DYNAMIC_SHARED_SIZE_BYTES */
    case 9: return -1;                        /* PREFERRED_SHARED_MEMORY_CARVEOUT */
    default: return 0;
    }
}
API CUresult cuFuncGetAttribute(int *v, int attr, void *func) {
    LOCK(); init_devices();
    image_t *im; fattrs_t *a; int dev;
    entry_t *e = entry_of(func, &im, &a, &dev);
    if (!e) RET(CUDA_ERROR_INVALID_HANDLE);
    *v = func_attr_value(e, a, attr, dev); RET(0);
}
API CUresult cuKernelGetAttribute(int *v, int attr, void *kernel, CUdevice d) {
    LOCK(); CHECK_DEV(d);
    image_t *im; fattrs_t *a;
    entry_t *e = entry_of(kernel, &im, &a, NULL);
    if (!e) RET(CUDA_ERROR_INVALID_HANDLE);
    *v = func_attr_value(e, a, attr, d); RET(0);
}
static CUresult set_attr(const char *call, void *h, int attr, int val, int dev) {
    image_t *im; fattrs_t *a;
    entry_t *e = entry_of(h, &im, &a, NULL);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    if (attr < 0 || attr >= NFATTR) return CUDA_ERROR_INVALID_VALUE;
    a->set[attr] = 1; a->val[attr] = val;
    if (tracing()) {
        tr_begin(call); tr_str("handle", hid(h)); tr_str("name", e->name);
        tr_int("attribute", attr); tr_int("value", val);
        if (dev >= 0) tr_int("device", dev);
        tr_end();
    }
    return 0;
}
API CUresult cuFuncSetAttribute(void *f, int attr, int val) { LOCK(); RET(set_attr("cuFuncSetAttribute", f, attr, val, -1)); }
API CUresult cuKernelSetAttribute(int attr, int val, void *k, CUdevice d) { LOCK(); RET(set_attr("cuKernelSetAttribute", k, attr, val, d)); }
static CUresult set_cache(const char *call, void *h, int cfg, int dev) {
    fattrs_t *a; entry_t *e = entry_of(h, NULL, &a, NULL);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    a->cache_config = cfg;
    if (tracing()) {
        tr_begin(call); tr_str("handle", hid(h)); tr_str("name", e->name); tr_int("config", cfg);
        if (dev >= 0) tr_int("device", dev);
        tr_end();
    }
    return 0;
}
API CUresult cuFuncSetCacheConfig(void *f, int cfg) { LOCK(); RET(set_cache("cuFuncSetCacheConfig", f, cfg, -1)); }
API CUresult cuKernelSetCacheConfig(void *k, int cfg, CUdevice d) { LOCK(); RET(set_cache("cuKernelSetCacheConfig", k, cfg, d)); }
API CUresult cuFuncSetSharedMemConfig(void *f, int cfg) { (void)f; (void)cfg; return 0; }
API CUresult cuFuncGetModule(void **pmod, void *f) {
    LOCK(); if (!is_kind(f, K_FUNC)) RET(CUDA_ERROR_INVALID_HANDLE);
    func_t *fn = f;
    if (fn->kernel) RET(cuLibraryGetModule(pmod, fn->kernel->lib));
    *pmod = NULL; RET(CUDA_ERROR_NOT_SUPPORTED);
}
API CUresult cuFuncIsLoaded(int *state, void *f) { (void)f; *state = 1; return 0; }
API CUresult cuFuncLoad(void *f) { (void)f; return 0; }

/* -------- occupancy -------- */
static int occ_blocks(entry_t *e, fattrs_t *a, int dev, int block, size_t dyn) {
    if (block <= 0) return 0;
    device_t *d = &devs[dev];
    int threads = (block + 31) / 32 * 32;
    int n = 2048 / threads;
    int regs = func_attr_value(e, a, 4, dev);
    if (regs > 0) { int r = 65536 / (regs * threads); if (r < n) n = r; }
    size_t smem = (size_t)e->shared + dyn;
    if (smem > 0) { int s = (int)((size_t)d->shared_per_sm / smem); if (s < n) n = s; }
    if (n > d->max_blocks_sm) n = d->max_blocks_sm;
    if (block > func_attr_value(e, a, 0, dev)) n = 0;
    return n;
}
API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, void *f, int block, size_t dyn, unsigned flags) {
    (void)flags; LOCK(); init_devices();
    fattrs_t *a; int dev; entry_t *e = entry_of(f, NULL, &a, &dev);
    if (!e) RET(CUDA_ERROR_INVALID_HANDLE);
    *n = occ_blocks(e, a, dev, block, dyn); RET(0);
}
API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void *f, int block, size_t dyn) {
    return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, f, block, dyn, 0);
}
typedef size_t (*b2smem_t)(int);
API CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGrid, int *blockSize, void *f, b2smem_t cb,
                                                       size_t dyn, int limit, unsigned flags) {
    (void)flags; LOCK(); init_devices();
    fattrs_t *a; int dev; entry_t *e = entry_of(f, NULL, &a, &dev);
    if (!e) RET(CUDA_ERROR_INVALID_HANDLE);
    int maxb = func_attr_value(e, a, 0, dev);
    if (limit > 0 && limit < maxb) maxb = limit;
    int best_b = 0, best_n = 0; long best_occ = -1;
    for (int b = maxb / 32 * 32; b >= 32; b -= 32) {
        size_t dsm = cb ? cb(b) : dyn;
        int n = occ_blocks(e, a, dev, b, dsm);
        long occ = (long)n * b;
        if (occ > best_occ) { best_occ = occ; best_b = b; best_n = n; }
    }
    if (best_b == 0) { best_b = maxb; best_n = occ_blocks(e, a, dev, maxb, cb ? cb(maxb) : dyn); }
    *blockSize = best_b; *minGrid = best_n * devs[dev].sms;
    RET(0);
}
API CUresult cuOccupancyMaxPotentialBlockSize(int *minGrid, int *blockSize, void *f, b2smem_t cb, size_t dyn, int limit) {
    return cuOccupancyMaxPotentialBlockSizeWithFlags(minGrid, blockSize, f, cb, dyn, limit, 0);
}
API CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *sz, void *f, int nblocks, int block) {
    (void)block; LOCK(); init_devices();
    fattrs_t *a; int dev; entry_t *e = entry_of(f, NULL, &a, &dev);
    if (!e) RET(CUDA_ERROR_INVALID_HANDLE);
    size_t per = nblocks > 0 ? (size_t)devs[dev].shared_per_sm / (size_t)nblocks : 0;
    if (per > (size_t)devs[dev].optin) per = (size_t)devs[dev].optin;
    *sz = per > (size_t)e->shared ? per - (size_t)e->shared : 0; RET(0);
}

/* -------- launches -------- */
typedef struct { int id; int pad; unsigned char value[64]; } launch_attr_t;
typedef struct {
    unsigned gx, gy, gz, bx, by, bz, shmem;
    void *stream;
    launch_attr_t *attrs;
    unsigned nattrs;
} launch_config_t;

static CUresult do_launch(const char *call, void *f, unsigned gx, unsigned gy, unsigned gz,
                          unsigned bx, unsigned by, unsigned bz, unsigned shmem, void *stream,
                          void **params, void **extra, int coop, const launch_attr_t *attrs, unsigned nattrs) {
    LOCK(); init_devices();
    image_t *im; fattrs_t *a; int dev;
    entry_t *e = entry_of(f, &im, &a, &dev);
    if (!e) RET(CUDA_ERROR_INVALID_HANDLE);
    if (is_kind(f, K_KERNEL)) dev = cur_dev();
    if (!gx || !gy || !gz || !bx || !by || !bz) RET(CUDA_ERROR_INVALID_VALUE);
    if ((unsigned long long)bx * by * bz > (unsigned)func_attr_value(e, a, 0, dev)) RET(CUDA_ERROR_INVALID_VALUE);
    if (!tracing()) RET(0);
    tr_begin(call);
    tr_str("function", hid(f));
    tr_str("name", e->name);
    tr_int("device", dev);
    tr_dim3("grid", gx, gy, gz);
    tr_dim3("block", bx, by, bz);
    tr_uint("shared_mem", shmem);
    tr_str("stream", stream_id(stream));
    tr_bool("cooperative", coop);
    if (params) {
        if (!e->params_known) { tr_key("params"); tb_put("null", 4); }
        else {
            uint8_t *buf = calloc(1, (size_t)e->param_bytes + 1);
            for (int i = 0; i < e->nparams; i++)
                if (params[i]) memcpy(buf + e->params[i].offset, params[i], (size_t)e->params[i].size);
            tr_hex("params", buf, (size_t)e->param_bytes);
            tr_key("param_sizes"); tb_put("[", 1);
            for (int i = 0; i < e->nparams; i++) tb_printf(i ? ",%d" : "%d", e->params[i].size);
            tb_put("]", 1);
            free(buf);
        }
    } else if (extra) {
        const void *pbuf = NULL; size_t psz = 0;
        for (int i = 0; extra[i]; i += 2) {
            if ((uintptr_t)extra[i] == 1) pbuf = extra[i + 1];
            else if ((uintptr_t)extra[i] == 2) psz = *(size_t *)extra[i + 1];
            else break;
        }
        if (pbuf) tr_hex("params", pbuf, psz); else { tr_key("params"); tb_put("null", 4); }
        tr_bool("extra", 1);
    } else {
        tr_hex("params", "", 0);
    }
    if (nattrs) {
        tr_key("attrs"); tb_put("[", 1);
        for (unsigned i = 0; i < nattrs; i++) {
            tb_printf(i ? ",[%d," : "[%d,", attrs[i].id);
            tb_put("\"", 1);
            for (int j = 0; j < 16; j++) tb_printf("%02x", attrs[i].value[j]);
            tb_put("\"]", 2);
        }
        tb_put("]", 1);
    }
    tr_end();
    RET(0);
}
API CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned shmem, void *stream, void **params, void **extra) {
    return do_launch("cuLaunchKernel", f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra, 0, NULL, 0);
}
API CUresult cuLaunchCooperativeKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                       unsigned bz, unsigned shmem, void *stream, void **params) {
    return do_launch("cuLaunchCooperativeKernel", f, gx, gy, gz, bx, by, bz, shmem, stream, params, NULL, 1, NULL, 0);
}
API CUresult cuLaunchKernelEx(const launch_config_t *c, void *f, void **params, void **extra) {
    int coop = 0;
    for (unsigned i = 0; i < c->nattrs; i++)
        if (c->attrs[i].id == 2 /* CU_LAUNCH_ATTRIBUTE_COOPERATIVE */) coop = *(const int *)c->attrs[i].value != 0;
    return do_launch("cuLaunchKernelEx", f, c->gx, c->gy, c->gz, c->bx, c->by, c->bz, c->shmem, c->stream,
                     params, extra, coop, c->attrs, c->nattrs);
}

/* ============================================ cuGetProcAddress table === */
typedef struct { const char *name; void *fn; } proc_t;
#define P(api, sym) {api, (void *)sym}
static const proc_t TABLE[] = {
    P("cuInit", cuInit), P("cuDriverGetVersion", cuDriverGetVersion),
    P("cuGetErrorName", cuGetErrorName), P("cuGetErrorString", cuGetErrorString),
    P("cuDeviceGetCount", cuDeviceGetCount), P("cuDeviceGet", cuDeviceGet), P("cuDeviceGetName", cuDeviceGetName),
    P("cuDeviceGetUuid", cuDeviceGetUuid_v2), P("cuDeviceTotalMem", cuDeviceTotalMem_v2),
    P("cuDeviceGetAttribute", cuDeviceGetAttribute), P("cuDeviceComputeCapability", cuDeviceComputeCapability),
    P("cuDeviceGetPCIBusId", cuDeviceGetPCIBusId), P("cuDeviceGetLuid", cuDeviceGetLuid),
    P("cuDeviceCanAccessPeer", cuDeviceCanAccessPeer), P("cuDeviceGetP2PAttribute", cuDeviceGetP2PAttribute),
    P("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain), P("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2),
    P("cuDevicePrimaryCtxGetState", cuDevicePrimaryCtxGetState), P("cuDevicePrimaryCtxSetFlags", cuDevicePrimaryCtxSetFlags_v2),
    P("cuDevicePrimaryCtxReset", cuDevicePrimaryCtxReset_v2),
    P("cuCtxGetCurrent", cuCtxGetCurrent), P("cuCtxSetCurrent", cuCtxSetCurrent),
    P("cuCtxPushCurrent", cuCtxPushCurrent_v2), P("cuCtxPopCurrent", cuCtxPopCurrent_v2),
    P("cuCtxGetDevice", cuCtxGetDevice), P("cuCtxSynchronize", cuCtxSynchronize), P("cuCtxGetId", cuCtxGetId),
    P("cuCtxGetApiVersion", cuCtxGetApiVersion), P("cuCtxGetFlags", cuCtxGetFlags), P("cuCtxSetFlags", cuCtxSetFlags),
    P("cuCtxGetStreamPriorityRange", cuCtxGetStreamPriorityRange), P("cuCtxGetLimit", cuCtxGetLimit),
    P("cuCtxSetLimit", cuCtxSetLimit), P("cuCtxGetCacheConfig", cuCtxGetCacheConfig), P("cuCtxSetCacheConfig", cuCtxSetCacheConfig),
    P("cuStreamCreate", cuStreamCreate), P("cuStreamCreateWithPriority", cuStreamCreateWithPriority),
    P("cuStreamDestroy", cuStreamDestroy_v2), P("cuStreamSynchronize", cuStreamSynchronize), P("cuStreamQuery", cuStreamQuery),
    P("cuStreamWaitEvent", cuStreamWaitEvent), P("cuStreamGetCtx", cuStreamGetCtx), P("cuStreamGetFlags", cuStreamGetFlags),
    P("cuStreamGetPriority", cuStreamGetPriority), P("cuStreamGetId", cuStreamGetId), P("cuStreamGetDevice", cuStreamGetDevice),
    P("cuLaunchHostFunc", cuLaunchHostFunc), P("cuStreamAddCallback", cuStreamAddCallback), P("cuStreamIsCapturing", cuStreamIsCapturing),
    P("cuEventCreate", cuEventCreate), P("cuEventDestroy", cuEventDestroy_v2), P("cuEventRecord", cuEventRecord),
    P("cuEventRecordWithFlags", cuEventRecordWithFlags), P("cuEventSynchronize", cuEventSynchronize),
    P("cuEventQuery", cuEventQuery), P("cuEventElapsedTime", cuEventElapsedTime_v2),
    P("cuMemAlloc", cuMemAlloc_v2), P("cuMemAllocAsync", cuMemAllocAsync),
    P("cuDeviceGetDefaultMemPool", cuDeviceGetDefaultMemPool), P("cuDeviceGetMemPool", cuDeviceGetMemPool),
    P("cuDeviceSetMemPool", cuDeviceSetMemPool), P("cuMemPoolGetAttribute", cuMemPoolGetAttribute),
    P("cuMemPoolSetAttribute", cuMemPoolSetAttribute), P("cuMemPoolTrimTo", cuMemPoolTrimTo),
    P("cuMemPoolSetAccess", cuMemPoolSetAccess), P("cuMemPoolGetAccess", cuMemPoolGetAccess),
    P("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync), P("cuMemAllocManaged", cuMemAllocManaged),
    P("cuMemAllocPitch", cuMemAllocPitch_v2), P("cuMemFree", cuMemFree_v2), P("cuMemFreeAsync", cuMemFreeAsync),
    P("cuMemGetInfo", cuMemGetInfo_v2), P("cuMemGetAddressRange", cuMemGetAddressRange_v2),
    P("cuMemHostAlloc", cuMemHostAlloc), P("cuMemAllocHost", cuMemAllocHost_v2), P("cuMemFreeHost", cuMemFreeHost),
    P("cuMemHostGetDevicePointer", cuMemHostGetDevicePointer_v2), P("cuMemHostGetFlags", cuMemHostGetFlags),
    P("cuMemHostRegister", cuMemHostRegister_v2), P("cuMemHostUnregister", cuMemHostUnregister),
    P("cuMemcpyHtoD", cuMemcpyHtoD_v2), P("cuMemcpyDtoH", cuMemcpyDtoH_v2), P("cuMemcpyDtoD", cuMemcpyDtoD_v2),
    P("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2), P("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2),
    P("cuMemcpyDtoDAsync", cuMemcpyDtoDAsync_v2), P("cuMemcpy", cuMemcpy), P("cuMemcpyAsync", cuMemcpyAsync),
    P("cuMemcpyPeer", cuMemcpyPeer), P("cuMemcpyPeerAsync", cuMemcpyPeerAsync),
    P("cuMemsetD8", cuMemsetD8_v2), P("cuMemsetD16", cuMemsetD16_v2), P("cuMemsetD32", cuMemsetD32_v2),
    P("cuMemsetD8Async", cuMemsetD8Async), P("cuMemsetD16Async", cuMemsetD16Async), P("cuMemsetD32Async", cuMemsetD32Async),
    P("cuPointerGetAttribute", cuPointerGetAttribute), P("cuPointerGetAttributes", cuPointerGetAttributes),
    P("cuModuleLoadData", cuModuleLoadData), P("cuModuleLoadDataEx", cuModuleLoadDataEx),
    P("cuModuleLoadFatBinary", cuModuleLoadFatBinary), P("cuModuleUnload", cuModuleUnload),
    P("cuModuleGetFunction", cuModuleGetFunction), P("cuModuleGetGlobal", cuModuleGetGlobal_v2),
    P("cuModuleGetFunctionCount", cuModuleGetFunctionCount), P("cuModuleGetLoadingMode", cuModuleGetLoadingMode),
    P("cuLibraryLoadData", cuLibraryLoadData), P("cuLibraryUnload", cuLibraryUnload),
    P("cuLibraryGetKernel", cuLibraryGetKernel), P("cuLibraryGetKernelCount", cuLibraryGetKernelCount),
    P("cuLibraryGetModule", cuLibraryGetModule), P("cuLibraryGetGlobal", cuLibraryGetGlobal),
    P("cuKernelGetFunction", cuKernelGetFunction), P("cuKernelGetName", cuKernelGetName), P("cuFuncGetName", cuFuncGetName),
    P("cuKernelGetParamInfo", cuKernelGetParamInfo), P("cuFuncGetParamInfo", cuFuncGetParamInfo),
    P("cuFuncGetAttribute", cuFuncGetAttribute), P("cuKernelGetAttribute", cuKernelGetAttribute),
    P("cuFuncSetAttribute", cuFuncSetAttribute), P("cuKernelSetAttribute", cuKernelSetAttribute),
    P("cuFuncSetCacheConfig", cuFuncSetCacheConfig), P("cuKernelSetCacheConfig", cuKernelSetCacheConfig),
    P("cuFuncSetSharedMemConfig", cuFuncSetSharedMemConfig), P("cuFuncGetModule", cuFuncGetModule),
    P("cuFuncIsLoaded", cuFuncIsLoaded), P("cuFuncLoad", cuFuncLoad),
    P("cuOccupancyMaxActiveBlocksPerMultiprocessor", cuOccupancyMaxActiveBlocksPerMultiprocessor),
    P("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags),
    P("cuOccupancyMaxPotentialBlockSize", cuOccupancyMaxPotentialBlockSize),
    P("cuOccupancyMaxPotentialBlockSizeWithFlags", cuOccupancyMaxPotentialBlockSizeWithFlags),
    P("cuOccupancyAvailableDynamicSMemPerBlock", cuOccupancyAvailableDynamicSMemPerBlock),
    P("cuLaunchKernel", cuLaunchKernel), P("cuLaunchCooperativeKernel", cuLaunchCooperativeKernel),
    P("cuLaunchKernelEx", cuLaunchKernelEx),
};

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags, int *status) {
    (void)version; (void)flags;
    for (size_t i = 0; i < sizeof TABLE / sizeof *TABLE; i++)
        if (!strcmp(TABLE[i].name, symbol)) {
            *pfn = TABLE[i].fn;
            if (status) *status = 0; /* CU_GET_PROC_ADDRESS_SUCCESS */
            return CUDA_SUCCESS;
        }
    if (!strcmp(symbol, "cuGetProcAddress")) { *pfn = (void *)cuGetProcAddress_v2; if (status) *status = 0; return 0; }
    *pfn = NULL;
    if (status) *status = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
    return CUDA_ERROR_NOT_FOUND;
}
API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
