"""No shipped function takes 6 or more positional parameters (issue 38): past five, a
caller cannot see which value goes where, and two of the same type swap silently (as
``ReadAhead``'s start, end, loop and read_ahead could). Such a function takes the rest
after ``*``, by keyword. ``self`` and ``cls`` are not counted; tests and benchmarks are
not shipped and not walked.

The allow-list below is explicit: each entry says why it must stay positional, and an
entry that no longer needs it fails the test, so the list only shrinks."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mocap4r2_control", "mocap4r2_drivers", "mocap4r2_tools")
MAX_POSITIONAL = 5

# "<path under the package folder>::<qualified name>": why it stays positional
ALLOWED: dict[str, str] = {
    # numba-compiled kernels (@kernel is numba.njit). Inside nopython code a call to a
    # compiled function with keyword-only parameters does not bind (numba 0.62.1: "Cannot
    # bind ... missing a required argument", checked by hand), so a kernel with `*,` could
    # no longer be called from another kernel; they keep the positional order their
    # compiled twins are tested in (test_kernel_twins.py)
    "mocap4r2_tools/tracking/kernels.py::newton_fits": "numba kernel",
    "mocap4r2_tools/tracking/kernels.py::gated_neighbours": "numba kernel",
    "mocap4r2_tools/tracking/kernels.py::judge": "numba kernel",
    "mocap4r2_tools/tracking/kernels.py::commit": "numba kernel",
}
NUMBA_DECORATOR = "kernel"


def positional_parameters(function: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool) -> list[str]:
    """The names a caller may pass by position (a method's self/cls not counted)."""
    names = [a.arg for a in function.args.posonlyargs + function.args.args]
    if in_class and names and names[0] in ("self", "cls"):
        names = names[1:]
    return names


def long_signatures(source: str) -> dict[str, tuple[int, list[str]]]:
    """qualified name -> (positional count, decorators) of each def in ``source`` with
    more than MAX_POSITIONAL positional parameters, nested defs and methods included."""
    found: dict[str, tuple[int, list[str]]] = {}

    def walk(node: ast.AST, prefix: str, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.", True)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                count = len(positional_parameters(child, in_class))
                if count > MAX_POSITIONAL:
                    decorators = [ast.unparse(d) for d in child.decorator_list]
                    found[f"{prefix}{child.name}"] = (count, decorators)
                walk(child, f"{prefix}{child.name}.", False)
            else:
                walk(child, prefix, in_class)

    walk(ast.parse(source), "", False)
    return found


def shipped_long_signatures() -> dict[str, tuple[int, list[str]]]:
    out: dict[str, tuple[int, list[str]]] = {}
    for package in PACKAGES:
        base = ROOT / package
        for path in sorted((base / package).rglob("*.py")):
            where = path.relative_to(base)
            for name, info in long_signatures(path.read_text()).items():
                out[f"{where}::{name}"] = info
    return out


def test_the_walker_counts_positional_parameters_as_a_caller_sees_them():
    source = """
def six(a, b, c, d, e, f): ...
def five_then_keywords(a, b, c, d, e, *, f, g): ...
def with_star_args(a, b, c, d, e, *rest, f): ...
def posonly(a, b, c, /, d, e, f=1): ...
class C:
    def method(self, a, b, c, d, e): ...
    def too_long(self, a, b, c, d, e, f): ...
    @classmethod
    def build(cls, a, b, c, d, e): ...
    @staticmethod
    def static(a, b, c, d, e, f): ...
def outer():
    def inner(a, b, c, d, e, f): ...
"""
    assert long_signatures(source) == {
        "six": (6, []),
        "posonly": (6, []),
        "C.too_long": (6, []),
        "C.static": (6, ["staticmethod"]),
        "outer.inner": (6, []),
    }


def test_no_shipped_function_takes_more_than_five_positional_parameters():
    found = shipped_long_signatures()
    offenders = sorted(f"{name} ({count})" for name, (count, _) in found.items() if name not in ALLOWED)
    assert not offenders, (
        f"take the parameters after the fifth by keyword (add `*,`) and name them at every call: {offenders}"
    )


def test_the_allow_list_holds_only_what_still_needs_it():
    found = shipped_long_signatures()
    stale = sorted(name for name in ALLOWED if name not in found)
    assert not stale, f"allow-listed but no longer long (remove the entry): {stale}"
    for name, reason in ALLOWED.items():
        if reason == "numba kernel":
            assert NUMBA_DECORATOR in found[name][1], f"{name}: allow-listed as a numba kernel, not one"
