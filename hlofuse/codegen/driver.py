"""The native driver: one LLVM function per executed computation, running its schedule.

    text = emit_driver(native_program, target)     # LLVM IR text of the driver module

Every computation of a NativeProgram (codegen/native_plan.py) becomes

    i32 hlofuse_plan_<n>(i8** table, i8** params, i8** results)

which runs its steps in order and returns 0, or the nonzero status of a failed callback (the
runtime then raises the error the callback kept). Kernels are called through their addresses in
the table with the CPU kernel ABI (codegen/kernels/cpu_skeleton.py); a kernel worth splitting
runs on the threads of libgomp (`GOMP_parallel`, a kept OpenMP runtime; as many as its estimated
one-thread time pays the region's wake-up for, codegen/region_cost.py): its work units are cut
into a fixed number of contiguous chunks per thread, which the threads take from a shared
counter (XLA:CPU's parallel task assignment, run by a pool that takes tasks as threads come free). A while loop calls its condition and body functions in a native loop, the body
updating the loop state in place; a conditional switches to its branch's function; a library op
with no native code calls back into Python (`table[CALLBACK]`).

The table's first slots are fixed (`CONFIG`: an i64 array [threads, long-kernel threads]: the
threads of this call, the idle cores of the moment, and those of a kernel that outlasts a busy
machine's wait for a core, region_cost.keeps_threads_when_busy; `CALLBACK`; `PROFILE`: null,
or an i64 array of [cycles, calls] per step id when profiling); the NativeProgram's entries
follow from `RESERVED`. The driver holds no address: the same program always gives the same
text, so its object code is cached like a kernel's.
"""
from __future__ import annotations

from llvmlite import ir

from ..emitters.llvm_text import module_text
from .llvm_pool import UNOPTIMIZED, compile_timed
from .native_plan import Copy, Loc, NativePlan, NativeProgram, NativeStep, leaves
from .region_cost import keeps_threads_when_busy, region_threads
from .schedule import symbol_name

CONFIG, CALLBACK, PROFILE = 0, 1, 2
RESERVED = 3
# A parallel kernel's units are cut into this many chunks per thread; threads take chunks from a
# shared counter (a work unit is still computed whole by one thread, so results do not depend on
# which thread takes it).
CHUNKS_PER_THREAD = 4

# The driver's LLVM level: unoptimized (fast instruction selection). It is a sequence of kernel
# calls, loops of while/conditional steps and copies, whose run time is the kernels'; at O2 LLVM
# spent 1.33 s of CPU on haiku's ResNet-18 training step's (17,000 instructions; 12% of its cold
# compile), unoptimized 0.09 s. Run time measured against O2 in docs/compile_time.md.
DRIVER_LEVEL = UNOPTIMIZED

I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
I8P = I8.as_pointer()
I8PP = I8P.as_pointer()
PLAN_TYPE = ir.FunctionType(I32, [I8PP, I8PP, I8PP])
CALLBACK_TYPE = ir.FunctionType(I32, [I64, I8PP])


def plan_symbol(plan: NativePlan) -> str:
    """The driver function of `plan`."""
    return f"hlofuse_plan_{plan.index}"


def kernel_type(pointers: int) -> ir.FunctionType:
    """The CPU kernel ABI with `pointers` buffer arguments."""
    return ir.FunctionType(ir.VoidType(), [I8P] * pointers + [I64, I64])


