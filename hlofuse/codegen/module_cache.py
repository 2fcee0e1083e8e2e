"""Whole-module compile cache entries: what a CPU compile produced, saved so that compiling the
same module again (in this process or another) skips parsing-independent work entirely: the
passes, planning, IR emission, LLVM and the driver's emission.

A compile's result is the fused module (with its fusion log), the planner's schedule and kernel
plans, the native program, every distinct kernel's object code and the driver's object code: the
`CpuCode` of codegen/cpu.py, a graph of plain Python objects around HLO instructions. An entry
is that graph, pickled without recursion on the module's depth, under a key (`module_key`) that
holds everything the result depends on: the module's canonical text, the target and the compile
options, the target machine (triple, CPU name and features), the hlofuse version and a digest of
the whole package's source files (`package_digest`, by their path, size and modification time:
a change to any pass, emitter or runtime file is a different compiler).

How the graph is written (`dumps`) and read back (`loads`):
- HLO objects (modules, computations, instructions) of the compiled module are written as empty
  shells (pickle's NEWOBJ, no state), and their states (`vars`) afterwards, in rounds, as pairs
  (shell, state) whose references to other HLO objects are shells already written. A reference
  never makes pickle descend into an operand, so a 100,000-deep chain pickles as flat as a wide
  module (pickle recurses on nesting, and an instruction's operands nest as deep as the module);
- the user's own module (the one `compile` was given, which `origin` pointers of the fused
  module refer to) is not written: its objects are referred to by name (an instruction by its
  computation's name, its place in that computation's list and its own name: equal text means
  equal names in the same order) and resolved in the module the reader is given;
- the entry has three sections, read from one unpickler (so every reference to an object is
  the one object): (1) the payload, the states of the HLO objects running the program reads
  (the caller names them: less their attributes that name the user's module, a parameter's
  `origin`, which open the second section) and the list of the other shells; (2) the states of
  those other HLO objects; (3) the fusion logs' states (passes/fusion/decisions.py, about a third of an
  entry's objects, read only by a report). `loads` reads the first; the other shells hold
  `pending_state.PENDING_STATE` and the HLO classes' `__getattr__` reads the second on the first use of
  any of them; a module reads the third when its `fusion_log` is first asked for
  (`HloModule._fusion_log_reader`). So a hit needs no user's module to run: `loads` takes a
  function that makes it (compiler.compile_source: a source compiled before, not parsed);
- reading restores only classes of hlofuse, numpy and a few builtins (`_Reader.find_class`): an
  entry is loaded only from a directory and a file this user owns, checked against its key and
  checksum (codegen/cache.py), and restricting the classes keeps even a damaged entry from
  naming anything else.
"""
from __future__ import annotations

import contextlib
import copyreg
import gc
import hashlib
import io
import pickle
import threading
from typing import Any, Callable, Iterator

from ..gc_pause import gc_paused
from ..hlo.ir import HloComputation, HloInstruction, HloModule
from ..hlo.pending_state import PENDING_STATE, state_to_copy
from ..passes.fusion.decisions import FusionLog
from .cache import EMITTER_VERSION, hlofuse_version, source_digest

# Bumped when what an entry holds, or how it is written, changes.
FORMAT = "module-6"

_HLO = (HloModule, HloComputation, HloInstruction)
# Builtins an entry may name (pickle names classes it cannot write as literals).
_BUILTINS = frozenset({"set", "frozenset", "complex", "slice", "range", "bytearray"})
_MODULE_PREFIXES = ("hlofuse.", "numpy.")
_MODULES = frozenset({"hlofuse", "numpy", "collections"})

def package_digest() -> str:
    """SHA-256 of every module file of the hlofuse package, by its stat (cache.source_digest: 2-3
    ms, once per process): a fused module depends on the passes as much as its kernels depend
    on the emitters."""
    return source_digest()


