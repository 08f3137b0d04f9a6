/* fa3jit C ABI: attention forward for NVIDIA Hopper (sm_90a), kernels generated and compiled at run time.
 *
 * The stable interface for serving processes and language bindings (the Python package uses it through
 * ctypes). Plain C99; every function is safe to call from C++ and never lets an exception escape.
 *
 *   fa3jit_runtime_options opts = {sizeof(opts), NULL};       // cache dir from the environment
 *   fa3jit_runtime* rt = NULL;
 *   if (fa3jit_runtime_create(&opts, &rt) != FA3JIT_OK) { puts(fa3jit_last_error()); ... }
 *   fa3jit_forward_params p;
 *   fa3jit_forward_params_init(&p);                           // zero + struct_size
 *   p.dtype = FA3JIT_DTYPE_BF16; p.batch = ...; p.q.data = ...; ...
 *   fa3jit_status s = fa3jit_forward(rt, &p, stream);          // asynchronous on `stream`
 *   fa3jit_runtime_destroy(rt);
 *
 * Errors: every function that can fail returns an fa3jit_status; FA3JIT_OK (0) is success. On failure a
 * message naming the argument or spec field, the offending value and what is allowed is kept per thread
 * and read with fa3jit_last_error(). The status values equal fa3jit::ErrorCode (generator/error.h) 1:1.
 *
 * Threads: a runtime may be shared by any number of threads (compilation of one kernel happens once per
 * process even when many threads ask for it at once). Create and destroy it once per process.
 *
 * Kernel cache: compiled kernels are kept on disk, content-addressed (SHA-256 over the canonical spec, the
 * generated source, compiler flags and version, target arch and generator version). Directory: the
 * cache_dir option, else FA3JIT_CACHE_DIR, else $XDG_CACHE_HOME/fa3jit, else ~/.cache/fa3jit. An unusable
 * directory degrades to an in-memory cache with one warning on stderr. Logging: FA3JIT_LOG=info|debug.
 */
#ifndef FA3JIT_FA3JIT_H_
#define FA3JIT_FA3JIT_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(_WIN32)
#define FA3JIT_API
#else
#define FA3JIT_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when a struct or function of this header changes incompatibly. Structs only ever grow at the
 * end; their struct_size field tells the library which fields the caller knows. */
#define FA3JIT_ABI_VERSION 1

/* ---- status ------------------------------------------------------------------------------------------ */

typedef enum fa3jit_status {
  FA3JIT_OK = 0,
  FA3JIT_ERROR_INVALID_SPEC = 1,     /* a JSON spec field is unknown, of the wrong type, out of range, infeasible */
  FA3JIT_ERROR_INVALID_ARGUMENT = 2, /* a NULL handle/pointer, a bad struct_size or enum value, or a launch
                                        argument (pointer, alignment, stride, shape, head count) not accepted */
  FA3JIT_ERROR_UNSUPPORTED = 3,      /* valid request this build does not implement yet (e.g. E4M3) */
  FA3JIT_ERROR_COMPILE_FAILED = 4,   /* NVRTC rejected the generated source; the message holds its log */
  FA3JIT_ERROR_NO_DRIVER = 5,        /* libcuda.so.1 could not be opened or lacks an entry point */
  FA3JIT_ERROR_DRIVER = 6,           /* a CUDA driver call failed, including the launch itself */
  FA3JIT_ERROR_CACHE = 7,            /* the kernel cache could not be used and no fallback existed */
  FA3JIT_ERROR_IO = 8,               /* a file named by the caller could not be read or written */
  FA3JIT_ERROR_INTERNAL = 9          /* a bug, or host memory exhausted (message says which) */
} fa3jit_status;

/* Name of a status, e.g. "invalid_argument" ("ok" for FA3JIT_OK, "unknown" outside the enum). Static
 * storage; never NULL. */
FA3JIT_API const char* fa3jit_status_name(fa3jit_status status);

