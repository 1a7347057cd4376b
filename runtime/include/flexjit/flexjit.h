/* flexjit C API: compile attention masks written in the flexjit mask language and run paged
 * attention over a vLLM-style KV cache (docs/architecture.md#call-contract, #c-api).
 *
 * Conventions
 * - Every function returns fj_status (FJ_SUCCESS == 0). No call aborts or throws; a failed call
 *   leaves its outputs untouched and records a message readable with fj_context_last_error().
 * - Handles are opaque. A handle is owned by the caller that created it and released with the
 *   matching *_destroy function; a context must outlive the programs and kernels created from it.
 * - Argument structs begin with `struct_size`, set it to sizeof(struct): newer libraries accept
 *   older, shorter structs.
 * - Creating programs and kernels is thread-safe (concurrent requests for one kernel compile it
 *   once). Launching takes a CUDA stream and does no host-device synchronisation.
 * - The CUDA driver library is loaded at run time: everything except launching works on machines
 *   without a GPU (kernels are then compiled for an architecture named in fj_kernel_desc).
 * - CPU backend (since 0.4, docs/cpu.md): a kernel created with arch "cpu" runs the same calls on
 *   the host, synchronously, over host pointers; fj_kv_cache_write, fj_merge_states and
 *   fj_merge_states_n take FJ_DEVICE_CPU in their args. No CUDA driver or NVRTC is involved.
 */
#ifndef FLEXJIT_FLEXJIT_H_
#define FLEXJIT_FLEXJIT_H_

#include <stddef.h>
#include <stdint.h>

#if defined(FLEXJIT_BUILDING_LIBRARY)
#define FJ_API __attribute__((visibility("default")))
#else
#define FJ_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define FJ_VERSION_MAJOR 0
#define FJ_VERSION_MINOR 11
#define FJ_VERSION_PATCH 0
/* Version as one integer: major * 10000 + minor * 100 + patch. */
#define FJ_VERSION (FJ_VERSION_MAJOR * 10000 + FJ_VERSION_MINOR * 100 + FJ_VERSION_PATCH)

typedef enum fj_status {
  FJ_SUCCESS = 0,
  FJ_ERROR_INVALID_ARGUMENT = 1, /* null pointer, bad shape, stride or struct_size */
  FJ_ERROR_INVALID_SOURCE = 2,   /* the mask source has errors; the message lists them all */
  FJ_ERROR_NOT_FOUND = 3,        /* unknown mask, parameter or file */
  FJ_ERROR_UNSUPPORTED = 4,      /* head dim, dtype, page size or architecture not supported */
  FJ_ERROR_COMPILE = 5,          /* NVRTC failed; the message carries the kernel name and log */
  FJ_ERROR_CUDA = 6,             /* no CUDA driver, or a driver call failed */
  FJ_ERROR_INTERNAL = 7          /* a bug in flexjit; please report the message */
} fj_status;

/* FJ_DTYPE_FP8_E4M3 (since 0.8) is a K/V cache dtype only (fj_kernel_desc::kv_dtype,
 * fj_kv_cache_write_args::cache_dtype): OCP e4m3 (the "fn" variant: no infinities, 0x7f/0xff
 * NaN, largest finite 448), each cache value times a float32 scale (k_scale, v_scale). The CUDA
 * kernels read an e4m3 NaN byte (0x7f, 0xff) as +-480 (the CPU backend as NaN); the cache write
 * stores one only for a NaN input. */
typedef enum fj_dtype { FJ_DTYPE_FP16 = 1, FJ_DTYPE_BF16 = 2, FJ_DTYPE_FP8_E4M3 = 3 } fj_dtype;

/* Where a context-level call (fj_kv_cache_write, fj_merge_states, fj_merge_states_n) runs, since
 * 0.4. Attention calls run where their kernel was created for (fj_kernel_desc::arch). */
typedef enum fj_device {
  FJ_DEVICE_CUDA = 0, /* pointers are device memory; the call is enqueued on a CUDA stream */
  FJ_DEVICE_CPU = 1   /* pointers are host memory; the call runs before it returns */
} fj_device;

typedef struct fj_context fj_context;
typedef struct fj_program fj_program;
typedef struct fj_kernel fj_kernel;

/* Static description of a status ("FJ_ERROR_INVALID_ARGUMENT: ..."). Never null. */
FJ_API const char* fj_status_string(fj_status status);

/* The library's version, FJ_VERSION of the build that produced it. */
FJ_API uint32_t fj_runtime_version(void);

/* Creates a context: a kernel cache and the last-error messages of its calls.
 * Errors: FJ_ERROR_INVALID_ARGUMENT (out is null). */
FJ_API fj_status fj_context_create(fj_context** out);

/* Destroys a context (null is accepted). Programs and kernels created from it must be
 * destroyed first. */
FJ_API fj_status fj_context_destroy(fj_context* context);

/* Message of the calling thread's last failed call on `context`, "" if none. The pointer stays
 * valid until that thread's next call on the context. A null context gives a static message. */
FJ_API const char* fj_context_last_error(const fj_context* context);

/* Parses and checks mask source held in memory. `name` is used in diagnostics (may be null:
 * "<string>"); `source` need not be NUL-terminated. On FJ_ERROR_INVALID_SOURCE the last error
 * holds every diagnostic, formatted `file:line:col: error: ...` with the source line and a caret.
 * Errors: FJ_ERROR_INVALID_ARGUMENT, FJ_ERROR_INVALID_SOURCE. */