def module_key(text: str, target: str, options: dict[str, Any], target_fingerprint: str) -> str:
    """Hex key of a compile of the module with canonical text `text` for `target` with
    `options` (those that change the result: fusion, the fusion algorithm) on the machine
    `target_fingerprint` describes, by this version of hlofuse."""
    h = hashlib.sha256()
    opts = ",".join(f"{k}={options[k]!r}" for k in sorted(options))
    for part in (FORMAT, target, opts, target_fingerprint, hlofuse_version(), EMITTER_VERSION, package_digest(),
                 text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


class NotCacheable(Exception):
    """The compile's result holds something an entry cannot hold."""


def source_key(digest: str, kind: str, target: str, options: dict[str, Any], target_fingerprint: str) -> str:
    """Hex key of a compile of the module made from a source whose SHA-256 is `digest` (`kind`
    says how it is made: "hlo" text, "stablehlo", a JAX export with its signature), with the
    rest as `module_key`'s. Made by the same hlofuse from the same source, the module is the
    same, so its module entry is too (`load_source`). A `module_key` whose text names the
    source: no module's canonical text (it starts `HloModule`) is that."""
    return module_key(f"source-1 {kind} {digest}", target, options, target_fingerprint)


def load_source(key: str, directory: str | None) -> str | None:
    """The module entry key the source entry `key` names (memory or disk cache), or None."""
    from .cache import SOURCE, CompileCache, memory_cache

    data = memory_cache.get("source:" + key)
    if data is None and directory is not None:
        data = CompileCache(directory).load(key, SOURCE)
    if data is None or len(data) != 64 or not all(c in b"0123456789abcdef" for c in data):
        return None
    memory_cache["source:" + key] = data
    return data.decode()


def store_source(key: str, module_entry_key: str, directory: str | None) -> None:
    """Record that the source of `key` compiles to the module entry `module_entry_key`."""
    from .cache import SOURCE, CompileCache, memory_cache

    data = module_entry_key.encode()
    memory_cache["source:" + key] = data
    if directory is not None:
        CompileCache(directory).store(key, data, SOURCE)


def _names(module: HloModule) -> dict[int, tuple[str, ...]]:
    """id() -> the reference by name of every object of `module` (see the module docstring)."""
    refs: dict[int, tuple[str, ...]] = {id(module): ("m",)}
    for comp in module.computations:
        refs[id(comp)] = ("c", comp.name)
        for index, inst in enumerate(comp.instructions):
            refs[id(inst)] = ("i", comp.name, index, inst.name)
    return refs


class _Writer(pickle.Pickler):
    """Writes HLO objects as shells (their states come later, see `dumps`) and the user's
    module's objects as references by name."""

    def __init__(self, file: io.BytesIO, user: HloModule) -> None:
        super().__init__(file, protocol=5)
        self.pending: list[Any] = []  # HLO objects written as shells, in order
        self.logs: list[FusionLog] = []  # fusion logs written as shells (states in the second section)
        self._user = _names(user)
        self.dispatch_table = {cls: self._shell for cls in _HLO}
        self.dispatch_table[FusionLog] = self._log_shell

    def _shell(self, obj: Any) -> tuple:
        # A reduction, not a persistent id: pickle memoizes what a reduction made, so an
        # object of the user's module referred to many times (an instruction's origin, its
        # operands' origins) is written once and resolved once when read.
        ref = self._user.get(id(obj))
        if ref is not None:
            return (_user_object, ref)
        self.pending.append(obj)
        return (copyreg.__newobj__, (type(obj),))

    def _log_shell(self, obj: FusionLog) -> tuple:
        self.logs.append(obj)
        return (copyreg.__newobj__, (FusionLog,))

    def write_runtime_states(self, objects: list[Any]) -> None:
        """Write the states of `objects` (HLO objects already written as shells: what running
        the program reads), then the list of the other shells written so far, whose states
        `write_states` writes next (a reader marks them pending, see `loads`), then the list of
        the runtime objects whose attributes naming objects of the user's module (a parameter's
        `origin`) wait for the second section too (`write_deferred`): running the program
        never reads them, so a hit need not have the user's module at hand (`loads`)."""
        wanted = {id(o) for o in objects}
        first = [o for o in self.pending if id(o) in wanted]
        states = []
        self.deferred = ([], [])
        for obj in first:
            state = _state(obj)
            user_refs = {k: v for k, v in state.items() if id(v) in self._user}
            if user_refs:
                state = {k: v for k, v in state.items() if k not in user_refs}
                self.deferred[0].append(obj)
                self.deferred[1].append(user_refs)
            states.append(state)
        self.dump((first, states))
        self.pending = [o for o in self.pending if id(o) not in wanted]
        self.dump(list(self.pending))
        self.dump(list(self.deferred[0]))

    def write_deferred(self) -> None:
        """The runtime objects' deferred attributes: the first round of the second section."""
        self.dump(self.deferred)

    def write_states(self) -> None:
        """Write the states of the HLO shells written since the last call, in rounds, and the
        section's end (None)."""
        done = 0
        while done < len(self.pending):  # each round writes the states of the last round's shells
            batch = self.pending[done:]
            done = len(self.pending)
            self.dump((batch, [_state(obj) for obj in batch]))
        self.pending.clear()
        self.dump(None)


def _state(obj: Any) -> dict:
    """The state an HLO object is written with: its dict (read first if it is still pending in
    an entry this process loaded: `state_to_copy`, as copy and pickle do), less a module's log
    reader (a module read from an entry and not yet asked for its log; the log's own shell is
    written)."""
    state = state_to_copy(obj)
    if type(obj) is HloModule and state.get("_fusion_log_reader") is not None:
        obj.fusion_log  # read it: a reader is this process's, not something an entry can hold
    return state


def _user_object(*ref: str) -> Any:
    """Stands for an object of the user's module in an entry (`_Writer._shell`); the reader
    resolves it (`_Reader.find_class` gives its own `_resolve` for this name)."""
    raise pickle.UnpicklingError("an object of the compiled module read outside an entry")


def dumps(payload: Any, user: HloModule, runtime: list[Any] = ()) -> bytes:
    """`payload` (a graph of objects around HLO objects) as entry bytes; the objects of
    `user` are referred to by name, and the states of the HLO objects of `runtime` (those
    running the program reads) come first: `loads` reads no other HLO object's state until one
    is used. Raises NotCacheable if something in it cannot be pickled."""
    f = io.BytesIO()
    w = _Writer(f, user)
    try:
        with gc_paused():
            w.dump(payload)
            w.write_runtime_states(list(runtime))
            # the rest of the payload's HLO objects: read on the first use of one of them
            w.write_deferred()
            w.write_states()
            # the second section: the fusion logs' states, then the HLO objects only they reach
            # (a duplicated producer's original that fusion removed from the module)
            w.dump((w.logs, [vars(log) for log in w.logs]))
            w.write_states()
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as e:
        raise NotCacheable(f"{type(e).__name__}: {e}") from None
    return f.getvalue()


def _is_ml_dtypes_scalar_type(name: str) -> bool:
    """Whether `ml_dtypes.<name>` is one of its scalar types (bfloat16, float8_e4m3fn, int4, ...):
    numpy pickles an array or dtype of one by naming its class; nothing else of ml_dtypes
    (functions, finfo) may be named by an entry."""
    import ml_dtypes
    import numpy as np

    obj = getattr(ml_dtypes, name, None) if not name.startswith("_") else None
    return isinstance(obj, type) and issubclass(obj, np.generic)


class _Reader(pickle.Unpickler):
    """Reads an entry: only allowed classes, the user's module's objects by name."""

    def __init__(self, file: io.BytesIO, user: HloModule | Callable[[], HloModule]) -> None:
        super().__init__(file)
        self._user = user
        self._module: HloModule | None = None
        self._comps: dict[str, HloComputation] = {}

    def _user_module(self) -> HloModule:
        """The user's module, made on the first reference to it (`loads`)."""
        if self._module is None:
            module = self._user if isinstance(self._user, HloModule) else self._user()
            self._comps = {c.name: c for c in module.computations}
            self._module = module
        return self._module

    def find_class(self, module: str, name: str) -> Any:
        if module == __name__ and name == "_user_object":
            return self._resolve
        if module in _MODULES or module.startswith(_MODULE_PREFIXES) or (module == "builtins" and name in _BUILTINS):
            return super().find_class(module, name)
        if module == "ml_dtypes" and _is_ml_dtypes_scalar_type(name):
            # the narrow float and int types (bf16, f8, s4/u4 constants and their dtypes)
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"an entry may not name {module}.{name}")

    def _resolve(self, *ref: Any) -> Any:
        """The object of the user's module that reference `ref` (see `_names`) names."""
        kind = ref[0] if ref else None
        module = self._user_module()
        if kind == "m" and len(ref) == 1:
            return module
        if kind == "c" and len(ref) == 2 and ref[1] in self._comps:
            return self._comps[ref[1]]
        if kind == "i" and len(ref) == 4 and ref[1] in self._comps:
            # by place, checked by name: a first hit resolves a few of a large module's
            # instructions, and a name index of all of them cost more than the rest of it
            insts = self._comps[ref[1]].instructions
            index = ref[2]
            if type(index) is int and 0 <= index < len(insts) and insts[index].name == ref[3]:
                return insts[index]
        raise pickle.UnpicklingError(f"the entry refers to {ref!r}, not in the module compiled")


