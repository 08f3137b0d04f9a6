// Programmatic dependent launch (PTX ISA 9.0 §9.7.13.13 griddepcontrol; CUDA Driver API
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION): a kernel launched with that attribute may start
// while the kernel before it on the stream still runs, once every CTA of that kernel has signalled
// launch_dependents (or exited); it must call wait_for_prerequisite_grids() before it touches memory the
// earlier kernel writes or reads. Both instructions are no-ops for a kernel launched without the attribute.
#pragma once

namespace fa3jit {

/// Lets the kernel launched after this one with programmatic stream serialization be scheduled; the first
/// call in a CTA counts, later ones have no effect. Does not make this kernel's writes visible to it.
__device__ __forceinline__ void launch_dependent_grids() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/// Waits until the grids this one depends on have completed and their memory operations are visible.
__device__ __forceinline__ void wait_for_prerequisite_grids() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

}  // namespace fa3jit