FJ_API fj_status fj_program_create(fj_context* context, const char* name, const char* source,
                                   size_t source_length, fj_program** out);

/* As fj_program_create, reading the file at `path`. Errors: also FJ_ERROR_NOT_FOUND. */
FJ_API fj_status fj_program_create_from_file(fj_context* context, const char* path,
                                             fj_program** out);

FJ_API fj_status fj_program_destroy(fj_program* program);

/* Runtime parameters. Scalars (`param window: int`) and arrays (`param doc: int[b, kv]`) are
 * numbered apart, each in declaration order: scalar slot i is args.params[i], array slot i is
 * args.arrays[i]. */

/* Slot of scalar runtime parameter `name`: the index into fj_*_attention_args.params.
 * Errors: FJ_ERROR_NOT_FOUND (no such scalar parameter; arrays have fj_program_param_info). */
FJ_API fj_status fj_program_param_slot(const fj_program* program, const char* name, int32_t* slot);

/* Number of scalar runtime parameters the program declares. */
FJ_API fj_status fj_program_param_count(const fj_program* program, int32_t* count);

/* Number of array runtime parameters the program declares. */
FJ_API fj_status fj_program_array_count(const fj_program* program, int32_t* count);

typedef enum fj_param_type {
  FJ_PARAM_INT = 1,        /* scalar int32: the slot holds the value */
  FJ_PARAM_BOOL = 2,       /* scalar bool: the slot holds 0 or 1 (nonzero reads as true) */
  FJ_PARAM_FLOAT = 3,      /* scalar float32: the slot holds the float's bits */
  FJ_PARAM_INT_ARRAY = 4,  /* array of int32 */
  FJ_PARAM_FLOAT_ARRAY = 5 /* array of float32 */
} fj_param_type;

typedef struct fj_param_info {
  uint32_t struct_size; /* sizeof(fj_param_info), set by the caller */
  fj_param_type type;
  int32_t slot; /* among scalars or among arrays, by type */
  int32_t rank; /* 0 for scalars, 1 or 2 for arrays */
  /* Arrays: the declared dimension names ("b", "h", "q", "kv" or a free name such as "N"),
   * rank of them; valid while the program lives. A dimension named "b" must have at least
   * num_reqs (num_seqs) entries and one named "h" at least num_heads at launch. */
  const char* dims[2];
} fj_param_info;

/* What runtime parameter `name` is and where it goes. Errors: FJ_ERROR_NOT_FOUND. */
FJ_API fj_status fj_program_param_info(const fj_program* program, const char* name,
                                       fj_param_info* info);

/* A compile-time constant override (`const cap: float = 50.0` compiled with cap=30): the
 * value is the literal's text, "30", "0.5", "true". A different value is a different kernel. */
typedef struct fj_define {
  const char* name;
  const char* value;
} fj_define;

typedef struct fj_kernel_desc {
  uint32_t struct_size;     /* sizeof(fj_kernel_desc) */
  const char* mask;         /* name of a mask or of a variant of the program */
  int32_t head_dim;         /* 64, 80, 96, 128 or 256 */
  fj_dtype dtype;           /* of q and out, and of the K/V cache unless kv_dtype says */
  int32_t page_size;        /* tokens per KV-cache block: a multiple of 16, at most 1024, for
                               fj_paged_attention; 0 for the contiguous-KV (encoder) kernel of
                               fj_varlen_attention */
  const char* arch;         /* "sm_80", "sm_90a", ...; null: the current CUDA device's; "cpu"
                               (since 0.4): the CPU backend, whose launches run on the host
                               over host pointers (fj_paged_attention) */
  const char* score;        /* name of a score to pair with `mask`; null or "" for none. Must be
                               null when `mask` names a variant (it names its own score) */
  const fj_define* defines; /* num_defines overrides of the program's consts; may be null */
  uint32_t num_defines;
  /* Since 0.8 (a shorter struct_size reads it as 0): the K/V cache's dtype. 0: dtype.
   * FJ_DTYPE_FP8_E4M3: an fp8 cache read with the launch's k_scale and v_scale (paged kernels,
   * page_size > 0, CUDA and CPU); queries and outputs stay `dtype`. Otherwise it must equal
   * dtype. */
  fj_dtype kv_dtype;
} fj_kernel_desc;

/* Generates and compiles (or fetches from the context's cache) the attention kernel for
 * `desc` (with arch "cpu": builds the mask's host code instead, FJ_ERROR_COMPILE if that
 * fails). Errors: FJ_ERROR_INVALID_ARGUMENT, FJ_ERROR_NOT_FOUND (unknown mask, variant, score
 * or const, a score given with a variant, or a define value that is not a literal of its const's
 * type),
 * FJ_ERROR_UNSUPPORTED, FJ_ERROR_COMPILE, FJ_ERROR_CUDA (arch null and no usable device). */
FJ_API fj_status fj_kernel_create(fj_context* context, const fj_program* program,
                                  const fj_kernel_desc* desc, fj_kernel** out);

/* Destroys a kernel (null is accepted), freeing the workspace it allocated for launches that
 * passed none: those launches must have completed. */
FJ_API fj_status fj_kernel_destroy(fj_kernel* kernel);

/* Readable kernel name, e.g. "prefill_sliding_hd128_bf16_page16_sm90a", or
 * "cpu_prefill_sliding_hd128_bf16_page16" for a CPU kernel; valid while the kernel lives. */