def loads(data: bytes, user: HloModule | Callable[[], HloModule],
          on_error: Callable[[BaseException], None] | None = None) -> Any:
    """The payload `dumps` wrote, its references to the user's module resolved in `user` (a
    module with the same text as the one it was written with, or a function that makes it: it
    is called on the first reference read, which reading the runtime's states never makes,
    since the runtime objects' attributes naming the user's objects wait for the second
    section; compiler.compile_source loads a hit so without parsing the module).

    Only the states of the HLO objects `dumps` was given as the runtime's are read: every
    other HLO object of the payload stays a shell holding one key (`pending_state.PENDING_STATE`), the
    function that reads the states of all of them, which the HLO classes' `__getattr__` calls
    on the first use of any (a report, `fused_module.to_text()`, the step interpreter). Fusion
    logs are read when a module's `fusion_log` is first asked for (the module docstring). If
    reading those later parts fails, `on_error` is called with the exception (`_Rest`)."""
    r = _Reader(io.BytesIO(data), user)
    with gc_paused():  # many small objects at once: the collector's walks would dominate
        payload = r.load()
        rest = _Rest(r, on_error)
        rest.set_log_readers(_read_states(r, once=True))
        read = rest.read_states
        for obj in r.load():  # the shells whose states `rest` reads
            if type(obj) not in _HLO or obj.__dict__:
                raise pickle.UnpicklingError("malformed entry")
            obj.__dict__[PENDING_STATE] = read
        deferred = r.load()  # runtime objects whose references to the user's module come next
        for obj in deferred:
            if type(obj) not in _HLO or not obj.__dict__ or PENDING_STATE in obj.__dict__:
                raise pickle.UnpicklingError("malformed entry")
            obj.__dict__[PENDING_STATE] = read
        if isinstance(user, HloModule):
            # the module at hand: resolve them now (a few hundred names), so that an entry
            # naming an object this module lacks is refused here, as a miss
            _read_states(r, once=True)
        promote_to_oldest_generation()
    return payload


