/* Out-of-tree consumer of an installed fa3jit, C99, using only <fa3jit/fa3jit.h>. Needs no GPU: every
 * forward call below must be refused by argument checks before the driver is touched.
 * Usage: fa3jit_consumer [cache_dir]. Exit status 0 when every check holds. */
#include <fa3jit/fa3jit.h>

#include <stdio.h>
#include <string.h>

static int failures = 0;
static int checks = 0;

static void expect(int condition, const char* what) {
  ++checks;
  if (!condition) {
    ++failures;
    fprintf(stderr, "FAILED: %s\n", what);
  }
}

/* A forward call that must come back as INVALID_ARGUMENT with a message containing `needle`. */
static void expect_invalid(fa3jit_runtime* rt, const fa3jit_forward_params* p, const char* needle, const char* what) {
  fa3jit_status status = fa3jit_attention_forward(rt, NULL, p, NULL);
  const char* message = fa3jit_last_error();
  printf("  %-34s -> %s: %s\n", what, fa3jit_status_name(status), message);
  expect(status == FA3JIT_ERROR_INVALID_ARGUMENT, what);
  expect(strcmp(fa3jit_status_name(status), "invalid_argument") == 0, "status name is invalid_argument");
  expect(strstr(message, needle) != NULL, "message names the argument");
}

int main(int argc, char** argv) {
  static char device_buffer[4][256]; /* never dereferenced: each call below fails before any launch */
  const char* version = fa3jit_version();
  fa3jit_runtime_options options;
  fa3jit_runtime* rt = NULL;
  fa3jit_forward_params p;
  fa3jit_status status;

  printf("fa3jit %s, ABI %d\n", version, FA3JIT_ABI_VERSION);
  expect(version != NULL && strlen(version) >= 5, "fa3jit_version() is MAJOR.MINOR.PATCH");

  options.struct_size = sizeof(options);
  options.cache_dir = argc > 1 ? argv[1] : NULL;
  status = fa3jit_runtime_create(&options, &rt);
  printf("  %-34s -> %s %s\n", "fa3jit_runtime_create", fa3jit_status_name(status), fa3jit_last_error());
  expect(status == FA3JIT_OK && rt != NULL, "fa3jit_runtime_create succeeds");
  expect(strcmp(fa3jit_last_error(), "") == 0, "last error is empty after a success");

  /* bf16, batch 1, 128 x 128 tokens, 8 heads over 2 kv heads, head_dim 128, but q's pointer is NULL. */
  fa3jit_forward_params_init(&p);
  p.dtype = FA3JIT_DTYPE_BF16;
  p.batch = 1;
  p.seqlen_q = 128;
  p.seqlen_k = 128;
  p.num_heads = 8;
  p.num_heads_kv = 2;
  p.head_dim = 128;
  p.head_dim_v = 128;
  p.k.data = device_buffer[1];
  p.v.data = device_buffer[2];
  p.out.data = device_buffer[3];
  expect_invalid(rt, &p, "q", "forward with q.data = NULL");

  p.q.data = device_buffer[0];
  p.dtype = (fa3jit_dtype)7;
  expect_invalid(rt, &p, "dtype", "forward with dtype = 7");

  p.dtype = FA3JIT_DTYPE_BF16;
  p.struct_size = 0;
  expect_invalid(rt, &p, "struct_size", "forward with struct_size = 0");

  p.struct_size = sizeof(p);
  expect_invalid(NULL, &p, "runtime", "forward with runtime = NULL");

  {
    /* Capabilities are readable without a GPU; a NULL kernel handle cannot be created. */
    const char* caps = fa3jit_capabilities_json();
    size_t bytes = 1;
    fa3jit_kernel* kernel = NULL;
    printf("  %-34s -> %s\n", "fa3jit_capabilities_json", caps);
    expect(strstr(caps, "\"attention_fwd\"") != NULL, "capabilities name the attention family");
    expect(fa3jit_kernel_create(rt, NULL, &kernel) == FA3JIT_ERROR_INVALID_ARGUMENT && kernel == NULL,
           "fa3jit_kernel_create rejects a NULL spec");
    expect(fa3jit_attention_workspace_size(rt, &p, &bytes) == FA3JIT_OK && bytes == 0,
           "the attention forward needs no workspace");
  }

  fa3jit_runtime_destroy(rt);
  fa3jit_runtime_destroy(NULL); /* allowed */

  printf("install consumer: %d passed, %d failed\n", checks - failures, failures);
  return failures == 0 ? 0 : 1;
}