FJ_API fj_status fj_kernel_name(const fj_kernel* kernel, const char** name);

/* A runtime array parameter at launch: dense row-major int32 or float32 elements in device
 * memory, 4-byte aligned. A 1-D array has cols == 1. Element [i, j] is data[i * row_stride + j].
 * Reads outside [0, rows) x [0, cols) yield 0 in the kernel (never out of bounds). */
typedef struct fj_array {
  const void* data; /* device pointer; may be null only when rows * cols == 0 */
  int32_t rows;
  int32_t cols;
  int32_t row_stride; /* elements, >= cols */
} fj_array;

/* One paged attention call (docs/architecture.md#call-contract). All pointers are device pointers;
 * strides are in elements and must be multiples of 8 (16-byte rows), pointers 16-byte aligned.
 *
 *   q, out:       [num_tokens, num_heads, head_dim] at (q|out)_stride_token / _stride_head
 *   k/v_cache:    element (block, slot, kv_head, d) at block * stride_block + slot * stride_slot
 *                 + kv_head * stride_head + d; covers vLLM's NHD/HND and joint K/V layouts
 *   query_start_loc[num_reqs + 1]: request r owns query rows [qsl[r], qsl[r+1])
 *   seq_lens[num_reqs]: keys of request r, its new tokens included
 *   block_table:  [num_reqs][block_table_stride]; only the first ceil(seq_len / page_size)
 *                 entries of a row are read. Keys at or beyond max_blocks_per_req * page_size
 *                 are never read (treated as absent).
 *   lse:          optional float32 [num_tokens, num_heads] at lse_stride_token, natural log of
 *                 the softmax denominator; -inf for a row with no visible key (its out is 0)
 *
 * Query row t of request r has logical position seq_len[r] - query_len[r] + (t - qsl[r]);
 * key j has position j. Query head h reads kv head h / (num_heads / num_kv_heads).
 */
