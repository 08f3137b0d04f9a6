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
 *   fa3jit_status s = fa3jit_attention_forward(rt, NULL, &p, stream);  // asynchronous on `stream`
 *   // FP8: p.dtype = FA3JIT_DTYPE_E4M3; p.quant = FA3JIT_QUANT_PER_HEAD;        // out bf16 unless p.out_dtype
 *   //      p.q_descale = (fa3jit_scale){q_descale, num_heads_kv, 1}; ... k_descale, v_descale alike
 *   // FP8 from 16-bit inputs: fa3jit_quantize_fp8 (Hadamard rotation + per-block descales, FA3 §3.3) writes
 *   //      the e4m3 q, k, v and PER_BLOCK descales that fa3jit_attention_forward then reads on the same stream
 *   fa3jit_runtime_destroy(rt);
 *
 * A caller that pins a kernel (a tuned spec) creates it once and passes the handle on every call; no JSON
 * is read on the call path:
 *   fa3jit_kernel* k = NULL;
 *   fa3jit_kernel_create(rt, "{\"dtype\":\"bf16\",\"head_dim\":128,\"tile\":{\"block_n\":128}}", &k);
 *   fa3jit_attention_forward(rt, k, &p, stream);
 *   fa3jit_kernel_destroy(k);
 *
 * Errors: every function that can fail returns an fa3jit_status; FA3JIT_OK (0) is success. On failure a
 * message naming the argument or spec field, the offending value and what is allowed is kept per thread
 * and read with fa3jit_last_error(). The status values equal fa3jit::ErrorCode (core/error.h) 1:1.
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
 * end; their struct_size field tells the library which fields the caller knows. struct_size is the caller's
 * promise that its object holds that many readable bytes: a size larger than this header's struct (a newer
 * header) is accepted when the extra bytes are all zero, which the library checks by reading them; sizes
 * above 4096 bytes are refused (INVALID_ARGUMENT) without reading past this header's struct. */
#define FA3JIT_ABI_VERSION 2

/* ---- status ------------------------------------------------------------------------------------------ */