class _Module:
    """The driver module and the declarations its functions share."""

    def __init__(self, prog: NativeProgram, target) -> None:
        self.prog = prog
        self.module = ir.Module(name="hlofuse_driver")
        self.module.triple = target.triple
        self.module.data_layout = target.data_layout
        m = self.module
        self.memcpy = m.declare_intrinsic("llvm.memcpy", [I8P, I8P, I64])
        self.cycles = ir.Function(m, ir.FunctionType(I64, []), "llvm.readcyclecounter")
        self.gomp_parallel = ir.Function(m, ir.FunctionType(ir.VoidType(), [
            ir.FunctionType(ir.VoidType(), [I8P]).as_pointer(), I8P, I32, I32]), "GOMP_parallel")
        self.thread_num = ir.Function(m, ir.FunctionType(I32, []), "omp_get_thread_num")
        self.num_threads = ir.Function(m, ir.FunctionType(I32, []), "omp_get_num_threads")
        self.functions = {p.index: ir.Function(m, PLAN_TYPE, plan_symbol(p)) for p in prog.plans}
        self._trampolines: dict[int, ir.Function] = {}
        # The data a parallel launch hands every thread: kernel, its arguments, its units, the
        # next unit to take (shared, atomic) and the units taken at a time.
        self.launch_type = ir.LiteralStructType([I8P, I8PP, I64, I64, I64])
        self._launchers: dict[int, ir.Function] = {}
        self._timer: ir.Function | None = None

    def launcher(self, pointers: int) -> ir.Function:
        """`void launch(i8* kernel, i64 units, i64 n, i8* p0, ...)`: run a kernel with `pointers`
        buffers over its units on `n` threads (directly when `n` <= 1). One per pointer count,
        called by every launch that may open a region: written inline, each such launch was
        about 35 instructions of the driver's IR (GPT-2: 46 launches, 45% of its text); a call
        costs nanoseconds against the 80 us a kernel needs before it may be split."""
        fn = self._launchers.get(pointers)
        if fn is not None:
            return fn
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [I8P, I64, I64] + [I8P] * pointers),
                         f"hlofuse_launch_{pointers}")
        fn.linkage = "internal"
        fnptr, units, n, *ptrs = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        args = b.alloca(I8P, size=max(pointers, 1))
        data = b.alloca(self.launch_type)
        kernel = b.bitcast(fnptr, kernel_type(pointers).as_pointer())
        with b.if_else(b.icmp_signed("<=", n, I64(1))) as (serial, parallel):
            with serial:
                b.call(kernel, ptrs + [I64(0), units])
            with parallel:
                for k, v in enumerate(ptrs):
                    b.store(v, b.gep(args, [I64(k)]))
                b.store(fnptr, b.gep(data, [I32(0), I32(0)]))
                b.store(args, b.gep(data, [I32(0), I32(1)]))
                b.store(units, b.gep(data, [I32(0), I32(2)]))
                b.store(I64(0), b.gep(data, [I32(0), I32(3)]))
                # CHUNKS_PER_THREAD chunks per thread, fixed by the unit count and thread count
                per = b.mul(n, I64(CHUNKS_PER_THREAD))
                b.store(b.sdiv(b.add(units, b.sub(per, I64(1))), per), b.gep(data, [I32(0), I32(4)]))
                b.call(self.gomp_parallel, [self.trampoline(pointers), b.bitcast(data, I8P), b.trunc(n, I32), I32(0)])
        b.ret_void()
        self._launchers[pointers] = fn
        return fn

    def timer(self) -> ir.Function:
        """`void time(i64* profile, i64 slot, i64 start)`: add the cycles since `start` to
        `profile[slot]` and one call to `profile[slot + 1]`. Called only when profiling; inline,
        the same was 11 instructions and a block per step."""
        if self._timer is not None:
            return self._timer
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [I64.as_pointer(), I64, I64]), "hlofuse_step_time")
        fn.linkage = "internal"
        profile, slot, start = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        spent = b.sub(b.call(self.cycles, []), start)
        cycles = b.gep(profile, [slot])
        b.store(b.add(b.load(cycles), spent), cycles)
        count = b.gep(profile, [b.add(slot, I64(1))])
        b.store(b.add(b.load(count), I64(1)), count)
        b.ret_void()
        self._timer = fn
        return fn

    def trampoline(self, pointers: int) -> ir.Function:
        """`void tramp(i8* data)`: run chunks of a kernel with `pointers` buffers until none is
        left. Each thread takes the next chunk from the shared counter, so a thread the OS runs
        late (a busy machine) leaves its chunks to the others instead of making them wait."""
        fn = self._trampolines.get(pointers)
        if fn is not None:
            return fn
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [I8P]), f"hlofuse_share_{pointers}")
        fn.linkage = "internal"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        data = b.bitcast(fn.args[0], self.launch_type.as_pointer())
        kernel = b.bitcast(b.load(b.gep(data, [I32(0), I32(0)])), kernel_type(pointers).as_pointer())
        args = b.load(b.gep(data, [I32(0), I32(1)]))
        units = b.load(b.gep(data, [I32(0), I32(2)]))
        counter = b.gep(data, [I32(0), I32(3)])
        chunk = b.load(b.gep(data, [I32(0), I32(4)]))
        ptrs = [b.load(b.gep(args, [I64(k)])) for k in range(pointers)]
        loop = fn.append_basic_block("take")
        work = fn.append_basic_block("work")
        done = fn.append_basic_block("done")
        b.branch(loop)
        b.position_at_end(loop)
        begin = b.atomic_rmw("add", counter, chunk, "monotonic")
        b.cbranch(b.icmp_signed("<", begin, units), work, done)
        b.position_at_end(work)
        end = b.add(begin, chunk)
        end = b.select(b.icmp_signed("<", end, units), end, units)
        b.call(kernel, ptrs + [begin, end])
        b.branch(loop)
        b.position_at_end(done)
        b.ret_void()
        self._trampolines[pointers] = fn
        return fn