def pending(obj: Any) -> bool:
    """Whether HLO object `obj` (read from an entry) still waits for its state (see `loads`)."""
    return PENDING_STATE in obj.__dict__


def _read_states(r: _Reader, once: bool = False) -> list[HloModule]:
    """Read a section's rounds of (shells, states) up to its end (one round with `once`); the
    modules among them. A shell is empty or pending (`loads`); an attribute set on a pending
    shell before its state was read is kept."""
    modules = []
    while (batch := r.load()) is not None:
        if type(batch) is not tuple or len(batch) != 2 or len(batch[0]) != len(batch[1]):
            raise pickle.UnpicklingError("malformed entry")
        for obj, state in zip(*batch):
            if type(obj) not in _HLO or type(state) is not dict:
                raise pickle.UnpicklingError("malformed entry")
            extra = obj.__dict__
            if extra and extra.pop(PENDING_STATE, None) is None:
                raise pickle.UnpicklingError("malformed entry")  # an object given two states
            obj.__dict__ = state  # the state read is its dict
            if extra:
                state.update(extra)
            if type(obj) is HloModule:
                modules.append(obj)
        if once:
            break
    return modules


class _Rest:
    """What an entry holds after its runtime section: the states of the other HLO objects of
    the payload, then the fusion logs' states (and the HLO objects only they reach), each read
    once, on first use. Until the logs are read, the unpickler (its memo: every object read so
    far) stays alive with the pending shells and the modules' log readers.

    The entry's key and checksum were checked before its first section was read, so only a bug
    can make these sections fail; if one does, `on_error` (the entry's removal) is called and
    every later use raises the same error (an UnpicklingError: never an AttributeError, which
    `getattr` with a default would take for a missing attribute)."""

    def __init__(self, r: _Reader, on_error: Callable[[BaseException], None] | None = None) -> None:
        self._reader: _Reader | None = r
        self._states_read = False
        self._error: pickle.UnpicklingError | None = None
        self._on_error = on_error
        self._lock = threading.RLock()

    def read_states(self) -> None:
        """Read the pending HLO objects' states (the second section), once."""
        with self._lock:
            if self._states_read:
                return
            with self._failing():
                with gc_paused():
                    self.set_log_readers(_read_states(self._reader))
                    self._states_read = True
                    promote_to_oldest_generation()

    def set_log_readers(self, modules: list[HloModule]) -> None:
        """Give each of `modules` whose fusion log is a shell a reader of its state."""
        for m in modules:
            if type(m._fusion_log) is FusionLog and not m._fusion_log.__dict__:
                m._fusion_log_reader = self.log_reader(m._fusion_log)

    def log_reader(self, shell: FusionLog) -> Any:
        """A function that returns `shell` with its state read."""
        def read() -> FusionLog:
            self._read_logs()
            return shell
        return read

    def _read_logs(self) -> None:
        with self._lock:
            self.read_states()
            with self._failing(), gc_paused():
                r = self._reader
                if r is None:  # read already
                    return
                section = r.load()
                if type(section) is not tuple or len(section) != 2 or len(section[0]) != len(section[1]):
                    raise pickle.UnpicklingError("malformed entry")
                for log, state in zip(*section):
                    if type(log) is not FusionLog or type(state) is not dict or log.__dict__:
                        raise pickle.UnpicklingError("malformed entry")
                    log.__dict__.update(state)  # a frozen dataclass: its dict, not its fields
                _read_states(r)
                self._reader = None

    @contextlib.contextmanager
    def _failing(self) -> Iterator[None]:
        """Raise the first failure again; on a new one, report it and keep it."""
        if self._error is not None:
            raise self._error
        try:
            yield
        except Exception as e:  # noqa: BLE001 - any failure of a section is the entry's
            self._error = pickle.UnpicklingError(f"a module cache entry's later section could not be read "
                                                 f"({type(e).__name__}: {e})")
            self._reader = None
            if self._on_error is not None:
                self._on_error(e)
            raise self._error from e


