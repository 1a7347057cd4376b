/* flexjit C API: compile attention masks written in the flexjit mask language and run paged
 * attention over a vLLM-style KV cache (DESIGN.md §3, §7).
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
#define FJ_VERSION_MINOR 1
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

typedef enum fj_dtype { FJ_DTYPE_FP16 = 1, FJ_DTYPE_BF16 = 2 } fj_dtype;

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

/* Slot of runtime parameter `name` (its index among the file's `param` declarations): the
 * index into fj_paged_attention_args.params. Errors: FJ_ERROR_NOT_FOUND. */
FJ_API fj_status fj_program_param_slot(const fj_program* program, const char* name, int32_t* slot);

/* Number of runtime parameters the program declares. */
FJ_API fj_status fj_program_param_count(const fj_program* program, int32_t* count);

typedef struct fj_kernel_desc {
  uint32_t struct_size; /* sizeof(fj_kernel_desc) */
  const char* mask;     /* name of a mask of the program */
  int32_t head_dim;     /* 64 or 128 */
  fj_dtype dtype;       /* of q, out, and the K/V cache */
  int32_t page_size;    /* tokens per KV-cache block: a multiple of 16, at most 1024 */
  const char* arch;     /* "sm_80", "sm_90a", ...; null: the current CUDA device's */
} fj_kernel_desc;

/* Generates and compiles (or fetches from the context's cache) the paged attention kernel for
 * `desc`. Errors: FJ_ERROR_INVALID_ARGUMENT, FJ_ERROR_NOT_FOUND (unknown mask),
 * FJ_ERROR_UNSUPPORTED, FJ_ERROR_COMPILE, FJ_ERROR_CUDA (arch null and no usable device). */
FJ_API fj_status fj_kernel_create(fj_context* context, const fj_program* program,
                                  const fj_kernel_desc* desc, fj_kernel** out);

FJ_API fj_status fj_kernel_destroy(fj_kernel* kernel);

/* Readable kernel name, e.g. "prefill_sliding_hd128_bf16_page16_sm90a"; valid while the
 * kernel lives. */
FJ_API fj_status fj_kernel_name(const fj_kernel* kernel, const char** name);

/* One paged attention call (DESIGN.md §3). All pointers are device pointers; strides are in
 * elements and must be multiples of 8 (16-byte rows), pointers 16-byte aligned.
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
  int32_t max_query_len;      /* host copy: the largest qsl[r+1] - qsl[r] */
  int32_t max_blocks_per_req; /* entries per block-table row that may be read */

  int64_t q_stride_token, q_stride_head;
  int64_t out_stride_token, out_stride_head;
  int64_t k_stride_block, k_stride_slot, k_stride_head;
  int64_t v_stride_block, v_stride_slot, v_stride_head;
  int64_t block_table_stride;
  int64_t lse_stride_token;

  float scale; /* softmax scale; 0 means 1 / sqrt(head_dim) */

  const int32_t* params; /* host array: value of each runtime parameter, by slot */
  int32_t num_params;    /* must equal the program's parameter count */
} fj_paged_attention_args;

/* Enqueues the kernel on `stream` (a CUstream; null is the legacy default stream) in the
 * current CUDA context, loading the module there on first use. Errors: FJ_ERROR_INVALID_ARGUMENT
 * (null pointers, shapes, strides, alignment, parameter count), FJ_ERROR_CUDA. */
FJ_API fj_status fj_paged_attention(fj_kernel* kernel, const fj_paged_attention_args* args,
                                    void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLEXJIT_FLEXJIT_H_ */