typedef struct fj_paged_attention_args {
  uint32_t struct_size; /* sizeof(fj_paged_attention_args) */
  const void* q;
  void* out;
  const void* k_cache;
  const void* v_cache;
  const int32_t* query_start_loc;
  const int32_t* seq_lens;
  const int32_t* block_table;
  float* lse; /* may be null */

  int32_t num_tokens;
  int32_t num_reqs;
  int32_t num_heads;
  int32_t num_kv_heads;       /* divides num_heads */
  int32_t max_query_len;      /* host copy: the largest qsl[r+1] - qsl[r]; sizes the grid (0
                                 with query rows is rejected). A CUDA kernel that finds a
                                 request with more rows writes its out rows 0 and lse -inf
                                 and reports it (bad_index, code 3); unused by fj_plan_run */
  int32_t max_blocks_per_req; /* entries per block-table row that may be read */

  int64_t q_stride_token, q_stride_head;
  int64_t out_stride_token, out_stride_head;
  int64_t k_stride_block, k_stride_slot, k_stride_head;
  int64_t v_stride_block, v_stride_slot, v_stride_head;
  int64_t block_table_stride;
  int64_t lse_stride_token;

  float scale; /* softmax scale; 0 means 1 / sqrt(head_dim) */

  const int32_t* params;  /* host array: value of each scalar runtime parameter, by slot (a
                             float parameter's slot holds its bits) */
  int32_t num_params;     /* must equal the program's scalar parameter count */
  int32_t num_arrays;     /* the program's array parameter count, or 0 when the kernel's variant
                             reads no array */
  const fj_array* arrays; /* host array of num_arrays descriptors, by array slot; arrays the
                             variant does not read may be {NULL, 0, 0, 0} */
  /* Debug, normally null: device memory of 4 int32 the caller zeroes before the launch. The
   * first bad input the launch finds sets [0] to its code and [1..3] as below; later ones, of
   * either kind, leave it as it is (which of several is first depends on timing). Costs nothing
   * where every read is in range.
   *   1: an array read outside its array (which yields 0): array slot, row, column (a 1-D
   *      array's column is 0).
   *   2: (CUDA kernels, since 0.11) a block-table entry outside [0, num_blocks): request,
   *      logical block, the entry. Only entries of key tiles the mask leaves visible are
   *      looked at.
   *   3: (CUDA kernels, direct launches, since 0.11) a request with more query rows than
   *      max_query_len (max_seq_len): request, its query rows, max_query_len.
   * Codes 2 and 3 are what the CPU backend rejects with FJ_ERROR_INVALID_ARGUMENT instead. */
  int32_t* bad_index;

  /* Since 0.3 (a shorter struct_size reads them as null and 0). Device memory for what the
   * launch computes ahead of the attention kernel: the min/max summaries of the arrays it reads
   * along a `q` or `kv` dimension (`doc: int[b, kv]`), which let the kernel skip or take whole
   * tiles without reading every element. 16-byte aligned, at least
   * fj_attention_workspace_size() bytes; owned by the caller, it must stay allocated until the
   * launch completes and must not be in use by another launch in flight. Its contents need no
   * initialisation and are overwritten.
   * Null (with workspace_bytes 0): the kernel uses a buffer of its own, one per CUDA context,
   * allocated on the first launch that needs it (and reallocated, larger, on a launch that
   * needs more) and freed by fj_kernel_destroy. Such launches are not CUDA-graph capturable
   * (allocation is not allowed while capturing, and a captured launch would share the buffer
   * with later ones), and launches of one kernel that share it must be ordered on one stream.
   * A caller that captures graphs or launches one kernel on several streams at once passes its
   * own workspace. */
  void* workspace;
  uint64_t workspace_bytes; /* size of workspace, in bytes */

  /* Since 0.5 (a shorter struct_size reads it as 0 = unchecked). Blocks in the K/V cache: the
   * block-table entries a call reads must lie in [0, num_blocks). The CPU backend rejects an
   * entry outside with FJ_ERROR_INVALID_ARGUMENT and a message naming it. CUDA kernels (since
   * 0.11, fj_plan_run too) never read the page of such an entry: its keys are absent, masked as
   * if the mask were false for them (a row left with no visible key gets out 0, lse -inf), and
   * the first one is reported through bad_index (code 2); the call still succeeds. The check
   * costs the read of each visited tile's entries when the kernel lists its tiles and one
   * comparison per copied 16-byte chunk, 0-2% of the kernel's time (docs/architecture.md). 0:
   * unchecked (entries are read as they are; on the CPU backend they must then be
   * non-negative). */
  int64_t num_blocks;

  /* Since 0.7 (a shorter struct_size reads it as null: no sinks). Attention sinks, as gpt-oss
   * and vLLM's FlashAttention backend (s_aux) have them: [num_heads] float32 logits, device
   * memory (host memory for CPU kernels), 4-byte aligned. Head h's sink joins the softmax
   * denominator of each of its rows once, with no value: out = sum_j e^(s_j) v_j / (sum_j e^(s_j)
   * + e^(sinks[h])) and lse = log(sum_j e^(s_j) + e^(sinks[h])), where s_j are the scores after
   * the scale and score_mod over the keys the mask keeps. A row with no visible key gets out 0
   * and lse = sinks[h]; a sink of -inf is no sink. Any mask and score; fj_plan_run counts it once
   * however many splits a row's keys take. Partial attentions that will be merged
   * (fj_merge_states, fj_merge_states_n) leave it out and pass it to the merge. */
  const float* sinks;

  /* Since 0.8 (a shorter struct_size reads them as null and 0). Dequantization scales of an fp8
   * K/V cache (fj_kernel_desc::kv_dtype FJ_DTYPE_FP8_E4M3), as vLLM's k_scale and v_scale:
   * float32, device memory (host memory for CPU kernels), 4-byte aligned. Element (block, slot,
   * kv_head, d) of the K cache stands for its e4m3 value times k_scale[kv_head *
   * kv_scale_stride] (V likewise): stride 0 is one scale per tensor, 1 one per kv head. Both
   * required with an fp8 cache, both null otherwise. With an fp8 cache the cache strides are in
   * bytes (elements of one byte), multiples of 16, and the caches 16-byte aligned. */
  const float* k_scale;
  const float* v_scale;
  int32_t kv_scale_stride;

  /* Since 0.9 (a shorter struct_size reads them as null and 0: the call holds every key of its
   * requests). Context parallelism (docs/context_parallel.md): the call holds one shard of each
   * request's keys, and masks and scores see the positions keys and queries have in the whole
   * request. seq_lens[r] and the block table then describe the shard's keys only; the shard's key
   * j (0 <= j < seq_lens[r]) has position
   *     kv_shard_offsets[r] + (j / I) * N * I + R * I + j % I
   * with N = kv_shard_count, R = kv_shard_rank and I = kv_shard_interleave. vLLM's decode context
   * parallelism (tokens dealt to N ranks in runs of cp_kv_cache_interleave_size I) passes its
   * rank, world size and interleave size with kv_shard_offsets null; a contiguous shard passes
   * N = 1 (R = 0) and each request's first key position in kv_shard_offsets.
   * global_seq_lens[r] is the request's key count over all shards and places its queries: query
   * row t has position global_seq_lens[r] - query_len[r] + (t - qsl[r]). It is required when
   * kv_shard_offsets is given or N > 1; where it is null, seq_lens places the queries.
   * kv_shard_count 0 reads as 1, kv_shard_interleave 0 as 1; 0 <= R < N. Both arrays are int32
   * [num_reqs], device memory (host memory for CPU kernels). Every key position must lie in
   * [0, global_seq_lens[r]), and each request's query rows must fit its global length (the CPU
   * backend checks both). A shard may hold no key of a request (seq_lens[r] 0) or none its queries
   * see: those rows get out 0 and lse -inf, and merge away (fj_merge_states_n). Sinks belong to the
   * merge, not to the shards. CUDA kernels and plans (since 0.10; in 0.9 they returned
   * FJ_ERROR_UNSUPPORTED) run a sharded form of the kernel, compiled on the handle's first
   * sharded call (and on a plan's first sharded run), which reads both arrays on the device; a
   * key position outside the request is not detected there. */
  const int32_t* kv_shard_offsets;
  const int32_t* global_seq_lens;
  int32_t kv_shard_rank;
  int32_t kv_shard_count;
  int32_t kv_shard_interleave;
} fj_paged_attention_args;

