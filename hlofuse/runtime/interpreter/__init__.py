"""The numpy reference interpreter (the oracle every compiled backend is checked against).

    from hlofuse.runtime.interpreter import evaluate
    outputs = evaluate(module, [x, y])      # list of arrays, entry result flattened

Rules live in family modules (`CORE_FAMILIES`, `OP_FAMILIES`), registered per opcode on the op
registry; `Interpreter` dispatches through the registry only.
"""
from .core import (CORE_FAMILIES, OP_FAMILIES, TOKEN, Interpreter, InterpreterBug, Token, Value, evaluate,
                   flatten, is_elementwise_computation, load_families)

__all__ = ["CORE_FAMILIES", "OP_FAMILIES", "TOKEN", "Interpreter", "InterpreterBug", "Token", "Value", "evaluate",
           "flatten", "is_elementwise_computation", "load_families"]