/* Message of the most recent failing call made by this thread, or "" when the most recent call succeeded
 * (every status-returning function resets it). The pointer stays valid until this thread's next fa3jit call. */
FA3JIT_API const char* fa3jit_last_error(void);

/* Library version, "MAJOR.MINOR.PATCH". Static storage. */
FA3JIT_API const char* fa3jit_version(void);

/* ---- runtime ----------------------------------------------------------------------------------------- */

typedef struct fa3jit_runtime fa3jit_runtime; /* opaque */

typedef struct fa3jit_runtime_options {
  size_t struct_size;    /* sizeof(fa3jit_runtime_options) as compiled by the caller */
  const char* cache_dir; /* kernel cache directory (created if missing); NULL or "" = from the environment */
} fa3jit_runtime_options;

/* Creates a runtime. `options` may be NULL (all defaults). Needs no GPU: the CUDA driver is opened on the
 * first forward call. On success *out is a new runtime; on failure *out is NULL.
 * Errors: INVALID_ARGUMENT (out NULL, struct_size too small, or non-zero fields unknown to this library). */
FA3JIT_API fa3jit_status fa3jit_runtime_create(const fa3jit_runtime_options* options, fa3jit_runtime** out);

/* Destroys a runtime (NULL is ignored). Kernels still running on a stream must have finished: destroying
 * unloads their code. */
FA3JIT_API void fa3jit_runtime_destroy(fa3jit_runtime* runtime);

/* ---- forward ----------------------------------------------------------------------------------------- */

typedef enum fa3jit_dtype {
  FA3JIT_DTYPE_FP16 = 0, /* IEEE half */
  FA3JIT_DTYPE_BF16 = 1, /* bfloat16 */
  FA3JIT_DTYPE_E4M3 = 2  /* float8 e4m3fn: reserved, rejected with UNSUPPORTED in this release */
} fa3jit_dtype;

/* A (batch, seqlen, heads, dim) tensor in device memory. The dim axis is contiguous (stride 1); the other
 * strides are in ELEMENTS (not bytes), may be anything (e.g. views into a fused qkv buffer) but must be
 * multiples of 16 bytes, and the base pointer must be 16-byte aligned: the kernel loads through TMA
 * (PTX ISA "Tensor copy", cuTensorMapEncodeTiled). */
typedef struct fa3jit_tensor {
  void* data;
  int64_t stride_batch;
  int64_t stride_seq;
  int64_t stride_head;
} fa3jit_tensor;

/* One attention forward: out = softmax(softmax_scale * q k^T + mask) v, per batch and head.
 *
 * Layout (FlashAttention's):  q   (batch, seqlen_q, num_heads,    head_dim)
 *                             k   (batch, seqlen_k, num_heads_kv, head_dim)
 *                             v   (batch, seqlen_k, num_heads_kv, head_dim_v)
 *                             out (batch, seqlen_q, num_heads,    head_dim_v), same dtype as q
 *                             lse (batch, num_heads, seqlen_q) float32, contiguous; natural-log
 *                                 log-sum-exp of the scaled scores of each row (NULL = not written)
 * GQA/MQA: num_heads must be a multiple of num_heads_kv; query head h reads kv head h / (num_heads/num_heads_kv).
 * Causal: bottom-right aligned as in FlashAttention >= 2.1: query row i sees keys j <= i + seqlen_k - seqlen_q.
 *   A row that sees no key (seqlen_q > seqlen_k) gets out = 0 and lse = -inf.
 * head_dim: 64, 128 or 256; head_dim_v 0 means head_dim (and must equal head_dim in this release). */
typedef struct fa3jit_forward_params {
  size_t struct_size; /* sizeof(fa3jit_forward_params) as compiled by the caller */
  fa3jit_dtype dtype; /* of q, k, v and out */
  int32_t causal;     /* 0 or 1 */
  int64_t batch, seqlen_q, seqlen_k, num_heads, num_heads_kv, head_dim, head_dim_v;
  fa3jit_tensor q, k, v, out;
  float* lse;          /* device pointer or NULL */
  float softmax_scale; /* 0 = 1/sqrt(head_dim) */
  /* NULL: the kernel spec comes from the tile table for (dtype, head_dim, causal). Otherwise a JSON spec
   * (generator/spec.h; e.g. {"dtype":"bf16","head_dim":128,"tile":{"block_m":128,"block_n":176}}) that must
   * agree with dtype, head_dim, head_dim_v and causal above. */
  const char* spec_json;
} fa3jit_forward_params;