/* CPU kernels (arch "cpu"): every pointer of the args (q, out, caches, query_start_loc,
 * seq_lens, block_table, lse, arrays' data, bad_index, workspace) is host memory, with the same
 * alignment and strides as for the GPU. The call runs the attention on the library's worker
 * threads (one per hardware thread, shared by the process; concurrent calls take turns) and
 * returns when it is done; `stream` is ignored. A workspace, when given, is host memory that
 * receives the summaries (null: the call allocates its own). The checks are those below, and the
 * host reads what a kernel cannot check: FJ_ERROR_INVALID_ARGUMENT also for a query_start_loc
 * (cu_seqlens) that decreases, starts below 0 or ends past num_tokens, a request with more query
 * rows than max_query_len (max_seq_len), a seq_len smaller than its request's query rows, or a
 * negative block-table entry among those read. Results do not depend on the number of threads.
 *
 * Enqueues the kernel on `stream` (a CUstream; null is the legacy default stream) in the
 * current CUDA context, loading the module there on first use. Arrays the kernel reads along a
 * position dimension are first summarised on the same stream (see workspace; the summary kernel
 * is compiled on first use per context and cached). No host-device synchronisation.
 * Errors: FJ_ERROR_INVALID_ARGUMENT (null pointers, shapes, strides, alignment, parameter
 * count, struct_size older than 0.2's, a workspace that is misaligned or smaller than
 * fj_attention_workspace_size, or null with a nonzero workspace_bytes), FJ_ERROR_UNSUPPORTED
 * (an array too large to summarise), FJ_ERROR_COMPILE (the summary kernel), FJ_ERROR_CUDA
 * (no device, a failed launch or workspace allocation). */
FJ_API fj_status fj_paged_attention(fj_kernel* kernel, const fj_paged_attention_args* args,
                                    void* stream);

/* One attention call over contiguous, packed K/V without a cache: the encoder case
 * (docs/architecture.md#call-contract). q, k, v and out are [num_tokens, heads, head_dim] at their
 * strides (k and v with num_kv_heads heads); sequence s owns rows [cu_seqlens[s], cu_seqlens[s+1])
 * of all four, and positions are 0-based within it (q = row - cu_seqlens[s], kv likewise). Pointers
 * are device pointers, 16-byte aligned, strides multiples of 8 elements. The kernel must have been
 * created with page_size 0. lse as in fj_paged_attention.
 *
 * Since 0.6, keys may differ from queries (cu_seqlens_k) and each tensor may have a batch stride:
 * row i of sequence s of q is at s * q_stride_batch + (cu_seqlens[s] + i) * q_stride_token, key
 * j at s * k_stride_batch + (cu_seqlens_k[s] + j) * k_stride_token (v and out likewise); query i
 * has position i and key j position j, both from 0, whatever the lengths (PyTorch's
 * flex_attention with a query length other than the key length). A [B, H, S, D] tensor t with
 * cu_seqlens[s] = s * S has stride_token t.stride(2), stride_head t.stride(1) and stride_batch
 * t.stride(0) - S * t.stride(2). lse has no batch stride: row i of sequence s is
 * cu_seqlens[s] + i. */
typedef struct fj_varlen_attention_args {
  uint32_t struct_size; /* sizeof(fj_varlen_attention_args) */
  const void* q;
  const void* k;
  const void* v;
  void* out;
  const int32_t* cu_seqlens; /* [num_seqs + 1], device */
  float* lse;                /* may be null */

  int32_t num_tokens;
  int32_t num_seqs;
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t max_seq_len; /* host copy: the largest cu_seqlens[s+1] - cu_seqlens[s] */

  int64_t q_stride_token, q_stride_head;
  int64_t k_stride_token, k_stride_head;
  int64_t v_stride_token, v_stride_head;
  int64_t out_stride_token, out_stride_head;
  int64_t lse_stride_token;

  float scale; /* 0 means 1 / sqrt(head_dim) */

  const int32_t* params; /* as in fj_paged_attention_args */
  int32_t num_params;
  int32_t num_arrays;
  const fj_array* arrays;
  int32_t* bad_index; /* as in fj_paged_attention_args */

  void* workspace; /* since 0.3: as in fj_paged_attention_args */
  uint64_t workspace_bytes;

  /* Since 0.6 (a shorter struct_size reads them as null and 0: keys packed like the queries, no
   * batch strides). cu_seqlens_k: [num_seqs + 1], device; keys of sequence s are rows
   * [cu_seqlens_k[s], cu_seqlens_k[s+1]) of k and v; null: cu_seqlens. num_tokens_k: rows of k
   * and v when cu_seqlens_k is given (the CPU backend checks cu_seqlens_k against it). The batch
   * strides, in elements (any sign, multiples of 8), are added once per sequence index as above. */
  const int32_t* cu_seqlens_k;
  int32_t num_tokens_k;
  int64_t q_stride_batch, k_stride_batch, v_stride_batch, out_stride_batch;

  /* Since 0.7 (a shorter struct_size reads it as null): attention sinks, as in
   * fj_paged_attention_args. */
  const float* sinks;
} fj_varlen_attention_args;

/* Enqueues an encoder kernel (page_size 0) on `stream`; a CPU encoder kernel runs on the host
 * over host pointers, as in fj_paged_attention. Errors as fj_paged_attention, and
 * FJ_ERROR_INVALID_ARGUMENT for a paged kernel. */
FJ_API fj_status fj_varlen_attention(fj_kernel* kernel, const fj_varlen_attention_args* args,
                                     void* stream);

/* Bytes of workspace an attention launch of `kernel` needs with arrays of these shapes (only
 * rows and cols of the arrays the kernel reads are looked at; data may be null): 0 when it
 * summarises none. Grows with rows and cols only, so a workspace sized for the largest arrays
 * an engine will pass serves every launch. `arrays` and `num_arrays` as in
 * fj_paged_attention_args; `bytes` receives the size. Touches no device.
 * Errors: FJ_ERROR_INVALID_ARGUMENT (null kernel or bytes, array count, negative shapes),
 * FJ_ERROR_UNSUPPORTED (an array too large to summarise). */