class _Function:
    """The driver function of one NativePlan."""

    def __init__(self, mod: _Module, plan: NativePlan) -> None:
        self.mod = mod
        self.plan = plan
        self.fn = mod.functions[plan.index]
        self.table, self.params, self.results = self.fn.args
        self.entry = self.fn.append_basic_block("entry")
        self.b = ir.IRBuilder(self.entry)
        self.fail = None  # the block returning a callee's or callback's nonzero status
        b = self.b
        self.arena = b.load(b.gep(self.table, [I64(RESERVED + plan.arena_slot)])) if plan.arena_bytes else None
        self.profile = b.bitcast(b.load(b.gep(self.table, [I64(PROFILE)])), I64.as_pointer())
        self.profiling = b.icmp_unsigned("!=", b.ptrtoint(self.profile, I64), I64(0))
        config = b.bitcast(b.load(b.gep(self.table, [I64(CONFIG)])), I64.as_pointer())
        self.threads = b.load(config)
        self.long_threads = b.load(b.gep(config, [I64(1)]))

    # ---- helpers -----------------------------------------------------------------------------
    def alloca(self, ty: ir.Type, count: int = 1, name: str = "") -> ir.Value:
        """Stack memory allocated once in the entry block (not per loop iteration)."""
        with self.b.goto_block(self.entry):
            if self.entry.instructions:
                self.b.position_before(self.entry.instructions[0])
            return self.b.alloca(ty, size=count, name=name)

    def ptr(self, loc: Loc) -> ir.Value:
        """An i8* to `loc`'s memory."""
        b = self.b
        if loc.kind == "param":
            return b.load(b.gep(self.params, [I64(loc.index)]))
        if loc.kind == "result":
            return b.load(b.gep(self.results, [I64(loc.index)]))
        if loc.kind == "arena":
            return b.gep(self.arena, [I64(loc.index)])
        if loc.kind == "table":
            return b.load(b.gep(self.table, [I64(RESERVED + loc.index)]))
        return ir.Constant(I8P, None)

    def pointer_array(self, values: list[ir.Value]) -> ir.Value:
        """An i8** to a stack array holding `values`."""
        arr = self.alloca(I8P, max(len(values), 1))
        for k, v in enumerate(values):
            self.b.store(v, self.b.gep(arr, [I64(k)]))
        return arr

    def check(self, status: ir.Value) -> None:
        """Return `status` from this function unless it is 0."""
        b = self.b
        if self.fail is None:
            self.fail = self.fn.append_basic_block("fail")
            self.fail_phi = None
        ok = self.fn.append_basic_block("ok")
        here = b.block
        b.cbranch(b.icmp_signed("!=", status, I32(0)), self.fail, ok)
        self._fail_edges.append((status, here))
        b.position_at_end(ok)

    def when(self, cond: ir.Value, name: str) -> None:
        """Continue in a block entered only when `cond` holds; `otherwise` then joins it.
        Blocks named here are short (`name`, `name.join`, numbered by LLVM's name scope):
        llvmlite's `if_then` names a block after the one before it, and in one function of
        straight-line steps the names grew to 50 characters each, three per step."""
        then = self.fn.append_basic_block(name)
        self._join = self.fn.append_basic_block(name + ".join")
        self.b.cbranch(cond, then, self._join)
        self.b.position_at_end(then)

    def otherwise(self) -> None:
        """End the block `when` opened and continue where its condition's two paths meet."""
        self.b.branch(self._join)
        self.b.position_at_end(self._join)

    def copy(self, c: Copy) -> None:
        """memcpy `c` unless source and destination are one buffer at run time."""
        b = self.b
        src, dst = self.ptr(c.src), self.ptr(c.dst)
        if c.src == c.dst or c.nbytes == 0:
            return
        same = b.icmp_unsigned("==", b.ptrtoint(src, I64), b.ptrtoint(dst, I64))
        self.when(b.not_(same), "copy")
        b.call(self.mod.memcpy, [dst, src, I64(c.nbytes), ir.Constant(ir.IntType(1), 0)])
        self.otherwise()

    # ---- steps -------------------------------------------------------------------------------
    def emit(self) -> None:
        """Emit the whole function."""
        self._fail_edges: list = []
        for ns in self.plan.steps:
            if ns.kind == "none" or _idle(ns):
                continue
            self.step(ns)
        for c in self.plan.staged + self.plan.final:
            self.copy(c)
        self.b.ret(I32(0))
        if self.fail is not None:
            self.b.position_at_end(self.fail)
            phi = self.b.phi(I32)
            for status, block in self._fail_edges:
                phi.add_incoming(status, block)
            self.b.ret(phi)

    def step(self, ns: NativeStep) -> None:
        """Emit step `ns`, timed when the table has a profile buffer."""
        b = self.b
        for c in ns.pre_copies:
            self.copy(c)
        start = b.call(self.mod.cycles, [])  # ~20 cycles; used only when profiling
        getattr(self, "_" + ns.kind)(ns)
        self.when(self.profiling, "time")
        b.call(self.mod.timer(), [self.profile, I64(2 * ns.id), start])
        self.otherwise()

    def _kernel(self, ns: NativeStep) -> None:
        prog = self.mod.prog
        step = ns.step
        planner = prog.planner
        shared_in = [self.ptr(Loc("table", prog.shared_slot(s)))
                     for s in getattr(planner, "shared_inputs", {}).get(step.inst, ())]
        shared_out = [self.ptr(Loc("table", prog.shared_slot(s)))
                      for s in getattr(planner, "shared_outputs", {}).get(step.inst, ())]
        ins = [self.ptr(loc) for loc in ns.ins] + shared_in
        outs = [self.ptr(loc) for loc in ns.outs] + shared_out
        temps = [self.ptr(Loc("table", t)) for t in ns.temps]
        base = {"in": 0, "out": len(ins)}
        every = ins + outs
        for k in step.kernels:
            ptrs = [every[base[kind] + n] if kind != "tmp" else temps[n] for kind, n in k.inputs + k.results + k.scratch]
            self.launch(k, ptrs)

    def launch(self, kernel, ptrs: list[ir.Value]) -> None:
        """Call `kernel` over all its units, on several threads when it is large enough."""
        b = self.b
        units = int(kernel.units)
        if units <= 0:
            return
        fnptr = b.load(b.gep(self.table, [I64(RESERVED + self.mod.prog.kernel_slot(kernel.name))]))
        cap = region_threads(kernel)  # each thread's share pays a region's wake-up (region_cost.py)
        if cap == 1:
            b.call(b.bitcast(fnptr, kernel_type(len(ptrs)).as_pointer()), ptrs + [I64(0), I64(units)])
            return
        threads = self.long_threads if keeps_threads_when_busy(kernel) else self.threads
        n = b.select(b.icmp_signed("<", threads, I64(cap)), threads, I64(cap))
        b.call(self.mod.launcher(len(ptrs)), [fnptr, I64(units), n] + ptrs)

    def _callback(self, ns: NativeStep) -> None:
        b = self.b
        ptrs = self.pointer_array([self.ptr(loc) for loc in ns.ins + ns.outs])
        fn = b.bitcast(b.load(b.gep(self.table, [I64(CALLBACK)])), CALLBACK_TYPE.as_pointer())
        self.check(b.call(fn, [I64(ns.id), ptrs]))

    def call_plan(self, plan: NativePlan, params: list[ir.Value], results: list[ir.Value]) -> None:
        """Call `plan`'s function on `params` writing `results`; propagate a failure."""
        fn = self.mod.functions[plan.index]
        status = self.b.call(fn, [self.table, self.pointer_array(params), self.pointer_array(results)])
        self.check(status)

    def _call(self, ns: NativeStep) -> None:
        self.call_plan(ns.callees[0], [self.ptr(loc) for loc in ns.ins], [self.ptr(loc) for loc in ns.outs])

    def _while(self, ns: NativeStep) -> None:
        b = self.b
        cond, body = ns.callees
        state = [self.ptr(loc) for loc in ns.outs]
        pred = self.alloca(I8)
        head = self.fn.append_basic_block("while.cond")
        loop = self.fn.append_basic_block("while.body")
        done = self.fn.append_basic_block("while.done")
        b.branch(head)
        b.position_at_end(head)
        self.call_plan(cond, state, [pred])
        b.cbranch(b.icmp_unsigned("!=", b.load(pred), I8(0)), loop, done)
        b.position_at_end(loop)
        self.call_plan(body, state, state)
        b.branch(head)
        b.position_at_end(done)

    def _conditional(self, ns: NativeStep) -> None:
        b = self.b
        inst = ns.step.inst
        sizes = [len(leaves(op.shape)) for op in inst.operands]
        starts = [sum(sizes[:k]) for k in range(len(sizes))]
        selector = self.ptr(ns.ins[0])
        n = len(ns.callees)
        if inst.operands[0].shape.dtype.name == "pred":
            flag = b.load(selector)
            index = b.select(b.icmp_unsigned("!=", flag, I8(0)), I32(0), I32(1))
        else:
            raw = b.load(b.bitcast(selector, I32.as_pointer()))
            out_of_range = b.or_(b.icmp_signed("<", raw, I32(0)), b.icmp_signed(">=", raw, I32(n)))
            index = b.select(out_of_range, I32(n - 1), raw)
        after = self.fn.append_basic_block("cond.done")
        switch = b.switch(index, after)
        outs = ns.outs
        for k, plan in enumerate(ns.callees):
            block = self.fn.append_basic_block(f"cond.branch{k}")
            switch.add_case(I32(k), block)
            b.position_at_end(block)
            lo = starts[1 + k]
            self.call_plan(plan, [self.ptr(loc) for loc in ns.ins[lo:lo + sizes[1 + k]]],
                           [self.ptr(loc) for loc in outs])
            b.branch(after)
        b.position_at_end(after)