/* Zero-fills *params and sets struct_size. */
static inline void fa3jit_forward_params_init(fa3jit_forward_params* params) {
  memset(params, 0, sizeof(*params));
  params->struct_size = sizeof(fa3jit_forward_params);
}

/* Launches the forward kernel on `cuda_stream` (a CUstream / cudaStream_t; NULL = the legacy default
 * stream) of the device that owns the pointers; the first call for a kernel spec compiles it (or loads it
 * from the cache), later calls only launch. Asynchronous: the kernel may still run when this returns;
 * errors of the kernel itself surface at the next synchronisation of the stream.
 * Errors (all argument checks come before the driver is touched):
 *   INVALID_ARGUMENT: runtime or params NULL; struct_size, dtype, causal or softmax_scale (NaN/inf) out of
 *     range; a NULL or misaligned tensor pointer; a stride not a multiple of 16 bytes; a size < 1; head_dim
 *     not 64/128/256; num_heads not a multiple of num_heads_kv; a spec_json that disagrees with the params;
 *   INVALID_SPEC: spec_json does not parse or has a bad field;
 *   UNSUPPORTED: E4M3, head_dim_v != head_dim, or another valid request this release does not implement;
 *   COMPILE_FAILED; NO_DRIVER; DRIVER (a driver call or the launch failed); CACHE; INTERNAL. */
FA3JIT_API fa3jit_status fa3jit_forward(fa3jit_runtime* runtime, const fa3jit_forward_params* params,
                                        void* cuda_stream);

/* ---- compile (warm-up and tooling) ------------------------------------------------------------------- */

#define FA3JIT_KEY_CAPACITY 80          /* the key is 64 hex digits of SHA-256 + NUL */
#define FA3JIT_KERNEL_NAME_CAPACITY 128

typedef struct fa3jit_kernel_info {
  size_t struct_size;                          /* sizeof(fa3jit_kernel_info) as compiled by the caller */
  char key[FA3JIT_KEY_CAPACITY];               /* cache key (hex), NUL-terminated */
  char kernel_name[FA3JIT_KERNEL_NAME_CAPACITY]; /* entry point name, NUL-terminated */
  int32_t cache_hit; /* 1 = served from memory or disk without compiling, 0 = compiled by NVRTC now */
  double ms;         /* wall time of this call (generation + compile or cache load), milliseconds */
  int32_t registers;         /* per thread, from ptxas; -1 = not reported */
  int32_t spill_store_bytes; /* ptxas spill stores, bytes; -1 = not reported */
  int32_t spill_load_bytes;  /* ptxas spill loads, bytes; -1 = not reported */
  int32_t smem_bytes;        /* dynamic shared memory requested at launch, bytes */
  int32_t num_threads;       /* threads per block (one producer + consumer warpgroups) */
  int32_t block_m, block_n;  /* tile */
} fa3jit_kernel_info;

/* Generates and compiles (or loads from the cache) the kernel for a JSON spec, without launching it and
 * without a GPU. Use it to warm the cache before serving. `out` may be NULL; if given, its struct_size
 * must be set and it is filled on success.
 * Errors: INVALID_ARGUMENT (runtime or spec_json NULL, out->struct_size too small); INVALID_SPEC;
 *   UNSUPPORTED; COMPILE_FAILED; CACHE; INTERNAL. */
FA3JIT_API fa3jit_status fa3jit_compile_spec(fa3jit_runtime* runtime, const char* spec_json,
                                             fa3jit_kernel_info* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FA3JIT_FA3JIT_H_ */