FJ_API fj_status fj_attention_workspace_size(const fj_kernel* kernel, const fj_array* arrays,
                                             int32_t num_arrays, uint64_t* bytes);

/* Writes new tokens' keys and values into a paged cache: row t goes to slot slot_mapping[t] =
 * block * page_size + offset. A negative slot (vLLM pads with -1) or one at or past
 * num_blocks * page_size is skipped. key/value: [num_tokens, num_kv_heads, head_dim] at their
 * strides; caches as in fj_paged_attention. 16-bit elements (bf16 or fp16: a copy), or, since
 * 0.8, an fp8 cache: each value x of kv head h is stored as e4m3(x / k_scale[h *
 * kv_scale_stride]) (v_scale for values), rounded to nearest even and saturated to +-448 as
 * vLLM's scaled_fp8_conversion does (NaN stays NaN). */
typedef struct fj_kv_cache_write_args {
  uint32_t struct_size; /* sizeof(fj_kv_cache_write_args) */
  const void* key;
  const void* value;
  void* k_cache;
  void* v_cache;
  const int64_t* slot_mapping; /* [num_tokens], device */

  int32_t num_tokens;
  int32_t num_kv_heads;
  int32_t head_dim;  /* a multiple of 8 */
  int32_t page_size; /* > 0 */
  int64_t num_blocks;

  int64_t key_stride_token, key_stride_head;
  int64_t value_stride_token, value_stride_head;
  int64_t k_stride_block, k_stride_slot, k_stride_head;
  int64_t v_stride_block, v_stride_slot, v_stride_head;

  /* Since 0.4 (a shorter struct_size reads it as FJ_DEVICE_CUDA). FJ_DEVICE_CPU: every pointer
   * is host memory and the write is done when the call returns. */
  fj_device device;

  /* Since 0.8 (a shorter struct_size reads them as 0, null and 0: a 16-bit copy). cache_dtype
   * FJ_DTYPE_FP8_E4M3 quantizes into an fp8 cache (cache strides in bytes, multiples of 16):
   * dtype (FJ_DTYPE_BF16 or FJ_DTYPE_FP16) is then the inputs', and k_scale/v_scale (float32,
   * in the same memory as the caches) with kv_scale_stride as in fj_paged_attention_args.
   * cache_dtype 0: a 16-bit copy, dtype ignored and the scales null. */
  fj_dtype dtype;
  fj_dtype cache_dtype;
  const float* k_scale;
  const float* v_scale;
  int32_t kv_scale_stride;
} fj_kv_cache_write_args;

/* Enqueues the cache write on `stream`, compiling its kernel for the current device on first
 * use; with FJ_DEVICE_CPU, writes on the host (stream ignored). Errors:
 * FJ_ERROR_INVALID_ARGUMENT (also: a device that is neither value), FJ_ERROR_COMPILE,
 * FJ_ERROR_CUDA. */
FJ_API fj_status fj_kv_cache_write(fj_context* context, const fj_kv_cache_write_args* args,
                                   void* stream);

/* Merges two partial attentions over disjoint key sets by their LSE (cascade attention,
 * context parallelism): per (token, head) row, out = (e^(lse_a - m) out_a + e^(lse_b - m) out_b)
 * / (e^(lse_a - m) + e^(lse_b - m)) with m = max(lse_a, lse_b), and lse = log of the summed
 * exponentials. Rows empty on both sides (both lse -inf) give 0 and -inf. out may alias out_a
 * or out_b; lse (optional) must not alias lse_a or lse_b. */
typedef struct fj_merge_states_args {
  uint32_t struct_size; /* sizeof(fj_merge_states_args) */
  fj_dtype dtype;       /* of out_a, out_b, out */
  const void* out_a;
  const float* lse_a;
  const void* out_b;
  const float* lse_b;
  void* out;
  float* lse; /* may be null */

  int32_t num_tokens;
  int32_t num_heads;
  int32_t head_dim; /* a multiple of 8 */

  int64_t out_a_stride_token, out_a_stride_head;
  int64_t out_b_stride_token, out_b_stride_head;
  int64_t out_stride_token, out_stride_head;
  int64_t lse_a_stride_token, lse_b_stride_token, lse_stride_token;

  /* Since 0.4 (a shorter struct_size reads it as FJ_DEVICE_CUDA). FJ_DEVICE_CPU: every pointer
   * is host memory and the merge is done when the call returns. */
  fj_device device;

  /* Since 0.7 (a shorter struct_size reads it as null): [num_heads] float32 sink logits
   * (fj_paged_attention_args.sinks) in the device's memory, or null. Each row's sink joins the
   * merged denominator once: pass it to the merge that yields the final result, computing the
   * partials (and merging them among themselves) without it. A row empty on both sides then
   * gets out 0 and lse = the sink. */
  const float* sinks;
} fj_merge_states_args;

/* Enqueues the merge on `stream`, compiling its kernel for the current device on first use;
 * with FJ_DEVICE_CPU, merges on the host (stream ignored). Errors: FJ_ERROR_INVALID_ARGUMENT
 * (also: a device that is neither value), FJ_ERROR_UNSUPPORTED (dtype), FJ_ERROR_COMPILE,
 * FJ_ERROR_CUDA. */
FJ_API fj_status fj_merge_states(fj_context* context, const fj_merge_states_args* args,
                                 void* stream);

