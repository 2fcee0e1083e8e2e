"""The numpy reference interpreter (the oracle every compiled backend is checked against).

    from hlofuse.runtime.interpreter import evaluate
    outputs = evaluate(module, [x, y])      # list of arrays, entry result flattened

Rules live in family modules (listed by `hlo.rule_loader.RULE_MODULES["reference"]`), registered
per opcode on the op registry; `Interpreter` loads them and dispatches through the registry only.
"""
from .core import (TOKEN, Interpreter, InterpreterBug, Token, Value, evaluate,
                   flatten, is_elementwise_computation)

__all__ = ["TOKEN", "Interpreter", "InterpreterBug", "Token", "Value", "evaluate",
           "flatten", "is_elementwise_computation"]