typedef enum fa3jit_status {
  FA3JIT_OK = 0,
  FA3JIT_ERROR_INVALID_SPEC = 1,     /* a JSON spec field is unknown, of the wrong type, out of range, infeasible */
  FA3JIT_ERROR_INVALID_ARGUMENT = 2, /* a NULL handle/pointer, a bad struct_size or enum value, or a launch
                                        argument (pointer, alignment, stride, shape, head count) not accepted */
  FA3JIT_ERROR_UNSUPPORTED = 3,      /* valid request this build does not implement yet (e.g. head_dim_v != head_dim) */
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
 * unloads their code. A runtime destroyed twice, or used after destroy, is detected where the memory still
 * holds the handle (a magic number) and reported as INVALID_ARGUMENT; do not rely on it. */
FA3JIT_API void fa3jit_runtime_destroy(fa3jit_runtime* runtime);

/* ---- forward ----------------------------------------------------------------------------------------- */

typedef enum fa3jit_dtype {
  FA3JIT_DTYPE_DEFAULT = -1, /* out_dtype only: the input dtype's default output (see fa3jit_forward_params) */
  FA3JIT_DTYPE_FP16 = 0,     /* IEEE half */
  FA3JIT_DTYPE_BF16 = 1,     /* bfloat16 */
  FA3JIT_DTYPE_E4M3 = 2      /* float8 e4m3fn (OCP FP8, no infinities); inputs only, with descales */
} fa3jit_dtype;

/* How e4m3 inputs are scaled: which descale layout fa3jit_forward_params.q_descale/k_descale/v_descale hold
 * (spec field "quant", kernels/attention_fwd/spec.h). Stored in an int32_t field, range-checked as one. */
typedef enum fa3jit_quant {
  FA3JIT_QUANT_NONE = 0,      /* fp16/bf16 inputs: no descales (the only value allowed for them) */
  FA3JIT_QUANT_PER_HEAD = 1,  /* e4m3: one descale per (batch, kv head) for each of q, k, v (FA3's contract) */
  FA3JIT_QUANT_PER_BLOCK = 2  /* e4m3: one per row block of q and k, one per (kv head, channel) of v */
} fa3jit_quant;

/* How v is laid out (spec field "v_layout", kernels/attention_fwd/spec.h). Stored in an int32_t field. */
typedef enum fa3jit_v_layout {
  FA3JIT_V_LAYOUT_SEQ_MAJOR = 0, /* (batch, seqlen_k, num_heads_kv, head_dim_v), FlashAttention's layout */
  FA3JIT_V_LAYOUT_D_MAJOR = 1    /* E4M3 only: V transposed, (batch, num_heads_kv, head_dim_v, seqlen_k rounded up to
                                  * 16), keys contiguous, in fa3jit_fp8_key_positions' order inside every 16; the
                                  * tensor's stride_seq is the stride between channels (fa3jit_forward_params.v) */
} fa3jit_v_layout;

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

/* FP32 descale factors of one e4m3 input in device memory (the stored value times its descale is the real
 * value), indexed (batch, head, i): data[batch * stride_batch + head * stride_head + i]; strides in ELEMENTS,
 * non-negative (0 broadcasts), i contiguous; data 4-byte aligned. Shapes per fa3jit_quant:
 *   PER_HEAD : q_descale, k_descale, v_descale (batch, num_heads_kv), i = 0 only. FA3's contract; a per-tensor
 *              scale is one float with stride_batch = stride_head = 0.
 *   PER_BLOCK: q_descale (batch, num_heads,    ceil(seqlen_q / block_m)): one per block_m query rows,
 *              k_descale (batch, num_heads_kv, ceil(seqlen_k / block_n)): one per block_n key rows,
 *              v_descale (batch, num_heads_kv, head_dim_v): one per V channel;
 *              block_m, block_n of the kernel that runs (fa3jit_attention_quant_blocks). */
typedef struct fa3jit_scale {
  const float* data;
  int64_t stride_batch;
  int64_t stride_head;
} fa3jit_scale;

/* One attention forward: out = softmax(softmax_scale * q k^T + mask) v, per batch and head.
 *
 * Layout (FlashAttention's):  q   (batch, seqlen_q, num_heads,    head_dim)
 *                             k   (batch, seqlen_k, num_heads_kv, head_dim)
 *                             v   (batch, seqlen_k, num_heads_kv, head_dim_v)
 *                             out (batch, seqlen_q, num_heads,    head_dim_v), dtype out_dtype
 *                             lse (batch, num_heads, seqlen_q) float32, contiguous; natural-log
 *                                 log-sum-exp of the scaled scores of each row (NULL = not written)
 * GQA/MQA: num_heads must be a multiple of num_heads_kv; query head h reads kv head h / (num_heads/num_heads_kv).
 * Causal: bottom-right aligned as in FlashAttention >= 2.1: query row i sees keys j <= i + seqlen_k - seqlen_q.
 *   A row that sees no key (seqlen_q > seqlen_k) gets out = 0 and lse = -inf.
 * head_dim, head_dim_v: the pairs fa3jit_capabilities_json() lists; head_dim_v 0 means head_dim.
 * E4M3 (FP8) inputs: dtype FA3JIT_DTYPE_E4M3, quant PER_HEAD or PER_BLOCK and the three descales (fa3jit_scale);
 *   the scores are (q * q_descale) . (k * k_descale), out = P (v * v_descale) in out_dtype (BF16 by default, or
 *   FP16); softmax_scale applies on top of the descales. fp16/bf16 inputs: quant NONE, descales NULL.
 *
 * Serving layouts (FlashAttention-3's flash_attn_varlen_func / flash_attn_with_kvcache; the fields from
 * cu_seqlens_q on). Each is optional and they combine, except cu_seqlens_k with page_table:
 *   varlen q      cu_seqlens_q given: q is (total_q, num_heads, head_dim) and out (total_q, num_heads, head_dim_v),
 *                 packed, with seqlen_q = total_q; q.stride_batch and out.stride_batch are ignored; lse is
 *                 (num_heads, total_q). Sequence b has query rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]).
 *   varlen k/v    cu_seqlens_k given: k is (total_k, num_heads_kv, head_dim), v (total_k, num_heads_kv,
 *                 head_dim_v), packed, with seqlen_k = total_k; k/v.stride_batch ignored.
 *   paged k/v     page_table given: k is (num_pages, page_size, num_heads_kv, head_dim), v likewise with
 *                 head_dim_v, and stride_batch is the PAGE stride (elements); seqlen_k is ignored; seqused_k is
 *                 required. Key j of sequence b is row j % page_size of page page_table[b][j / page_size].
 *   seqused_k     keys of each sequence actually attended (FA3's cache_seqlens), at most its capacity.
 *   Causal stays bottom-right aligned per sequence: query i of a sequence of Lq rows and Lk keys sees key j
 *   iff j <= i + Lk - Lq.
 * The index tensors are int32 in device memory, read by the GPU only: the kernel clamps their values into the
 * tensors given (a length past its tensor, a page outside [0, num_pages)), so no value makes it read or write
 * outside them, and a wrong value gives a wrong answer for its own sequence only. They are not checked on the
 * host (that would need a synchronisation), except with FA3JIT_CHECK_INDICES=1 in the environment: each call
 * then synchronises and reports the first bad value (kernels/attention_fwd/index_check.h).
 * Split-KV and GQA packing: num_splits > 1 (or 0, the heuristic, when it picks more than one) cuts each row
 * block's keys into ranges run by separate CTAs, whose fp32 partials go to `workspace` and are merged by the
 * combine kernel that the call launches itself, on the same stream: size the workspace with
 * fa3jit_attention_workspace_size. pack_gqa shares one M tile between the query heads of a KV head.
 *
 * Growth (ABI version 2 still): the fields from out_dtype on were appended with e4m3, those from cu_seqlens_q
 * on for serving. A caller compiled against an older header passes the struct_size it knew:
 *   offsetof(fa3jit_forward_params, out_dtype) (232 bytes on LP64): read as out_dtype DEFAULT, quant NONE, no
 *     descales, i.e. a 16-bit call as before;
 *   offsetof(fa3jit_forward_params, cu_seqlens_q) (312 bytes on LP64): the serving fields are read as off:
 *     NULL index tensors, num_splits 1 and pack_gqa 0, so the call runs exactly as it did before them;
 *   offsetof(fa3jit_forward_params, window_left) (400 bytes on LP64): the variant fields are read as off: no
 *     window, softcap 0, no sinks;
 *   offsetof(fa3jit_forward_params, v_layout) (432 bytes on LP64): v_layout is read as SEQ_MAJOR.
 * Any other struct_size below sizeof(fa3jit_forward_params) is INVALID_ARGUMENT. The other way round, a library
 * from before a group of fields refuses a struct of this header whose bytes past its own struct are not zero
 * (out_dtype's and num_splits' defaults are not zero bytes, see the struct_size rule above); a caller that must
 * also run on such a library passes the old size for the calls the old struct can describe. */
typedef struct fa3jit_forward_params {
  size_t struct_size; /* sizeof(fa3jit_forward_params) as compiled by the caller */
  fa3jit_dtype dtype; /* of q, k, v; any other value is INVALID_ARGUMENT (read as a 32-bit integer) */
  int32_t causal;     /* 0 or 1 */
  int64_t batch, seqlen_q, seqlen_k, num_heads, num_heads_kv, head_dim, head_dim_v;
  fa3jit_tensor q, k, v, out;
  float* lse;          /* device pointer or NULL */
  float softmax_scale; /* 0 = 1/sqrt(head_dim) */
  /* Caller-owned device workspace of at least fa3jit_attention_workspace_size() bytes (NULL when that is 0),
   * so that a call allocates nothing and stays valid inside a CUDA graph. A split call needs it; a dense causal
   * call takes its tiles from a counter in it (16 bytes, zeroed by the call on its stream: FA3's dynamic tile
   * scheduler) and without one (NULL or workspace_bytes 0) runs a static tile order, correct but measured up to
   * 1.6x slower. A call writes its workspace: give each call in flight at one time (other streams, parallel graph
   * branches) its own. */
  void* workspace;
  size_t workspace_bytes;
  /* ---- appended for e4m3 inputs; fa3jit_forward_params_init sets the defaults ---- */
  /* dtype of out: FA3JIT_DTYPE_DEFAULT (= dtype for fp16/bf16, BF16 for E4M3), or explicitly: for fp16/bf16
   * inputs only dtype itself, for E4M3 inputs BF16 or FP16. Read as a 32-bit integer; another value is
   * INVALID_ARGUMENT. Note: 0 is FA3JIT_DTYPE_FP16, not the default, so set the default (the init function
   * does) in a struct filled by hand. */
  fa3jit_dtype out_dtype;
  int32_t quant;              /* an fa3jit_quant: NONE for fp16/bf16, PER_HEAD or PER_BLOCK for E4M3 */
  fa3jit_scale q_descale;     /* E4M3 only (data NULL otherwise); see fa3jit_scale for the shapes */
  fa3jit_scale k_descale;
  fa3jit_scale v_descale;
  /* ---- appended for serving (see "Serving layouts" above); fa3jit_forward_params_init sets them off ---- */
  /* Varlen q: (batch + 1) int32 offsets into q's rows, non-decreasing, cu_seqlens_q[batch] <= seqlen_q
   * (= total_q); device pointer; NULL = q and out are (batch, seqlen_q, ...) as above. */
  const int32_t* cu_seqlens_q;
  /* With cu_seqlens_q: >= every sequence's query length (rows); it sizes the grid (and the workspace), and a
   * sequence's rows past it are not computed. Ignored without cu_seqlens_q. */
  int64_t max_seqlen_q;
  /* Varlen k/v: (batch + 1) int32 offsets into k's and v's rows, like cu_seqlens_q, cu_seqlens_k[batch] <=
   * seqlen_k (= total_k); NULL = k and v are (batch, seqlen_k, ...) or paged. Not with page_table. */
  const int32_t* cu_seqlens_k;
  /* With cu_seqlens_k or page_table: >= every sequence's key count (keys); read by the num_splits heuristic.
   * Ignored for dense k/v (seqlen_k is that bound). */
  int64_t max_seqlen_k;
  /* (batch) int32: keys of sequence b actually attended (FlashAttention-3's cache_seqlens / seqused_k), each at
   * most the sequence's capacity (dense: seqlen_k; varlen: its span; paged: max_pages * page_size); NULL = all
   * of them. Required with page_table. Device pointer. The k/v rows past a sequence's keys may hold anything,
   * NaN included (a cache nobody initialised): they are masked, and V's are zeroed before they meet P. */
  const int32_t* seqused_k;
  /* Paged KV cache: (batch, max_pages) int32 page indices in [0, num_pages), row b at page_table +
   * b * page_table_stride; the entries past the pages a sequence uses (seqused_k) may hold anything. NULL = k/v
   * are not paged. Device pointer. */
  const int32_t* page_table;
  int64_t page_table_stride;  /* ELEMENTS between the rows of page_table */
  int64_t max_pages;          /* page_table's second dimension: pages per sequence */
  int64_t num_pages;          /* k's and v's first dimension: pages in the cache */
  /* Rows (keys) per page, >= 1 (INVALID_ARGUMENT otherwise). Multiples of 8 load as TMA boxes of gcd(page_size,
   * block_n) rows; other sizes (1, 3, ...) run the gather kernels, which copy rows with cp.async. Ignored without
   * page_table. */
  int64_t page_size;
  /* KV splits: 0 = the heuristic (FlashAttention-3's num_splits_heuristic: splits when the grid would leave
   * more than 20 % of the SMs idle, or 60 % for a dense decode step of at most 64 (packed) query rows),
   * 1 = none, > 1 = that many, at most 256. fa3jit_forward_params_init sets 1. A
   * split needs a workspace (fa3jit_attention_workspace_size). Negative or > 256: INVALID_ARGUMENT. */
  int32_t num_splits;
  /* GQA packing: -1 = the heuristic, 0 = off, 1 = on (the num_heads / num_heads_kv query heads of a KV head
   * share an M tile; decode then fills a tile with one token x the group). fa3jit_forward_params_init sets 0.
   * Another value: INVALID_ARGUMENT. */
  int32_t pack_gqa;
  /* ---- appended for the attention variant; fa3jit_forward_params_init sets them off ---- */
  /* Sliding window (FlashAttention-3's window_size): query i of a sequence sees keys i + d - window_left ..
   * i + d + window_right, d = seqlen_k - seqlen_q; -1 = unbounded on that side; (-1, -1) = no window.
   * causal 1 is window_right 0 (window_right must then be -1 or 0). Each -1 or in [0, 2^31 - 1); another
   * value is INVALID_ARGUMENT. Note: zero-filled by hand they are (0, 0), a window of one key: set -1 (the
   * init function does). */
  int64_t window_left;
  int64_t window_right;
  /* > 0: scores capped as softcap * tanh(score * softmax_scale / softcap) before the softmax; 0 = off. */
  float softcap;
  /* (num_heads) float32 device tensor or NULL: one logit per query head (attention sinks) that joins every
   * row's softmax normaliser as a key of value 0; lse includes it. */
  const float* sinks;
  /* ---- appended for a transposed V; fa3jit_forward_params_init sets SEQ_MAJOR ---- */
  /* An fa3jit_v_layout. D_MAJOR (E4M3, dense k/v without seqused_k only) skips the kernel's V transpose: v is
   * (batch, num_heads_kv, head_dim_v, seqlen_k_pad) with seqlen_k_pad = seqlen_k rounded up to 16, v.stride_seq the
   * stride between channels (>= seqlen_k_pad), and the keys of every aligned group of 16 in the order of fa3jit_fp8_key_positions; the
   * positions of keys past seqlen_k hold finite values (fa3jit_quantize_fp8 writes zeros there). */
  int32_t v_layout;
  /* 0 (fa3jit_forward_params_init). The struct's tail padding made explicit: the place of the next int32 field, so
   * that a newer caller's value there reaches this library as a non-zero reserved (INVALID_ARGUMENT) instead of
   * unseen padding. A caller that fills the struct without fa3jit_forward_params_init or memset must zero it. */
  int32_t reserved;
} fa3jit_forward_params;

/* Zero-fills *params, sets struct_size, out_dtype = FA3JIT_DTYPE_DEFAULT (quant NONE, descales NULL), the
 * serving fields off: no index tensors, num_splits 1 (no split, so no workspace) and pack_gqa 0, and the variant
 * fields off: window (-1, -1), softcap 0, sinks NULL. A serving
 * caller sets num_splits 0 and pack_gqa -1 for the heuristics. Note: a struct zero-filled by hand has
 * num_splits 0, the heuristic, which may need a workspace. */
static inline void fa3jit_forward_params_init(fa3jit_forward_params* params) {
  memset(params, 0, sizeof(*params));
  params->struct_size = sizeof(fa3jit_forward_params);
  params->out_dtype = FA3JIT_DTYPE_DEFAULT;
  params->num_splits = 1;
  params->window_left = -1;
  params->window_right = -1;
}

/* ---- kernels ------------------------------------------------------------------------------------------ */

typedef struct fa3jit_kernel fa3jit_kernel; /* opaque: a compiled and loaded kernel of one spec */

/* Creates the kernel of a JSON spec (any family: "kind", default "attention_fwd"; a "problem" section is
 * ignored): generates, compiles or fetches it from the cache, and loads it into the driver. Do this once,
 * before serving; then pass the handle to the launch functions, which read no JSON.
 * Errors: INVALID_ARGUMENT (NULL arguments); INVALID_SPEC; UNSUPPORTED; COMPILE_FAILED; CACHE; NO_DRIVER;
 *   DRIVER; INTERNAL. On failure *out is NULL. */
FA3JIT_API fa3jit_status fa3jit_kernel_create(fa3jit_runtime* runtime, const char* spec_json, fa3jit_kernel** out);

/* Destroys a kernel handle (NULL is ignored). The code stays loaded while its runtime lives. */
FA3JIT_API void fa3jit_kernel_destroy(fa3jit_kernel* kernel);

/* ---- attention forward --------------------------------------------------------------------------------- */

/* Launches the attention forward on `cuda_stream` (a CUstream / cudaStream_t; NULL = the legacy default
 * stream) of the device that owns the pointers. `kernel` NULL: the kernel comes from the tile table for
 * (dtype, head_dim, head_dim_v, causal), chosen once per such class and cached in the runtime (the first call
 * of a class compiles it or loads it from the cache; later calls only check and launch). `kernel` given: an
 * attention_fwd kernel from fa3jit_kernel_create whose spec must agree with dtype, head dims and causal.
 * Asynchronous: the kernel may still run when this returns; errors of the kernel itself surface at the next
 * synchronisation of the stream. No allocation, synchronisation or compilation once warm (graph-safe).
 * Errors (argument checks come before anything touches device memory):
 *   INVALID_ARGUMENT: runtime or params NULL; a stale handle; struct_size, dtype, out_dtype, quant, causal or
 *     softmax_scale (NaN/inf) out of range; an out_dtype or quant the dtype does not allow; a NULL or misaligned
 *     tensor pointer; a stride not a multiple of 16 bytes; a size < 1; num_heads not a multiple of
 *     num_heads_kv; an extent past its allocation; overlapping outputs; for E4M3 a NULL, misaligned, negatively
 *     strided or out-of-allocation descale, for fp16/bf16 a non-NULL one; a kernel of another family or one
 *     that disagrees with the params (dtype, out_dtype, quant, head dims, causal); num_splits or pack_gqa out
 *     of range; cu_seqlens_k together with page_table; page_table without seqused_k; a misaligned index
 *     tensor, a max_seqlen_q, max_pages, num_pages or page_table_stride the layout does not allow; a workspace
 *     (when the call splits, or any given to a call that uses one) smaller than fa3jit_attention_workspace_size
 *     or not 16-byte aligned;
 *   UNSUPPORTED: a dtype or head dims this build does not generate (see fa3jit_capabilities_json);
 *   COMPILE_FAILED; NO_DRIVER; DRIVER (a driver call or the launch failed); CACHE; INTERNAL. */
FA3JIT_API fa3jit_status fa3jit_attention_forward(fa3jit_runtime* runtime, const fa3jit_kernel* kernel,
                                                  const fa3jit_forward_params* params, void* cuda_stream);

/* Bytes of device workspace (16-byte aligned, caller-owned, passed as params.workspace) that a call of the tile
 * table's kernel (fa3jit_attention_forward with kernel NULL) with these params needs: without a KV split 16 for a
 * call whose kernel is a causal persistent grid (its tile counter) and 0 otherwise; with a split it grows with
 * batch, max_seqlen_q (seqlen_q without cu_seqlens_q), num_heads, head_dim_v and the number of splits; for a CUDA
 * graph, size it once with the largest shapes it will replay.
 * num_splits 1 (fa3jit_forward_params_init's, and an older header's struct): read from the shape fields alone; no
 * GPU needed, the tensor pointers may be NULL. num_splits 0 or > 1: the params are checked as
 * fa3jit_attention_forward checks them on the host (tensor pointers included), and the heuristic needs the
 * CUDA driver for the SM count of q's device.
 * Errors: INVALID_ARGUMENT (NULL arguments, struct_size, the shape errors of fa3jit_attention_forward, and with a
 *   split its other argument errors); UNSUPPORTED; NO_DRIVER; DRIVER (as fa3jit_attention_forward, with a split). */
FA3JIT_API fa3jit_status fa3jit_attention_workspace_size(fa3jit_runtime* runtime, const fa3jit_forward_params* params,
                                                         size_t* bytes);

/* How a call runs: the choices of the split and GQA-packing heuristics and the workspace they need. */
typedef struct fa3jit_call_plan {
  size_t struct_size;     /* sizeof(fa3jit_call_plan) as compiled by the caller */
  int32_t num_splits;     /* KV splits the call runs: 1 = none (params.num_splits, or the heuristic's choice for 0) */
  int32_t pack_gqa;       /* 1 = the query heads of a KV head share one M tile (params.pack_gqa, or the heuristic's) */
  int32_t block_m;        /* the kernel's tile (`kernel`'s, else the tile table's): query rows (with PER_BLOCK */
  int32_t block_n;        /* descales, of one q_descale entry) and keys (of one k_descale entry); without a kernel a
                           * tuned tile the runtime applies may differ, except for PER_BLOCK calls and splits */
  size_t workspace_bytes; /* what params.workspace must hold: fa3jit_attention_workspace_size */
} fa3jit_call_plan;

/* The plan of the call fa3jit_attention_forward(runtime, kernel, params, ...) would make (kernel NULL: the tile
 * table's), from the functions the launch uses, without compiling or launching: what FlashAttention-3's
 * get_scheduler_metadata computes ahead of a batch. Only the shapes and the serving fields are read: the tensor
 * pointers may be NULL (the index tensors' presence selects the layout, so a layout that needs cu_seqlens_q,
 * seqused_k or page_table needs a non-NULL pointer there, never dereferenced). The split heuristic counts the SMs of
 * q's device (with q.data NULL, the current context's device, else device 0): only num_splits 0 needs the driver. The plan
 * is a function of these arguments and the device's SM count only, so the same call plans the same way every time.
 * Fills *plan (its struct_size set by the caller; fields this library does not know stay as they were). runtime may
 * be NULL (the plan does not depend on it); needs no GPU unless num_splits is 0.
 * Errors: INVALID_ARGUMENT (a stale runtime, NULL params or plan, struct_size, the shape and serving-field errors of
 *   fa3jit_attention_forward); UNSUPPORTED; NO_DRIVER (num_splits 0 without a driver); DRIVER. */
FA3JIT_API fa3jit_status fa3jit_attention_plan(fa3jit_runtime* runtime, const fa3jit_kernel* kernel,
                                               const fa3jit_forward_params* params, fa3jit_call_plan* plan);

/* The order of a D_MAJOR v (fa3jit_v_layout): positions[j] is where key j (0..15) of every aligned group of 16 keys is
 * stored, the order in which the E4M3 kernel packs its probabilities for the tensor cores
 * (kernels/attention_fwd/device/fp8_v_layout.h: fp8_key_position). Errors: INVALID_ARGUMENT (positions NULL). */
FA3JIT_API fa3jit_status fa3jit_fp8_key_positions(int32_t positions[16]);

/* The row blocks of PER_BLOCK descales (fa3jit_scale): *block_m query rows per q_descale entry, *block_n key rows
 * per k_descale entry, for the E4M3 kernel that a call runs: `kernel`'s spec when given (head_dim and causal are
 * then ignored), else the tile table's E4M3 kernel for (head_dim, causal) with head_dim_v = head_dim, whichever the
 * V layout (a D_MAJOR call of the tile table with PER_BLOCK descales keeps the SEQ_MAJOR kernel's tile for this
 * reason; with PER_HEAD it may run another). A kernel made from a D_MAJOR PER_BLOCK spec that leaves the tile out
 * has the D_MAJOR tile (d128 and d256 differ): ask with that kernel. For head_dim_v != head_dim the tile differs:
 * ask fa3jit_attention_plan (its block_m,
 * block_n). A call with causal = 1 and seqlen_q = 1 runs the non-causal kernel (no key is hidden from a single
 * bottom-right aligned row): ask with causal = 0 for it. Needs no GPU and no runtime.
 * Errors: INVALID_ARGUMENT (block_m or block_n NULL, causal not 0 or 1, a stale kernel handle or one of another
 *   family, a head_dim that E4M3 does not support: the message lists the supported ones). */
FA3JIT_API fa3jit_status fa3jit_attention_quant_blocks(const fa3jit_kernel* kernel, int64_t head_dim, int32_t causal,
                                                       int32_t* block_m, int32_t* block_n);

/* ---- FP8 pre-pass ------------------------------------------------------------------------------------- */

/* RoPE of the FP8 pre-pass (FlashAttention's apply_rotary_emb; kernels/quantize_fp8/spec.h). Stored in an
 * int32_t field, range-checked as one. */
typedef enum fa3jit_rope {
  FA3JIT_ROPE_NONE = 0,       /* no rotary embedding */
  FA3JIT_ROPE_NEOX = 1,       /* pairs (i, i + rotary_dim / 2): rotate halves (interleaved=False) */
  FA3JIT_ROPE_INTERLEAVED = 2 /* pairs (2i, 2i + 1) (interleaved=True) */
} fa3jit_rope;

/* One FP8 pre-pass: 16-bit q, k, v -> the e4m3 inputs and PER_BLOCK descales of fa3jit_attention_forward, with
 * FlashAttention-3's incoherent processing and block quantisation (FA3 paper, arXiv 2407.08608, §3.3):
 *   1. rope != NONE: RoPE on q and k, token s at position s, with row s of rope_cos / rope_sin:
 *        x1' = x1 cos - x2 sin,  x2' = x1 sin + x2 cos  over the pairs of fa3jit_rope, i < rotary_dim / 2;
 *   2. hadamard = 1: every head vector x of q and k becomes H.D.x / sqrt(head_dim), H the Sylvester
 *      Walsh-Hadamard matrix, D the +-1 diagonal of `seed` (kernels/quantize_fp8/params.h: hadamard_sign). The
 *      rotation is orthogonal and q and k share D, so q k^T is unchanged (up to rounding) while outliers spread
 *      over all coordinates; v is never rotated;
 *   3. descale = amax / 448 (the largest finite e4m3) of each block, 1 for a block whose amax is 0; stored
 *      value = round-to-nearest-even, saturating, of x / descale.
 *
 * Layouts (strides in ELEMENTS; the dim axis contiguous):
 *   q          dtype (batch, seqlen_q, num_heads,    head_dim)
 *   k          dtype (batch, seqlen_k, num_heads_kv, head_dim)
 *   v          dtype (batch, seqlen_k, num_heads_kv, head_dim_v)
 *              inputs: base 16-byte aligned, strides multiples of 16 bytes; they may overlap (a packed qkv)
 *   q8, k8, v8 e4m3 with the shapes of q, k, v (v8 transposed with v_layout D_MAJOR, below); base 16-byte
 *              aligned, strides multiples of 16 bytes (a contiguous tensor qualifies); each overlaps neither itself
 *              nor any other tensor
 *   q_descale  float (batch, num_heads,    ceil(seqlen_q / q_block_rows)), contiguous: one per q_block_rows tokens
 *   k_descale  float (batch, num_heads_kv, ceil(seqlen_k / k_block_rows)), contiguous: one per k_block_rows tokens
 *   v_descale  float (batch, num_heads_kv, head_dim_v), contiguous: one per V channel over all seqlen_k tokens
 *   rope_cos, rope_sin  float (rope_max_seqlen, rotary_dim / 2), contiguous, 16-byte aligned; row s is token s
 *              of q and of k; rope_max_seqlen >= max(seqlen_q, seqlen_k). NULL (and rope_max_seqlen ignored)
 *              without RoPE.
 * These are exactly the e4m3 inputs and the PER_BLOCK descales (fa3jit_scale: stride_batch = heads * blocks,
 * stride_head = blocks) of fa3jit_attention_forward when q_block_rows and k_block_rows are the block_m and
 * block_n of the attention kernel that will read them (fa3jit_attention_quant_blocks): there is no default for
 * them, a mismatch would pass every extent check and scale the wrong rows.
 * With the rotation, q8 and k8 hold the rotated vectors: pass them to the attention forward as they are. */
typedef struct fa3jit_quantize_params {
  size_t struct_size; /* sizeof(fa3jit_quantize_params) as compiled by the caller */
  fa3jit_dtype dtype; /* of q, k, v: FP16 or BF16 (E4M3 is UNSUPPORTED); read as a 32-bit integer */
  int32_t hadamard;   /* 0 or 1: the rotation of step 2 (fa3jit_quantize_params_init sets 1) */
  int64_t batch, seqlen_q, seqlen_k, num_heads, num_heads_kv, head_dim, head_dim_v; /* head_dim_v 0 = head_dim */
  fa3jit_tensor q, k, v;    /* inputs */
  fa3jit_tensor q8, k8, v8; /* e4m3 outputs */
  float* q_descale;         /* fp32 outputs, device pointers, 4-byte aligned */
  float* k_descale;
  float* v_descale;
  int32_t rope;             /* an fa3jit_rope */
  int32_t rotary_dim;       /* elements RoPE rotates: 0 = head_dim; NEOX a power of two in [16, head_dim],
                               INTERLEAVED a multiple of 8 in [8, head_dim]; 0 (or head_dim) without RoPE */
  int32_t q_block_rows;     /* tokens per q_descale entry: the attention kernel's block_m; a multiple of 16 */
  int32_t k_block_rows;     /* tokens per k_descale entry: its block_n; a multiple of 16 (both in [16, 256]) */
  const float* rope_cos;    /* device pointers, with RoPE only */
  const float* rope_sin;
  int64_t rope_max_seqlen;  /* rows of rope_cos and rope_sin */
  uint64_t seed;            /* of the Hadamard sign diagonal D; any value */
  /* ---- appended for a transposed V; fa3jit_quantize_params_init sets SEQ_MAJOR ---- */
  /* An fa3jit_v_layout. D_MAJOR: v8 is written transposed for an attention kernel whose v_layout is D_MAJOR:
   * (batch, num_heads_kv, head_dim_v, seqlen_k rounded up to 16), v8.stride_seq the stride between channels, keys in
   * fa3jit_fp8_key_positions' order, zeros past seqlen_k. A caller with the older struct (struct_size =
   * offsetof(fa3jit_quantize_params, v_layout)) gets SEQ_MAJOR. */
  int32_t v_layout;
  /* 0 (fa3jit_quantize_params_init): the tail padding made explicit, as fa3jit_forward_params.reserved. */
  int32_t reserved;
} fa3jit_quantize_params;

/* Zero-fills *params, sets struct_size and hadamard = 1 (rope NONE, rotary_dim head_dim). q_block_rows and
 * k_block_rows stay 0, which a call refuses: set them from fa3jit_attention_quant_blocks. */
static inline void fa3jit_quantize_params_init(fa3jit_quantize_params* params) {
  memset(params, 0, sizeof(*params));
  params->struct_size = sizeof(fa3jit_quantize_params);
  params->hadamard = 1;
}

/* Launches the FP8 pre-pass on `cuda_stream` (NULL = the legacy default stream) of the device that owns the
 * pointers: three kernel launches in stream order (q and k; the V channel amax; V; the first waits for all earlier
 * work on the stream, the V passes may start as the pass before them ends and wait for it on the device:
 * programmatic dependent launch), no allocation, no synchronisation, CUDA-graph capturable. The kernel of (dtype,
 * head dims, hadamard, rope, rotary_dim, block rows) is compiled on the first call of its class and cached in the
 * runtime. Asynchronous: errors of the kernel itself surface at the next synchronisation of the stream. Follow it on the same stream with
 * fa3jit_attention_forward (dtype E4M3, quant PER_BLOCK, the descales above).
 * Errors (argument checks come before anything touches device memory):
 *   INVALID_ARGUMENT: runtime or params NULL; a stale runtime; struct_size, dtype, hadamard or rope out of range;
 *     q_block_rows or k_block_rows 0; a NULL or misaligned pointer; a stride not a positive multiple of 16
 *     bytes; a size < 1 or one that makes more than 2^31 blocks; tensors on different devices; an extent past
 *     its allocation; an output overlapping itself or another tensor; rope tables missing with RoPE, given
 *     without it, or shorter than max(seqlen_q, seqlen_k); a stream of another context;
 *   INVALID_SPEC: rotary_dim, q_block_rows or k_block_rows outside the rules above;
 *   UNSUPPORTED: a dtype or head dims the pre-pass does not generate (fa3jit_capabilities_json, "quantize_fp8");
 *   COMPILE_FAILED; NO_DRIVER; DRIVER (a driver call or a launch failed); CACHE; INTERNAL. */
FA3JIT_API fa3jit_status fa3jit_quantize_fp8(fa3jit_runtime* runtime, const fa3jit_quantize_params* params,
                                             void* cuda_stream);

/* ---- compile (warm-up and tooling) ------------------------------------------------------------------- */

#define FA3JIT_KEY_CAPACITY 80          /* the key is 64 hex digits of SHA-256 + NUL */
#define FA3JIT_KERNEL_NAME_CAPACITY 128
#define FA3JIT_KIND_CAPACITY 32
#define FA3JIT_SUMMARY_CAPACITY 128

typedef struct fa3jit_kernel_info {
  size_t struct_size;                          /* sizeof(fa3jit_kernel_info) as compiled by the caller */
  char key[FA3JIT_KEY_CAPACITY];               /* cache key (hex), NUL-terminated */
  char kernel_name[FA3JIT_KERNEL_NAME_CAPACITY]; /* the unit's name (its entry point, or with several entry points,
                                                    as the FP8 pre-pass has, their common prefix), NUL-terminated */
  int32_t cache_hit; /* 1 = served from memory or disk without compiling, 0 = compiled by NVRTC now */
  double ms;         /* wall time of this call (generation + compile or cache load), milliseconds */
  int32_t registers;         /* per thread, from ptxas (the largest over the entry points); -1 = not reported */
  int32_t spill_store_bytes; /* ptxas spill stores, bytes (the largest over the entry points); -1 = not reported */
  int32_t spill_load_bytes;  /* ptxas spill loads, bytes (the largest over the entry points); -1 = not reported */
  int32_t smem_bytes;        /* dynamic shared memory requested at launch, bytes */
  int32_t num_threads;       /* threads per block */
  char kind[FA3JIT_KIND_CAPACITY];       /* kernel family, e.g. "attention_fwd", NUL-terminated */
  char summary[FA3JIT_SUMMARY_CAPACITY]; /* e.g. "bf16 d128 causal 128x176 wg2 st2 pingpong overlap mask-free-loop
                                            l2-hints persistent": the layout's flags come before the schedule's,
                                            cut to FA3JIT_SUMMARY_CAPACITY - 1 characters */
} fa3jit_kernel_info;

/* Generates and compiles (or loads from the cache) the kernel for a JSON spec of any family, without
 * launching it and without a GPU. Use it to warm the cache before serving. `out` may be NULL; if given, its struct_size
 * must be set and it is filled on success.
 * Errors: INVALID_ARGUMENT (runtime or spec_json NULL, out->struct_size too small); INVALID_SPEC;
 *   UNSUPPORTED; COMPILE_FAILED; CACHE; INTERNAL. */
FA3JIT_API fa3jit_status fa3jit_compile_spec(fa3jit_runtime* runtime, const char* spec_json,
                                             fa3jit_kernel_info* out);

/* Compiles every kernel of a serving manifest (JSON text of kind "serving_manifest": the models a server runs,
 * their head dims, masks and K/V layouts; kernels/attention_fwd/manifest.h and the README give the fields) into
 * the runtime's cubin cache, so later fa3jit_attention_forward calls of those shapes only load their kernels; with
 * the tuned tiles the runtime's tuning database holds for those calls (FA3JIT_TUNE_DB, else <cache>/tune-db.json).
 * Blocks while it compiles (about 0.5 s per kernel, on half the hardware threads, 1 to 8, so a server that warms
 * in the background keeps CPU for its own threads; processes sharing the cache directory compile each kernel once
 * between them); a server calls it from a thread of its own and serves
 * meanwhile: forward calls on other threads proceed, and one that needs a kernel being compiled waits for that
 * compile instead of starting its own. Needs no GPU. *compiled (may be NULL) receives the number of kernels that
 * were not in the cache yet.
 * Errors: INVALID_ARGUMENT (runtime or manifest_json NULL); INVALID_SPEC (a bad manifest, naming the field);
 *   UNSUPPORTED (e.g. head dims this build does not generate); COMPILE_FAILED; CACHE; INTERNAL. */
FA3JIT_API fa3jit_status fa3jit_warm_manifest(fa3jit_runtime* runtime, const char* manifest_json, size_t* compiled);

/* Fills *out (struct_size set by the caller) with what a kernel handle holds.
 * Errors: INVALID_ARGUMENT (NULL arguments, a stale handle, struct_size too small). */
FA3JIT_API fa3jit_status fa3jit_kernel_get_info(const fa3jit_kernel* kernel, fa3jit_kernel_info* out);

/* ---- capabilities -------------------------------------------------------------------------------------- */

/* What this build generates, as JSON: {"abi_version": 2, "version": "...", "families": {"attention_fwd":
 * {"dtypes": [...], "head_dims": [...] (the tile table's rows), "head_dim_rule": {"min", "max", "multiple_of"}
 * (every size of the rule is generated; "fp8_head_dim_rule" for e4m3), "head_dim_v_may_differ": true,
 * "features": [...]}, ...}}. Static storage; never NULL. Lets a serving
 * engine choose a backend without trying calls. */
FA3JIT_API const char* fa3jit_capabilities_json(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FA3JIT_FA3JIT_H_ */
