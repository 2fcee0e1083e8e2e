"""Errors raised for bad HLO: parse errors point at the source, verifier errors name the instruction."""
from __future__ import annotations


class HloError(Exception):
    """Base of the errors hlofuse raises for a user's input (the CLI prints them, exit 2)."""


class HloParseError(HloError):
    """A syntax error in HLO text, with its position and the source line marked by a caret."""

    def __init__(self, message: str, line: int, column: int, source_line: str, filename: str = "<string>") -> None:
        self.message = message
        self.line = line
        self.column = column
        self.source_line = source_line
        self.filename = filename
        super().__init__(self.render())

    def render(self) -> str:
        """`file:line:col: error: message`, then the source line and a caret under the column."""
        caret = " " * max(self.column - 1, 0) + "^"
        return f"{self.filename}:{self.line}:{self.column}: error: {self.message}\n{self.source_line}\n{caret}"


class VerifierError(HloError):
    """A module that is syntactically fine but ill-formed (wrong shapes, operand counts ...)."""

    def __init__(self, message: str, instruction: str | None = None, computation: str | None = None) -> None:
        self.instruction = instruction
        self.computation = computation
        where = ""
        if instruction:
            where = f"instruction {instruction}" + (f" in computation {computation}" if computation else "") + ": "
        super().__init__(where + message)


class UnsupportedError(HloError):
    """A feature hlofuse does not implement; the message names the op and the instruction."""


class InputError(HloError):
    """Bad inputs for a run (wrong count, shapes or dtypes of arrays)."""


class ResourceError(HloError):
    """A module that needs more memory than the machine has, found before allocating it."""


class OutputError(HloError):
    """An output file that cannot be written (its folder does not exist, is not writable ...)."""
