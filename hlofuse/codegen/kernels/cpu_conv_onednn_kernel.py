"""The oneDNN convolution kernel (custom="onednn_conv"): one call of the primitive that
cpu_conv_onednn.py describes and runtime/onednn_primitives.py creates when the program loads.

    emit_onednn_conv_kernel(skel, plan)   # fills a CPU kernel skeleton

The kernel reads its primitive's handle block through the external symbol `desc.symbol`
(resolved at load time, so cached object code stays valid), sets oneDNN's thread count,
computes per-feature epilogue operands that are expressions of the fusion's parameters,
allocates the scratchpad and the reordered weights (libc's aligned_alloc, per call),
creates a memory object over each buffer, reorders the weights where oneDNN chose their
layout, executes the primitive, and frees everything: nothing mutable is shared between calls,
so calls from several threads are safe.
"""
from __future__ import annotations

from llvmlite import ir

from ...emitters.elemental import ElementalEmitter
from ...emitters.ir_helpers import Index, for_range
from ...hlo.ir import HloInstruction
from ...runtime import onednn_primitives as dnnl
from ...runtime.jit_builtins import (
    DNNL_EXECUTE, DNNL_MEMORY_CREATE, DNNL_MEMORY_DESTROY, ONEDNN_GET_THREADS, ONEDNN_SET_THREADS,
    SCRATCH_ALLOC, SCRATCH_FREE,
)
from .blas_call import declare, trap_if
from .cpu_conv_onednn import CONSTANT, OUTPUT, onednn_convolution

I8P = ir.IntType(8).as_pointer()
I32 = ir.IntType(32)
I64 = ir.IntType(64)


