/* A stand-in for the NVIDIA driver library (libcuda.so) for tests on machines without a GPU.
 *
 * It implements the driver entry points loaderx calls, synchronously, on host memory: "device"
 * memory is malloc'ed host memory (so a "device pointer" is a host address), copies are memcpy,
 * streams and events are tokens that are always complete. It records what was asked of it
 * (fake_stat, fake_dtoh_size) and can fail the n-th device-to-host copy (fake_fail_dtoh_at), so a
 * test can check which copies an append made, on which stream, and that staging stays bounded.
 *
 * It says nothing about real devices: stream ordering, asynchrony and device memory are the GPU
 * certification's business (scripts/certify_gpu.py). Built by the tests with `cc -shared`.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;
typedef unsigned long long CUdeviceptr;

#define OK 0
#define ERR_INVALID_VALUE 1
#define ERR_OUT_OF_MEMORY 2
#define ERR_INVALID_DEVICE 101
#define ERR_UNKNOWN 999

#define DEVICES 2
#define TABLE 8192
#define SIZES 256

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char ctx_token[DEVICES];
static char stream_tokens[64];
static int streams_made;
static long long last_stream;

struct region { void *p; size_t n; int pinned; };
static struct region regions[TABLE];

static long long dtoh_calls, dtoh_bytes, htod_calls, htod_bytes, wait_calls, fail_dtoh_at = -1;
static long long pinned_live, pinned_peak, device_live, device_peak;
static long long dtoh_sizes[SIZES];

static void track(void *p, size_t n, int pinned) {
    for (int i = 0; i < TABLE; i++) {
        if (regions[i].p == NULL) {
            regions[i] = (struct region){p, n, pinned};
            break;
        }
    }
    if (pinned) {
        pinned_live += (long long)n;
        if (pinned_live > pinned_peak) pinned_peak = pinned_live;
    } else {
        device_live += (long long)n;
        if (device_live > device_peak) device_peak = device_live;
    }
}

static void untrack(void *p) {
    for (int i = 0; i < TABLE; i++) {
        if (regions[i].p == p) {
            if (regions[i].pinned) pinned_live -= (long long)regions[i].n;
            else device_live -= (long long)regions[i].n;
            regions[i].p = NULL;
            return;
        }
    }
}

CUresult cuInit(unsigned int flags) { (void)flags; return OK; }
CUresult cuDriverGetVersion(int *v) { *v = 12060; return OK; }
CUresult cuDeviceGetCount(int *n) { *n = DEVICES; return OK; }

CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    if (ordinal < 0 || ordinal >= DEVICES) return ERR_INVALID_DEVICE;
    *d = ordinal;
    return OK;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    (void)d;
    strncpy(name, "loaderx fake CUDA device", (size_t)len);
    return OK;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { *c = &ctx_token[d]; return OK; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; return OK; }
CUresult cuCtxSetCurrent(CUcontext c) { (void)c; return OK; }

CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&mu);
    *s = &stream_tokens[streams_made % 64];
    streams_made++;
    last_stream = (long long)(uintptr_t)*s;
    pthread_mutex_unlock(&mu);
    return OK;
}
CUresult cuStreamDestroy_v2(CUstream s) { (void)s; return OK; }
CUresult cuStreamSynchronize(CUstream s) { (void)s; return OK; }

CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
    (void)s; (void)e; (void)flags;
    pthread_mutex_lock(&mu);
    wait_calls++;
    pthread_mutex_unlock(&mu);
    return OK;
}

CUresult cuEventCreate(CUevent *e, unsigned int flags) {
    (void)flags;
    *e = malloc(1);
    return *e ? OK : ERR_OUT_OF_MEMORY;
}
CUresult cuEventRecord(CUevent e, CUstream s) { (void)e; (void)s; return OK; }
CUresult cuEventSynchronize(CUevent e) { (void)e; return OK; }
CUresult cuEventDestroy_v2(CUevent e) { free(e); return OK; }

CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags) {
    (void)flags;
    if (posix_memalign(p, 4096, n ? n : 1) != 0) return ERR_OUT_OF_MEMORY;
    pthread_mutex_lock(&mu);
    track(*p, n, 1);
    pthread_mutex_unlock(&mu);
    return OK;
}

CUresult cuMemFreeHost(void *p) {
    pthread_mutex_lock(&mu);
    untrack(p);
    pthread_mutex_unlock(&mu);
    free(p);
    return OK;
}

CUresult cuMemAlloc_v2(CUdeviceptr *d, size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 256, n ? n : 1) != 0) return ERR_OUT_OF_MEMORY;
    pthread_mutex_lock(&mu);
    track(p, n, 0);
    pthread_mutex_unlock(&mu);
    *d = (CUdeviceptr)(uintptr_t)p;
    return OK;
}

CUresult cuMemFree_v2(CUdeviceptr d) {
    void *p = (void *)(uintptr_t)d;
    pthread_mutex_lock(&mu);
    untrack(p);
    pthread_mutex_unlock(&mu);
    free(p);
    return OK;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    (void)s;
    memcpy((void *)(uintptr_t)dst, src, n);
    pthread_mutex_lock(&mu);
    htod_calls++;
    htod_bytes += (long long)n;
    pthread_mutex_unlock(&mu);
    return OK;
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
    (void)s;
    pthread_mutex_lock(&mu);
    long long k = dtoh_calls++;
    int fail = (k == fail_dtoh_at);
    if (!fail) {
        dtoh_sizes[k % SIZES] = (long long)n;
        dtoh_bytes += (long long)n;
    }
    pthread_mutex_unlock(&mu);
    if (fail) return ERR_UNKNOWN;
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return OK;
}

CUresult cuGetErrorString(CUresult e, const char **s) {
    *s = e == OK ? "no error" : "fake driver error";
    return OK;
}
CUresult cuGetErrorName(CUresult e, const char **s) {
    *s = e == OK ? "CUDA_SUCCESS" : "CUDA_ERROR_FAKE";
    return OK;
}

/* ---- what the tests read ---- */

long long fake_stat(const char *name) {
    long long v = -1;
    pthread_mutex_lock(&mu);
    if (!strcmp(name, "dtoh_calls")) v = dtoh_calls;
    else if (!strcmp(name, "dtoh_bytes")) v = dtoh_bytes;
    else if (!strcmp(name, "htod_calls")) v = htod_calls;
    else if (!strcmp(name, "htod_bytes")) v = htod_bytes;
    else if (!strcmp(name, "wait_calls")) v = wait_calls;
    else if (!strcmp(name, "streams")) v = streams_made;
    else if (!strcmp(name, "last_stream")) v = last_stream;
    else if (!strcmp(name, "pinned_live")) v = pinned_live;
    else if (!strcmp(name, "pinned_peak")) v = pinned_peak;
    else if (!strcmp(name, "device_live")) v = device_live;
    else if (!strcmp(name, "device_peak")) v = device_peak;
    pthread_mutex_unlock(&mu);
    return v;
}

/* Size of the k-th device-to-host copy (of the last SIZES). */
long long fake_dtoh_size(long long k) {
    pthread_mutex_lock(&mu);
    long long v = k < dtoh_calls ? dtoh_sizes[k % SIZES] : -1;
    pthread_mutex_unlock(&mu);
    return v;
}

/* The k-th device-to-host copy from now on fails (-1: none); resets the peaks. */
void fake_fail_dtoh_at(long long k) {
    pthread_mutex_lock(&mu);
    fail_dtoh_at = k < 0 ? -1 : dtoh_calls + k;
    pinned_peak = pinned_live;
    device_peak = device_live;
    pthread_mutex_unlock(&mu);
}
