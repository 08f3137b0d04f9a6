"""The ctypes structs of fa3jit._capi have the same size and field offsets as fa3jit.h compiled by C, and
PARAMS_CALL_STRUCT, PARAMS_FP8_CALL_STRUCT and PARAMS_SERVING_CALL_STRUCT (the struct-module images of the
per-call fields of fa3jit_forward_params that flash_attn_func packs on every 16-bit and e4m3 call, and the
serving functions on theirs) lay out the same bytes as the C compiler.

A mismatch would hand the library shifted fields (a stride read as a pointer), so it is checked against the
real header with the C compiler rather than trusted."""

import ctypes
import json
import subprocess

from fa3jit import _capi

from support import ROOT, needs_cc

STRUCTS = {
    "fa3jit_tensor": _capi.Tensor,
    "fa3jit_scale": _capi.Scale,
    "fa3jit_runtime_options": _capi.RuntimeOptions,
    "fa3jit_forward_params": _capi.ForwardParams,
    "fa3jit_kernel_info": _capi.KernelInfo,
    "fa3jit_call_plan": _capi.CallPlan,
    "fa3jit_quantize_params": _capi.QuantizeParams,
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
    "FA3JIT_DTYPE_DEFAULT": _capi.DTYPE_DEFAULT,
    "FA3JIT_QUANT_NONE": _capi.QUANT_NONE,
    "FA3JIT_QUANT_PER_HEAD": _capi.QUANT_PER_HEAD,
    "FA3JIT_QUANT_PER_BLOCK": _capi.QUANT_PER_BLOCK,
    "FA3JIT_V_LAYOUT_SEQ_MAJOR": _capi.V_LAYOUT_SEQ_MAJOR,
    "FA3JIT_V_LAYOUT_D_MAJOR": _capi.V_LAYOUT_D_MAJOR,
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

# The same for PARAMS_FP8_CALL_STRUCT: an e4m3 call packs every field from dtype to the end (the workspace
# fields as NULL / 0).
FP8_PARAMS_VALUES = (
    (("dtype", 2),) + PARAMS_VALUES[1:] + (
        ("workspace", 0), ("workspace_bytes", 0), ("out_dtype", 0), ("quant", 2),
        ("q_descale.data", 0x7F0000006000), ("q_descale.stride_batch", 71), ("q_descale.stride_head", 73),
        ("k_descale.data", 0x7F0000007000), ("k_descale.stride_batch", 79), ("k_descale.stride_head", 83),
        ("v_descale.data", 0x7F0000008000), ("v_descale.stride_batch", 0), ("v_descale.stride_head", 89))
)

# The same for PARAMS_SERVING_CALL_STRUCT: dtype to the end of the struct (16-bit: out_dtype DEFAULT, quant NONE,
# descales NULL), with the workspace and every serving field set.
SERVING_PARAMS_VALUES = (
    PARAMS_VALUES + (
        ("workspace", 0x7F0000009000), ("workspace_bytes", 97), ("out_dtype", -1), ("quant", 0),
        ("q_descale.data", 0), ("q_descale.stride_batch", 0), ("q_descale.stride_head", 0),
        ("k_descale.data", 0), ("k_descale.stride_batch", 0), ("k_descale.stride_head", 0),
        ("v_descale.data", 0), ("v_descale.stride_batch", 0), ("v_descale.stride_head", 0),
        ("cu_seqlens_q", 0x7F000000A000), ("max_seqlen_q", 101), ("cu_seqlens_k", 0x7F000000B000),
        ("max_seqlen_k", 103), ("seqused_k", 0x7F000000C000), ("page_table", 0x7F000000D000),
        ("page_table_stride", 107), ("max_pages", 109), ("num_pages", 113), ("page_size", 64),
        ("num_splits", 3), ("pack_gqa", -1), ("window_left", 127), ("window_right", 131), ("softcap", 30.5),
        ("sinks", 0x7F000000E000))
)

INDEX_POINTERS = ("cu_seqlens_q", "cu_seqlens_k", "seqused_k", "page_table")


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
    # The bytes of params structs filled field by field (padding zeroed as by fa3jit_forward_params_init).
    for key, values in (("params_bytes", PARAMS_VALUES), ("fp8_params_bytes", FP8_PARAMS_VALUES),
                        ("serving_params_bytes", SERVING_PARAMS_VALUES)):
        lines += ["  {", "  fa3jit_forward_params p;", "  fa3jit_forward_params_init(&p);"]
        for field, value in values:
            if field.endswith(".data") or field in ("lse", "workspace", "sinks") + INDEX_POINTERS:
                cast = ("(const float*)" if "descale" in field or field == "sinks" else
                        "(const int32_t*)" if field in INDEX_POINTERS else "(void*)")
                lines.append(f"  p.{field} = {cast}(uintptr_t){value:#x}ULL;")
            elif field in ("dtype", "out_dtype"):
                lines.append(f"  p.{field} = (fa3jit_dtype){value};")
            else:
                lines.append(f"  p.{field} = {value};")
        lines += [f'  printf(",\\"{key}\\": \\"");',
                  "  for (size_t i = 0; i < sizeof(p); ++i) printf(\"%02x\", ((const unsigned char*)&p)[i]);",
                  '  printf("\\"");', "  }"]
    lines += ['  printf("}\\n");', "  return 0;", "}"]
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


def _packed_fp8_params():
    """A ForwardParams as an e4m3 call of flash_attn_func fills it."""
    params = _capi.ForwardParams()
    _capi.PARAMS_FP8_CALL_STRUCT.pack_into(params, _capi.PARAMS_CALL_OFFSET,
                                           *(value for _, value in FP8_PARAMS_VALUES))
    return params


def _packed_serving_params():
    """A ForwardParams as fa3jit.serving fills it: one pack_into with the workspace fields 0, then the workspace
    once its size is known."""
    params = _capi.ForwardParams()
    values = dict(SERVING_PARAMS_VALUES)
    values.update(workspace=0, workspace_bytes=0)
    _capi.PARAMS_SERVING_CALL_STRUCT.pack_into(params, _capi.PARAMS_CALL_OFFSET,
                                               *(values[field] for field, _ in SERVING_PARAMS_VALUES))
    _capi.WORKSPACE_STRUCT.pack_into(params, _capi.WORKSPACE_OFFSET, dict(SERVING_PARAMS_VALUES)["workspace"],
                                     dict(SERVING_PARAMS_VALUES)["workspace_bytes"])
    return params


@needs_cc
def test_packed_params_are_the_bytes_c_lays_out(tmp_path):
    layout = _c_layout(tmp_path)
    assert bytes(_packed_params()) == bytes.fromhex(layout["params_bytes"])
    assert bytes(_packed_fp8_params()) == bytes.fromhex(layout["fp8_params_bytes"])
    assert bytes(_packed_serving_params()) == bytes.fromhex(layout["serving_params_bytes"])


@needs_cc
def test_size_before_the_e4m3_fields_is_where_out_dtype_starts(tmp_path):
    """A caller of the header before the e4m3 fields passes this struct_size (fa3jit.h, "Growth")."""
    layout = _c_layout(tmp_path)
    assert _capi.FORWARD_PARAMS_SIZE_BEFORE_E4M3 == layout["fa3jit_forward_params.out_dtype"]
    assert _capi.FORWARD_PARAMS_SIZE_BEFORE_E4M3 == layout["fa3jit_forward_params.workspace_bytes"] + 8


@needs_cc
def test_size_before_the_serving_fields_is_where_cu_seqlens_q_starts(tmp_path):
    """A caller of the header before the serving fields passes this struct_size (fa3jit.h, "Growth"), one before
    the variant fields the next, one before v_layout the last; the header quotes 232, 312, 400 and 432 bytes on
    LP64."""
    layout = _c_layout(tmp_path)
    assert _capi.FORWARD_PARAMS_SIZE_BEFORE_SERVING == layout["fa3jit_forward_params.cu_seqlens_q"]
    assert _capi.FORWARD_PARAMS_SIZE_BEFORE_SERVING == layout["fa3jit_forward_params.v_descale"] + 24
    assert _capi.FORWARD_PARAMS_SIZE_BEFORE_VARIANT == layout["fa3jit_forward_params.window_left"]
    assert _capi.FORWARD_PARAMS_SIZE_BEFORE_VARIANT == layout["fa3jit_forward_params.pack_gqa"] + 4
    if ctypes.sizeof(ctypes.c_void_p) == 8:
        assert (_capi.FORWARD_PARAMS_SIZE_BEFORE_E4M3, _capi.FORWARD_PARAMS_SIZE_BEFORE_SERVING,
                _capi.FORWARD_PARAMS_SIZE_BEFORE_VARIANT) == (232, 312, 400)
    # v_layout, appended after sinks, is the last field (an older caller's struct_size ends at it: 432 on LP64).
    assert _capi.FORWARD_PARAMS_SIZE_BEFORE_V_LAYOUT == layout["fa3jit_forward_params.v_layout"]
    assert layout["fa3jit_forward_params.v_layout"] == layout["fa3jit_forward_params.sinks"] + ctypes.sizeof(
        ctypes.c_void_p)
    if ctypes.sizeof(ctypes.c_void_p) == 8:
        assert _capi.FORWARD_PARAMS_SIZE_BEFORE_V_LAYOUT == 432


def _field(params, field):
    holder = params
    for part in field.split("."):
        holder = getattr(holder, part)
    return holder


def test_packed_params_equal_the_ctypes_struct():
    """Without a C compiler: pack_into a ForwardParams and read every field back through ctypes."""
    params = _packed_params()
    for field, value in PARAMS_VALUES:
        assert _field(params, field) == value, field
    assert params.struct_size == ctypes.sizeof(_capi.ForwardParams)
    assert params.workspace is None and params.workspace_bytes == 0
    # The e4m3 and serving fields keep the defaults ForwardParams() set, as fa3jit_forward_params_init does:
    # no split and no packing, so no flash_attn_func call needs a workspace.
    assert params.out_dtype == _capi.DTYPE_DEFAULT and params.quant == _capi.QUANT_NONE
    assert params.q_descale.data is None and params.v_descale.stride_head == 0
    assert params.num_splits == 1 and params.pack_gqa == 0
    assert params.cu_seqlens_q is None and params.page_table is None and params.page_size == 0
    assert (params.window_left, params.window_right, params.softcap, params.sinks) == (-1, -1, 0.0, None)
    # The packed fields end where softmax_scale ends; only padding and the workspace fields follow.
    assert _capi.PARAMS_CALL_OFFSET == _capi.ForwardParams.dtype.offset
    assert (_capi.PARAMS_CALL_OFFSET + _capi.PARAMS_CALL_STRUCT.size
            == _capi.ForwardParams.softmax_scale.offset + ctypes.sizeof(ctypes.c_float))


def test_packed_fp8_params_equal_the_ctypes_struct():
    params = _packed_fp8_params()
    for field, value in FP8_PARAMS_VALUES:
        expected = None if value == 0 and (field.endswith(".data") or field == "workspace") else value
        assert _field(params, field) == expected, field
    assert params.struct_size == ctypes.sizeof(_capi.ForwardParams)
    assert _capi.PARAMS_CALL_OFFSET + _capi.PARAMS_FP8_CALL_STRUCT.size == _capi.ForwardParams.cu_seqlens_q.offset
    assert params.num_splits == 1 and params.pack_gqa == 0


def test_packed_serving_params_equal_the_ctypes_struct():
    params = _packed_serving_params()
    for field, value in SERVING_PARAMS_VALUES:
        expected = None if value == 0 and (field.endswith(".data") or field in INDEX_POINTERS) else value
        assert _field(params, field) == expected, field
    assert params.struct_size == ctypes.sizeof(_capi.ForwardParams)
    assert _capi.PARAMS_CALL_OFFSET + _capi.PARAMS_SERVING_CALL_STRUCT.size == _capi.ForwardParams.v_layout.offset
    assert _capi.WORKSPACE_OFFSET == _capi.ForwardParams.workspace.offset