def promote_to_oldest_generation() -> None:
    """Move every object the cyclic collector tracks into its oldest generation, without a
    collection, and reset the youngest generation's count.

    An entry is tens of thousands of containers (haiku's ResNet-18 training step: about 93,000,
    of them 11,000 instructions with their operand, user and control lists and attribute
    dicts), all of them the compiled program, alive as long as it is. Left in the youngest
    generation, the first allocation after the collector is re-enabled starts a collection that
    walks all of them (15-65 ms of a 90-160 ms hit measured, load 5-9; tests/codegen/
    test_module_cache.py counts the collections) and finds nothing to free; the collector would
    promote them after two such walks anyway. `gc.freeze()` moves every tracked object into the
    permanent generation and zeroes the generations' counts, `gc.unfreeze()` moves them back
    into the oldest one: two list splices. The cost is that young garbage cycles other code of
    the process left at that moment wait for the next full collection instead of the next
    young one; objects the collector had frozen before are unfrozen too, so this is skipped
    when any are (`gc.get_freeze_count()`), leaving such a process's collections as they were."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


def load_entry(key: str, user: HloModule | Callable[[], HloModule], directory: str | None) -> Any:
    """The payload stored under `key` in this process's memory cache or in the disk cache in
    `directory` (None: memory only), read against `user`; None when there is none, or when the
    entry cannot be read (it is then dropped, and the caller compiles afresh)."""
    from .cache import MODULE, CompileCache, _warn, memory_cache

    mkey = "module:" + key
    data = memory_cache.get(mkey)
    disk = CompileCache(directory) if directory is not None else None
    if data is None and disk is not None:
        data = disk.load(key, MODULE)
    if data is None:
        return None
    def drop() -> None:
        memory_cache.drop(mkey)
        if disk is not None:
            disk.remove(key, MODULE)

    def later_error(e: BaseException) -> None:  # a part read on first use (`loads`) failed
        _warn(f"compile cache: module entry {key[:16]} could not be read ({type(e).__name__}: {e}); removed")
        drop()

    try:
        payload = loads(data, user, later_error)
    except Exception as e:  # a damaged entry is a cache miss, never an error of the compile
        _warn(f"compile cache: module entry {key[:16]} could not be read ({type(e).__name__}: {e}); recompiling")
        drop()
        return None
    memory_cache[mkey] = data
    return payload


def store_entry(key: str, payload: Any, user: HloModule, directory: str | None, runtime: list[Any] = ()) -> bool:
    """Write `payload` under `key` in the memory cache and in the disk cache in `directory`
    (None: memory only), the states of the HLO objects of `runtime` first (see `dumps`); False
    when it cannot be pickled (nothing is stored then)."""
    from .cache import MODULE, CompileCache, _warn, memory_cache

    try:
        data = dumps(payload, user, runtime)
    except NotCacheable as e:
        _warn(f"compile cache: a module's compile could not be saved ({e})")
        return False
    memory_cache["module:" + key] = data
    if directory is not None:
        disk = CompileCache(directory)
        disk.store(key, data, MODULE)
        disk.evict()
    return True