def _idle(ns: NativeStep) -> bool:
    """Whether kernel step `ns` runs nothing: no copy before it and no kernel with work (a
    fusion whose outputs a sibling's kernel writes, as GPT-2's 26 of 73 kernel steps). It gets
    no code, so no timer either: a profile shows no call of it."""
    return ns.kind == "kernel" and not ns.pre_copies and not any(int(k.units) > 0 for k in ns.step.kernels)


def emit_driver(prog: NativeProgram, target) -> str:
    """The LLVM IR text of `prog`'s driver module (`module_text`: llvmlite's text, written in
    about 60% of its time)."""
    mod = _Module(prog, target)
    for plan in prog.plans:
        _Function(mod, plan).emit()
    return module_text(mod.module)


def driver_name(prog: NativeProgram) -> str:
    """A readable name for the driver's entry function (its module's entry computation)."""
    return symbol_name(prog.entry.comp.name)


def compile_driver(prog: NativeProgram, target, cache: bool, disk,
                   compile_ir=None) -> tuple[bytes, bool, float, float]:
    """The object code of `prog`'s driver: from the memory cache or the disk cache (`disk`, a
    CompileCache or None) when `cache`, else compiled unoptimized (llvm_pool.UNOPTIMIZED: it
    only calls, loops and copies, see DRIVER_LEVEL) by `compile_ir(text, level)`
    (llvm_pool.compile_timed's object, or the same on another LLVM lane:
    codegen/llvm_pool.Lanes.compile_here). Returns (object code, whether it came from a cache,
    wall seconds from start to object, CPU seconds of the calling thread). The two differ when
    the driver runs beside the kernels (codegen/cpu.py): the wall span then includes waiting
    for the GIL and for a lane's slot, the thread's CPU only its own work (its IR built and
    printed, and its LLVM work, compiled on this thread)."""
    import time

    from .cache import cache_key, memory_cache

    compile_ir = compile_ir or (lambda text, level: compile_timed(text, level)[0])
    start, cpu = time.perf_counter(), time.thread_time()
    text = emit_driver(prog, target)
    key = cache_key(f"driver O{DRIVER_LEVEL}\n" + text, target.fingerprint())
    obj = memory_cache.get(key) if cache else None
    if obj is None and disk is not None:
        obj = disk.load(key)
    if obj is not None:
        return obj, True, time.perf_counter() - start, time.thread_time() - cpu
    obj = compile_ir(text, DRIVER_LEVEL)
    if cache:
        memory_cache[key] = obj
        if disk is not None:
            disk.store(key, obj)
    return obj, False, time.perf_counter() - start, time.thread_time() - cpu
