"""The ctypes structs of fa3jit._capi have the same size and field offsets as fa3jit.h compiled by C.

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
    lines += ['  printf(",\\"abi\\": %d, \\"key\\": %d, \\"name\\": %d}\\n", FA3JIT_ABI_VERSION, '
              'FA3JIT_KEY_CAPACITY, FA3JIT_KERNEL_NAME_CAPACITY);', "  return 0;", "}"]
    return "\n".join(lines) + "\n"


@needs_cc
def test_ctypes_structs_match_the_c_header(tmp_path):
    source = tmp_path / "layout.c"
    source.write_text(_c_program())
    binary = tmp_path / "layout"
    subprocess.run(["cc", "-std=c99", "-Wall", "-Werror", "-I", str(ROOT / "runtime" / "include"), str(source),
                    "-o", str(binary)], check=True)
    c_layout = json.loads(subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout)

    for c_name, struct in STRUCTS.items():
        assert c_layout[f"{c_name}.sizeof"] == ctypes.sizeof(struct), c_name
        for field, _ in struct._fields_:
            assert c_layout[f"{c_name}.{field}"] == getattr(struct, field).offset, f"{c_name}.{field}"
    assert c_layout["abi"] == _capi.ABI_VERSION
    assert c_layout["key"] == _capi.KEY_CAPACITY
    assert c_layout["name"] == _capi.KERNEL_NAME_CAPACITY