/* Since 0.9: merges num_states partial attentions over disjoint key sets, such as the shards of
 * context parallelism after an all-gather (docs/context_parallel.md), in one call. Per (token,
 * head) row, with m the largest lse_s: out = sum_s e^(lse_s - m) out_s / sum_s e^(lse_s - m), lse
 * = m + log(sum_s e^(lse_s - m)), summed in state order, so the result does not depend on timing
 * or thread count. A state of lse -inf contributes nothing (its out is not read, even if it is
 * NaN); a row empty in every state gives out 0 and lse -inf. With sinks, each row's sink joins
 * the merged denominator once, as in fj_merge_states (the states must leave it out); a row empty
 * everywhere then gets out 0 and lse = the sink. num_states 1 normalises nothing: it copies (and
 * applies the sink).
 *
 * State s's output row (token, head) is at states_out + s * out_stride_state + token *
 * out_stride_token + head * out_stride_head (elements of dtype), its lse at states_lse + s *
 * lse_stride_state + token * lse_stride_token + head: an all-gathered [num_states, num_tokens,
 * num_heads, head_dim] tensor and its [num_states, num_tokens, num_heads] LSE, or any strided
 * view of them. out may be one of the states' rows (every state is read before a row is written);
 * lse (optional) must not overlap states_lse. On CUDA (since 0.10; 0.9 returned
 * FJ_ERROR_UNSUPPORTED) one launch on `stream` merges every row with the split-KV decode
 * kernel's merge, compiled per head dim on first use, for head dims up to 256; the states are
 * 16-byte aligned device memory. */
typedef struct fj_merge_states_n_args {
  uint32_t struct_size; /* sizeof(fj_merge_states_n_args) */
  fj_dtype dtype;       /* of the states' outputs and out: FJ_DTYPE_BF16 or FJ_DTYPE_FP16 */
  fj_device device;
  int32_t num_states; /* >= 1 */
  const void* states_out;
  const float* states_lse;
  void* out;
  float* lse; /* may be null */

  int32_t num_tokens;
  int32_t num_heads;
  int32_t head_dim; /* a multiple of 8 */

  int64_t out_stride_state, out_stride_token, out_stride_head; /* of states_out */
  int64_t lse_stride_state, lse_stride_token;                  /* of states_lse */
  int64_t merged_stride_token, merged_stride_head;             /* of out */
  int64_t merged_lse_stride_token;                             /* of lse */

  const float* sinks; /* [num_heads] sink logits in the device's memory, or null */
} fj_merge_states_n_args;

/* Errors: FJ_ERROR_INVALID_ARGUMENT (null pointers, shapes, strides, alignment, lse overlapping
 * states_lse, a device that is neither value), FJ_ERROR_UNSUPPORTED (dtype; on CUDA a head dim
 * above 256), FJ_ERROR_COMPILE, FJ_ERROR_CUDA. */
FJ_API fj_status fj_merge_states_n(fj_context* context, const fj_merge_states_n_args* args,
                                   void* stream);

/* ---- Compiling ahead and the kernel cache (docs/architecture.md#cache) --------------------------
 *
 * Compiled kernels are cached in memory per context and on disk, shared by every process of
 * the user: in $FLEXJIT_CACHE_DIR, else $XDG_CACHE_HOME/flexjit, else ~/.cache/flexjit. An entry
 * is keyed by a hash of everything that determines its code (generated source, templates, NVRTC
 * version, architecture, options), so a stale or foreign entry is never loaded; a corrupt one is
 * rebuilt. An unwritable directory makes the cache memory-only (one warning on stderr).
 * Environment (read once per process): FLEXJIT_CACHE_DIR, FLEXJIT_CACHE_MAX_BYTES (size cap,
 * default 1G; least recently used entries are evicted), FLEXJIT_ALWAYS_COMPILE (never read the
 * disk cache), FLEXJIT_DUMP_DIR (write each generated source and compile log there),
 * FLEXJIT_LOG (error|warn|info|debug, default warn). docs/cache.md has the details.
 */

/* Called by fj_precompile after each description is built (or failed): `done` of `total`
 * finished, the last being descs[index] with `status`. Called from fj_precompile's threads,
 * one call at a time, `done` increasing by one per call; it must not call fj_precompile. */
typedef void (*fj_precompile_progress_fn)(void* user_data, size_t done, size_t total, size_t index,
                                          fj_status status);

typedef struct fj_precompile_options {
  uint32_t struct_size; /* sizeof(fj_precompile_options) */
  int32_t num_threads;  /* compile threads: 0 = one per hardware thread; never more than count */
  fj_precompile_progress_fn progress; /* may be null */
  void* progress_user_data;           /* passed to progress as is */
} fj_precompile_options;

/* Builds the kernel of every description, in parallel, as fj_kernel_create would (same checks,
 * same caches): an engine calls it at load time so that its later fj_kernel_create calls are
 * cache hits. Every description is attempted, whatever the others do.
 *   descs:    `count` descriptions (null when count is 0), each descs[0].struct_size bytes
 *             from the last (an older header's shorter descriptions step by their own size)
 *   options:  may be null: every hardware thread, no progress
 *   statuses: null, or `count` entries that receive each description's status (FJ_SUCCESS or
 *             what fj_kernel_create would return for it); filled whenever the arguments are valid
 * Returns FJ_SUCCESS when every description built; otherwise the status of the failed
 * description with the lowest index, and the last error holds the number of failures and that
 * description's message (kernel name, NVRTC log, where the source was written). Thread-safe.
 * Errors: FJ_ERROR_INVALID_ARGUMENT (null context or program, null descs with count > 0,
 * descs->struct_size or options->struct_size too small, negative num_threads), and the statuses
 * of fj_kernel_create. */
