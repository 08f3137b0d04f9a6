"""The ctypes structs of fa3jit._capi have the same size and field offsets as fa3jit.h compiled by C, and
PARAMS_CALL_STRUCT (the struct-module image of the per-call fields of fa3jit_forward_params that
flash_attn_func packs on every call) lays out the same bytes as the C compiler.

A mismatch would hand the library shifted fields (a stride read as a pointer), so it is checked against the
real header with the C compiler rather than trusted."""

import ctypes
import json
import subprocess

from fa3jit import _capi

from support import ROOT, needs_cc

STRUCTS = {
    "fa3jit_tensor": _capi.Tensor,
    "fa3jit_runtime_options": _capi.RuntimeOptions,
    "fa3jit_forward_params": _capi.ForwardParams,
    "fa3jit_kernel_info": _capi.KernelInfo,
}

CONSTANTS = {
    "FA3JIT_ABI_VERSION": _capi.ABI_VERSION,
    "FA3JIT_KEY_CAPACITY": _capi.KEY_CAPACITY,
    "FA3JIT_KERNEL_NAME_CAPACITY": _capi.KERNEL_NAME_CAPACITY,
    "FA3JIT_KIND_CAPACITY": _capi.KIND_CAPACITY,
    "FA3JIT_SUMMARY_CAPACITY": _capi.SUMMARY_CAPACITY,
    "FA3JIT_DTYPE_FP16": _capi.DTYPE_FP16,
    "FA3JIT_DTYPE_BF16": _capi.DTYPE_BF16,
    "FA3JIT_DTYPE_E4M3": _capi.DTYPE_E4M3,
}

# Distinct values for every field that PARAMS_CALL_STRUCT packs, in its order (a field packed at the wrong
# offset shows up as a byte difference). 0.375 is exact in float32. struct_size and the workspace fields are
# not packed: fa3jit_forward_params_init / ForwardParams() set them, and they keep their values.
PARAMS_VALUES = (
    ("dtype", 1), ("causal", 1),
    ("batch", 3), ("seqlen_q", 5), ("seqlen_k", 7), ("num_heads", 11), ("num_heads_kv", 13), ("head_dim", 17),
    ("head_dim_v", 19),
    ("q.data", 0x7F0000001000), ("q.stride_batch", 21), ("q.stride_seq", 23), ("q.stride_head", 29),
    ("k.data", 0x7F0000002000), ("k.stride_batch", 31), ("k.stride_seq", 37), ("k.stride_head", 41),
    ("v.data", 0x7F0000003000), ("v.stride_batch", 43), ("v.stride_seq", 47), ("v.stride_head", 53),
    ("out.data", 0x7F0000004000), ("out.stride_batch", 59), ("out.stride_seq", 61), ("out.stride_head", 67),
    ("lse", 0x7F0000005000), ("softmax_scale", 0.375),
)


def _c_program():
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <fa3jit/fa3jit.h>", "int main(void) {",
             '  printf("{");']
    first = True
    for c_name, struct in STRUCTS.items():
        entries = [("sizeof", f"sizeof({c_name})")]
        entries += [(field, f"offsetof({c_name}, {field})") for field, _ in struct._fields_]
        for field, expression in entries:
            comma = "" if first else ","
            first = False
            lines.append(f'  printf("{comma}\\"{c_name}.{field}\\": %zu", (size_t)({expression}));')
    for name in CONSTANTS:
        lines.append(f'  printf(",\\"{name}\\": %d", (int)({name}));')
    # The bytes of a params struct filled field by field (padding zeroed as by fa3jit_forward_params_init).
    lines += ["  fa3jit_forward_params p;", "  fa3jit_forward_params_init(&p);"]
    for field, value in PARAMS_VALUES:
        if field.endswith(".data") or field == "lse":
            lines.append(f"  p.{field} = (void*)(uintptr_t){value:#x}ULL;")
        else:
            lines.append(f"  p.{field} = {value};")
    lines += ['  printf(",\\"params_bytes\\": \\"");',
              "  for (size_t i = 0; i < sizeof(p); ++i) printf(\"%02x\", ((const unsigned char*)&p)[i]);",
              '  printf("\\"}\\n");', "  return 0;", "}"]
    return "\n".join(lines) + "\n"


def _c_layout(tmp_path):
    source = tmp_path / "layout.c"
    source.write_text(_c_program())
    binary = tmp_path / "layout"
    subprocess.run(["cc", "-std=c99", "-Wall", "-Werror", "-I", str(ROOT / "runtime" / "include"), str(source),
                    "-o", str(binary)], check=True)
    return json.loads(subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout)


@needs_cc
def test_ctypes_structs_match_the_c_header(tmp_path):
    c_layout = _c_layout(tmp_path)
    for c_name, struct in STRUCTS.items():
        assert c_layout[f"{c_name}.sizeof"] == ctypes.sizeof(struct), c_name
        for field, _ in struct._fields_:
            assert c_layout[f"{c_name}.{field}"] == getattr(struct, field).offset, f"{c_name}.{field}"
    for name, value in CONSTANTS.items():
        assert c_layout[name] == value, name


def _packed_params():
    """A ForwardParams as flash_attn_func fills it: made once (struct_size set), then one pack_into."""
    params = _capi.ForwardParams()
    _capi.PARAMS_CALL_STRUCT.pack_into(params, _capi.PARAMS_CALL_OFFSET, *(value for _, value in PARAMS_VALUES))
    return params


@needs_cc
def test_packed_params_are_the_bytes_c_lays_out(tmp_path):
    c_bytes = bytes.fromhex(_c_layout(tmp_path)["params_bytes"])
    assert bytes(_packed_params()) == c_bytes


def test_packed_params_equal_the_ctypes_struct():
    """Without a C compiler: pack_into a ForwardParams and read every field back through ctypes."""
    params = _packed_params()
    for field, value in PARAMS_VALUES:
        holder = params
        for part in field.split("."):
            holder = getattr(holder, part)
        assert holder == value, field
    assert params.struct_size == ctypes.sizeof(_capi.ForwardParams)
    assert params.workspace is None and params.workspace_bytes == 0
    # The packed fields end where softmax_scale ends; only padding and the workspace fields follow.
    assert _capi.PARAMS_CALL_OFFSET == _capi.ForwardParams.dtype.offset
    assert (_capi.PARAMS_CALL_OFFSET + _capi.PARAMS_CALL_STRUCT.size
            == _capi.ForwardParams.softmax_scale.offset + ctypes.sizeof(ctypes.c_float))