def _fn(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    return declare(module, name, ir.FunctionType(ret, args))


def feature_count(bcast: HloInstruction) -> int:
    """The values a per-feature broadcast source computes (`_feature_values`): the extent of the
    dimension it broadcasts along."""
    (axis,) = tuple(bcast.attrs.get("dimensions"))
    return bcast.shape.dims[axis]


def computed_elements(sources, calls: int = 1) -> int:
    """Elements a primitive-calling kernel's own loops compute: the per-feature values of each
    broadcast source among `sources` (as emit_primitive_call takes them), once per each of
    `calls` primitive calls. The rest of its code is a fixed sequence of calls."""
    return calls * sum(feature_count(src) for src in sources if isinstance(src, HloInstruction))


def _feature_values(skel, bcast: HloInstruction, buffer) -> ir.Value:
    """A new buffer (from `buffer(bytes)`) holding the O f32 values broadcast by `bcast` along
    the output feature dimension, computed by their element generators (the epilogue's own
    arithmetic, so the post-op adds exactly what our kernels would)."""
    b = skel.builder
    dims = tuple(bcast.shape.dims)
    (axis,) = tuple(bcast.attrs.get("dimensions"))
    n = feature_count(bcast)
    p = buffer(ir.Constant(I64, 4 * n))
    out = b.bitcast(p, ir.FloatType().as_pointer())
    gen = ElementalEmitter(b, skel.target, skel.param_gen).gen(bcast)
    with for_range(b, ir.Constant(I64, 0), ir.Constant(I64, n), "feature") as o:
        multi = [ir.Constant(I64, 0)] * len(dims)
        multi[axis] = o
        b.store(gen(Index(b, dims, multi=multi)), b.gep(out, [o], inbounds=True))
    return p


def emit_onednn_conv_kernel(skel, plan) -> None:
    """Fill CPU kernel skeleton `skel` with the oneDNN convolution kernel of `plan`
    (custom="onednn_conv"): set oneDNN's threads, allocate the scratchpad (and the reordered
    weights), create a memory object over each buffer, reorder the weights where oneDNN chose
    their layout, execute the primitive, free everything and restore the thread count. A
    failing oneDNN call stops the process (llvm.trap), as a failing dnnl_sgemm does."""
    mapped = onednn_convolution(plan.comp)
    if mapped is None:
        raise ValueError(f"kernel {plan.name}: its computation is not a oneDNN convolution")
    emit_primitive_call(skel, mapped.desc, mapped.sources)


def emit_primitive_call(skel, desc: dnnl.Description, sources, unit_bytes: tuple[int, ...] | None = None) -> None:
    """Fill `skel` with one call of the primitive of `desc` (any kind of
    runtime/onednn_primitives.py): `sources` says per execution argument (`desc.arguments()`
    order) where its memory is: a parameter number, OUTPUT, CONSTANT (values in the handle
    block) or a per-feature broadcast instruction the kernel computes first. With `unit_bytes`
    (one per argument) the primitive computes one work unit's slice and the kernel calls it
    once per unit of its [begin, end), each buffer advanced by its unit_bytes per unit."""
    module, b = skel.module, skel.builder
    nslots = dnnl.block_slots(desc)
    block = module.globals.get(desc.symbol)
    if block is None:
        block = ir.GlobalVariable(module, ir.ArrayType(I8P, nslots), name=desc.symbol)
        block.linkage = "external"

    def slot(k: int) -> ir.Value:
        return b.load(b.gep(block, [ir.Constant(I32, 0), ir.Constant(I32, k)]))

    pp = I8P.as_pointer()
    arg_t = ir.LiteralStructType([I32, I8P])
    mem_create = _fn(module, DNNL_MEMORY_CREATE, I32, [pp, I8P, I8P, I8P])
    mem_destroy = _fn(module, DNNL_MEMORY_DESTROY, I32, [I8P])
    execute = _fn(module, DNNL_EXECUTE, I32, [I8P, I8P, I32, arg_t.as_pointer()])
    alloc = _fn(module, SCRATCH_ALLOC, I8P, [I64, I64])
    free = _fn(module, SCRATCH_FREE, ir.VoidType(), [I8P])
    get_threads = _fn(module, ONEDNN_GET_THREADS, I32, [])
    set_threads = _fn(module, ONEDNN_SET_THREADS, ir.VoidType(), [I32])

    with b.if_then(b.icmp_signed("<", skel.begin, skel.end)):
        engine, stream, prim = slot(dnnl.SLOT_ENGINE), slot(dnnl.SLOT_STREAM), slot(dnnl.SLOT_PRIMITIVE)
        saved = b.call(get_threads, [])
        b.call(set_threads, [b.load(b.bitcast(slot(dnnl.SLOT_THREADS), I32.as_pointer()))])

        def entry_alloca() -> ir.Value:
            with b.goto_entry_block():
                return b.alloca(I8P)

        def memory(md: ir.Value, handle: ir.Value) -> ir.Value:
            cell = entry_alloca()
            status = b.call(mem_create, [cell, md, engine, b.bitcast(handle, I8P)])
            trap_if(b, module, b.icmp_signed("!=", status, ir.Constant(I32, 0)))
            return cell

        def buffer(nbytes: ir.Value) -> ir.Value:
            # aligned_alloc wants a multiple of the alignment; at least one block
            size = b.and_(b.add(nbytes, ir.Constant(I64, 127)), ir.Constant(I64, ~63))
            p = b.call(alloc, [ir.Constant(I64, 64), size])
            trap_if(b, module, b.icmp_unsigned("==", p, ir.Constant(I8P, None)))
            return p

        def run(primitive: ir.Value, args: list[tuple[int, ir.Value]], extra: tuple[ir.Value, ir.Value] | None):
            """Execute with `args` (arg id, memory cell), plus `extra` (arg id value, cell) when
            its cell is non-null at run time (the scratchpad)."""
            n = len(args) + (extra is not None)
            with b.goto_entry_block():
                arr = b.alloca(arg_t, ir.Constant(I32, n))
            for i, (arg, cell) in enumerate(args):
                b.store(ir.Constant(I32, arg), b.gep(arr, [ir.Constant(I32, i), ir.Constant(I32, 0)]))
                b.store(b.load(cell), b.gep(arr, [ir.Constant(I32, i), ir.Constant(I32, 1)]))
            count = ir.Constant(I32, len(args))
            if extra is not None:
                i = len(args)
                b.store(ir.Constant(I32, dnnl.ARG_SCRATCHPAD), b.gep(arr, [ir.Constant(I32, i), ir.Constant(I32, 0)]))
                b.store(b.load(extra[1]), b.gep(arr, [ir.Constant(I32, i), ir.Constant(I32, 1)]))
                count = b.select(extra[0], ir.Constant(I32, n), count)
            status = b.call(execute, [primitive, stream, count, arr])
            trap_if(b, module, b.icmp_signed("!=", status, ir.Constant(I32, 0)))

        def one_call(unit: ir.Value | None) -> None:
            """One execution; with `unit`, on that unit's slice of each buffer."""
            handles, computed = {}, []
            for i, ((_, name), src) in enumerate(zip(desc.arguments(), sources)):
                if isinstance(src, HloInstruction):
                    handles[name] = _feature_values(skel, src, buffer)
                    computed.append(handles[name])
                elif src == OUTPUT:
                    handles[name] = skel.function.args[skel.n_inputs]
                elif src == CONSTANT:
                    handles[name] = slot(dnnl.constant_slot(desc, i))
                else:
                    handles[name] = skel.function.args[src]
                if unit is not None and unit_bytes[i]:
                    handles[name] = b.gep(handles[name], [b.mul(unit, ir.Constant(I64, unit_bytes[i]))])
            _execute(handles, computed)

        def _execute(handles: dict, computed: list) -> None:
            """Reorder (where oneDNN chose the weights' layout), execute and free."""
            # The weights, reordered into oneDNN's layout when it chose one.
            reorder = slot(dnnl.SLOT_REORDER)
            has_reorder = b.icmp_unsigned("!=", reorder, ir.Constant(I8P, None))
            packed_cell = entry_alloca()
            b.store(handles["weights"], packed_cell)
            with b.if_then(has_reorder):
                packed = buffer(b.ptrtoint(slot(dnnl.SLOT_PACKED_BYTES), I64))
                user = memory(slot(dnnl.SLOT_USER_WEIGHTS_MD), handles["weights"])
                blocked = memory(slot(dnnl.SLOT_PACKED_MD), packed)
                run(reorder, [(dnnl.ARG_FROM, user), (dnnl.ARG_TO, blocked)], None)
                b.call(mem_destroy, [b.load(user)])
                b.call(mem_destroy, [b.load(blocked)])
                b.store(packed, packed_cell)
            handles["weights"] = b.load(packed_cell)

            cells = []
            for i, (arg, name) in enumerate(desc.arguments()):
                cells.append((arg, memory(slot(dnnl.FIXED_SLOTS + i), handles[name])))
            scratch_bytes = b.ptrtoint(slot(dnnl.SLOT_SCRATCH_BYTES), I64)
            has_scratch = b.icmp_unsigned("!=", scratch_bytes, ir.Constant(I64, 0))
            scratch_cell, scratch_mem = entry_alloca(), entry_alloca()
            b.store(ir.Constant(I8P, None), scratch_cell)
            b.store(ir.Constant(I8P, None), scratch_mem)
            with b.if_then(has_scratch):
                p = buffer(scratch_bytes)
                b.store(p, scratch_cell)
                cell = memory(slot(dnnl.scratch_slot(desc)), p)
                b.store(b.load(cell), scratch_mem)
            run(prim, cells, (has_scratch, scratch_mem))
            for _, cell in cells:
                b.call(mem_destroy, [b.load(cell)])
            with b.if_then(has_scratch):
                b.call(mem_destroy, [b.load(scratch_mem)])
                b.call(free, [b.load(scratch_cell)])
            with b.if_then(has_reorder):
                b.call(free, [b.load(packed_cell)])
            for p in computed:
                b.call(free, [p])

        if unit_bytes is None:
            one_call(None)
        else:
            with for_range(b, skel.begin, skel.end, "unit", unroll=False) as unit:
                one_call(unit)
        b.call(set_threads, [saved])
    skel.finish()