FJ_API fj_status fj_precompile(fj_context* context, const fj_program* program,
                               const fj_kernel_desc* descs, size_t count,
                               const fj_precompile_options* options, fj_status* statuses);

/* ---- Planned launches: split-KV decode, mixed batches, CUDA graphs (docs/architecture.md#plans)
 *
 * A plan turns host copies of a batch's lengths into work lists in device memory, and running
 * it launches kernels that read those lists, with a geometry fixed by the plan's shape. An
 * engine makes a plan per kernel and batch shape and, at every step, updates and runs it:
 *
 *   fj_plan_create(kernel, &shape, &plan);          once: compiles, allocates device memory
 *   fj_plan_update(plan, qsl, seq_lens, n, max_blocks_per_req, stream);   host copies
 *   fj_plan_run(plan, &args, stream);               or cuGraphLaunch of a captured run
 *
 * Requests of few packed query rows (query tokens times the GQA group at most 32: decodes,
 * speculative tokens) take a split-KV decode kernel; when they would leave SMs idle the plan
 * splits their keys into parts merged by LSE in a fixed order, so results do not depend on
 * timing. Longer requests (prefill chunks, with their cached context) take the prefill kernel,
 * tiles that see the most keys first. One run serves any mix of the two.
 *
 * CUDA graphs: fj_plan_run does no host-device synchronisation and allocates nothing, so it can
 * be captured (pass args.workspace if the variant reads arrays over positions, see
 * fj_paged_attention). The captured graph replays any later update of the same plan: update,
 * write the new lengths and block table into the device buffers the captured args point to,
 * then launch the graph, all on one stream. fj_plan_update itself is not captured.
 */
typedef struct fj_plan fj_plan;

typedef struct fj_plan_shape {
  uint32_t struct_size;   /* sizeof(fj_plan_shape) */
  int32_t max_num_reqs;   /* requests per batch, at most */
  int32_t max_num_tokens; /* query tokens per batch, at most */
  int32_t max_query_len;  /* query tokens of one request, at most (1 for a decode-only plan) */
  int32_t num_heads;
  int32_t num_kv_heads; /* divides num_heads */
} fj_plan_shape;

/* Creates a plan for a paged kernel (page_size > 0) in the current CUDA context (device 0's
 * primary one when the thread has none): compiles the split-KV decode kernel of the kernel's
 * variant (cached like every kernel), sizes the launches from the device's SM count and
 * allocates the work lists and split buffers (a few MiB at most). The plan holds on to
 * `kernel`, which must outlive it. Errors: FJ_ERROR_INVALID_ARGUMENT (null pointers, a
 * struct_size too small, negative or inconsistent shape, an encoder kernel), FJ_ERROR_UNSUPPORTED
 * (a shape too large to index), FJ_ERROR_COMPILE, FJ_ERROR_CUDA. */
FJ_API fj_status fj_plan_create(fj_kernel* kernel, const fj_plan_shape* shape, fj_plan** out);

/* Frees the plan's memory (null is accepted); runs that use it must have completed. */
FJ_API fj_status fj_plan_destroy(fj_plan* plan);

/* Plans a batch from host copies of its lengths: query_start_loc[num_reqs + 1] (starting at 0,
 * non-decreasing) and seq_lens[num_reqs] as in fj_paged_attention_args, and the block-table
 * width the run will pass. Copies the work lists to the device on `stream`, ordered before
 * the runs enqueued after it on that stream. The host arrays may be reused as soon as the call
 * returns. Waits (on the host) only for the copy enqueued two updates before, if still
 * pending. A seq_len shorter than its query is a shard's (context parallelism, since 0.10;
 * before, the update refused it): only a sharded run takes such a batch. Errors:
 * FJ_ERROR_INVALID_ARGUMENT (null pointers; more requests, tokens or a longer query than the
 * shape allows; a decreasing query_start_loc; a negative seq_len or one longer than
 * max_blocks_per_req pages hold), FJ_ERROR_CUDA. A failed update leaves the previous plan in
 * place. */
FJ_API fj_status fj_plan_update(fj_plan* plan, const int32_t* query_start_loc,
                                const int32_t* seq_lens, int32_t num_reqs,
                                int32_t max_blocks_per_req, void* stream);

/* Enqueues the planned attention on `stream`: the batch the last update described, over the
 * device buffers of `args` (as in fj_paged_attention, whose checks apply, num_blocks and
 * bad_index included; max_query_len is not used: the work lists come from the update's host
 * lengths, which must be those of the device buffers). args' heads must be the plan's, and
 * num_reqs and num_tokens at least the last update's. No host-device synchronisation;
 * CUDA-graph capturable (see above). Runs of one plan share its device memory (work lists,
 * split results, scheduling counters): order them, e.g. on one stream; plans of their own run
 * concurrently. A sharded run (kv_shard_*, since 0.10) compiles the sharded forms of the plan's
 * kernels on its first run. Errors: as fj_paged_attention; FJ_ERROR_INVALID_ARGUMENT for a run
 * holding every key over a batch with a seq_len shorter than its query. */
FJ_API fj_status fj_plan_run(fj_plan* plan, const fj_paged_attention_args* args, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLEXJIT_FLEXJIT_H_ */
